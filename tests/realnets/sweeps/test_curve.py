"""The measured curve: the first step any trial reached, the best trial's metaparameters and
edges, and B_crit over resampled trials."""

import pytest

from realnets.sweeps.curve import b_crit_resampled, best_row, best_trial, build_curve
from realnets.sweeps.records import SweepConfig, TrialRecord
from realnets.workloads.search_space import TrialSearchSpace


def _config(**kw) -> SweepConfig:
    return SweepConfig(**{"workload": "nqm", "batch_sizes": (8, 16), "trials": 4,
                          "max_steps": 1000, "goal": 0.1, "optimizer": "momentum",
                          "search": TrialSearchSpace((1e-3, 10.0), (1e-2, 1.0)), **kw})


def _record(batch_size, trial_id, steps, learning_rate=0.1, momentum=None, status=None, **kw):
    status = status or ("COMPLETE" if steps is not None else "INCOMPLETE")
    return TrialRecord(batch_size=batch_size, trial_id=trial_id, status=status,
                       learning_rate=learning_rate, momentum=momentum, steps_to_goal=steps, **kw)


def test_curve_takes_the_first_step_any_trial_reached():
    records = [_record(8, 0, 120, 0.1, 0.9), _record(8, 1, 90, 0.3, 0.5),
               _record(8, 2, None, 9.0, 0.99, status="INFEASIBLE"),
               _record(16, 0, None, 0.1, 0.9)]
    curve = build_curve(records, _config())
    first, second = curve.points
    assert (first.steps, first.learning_rate, first.momentum) == (90, 0.3, 0.5)
    assert [t["status"] for t in first.trials] == ["COMPLETE", "COMPLETE", "INFEASIBLE"]
    assert second.steps is None and second.learning_rate is None
    assert first.edge == ()
    assert curve.config == _config().to_dict()


def test_best_trial_on_the_edge_of_the_search_is_flagged():
    records = [_record(8, 0, 10, learning_rate=9.0, momentum=0.995)]
    assert build_curve(records, _config()).points[0].edge == ("learning_rate", "momentum")
    # plain SGD has no momentum to be on an edge
    sgd = [_record(8, 0, 10, learning_rate=9.0)]
    assert build_curve(sgd, _config(optimizer="sgd")).points[0].edge == ("learning_rate",)
    # a searched decay: its final fraction and its length are checked too, and only then
    decay = TrialSearchSpace((1e-3, 10.0), (1e-2, 1.0), final_lr_fraction=(0.01, 1.0),
                             decay_steps=(10, 1000))
    mid = dict(learning_rate=0.1, momentum=0.9)
    for kw, want in ((dict(final_lr_fraction=0.011, decay_steps=100), ("final_lr_fraction",)),
                     (dict(final_lr_fraction=0.1, decay_steps=950), ("decay_steps",)),
                     (dict(final_lr_fraction=0.1, decay_steps=100), ())):
        records = [_record(8, 0, 10, **mid, **kw)]
        assert build_curve(records, _config(search=decay)).points[0].edge == want
    # a constant-rate sweep never names them, whatever the record holds
    records = [_record(8, 0, 10, **mid, final_lr_fraction=0.011)]
    assert build_curve(records, _config()).points[0].edge == ()


def test_best_trial_is_the_fewest_steps_then_the_lowest_trial_id():
    records = [_record(8, 3, 50), _record(8, 1, None), _record(8, 2, 50), _record(8, 0, 60)]
    assert best_trial(records).trial_id == 2          # tie at 50 steps: the lower id
    assert best_trial(records[1:2]) is None           # none reached the goal
    assert best_trial([]) is None
    rows = [{"trial_id": r.trial_id, "steps_to_goal": r.steps_to_goal} for r in records]
    assert best_row(rows)["trial_id"] == 2
    # batch_science ids are strings, in numeric order: "2" before "10"
    assert best_row([{"trial_id": "10", "steps_to_goal": 7},
                     {"trial_id": "2", "steps_to_goal": 7}])["trial_id"] == "2"


def test_curve_point_keeps_the_last_noise_estimates_of_each_trial():
    from realnets.sweeps.records import NoiseSeries

    noise = NoiseSeries(step=(1, 2, 3), grad_sq_ema=(4.0, 2.0, 1.0),
                        trace_cov_ema=(8.0, 6.0, 5.0), b_simple=(2.0, 3.0, None))
    (point,) = build_curve([_record(8, 0, 3, noise_scale=noise)], _config()).points
    (row,) = point.trials
    # b_simple: the last estimate there is (the moving averages were not positive at step 3)
    assert (row["b_simple"], row["grad_sq_ema"], row["trace_cov_ema"]) == (3.0, 1.0, 5.0)


def _mccandlish_records(other_steps, s_min=100.0, b_crit=64.0, trials=4):
    """Records whose best trial per batch size sits exactly on S = s_min (1 + b_crit / B); the
    other trials took `other_steps(best)` steps (None: not reached)."""
    records = []
    for b in (8, 16, 32, 64, 128, 256, 512):
        best = round(s_min * (1 + b_crit / b))
        for i in range(trials):
            steps = best if i == 0 else other_steps(best)
            records.append(_record(b, i, steps, steps_run=steps or 1000))
    return records


def _full(full_trials=True):
    return _config(batch_sizes=(8, 16, 32, 64, 128, 256, 512), full_trials=full_trials)


def test_b_crit_resampling_needs_uncensored_trials():
    records = _mccandlish_records(lambda best: best)
    censored = b_crit_resampled(build_curve(records, _full(False)))
    assert censored["available"] is False and "--full-trials" in censored["note"]


def test_b_crit_resampling_of_identical_trials_is_the_fit_itself():
    # Every trial of a batch size took the same steps: every resample is the same curve.
    curve = build_curve(_mccandlish_records(lambda best: best), _full())
    r = b_crit_resampled(curve, resamples=50)
    assert r["available"] and r["fitted"] == 50
    assert r["p16"] == pytest.approx(r["p84"], rel=1e-9)
    assert r["median"] == pytest.approx(64.0, rel=0.02)        # the curve's own B_crit (rounded)


def test_b_crit_resampling_spreads_when_the_best_trial_is_missed():
    # The other trials are 1.5x slower at small batch sizes only: a resample that misses the
    # best trial there (probability (3/4)^4 = 0.32 per batch size) steepens the curve's left
    # end, so B_crit rises; with the best trial everywhere it is the curve's own 64.
    slow = _mccandlish_records(lambda best: round(1.5 * best) if best > 200 else best)
    curve = build_curve(slow, _full())
    r = b_crit_resampled(curve, resamples=200, seed=1)
    assert r["fitted"] == 200
    assert r["p16"] == pytest.approx(64.0, rel=0.05) and r["p84"] > 1.2 * 64.0
    assert b_crit_resampled(curve, resamples=200, seed=1) == r       # seeded: reproducible
    # unreached other trials: resamples that miss every winner leave points unreached, not errors
    gaps = build_curve(_mccandlish_records(lambda best: None), _full())
    r = b_crit_resampled(gaps, resamples=100)
    assert r["available"] and 0 < r["fitted"] <= 100


def test_report_states_the_bound_only_for_a_curve_without_a_bend():
    """A measured curve that halves its steps up to its largest batch size only bounds B_crit
    (>= 5 x 64 - 6 x 8 = 272); one that flattens does not get the line."""
    from realnets.sweeps.curve import curve_document
    from realnets.sweeps.report import format_table

    config = _config(batch_sizes=(8, 16, 32, 64))
    perfect = [_record(b, 0, 800 // (b // 8)) for b in (8, 16, 32, 64)]
    text = format_table(curve_document(build_curve(perfect, config)))
    assert "no bend between the batch sizes: B_crit >= 272 is all they say" in text
    bent = [_record(b, 0, s) for b, s in ((8, 800), (16, 420), (32, 300), (64, 280))]
    assert "no bend" not in format_table(curve_document(build_curve(bent, config)))


@pytest.mark.parametrize("goal, shown", [(0.12126378800000001, "goal 0.121264 "),
                                         (0.04, "goal 0.04 "), (1.8, "goal 1.8 "),
                                         (3, "goal 3 ")])
def test_report_shows_a_pilot_rule_goal_to_six_digits(goal, shown):
    """A goal from the pilot rule (a float with a long repr) is shown to 6 significant digits;
    a goal as the user typed it is shown as typed."""
    from realnets.sweeps.curve import curve_document
    from realnets.sweeps.report import format_goal, format_table

    config = _config(batch_sizes=(8, 16), goal=goal)
    text = format_table(curve_document(build_curve([_record(8, 0, 100), _record(16, 0, 60)],
                                                   config)))
    assert shown in text
    assert format_goal(goal) == shown.split()[1]


def test_trial_rows_carry_decay_steps_only_when_the_trial_had_one():
    from realnets.sweeps.curve import trial_summary

    base = dict(batch_size=8, trial_id=0, status="COMPLETE", learning_rate=0.1, steps_to_goal=5,
                final_lr_fraction=0.2)
    assert "decay_steps" not in trial_summary(TrialRecord(**base))
    row = trial_summary(TrialRecord(**base, decay_steps=40))
    assert row["decay_steps"] == 40 and row["final_lr_fraction"] == 0.2

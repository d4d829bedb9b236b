"""Reruns of a sweep's best trials with other seeds, and the B_crit interval drawn from them."""

import itertools
import json
import math

import numpy as np
import pytest

from nqm.curve import CurvePoint, ScalingCurve
from nqm.scaling import fit_mccandlish
from realnets.cli import main
from realnets.sweeps.curve import (_median_over_seeds, b_crit_over_repeats, b_crit_resampled,
                                   build_curve)
from realnets.sweeps.report import render
from realnets.sweeps.records import SweepConfig, TrialRecord, load_sweep, read_repeats
from realnets.sweeps.repeats import (CONFIG_FILE, RepeatConfig, check_extends, check_finished,
                                     plan_repeats, run_repeats)
from realnets.sweeps.runner import run_sweep
from realnets.workloads.search_space import TrialSearchSpace


def _config(**kw):
    base = dict(workload="nqm", batch_sizes=(64, 256), trials=3, max_steps=400, goal=0.05,
                optimizer="sgd", search=TrialSearchSpace((0.05, 2.0)), vmap_trials=0)
    return SweepConfig(**{**base, **kw})


def _record(batch_size, trial_id, steps, lr=0.5, seed=0, steps_run=None, **kw):
    return TrialRecord(batch_size=batch_size, trial_id=trial_id, learning_rate=lr, seed=seed,
                       status="COMPLETE" if steps else "INCOMPLETE", steps_to_goal=steps,
                       steps_run=steps_run or steps or 400, **kw)


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    """A small early-stopped sweep of the nqm workload (seconds)."""
    out = tmp_path_factory.mktemp("sweep")
    run_sweep(_config(), out, progress=False)
    return out


def test_plan_reruns_each_winner_per_seed_with_a_capped_budget_and_its_own_schedule():
    config = _config(batch_sizes=(64, 256, 1024), max_steps=400)
    records = [_record(64, 0, 120, lr=0.3), _record(64, 1, 90, lr=0.7),
               _record(256, 0, 200, lr=0.9, final_lr_fraction=0.1, decay_steps=300),
               _record(1024, 0, None)]
    blocks = plan_repeats(config, records, RepeatConfig(seeds=(3, 5), inits=2, step_cap=3.0),
                          done=[])
    assert [(b.run.batch_size, b.run.seed) for b in blocks] == [(64, 3), (64, 5), (256, 3),
                                                                 (256, 5)]
    first, third = blocks[0], blocks[2]
    assert first.run.stop_after == 270 and third.run.stop_after == 400    # 3 x 200 > budget
    assert not first.run.stop_at_first_goal and first.run.max_steps == 400
    assert [t.trial_id for t in first.trials] == [0, 1]
    assert {t.learning_rate for t in first.trials} == {0.7}                # the winner's
    assert third.trials[0].final_lr_fraction == 0.1 and third.trials[0].decay_steps == 300
    # inits already rerun for the current winner are not run again; a stale winner's are
    done = [_record(64, 0, 100, lr=0.7, seed=3), _record(64, 1, 95, lr=0.3, seed=3)]
    again = plan_repeats(config, records, RepeatConfig(seeds=(3,), inits=2), done=done)
    assert [t.trial_id for t in again[0].trials] == [1]


def test_bad_requests_are_refused_in_one_line_naming_the_parameter():
    with pytest.raises(ValueError, match="seeds must not repeat"):
        RepeatConfig(seeds=(1, 1))
    with pytest.raises(ValueError, match="inits"):
        RepeatConfig(seeds=(1,), inits=0)
    with pytest.raises(ValueError, match="step-cap"):
        RepeatConfig(seeds=(1,), step_cap=0.5)
    with pytest.raises(ValueError, match="sweep's own seed 0"):
        plan_repeats(_config(), [_record(64, 0, 10)], RepeatConfig(seeds=(0, 1)), done=[])
    with pytest.raises(ValueError, match="seeds entry"):
        RepeatConfig(seeds=(2 ** 64,))
    old = RepeatConfig(seeds=(1, 2), inits=2)
    check_extends(old, RepeatConfig(seeds=(1, 2, 3), inits=3), "r.json")     # adds: fine
    with pytest.raises(ValueError, match=r"seeds must include those already run \(1,2"):
        check_extends(old, RepeatConfig(seeds=(1,), inits=2), "r.json")
    with pytest.raises(ValueError, match="inits must be at least 2"):
        check_extends(old, RepeatConfig(seeds=(1, 2), inits=1), "r.json")
    with pytest.raises(ValueError, match="step-cap must be 3"):
        check_extends(old, RepeatConfig(seeds=(1, 2), inits=2, step_cap=2), "r.json")
    with pytest.raises(ValueError, match=r"unfinished \(1 of 6 trials\)"):
        check_finished(_config(), [_record(64, 0, 10)], "s")
    with pytest.raises(ValueError, match="no trial at the goal"):
        check_finished(_config(trials=1), [_record(64, 0, None), _record(256, 0, None)], "s")


def test_a_point_keeps_only_the_reruns_of_its_current_winner():
    records = [_record(64, 0, 120, lr=0.3), _record(64, 1, 90, lr=0.7)]
    reruns = [_record(64, 0, 100, lr=0.7, seed=3), _record(64, 0, 95, lr=0.3, seed=3)]
    point = build_curve(records, _config(batch_sizes=(64,)), reruns).points[0]
    assert [r["steps_to_goal"] for r in point.repeats] == [100]


def test_interval_over_repeats_matches_enumerating_every_choice():
    """Independent check: with three runs per batch size, each of the 3^3 curves is equally
    likely; each resampled quantile must lie within 5 points of the same quantile of the
    enumerated B_crits."""
    sizes = [16, 64, 256]
    runs = {16: (400, 520, 330), 64: (130, 160, 210), 256: (60, 95, 41)}
    points = tuple(CurvePoint(batch_size=b, steps=runs[b][0],
                              repeats=tuple({"seed": s, "trial_id": 0, "status": "COMPLETE",
                                             "steps_to_goal": v, "steps_run": v}
                                            for s, v in enumerate(runs[b][1:], start=1)))
                   for b in sizes)
    curve = ScalingCurve(points=points, source="measured", config={"full_trials": False})
    out = b_crit_over_repeats(curve, resamples=4000)
    enumerated = [fit_mccandlish(np.asarray(sizes, float), np.asarray(pick, float)).b_crit
                  for pick in itertools.product(*(runs[b] for b in sizes))]
    assert out["method"] == "repeats" and out["runs"] == [3, 3, 3]
    # the reruns alone (not the winner): their median curve and its fit
    assert out["rerun_median_steps"] == [425.0, 185.0, 68.0]
    assert out["rerun_median_b_crit"] == pytest.approx(
        fit_mccandlish(np.asarray(sizes, float), np.asarray([425.0, 185.0, 68.0])).b_crit)
    for key, q in (("p16", 16), ("median", 50), ("p84", 84)):
        lo, hi = np.percentile(enumerated, [q - 5, q + 5])
        assert lo <= out[key] <= hi, (key, lo, out[key], hi)
    # the censored sweep's interval comes from the reruns
    assert b_crit_resampled(curve, resamples=50) == b_crit_over_repeats(curve, resamples=50)
    # reruns identical to the winners: no spread, the fit's own B_crit
    same = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=runs[b][0],
                   repeats=({"seed": 1, "trial_id": 0, "status": "COMPLETE",
                             "steps_to_goal": runs[b][0], "steps_run": runs[b][0]},))
        for b in sizes), source="measured", config={})
    fit = fit_mccandlish(np.asarray(sizes, float), np.asarray([runs[b][0] for b in sizes], float))
    flat = b_crit_over_repeats(same)
    assert flat["p16"] == pytest.approx(fit.b_crit) and flat["p84"] == pytest.approx(fit.b_crit)


def _rerun(seed, steps, trial_id=0):
    return {"seed": seed, "trial_id": trial_id, "status": "COMPLETE" if steps else "INCOMPLETE",
            "steps_to_goal": steps, "steps_run": steps or 999}


def test_the_median_curve_s_interval_draws_seeds_and_matches_enumerating_them():
    """Independent check: two seeds of one run per batch size; drawing 2 seeds with replacement
    gives the median a (1/4), (a + b) / 2 (1/2) or b (1/4), so the 3^3 curves' B_crits carry
    known weights, and the resampled quantiles must lie within 5 points of theirs."""
    sizes = [16, 64, 256]
    pairs = {16: (400, 560), 64: (130, 210), 256: (60, 41)}
    curve = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=300, repeats=(_rerun(1, pairs[b][0]), _rerun(2, pairs[b][1])))
        for b in sizes), source="measured", config={})
    out = b_crit_over_repeats(curve, resamples=1000)["rerun_median_resampled"]
    choices = {b: ((pairs[b][0], 0.25), (sum(pairs[b]) / 2, 0.5), (pairs[b][1], 0.25))
               for b in sizes}
    values, weights = [], []
    for pick in itertools.product(*(choices[b] for b in sizes)):
        values.append(fit_mccandlish(np.asarray(sizes, float),
                                     np.asarray([v for v, _ in pick])).b_crit)
        weights.append(math.prod(w for _, w in pick))
    order = np.argsort(values)
    cdf = np.cumsum(np.asarray(weights)[order])

    def quantile(q):
        return np.asarray(values)[order][np.searchsorted(cdf, q - 1e-12)]
    assert out["fitted"] == 1000
    for key, q in (("p16", 16), ("median", 50), ("p84", 84)):
        assert quantile((q - 5) / 100) <= out[key] <= quantile((q + 5) / 100), key


def test_the_median_curve_s_interval_keeps_a_seed_s_runs_together():
    # seed 1's two initialisations take 100 and 300 steps, seed 2's both 200: any draw of the
    # seeds has median 200, so the interval is the point (drawn run by run it would spread)
    scale = {16: 2.0, 64: 1.0, 256: 0.6}
    curve = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=150 * k, repeats=(
            _rerun(1, round(100 * k)), _rerun(1, round(300 * k), 1),
            _rerun(2, round(200 * k)), _rerun(2, round(200 * k), 1)))
        for b, k in scale.items()), source="measured", config={})
    out = b_crit_over_repeats(curve, resamples=40)
    spread = out["rerun_median_resampled"]
    assert spread["p16"] == pytest.approx(out["rerun_median_b_crit"])
    assert spread["p84"] == pytest.approx(out["rerun_median_b_crit"])
    assert out["p16"] < out["p84"]          # one run per draw does spread


def test_the_median_curve_s_interval_counts_a_seed_not_at_the_goal_as_slowest():
    # at B = 256 seed 1's runs both miss the goal: a draw of (1, 1) or (1, 2) has half or more
    # not at the goal, so B = 256 drops out of three draws in four and the fit is then made on
    # the two smaller batch sizes alone, whose medians are equal: B_crit 0 (perfectly flat)
    curve = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=100, repeats=(_rerun(1, s1), _rerun(1, s1, 1),
                                                     _rerun(2, s2), _rerun(2, s2, 1)))
        for b, s1, s2 in ((16, 100, 100), (64, 100, 100), (256, None, 30))),
        source="measured", config={})
    out = b_crit_over_repeats(curve, resamples=400)
    assert out["rerun_median_steps"][2] is None      # half not at the goal
    spread = out["rerun_median_resampled"]
    assert spread["median"] == pytest.approx(0.0, abs=1e-3)
    # the quarter of the draws with seed 2 twice: the fit with B = 256 at 30 steps
    assert spread["p84"] == pytest.approx(
        fit_mccandlish(np.asarray([16.0, 64, 256]), np.asarray([100.0, 100, 30])).b_crit)


def test_a_drawn_run_not_at_the_goal_counts_as_the_slowest_in_the_median():
    # seed 1: 100 steps and one not at the goal; seed 2: 100 and 300. Drawn (1, 2) the median
    # of 100, 100, 300, inf is 200 (100 if the miss were dropped); (2, 2): 200; (1, 1): half
    # not at the goal, not reached
    groups = [np.asarray([100.0, np.inf]), np.asarray([100.0, 300.0])]
    rng = np.random.default_rng(0)
    drawn = [_median_over_seeds(groups, rng) for _ in range(200)]
    assert {v for v in drawn if not np.isnan(v)} == {200.0}
    assert 0.15 < np.mean(np.isnan(drawn)) < 0.35         # (1, 1): one draw in four


def test_reruns_under_one_seed_have_no_interval_over_seeds_and_counts_stop_at_the_fewest():
    sizes = (16, 64, 256)
    one = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=s, repeats=(_rerun(1, s + 5), _rerun(1, s + 9, 1)))
        for b, s in zip(sizes, (400, 130, 60))), source="measured", config={})
    spread = b_crit_over_repeats(one, resamples=20)["rerun_median_resampled"]
    assert spread["p16"] is None and "one seed only" in spread["note"]
    assert "no interval over seeds: a batch size has reruns under one seed" in render(one, "table")
    # B = 16 has eight seeds, the others four (a rerun stopped part way): counts stop at four,
    # each point's own first four
    uneven = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=s, repeats=tuple(
            _rerun(seed, s + 10 * seed) for seed in range(1, 9 if b == 16 else 5)))
        for b, s in zip(sizes, (400, 130, 60))), source="measured", config={})
    out = b_crit_over_repeats(uneven, resamples=20)
    assert [c["seeds"] for c in out["rerun_median_by_seeds"]] == [4]
    first4 = [np.median([s + 10 * seed for seed in range(1, 5)]) for s in (400, 130, 60)]
    assert out["rerun_median_by_seeds"][0]["b_crit"] == pytest.approx(
        fit_mccandlish(np.asarray(sizes, float), np.asarray(first4)).b_crit)
    # reruns without a seed sort last instead of failing
    mixed = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=s, repeats=(_rerun(None, s + 5), _rerun(2, s + 9)))
        for b, s in zip(sizes, (400, 130, 60))), source="measured", config={})
    assert b_crit_over_repeats(mixed, resamples=20)["rerun_median_resampled"]["fitted"] == 20


def test_the_median_curve_from_the_first_seeds_is_refitted_on_those_seeds_alone():
    sizes = [16, 64, 256]
    steps = {16: [400, 420, 380, 410, 600, 640, 620, 610], 64: [130, 140, 120, 150, 90, 95, 85, 99],
             256: [60, 55, 65, 62, 30, 33, 31, 29]}
    curve = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=steps[b][0],
                   repeats=tuple(_rerun(seed, v) for seed, v in enumerate(steps[b], start=1)))
        for b in sizes), source="measured", config={})
    out = b_crit_over_repeats(curve, resamples=10)
    assert [c["seeds"] for c in out["rerun_median_by_seeds"]] == [4, 8]
    for count in out["rerun_median_by_seeds"]:
        medians = [np.median(steps[b][:count["seeds"]]) for b in sizes]
        assert count["b_crit"] == pytest.approx(
            fit_mccandlish(np.asarray(sizes, float), np.asarray(medians, float)).b_crit)
    assert out["rerun_median_by_seeds"][-1]["b_crit"] == pytest.approx(out["rerun_median_b_crit"])
    text = render(curve, "table")
    assert "B_crit of the reruns' median curve from the first K seeds: K=4: " in text
    assert "16-84% over the seeds drawn again" in text


def test_the_first_seeds_count_a_batch_size_half_missed_as_not_reached():
    # B = 256: seeds 1 and 2 missed the goal. Its first four seeds are half missed (not
    # reached: B_crit from B = 16 and 64 alone, 405 and 135 steps: 128); all eight are not
    steps = {16: [400, 420, 380, 410, 600, 640, 620, 610], 64: [130, 140, 120, 150, 90, 95, 85, 99],
             256: [None, None, 65, 62, 30, 33, 31, 29]}
    curve = ScalingCurve(points=tuple(
        CurvePoint(batch_size=b, steps=50, repeats=tuple(
            _rerun(seed, v) for seed, v in enumerate(steps[b], start=1)))
        for b in steps), source="measured", config={})
    out = b_crit_over_repeats(curve, resamples=10)
    assert out["rerun_median_by_seeds"][0] == {"seeds": 4, "b_crit": pytest.approx(128.0)}
    assert out["rerun_median_steps"][2] == pytest.approx(47.5)       # 8 runs, 2 missed
    assert out["rerun_median_by_seeds"][1]["b_crit"] == pytest.approx(out["rerun_median_b_crit"])


def test_a_reached_point_without_reruns_leaves_no_interval():
    points = (CurvePoint(batch_size=16, steps=100, repeats=({"steps_to_goal": 90},)),
              CurvePoint(batch_size=64, steps=40))
    out = b_crit_resampled(ScalingCurve(points=points, source="measured", config={}))
    assert out["available"] is False and "at batch sizes [64]" in out["note"]


def test_rerun_on_the_real_trainer_resumes_and_feeds_the_curve(sweep_dir):
    config, records = load_sweep(sweep_dir)
    assert b_crit_resampled(build_curve(records, config))["available"] is False
    made = []
    first = RepeatConfig(seeds=(1,), inits=2)
    run_repeats(sweep_dir, first, on_block=lambda block, recs: made.append(block.run.batch_size))
    assert made == [p.batch_size for p in build_curve(records, config).points if p.reached]
    # a second seed later: the first seed's runs are kept, not rerun
    made.clear()
    second = RepeatConfig(seeds=(1, 2), inits=2)
    reruns = run_repeats(sweep_dir, second,
                         on_block=lambda block, recs: made.append(block.run.seed))
    assert made == [2] * len(made) and len(reruns) == 2 * 2 * len(made)
    assert sorted({r.seed for r in read_repeats(sweep_dir)}) == [1, 2]
    assert json.loads((sweep_dir / CONFIG_FILE).read_text())["seeds"] == [1, 2]
    curve = build_curve(records, config, read_repeats(sweep_dir))
    for point in curve.points:
        if point.reached:
            assert len(point.repeats) == 4
            # the nqm workload is a quadratic: a rerun lands near the winner's steps
            steps = [r["steps_to_goal"] for r in point.repeats]
            assert all(s is not None and 0.5 < s / point.steps < 2 for s in steps)
    interval = b_crit_resampled(curve)
    assert interval["available"] and interval["method"] == "repeats"
    with pytest.raises(ValueError, match="step-cap must be 3"):
        run_repeats(sweep_dir, RepeatConfig(seeds=(1,), step_cap=2.0))


def test_a_rerun_stopped_by_the_cap_says_so(tmp_path):
    config = _config(batch_sizes=(64,), max_steps=400, trials=1)
    out = tmp_path / "s"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config.to_dict()))
    (out / "trials.jsonl").write_text(json.dumps(_record(64, 0, 50).to_dict()) + "\n")

    def trainer(task, run, trials):
        return [{**_record(64, t.trial_id, None, lr=t.learning_rate, seed=run.seed,
                           steps_run=run.stop_after).to_dict(), "reason": "stopped"}
                for t in trials]

    reruns = run_repeats(out, RepeatConfig(seeds=(7,), step_cap=2.0), task=object(),
                         run_trials=trainer)
    assert reruns[0].steps_run == 100 and "2 x the sweep's steps" in reruns[0].reason


def test_cli_repeat_refuses_bad_seeds_in_one_line(sweep_dir, capsys):
    assert main(["repeat", str(sweep_dir), "--seeds", "one"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "seeds must be whole numbers" in err
    assert main(["repeat", str(sweep_dir / "nowhere"), "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "does not exist" in err and err.count("\n") == 0


def test_a_full_trials_sweep_with_reruns_shows_both_intervals():
    from realnets.sweeps.curve import curve_document
    from realnets.sweeps.report import format_table

    def trial(i, steps):
        return {"trial_id": i, "status": "COMPLETE", "learning_rate": 0.1 * (i + 1),
                "momentum": None, "final_lr_fraction": 1.0, "steps_to_goal": steps,
                "steps_run": steps}

    runs = {16: (400, 520, 330), 64: (130, 160, 210), 256: (60, 95, 41)}
    points = tuple(CurvePoint(batch_size=b, steps=min(v), learning_rate=0.1,
                              trials=tuple(trial(i, s) for i, s in enumerate(v)),
                              repeats=({"seed": 1, "trial_id": 0, "status": "COMPLETE",
                                        "steps_to_goal": int(1.2 * min(v)),
                                        "steps_run": int(1.2 * min(v))},))
                   for b, v in runs.items())
    config = _config(batch_sizes=(16, 64, 256), full_trials=True).to_dict()
    doc = curve_document(ScalingCurve(points=points, source="measured", config=config))
    assert doc.b_crit_resampled["method"] == "trials"
    assert doc.b_crit_repeats["method"] == "repeats" and doc.b_crit_repeats["runs"] == [2, 2, 2]
    text = format_table(doc)
    assert "B_crit over resampled trials: median" in text
    assert "B_crit over reruns of the best trials with other seeds (2 runs per batch size)" in text
    medians = [float(int(1.2 * min(v))) for v in runs.values()]
    assert "the reruns' median steps per batch size: " + " ".join(f"{m:.4g}" for m in medians) \
        in text


def test_median_of_reruns_counts_the_unreached_as_slowest():
    from realnets.sweeps.curve import _median_steps

    assert _median_steps([10, None, 30]) == 30.0
    assert _median_steps([10, None]) is None and _median_steps([]) is None
    assert _median_steps([5, 7, 9, 11]) == 8.0

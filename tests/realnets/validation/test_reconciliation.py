"""realnets.validation.reconciliation (and its markdown in report.py): the table's values, standard
errors, intervals and ratios from a small synthetic document whose numbers are worked out by hand;
missing pieces become rows that say why; the chart's curves and marks."""

from __future__ import annotations

import pytest

from realnets.validation import reconciliation as rec
from realnets.validation.report import reconciliation_markdown

MEASURED = 100.0


def _curve(b_crit: float, steps: list) -> dict:
    return {"points": [{"batch_size": b, "steps": s} for b, s in zip((8, 16, 32, 64), steps)],
            "fit": {"s_min": 10.0, "b_crit": b_crit, "r2": 0.99},
            "regimes": {"cbs20": 16, "maximal_from": 64}}


def _record(step: int, b_simple: float, b_noise: float, tuned: float) -> dict:
    return {"step": step, "train_loss": 0.1,
            # B_simple = tr(Sigma) / |G|^2 = 10 / 0.2 = 50: s.e. 50 hypot(1/10, 0.015/0.2) = 6.25
            "gradient": {"b_simple": b_simple, "trace_cov": {"value": 10.0, "uncertainty": 1.0},
                         "grad_sq_norm": {"value": 0.2, "uncertainty": 0.015}},
            "b_noise": {"b_noise": {"value": b_noise, "uncertainty": 4.0}},
            "predictions": {
                "step_matched": {"family": "sgd", "target": 0.05,
                                 "tuned": _curve(tuned, [900, 500, 300, 250]),
                                 "bootstrap": {"tuned": {"sd": 30.0, "p16": 120.0, "p84": 200.0,
                                                         "draws": [1.0] * 8}}},
                "train_loss": {"family": "sgd", "target": 0.07, "tuned": _curve(999.0, [1] * 4)}}}


def _branch_point(step, cbs, lower):
    return {"step": step, "loss_at_branch": 1.0, "branches": [], "cbs": cbs,
            "cbs_is_lower_bound": lower}


def synthetic() -> dict:
    measured = _curve(MEASURED, [1000, 600, None, 300])
    measured["interval"] = {"available": True, "resamples": 200, "fitted": 200,
                            "median": 101.0, "p16": 80.0, "p84": 130.0}
    measured["robustness"] = {
        "leave_one_out": {"b_crit": MEASURED, "max_ratio": 1.25,
                          "without": [{"batch_size": 8, "b_crit": 90.0},
                                      {"batch_size": 16, "b_crit": 125.0},
                                      {"batch_size": 64, "b_crit": None}]},
        "rms_log_residual": 0.05, "trial_count": [], "edges": []}
    settings = {"batch_size": 8, "branch_steps": [10, 30, 100], "window_examples": 512,
                "multipliers": [1, 2, 4, 8, 16, 32], "tolerance": 0.05, "repeats": 3}
    return {"workload": "toy", "settings": {"checkpoints": ["goal", "init"],
                                            "target_rule": "step_matched"},
            "measured": measured, "calibration_run": {"sweep_steps_to_goal": 100},
            "checkpoints": {"goal": _record(100, 50.0, 40.0, 150.0),
                            "init": _record(0, 7.0, 7.0, 7.0)},
            "branching": {"settings": settings, "loss_kind": "training loss",
                          "points": [_branch_point(10, 64, False), _branch_point(30, 256, True),
                                     _branch_point(100, None, False)],
                          "local_cbs": [{"step": 10, "cbs": 64}, {"step": 30, "cbs": 256},
                                        {"step": 100, "cbs": None}]}}


def _by_name(rows):
    return {r["estimate"]: r for r in rows}


def test_rows_values_errors_intervals_and_ratios():
    rows = rec.reconciliation(synthetic())
    assert [r["estimate"] for r in rows] == [
        rec.MEASURED, rec.LEAVE_ONE_OUT, "local CBS at step 10 (0.1 S_ref)",
        "local CBS at step 30 (0.3 S_ref)", "local CBS at step 100 (1 S_ref)", rec.B_SIMPLE,
        rec.B_NOISE, rec.NQM]
    by = _by_name(rows)
    m = by[rec.MEASURED]
    assert (m["value"], m["lo"], m["hi"], m["ratio"]) == (100.0, 80.0, 130.0, 1.0)
    assert m["ratio_lo"] == pytest.approx(0.8) and m["ratio_hi"] == pytest.approx(1.3)
    assert "16-84% over 200 resamples" in m["note"] and m["note"].endswith("cbs20 16")
    loo = by[rec.LEAVE_ONE_OUT]
    assert loo["value"] is None and (loo["lo"], loo["hi"]) == (90.0, 125.0)   # None skipped
    assert (loo["ratio_lo"], loo["ratio_hi"]) == pytest.approx((0.9, 1.25))
    assert "1.25" in loo["note"] and "RMS log residual 0.05" in loo["note"]
    assert "3 batch sizes (2 could be fitted)" in loo["note"]
    cbs = [r for r in rows if r["estimate"].startswith(rec.LOCAL_CBS)]
    assert [(r["step"], r["value"], r["lower_bound"]) for r in cbs] == [
        (10, 64, False), (30, 256, True), (100, None, False)]
    assert [r["ratio"] for r in cbs] == pytest.approx([0.64, 2.56, None])
    assert cbs[1]["note"].startswith("lower bound") and "diverged" in cbs[2]["note"]
    # the headline checkpoint (goal, not init) and rule (step_matched, not train_loss)
    simple = by[rec.B_SIMPLE]
    assert simple["value"] == 50.0 and simple["ratio"] == pytest.approx(0.5)
    assert simple["se"] == pytest.approx(6.25)
    noise = by[rec.B_NOISE]
    assert (noise["value"], noise["se"], noise["ratio"]) == (40.0, 4.0, pytest.approx(0.4))
    nqm = by[rec.NQM]
    assert (nqm["value"], nqm["lo"], nqm["hi"]) == (150.0, 120.0, 200.0)
    assert (nqm["ratio"], nqm["ratio_lo"], nqm["ratio_hi"]) == pytest.approx((1.5, 1.2, 2.0))
    assert "step 100" in nqm["note"] and "8 bootstrap NQMs" in nqm["note"]


def test_missing_pieces_say_why_and_leave_no_ratio():
    doc = synthetic()
    doc["measured"]["interval"] = {"available": False, "note": "..."}
    del doc["measured"]["robustness"]
    doc["branching"] = {"skipped": "not measured (branch-repeats 0)", "local_cbs": []}
    goal = doc["checkpoints"]["goal"]
    del goal["predictions"]["step_matched"]
    goal["target_errors"] = {"step_matched": "target above the initial loss"}
    del goal["b_noise"]
    by = _by_name(rec.reconciliation(doc))
    m = by[rec.MEASURED]
    assert m["lo"] is None and m["ratio_lo"] is None
    assert "no interval: trials stopped early" in m["note"]
    assert by[rec.LEAVE_ONE_OUT]["lo"] is None
    assert by[rec.LOCAL_CBS]["note"] == "not measured (branch-repeats 0)"
    assert by[rec.NQM]["value"] is None and by[rec.NQM]["ratio"] is None
    assert "target above the initial loss" in by[rec.NQM]["note"]
    assert by[rec.B_NOISE]["value"] is None and "not measured" in by[rec.B_NOISE]["note"]
    # an older document: no interval at all, no branching
    del doc["measured"]["interval"]
    del doc["branching"]
    by = _by_name(rec.reconciliation(doc))
    assert "not in this document" in by[rec.MEASURED]["note"]
    assert "made before validate measured it" in by[rec.LOCAL_CBS]["note"]
    # no measured B_crit: no ratio anywhere
    doc["measured"]["fit"]["b_crit"] = None
    assert all(r["ratio"] is None for r in rec.reconciliation(doc))


def test_a_baseline_whose_denominator_is_not_positive_says_so_rather_than_not_measured():
    """Measured, but |G|^2 or G^T H G estimated at or below zero (fair_affairs with momentum at
    its goal): no number and no ratio, and the note gives the estimate and calls the baseline
    unbounded; only a missing record reads "not measured"."""
    from realnets.validation.comparison import comparison

    doc = synthetic()
    doc["measured"]["b_simple_pooled"] = 30.0
    goal = doc["checkpoints"]["goal"]
    goal["gradient"].update(b_simple=None,
                            grad_sq_norm={"value": -0.0047, "uncertainty": 0.006})
    goal["b_noise"] = {"b_noise": {"value": None, "uncertainty": None}, "grad_h_grad": -0.02}
    by = _by_name(rec.reconciliation(doc))
    for name, text in ((rec.B_SIMPLE, "|G|^2 estimated at -0.0047 +- 0.006, not positive"),
                       (rec.B_NOISE, "G^T H G estimated at -0.02, not positive")):
        assert by[name]["value"] is None and by[name]["ratio"] is None
        assert text in by[name]["note"] and "unbounded" in by[name]["note"]
        assert "not measured" not in by[name]["note"]
    rows = {(r["quantity"], r["checkpoint"]): r for r in comparison(doc)}
    assert "unbounded" in rows[("B_simple = tr(Sigma) / ‖G‖²", "goal")]["note"]
    assert "unbounded" in rows[("B_noise = tr(H Sigma) / (G^T H G)", "goal")]["note"]
    # a positive denominator keeps the ordinary note
    goal["gradient"]["grad_sq_norm"] = {"value": 0.1, "uncertainty": 0.01}
    assert "unbounded" not in _by_name(rec.reconciliation(doc))[rec.B_SIMPLE]["note"]


def test_chart_curves_in_absolute_steps_and_marks():
    doc = synthetic()
    measured_label, predicted_label = rec.curve_labels(doc)
    curves = rec.reconciliation_curves(doc)
    measured = [(c["batch_size"], c["steps"]) for c in curves if c["curve"] == measured_label]
    assert measured == [(8, 1000), (16, 600), (64, 300)]          # the unreached point dropped
    predicted = [(c["batch_size"], c["steps"]) for c in curves if c["curve"] == predicted_label]
    assert predicted == [(8, 900), (16, 500), (32, 300), (64, 250)]
    marks = {m["estimate"]: m for m in rec.reconciliation_marks(doc)}
    assert set(marks) == {"measured B_crit", "NQM B_crit", "local CBS, step 10",
                          "local CBS, step 30 (lower bound)", "B_simple", "B_noise"}
    assert marks["measured B_crit"]["curve"] == measured_label
    assert (marks["NQM B_crit"]["curve"], marks["NQM B_crit"]["lo"]) == (predicted_label, 120.0)
    assert marks["B_noise"]["curve"] is None and marks["B_noise"]["batch_size"] == 40.0


def test_markdown_table():
    doc = synthetic()
    table = "\n".join(reconciliation_markdown(doc))
    assert "| measured B_crit (fit) | 100 | 80 .. 130 | 1 | 0.8 .. 1.3 |" in table
    assert "| local CBS at step 30 (0.3 S_ref) | >= 256 | - | 2.56 | - |" in table
    assert "| B_simple = tr(Sigma) / ‖G‖² | 50 ± 6.2 |" in table
    assert "| NQM prediction (tuned B_crit) | 150 | 120 .. 200 | 1.5 | 1.2 .. 2 |" in table


def test_the_reruns_row_carries_the_median_curve_and_its_interval_over_seeds():
    doc = synthetic()
    reruns = {"available": True, "method": "repeats", "p16": 60.0, "p84": 140.0,
              "runs": [9, 9, 7, 0], "resamples": 200, "rerun_median_b_crit": 80.0,
              "rerun_median_resampled": {"resamples": 200, "fitted": 190, "median": 81.0,
                                         "p16": 70.0, "p84": 95.0}}
    doc["measured"]["repeats"] = reruns
    row = _by_name(rec.reconciliation(doc))[rec.RERUNS]
    assert (row["value"], row["lo"], row["hi"]) == (80.0, 70.0, 95.0)
    assert (row["ratio"], row["ratio_lo"], row["ratio_hi"]) == pytest.approx((0.8, 0.7, 0.95))
    assert "over 200 draws of the reruns' seeds" in row["note"]
    assert "among 7-9 (the winner and its reruns): 60-140 over 200 draws" in row["note"]
    # too few one-run draws fitted: the median curve and its range over seeds still stand
    one_lost = {**reruns, "p16": None, "p84": None}
    row = _by_name(rec.reconciliation({**doc, "measured": {**doc["measured"],
                                                           "repeats": one_lost}}))[rec.RERUNS]
    assert (row["value"], row["lo"], row["hi"]) == (80.0, 70.0, 95.0)
    assert "(the winner and its reruns): fewer than half of the draws fitted" in row["note"]
    # a document made before the interval over seeds: the value stays, no range
    del reruns["rerun_median_resampled"]
    row = _by_name(rec.reconciliation(doc))[rec.RERUNS]
    assert row["value"] == 80.0 and row["lo"] is None and "no interval over the seeds" in row["note"]


def test_rule_2_stands_beside_the_headline_with_its_interval_and_its_full_batch_steps():
    doc = synthetic()
    doc["calibration_run"]["batch_size"] = 8
    assert rec.NQM_RULE_2 not in [r["estimate"] for r in rec.reconciliation(doc)]
    doc["full_batch"] = {"steps": 9, "trial_id": 3, "trials": [{}] * 4, "sample_rows": 256,
                         "target": 0.1, "step_limit": 100}
    doc["checkpoints"]["goal"]["predictions"]["noise_free_matched"] = {
        "family": "sgd", "target": 0.02, "tuned": _curve(400.0, [4000, 2000, 1000, 500]),
        "bootstrap": {"tuned": {"sd": 50.0, "p16": 350.0, "p84": 480.0, "draws": [1.0] * 8}}}
    rows = {r["estimate"]: r for r in rec.reconciliation(doc)}
    row = rows[rec.NQM_RULE_2]
    assert (row["value"], row["lo"], row["hi"]) == (400.0, 350.0, 480.0)
    assert (row["ratio"], row["ratio_lo"], row["ratio_hi"]) == pytest.approx((4.0, 3.5, 4.8))
    assert "9 full-batch steps (trial 3 of 4, 256 rows)" in row["note"]
    assert rows[rec.NQM]["value"] == 150.0             # the headline is unchanged
    # no chart mark: the chart has no rule 2 curve
    assert all(m["batch_size"] != 400.0 for m in rec.reconciliation_marks(doc))
    # a target the tuned NQM reaches at no batch size: no value, and the row says so
    unreached = _curve(None, [None] * 4)
    for point in unreached["points"]:
        point["reached"] = False
    doc["checkpoints"]["goal"]["predictions"]["noise_free_matched"]["tuned"] = unreached
    row = {r["estimate"]: r for r in rec.reconciliation(doc)}[rec.NQM_RULE_2]
    assert row["value"] is None and "reaches it at none of the sweep's batch sizes" in row["note"]
    # no trial reached the target full batch: the row gives the checkpoint's reason, once
    doc["full_batch"]["steps"] = None
    del doc["checkpoints"]["goal"]["predictions"]["noise_free_matched"]
    why = "no trial reached the reference run's loss 0.1 full batch within 100 steps"
    doc["checkpoints"]["goal"]["target_errors"] = {"noise_free_matched": why}
    row = {r["estimate"]: r for r in rec.reconciliation(doc)}[rec.NQM_RULE_2]
    assert row["value"] is None and row["ratio"] is None
    assert row["note"].count("no trial reached") == 1 and row["note"].endswith(why)


def test_the_two_point_estimate_by_hand_and_where_it_has_no_value():
    doc = {"calibration_run": {"batch_size": 16, "sweep_steps_to_goal": 44},
           "full_batch": {"steps": 22, "reference_reruns": [40, 48, None, 44, 52, 60, 36]}}
    two = rec.two_point(doc)
    # 16 (44 / 22 - 1) = 16; the reruns sorted 36 40 44 48 52 60 inf: 16th percentile at rank
    # 0.96 (39.84 steps), 84th at rank 5.04 (between 60 and inf: not finite, no upper end)
    assert two["value"] == pytest.approx(16.0)
    assert two["lo"] == pytest.approx(16 * (39.84 / 22 - 1))
    assert two["hi"] is None and "1 not at the goal" in two["note"]
    doc["full_batch"]["reference_reruns"] = [40, 48, 44, 52, 60]
    # sorted 40 44 48 52 60: the 84th percentile at rank 3.36, 52 + 0.36 x 8 = 54.88 steps
    assert rec.two_point(doc)["hi"] == pytest.approx(16 * (54.88 / 22 - 1))
    # no reruns (or none stored), S_fb at or above S_ref, or no S_fb: said, and no value where
    # there is none
    doc["full_batch"]["reference_reruns"] = []
    assert rec.two_point(doc)["lo"] is None and "not rerun" in rec.two_point(doc)["note"]
    del doc["full_batch"]["reference_reruns"]
    assert rec.two_point(doc)["hi"] is None and "not in this document" in rec.two_point(doc)["note"]
    doc["full_batch"]["steps"] = 44
    assert rec.two_point(doc)["value"] is None and "not below S_ref" in rec.two_point(doc)["note"]
    doc["full_batch"]["steps"] = None
    assert rec.two_point(doc)["value"] is None
    # in the table: a row with its ratio, and no mark on the chart
    full = synthetic()
    full["calibration_run"] = {"batch_size": 8, "sweep_steps_to_goal": 100}
    full["full_batch"] = {"steps": 10, "trial_id": 1, "trials": [{}], "sample_rows": 64,
                          "target": 0.1, "step_limit": 100, "reference_reruns": [90, 110]}
    row = {r["estimate"]: r for r in rec.reconciliation(full)}[rec.TWO_POINT]
    assert row["value"] == pytest.approx(72.0) and row["ratio"] == pytest.approx(0.72)
    assert all(m["batch_size"] != 72.0 for m in rec.reconciliation_marks(full))


def test_rule_2_section_says_why_when_there_is_no_prediction():
    from realnets.validation.report import rule_2_markdown

    doc = synthetic()
    assert rule_2_markdown(doc) == []                 # a document without rule 2
    doc["calibration_run"]["batch_size"] = 8
    doc["full_batch"] = {"steps": None, "trial_id": None, "learning_rate": None,
                         "momentum": None, "target": 0.25, "step_limit": 100, "sample_rows": 64,
                         "seconds": 1.0,
                         "trials": [{"trial_id": 0, "status": "not reached"},
                                    {"trial_id": 1, "status": "diverged"}]}
    text = "\n".join(rule_2_markdown(doc))
    assert "No trial reached it (1 not within their limit, 1 diverged): no prediction." in text
    # S_fb found, the target unreached at every batch size: said, with the two-point estimate
    doc["full_batch"].update(steps=20, trial_id=0, learning_rate=0.1,
                             trials=[{"trial_id": 0, "status": "reached",
                                      "steps_to_target": 20}])
    unreached = _curve(None, [None] * 4)
    for point in unreached["points"]:
        point.update(reached=False, learning_rate=None, momentum=None)
    goal = doc["checkpoints"]["goal"]
    goal["targets"] = {"step_matched": 0.05}
    goal["noise_free_match"] = {"target": 1e-6, "steps": 20, "batch_size": 1000,
                                "learning_rate": 0.5, "momentum": None}
    goal["predictions"]["noise_free_matched"] = {"tuned": unreached, "target": 1e-6}
    text = "\n".join(rule_2_markdown(doc))
    assert "reaches this target at none of the sweep's batch sizes" in text
    assert "two-point estimate B_ref (S_ref / S_fb - 1) (docs/prediction_rule.md): 32 " in text


def test_the_estimate_of_record_stands_before_b_2pt_where_the_record_has_the_median_end():
    """A two_ends record with `full_batch_inits` (B_ref 8, reruns' 16/50/84% = 60/90/150 steps,
    S_fb^N 10, the median end over initialisations 15): B_2pt'(med) = 8 (90 / 15 - 1) = 40 with
    8 (60 / 15 - 1) = 24 .. 8 (150 / 15 - 1) = 72, ratio 0.4 against B_crit 100, in the row just
    before B_2pt' = 8 (90 / 10 - 1) = 64; without the diagnostic there is no such row, and a
    median end not at the target leaves it without a value."""
    ends = {"b_ref": 8, "reruns": {"count": 32, "not_at_goal": 0,
                                   "percentiles": {"16": 60.0, "50": 90.0, "84": 150.0}},
            "full_set": {"steps": 10, "sample_rows": 1000},
            "two_point": {"16": 40.0, "50": 64.0, "84": 112.0},
            "full_batch_inits": {"seeds": list(range(1, 17)), "over_s_fb": 1.5,
                                 "percentiles": {"16": 12.0, "50": 15.0, "84": 30.0}}}
    rows = rec.reconciliation(synthetic(), {"two_ends": ends})
    names = [r["estimate"] for r in rows]
    med = rows[names.index(rec.TWO_ENDS_MED)]
    assert names.index(rec.TWO_ENDS_MED) + 1 == names.index(rec.TWO_ENDS)
    assert (med["value"], med["lo"], med["hi"]) == pytest.approx((40.0, 24.0, 72.0))
    assert med["ratio"] == pytest.approx(0.4) and "S_med 15" in med["note"]
    assert _by_name(rows)[rec.TWO_ENDS]["value"] == 64.0
    bare = {k: v for k, v in ends.items() if k != "full_batch_inits"}
    assert rec.TWO_ENDS_MED not in [r["estimate"] for r in rec.reconciliation(synthetic(),
                                                                              {"two_ends": bare})]
    missed = {**ends, "full_batch_inits": {**ends["full_batch_inits"], "over_s_fb": None,
                                           "percentiles": {"16": None, "50": None, "84": None}}}
    row = _by_name(rec.reconciliation(synthetic(), {"two_ends": missed}))[rec.TWO_ENDS_MED]
    assert row["value"] is None and "did not reach the target" in row["note"]
    above = {**ends, "full_batch_inits": {**ends["full_batch_inits"], "over_s_fb": 9.5,
                                          "percentiles": {"16": 80.0, "50": 95.0, "84": 99.0}}}
    row = _by_name(rec.reconciliation(synthetic(), {"two_ends": above}))[rec.TWO_ENDS_MED]
    assert row["value"] is None and row["note"].startswith(
        "the median full-batch end, 95 steps, is not below the reruns' median S~_ref, 90: no "
        "estimate")


@pytest.mark.parametrize("trials, factor", [(8, 1.704), (16, 1.376), (32, 1.360)])
def test_a_sweep_of_8_16_or_32_trials_gets_the_search_row_and_others_do_not(trials, factor):
    """Resampled trials and K = 8, 16 or 32 per batch size: where a 4K-trial search would likely
    put B_crit, F_K either side of the fit (robustness.SEARCH_FACTORS); none for other counts,
    or where the interval is over reruns (trials stopped early)."""
    doc = synthetic()
    doc["measured"]["interval"]["method"] = "trials"
    doc["sweep_config"] = {"trials": trials}
    label = rec.search_label(4 * trials)
    row = _by_name(rec.reconciliation(doc))[label]
    assert (row["lo"], row["hi"]) == pytest.approx((MEASURED / factor, MEASURED * factor))
    assert row["value"] is None and f"x{factor:.3f}" in row["note"]
    assert f"{trials}-trial fit" in row["note"]
    assert [r["estimate"] for r in rec.reconciliation(doc)][:3] == [
        rec.MEASURED, rec.LEAVE_ONE_OUT, label]
    for other in (4, 64, 128):
        doc["sweep_config"] = {"trials": other}
        assert not any(r["estimate"].startswith("measured B_crit, a search of")
                       for r in rec.reconciliation(doc))
    doc["sweep_config"] = {"trials": trials}
    doc["measured"]["interval"]["method"] = "repeats"
    assert label not in _by_name(rec.reconciliation(doc))


def test_the_search_row_and_the_sweeps_report_agree_on_every_shipped_report():
    """The validation document's condition (`search_of`) and the sweep's
    (`robustness.search_range`) give the same range, or none, on every shipped report."""
    import json
    from pathlib import Path

    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import load_sweep
    from realnets.sweeps.robustness import search_range

    root = Path(__file__).resolve().parents[3]
    with_range = 0
    for path in sorted((root / "reports" / "validation").glob("*/validation.json")):
        doc = json.loads(path.read_text())
        config, records = load_sweep(root / doc["provenance"]["sweep"])
        from_sweep = search_range(build_curve(records, config))
        from_doc = rec.search_of(doc)
        assert (from_sweep is None) == (from_doc is None), path.parent.name
        if from_doc is not None:
            with_range += 1
            assert (from_sweep["lo"], from_sweep["hi"]) == pytest.approx(from_doc, rel=1e-9)
    # the eighteen remeasured from a larger search have none; own_mnist1d_cnn (16 trials) has
    # one since session 45
    assert with_range == 14

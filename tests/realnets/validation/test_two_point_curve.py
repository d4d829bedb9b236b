"""realnets.validation.two_point_curve and `python -m realnets two-ends DIR --curve`: the two-point
estimate's whole curve in absolute steps against the measured ones (docs/prediction_rule.md,
session 36)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nqm.scaling import fit_mccandlish
from realnets.cli import main
from realnets.validation import two_point_curve

ROOT = Path(__file__).resolve().parents[3]


def test_the_curve_is_the_mccandlish_form_through_both_ends():
    """Through (B_ref, S~_ref), tending to S_fb^N, and its fit gives B_2pt' = B_ref (S~/S_fb - 1)
    back; refused where S~_ref is not above S_fb^N."""
    b = [8, 16, 64, 1024, 2 ** 30]
    s = two_point_curve.steps(8, 12, 300, b)
    assert s[0] == pytest.approx(300) and s[-1] == pytest.approx(12, rel=1e-6)
    fit = fit_mccandlish(np.array(b[:-1]), np.array(s[:-1]))
    assert fit.b_crit == pytest.approx(8 * (300 / 12 - 1), rel=1e-6)
    assert fit.s_min == pytest.approx(12, rel=1e-6)
    with pytest.raises(ValueError, match="S~_ref > S_fb"):
        two_point_curve.steps(8, 12, 12, b)


def _doc(batch_sizes, sweep, reruns, nqm):
    return {"workload": "w", "settings": {"checkpoints": ["goal"], "target_rule": "step_matched"},
            "measured": {"points": [{"batch_size": b, "steps": s}
                                    for b, s in zip(batch_sizes, sweep)],
                         "repeats": {"rerun_median_steps": reruns}},
            "checkpoints": {"goal": {"predictions": {"step_matched": {"tuned": {"points": [
                {"batch_size": b, "steps": s, "reached": s is not None}
                for b, s in zip(batch_sizes, nqm)]}}}}}}


def test_the_check_compares_at_every_batch_size_that_reached_the_goal():
    """Against a measured curve that is the hyperbola except one point 3x off, the worst factor
    is 3 at that point; a batch size not reached (None, or an infinite median) is not compared;
    the band counts the reruns' medians between the 16th and 84th percentile curves."""
    b = [16, 32, 64, 128]
    ends = {"workload": "w", "optimizer": "sgd", "b_ref": 16,
            "full_set": {"steps": 10}, "reruns": {"percentiles": {"16": 90, "50": 100,
                                                                  "84": 130}}}
    exact = [10 + 90 * 16 / x for x in b]                # 100, 55, 32.5, 21.25
    reruns = [exact[0], exact[1] * 3, float("inf"), exact[3]]
    rec = two_point_curve.check(ends, _doc(b, [90, None, 30, 20], reruns, [100, 50, 25, None]))
    w = rec["worst"]
    assert w["two_point_vs_reruns"]["factor"] == pytest.approx(3)
    assert w["two_point_vs_reruns"]["batch_size"] == 32
    assert w["two_point_vs_reruns"]["compared"] == 3 and not w["two_point_vs_reruns"]["within_2x"]
    assert w["two_point_vs_sweep"]["compared"] == 3
    assert w["two_point_vs_sweep"]["factor"] == pytest.approx(100 / 90)
    assert w["rule_1_vs_sweep"]["factor"] == pytest.approx(30 / 25)   # 1.2 > 100/90
    # lo curve: 10 + 80 * 16 / B; hi: 10 + 120 * 16 / B
    assert rec["rows"][3]["two_point_lo"] == pytest.approx(10 + 80 * 16 / 128)
    assert rec["in_band"] == [2, 3]                      # 100 and 21.25 inside, 165 above
    assert rec["s_fb_median"] is None and rec["worst"]["two_point_med_vs_reruns"]["compared"] == 0
    # with a median full-batch end over initialisations of 40 steps: 40 + 60 * 16 / B
    med = {**ends, "full_batch_inits": {"percentiles": {"16": 20, "50": 40, "84": 70}}}
    rec = two_point_curve.check(med, _doc(b, [90, None, 30, 20], reruns, [100, 50, 25, None]))
    assert [r["two_point_med"] for r in rec["rows"]] == pytest.approx([100, 70, 55, 47.5])
    w = rec["worst"]["two_point_med_vs_reruns"]      # 165 / 70 at B = 32 > 47.5 / 21.25 at 128
    assert w["factor"] == pytest.approx(165 / 70) and w["batch_size"] == 32
    assert rec["worst"]["two_point_vs_reruns"]["factor"] == pytest.approx(3)   # unchanged
    high = {**ends, "full_batch_inits": {"percentiles": {"50": 100}}}         # not below S~
    rec = two_point_curve.check(high, _doc(b, [90, None, 30, 20], reruns, [100, 50, 25, None]))
    assert all(r["two_point_med"] is None for r in rec["rows"])
    no_fb = {**ends, "full_set": {"steps": None}}
    rec = two_point_curve.check(no_fb, _doc(b, [90, 45, 30, 20], reruns, [100, 50, 25, 20]))
    assert rec["worst"]["two_point_vs_sweep"]["factor"] is None and rec["note"]


def test_the_command_on_a_committed_report_matches_the_raw_records(capsys):
    """`two-ends DIR --curve --format json` on mnist_mlp with SGD: the curve at every batch size
    recomputed from the raw two_ends.json and validation.json by hand."""
    d = ROOT / "reports/validation/mnist_mlp_sgd"
    assert main(["two-ends", str(d), "--curve", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)[0]
    ends = json.loads((d / "two_ends.json").read_text())
    doc = json.loads((d / "validation.json").read_text())
    s_fb, s_med = ends["full_set"]["steps"], ends["reruns"]["percentiles"]["50"]
    worst = 0.0
    for p, m, row in zip(doc["measured"]["points"],
                         doc["measured"]["repeats"]["rerun_median_steps"], rec["rows"]):
        mine = s_fb + (s_med - s_fb) * ends["b_ref"] / p["batch_size"]
        assert row["two_point"] == pytest.approx(mine)
        worst = max(worst, mine / m, m / mine)
    assert rec["worst"]["two_point_vs_reruns"]["factor"] == pytest.approx(worst)


def test_curve_refuses_the_goal_metric_in_one_line(tmp_path, capsys):
    assert main(["two-ends", str(tmp_path), "--curve", "--goal-metric"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "goal-metric" in err[0]


def test_the_nqms_bend_between_the_two_ends():
    """S_4 with an NQM whose noise penalty falls exactly as 1/B is the two-point curve, so its
    B_crit is B_2pt'; a penalty of another shape (1/B^2) moves it; without n_q, or with
    no penalty at B_ref, there is none, and the reason is given."""
    b = [16, 32, 64, 128, 256]
    ends = {"workload": "w", "optimizer": "sgd", "b_ref": 16, "full_set": {"steps": 10},
            "reruns": {"percentiles": {"16": 90, "50": 100, "84": 130}},
            "two_point": {"50": 16 * (100 / 10 - 1)}}
    hyperbolic = [5 + 300 * 16 / x for x in b]                 # n_q = 5, penalty ~ 1/B
    doc = _doc(b, [100, 60, 40, 30, 20], [None] * 5, hyperbolic)
    doc["measured"]["fit"] = {"b_crit": 100.0}
    out = two_point_curve.bend(ends, doc, {"n_q": 5})
    assert out["value"] == pytest.approx(144, rel=1e-6) and out["over_b_2pt"] == pytest.approx(1)
    assert out["ratio"] == pytest.approx(1.44, rel=1e-6)
    assert out["lo"] == pytest.approx(16 * (90 / 10 - 1), rel=1e-6)
    bent = _doc(b, [100, 60, 40, 30, 20], [None] * 5, [5 + 300 * (16 / x) ** 2 for x in b])
    bent["measured"]["fit"] = {"b_crit": 100.0}
    assert two_point_curve.bend(ends, bent, {"n_q": 5})["over_b_2pt"] != pytest.approx(1, abs=0.05)
    assert two_point_curve.bend(ends, doc, None)["why"].startswith("no miss_split")
    assert "no noise penalty" in two_point_curve.bend(ends, doc, {"n_q": 400})["why"]


def test_a_negative_penalty_is_floored_at_the_networks_end():
    """Where the tuned NQM needs fewer steps at a batch size than without noise (S_q(B) < n_q:
    for SGD and momentum only a tuner shortfall, which miss_split's n_q now rules out; possible
    for mean-field Adam, whose preconditioner sees the noise), S_4 there is the network's full-batch end, not below it: the fit sees
    S_fb^N, and the result equals the fit of the curve with those points set to S_fb^N."""
    b = [16, 32, 64, 128]
    ends = {"workload": "w", "optimizer": "sgd", "b_ref": 16, "full_set": {"steps": 10},
            "reruns": {"percentiles": {"16": 90, "50": 100, "84": 130}},
            "two_point": {"50": 144.0}}
    doc = _doc(b, [100, 60, 40, 30], [None] * 4, [35, 20, 4, 3])      # n_q = 5
    doc["measured"]["fit"] = {"b_crit": 100.0}
    out = two_point_curve.bend(ends, doc, {"n_q": 5})
    steps = [100, 10 + 90 * 15 / 30, 10, 10]
    want = fit_mccandlish(np.array(b, float), np.array(steps)).b_crit
    assert out["value"] == pytest.approx(want)

"""The plan: steps from the sweep and its fit, time and cost, the Pareto front, the
recommendation rule, and the CLI's JSON."""

import json

import numpy as np
import pytest

from nqm.curve import CurvePoint, ScalingCurve
from realnets.cli import main
from realnets.planning.plan import (PlanPoint, make_plan, pareto_front,
                                    steps_to_result)
from realnets.planning.step_time import StepTimePoint, ThroughputRecord, fit_step_time


def _curve(steps, workload="w", optimizer="sgd"):
    pts = tuple(CurvePoint(b, s) for b, s in steps.items())
    return ScalingCurve(pts, source="measured",
                        config={"workload": workload, "optimizer": optimizer, "goal": 0.1})


def _throughput(device_counts=(1, 2, 4), fixed=1e-3, per_example=1e-5, allreduce=2e-3):
    pts = tuple(StepTimePoint(b, n, fixed + per_example * b / n + allreduce * (n - 1) / n,
                              (0, 1), 10, 1, 0.1)
                for b in (16, 64, 256) for n in device_counts)
    return ThroughputRecord("w", "sgd", "cpu", "cpu", 1, pts, fit_step_time(list(pts)))


def test_steps_measured_fit_and_extrapolated():
    # measured points on S = 100 (1 + 64 / B): the sweep's fit recovers it exactly
    rows = steps_to_result(_curve({16: 500, 64: 200, 128: 150}))
    got = {b: (s, src) for b, s, src in rows}
    assert got[16] == (500.0, "measured") and got[64] == (200.0, "measured")
    assert got[32] == (pytest.approx(300.0, rel=1e-6), "fit")
    assert got[256] == (pytest.approx(125.0, rel=1e-6), "fit (extrapolated)")
    assert sorted(got) == [16, 32, 64, 128, 256]        # up to 2x the largest reached
    # a batch size that ran and missed the goal gets no fitted steps
    missed = {b for b, _, _ in steps_to_result(_curve({16: 500, 64: 200, 128: 150, 256: None}))}
    assert missed == {16, 32, 64, 128}
    # one reached point: no fit, only what was measured
    assert steps_to_result(_curve({16: 500, 64: None})) == [(16, 500.0, "measured")]
    with pytest.raises(ValueError, match="no batch size reached"):
        steps_to_result(_curve({16: None}))


def test_pareto_front_matches_brute_force():
    rng = np.random.default_rng(3)
    pts = [PlanPoint(i, 1, 1.0, 1.0, float(t), float(c), None, "measured", "measured")
           for i, (t, c) in enumerate(rng.uniform(1, 10, size=(40, 2)))]
    front = {p.batch_size for p in pareto_front(pts)}
    brute = {p.batch_size for p in pts
             if not any(q.time_to_result_s <= p.time_to_result_s and q.device_hours <= p.device_hours
                        and (q.time_to_result_s, q.device_hours) != (p.time_to_result_s, p.device_hours)
                        for q in pts)}
    assert front == brute


def test_time_cost_and_rules():
    curve = _curve({16: 1000, 64: 300, 256: 200})
    tp = _throughput(per_example=4e-5)         # compute heavy enough that more devices pay
    plan = make_plan(curve, tp, price_per_device_hour=3.0)
    for p in plan.points:
        assert p.time_to_result_s == pytest.approx(p.steps * p.seconds_per_step)
        assert p.device_hours == pytest.approx(p.devices * p.time_to_result_s / 3600)
        assert p.cost == pytest.approx(3.0 * p.device_hours)
        assert p.batch_size % p.devices == 0
    cheapest = min(p.cost for p in plan.front)
    rec = plan.recommendation
    pick = next(p for p in plan.points if (p.batch_size, p.devices) == (rec.batch_size, rec.devices))
    assert pick.cost <= 2 * cheapest
    assert all(p.time_to_result_s >= pick.time_to_result_s for p in plan.front if p.cost <= 2 * cheapest)
    # the reason names the pick and the next faster option on the front, with its saving
    faster = [p for p in plan.front if p.time_to_result_s < pick.time_to_result_s]
    assert rec.reason.startswith(f"B = {pick.batch_size} on {pick.devices} device")
    assert faster, "this curve and step time have a faster option on the front"
    nxt = max(faster, key=lambda p: p.time_to_result_s)
    assert (f"B = {nxt.batch_size} on {nxt.devices} device" in rec.reason.split(";")[1]
            and f"saves {1 - nxt.time_to_result_s / pick.time_to_result_s:.0%}" in rec.reason
            and f"for {nxt.cost / pick.cost:.3g}x the cost" in rec.reason)
    # a deadline: the cheapest that meets it; a budget: the fastest within it
    deadline = sorted(p.time_to_result_s for p in plan.points)[len(plan.points) // 2]
    d = make_plan(curve, tp, 3.0, deadline_s=deadline).recommendation
    meets = [p for p in plan.points if p.time_to_result_s <= deadline]
    assert (d.batch_size, d.devices) == min(((p.cost, p.time_to_result_s), (p.batch_size, p.devices))
                                            for p in meets)[1]
    budget = 2 * cheapest
    b = make_plan(curve, tp, 3.0, budget=budget).recommendation
    fits = [p for p in plan.points if p.cost <= budget]
    fastest = min(fits, key=lambda p: p.time_to_result_s)
    assert (b.batch_size, b.devices) == (fastest.batch_size, fastest.devices)
    impossible = make_plan(curve, tp, 3.0, deadline_s=1e-9).recommendation
    assert "no option meets the deadline" in impossible.reason


@pytest.mark.parametrize("kwargs, names", [
    (dict(price_per_device_hour=-1.0), "price-per-device-hour"),
    (dict(deadline_s=10.0, budget=1.0), "at most one"),
    (dict(budget=0.0), "budget"),
])
def test_bad_plan_requests(kwargs, names):
    with pytest.raises(ValueError, match=names):
        make_plan(_curve({16: 100}), _throughput(), **kwargs)


def test_throughput_of_another_workload_is_refused():
    with pytest.raises(ValueError, match="workload"):
        make_plan(_curve({16: 100}, workload="other"), _throughput())


def test_cli_throughput_then_plan_json(capsys, tmp_path, eight_devices):
    sweep = tmp_path / "sweep"
    assert main(["sweep", "--workload", "nqm", "--batch-sizes", "4,16,64", "--trials", "2",
                 "--max-steps", "3000", "--goal", "1.0", "--out", str(sweep), "--no-progress"]) == 0
    tp = tmp_path / "tp.json"
    assert main(["throughput", "--workload", "nqm", "--batch-sizes", "4,16,64", "--devices", "1,2",
                 "--repeats", "1", "--seconds-per-repeat", "0.05", "--out", str(tp),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["plan", "--sweep", str(sweep), "--throughput", str(tp), "--format", "json",
                 "--price-per-device-hour", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    keys = {"batch_size", "devices", "steps", "seconds_per_step", "time_to_result_s",
            "device_hours", "cost", "source"}
    assert all(keys <= set(p) for p in doc["points"] + doc["front"])
    assert {(p["batch_size"], p["devices"]) for p in doc["points"]} >= {(4, 1), (4, 2), (64, 2)}
    assert set(doc["recommendation"]) == {"batch_size", "devices", "reason"}
    assert main(["plan", "--sweep", str(sweep), "--throughput", str(tp)]) == 0
    assert "recommendation: B = " in capsys.readouterr().out
    # steps from a two-point record beside the sweep (written here by hand, as `two-point`
    # would, with the sweep's goal and its steps at B_ref = 4)
    s4 = next(p for p in doc["points"] if p["batch_size"] == 4)["steps"]
    record = _two_point_record(b_ref=4, s_ref=s4, s_fb=3, pct=(s4, s4 + 1, s4 + 2), goal=1.0)
    record["full_set"]["sample_rows"] = 64
    (sweep / "two_point.json").write_text(json.dumps(record))
    assert main(["plan", "--sweep", str(sweep), "--throughput", str(tp), "--format", "json",
                 "--steps-from", "two-point"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps_from"] == "two-point"
    assert {p["batch_size"] for p in doc["points"]} == {4, 8, 16, 32, 64}
    for p in doc["points"]:
        assert p["steps"] == pytest.approx(3 + (s4 + 1 - 3) * 4 / p["batch_size"])
    assert main(["plan", "--sweep", str(sweep), "--throughput", str(tp),
                 "--steps-from", "two-point"]) == 0
    out = capsys.readouterr().out
    assert "16-84%" in out and "the condition S_fb^N >= 5 does not hold" in out


@pytest.mark.parametrize("argv, names", [
    (["throughput", "--workload", "nqm", "--devices", "99"], "devices"),
    (["throughput", "--workload", "nqm", "--devices", "one"], "devices"),
    (["throughput", "--workload", "digits_mlp", "--batch-sizes", "4096"], "training examples"),
    (["plan", "--sweep", "/no/such/sweep"], "sweep directory"),
    (["plan", "--sweep", "S", "--deadline", "-1"], "deadline"),
    (["plan", "--sweep", "S", "--deadline", "1", "--budget", "1"], "at most one"),
    (["plan", "--sweep", "S", "--throughput", "/no/such.json"], "throughput"),
])
def test_bad_input_is_one_line(capsys, argv, names):
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    argv = [str(root / "sweeps" / "digits_mlp") if a == "S" else a for a in argv]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and names in err


def _two_point_record(b_ref=16, s_ref=1000, s_fb=20, pct=(800.0, 1000.0, 1300.0), goal=0.1):
    value = b_ref * (pct[1] / s_fb - 1)
    return {"workload": "w", "optimizer": "sgd", "goal": goal, "b_ref": b_ref, "s_ref": s_ref,
            "full_set": {"steps": s_fb, "sample_rows": 512},
            "reruns": {"percentiles": {"16": pct[0], "50": pct[1], "84": pct[2]}},
            "value": value, "lo": None, "hi": None,
            "condition": {"min_full_batch_steps": 5, "holds": s_fb >= 5, "why": f"S_fb^N = {s_fb}"}}


def test_two_point_steps_are_the_hyperbola_through_both_ends():
    """From B_ref to the descents' rows in powers of two: S_fb^N + (S~ - S_fb^N) B_ref / B, the
    same with the 16th and 84th percentiles for the band (None where infinite); the largest batch
    is the rows (512 here), or less."""
    from realnets.planning.plan import TwoPointCurve, two_point_steps
    curve = TwoPointCurve(16, 20.0, 1000.0, 800.0, 1300.0, 512)
    assert [r[0] for r in two_point_steps(curve, 300)][-1] == 256
    rows = two_point_steps(curve)
    assert [r[0] for r in rows] == [16, 32, 64, 128, 256, 512]
    for b, s, src, lo, hi in rows:
        assert src == "two-point"
        assert s == pytest.approx(20 + 980 * 16 / b)
        assert lo == pytest.approx(20 + 780 * 16 / b) and hi == pytest.approx(20 + 1280 * 16 / b)
    rows = two_point_steps(TwoPointCurve(16, 20.0, 1000.0, 800.0, float("inf"), 64))
    assert [r[4] for r in rows] == [None, None, None]
    with pytest.raises(ValueError, match="above the largest batch size"):
        two_point_steps(curve, 8)


def test_a_plan_from_the_two_point_record():
    """`two_point.plan_curve` reads a two_point.json against the sweep; every point's time is its
    two-point steps times the step time; the band rides along; the condition's verdict is in
    the plan; a record made before the sweep changed (another goal, other steps at B_ref), or
    without an estimate, is refused."""
    from realnets.validation.two_point import plan_curve
    curve = _curve({16: 1000})
    record = _two_point_record()
    plan = make_plan(curve, _throughput(), train_size=256,
                     two_point=plan_curve(record, curve))
    assert {p.batch_size for p in plan.points} == {16, 32, 64, 128, 256}
    for p in plan.points:
        steps = 20 + 980 * 16 / p.batch_size
        assert p.steps == pytest.approx(steps) and p.source == "two-point"
        assert p.time_to_result_s == pytest.approx(steps * p.seconds_per_step)
        assert p.steps_lo < p.steps < p.steps_hi
    doc = plan.to_dict()
    assert doc["steps_from"] == "two-point" and "holds" in doc["steps_note"]
    assert make_plan(curve, _throughput(), train_size=256).to_dict()["steps_from"] == "sweep"
    assert max(p.batch_size for p in make_plan(
        curve, _throughput(), two_point=plan_curve(record, curve)).points) == 512
    with pytest.raises(ValueError, match="before this sweep changed"):
        plan_curve(_two_point_record(goal=0.2), curve)
    with pytest.raises(ValueError, match="before this sweep changed"):
        plan_curve(record, _curve({16: 900}))
    with pytest.raises(ValueError, match="no estimate"):
        plan_curve({**record, "value": None}, curve)
    assert "B_2pt'(med), the estimate of record: not in this record" in doc["steps_note"]


def test_the_plan_stands_on_the_median_full_batch_end_when_the_record_has_it():
    """With B_2pt'(med) in the record (`two-point` by default since session 42) the curve is the
    hyperbola through the reruns' steps at B_ref whose floor is the median full-batch end over
    initialisations (35 steps here), not the best end S_fb^N = 20; without a value (the median
    not at the target) it falls back to S_fb^N and says why."""
    from realnets.validation.two_point import plan_curve
    curve = _curve({16: 1000})
    med = {"value": 16 * (1000 / 35 - 1), "lo": None, "hi": None}
    record = {**_two_point_record(), "b_2pt_med": med,
              "full_batch_inits": {"seeds": list(range(1, 17)),
                                   "percentiles": {"16": 25.0, "50": 35.0, "84": 60.0}}}
    plan = make_plan(curve, _throughput(), train_size=256, two_point=plan_curve(record, curve))
    for p in plan.points:
        assert p.steps == pytest.approx(35 + 965 * 16 / p.batch_size)
        assert p.steps_lo == pytest.approx(35 + 765 * 16 / p.batch_size)
    note = plan.to_dict()["steps_note"]
    assert "B_2pt'(med) = 441.1" in note and "16 initialisations, 35 steps" in note
    missed = {**record, "b_2pt_med": {**med, "value": None, "why": "not computed: no descent"},
              "full_batch_inits": {"seeds": [1], "percentiles": {"50": None}}}
    plan = make_plan(curve, _throughput(), train_size=256, two_point=plan_curve(missed, curve))
    at = {p.batch_size: p.steps for p in plan.points}
    assert at[16] == pytest.approx(1000) and at[32] == pytest.approx(20 + 980 / 2)
    assert "estimate of record: not computed: no descent" in plan.to_dict()["steps_note"]
    # a record of an earlier version, its median end without a value and no why: the best end,
    # and no advice to rerun without --best-end-only (the record was made without it)
    old = {**missed, "b_2pt_med": {"value": None, "lo": None, "hi": None}}
    note = make_plan(curve, _throughput(), train_size=256,
                     two_point=plan_curve(old, curve)).to_dict()["steps_note"]
    assert "no value in this record" in note and "--best-end-only" not in note
    bare = {k: v for k, v in record.items() if k not in ("b_2pt_med", "full_batch_inits")}
    note = make_plan(curve, _throughput(), train_size=256,
                     two_point=plan_curve(bare, curve)).to_dict()["steps_note"]
    assert "not in this record: rerun `python -m realnets two-point` without --best-end-only" \
        in note


def test_plan_steps_from_two_point_without_a_record_is_one_line(capsys):
    from pathlib import Path
    root = Path(__file__).resolve().parents[3]
    assert main(["plan", "--sweep", str(root / "sweeps" / "digits_mlp"),
                 "--steps-from", "two-point"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "two-point" in err

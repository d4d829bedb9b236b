"""ui.plan_chart: the plan's table and its chart of time to result against cost, on plans made
from a synthetic curve and a throughput record whose step times follow the model exactly."""

import math

import numpy as np
import pandas as pd
import pytest

from nqm.curve import CurvePoint, ScalingCurve
from realnets.planning.plan import make_plan
from realnets.planning.step_time import StepTimePoint, ThroughputRecord, fit_step_time
from ui import plan_chart


def _curve(steps):
    return ScalingCurve(tuple(CurvePoint(b, s) for b, s in steps.items()), source="measured",
                        config={"workload": "w", "optimizer": "sgd", "goal": 0.1})


def _throughput(device_counts=(1, 2, 4, 8)):
    # compute per example large enough that more devices pay off at large batches
    pts = tuple(StepTimePoint(b, n, 1e-3 + 4e-5 * b / n + 2e-3 * (n - 1) / n, (0, 1), 10, 1, 0.1)
                for b in (16, 64, 256, 1024) for n in device_counts)
    return ThroughputRecord("w", "sgd", "cpu", "cpu", 1, pts, fit_step_time(list(pts)))


CURVE = _curve({16: 4000, 32: 2100, 64: 1150, 128: 700, 256: 480, 512: 400})


@pytest.fixture(scope="module", params=[None, 2.5], ids=["device-hours", "priced"])
def plan(request):
    return make_plan(CURVE, _throughput(), price_per_device_hour=request.param)


def layers(chart):
    """(mark type, data frame, encoding) of each layer of the chart's spec."""
    spec = chart.to_dict()
    out = []
    for layer in spec["layer"]:
        values = spec["datasets"][layer["data"]["name"]]
        mark = layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"]
        out.append((mark, pd.DataFrame(values), layer["encoding"]))
    return out


def test_table_holds_every_option_and_marks_the_front_and_the_pick(plan):
    table = plan_chart.plan_table(plan)
    assert len(table) == len(plan.points) > len(plan.front) >= 2
    assert set(zip(table["batch_size"], table["devices"])) == {
        (p.batch_size, p.devices) for p in plan.points}
    on_front = set(zip(*[table.loc[table["front"], c] for c in ("batch_size", "devices")]))
    assert on_front == {(p.batch_size, p.devices) for p in plan.front}
    (pick,) = table[table["recommended"]].itertuples()
    assert (pick.batch_size, pick.devices) == (plan.recommendation.batch_size,
                                               plan.recommendation.devices)
    assert pick.label == f"B={pick.batch_size} x{pick.devices}"
    # the numbers are the plan's: time = steps x step time; device-hours = devices x time / 3600
    assert np.allclose(table["time_to_result_s"], table["steps"] * table["seconds_per_step"])
    assert np.allclose(table["device_hours"], table["devices"] * table["time_to_result_s"] / 3600)
    if plan.price_per_device_hour is None:
        assert table["cost"].isna().all()
    else:
        assert np.allclose(table["cost"], 2.5 * table["device_hours"])
    # 1024 did not reach the goal: its steps come from the fit, marked as such
    assert set(table.loc[table["batch_size"] == 1024, "source"]) == {"fit (extrapolated)"}


def test_chart_labels_every_front_point_and_marks_the_recommendation(plan):
    chart = plan_chart.plan_chart(plan)
    drawn = layers(chart)
    marks = [m for m, _, _ in drawn]
    assert marks == ["circle", "line", "circle", "text", "point", "text"]
    options, line, front_points, front_labels, pick, pick_label = (d for _, d, _ in drawn)
    front = {(p.batch_size, p.devices) for p in plan.front}
    assert len(options) == len(plan.points)
    for frame in (line, front_points, front_labels):
        assert set(zip(frame["batch_size"], frame["devices"])) == front
    # every front point is labelled "B=<batch size> x<devices>", and the text is drawn from it
    assert sorted(front_labels["label"]) == sorted(f"B={b} x{n}" for b, n in front)
    assert drawn[3][2]["text"]["field"] == "label"
    # the line runs through the front in order of time
    assert drawn[1][2]["order"]["field"] == "time_to_result_s"
    # the recommendation: one large red diamond, labelled
    rec = plan.recommendation
    assert list(zip(pick["batch_size"], pick["devices"])) == [(rec.batch_size, rec.devices)]
    pick_mark = chart.to_dict()["layer"][4]["mark"]
    assert pick_mark["shape"] == "diamond" and pick_mark["size"] > 3 * 70
    assert list(pick["kind"]) == ["recommended"] and set(front_points["kind"]) == {"Pareto front"}
    colours = dict(zip(plan_chart.KINDS, plan_chart.KIND_COLOURS.range))
    assert colours["recommended"] not in (colours["Pareto front"], colours["option"])
    assert list(pick_label["pick_label"]) == [f"recommended: B={rec.batch_size} x{rec.devices}"]
    # every tooltip holds every field of the option
    for _, _, encoding in drawn:
        if "tooltip" in encoding:
            fields = {t["field"] for t in encoding["tooltip"]}
            assert {"batch_size", "devices", "steps", "seconds_per_step", "time_to_result_s",
                    "device_hours", "source", "step_time_source", "front",
                    "recommended"} <= fields


def test_chart_axes_are_log_and_its_data_hold_no_nan(plan):
    drawn = layers(plan_chart.plan_chart(plan))
    priced = plan.price_per_device_hour is not None
    for _, frame, encoding in drawn:
        assert encoding["x"]["field"] == "time_to_result_s"
        assert encoding["y"]["field"] == ("cost" if priced else "device_hours")
        assert encoding["x"]["scale"]["type"] == encoding["y"]["scale"]["type"] == "log"
        numbers = frame.select_dtypes("number")
        assert np.isfinite(numbers.to_numpy()).all() and (numbers > 0).all().all()
        assert not frame.isna().any().any()
    title = drawn[0][2]["y"]["title"]
    assert title == ("cost (at 2.5 per device-hour)" if priced else "device-hours")


def test_a_single_option_draws_a_front_of_one():
    one = make_plan(_curve({64: 500}), _throughput(device_counts=(1,)))
    table = plan_chart.plan_table(one)
    assert len(table) == 1 and table["front"].all() and table["recommended"].all()
    drawn = layers(plan_chart.plan_chart(one))
    assert all(len(frame) == 1 for _, frame, _ in drawn)
    assert math.isfinite(drawn[0][1]["time_to_result_s"].iloc[0])

"""ui.plan_page: the Plan tab's step time measured here and the plan of a sweep on it, with one
ValueError line for each kind of bad input."""

from pathlib import Path

import pytest

from nqm.curve import CurvePoint, ScalingCurve
from realnets.planning.plan import make_plan
from realnets.planning.step_time import StepTimePoint, ThroughputRecord, fit_step_time
from ui import measured, plan_page

ROOT = Path(__file__).resolve().parents[2]


def throughput(workload="digits_mlp", optimizer="momentum", device_counts=(1, 2, 4)):
    pts = tuple(StepTimePoint(b, n, 2e-4 + 1e-6 * b / n + 1e-4 * (n - 1) / n, (1e-4, 1e-3), 100,
                              3, 0.5)
                for b in (8, 64, 512) for n in device_counts)
    return ThroughputRecord(workload, optimizer, "cpu", "cpu", 1, pts, fit_step_time(list(pts)))


@pytest.fixture(scope="module")
def digits():
    return measured.load_sweep_dir(ROOT / "sweeps" / "digits_mlp")


def sweep_of(steps, **config):
    curve = ScalingCurve(tuple(CurvePoint(b, s) for b, s in steps.items()), source="measured",
                         config={"workload": "nqm", "optimizer": "sgd", "goal": 1.0,
                                 "batch_sizes": list(steps), **config})
    return measured.measured(curve, name="synthetic")


def test_batch_sizes_measured_are_the_sweeps_that_fit_the_training_set(digits):
    assert plan_page.batch_sizes_to_measure(digits, 1618) == (8, 16, 32, 64, 128, 256, 512, 1024)
    assert plan_page.batch_sizes_to_measure(digits, 300) == (8, 16, 32, 64, 128, 256)
    assert plan_page.batch_sizes_to_measure(digits, None)[-1] == 1024
    with pytest.raises(ValueError, match="none of the sweep's batch sizes"):
        plan_page.batch_sizes_to_measure(digits, 4)


def test_plan_of_a_sweep_is_the_clis_plan(digits):
    record = throughput()
    got = plan_page.plan_of(digits, record, 2.0, None, None, train_size=1618)
    assert got == make_plan(digits.curve, record, 2.0, train_size=1618)
    assert {p.devices for p in got.points} == {1, 2, 4}
    assert max(p.batch_size for p in got.points) == 1024      # 2048 exceeds the training set
    with pytest.raises(ValueError, match="at most one of the deadline and the budget"):
        plan_page.plan_of(digits, record, None, 10.0, 1.0)
    with pytest.raises(ValueError, match="price-per-device-hour"):
        plan_page.plan_of(digits, record, -1.0)
    with pytest.raises(ValueError, match="measured for workload 'mnist_mlp'"):
        plan_page.plan_of(digits, throughput(workload="mnist_mlp"))


def test_a_sweep_that_reached_nothing_or_is_not_a_sweep_is_refused():
    with pytest.raises(ValueError, match="no batch size reached the goal"):
        plan_page.plan_of(sweep_of({8: None, 16: None}), throughput("nqm", "sgd"))
    batch_science = measured.measured(ScalingCurve((CurvePoint(8, 100),), source="batch_science",
                                                   config={"dataset": "mnist"}), name="bs")
    with pytest.raises(ValueError, match="names no workload"):
        plan_page.plan_of(batch_science, throughput("nqm", "sgd"))


def test_measured_here_times_the_sweeps_workload_at_its_batch_sizes():
    from realnets import workloads

    sweep = sweep_of({4: 300, 16: 90}, max_rows_per_device=4096)
    task = workloads.get("nqm").build()
    lines = []
    record = plan_page.measure_here(sweep, task, (1,), log=lines.append, seconds_per_repeat=0.02)
    assert (record.workload, record.optimizer) == ("nqm", "sgd")
    assert [(p.batch_size, p.devices) for p in record.points] == [(4, 1), (16, 1)]
    assert all(p.seconds_per_step > 0 and p.repeats == 3 for p in record.points)
    assert len(lines) == 2 and lines[0].startswith("B =      4 on 1 device")
    # and it plans with that sweep at once
    plan = plan_page.plan_of(sweep, record)
    assert {p.batch_size for p in plan.points} >= {4, 16}

"""The step-time model, the throughput file and the measurement through the trainer."""

import json

import numpy as np
import pytest

from realnets.planning.step_time import (StepTimePoint, ThroughputRecord, fit_step_time,
                                         parse_throughput, read_throughput)
from realnets.planning.throughput import (check_request, fitting_batch_sizes, measure_point,
                                          parse_device_counts)
from realnets.training.trainer import RunConfig, TrialSpec, eval_steps, run_trials
from realnets.workloads import NQM_WORKLOAD
from realnets.workloads.tasks import quadratic_task


def _point(b, n, t):
    return StepTimePoint(b, n, t, (t, t), 10, 1, 0.5)


def test_fit_recovers_known_coefficients_over_batch_and_devices():
    fixed, per_example, allreduce = 2e-3, 5e-6, 1.5e-3
    points = [_point(b, n, fixed + per_example * b / n + allreduce * (n - 1) / n)
              for b in (64, 256, 1024, 4096) for n in (1, 2, 4, 8)]
    m = fit_step_time(points)
    np.testing.assert_allclose([m.fixed, m.per_example, m.allreduce],
                               [fixed, per_example, allreduce], rtol=1e-6)
    assert m.rms_relative_error < 1e-9
    assert (m.batch_range, m.device_range) == ((64, 4096), (1, 8))


def test_fit_states_its_error_when_the_model_does_not_hold():
    # step time quadratic in B: no fixed + linear model reproduces it; the error says so
    points = [_point(b, 1, 1e-3 + 1e-9 * b ** 2) for b in (16, 128, 1024, 8192)]
    m = fit_step_time(points)
    assert m.allreduce == 0.0                      # one device count: not identifiable
    rel = np.array([m.seconds_per_step(p.batch_size, 1) / p.seconds_per_step - 1 for p in points])
    assert m.max_relative_error == pytest.approx(np.abs(rel).max())
    assert m.max_relative_error > 0.3


def test_record_round_trip_and_measured_before_model():
    points = (_point(16, 1, 1e-3), _point(64, 1, 2e-3))
    rec = ThroughputRecord("w", "sgd", "cpu", "cpu", 1, points, fit_step_time(list(points)))
    back = ThroughputRecord.from_dict(rec.to_dict())
    assert back == rec
    assert back.seconds_per_step(64, 1) == (2e-3, "measured")
    t, source = back.seconds_per_step(32, 1)
    assert source == "model" and 1e-3 < t < 2e-3
    assert back.seconds_per_step(256, 1)[1] == "model (extrapolated)"
    with pytest.raises(ValueError, match="points"):
        ThroughputRecord.from_dict({"points": []})
    with pytest.raises(ValueError, match="seconds_per_step"):
        ThroughputRecord.from_dict({"points": [{"batch_size": 4}]})


def test_trainer_timing_counts_every_step_once():
    task = quadratic_task(NQM_WORKLOAD.problem())
    run = RunConfig(batch_size=8, max_steps=20, goal=-1e30, eval_resolution=1.0,
                    stop_at_first_goal=False, noise_every=0)
    timing = {}
    run_trials(task, run, [TrialSpec(0, 1e-3)], timing=timing)
    assert timing["train_steps"] == 19                 # the first step is timed apart
    assert timing["evals"] == len(eval_steps(20, 1.0))
    assert min(timing["first_step_seconds"], timing["train_seconds"], timing["eval_seconds"]) > 0


def test_measure_point_on_several_devices(eight_devices):
    from realnets.training.step import compile_steps

    task = quadratic_task(NQM_WORKLOAD.problem())     # a new loss function: nothing cached yet
    before = compile_steps.cache_info().misses
    p = measure_point(task, "sgd", 16, 4, repeats=2, seconds_per_repeat=0.05, max_steps=50)
    assert (p.batch_size, p.devices, p.repeats) == (16, 4, 2)
    assert 0 < p.spread[0] <= p.spread[1] and p.compile_seconds > 0
    # the probe and both repeats ran one compiled train step (the compile is measured once)
    assert compile_steps.cache_info().misses - before == 1


def test_repeats_are_interleaved_and_summarised_by_their_median(monkeypatch):
    """The measuring logic on a fake trainer clock: probes first, then rounds over the pairs in
    turn, the steps per repeat from the probe, the median and range of each pair's repeats."""
    from realnets.planning import throughput

    calls, budgets = [], set()
    per_step = {(16, 1): iter([2e-3, 1e-3, 5e-3, 3e-3]),   # probe, then three repeats
                (64, 2): iter([4e-3, 6e-3, 4e-3, 9e-3])}

    def fake_timed(task, optimizer, batch_size, devices, steps, max_rows_per_device, max_steps):
        calls.append((batch_size, len(devices), steps))
        budgets.add(max_steps)
        t = next(per_step[batch_size, len(devices)])
        return {"first_step_seconds": 0.5, "train_seconds": t * (steps - 1),
                "train_steps": steps - 1}

    monkeypatch.setattr(throughput, "_timed", fake_timed)
    monkeypatch.setattr(throughput.jax, "devices", lambda: ["d0", "d1"])
    points = throughput._measure(None, "sgd", [(16, 1), (64, 2)], repeats=3,
                                 seconds_per_repeat=0.1, max_rows_per_device=4096,
                                 max_steps=2000, log=None)
    # steps per repeat: ceil(0.1 s / probe's time per step), at least 8
    assert [c[2] for c in calls[:2]] == [throughput._PROBE_STEPS + 1] * 2
    assert calls[2:] == [(16, 1, 51), (64, 2, 26)] * 3
    # one budget for the probe and the repeats (each cut at its steps): one compiled step a pair
    assert budgets == {2000}
    a, b = points
    assert (a.steps, a.seconds_per_step, a.spread, a.compile_seconds) == (50, 3e-3, (1e-3, 5e-3), 0.5)
    assert (b.steps, b.seconds_per_step, b.spread) == (25, 6e-3, (4e-3, 9e-3))


@pytest.mark.parametrize("sizes, devices, train, names", [
    ([16], [16], None, "at most the 8 device"),
    ([6], [4], None, "splits evenly"),
    ([64], [1], 50, "exceeds the 50 training"),
    ([0], [1], None, "batch-sizes entry"),
    ([16], [0], None, "devices entry"),
])
def test_bad_requests_name_the_flag(sizes, devices, train, names):
    with pytest.raises(ValueError, match=names):
        check_request(sizes, devices, train)


def _record():
    points = (_point(16, 1, 1e-3), _point(64, 2, 2e-3), _point(64, 1, 3e-3))
    return ThroughputRecord("w", "sgd", "cpu", "cpu", 1, points, fit_step_time(list(points)))


def test_a_throughput_file_reads_back_as_written(tmp_path):
    record = _record()
    path = tmp_path / "tp.json"
    path.write_text(json.dumps(record.to_dict()))
    assert read_throughput(path) == record
    assert parse_throughput(path.read_bytes(), "tp.json") == record


@pytest.mark.parametrize("content, message", [
    (None, "cannot read .*missing.json \\(No such file"),
    ("{not json", "is not JSON"),
    (b"\xff\xfe\x00", "is not (JSON|a text file)"),
    ('{"points": []}', "non-empty 'points' list"),
    ('{"points": [{"batch_size": 8}]}', "a throughput point needs"),
    ('[1, 2]', "must be a JSON object"),
])
def test_bad_throughput_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / ("missing.json" if content is None else "tp.json")
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message) as err:
        read_throughput(path)
    assert "\n" not in str(err.value) and str(err.value).startswith("throughput")
    with pytest.raises(ValueError, match="is a directory"):
        read_throughput(tmp_path)


def test_device_counts():
    assert parse_device_counts("1") == (1,)
    assert parse_device_counts(" 4, 1,2,2 ") == (1, 2, 4)
    for bad, message in (("", "at least one"), ("1,two", "whole numbers"), ("0,1", ">= 1"),
                         ("1.5", "whole numbers")):
        with pytest.raises(ValueError, match=f"devices must .*{message}"):
            parse_device_counts(bad)


def test_batch_sizes_that_fit_the_training_set():
    assert fitting_batch_sizes([1024, 8, 64], 100) == (8, 64)
    assert fitting_batch_sizes([1024, 8], None) == (8, 1024)
    with pytest.raises(ValueError, match="none of the sweep's batch sizes"):
        fitting_batch_sizes([64, 128], 32)


def test_the_table_names_the_device_kind_once_when_it_is_the_platform():
    from realnets.planning.render import throughput_table
    points = tuple(_point(b, 1, 1e-3 + 1e-6 * b) for b in (8, 16, 32, 64))
    fit = fit_step_time(list(points))
    cpu = throughput_table(ThroughputRecord("w", "sgd", "cpu", "cpu", 1, points, fit))
    assert "w (sgd) on cpu, 1 process(es)" in cpu
    gpu = throughput_table(ThroughputRecord("w", "sgd", "gpu", "NVIDIA A100", 2, points, fit))
    assert "w (sgd) on gpu (NVIDIA A100), 2 process(es)" in gpu

"""Running a sweep: results as trials finish, resume after a kill, no repeats, no broken file."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from realnets import store
from realnets.sweeps.records import SweepConfig, load_sweep
from realnets.sweeps.runner import run_sweep
from realnets.workloads.search_space import TrialSearchSpace

ROOT = Path(__file__).resolve().parents[3]
SWEEP_ARGS = ["sweep", "--workload", "nqm", "--batch-sizes", "64,256", "--trials", "4",
              "--max-steps", "400", "--lr-range", "0.05,2", "--vmap-trials", "1", "--no-progress"]


def _cli(args, **kw):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    return subprocess.Popen([sys.executable, "-m", "realnets", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _keys(records):
    return [(r["batch_size"], r["trial_id"]) for r in records]


class _Started:
    """A sweep subprocess started and not yet waited for; `finished()` waits (once) and returns
    its directory."""

    def __init__(self, out: Path):
        self.out = out
        self.proc = _cli([*SWEEP_ARGS, "--out", str(out)])

    def finished(self) -> Path:
        _, err = self.proc.communicate(timeout=300)
        assert self.proc.returncode == 0, err
        return self.out


@pytest.fixture(scope="module")
def uninterrupted_started(tmp_path_factory):
    """The sweep run straight through, the reference: started here, so that it runs beside the
    kill test's own two runs, which wait for it only at their end."""
    started = _Started(tmp_path_factory.mktemp("full"))
    yield started
    if started.proc.poll() is None:
        started.proc.kill()
        started.proc.communicate()


@pytest.fixture(scope="module")
def uninterrupted(uninterrupted_started):
    return uninterrupted_started.finished()


def test_kill_then_resume_loses_nothing_and_repeats_nothing(tmp_path, uninterrupted_started):
    out = tmp_path / "killed"
    proc = _cli([*SWEEP_ARGS, "--out", str(out)])
    log = out / "trials.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if log.exists() and len(store.read_jsonl(log)) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    before = log.read_text().splitlines()
    assert 2 <= len(before) < 8

    resumed = _cli([*SWEEP_ARGS, "--out", str(out)])
    _, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    after = log.read_text().splitlines()
    assert after[:len(before)] == before            # finished trials kept, byte for byte
    keys = _keys([json.loads(line) for line in after])
    assert len(keys) == len(set(keys)) == 8         # every trial once
    uninterrupted = uninterrupted_started.finished()
    _, full = load_sweep(uninterrupted)
    _, mine = load_sweep(out)
    by_key = {(r.batch_size, r.trial_id): r for r in full}
    for r in mine:                                  # same trials, same results
        assert r.steps_to_goal == by_key[(r.batch_size, r.trial_id)].steps_to_goal
        assert r.status == by_key[(r.batch_size, r.trial_id)].status
    curve = json.loads((out / "curve.json").read_text())
    assert [p["steps"] for p in curve["points"]] == [
        p["steps"] for p in json.loads((uninterrupted / "curve.json").read_text())["points"]]


def test_rerun_of_finished_sweep_runs_nothing(uninterrupted, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("config.json", "trials.jsonl"):
        (copy / name).write_bytes((uninterrupted / name).read_bytes())
    config = SweepConfig.from_dict(json.loads((copy / "config.json").read_text()))
    assert config.batch_sizes == (64, 256) and config.search == TrialSearchSpace((0.05, 2.0))
    calls = []
    run_sweep(config, copy, progress=False, on_trials=calls.append)
    assert calls == []
    assert (copy / "trials.jsonl").read_bytes() == (uninterrupted / "trials.jsonl").read_bytes()


def test_cut_final_line_is_ignored_and_repaired(tmp_path):
    log = tmp_path / "trials.jsonl"
    store.append_jsonl(log, [{"batch_size": 4, "trial_id": 0}])
    with log.open("a") as f:
        f.write('{"batch_size": 4, "tri')             # a write cut short by a kill
    assert _keys(store.read_jsonl(log)) == [(4, 0)]
    store.repair_jsonl(log)
    store.append_jsonl(log, [{"batch_size": 4, "trial_id": 1}])
    assert _keys(store.read_jsonl(log)) == [(4, 0), (4, 1)]


def test_corrupt_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    log = tmp_path / "trials.jsonl"
    log.write_text('{"batch_size": 4, "trial_id": 0}\nnot json\n{"batch_size": 4, "trial_id": 1}\n')
    with pytest.raises(ValueError, match="line 2"):
        store.read_jsonl(log)


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    store.write_json_atomic(tmp_path / "curve.json", {"a": float("nan"), "b": [1.0, float("inf")]})
    assert json.loads((tmp_path / "curve.json").read_text()) == {"a": None, "b": [1.0, None]}
    assert [p.name for p in tmp_path.iterdir()] == ["curve.json"]


def test_other_study_in_the_same_directory_is_refused(uninterrupted, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "config.json").write_bytes((uninterrupted / "config.json").read_bytes())
    config = SweepConfig(workload="nqm", batch_sizes=(64,), trials=4, max_steps=400, goal=0.01,
                         optimizer="sgd", search=TrialSearchSpace((0.05, 2.0)))
    with pytest.raises(ValueError, match="goal"):
        run_sweep(config, copy, progress=False)


def _blocks_sweep():
    # two blocks per batch size; at B = 256 the second would reach the goal at step 125, after
    # the first did (61): the serial run stops it at 61
    return SweepConfig(workload="nqm", batch_sizes=(64, 256), trials=4, max_steps=400, goal=0.1,
                       optimizer="sgd", search=TrialSearchSpace((0.05, 2.0)), seed=2,
                       vmap_trials=2)


def test_an_executor_finishing_blocks_out_of_order_writes_the_serial_records(tmp_path,
                                                                           one_default_device):
    """The seam: blocks run with no limit, returned last first, are written as the serial
    executor writes them (each batch size's blocks in order, cut to the serial rule). On one CPU
    device (`one_default_device`), as the subprocess sweeps above: the order and the cut do not
    depend on the sharding."""
    from realnets import workloads
    from realnets.training.trainer import run_trials

    config = _blocks_sweep()
    task = workloads.get("nqm").build()
    run_sweep(config, tmp_path / "serial", progress=False, task=task)
    asked = []

    def last_first(blocks, stop_after):
        done = [run_trials(task, b.run, list(b.trials)) for b in blocks]     # no limit
        for index in reversed(range(len(blocks))):
            asked.append(stop_after(blocks[index]))
            yield index, done[index]

    run_sweep(config, tmp_path / "parallel", progress=False, task=task, executor=last_first)
    serial = (tmp_path / "serial" / "trials.jsonl").read_text().splitlines()
    parallel = (tmp_path / "parallel" / "trials.jsonl").read_text().splitlines()
    assert sorted(parallel) == sorted(serial)
    for batch_size in config.batch_sizes:       # within a batch size, the serial order
        assert ([line for line in parallel if json.loads(line)["batch_size"] == batch_size]
                == [line for line in serial if json.loads(line)["batch_size"] == batch_size])
    cut = [json.loads(line) for line in serial if "an earlier trial" in line]
    assert {r["batch_size"] for r in cut} == {64, 256}      # the cut was needed at both
    assert asked == [None] * 4          # blocks returned early could not know a limit
    assert ((tmp_path / "parallel" / "curve.json").read_text()
            == (tmp_path / "serial" / "curve.json").read_text())

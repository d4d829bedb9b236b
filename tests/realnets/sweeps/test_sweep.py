"""The sweep directory: results as trials finish, resume after a kill, no repeats, no broken file."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from realnets import store
from realnets.workloads.search_space import SearchSpace
from realnets.sweeps.sweep import (SweepConfig, b_crit_resampled, best_trial, build_curve, load_sweep,
                            run_sweep)

ROOT = Path(__file__).resolve().parents[3]
SWEEP_ARGS = ["sweep", "--workload", "nqm", "--batch-sizes", "64,256", "--trials", "4",
              "--max-steps", "400", "--lr-range", "0.05,2", "--vmap-trials", "1", "--no-progress"]


def _cli(args, **kw):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1")
    return subprocess.Popen([sys.executable, "-m", "realnets", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _keys(records):
    return [(r["batch_size"], r["trial_id"]) for r in records]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    proc = _cli([*SWEEP_ARGS, "--out", str(out)])
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return out


def test_kill_then_resume_loses_nothing_and_repeats_nothing(tmp_path, uninterrupted):
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
    _, full = load_sweep(uninterrupted)
    _, mine = load_sweep(out)
    by_key = {(r["batch_size"], r["trial_id"]): r for r in full}
    for r in mine:                                  # same trials, same results
        assert r["steps_to_goal"] == by_key[(r["batch_size"], r["trial_id"])]["steps_to_goal"]
        assert r["status"] == by_key[(r["batch_size"], r["trial_id"])]["status"]
    curve = json.loads((out / "curve.json").read_text())
    assert [p["steps"] for p in curve["points"]] == [
        p["steps"] for p in json.loads((uninterrupted / "curve.json").read_text())["points"]]


def test_rerun_of_finished_sweep_runs_nothing(uninterrupted, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("config.json", "trials.jsonl"):
        (copy / name).write_bytes((uninterrupted / name).read_bytes())
    config = SweepConfig(**{**json.loads((copy / "config.json").read_text()),
                            "batch_sizes": (64, 256),
                            "search": SearchSpace((0.05, 2.0))})
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
                         optimizer="sgd", search=SearchSpace((0.05, 2.0)))
    with pytest.raises(ValueError, match="goal"):
        run_sweep(config, copy, progress=False)


def test_curve_takes_the_first_step_any_trial_reached():
    records = [
        {"batch_size": 8, "trial_id": 0, "status": "COMPLETE", "steps_to_goal": 120,
         "learning_rate": 0.1, "momentum": 0.9},
        {"batch_size": 8, "trial_id": 1, "status": "COMPLETE", "steps_to_goal": 90,
         "learning_rate": 0.3, "momentum": 0.5},
        {"batch_size": 8, "trial_id": 2, "status": "INFEASIBLE", "steps_to_goal": None,
         "learning_rate": 9.0, "momentum": 0.99},
        {"batch_size": 16, "trial_id": 0, "status": "INCOMPLETE", "steps_to_goal": None,
         "learning_rate": 0.1, "momentum": 0.9},
    ]
    config = {"search": {"learning_rate": [1e-3, 10.0], "one_minus_momentum": [1e-2, 1.0]}}
    curve = build_curve(records, config)
    first, second = curve.points
    assert (first.steps, first.learning_rate, first.momentum) == (90, 0.3, 0.5)
    assert [t["status"] for t in first.trials] == ["COMPLETE", "COMPLETE", "INFEASIBLE"]
    assert second.steps is None and second.learning_rate is None
    assert first.edge == ()


def test_best_trial_on_the_edge_of_the_search_is_flagged():
    records = [{"batch_size": 8, "trial_id": 0, "status": "COMPLETE", "steps_to_goal": 10,
                "learning_rate": 9.0, "momentum": 0.995}]
    config = {"search": {"learning_rate": [1e-3, 10.0], "one_minus_momentum": [1e-2, 1.0]}}
    assert build_curve(records, config).points[0].edge == ("learning_rate", "momentum")


def test_best_trial_is_the_fewest_steps_then_the_lowest_trial_id():
    records = [{"trial_id": 3, "steps_to_goal": 50}, {"trial_id": 1, "steps_to_goal": None},
               {"trial_id": 2, "steps_to_goal": 50}, {"trial_id": 0, "steps_to_goal": 60}]
    assert best_trial(records)["trial_id"] == 2       # tie at 50 steps: the lower id
    assert best_trial(records[1:2]) is None           # none reached the goal
    assert best_trial([]) is None
    # batch_science ids are strings, in numeric order: "2" before "10"
    assert best_trial([{"trial_id": "10", "steps_to_goal": 7},
                       {"trial_id": "2", "steps_to_goal": 7}])["trial_id"] == "2"


def _mccandlish_records(other_steps, s_min=100.0, b_crit=64.0, trials=4):
    """Records whose best trial per batch size sits exactly on S = s_min (1 + b_crit / B); the
    other trials took `other_steps(best)` steps (None: not reached)."""
    records = []
    for b in (8, 16, 32, 64, 128, 256, 512):
        best = round(s_min * (1 + b_crit / b))
        for i in range(trials):
            steps = best if i == 0 else other_steps(best)
            records.append({"batch_size": b, "trial_id": i, "learning_rate": 0.1,
                            "status": "COMPLETE" if steps is not None else "INCOMPLETE",
                            "steps_to_goal": steps, "steps_run": steps or 1000})
    return records


def test_b_crit_resampling_needs_uncensored_trials():
    records = _mccandlish_records(lambda best: best)
    censored = b_crit_resampled(build_curve(records, {"goal": 0.1, "full_trials": False}))
    assert censored["available"] is False and "--full-trials" in censored["note"]


def test_b_crit_resampling_of_identical_trials_is_the_fit_itself():
    # Every trial of a batch size took the same steps: every resample is the same curve.
    curve = build_curve(_mccandlish_records(lambda best: best), {"goal": 0.1, "full_trials": True})
    r = b_crit_resampled(curve, resamples=50)
    assert r["available"] and r["fitted"] == 50
    assert r["p16"] == pytest.approx(r["p84"], rel=1e-9)
    assert r["median"] == pytest.approx(64.0, rel=0.02)        # the curve's own B_crit (rounded)


def test_b_crit_resampling_spreads_when_the_best_trial_is_missed():
    # The other trials are 1.5x slower at small batch sizes only: a resample that misses the
    # best trial there (probability (3/4)^4 = 0.32 per batch size) steepens the curve's left
    # end, so B_crit rises; with the best trial everywhere it is the curve's own 64.
    slow = _mccandlish_records(lambda best: round(1.5 * best) if best > 200 else best)
    curve = build_curve(slow, {"goal": 0.1, "full_trials": True})
    r = b_crit_resampled(curve, resamples=200, seed=1)
    assert r["fitted"] == 200
    assert r["p16"] == pytest.approx(64.0, rel=0.05) and r["p84"] > 1.2 * 64.0
    assert b_crit_resampled(curve, resamples=200, seed=1) == r       # seeded: reproducible
    # unreached other trials: resamples that miss every winner leave points unreached, not errors
    gaps = build_curve(_mccandlish_records(lambda best: None), {"goal": 0.1, "full_trials": True})
    r = b_crit_resampled(gaps, resamples=100)
    assert r["available"] and 0 < r["fitted"] <= 100

"""Several hosts: two processes on localhost joined by `jax.distributed.initialize` (gloo CPU
collectives, 2 simulated devices each, so 4 global devices) train in lockstep to the same
parameters as one process with 4 local devices, and a two-process `python -m realnets sweep`
writes one trials.jsonl (process 0 only) with the single-process sweep's steps to goal.

Every JAX program runs in a subprocess: the device count and the distributed runtime are fixed
when jax starts, so the test session's own devices (tests/conftest.py may set 8) play no part.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "realnets" / "multihost_worker.py"
TIMEOUT_S = 120
LOCAL_DEVICES = 2      # per process; 2 processes -> 4 global devices
PROCESSES = 2


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jax_env(devices: int) -> dict:
    """The environment of a JAX subprocess with `devices` simulated CPU devices.

    XLA's backend optimisation level 0 makes the tiny programs compile about 3x faster (compiling
    dominates these runs on a 2-core machine); every process of a comparison uses it, and it
    changes neither the program nor its collectives.
    """
    env = dict(os.environ)
    env["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={devices} "
                        "--xla_backend_optimization_level=0")
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_all(jobs: dict[str, tuple[list[str], dict]], logs: Path, cwd: Path,
            timeout_s: float = TIMEOUT_S) -> dict[str, str]:
    """Starts every job at once, waits for all (`timeout_s` in total); returns their stdout.

    A job that fails or a timeout kills the others at once (a process whose peer died would
    otherwise wait in a collective until the distributed runtime gives up) and fails the test
    with every job's stderr.
    """
    logs.mkdir(parents=True, exist_ok=True)
    procs = {}
    for name, (argv, env) in jobs.items():
        out = open(logs / f"{name}.out", "w")
        err = open(logs / f"{name}.err", "w")
        procs[name] = (subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err), out, err)
    deadline = time.monotonic() + timeout_s
    problem = None
    while problem is None:
        codes = {name: p.poll() for name, (p, _, _) in procs.items()}
        failed = [n for n, c in codes.items() if c not in (None, 0)]
        if failed:
            problem = f"{', '.join(failed)} exited with status {[codes[n] for n in failed]}"
        elif all(c == 0 for c in codes.values()):
            break
        elif time.monotonic() > deadline:
            problem = f"timed out after {timeout_s} s"
        else:
            time.sleep(0.2)
    for p, out, err in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()
        out.close()
        err.close()
    if problem is not None:
        tails = "\n".join(f"--- {n} stderr ---\n{(logs / f'{n}.err').read_text()[-3000:]}"
                          for n in procs)
        pytest.fail(f"{problem}\n{tails}")
    return {n: (logs / f"{n}.out").read_text() for n in procs}


def multihost_jobs(argv_for, local_devices: int = LOCAL_DEVICES) -> dict:
    """PROCESSES jobs joined through one free localhost port: argv_for(coordinator, i)."""
    coordinator = f"127.0.0.1:{free_port()}"
    return {f"process{i}": (argv_for(coordinator, i), jax_env(local_devices))
            for i in range(PROCESSES)}


def cli_jobs(argv: list[str], single: list[str] | None = None) -> dict:
    """`python ARGV` (a `python -m realnets` command) on PROCESSES processes joined through one
    coordinator, and with `single` that command line on one process with all their devices."""
    jobs = multihost_jobs(lambda coord, i: [
        sys.executable, *argv, "--coordinator", coord, "--num-processes", str(PROCESSES),
        "--process-id", str(i)])
    if single is not None:
        jobs["single"] = ([sys.executable, *single], jax_env(PROCESSES * LOCAL_DEVICES))
    return jobs


def assert_the_shipped_ends(got: dict, want: dict) -> None:
    """A two-point or two-ends record against the shipped one (made by one process on one
    device): the same B_ref, reruns, B_2pt', whole-set steps and the 16 initialisations'
    steps; the whole-set target up to the all-reduce's float rounding."""
    assert (got["b_ref"], got["reruns"], got["two_point"]) == (want["b_ref"], want["reruns"],
                                                               want["two_point"])
    assert got["full_set"]["steps"] == want["full_set"]["steps"]
    assert got["full_set"]["target"] == pytest.approx(want["full_set"]["target"], rel=1e-5)
    assert got["full_batch_inits"]["steps"] == want["full_batch_inits"]["steps"]


def test_two_processes_train_to_the_parameters_of_one(tmp_path):
    multi, single = tmp_path / "multi", tmp_path / "single"
    jobs = multihost_jobs(lambda coord, i: [sys.executable, str(WORKER), coord, str(PROCESSES),
                                            str(i), str(multi)])
    # The reference: one process holding all 4 devices (no distributed runtime).
    jobs["single"] = ([sys.executable, str(WORKER), "-", "1", "0", str(single)],
                      jax_env(PROCESSES * LOCAL_DEVICES))
    run_all(jobs, tmp_path / "logs", tmp_path)

    reports = [json.loads((multi / f"process{i}.json").read_text()) for i in range(PROCESSES)]
    reference = json.loads((single / "process0.json").read_text())
    for i, r in enumerate(reports):
        assert (r["process_index"], r["process_count"]) == (i, PROCESSES)
        assert (r["device_count"], r["local_device_count"]) == (PROCESSES * LOCAL_DEVICES,
                                                                LOCAL_DEVICES)
    assert (reference["process_count"], reference["device_count"]) == (1, PROCESSES * LOCAL_DEVICES)
    assert not (multi / "process1.npz").exists() and not (multi / "params1.npz").exists()

    # Lockstep: both processes computed the same replicated values, bit for bit (the all-reduce
    # hands every process the same sum).
    assert reports[0]["losses"] == reports[1]["losses"]
    assert reports[0]["param_sums"] == reports[1]["param_sums"]
    losses = np.asarray(reports[0]["losses"])
    assert losses.shape == (reference["steps"], 2) and np.all(np.isfinite(losses))
    # The same training as one process: only the order of the all-reduce's additions differs.
    np.testing.assert_allclose(losses, np.asarray(reference["losses"]), rtol=1e-5, atol=1e-6)
    assert losses[-1, 0] < losses[0, 0]     # it trained (trial 0's rate is large enough)

    with np.load(multi / "params.npz", allow_pickle=False) as m, \
            np.load(single / "params.npz", allow_pickle=False) as s:
        assert sorted(m.files) == sorted(s.files) and m.files
        for name in m.files:
            assert m[name].shape == s[name].shape and m[name].shape[0] == 2, name   # T = 2 trials
            np.testing.assert_allclose(m[name], s[name], rtol=1e-5, atol=1e-6, err_msg=name)
            # the written file is process 0's own replica
            assert float(np.sum(m[name], dtype=np.float64)) == reports[0]["param_sums"][name]

    # Calibration over both processes' devices: every process gets the whole (gathered) result,
    # the same on both, and the same as one process's up to the order of the additions.
    assert reports[0]["calibration"] == reports[1]["calibration"]
    got, want = reports[0]["calibration"], reference["calibration"]
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-7, err_msg=key)
    assert want["trace_cov"] > 0 and len(got["hvp"]) == len(want["hvp"]) > 100


SWEEP_ARGS = ["-m", "realnets", "sweep", "--workload", "digits_mlp", "--batch-sizes", "8,16",
              "--trials", "2", "--max-steps", "50", "--goal", "0.5", "--no-progress"]


def test_two_process_sweep_writes_once_and_matches_one_process(tmp_path):
    multi, single = tmp_path / "multi", tmp_path / "single"
    jobs = cli_jobs([*SWEEP_ARGS, "--out", str(multi)], [*SWEEP_ARGS, "--out", str(single)])
    stdout = run_all(jobs, tmp_path / "logs", tmp_path)
    assert "digits_mlp" in stdout["process0"] and "digits_mlp" in stdout["process1"]

    def records(path):
        lines = (path / "trials.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    multi_records, single_records = records(multi), records(single)
    # Written once: one line per (batch size, trial), not one per process.
    keys = [(r["batch_size"], r["trial_id"]) for r in multi_records]
    assert sorted(keys) == [(8, 0), (8, 1), (16, 0), (16, 1)]
    assert all(r["processes"] == PROCESSES and r["devices"] == PROCESSES * LOCAL_DEVICES
               for r in multi_records)
    assert all(r["processes"] == 1 for r in single_records)

    by_key = {(r["batch_size"], r["trial_id"]): r for r in single_records}
    assert sorted(by_key) == sorted(keys)
    for r in multi_records:
        s = by_key[(r["batch_size"], r["trial_id"])]
        assert (r["status"], r["steps_to_goal"], r["steps_run"]) == (
            s["status"], s["steps_to_goal"], s["steps_run"]), (r["batch_size"], r["trial_id"])
        assert r["eval"]["step"] == s["eval"]["step"]
        np.testing.assert_allclose(r["eval"]["train_loss"], s["eval"]["train_loss"], rtol=1e-4)
    # The loose goal is reached, so steps to result is a number, not None on both sides.
    assert any(r["steps_to_goal"] is not None for r in multi_records)

    multi_curve = json.loads((multi / "curve.json").read_text())
    single_curve = json.loads((single / "curve.json").read_text())
    assert ([p["steps"] for p in multi_curve["points"]]
            == [p["steps"] for p in single_curve["points"]])


def test_two_process_two_point_writes_once_and_reproduces_the_shipped_record(tmp_path):
    """`python -m realnets two-point` on a copy of the shipped breast-cancer sweep, run by two
    processes (4 global devices): the reference trial retrained at B = 8 over both, the whole
    set's 455 rows as 452 sharded and 3 on each process's own device, the descents journalled
    and checkpointed by process 0 alone. It gives the shipped two_ends.json's ends and the 16
    initialisations' steps (made by one process on one device), and one two_point.json."""
    import shutil

    sweep = tmp_path / "bc"
    shutil.copytree(REPO / "sweeps" / "breast_cancer_mlp", sweep)
    (sweep / "two_point.json").unlink(missing_ok=True)
    jobs = cli_jobs(["-m", "realnets", "two-point", str(sweep), "--no-progress"])
    stdout = run_all(jobs, tmp_path / "logs", REPO)
    assert f"written: {sweep / 'two_point.json'}" in stdout["process0"]
    assert f"written by process 0: {sweep / 'two_point.json'}" in stdout["process1"]
    assert_the_shipped_ends(
        json.loads((sweep / "two_point.json").read_text()),
        json.loads((REPO / "reports/validation/breast_cancer_mlp/two_ends.json").read_text()))
    assert sorted(p.name for p in sweep.iterdir() if "journal" in p.name or "descents" in p.name
                  or p.suffix == ".npz") == []


def test_two_process_repeat_writes_once_and_matches_one_process(tmp_path):
    """`python -m realnets repeat` on a finished two-batch-size sweep, by two processes and by
    one process with the same 4 devices: the same reruns (batch size, seed, trial, steps to
    goal), written once by process 0."""
    import shutil

    base = tmp_path / "base"
    run_all({"sweep": ([sys.executable, *SWEEP_ARGS, "--out", str(base)],
                       jax_env(PROCESSES * LOCAL_DEVICES))}, tmp_path / "logs0", tmp_path)
    multi, single = tmp_path / "multi", tmp_path / "single"
    shutil.copytree(base, multi)
    shutil.copytree(base, single)
    repeat = ["-m", "realnets", "repeat", "--seeds", "1,2", "--no-progress"]
    jobs = cli_jobs([*repeat, str(multi)], [*repeat, str(single)])
    stdout = run_all(jobs, tmp_path / "logs", tmp_path)
    assert "process 0 writes" in stdout["process1"] and "digits_mlp" in stdout["process0"]

    def reruns(path):
        rows = [json.loads(x) for x in (path / "repeats.jsonl").read_text().splitlines()]
        return sorted((r["batch_size"], r["seed"], r["trial_id"], r["status"],
                       r["steps_to_goal"], r["steps_run"]) for r in rows)

    got, want = reruns(multi), reruns(single)
    assert got == want and len(got) == 4          # 2 batch sizes x 2 seeds, each line once
    assert {r[1] for r in got} == {1, 2}


def test_two_process_two_ends_writes_once_and_reproduces_the_shipped_record(tmp_path):
    """`python -m realnets two-ends` on a copy of the shipped breast-cancer report by two
    processes: the record written once (process 0), with the shipped record's ends and B_2pt';
    then `--full-batch-inits 1,...,16` the same way gives its 16 initialisations' steps."""
    import shutil

    shipped = REPO / "reports" / "validation" / "breast_cancer_mlp"
    report = tmp_path / "bc"
    report.mkdir()
    for name in ("validation.json", "two_ends.json", "miss_split.json"):
        shutil.copy(shipped / name, report / name)
    want = json.loads((shipped / "two_ends.json").read_text())
    for extra in ([], ["--full-batch-inits", ",".join(map(str, range(1, 17)))]):
        jobs = cli_jobs(["-m", "realnets", "two-ends", str(report), "--no-progress", *extra])
        run_all(jobs, tmp_path / f"logs{len(extra)}", REPO)
    assert_the_shipped_ends(json.loads((report / "two_ends.json").read_text()), want)
    assert sorted(p.name for p in report.iterdir()) == ["miss_split.json", "report.md",
                                                       "two_ends.json", "validation.json"]


def test_two_process_validate_writes_once_and_matches_one_process(tmp_path):
    """`python -m realnets validate` of the breast-cancer sweep (without branching, transfer or
    bootstrap, to keep it short) by two processes and by one process with the same 4 devices:
    the same comparison (measured B_crit, the NQM's predictions, B_simple, B_noise) to float
    tolerance, one validation.json, report.md and summary, written by process 0."""
    args = ["-m", "realnets", "validate", "--workload", "examples/breast_cancer.py:make_workload",
            "--sweep", str(REPO / "sweeps" / "breast_cancer_mlp"), "--branch-repeats", "0",
            "--no-transfer", "--bootstrap", "0", "--no-progress"]
    multi, single = tmp_path / "multi" / "bc", tmp_path / "single" / "bc"
    jobs = cli_jobs([*args, "--out", str(multi)], [*args, "--out", str(single)])
    stdout = run_all(jobs, tmp_path / "logs", REPO, timeout_s=400)
    assert "process 0 writes" in stdout["process1"] and "report:" in stdout["process0"]
    got, want = (json.loads((d / "validation.json").read_text()) for d in (multi, single))

    def rows(doc):
        return [((r["quantity"], r["checkpoint"]), r["value"]) for r in doc["comparison"]]

    assert [k for k, _ in rows(got)] == [k for k, _ in rows(want)] and len(rows(want)) > 5
    for (key, value), (_, expected) in zip(rows(got), rows(want)):
        assert value == (None if expected is None else pytest.approx(expected, rel=1e-3)), key
    # the summary's lock (store.updating) stays beside it, hidden
    assert sorted(p.name for p in multi.parent.iterdir()) == [".summary.json.lock", "bc",
                                                              "summary.json"]
    assert len(json.loads((multi.parent / "summary.json").read_text())) == 1
    assert (multi / "report.md").is_file()


def test_two_process_validate_rule_4_chains_its_records_written_once(tmp_path):
    """`python -m realnets validate --rule-4` (validate, then two-ends with the 16
    initialisations, then miss-split, each stage reading what process 0 wrote before it) by two
    processes, on the shipped breast-cancer sweep's first 32 trials (as its shipped report was
    made), without branching, transfer or bootstrap: the shipped report's two_ends.json and
    miss_split.json, each written once by process 0, and one summary entry."""
    args = ["-m", "realnets", "validate", "--workload", "examples/breast_cancer.py:make_workload",
            "--sweep", str(REPO / "sweeps" / "breast_cancer_mlp"), "--rule-4",
            "--prediction-trials", "32", "--branch-repeats", "0", "--no-transfer",
            "--bootstrap", "0", "--no-progress"]
    out = tmp_path / "reports" / "bc"
    stdout = run_all(cli_jobs([*args, "--out", str(out)]), tmp_path / "logs", REPO, timeout_s=400)
    assert "process 0 writes" in stdout["process1"] and "report:" in stdout["process0"]
    shipped = REPO / "reports" / "validation" / "breast_cancer_mlp"
    assert_the_shipped_ends(json.loads((out / "two_ends.json").read_text()),
                            json.loads((shipped / "two_ends.json").read_text()))
    got, want = (json.loads((d / "miss_split.json").read_text()) for d in (out, shipped))
    assert got["factors"] == pytest.approx(want["factors"]) and got["largest"] == want["largest"]
    assert not [p.name for p in out.iterdir() if "journal" in p.name or p.suffix == ".npz"]
    [entry] = json.loads((out.parent / "summary.json").read_text())
    [same] = [e for e in json.loads((shipped.parent / "summary.json").read_text())
              if (e["workload"], e["goal"]) == (entry["workload"], entry["goal"])]
    assert entry["two_ends"]["b_2pt_med"] == pytest.approx(same["two_ends"]["b_2pt_med"])

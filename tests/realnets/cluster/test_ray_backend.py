"""realnets.cluster.ray_backend on a real Ray cluster of two nodes on this machine (a head and a
second raylet joining it, `realnets.cluster.local`): the same trials.jsonl as the serial backend,
line for line; a worker killed mid-block; the driver killed and the command rerun; a dead address.

The sweep has two blocks per batch size (--vmap-trials 2 --trials 4), and at B = 256 the second
block reaches the goal later (step 125) than the first (61): the serial backend stops it at 61,
the Ray backend runs both at once and must cut the second back to what the serial one wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[cluster]'")

from realnets import store  # noqa: E402
from realnets.cli import main  # noqa: E402
from realnets.cluster.local import free_port, start_local_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SWEEP = ["sweep", "--workload", "nqm", "--batch-sizes", "64,256", "--trials", "4",
         "--max-steps", "400", "--lr-range", "0.05,2", "--goal", "0.1", "--seed", "2",
         "--vmap-trials", "2", "--no-progress"]
TRIALS = 8


def _env() -> dict:
    """One CPU device everywhere (the serial reference, the drivers and the Ray workers): records
    name the device count, and the test session's 8 simulated devices are its own."""
    return {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
            "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _cli(args, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "realnets", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _finish(proc, timeout=240):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return out


def _lines(out: Path) -> list[str]:
    return (out / "trials.jsonl").read_text().splitlines()


def _keys(lines) -> list[tuple]:
    return [(r["batch_size"], r["trial_id"]) for r in map(json.loads, lines)]


@pytest.fixture(scope="module")
def serial_started(tmp_path_factory):
    """The serial reference sweep, started (not waited for): it needs no cluster, so it runs
    while the cluster starts (`cluster` asks for it first)."""
    out = tmp_path_factory.mktemp("serial")
    proc = _cli([*SWEEP, "--out", str(out)], _env())
    yield out, proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def cluster(serial_started):
    with start_local_cluster(nodes=2, cpus_per_node=1, env=_env()) as running:
        yield running
        # stop it whatever the tests did: SIGTERM, then SIGKILL for what is left after a second
        # (Ray's agents outlive a SIGTERM by more than the default 5 s grace)
        running.stop(grace_seconds=1.0)
    assert running.pids() == []         # nothing of it survives


@pytest.fixture(scope="module")
def serial(serial_started):
    out, proc = serial_started
    _finish(proc)
    lines = _lines(out)
    records = [json.loads(line) for line in lines]
    cut = [r for r in records if r["reason"] and "an earlier trial" in r["reason"]]
    # the case this file is about: later blocks stopped by an earlier block's goal
    assert {r["batch_size"] for r in cut} == {64, 256}
    return out


def _same_as_serial(out: Path, serial: Path) -> None:
    lines = _lines(out)
    assert len(lines) == len(set(_keys(lines))) == TRIALS       # every trial once
    # the same records, field for field; batch sizes may interleave in the file
    assert sorted(lines) == sorted(_lines(serial))
    assert ((out / "curve.json").read_text() == (serial / "curve.json").read_text())


@pytest.fixture(scope="module")
def on_ray(cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("ray")
    # half a CPU a block: all four blocks start at once, none knowing the others' goal steps
    _finish(_cli([*SWEEP, "--out", str(out), "--backend", "ray", "--ray-address",
                  cluster.address, "--resources-per-block", '{"CPU": 0.5}'], cluster.env))
    return out


def test_ray_sweep_writes_the_serial_records(on_ray, serial):
    _same_as_serial(on_ray, serial)


@pytest.mark.parametrize("started_on", ["serial", "ray"])
def test_a_sweep_started_on_one_backend_resumes_on_the_other(started_on, cluster, serial, on_ray,
                                                             tmp_path):
    """The first block the one backend wrote, then the other backend to the end."""
    first = serial if started_on == "serial" else on_ray
    (tmp_path / "config.json").write_bytes((first / "config.json").read_bytes())
    (tmp_path / "trials.jsonl").write_text("\n".join(_lines(first)[:2]) + "\n")
    other = (["--backend", "ray", "--ray-address", cluster.address] if started_on == "serial"
             else [])
    _finish(_cli([*SWEEP, "--out", str(tmp_path), *other], cluster.env))
    assert _lines(tmp_path)[:2] == _lines(first)[:2]
    _same_as_serial(tmp_path, serial)


def test_a_worker_killed_mid_block_loses_and_repeats_nothing(cluster, serial, tmp_path):
    proc = _cli([*SWEEP, "--out", str(tmp_path), "--backend", "ray", "--ray-address",
                 cluster.address], cluster.env)
    try:
        deadline, victim = time.monotonic() + 180, None
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            running = cluster.workers_running("run_block")
            victim = running[0] if running else None
            time.sleep(0.05)
        assert victim is not None, "no worker was seen running a block"
        written = len(store.read_jsonl(tmp_path / "trials.jsonl"))
        os.kill(victim, signal.SIGKILL)
        assert written < TRIALS
        _finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert victim not in cluster.pids()
    _same_as_serial(tmp_path, serial)


def test_a_killed_driver_resumes_to_the_same_records(cluster, serial, tmp_path):
    command = [*SWEEP, "--out", str(tmp_path), "--backend", "ray", "--ray-address",
               cluster.address]
    proc = _cli(command, cluster.env)
    log = tmp_path / "trials.jsonl"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if len(store.read_jsonl(log)) >= 2:         # the first block is written
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep finished before its driver could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _lines(tmp_path)
    assert 2 <= len(before) < TRIALS
    _finish(_cli(command, cluster.env))
    assert _lines(tmp_path)[:len(before)] == before    # what was written stays, byte for byte
    _same_as_serial(tmp_path, serial)


def _one_line_error(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_an_address_that_does_not_answer_is_one_line(capsys, tmp_path):
    port = free_port()          # closed again: nothing listens there
    started = time.monotonic()
    err = _one_line_error(capsys, [*SWEEP, "--out", str(tmp_path / "x"), "--backend", "ray",
                                   "--ray-address", f"127.0.0.1:{port}"])
    assert f"ray-address 127.0.0.1:{port} does not answer" in err
    assert time.monotonic() - started < 60          # a bound on a hang, not a speed claim
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("flags, message", [
    (["--backend", "ray", "--resources-per-block", '{"CPU": -1}'],
     "resources-per-block: CPU must be a non-negative number"),
    (["--backend", "ray", "--resources-per-block", "[1]"],
     "resources-per-block must be a JSON object"),
    (["--backend", "ray", "--ray-address", "nohost"], "ray-address must be HOST:PORT"),
    (["--ray-address", "127.0.0.1:1"], "need --backend ray"),
])
def test_bad_cluster_flags_are_one_line(capsys, tmp_path, flags, message):
    err = _one_line_error(capsys, [*SWEEP, "--out", str(tmp_path / "x"), *flags])
    assert message in err
    assert not (tmp_path / "x").exists()


def test_limits_count_only_the_earlier_blocks_of_a_batch_size():
    from realnets.cluster.ray_backend import Limits

    limits = Limits()
    assert limits.limit(256, 1) is None
    limits.finished(256, 0, 61)
    limits.finished(256, 2, 40)          # a later block: the serial run never limits by it
    limits.finished(64, 0, 10)           # another batch size
    limits.finished(256, 3, None)        # reached nothing
    assert limits.limit(256, 0) is None
    assert limits.limit(256, 1) == 61
    assert limits.limit(256, 2) == 61
    assert limits.limit(256, 3) == 40
    assert limits.limit(64, 1) == 10

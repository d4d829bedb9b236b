"""A Ray cluster of several nodes on this machine, on loopback, for tests and benchmarks.

`ray start --head` and `ray start --address` per node, each node its own raylet (so blocks
really run in other processes, on other nodes), all under one private temp dir. `ray stop` would
stop every Ray process of the machine, so `LocalCluster.stop` ends only this cluster's: the
processes holding a file under its temp dir (every Ray process keeps its logs open there) or
carrying its marker in their environment, by pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

MARKER = "BATCHSCOPE_LOCAL_CLUSTER"
OBJECT_STORE_BYTES = 100 * 1024 ** 2     # blocks return a few kB; Ray's default is 30% of RAM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_files(pid: str) -> list[str]:
    try:
        return [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return []


def _proc_text(pid: str, name: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return b""


@dataclass
class LocalCluster:
    """A running local cluster: `address` (HOST:PORT of the head) for `ray.init` or
    `--ray-address` from a process with environment `env` (it holds the cluster's token);
    `stop()` ends it (also as a context manager)."""

    address: str
    temp_dir: Path
    marker: str
    env: dict = field(repr=False, default_factory=dict)

    def pids(self) -> list[int]:
        """This cluster's processes (Linux /proc; only those this user may read)."""
        tag = f"{MARKER}={self.marker}".encode()
        root = str(self.temp_dir)
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            if (tag in _proc_text(pid, "environ").split(b"\0")
                    or any(f.startswith(root) for f in _proc_files(pid))):
                out.append(int(pid))
        return out

    def workers_running(self, function: str) -> list[int]:
        """Pids of this cluster's worker processes running a task of `function` now (Ray titles
        a busy worker `ray::FUNCTION`)."""
        return [pid for pid in self.pids()
                if _proc_text(str(pid), "cmdline").startswith(f"ray::{function}".encode())]

    def stop(self, grace_seconds: float = 5.0) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace_seconds
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def start_local_cluster(nodes: int = 2, cpus_per_node: int = 1, env: dict | None = None,
                        timeout: float = 120.0) -> LocalCluster:
    """Starts a head and `nodes - 1` more nodes on 127.0.0.1, `cpus_per_node` CPUs each.

    Args:
      nodes: nodes (raylets), >= 1.
      cpus_per_node: the CPUs each node offers Ray.
      env: the environment of the Ray processes (and so of their workers); default this one's.
      timeout: seconds each `ray start` may take.

    Raises RuntimeError with `ray start`'s output when a node does not start (what started is
    stopped first).
    """
    if nodes < 1 or cpus_per_node < 1:
        raise ValueError(f"nodes and cpus_per_node must be >= 1, got {nodes}, {cpus_per_node}")
    # short: Ray's unix sockets live below it and their paths are limited to 107 characters
    temp_dir = Path(tempfile.mkdtemp(prefix="bsray-", dir="/tmp"))
    marker = uuid.uuid4().hex
    port = free_port()
    # token authentication with a token of its own (Ray >= 2.5x would otherwise use, or make,
    # ~/.ray/auth_token): drivers connect with `cluster.env`
    cluster = LocalCluster(f"127.0.0.1:{port}", temp_dir, marker,
                           {**(os.environ if env is None else env), MARKER: marker,
                            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex})
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus_per_node),
              "--temp-dir", str(temp_dir), "--object-store-memory", str(OBJECT_STORE_BYTES),
              "--disable-usage-stats"]
    ray_cli = [sys.executable, "-m", "ray.scripts.scripts"]    # this Python's Ray, whatever PATH says
    commands = [[*ray_cli, "start", "--head", "--port", str(port), "--include-dashboard=false",
                 *common]]
    commands += [[*ray_cli, "start", "--address", cluster.address, *common]] * (nodes - 1)
    try:
        for command in commands:
            done = subprocess.run(command, env=cluster.env, capture_output=True, text=True,
                                  timeout=timeout)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): "
                                   f"{(done.stdout + done.stderr)[-2000:]}")
    except BaseException:
        cluster.stop()
        raise
    return cluster

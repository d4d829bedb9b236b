"""The Ray backend's speed-up: the same small sweep with one Ray worker process and with two.

Run: `python benchmarks/bench_ray.py` (about 8 minutes here; `--repeats 1`: 4 minutes).

Three runs of one `python -m realnets sweep` command, each into a fresh directory, each timed
from the command's start to its end (Python start, Ray connection, worker start, compilation and
training: what a user waits for):
1. `--backend serial`: the baseline, in one process;
2. `--backend ray` on a local cluster of one node with 1 CPU: one worker process at a time;
3. `--backend ray` on a local cluster of two nodes with 1 CPU each: two worker processes.
The clusters (`realnets.cluster.local`) are started before and stopped after their run, outside
the timing. The three are repeated `--repeats` times, interleaved (a machine shared with other
jobs changes speed over minutes), and every run's time is printed, then the medians: two workers
against one, and each against serial. Every run's trials.jsonl must hold the same records
(checked; the benchmark stops if not).

The sweep runs with --full-trials, so every block does the same work on every backend. Without
it, blocks run side by side start before earlier ones have reached the goal and train on to
their own goal or budget; the driver cuts them back (`realnets.sweeps.blocks`): the files match,
but two workers then do more work than one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from realnets.cluster.local import start_local_cluster  # noqa: E402

# --full-trials: every block trains its whole budget whoever runs it, so the three runs do the
# same work (without it, blocks run side by side also train past an earlier block's goal step)
SWEEP = ["--workload", "digits_mlp", "--batch-sizes", "16,64", "--trials", "32",
         "--vmap-trials", "2", "--max-steps", "3000", "--goal", "0.03", "--full-trials",
         "--no-progress"]


def _env() -> dict:
    return {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
            "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def timed_sweep(args: list[str], out: Path, env: dict) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "realnets", "sweep", *args, "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"sweep failed: {done.stderr[-2000:]}")
    return seconds


def on_cluster(nodes: int, out: Path) -> float:
    # Ray starts its workers at niceness 15: on a machine shared with other jobs they would get
    # only the CPU the others leave, and the serial run (niceness 0) would not be a baseline
    env = {**_env(), "RAY_worker_niceness": "0"}
    with start_local_cluster(nodes=nodes, cpus_per_node=1, env=env) as cluster:
        return timed_sweep([*SWEEP, "--backend", "ray", "--ray-address", cluster.address], out,
                           cluster.env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the three runs")
    args = parser.parse_args()
    if args.repeats < 1:
        raise SystemExit("--repeats must be >= 1")
    print(f"sweep: python -m realnets sweep {' '.join(SWEEP)}")
    print(f"machine: {os.cpu_count()} CPUs (shared with other jobs)")
    runs = {"serial": None, "ray, 1 worker": 1, "ray, 2 workers": 2}
    seconds = {name: [] for name in runs}
    records = None
    for round_ in range(args.repeats):
        for name, nodes in runs.items():
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "sweep"
                seconds[name].append(timed_sweep(SWEEP, out, _env()) if nodes is None
                                     else on_cluster(nodes, out))
                lines = sorted((out / "trials.jsonl").read_text().splitlines())
            if records is not None and lines != records:
                raise SystemExit(f"{name} wrote other records than the first run")
            records = lines
            print(f"round {round_ + 1}  {name:>15}: {seconds[name][-1]:6.1f} s", flush=True)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    for name, value in median.items():
        print(f"median {name:>15}: {value:6.1f} s  ({value / median['serial']:.2f}x serial's time)")
    print(f"two workers against one: {median['ray, 1 worker'] / median['ray, 2 workers']:.2f}x "
          f"as fast; the same {len(records)} records in every run's trials.jsonl")


if __name__ == "__main__":
    main()

"""User and system time of a small text_transformer sweep, with the command line's allocator
setting (realnets.training.host_allocator) and without it.

Run: `python benchmarks/bench_cpu_time.py` (about 4 minutes on 2 idle cores; `--quick`: one
repeat, about 2 minutes).

Each measurement is a fresh process (glibc's allocator is set once, before jax starts):
- ENGINE: `python -m realnets` as shipped (one malloc arena, no mmap, no trimming on a CPU run);
- BASELINE: the same command with REALNETS_MALLOC=default (glibc's defaults: XLA:CPU's large
  per-call buffers are mapped and zero-filled afresh at every call).
Part 1 runs `python -m realnets sweep --workload text_transformer --batch-sizes 16,64 --trials 2
--max-steps 60 --goal 0.1` (the goal is out of reach, so every trial runs its 60 steps and
56 evaluations) and reads user and system time, page faults and context switches from the
child's rusage. Part 2 times 40 train steps of 2 trials at B = 16 and 128 after a compiling run
(evaluations only at steps 1, 2, 4, ..., 32, 40): the steps themselves must not get slower.
Settings are interleaved and the medians printed; on a machine shared with other work compare
the ratios, not the seconds. Nothing here is asserted by the test suite.
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

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ["sweep", "--workload", "text_transformer", "--batch-sizes", "16,64", "--trials", "2",
         "--max-steps", "60", "--goal", "0.1", "--no-progress"]
STEPS = 40
STEP_RUN = f"""
import sys, time
from realnets.training import host_allocator
host_allocator.tune_for_cpu()       # what python -m realnets does first
from realnets import workloads
from realnets.training.trainer import RunConfig, TrialSpec, run_trials
task = workloads.get("text_transformer").build()
trials = [TrialSpec(0, 1e-3), TrialSpec(1, 2e-3)]
for batch_size in (16, 128):
    config = RunConfig(batch_size=batch_size, max_steps={STEPS}, goal=0.1, optimizer="adam",
                       eval_resolution=1.0)
    run_trials(task, config, trials)                       # compiles
    start = time.perf_counter()
    run_trials(task, config, trials)
    print(batch_size, {STEPS} / (time.perf_counter() - start))
"""
SETTINGS = {"ENGINE": {}, "BASELINE": {"REALNETS_MALLOC": "default"}}
CLEARED = ("REALNETS_MALLOC", "MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
           "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES", "LD_PRELOAD")


def environment(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(extra)
    return env


def sweep_run(extra: dict) -> dict:
    """One sweep in a fresh process: its user, system and wall seconds, faults, switches."""
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "realnets", *SWEEP, "--out", out],
                                cwd=ROOT, env=environment(extra), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"sweep failed ({proc.returncode}): {stderr.decode()[-500:]}")
    return {"user": usage.ru_utime, "sys": usage.ru_stime, "wall": wall,
            "faults": usage.ru_minflt, "vcsw": usage.ru_nvcsw, "ivcsw": usage.ru_nivcsw,
            "rss_mb": usage.ru_maxrss / 1024}


def steps_run(extra: dict) -> dict:
    out = subprocess.run([sys.executable, "-c", STEP_RUN], cwd=ROOT, env=environment(extra),
                         check=True, capture_output=True, text=True).stdout
    return {f"B={b} steps/s": float(r) for b, r in (line.split() for line in out.splitlines())}


def medians(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat of each")
    args = parser.parse_args()
    repeats = 1 if args.quick else 2
    begin = time.perf_counter()
    print(f"cores usable: {len(os.sched_getaffinity(0))}; load average at start "
          f"{os.getloadavg()[0]:.2f}; median of {repeats} fresh processes each\n")
    sweeps = {name: [] for name in SETTINGS}
    steps = {name: [] for name in SETTINGS}
    for _ in range(repeats):
        for name, extra in SETTINGS.items():
            sweeps[name].append(sweep_run(extra))
            steps[name].append(steps_run(extra))
    print("python -m realnets " + " ".join(SWEEP) + " --out TMP")
    print(f"{'setting':9s} {'user s':>7s} {'sys s':>7s} {'wall s':>7s} {'sys/user':>8s} "
          f"{'faults':>8s} {'vol.csw':>8s} {'invol.csw':>9s} {'max RSS':>8s}")
    table = {name: medians(runs) for name, runs in sweeps.items()}
    for name, m in table.items():
        print(f"{name:9s} {m['user']:7.1f} {m['sys']:7.1f} {m['wall']:7.1f} "
              f"{m['sys'] / m['user']:8.2f} {m['faults'] / 1e6:7.2f}M {m['vcsw']:8.0f} "
              f"{m['ivcsw']:9.0f} {m['rss_mb']:6.0f}MB")
    e, b = table["ENGINE"], table["BASELINE"]
    print(f"BASELINE / ENGINE: user x{b['user'] / e['user']:.2f}, sys x{b['sys'] / e['sys']:.1f}, "
          f"wall x{b['wall'] / e['wall']:.2f}, user+sys x"
          f"{(b['user'] + b['sys']) / (e['user'] + e['sys']):.2f}")
    print(f"\ntrain steps of 2 trials ({STEPS} steps after a compiling run)")
    rates = {name: medians(runs) for name, runs in steps.items()}
    for key in rates["ENGINE"]:
        engine, base = rates["ENGINE"][key], rates["BASELINE"][key]
        print(f"  {key:15s} ENGINE {engine:6.1f}   BASELINE {base:6.1f}   "
              f"ENGINE x{engine / base:.2f}")
    print(f"\ntotal {time.perf_counter() - begin:.0f} s")


if __name__ == "__main__":
    main()

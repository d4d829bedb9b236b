"""Tuned NQM curves with a core taken by another process: the engine's OpenMP spin setting
against libgomp's default, and against one thread.

Run: `python benchmarks/bench_omp_spin.py` (`--quick`: SGD only, 2 repeats; about 30 s).

`nqm.kernels` sets GOMP_SPINCOUNT=1000 (unless the user set it) before numba's OpenMP runtime
loads: libgomp's idle threads otherwise spin 300,000 iterations before sleeping, and when a core
is busy with something else every parallel launch waits for a thread that is not running. Each
measurement is a fresh process (the setting is read once, when libgomp loads) that tunes the
default problem (d = 10^4, 20 batch sizes 4 .. 2^21) after a small warm-up; the rows are
- ENGINE: the package as shipped (GOMP_SPINCOUNT=1000);
- BASELINE: libgomp's default spinning (GOMP_SPINCOUNT=300000, kept by the engine);
- serial: one thread (NUMBA_NUM_THREADS=1);
each with the machine idle and with a second process spinning on one core (`while True: pass`).
Medians of interleaved repeats; nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ONE_RUN = """
import time, sys
from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, tune_curve
cfg = NQMConfig(dim=10000)
sizes = [2 ** k for k in range(2, 22)]
tune_curve(cfg, OptimizerSpec(sys.argv[1]), sizes[:3], 10 ** 8)
start = time.perf_counter()
tune_curve(cfg, OptimizerSpec(sys.argv[1]), sizes, 10 ** 8)
print(time.perf_counter() - start)
"""

SETTINGS = {"ENGINE (spin 1,000)": {},
            "BASELINE (libgomp default, spin 300,000)": {"GOMP_SPINCOUNT": "300000"},
            "serial (1 thread)": {"NUMBA_NUM_THREADS": "1"}}


def one_run(optimizer: str, extra_env: dict) -> float:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "NUMBA_NUM_THREADS")}
    env.update(extra_env)
    out = subprocess.run([sys.executable, "-c", ONE_RUN, optimizer], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def measure(optimizers, repeats: int) -> dict:
    times = {(name, opt): [] for name in SETTINGS for opt in optimizers}
    for _ in range(repeats):
        for name, extra in SETTINGS.items():
            for opt in optimizers:
                times[(name, opt)].append(one_run(opt, extra))
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="SGD only, 2 repeats")
    args = parser.parse_args()
    optimizers = ("sgd",) if args.quick else ("sgd", "momentum")
    repeats = 2 if args.quick else 3
    start = time.perf_counter()
    print(f"cores usable: {len(os.sched_getaffinity(0))}; tuned curves of the default problem "
          f"(d = 10^4, 20 batch sizes), median of {repeats} fresh processes each")
    for label, hog in (("idle", False), ("one core busy (another process spinning)", True)):
        hog_proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if hog else None
        try:
            time.sleep(0.5 if hog else 0.0)
            medians = measure(optimizers, repeats)
        finally:
            if hog_proc is not None:
                hog_proc.kill()
                hog_proc.wait()
        print(f"\n{label}")
        for opt in optimizers:
            base = medians[("BASELINE (libgomp default, spin 300,000)", opt)]
            for name in SETTINGS:
                t = medians[(name, opt)]
                print(f"  {opt:9s} {name:42s} {t:7.3f} s   x{base / t:5.2f} vs baseline")
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()

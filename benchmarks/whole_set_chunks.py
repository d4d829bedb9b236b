"""One loss-and-gradient over a workload's whole training set, as the full-batch descents of
`two-ends` / `two-point` compute it (`quadratic_path.sample_loss`): all rows in one compiled
call (the baseline; the default until session 48) against chunks of `--chunk-rows` rows (1024,
`two_ends.WHOLE_SET_CHUNK_ROWS`, is the default since), each in its own process, in the same run.

Run: `python benchmarks/whole_set_chunks.py [--workload digits_cnn] [--chunks 1024,512]`
(about a minute for the default; `--workload text_transformer` takes a few minutes and ~15 GB
all at once). For each configuration it prints the compile-and-first-call time, the median of
`--calls` further calls, the process's peak resident memory, and the ratios baseline / chunked
(above 1: the chunks are faster or smaller), with the loss's relative difference from the
baseline (float rounding only). Each process first sets glibc's allocator as `python -m
realnets` does (`realnets.training.host_allocator`; REALNETS_MALLOC=default leaves it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
from realnets.training import host_allocator
host_allocator.tune_for_cpu()       # what python -m realnets does first, before numpy or jax
import numpy as np
from jax.flatten_util import ravel_pytree
from realnets import workloads
from realnets.validation.quadratic_path import sample_loss
from realnets.validation.rerun import init_params_of
from realnets.validation.two_ends import whole_set

name, chunk, calls = sys.argv[1], (None if sys.argv[2] == "all" else int(sys.argv[2])), int(sys.argv[3])
task = workloads.get(name).build()
init = init_params_of(task, 0, 0)
rows = whole_set(task, 0)
theta = np.asarray(ravel_pytree(init)[0], np.float64)
fn = sample_loss(task, init, rows, chunk)
t = time.perf_counter(); loss, _ = fn(theta); first = time.perf_counter() - t
times = []
for i in range(calls):
    t = time.perf_counter(); fn(theta + 1e-4 * (i + 1)); times.append(time.perf_counter() - t)
print(json.dumps({"rows": int(len(next(iter(rows.values())))), "loss": float(loss),
                  "first": first, "call": float(np.median(times)),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(workload: str, chunk: str, calls: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, workload, chunk, str(calls)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="digits_cnn")
    parser.add_argument("--chunks", default="1024,512",
                        help="comma-separated rows per call to compare with all at once")
    parser.add_argument("--calls", type=int, default=5, help="timed calls after the first")
    args = parser.parse_args()
    chunks = [int(c) for c in args.chunks.split(",") if c.strip()]
    if not chunks or min(chunks) < 1:
        parser.error(f"chunks must be whole numbers >= 1, got {args.chunks!r}")
    if args.calls < 1:
        parser.error(f"calls must be >= 1, got {args.calls}")
    base = measure(args.workload, "all", args.calls)
    print(f"{args.workload}: {base['rows']} rows, {args.calls} timed calls each, one process "
          "per configuration")
    print(f"{'rows per call':>14} {'first (s)':>10} {'call (s)':>9} {'peak (MB)':>10} "
          f"{'call ratio':>11} {'memory ratio':>13} {'loss rel. diff':>15}")

    def line(label, r):
        print(f"{label:>14} {r['first']:>10.2f} {r['call']:>9.3f} {r['peak_mb']:>10.0f} "
              f"{base['call'] / r['call']:>11.2f} {base['peak_mb'] / r['peak_mb']:>13.2f} "
              f"{abs(r['loss'] - base['loss']) / abs(base['loss']):>15.1e}")

    line("all (baseline)", base)
    for c in chunks:
        line(str(c), measure(args.workload, str(c), args.calls))


if __name__ == "__main__":
    main()

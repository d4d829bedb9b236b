"""Warm tuning time of this tree's NQM against another checkout's, in alternating fresh processes.

Run: `python benchmarks/bench_nqm_ab.py --other PATH [--repeats 3] [--optimizers momentum,ema]`,
where PATH is another checkout of the repository (for example `git worktree add /tmp/old
<commit>`). Each repeat runs one fresh process per tree, alternately, so both see the same
machine load; each process warms the compiled kernels on a small problem, then times
`tune_curve` on the default problem for every optimizer. Prints both trees' times and the ratio
other / this. Nothing here is asserted by the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, tune_curve
for name in sys.argv[1].split(","):
    tune_curve(NQMConfig(dim=50), OptimizerSpec(name), [4, 64, 1024, 16384], 10 ** 6)
    start = time.perf_counter()
    tune_curve(NQMConfig(), OptimizerSpec(name))
    print(name, time.perf_counter() - start)
"""


def run(tree: Path, optimizers: str) -> dict[str, float]:
    """Seconds per optimizer from one fresh process importing `nqm` from `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", CHILD, optimizers], env=env, cwd=tree,
                         check=True, capture_output=True, text=True).stdout
    return {name: float(t) for name, t in (line.split() for line in out.splitlines())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", required=True, help="path of the other checkout")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--optimizers", default="momentum,ema")
    args = parser.parse_args()
    other = Path(args.other).resolve()
    if not (other / "nqm" / "tuning.py").is_file():
        parser.error(f"--other must be a checkout of this repository, got {args.other!r}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    names = args.optimizers.split(",")
    times = {"other": {n: [] for n in names}, "this": {n: [] for n in names}}
    run(other, args.optimizers)            # compile or load both trees' kernel caches first
    run(HERE, args.optimizers)
    for _ in range(args.repeats):
        for label, tree in (("other", other), ("this", HERE)):
            for name, t in run(tree, args.optimizers).items():
                times[label][name].append(t)
    print(f"warm tune_curve on the default problem, seconds over {args.repeats} alternating "
          f"fresh processes (min-max, median)")
    print(f"{'optimizer':>9}  {'other':>18}  {'this':>18}  other / this (medians)")
    for name in names:
        o, t = times["other"][name], times["this"][name]
        print(f"{name:>9}  {min(o):5.2f}-{max(o):5.2f} ({statistics.median(o):5.2f})  "
              f"{min(t):5.2f}-{max(t):5.2f} ({statistics.median(t):5.2f})  "
              f"{statistics.median(o) / statistics.median(t):.2f}x")


if __name__ == "__main__":
    main()

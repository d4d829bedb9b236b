"""What certifying the tuned curve against the grid search costs and changes, measured in one run.

Run: `python benchmarks/bench_certify.py` (about 45 s on 2 cores; `--quick` for the small
problem only). For each optimizer family, `nqm.tuning.tune_curve` with `certify=False` (the
local searches alone, the baseline) and `certify=True` (every point then held against
`nqm.lowest_loss`'s grid search, `nqm.tuning._certify`), each warm (a first call compiles the
kernels), on
1. the default problem (d = 10^4, h = c = 1/i, target 0.01, 20 batch sizes 4 .. 2^21);
2. a small problem with few steps at large batch sizes (d = 20, h = c = i^-2, target 0.1,
   batch sizes 16 .. 4096), where one step is a third of the answer;
and mean-field Adam (`nqm.tuning._certify_adam`, in Adam's default rate bounds) on the small
problem and on d = 100 (target 0.05, batch sizes 4 .. 16384 by x4): its tuner on the default
problem takes tens of minutes.
Prints the time ratio certified / local and, per batch size where they differ, the steps of
both. Nothing here is asserted by the test suite (tests/nqm/test_tuning.py checks the certified
steps against a dense grid).
"""

from __future__ import annotations

import argparse
import time
import warnings

from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, default_space, tune_curve

PROBLEMS = {
    "default": (NQMConfig(), [2 ** k for k in range(2, 22)]),
    "few steps": (NQMConfig(dim=20, spectrum_exponent=2.0, target=0.1),
                  [16, 64, 256, 1024, 4096]),
}
FAMILIES = (("sgd", 0.0), ("sgd", 0.5), ("momentum", 0.0), ("ema", 0.0))
ADAM_PROBLEMS = {
    "few steps": PROBLEMS["few steps"],
    "d = 100": (NQMConfig(dim=100, target=0.05), [4 ** k for k in range(1, 8)]),
}


def timed(config, spec, batch, certify):
    start = time.perf_counter()
    curve = tune_curve(config, spec, batch, certify=certify, space=default_space(spec))
    return time.perf_counter() - start, [p.steps for p in curve.points]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small problem only")
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    for name, power in FAMILIES + (("adam", 0.0),):     # compile the kernels once
        spec = OptimizerSpec(name, power)
        tune_curve(NQMConfig(dim=50), spec, [4, 1024], certify=True, space=default_space(spec))
    print(f"{'problem':<10} {'optimizer':<12} {'local s':>8} {'certified s':>12} {'ratio':>6}  "
          "batch sizes where the steps differ (B: local -> certified)")
    runs = [(label, problem, family) for label, problem in PROBLEMS.items()
            for family in FAMILIES]
    runs += [(label, problem, ("adam", 0.0)) for label, problem in ADAM_PROBLEMS.items()]
    for label, (config, batch), (name, power) in runs:
        if args.quick and label != "few steps":
            continue
        spec = OptimizerSpec(name, power)
        t_local, local = timed(config, spec, batch, False)
        t_cert, cert = timed(config, spec, batch, True)
        diff = "; ".join(f"{b}: {a} -> {c}" for b, a, c in zip(batch, local, cert) if a != c)
        worst = max((a / c - 1 for a, c in zip(local, cert) if a and c), default=0.0)
        tag = f"{name}" + (f" p={power:g}" if power else "")
        print(f"{label:<10} {tag:<12} {t_local:8.2f} {t_cert:12.2f} {t_cert / t_local:5.1f}x"
              f"  {diff or 'none'}" + (f" (local up to {100 * worst:.1f}% more)" if diff
                                       else ""))

if __name__ == "__main__":
    main()

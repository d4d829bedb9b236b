"""The compiled step loops of a linear decay (`nqm.decay_kernels`) against the numpy step
functions they replaced (`nqm.linear_decay.reference_final_losses`), measured in the same run.

Run: `python benchmarks/decay_kernels.py` (about 2 min on 2 cores). Two parts:

1. `final_losses` against `reference_final_losses` on `NQMConfig(dim=d)` at B = 64 with N rows
   of metaparameters (random rates, b in the tuner's grid, f in its list) for a horizon T:
   the median wall time of 3 warm calls each, the ratio, and the largest relative difference of
   their losses (rows finite in both). Adam's model has 4 quadrature nodes per direction, so
   its arrays are (N, 4 d).
2. The tuner as a user runs it: `tune_decay_curve` for momentum and Adam on
   `NQMConfig(dim=30, target=0.01)`, B = 4 .. 1024, once with the compiled loops and once with
   `linear_decay.final_losses` swapped for the reference, and whether both chose the same
   points.

The compile time of the kernels (numba's on-disk cache, the first call of a fresh install) is
printed apart.
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

import numpy as np

from nqm import decay_kernels, linear_decay
from nqm.adam_tuning import tune_adam_curve
from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, tune_curve

CASES = (  # optimizer, d, rows N, horizon T
    ("momentum", 100, 60, 300),
    ("momentum", 1000, 60, 300),
    ("momentum", 1000, 240, 100),
    ("adam", 100, 60, 300),
    ("adam", 1000, 60, 300),
    ("adam", 1000, 240, 100),
)


def rows(optimizer: str, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    scale = 1.0 if optimizer == "momentum" else 0.1
    lr = scale * 10 ** rng.uniform(-3, 0.3, n)
    beta = rng.choice(linear_decay.MOMENTUM_BETAS if optimizer == "momentum" else
                      (0.0, 0.5, 0.9, 0.99), n)
    final = rng.choice(linear_decay.DecaySearch().final_fractions, n)
    return lr, beta, final


def median_seconds(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def part_one() -> None:
    start = time.perf_counter()
    problem = NQMConfig(dim=10).problem()
    for optimizer in ("momentum", "adam"):
        linear_decay.final_losses(problem, optimizer, 2, 4, *rows(optimizer, 2))
    print(f"first calls (numba compile or cache load): {time.perf_counter() - start:.2f} s")
    print(f"{'optimizer':>9} {'d':>5} {'N':>4} {'T':>4} {'numpy_s':>8} {'kernel_s':>8} "
          f"{'ratio':>6} {'max_rel_diff':>12}")
    for optimizer, dim, n, horizon in CASES:
        problem = NQMConfig(dim=dim).problem()
        args = (problem, optimizer, horizon, 64, *rows(optimizer, n))
        ref = linear_decay.reference_final_losses(*args)
        got = linear_decay.final_losses(*args)
        both = np.isfinite(ref) & np.isfinite(got)
        diff = float(np.max(np.abs(got[both] / ref[both] - 1))) if both.any() else float("nan")
        t_ref = median_seconds(lambda: linear_decay.reference_final_losses(*args))
        t_new = median_seconds(lambda: linear_decay.final_losses(*args))
        print(f"{optimizer:>9} {dim:>5} {n:>4} {horizon:>4} {t_ref:>8.3f} {t_new:>8.3f} "
              f"{t_ref / t_new:>6.1f} {diff:>12.2e}")


def part_two() -> None:
    cfg = NQMConfig(dim=30, target=0.01)
    batch = [4 ** k for k in range(1, 6)]
    constants = {"momentum": tune_curve(cfg, OptimizerSpec("momentum"), batch),
                 "adam": tune_adam_curve(cfg, batch)}
    print(f"{'tune_decay_curve':>16} {'numpy_s':>8} {'kernel_s':>8} {'ratio':>6} same_points")
    for optimizer, constant in constants.items():
        start = time.perf_counter()
        new = linear_decay.tune_decay_curve(cfg, optimizer, constant)
        t_new = time.perf_counter() - start
        with mock.patch.object(linear_decay, "final_losses",
                               linear_decay.reference_final_losses):
            start = time.perf_counter()
            old = linear_decay.tune_decay_curve(cfg, optimizer, constant)
            t_ref = time.perf_counter() - start
        same = [(p.steps, p.learning_rate, p.momentum, p.final_lr_fraction) for p in new.points] \
            == [(p.steps, p.learning_rate, p.momentum, p.final_lr_fraction) for p in old.points]
        print(f"{optimizer:>16} {t_ref:>8.2f} {t_new:>8.2f} {t_ref / t_new:>6.1f} {same}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    start = time.perf_counter()
    part_one()
    part_two()
    print(f"({time.perf_counter() - start:.0f} s; numba {decay_kernels.numba.__version__})")


if __name__ == "__main__":
    main()

"""The compiled mean-field Adam segment (`nqm.adam_kernels`) against the numpy form it replaced
(`nqm.adam.closed_form_reference`), measured in the same run.

Run: `python benchmarks/adam_segments.py` (a few minutes on 2 cores; `--quick` for a smaller
second part). Two parts:

1. `adam.closed_form` against `adam.closed_form_reference` on k rows of d directions (random
   stable step sizes over the underdamped, overdamped and negative-tau cases, b1 in
   {0, 0.5, 0.9, 0.99}, segment lengths 0 .. 3000): the median wall time of 5 warm calls each,
   the ratio, and the largest relative difference of the three moments.
2. The tuner as a user runs it: `tune_adam_curve` on `NQMConfig(dim=D, target=0.01)` (D = 300,
   the app's largest Adam problem; 100 with `--quick`), B = 4 .. 4096 by x4, once with the
   compiled segment and once with `adam.closed_form` swapped for the reference, and whether both
   chose the same points.
"""

from __future__ import annotations

import argparse
import time
from unittest import mock

import numpy as np

from decay_kernels import median_seconds   # benchmarks/decay_kernels.py, the same timing
from nqm import adam, adam_kernels
from nqm.adam_tuning import tune_adam_curve
from nqm.problem import NQMConfig

CASES = ((16, 400), (64, 1600), (256, 400))  # rows k, directions d (the model's 4 d nodes)


def arrays(k: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    h = 10 ** rng.uniform(-3, 1, d)
    b = rng.choice([0.0, 0.5, 0.9, 0.99], (k, 1))
    eta = rng.uniform(0.0, 1.0, (k, d)) * 2 * (1 + b) * 0.999 / h
    sig = 10 ** rng.uniform(-4, 0, (k, d))
    s11, s22 = 10 ** rng.uniform(-3, 1, (k, d)), 10 ** rng.uniform(-3, 1, (k, d))
    s12 = 0.1 * rng.standard_normal((k, d))
    n = rng.integers(0, 3000, (k, 1))
    return s11, s12, s22, eta, h, b, sig, n


def part_one() -> None:
    start = time.perf_counter()
    adam.closed_form(*arrays(2, 3))
    print(f"first call (numba compile or cache load): {time.perf_counter() - start:.2f} s")
    print(f"{'k':>5} {'d':>5} {'numpy_s':>8} {'kernel_s':>8} {'ratio':>6} {'max_rel_diff':>12}")
    for k, d in CASES:
        args = arrays(k, d)
        ref = adam.closed_form_reference(*args)
        got = adam.closed_form(*args)
        diff = max(float(np.max(np.abs(g - r) / np.maximum(np.abs(r), 1e-300)))
                   for g, r in zip(got, ref))
        t_ref = median_seconds(lambda: adam.closed_form_reference(*args), repeats=5)
        t_new = median_seconds(lambda: adam.closed_form(*args), repeats=5)
        print(f"{k:>5} {d:>5} {t_ref:>8.4f} {t_new:>8.4f} {t_ref / t_new:>6.1f} {diff:>12.2e}")


def part_two(dim: int) -> None:
    cfg = NQMConfig(dim=dim, target=0.01)
    batch = [4 ** k for k in range(1, 7)]
    start = time.perf_counter()
    new = tune_adam_curve(cfg, batch)
    t_new = time.perf_counter() - start
    with mock.patch.object(adam, "closed_form", adam.closed_form_reference):
        start = time.perf_counter()
        old = tune_adam_curve(cfg, batch)
        t_ref = time.perf_counter() - start
    same = [(p.steps, p.learning_rate, p.momentum) for p in new.points] \
        == [(p.steps, p.learning_rate, p.momentum) for p in old.points]
    print(f"{'tune_adam_curve':>15} {'d':>5} {'numpy_s':>8} {'kernel_s':>8} {'ratio':>6} "
          "same_points")
    print(f"{'':>15} {dim:>5} {t_ref:>8.1f} {t_new:>8.1f} {t_ref / t_new:>6.1f} {same}")
    print("steps:", [p.steps for p in new.points])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="d = 100 in the second part")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    part_one()
    part_two(100 if args.quick else 300)
    print(f"({time.perf_counter() - start:.0f} s; numba {adam_kernels.numba.__version__})")


if __name__ == "__main__":
    main()

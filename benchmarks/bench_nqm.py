"""Speed of the exact NQM engine against the two obvious ways to get the same numbers.

Run: `python benchmarks/bench_nqm.py` (add `--quick` for a smaller run). Everything is measured in
this run on this machine and printed as ratios; nothing here is asserted by the test suite.

1. Tuned curves: the whole default problem (d = 10^4, h = c = 1/i, target 0.01, 20 batch sizes
   4 .. 2^21), SGD and heavy-ball momentum, wall time of `nqm.tuning.tune_curve`.
2. Against a grid-and-bisection baseline like the paper's notebook: for every batch size and
   every learning rate of the paper's grid (100 values in logspace(-5, 0.5)), bisection on the
   closed-form SGD loss; the best grid point per batch size. Same steps or fewer for ours.
   For momentum the paper's grid (100 x 20) is timed on a few batch sizes and scaled.
3. Against a plain per-step loop: the second-moment recurrence iterated step by step
   (vectorised over d and the learning rates) until each reaches the target, on one batch size
   and the 20 largest step sizes of the paper's grid; the closed-form first-crossing search on
   the same rows gives the same steps.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nqm.crossing import steps_to_target
from nqm.moments import dynamics
from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, tune_curve

BATCH_SIZES = [2 ** k for k in range(2, 22)]
PAPER_SGD_LRS = np.logspace(-5, 0.5, 100)
PAPER_MOM_LRS = np.logspace(-8, 1, 100)
PAPER_MOM_ONE_MINUS_B = np.logspace(-5, 0, 20)


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def sgd_loss(h, c, x0, a, batch, t):
    """Closed-form E[L] of SGD after t steps (the formula a paper-style notebook uses)."""
    r2 = (1.0 - a * h) ** 2
    s = a * c / (batch * h * (2.0 - a * h))
    return 0.5 * np.sum(h * (s + r2 ** t * (x0 - s)))


def grid_bisection_sgd(problem, batch_sizes, lrs, max_steps):
    """Baseline: per batch size and learning rate, bisection on steps; min over the grid."""
    h, c, x0 = problem.curvature_D, problem.noise_D, problem.init_second_moment_D
    target = problem.target
    best = []
    for batch in batch_sizes:
        best_b = None
        for a in lrs:
            if a * h.max() >= 2.0:
                continue
            if sgd_loss(h, c, x0, a, batch, max_steps) > target:
                continue
            lo, hi = 0, max_steps
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if sgd_loss(h, c, x0, a, batch, mid) <= target:
                    hi = mid
                else:
                    lo = mid
            best_b = hi if best_b is None else min(best_b, hi)
        best.append(best_b)
    return best


def grid_bisection_momentum(problem, batch_sizes, lrs, one_minus_b, max_steps):
    """Baseline for momentum: bisection on the closed form for every grid point (vectorised over
    the grid's momentum values at each learning rate)."""
    target = problem.target
    best = []
    for batch in batch_sizes:
        best_b = None
        for a in lrs:
            dyn = dynamics(problem, batch, a, 1.0 - one_minus_b)
            ok = dyn.stable_N & (dyn.loss(np.full(dyn.rows, max_steps)) <= target)
            rows = np.flatnonzero(ok)
            if rows.size == 0:
                continue
            lo = np.zeros(rows.size, dtype=np.int64)
            hi = np.full(rows.size, max_steps, dtype=np.int64)
            while np.any(hi - lo > 1):
                mid = (lo + hi) // 2
                below = dyn.loss(mid, rows) <= target
                hi = np.where(below, mid, hi)
                lo = np.where(below, lo, mid)
            m = int(hi.min())
            best_b = m if best_b is None else min(best_b, m)
        best.append(best_b)
    return best


def per_step_loop(problem, batch, lrs, target, max_steps):
    """Baseline: iterate E theta^2 <- r^2 E theta^2 + a^2 c / B step by step for every lr."""
    h, c, x0 = problem.curvature_D, problem.noise_D, problem.init_second_moment_D
    a = lrs[:, None]
    r2 = (1.0 - a * h) ** 2
    k = a * a * c / batch
    w = 0.5 * h
    x = np.broadcast_to(x0, (lrs.size, h.size)).copy()
    steps = np.full(lrs.size, -1)
    live = np.flatnonzero(np.all(a * h < 2.0, axis=1))
    hit0 = x[live] @ w <= target
    steps[live[hit0]] = 0
    live = live[~hit0]
    for t in range(1, max_steps + 1):
        if live.size == 0:
            break
        x[live] = r2[live] * x[live] + k[live]
        loss = x[live] @ w
        hit = loss <= target
        steps[live[hit]] = t
        live = live[~hit]
    return steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer batch sizes in the baselines")
    args = parser.parse_args()
    config = NQMConfig()
    problem = config.problem()
    max_steps = 10 ** 8
    print(f"default problem: d = {problem.dim}, target {problem.target}, "
          f"{len(BATCH_SIZES)} batch sizes 4 .. 2^21")

    # Warm-up on a tiny problem: loads the compiled kernels from numba's cache (or compiles
    # them on a fresh checkout), a one-off cost per process that is reported separately.
    def warm_up():
        for name in ("sgd", "momentum"):
            tune_curve(NQMConfig(dim=50), OptimizerSpec(name), [4, 64, 1024, 16384], 10 ** 6)

    _, t_warm = timed(warm_up)
    print(f"warm-up (kernel load or compile, once per process): {t_warm:5.2f} s")
    sgd_curve, t_sgd = timed(tune_curve, config, OptimizerSpec("sgd"), BATCH_SIZES, max_steps)
    mom_curve, t_mom = timed(tune_curve, config, OptimizerSpec("momentum"), BATCH_SIZES, max_steps)
    print(f"tuned SGD curve:      {t_sgd:7.2f} s")
    print(f"tuned momentum curve: {t_mom:7.2f} s")

    # Grid and bisection, SGD: all batch sizes (or a subset with --quick).
    sub = BATCH_SIZES[::4] if args.quick else BATCH_SIZES
    base, t_base = timed(grid_bisection_sgd, problem, sub, PAPER_SGD_LRS, max_steps)
    ours = {p.batch_size: p.steps for p in sgd_curve.points}
    scale = len(BATCH_SIZES) / len(sub)
    print(f"grid+bisection SGD baseline ({len(sub)} batch sizes): {t_base:7.2f} s "
          f"-> {t_base * scale:7.2f} s for 20; tuned curve is {t_base * scale / t_sgd:6.1f}x faster")
    worse = [(b, ours[b], s) for b, s in zip(sub, base) if s is not None and ours[b] > s]
    fewer = np.mean([1 - ours[b] / s for b, s in zip(sub, base) if s is not None])
    print(f"  steps vs the paper's grid: {len(worse)} batch sizes worse, "
          f"mean {100 * fewer:.2f}% fewer steps")

    mom_sub = [16, 1024, 65536] if not args.quick else [1024]
    mbase, t_mbase = timed(grid_bisection_momentum, problem, mom_sub, PAPER_MOM_LRS,
                           PAPER_MOM_ONE_MINUS_B, max_steps)
    mscale = len(BATCH_SIZES) / len(mom_sub)
    ours_m = {p.batch_size: p.steps for p in mom_curve.points}
    print(f"grid+bisection momentum baseline ({len(mom_sub)} batch sizes): {t_mbase:7.2f} s "
          f"-> {t_mbase * mscale:7.1f} s for 20; tuned curve is {t_mbase * mscale / t_mom:6.1f}x faster")
    print("  steps (ours vs paper grid): " + ", ".join(
        f"B={b}: {ours_m[b]} vs {s}" for b, s in zip(mom_sub, mbase)))

    # Per-step loop on one batch size: the 20 largest step sizes of the paper's SGD grid.
    batch, budget = 1024, 20_000
    lrs = PAPER_SGD_LRS[-20:]
    loop, t_loop = timed(per_step_loop, problem, batch, lrs, problem.target, budget)
    dyn = dynamics(problem, batch, lrs)
    closed, t_closed = timed(steps_to_target, dyn, problem.target, budget)
    same = np.array_equal(loop, closed)
    print(f"per-step loop, B = {batch}, {lrs.size} learning rates, up to {budget} steps: "
          f"{t_loop:7.2f} s; closed-form crossing search {t_closed:6.3f} s "
          f"({t_loop / t_closed:6.0f}x faster); identical steps: {same}")


if __name__ == "__main__":
    main()

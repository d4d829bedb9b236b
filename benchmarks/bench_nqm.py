"""Speed of the exact NQM engine against the notebook method, measured in one run.

Run: `python benchmarks/bench_nqm.py` (add `--quick` for a smaller run; the full run takes about
2-3 minutes on 2 cores). Everything is measured in this run on this machine and printed as ratios;
nothing here is asserted by the test suite.

For SGD, heavy-ball momentum and SGD with iterate averaging (ema), on the default problem
(d = 10^4, h = c = 1/i, target 0.01, 20 batch sizes 4 .. 2^21):
1. Whole process: `python -m nqm curve --optimizer NAME`, fresh interpreters, median of a few
   (imports, numba's cached kernels, tuning, fit and printing).
2. In-process, warm: `nqm.tuning.tune_curve` after a warm-up in the same process.
3. The notebook method (Zhang et al.'s code): for every batch size and every point of the paper's
   grid, bisection on steps with the closed-form loss; the best grid point per batch size.
   SGD: 100 learning rates in logspace(-5, 0.5), all 20 batch sizes. Momentum: 100 learning
   rates in logspace(-8, 1) x 20 values of 1 - b in logspace(-5, 0); averaging: 100 learning
   rates in logspace(-5, 0.5) x 20 values of 1 - g in logspace(-5, 0); both timed on a few batch
   sizes and scaled to 20 (`--notebook-all`: on all 20). Our steps are the same or fewer.
4. A plain per-step loop against the closed-form crossing search, on one batch size.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
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


def grid_bisection_two(problem, batch_sizes, lrs, one_minus, max_steps, family):
    """Baseline for momentum or averaging (`family`): bisection on the closed form for every
    grid point (vectorised over the grid's 1 - b or 1 - g values at each learning rate)."""
    target = problem.target
    best = []
    key = "momentum" if family == "momentum" else "ema_decay"
    for batch in batch_sizes:
        best_b = None
        for a in lrs:
            dyn = dynamics(problem, batch, a, **{key: 1.0 - one_minus})
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


def whole_process(name, repeats):
    """Median wall time of `python -m nqm curve --optimizer name` in fresh interpreters."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "nqm", "curve", "--optimizer", name],
                       check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and batch sizes")
    parser.add_argument("--notebook-all", action="store_true",
                        help="run the notebook method for momentum and averaging on all 20 batch "
                             "sizes (about 6 more minutes), not 3 scaled to 20")
    args = parser.parse_args()
    config = NQMConfig()
    problem = config.problem()
    max_steps = 10 ** 8
    repeats = 1 if args.quick else 3
    print(f"default problem: d = {problem.dim}, target {problem.target}, "
          f"{len(BATCH_SIZES)} batch sizes 4 .. 2^21")

    # 1. Whole processes (first, while this process holds no numba threads).
    whole = {name: whole_process(name, repeats) for name in ("sgd", "momentum", "ema")}

    # 2. In-process, warm: a warm-up loads the compiled kernels (numba's cache) and numpy.
    for name in ("sgd", "momentum", "ema"):
        tune_curve(NQMConfig(dim=50), OptimizerSpec(name), [4, 64, 1024, 16384], 10 ** 6)
    warm, curves = {}, {}
    for name in ("sgd", "momentum", "ema"):
        runs = []
        for _ in range(repeats if name == "sgd" else 1):
            curves[name], t = timed(tune_curve, config, OptimizerSpec(name), BATCH_SIZES,
                                    max_steps)
            runs.append(t)
        warm[name] = statistics.median(runs)

    # 3. The notebook method, in this run.
    sub = BATCH_SIZES[::4] if args.quick else BATCH_SIZES
    two_sub = [1024] if args.quick else [16, 1024, 65536]
    if args.notebook_all:
        two_sub = BATCH_SIZES
    base, t_base = timed(grid_bisection_sgd, problem, sub, PAPER_SGD_LRS, max_steps)
    notebook = {"sgd": (t_base * len(BATCH_SIZES) / len(sub), sub, base)}
    for name, lrs in (("momentum", PAPER_MOM_LRS), ("ema", PAPER_SGD_LRS)):
        found, t = timed(grid_bisection_two, problem, two_sub, lrs, PAPER_MOM_ONE_MINUS_B,
                         max_steps, name)
        notebook[name] = (t * len(BATCH_SIZES) / len(two_sub), two_sub, found)

    print("\nseconds (machine load matters: rerun on a quiet machine for figures)")
    print(f"{'optimizer':>9}  {'whole process':>13}  {'tuning, warm':>12}  "
          f"{'notebook (20 B)':>15}  {'notebook / warm':>15}  steps vs notebook")
    for name in ("sgd", "momentum", "ema"):
        t_nb, batches, found = notebook[name]
        ours = {p.batch_size: p.steps for p in curves[name].points}
        worse = sum(1 for b, s in zip(batches, found) if s is not None and ours[b] > s)
        fewer = np.mean([1 - ours[b] / s for b, s in zip(batches, found) if s is not None])
        scaled = "" if len(batches) == len(BATCH_SIZES) else f" (x{len(BATCH_SIZES) / len(batches):g})"
        print(f"{name:>9}  {whole[name]:13.2f}  {warm[name]:12.3f}  {t_nb:15.1f}  "
              f"{t_nb / warm[name]:14.0f}x  {worse} of {len(batches)} B worse, "
              f"{100 * fewer:.2f}% fewer on average{scaled}")

    # 4. Per-step loop on one batch size: the 20 largest step sizes of the paper's SGD grid.
    batch, budget = 1024, 20_000
    lrs = PAPER_SGD_LRS[-20:]
    loop, t_loop = timed(per_step_loop, problem, batch, lrs, problem.target, budget)
    dyn = dynamics(problem, batch, lrs)
    closed, t_closed = timed(steps_to_target, dyn, problem.target, budget)
    same = np.array_equal(loop, closed)
    print(f"\nper-step loop, B = {batch}, {lrs.size} learning rates, up to {budget} steps: "
          f"{t_loop:7.2f} s; closed-form crossing search {t_closed:6.3f} s "
          f"({t_loop / t_closed:6.0f}x faster); identical steps: {same}")


if __name__ == "__main__":
    main()

"""The numbers of docs/nqm_adam.md, printed as its tables: mean-field Adam's measured errors and
what it says about the two published facts.

Run: `python benchmarks/adam_facts.py` (sections 1-4 about 4 minutes on a busy 2-core machine;
5 about 9 minutes and 6 about 1.3 alone); `--quick`
prints the same tables with fewer batch sizes and Monte-Carlo runs (about a minute; its numbers
are not the doc's). Nothing here is asserted by the test suite; `tests/nqm/test_adam.py`
re-checks the claims on smaller problems.

1. Segments (`adam.expected_loss(..., growth=g)`) against the step-by-step mean field
   (`adam.iterate_losses`), d = 16, h = c = 1/i: max relative error at t = 10 .. 2000.
2. The mean field (1 node: the ensemble's start; 4 nodes: the default) against Monte Carlo of
   real Adam (`adam.simulate_losses`, seed 1), and the rotated model (`adam_rotated`, d = 8).
3. Fact 1 (Zhang et al. 2019): `tune_adam_curve` against `tune_curve` (momentum, with and without
   H^-p), `NQMConfig(dim=100, target=0.01)`, B = 1 .. 16384.
4. Fact 2 (Li et al. 2024): the rate tuned for steps to target (`optimal_learning_rates`, d = 8)
   and the greedy one-step rate (`greedy_learning_rate`, d = 100 and 8), with the small-signal
   law's peak (`surge_law`) beside the greedy peak (d = 100 and 300).
5. Fact 2 in steps to target (session 50's pre-stated check): `optimal_learning_rates` at
   `NQMConfig(dim=32, noise_scale=30, target=0.1)`, three arms (rotated with independent noise,
   rotated with the noise along, diagonal), about 9 minutes alone (`--quick`: 8 rates per
   decade).

6. Fact 2 against the horizon (session 50's later check): the rate of the lowest E[L] after T
   steps, T = 1 .. 1000, same problem and arms (about 1.3 minutes alone).

`--only NAME` (repeatable: segments, monte-carlo, zhang, li, li-steps, li-horizon) prints those
sections only.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from nqm import adam, adam_rotated
from nqm.adam_tuning import tune_adam_curve
from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, tune_curve

CHECK = [10, 50, 100, 300, 1000, 2000]
SEGMENT_CASES = [(4, 0.01, 0.9, 0.999), (4, 0.05, 0.9, 0.99), (64, 0.02, 0.9, 0.0),
                 (16, 0.01, 0.0, 0.999)]
MC_CASES = [(4, 0.01, 0.9, 0.999), (4, 0.05, 0.9, 0.99), (16, 0.01, 0.0, 0.999),
            (256, 0.01, 0.9, 0.999), (4, 0.003, 0.9, 0.999)]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def case_label(case) -> str:
    return ", ".join(f"{x:g}" for x in case)


def segments() -> str:
    problem = NQMConfig(dim=16).problem()
    rows = []
    for case in SEGMENT_CASES:
        ref = adam.iterate_losses(problem, CHECK[-1], *case)[CHECK]
        errs = [np.max(np.abs(adam.expected_loss(problem, CHECK, *case, growth=g)[0] / ref - 1))
                for g in (0.02, 0.05, 0.1, 0.2)]
        rows.append([case_label(case)] + [f"{e:.1e}" for e in errs])
    return table(["B, a, b1, b2", "growth 0.02", "0.05", "0.1", "0.2"], rows)


def percent(values) -> str:
    return ", ".join(f"{100 * v:+.0f}%".replace("+0%", "0%").replace("-0%", "0%") for v in values)


def monte_carlo(runs: int) -> str:
    problem = NQMConfig(dim=16).problem()
    rows = []
    for case in MC_CASES:
        mc = adam.simulate_losses(problem, CHECK[-1], *case, runs=runs, seed=1)
        se = mc.stderr_T[CHECK] / mc.mean_T[CHECK]
        rel = [adam.expected_loss(problem, CHECK, *case, init_nodes=n)[0] / mc.mean_T[CHECK] - 1
               for n in (1, adam.INIT_NODES)]
        rows.append([case_label(case), percent(rel[0]), percent(rel[1]),
                     f"{100 * se.min():.0f}-{100 * se.max():.0f}%"])
    out = table(["B, a, b1, b2", "one node (ensemble mean)", f"{adam.INIT_NODES} nodes (default)",
                 "MC standard error"], rows)
    # the rotated model (no conditioning on the start) against real Adam in rotated coordinates
    small = NQMConfig(dim=8).problem()
    R = adam_rotated.random_rotation(8, 0)
    steps = [10, 50, 100, 200, 1500]
    lines = []
    for batch in (4, 256):
        model = adam_rotated.iterate_losses(small, R, steps[-1], batch, 0.02, 0.9, 0.99)[0]
        real = adam.simulate_losses(small, steps[-1], batch, 0.02, 0.9, 0.99, runs=runs, seed=5,
                                    rotation_DD=R)
        lines.append(f"rotated model (d = 8, R random, a = 0.02, b1 = 0.9, b2 = 0.99), B = "
                     f"{batch}: relative error at t = {', '.join(map(str, steps))}: "
                     f"{percent(model[steps] / real.mean_T[steps] - 1)}")
    return out + "\n\n" + "\n".join(lines)


def fact_zhang(batch) -> str:
    cfg = NQMConfig(dim=100, target=0.01)
    curves = {}
    start = time.perf_counter()
    curves["mean-field Adam, b2 = 0.999"] = tune_adam_curve(cfg, batch)
    seconds = time.perf_counter() - start
    curves["mean-field Adam, b2 = 0 (instant)"] = tune_adam_curve(cfg, batch, beta2=0.0)
    curves["mean-field Adam, b1 = 0.9 fixed"] = tune_adam_curve(cfg, batch, beta1=0.9)
    curves["momentum"] = tune_curve(cfg, OptimizerSpec("momentum"), batch)
    curves["momentum, P = H^-1/2"] = tune_curve(cfg, OptimizerSpec("momentum", 0.5), batch)
    curves["momentum, P = H^-1"] = tune_curve(cfg, OptimizerSpec("momentum", 1.0), batch)
    rows = []
    for name, curve in curves.items():
        a = analyse_curve(curve)
        rows.append([name, str(curve.points[0].steps), f"{a.fit.b_crit:.0f}", str(a.cbs20),
                     str(curve.points[-1].steps)])
    out = table(["optimizer", f"steps at B = {batch[0]}", "B_crit (fit)", "cbs20",
                 f"steps at B = {batch[-1]}"], rows)
    detail = []
    for name in ("mean-field Adam, b2 = 0.999", "momentum"):
        c = curves[name]
        detail.append(f"{name}: S(B) B = " + ", ".join(
            f"{p.steps * p.batch_size} (B = {p.batch_size})" for p in c.points if p.steps))
    adam_curve = curves["mean-field Adam, b2 = 0.999"]
    detail.append("mean-field Adam, b2 = 0.999: tuned b1 = " + ", ".join(
        f"{p.momentum:g}" for p in adam_curve.points if p.steps) + "; tuned rate = " + ", ".join(
        f"{p.learning_rate:.3g}" for p in adam_curve.points if p.steps))
    fixed = curves["mean-field Adam, b1 = 0.9 fixed"]
    detail.append("b1 fixed at 0.9 against tuned, steps at each B: " + ", ".join(
        f"{f.steps}/{t.steps} (B = {t.batch_size})" for f, t in zip(fixed.points, adam_curve.points)))
    detail.append(f"one tune_adam_curve (4 b1, {len(batch)} batch sizes): {seconds:.1f} s")
    return out + "\n\n" + "\n".join(detail)


def fact_li(quick: bool) -> str:
    lines = []
    p8 = NQMConfig(dim=8, target=0.005).problem()
    R8 = adam_rotated.random_rotation(8, 0)
    bs = 4.0 ** np.arange(0, 5 if quick else 7)
    lrs = np.geomspace(1e-3, 3, 29)
    for name, R in (("diagonal", np.eye(8)), ("rotated", R8)):
        best, steps, _ = adam_rotated.optimal_learning_rates(p8, R, bs, lrs, 0.9, 0.99,
                                                             max_steps=4000)
        lines.append(f"tuned for steps to target, d = 8, {name}: B = {', '.join(f'{b:g}' for b in bs)}"
                     f"; rate {', '.join(f'{x:.3g}' for x in best)}; steps "
                     f"{', '.join(map(str, steps))}")
    for d in (100, 300, 8):
        problem = NQMConfig(dim=d).problem()
        theta = np.random.default_rng(1).standard_normal(d)
        bs = 2.0 ** np.arange(0, 17)
        R = adam_rotated.random_rotation(d, 0)
        grad = problem.curvature_D * theta
        b_simple = problem.noise_D.sum() / (grad @ grad)
        for name, RR, indep in (("diagonal", np.eye(d), False), ("rotated, noise rotated along", R,
                                                                 False),
                                ("rotated, noise independent per coordinate", R, True)):
            lr = adam_rotated.greedy_learning_rate(problem, RR, theta, bs, independent_noise=indep)
            k = int(np.argmax(lr))
            lines.append(f"greedy one-step rate, d = {d}, {name}: {lr[0]:.3g} at B = 1, peak "
                         f"{lr[k]:.3g} at B = {bs[k]:g}, {lr[-1]:.3g} at B = {bs[-1]:g} "
                         f"(surge {100 * (lr[k] / lr[0] - 1):.0f}%, fall "
                         f"{100 * (1 - lr[-1] / lr[k]):.0f}%; B_simple = {b_simple:.3g})")
        law = adam_rotated.surge_law(problem, R, theta)
        ratio = np.diag((R * problem.noise_D) @ R.T) / (R @ (problem.curvature_D * theta)) ** 2
        top = law.peak_batch / law.small_signal_limit        # max_i B w_i^2 at the peak
        lines.append(f"small-signal law, d = {d}, rotated, independent noise: B_peak = tr H / Q = "
                     f"{law.peak_batch:.3g}, a_max {law.peak_rate:.3g}; median C_ii / mu_i^2 "
                     f"{np.median(ratio):.3g} (min {ratio.min():.3g}); at the law's peak the "
                     f"largest beta_i = {top / (1 + top):.2g} (the law needs it << 1)")
    return "\n".join(lines)


def li_setting(quick: bool):
    """The NQM, rotation, batch sizes and rate grid of session 50's checks (docs/nqm_adam.md):
    (problem, R, batch sizes (7,), rates, the grid's step factor)."""
    problem = NQMConfig(dim=32, noise_scale=30.0, target=0.1).problem()
    per_decade = 8 if quick else 24
    lrs = np.geomspace(0.01, 3.0, int(round(np.log10(300.0) * per_decade)) + 1)
    return (problem, adam_rotated.random_rotation(32, 0), 4.0 ** np.arange(0, 7), lrs,
            lrs[1] / lrs[0])


def fact_li_steps(quick: bool) -> str:
    """Session 50's check (docs/nqm_adam.md): does the tuned rate fall at large B in steps to
    target when the noise is independent per Adam coordinate?"""
    problem, R, bs, lrs, step = li_setting(quick)
    lines = [f"d = 32, noise_scale 30, target 0.1, b1 0.9, b2 0.999, {lrs.size} rates "
             f"{lrs[0]:g} .. {lrs[-1]:g} (grid step x{step:.3f}), at most 5,000 steps; initial "
             f"loss {problem.initial_loss():.3g}"]
    first = adam_rotated.first_step_learning_rate(problem, R, bs, independent_noise=True)
    k = int(np.argmax(first))
    lines.append(f"first step's greedy rate from the ensemble (rotated, independent noise): "
                 f"{', '.join(f'{x:.3g}' for x in first)}; peak at B = {bs[k]:g}, fall "
                 f"{100 * (1 - first[-1] / first[k]):.0f}% to B = {bs[-1]:g}")
    for name, RR, indep in (("rotated, noise independent per coordinate", R, True),
                            ("rotated, noise rotated along", R, False),
                            ("diagonal", np.eye(32), False)):
        start = time.perf_counter()
        best, steps, _ = adam_rotated.optimal_learning_rates(
            problem, RR, bs, lrs, 0.9, 0.999, max_steps=5000, independent_noise=indep)
        if np.all(np.isnan(best)):
            lines.append(f"{name}: no rate reached the target at any batch size")
            continue
        k = int(np.nanargmax(best))
        edge = [f"B = {b:g}" for b, r in zip(bs, best)
                if np.isclose(r, lrs[0], rtol=1e-9) or np.isclose(r, lrs[-1], rtol=1e-9)]
        missed = [f"B = {b:g}" for b, r in zip(bs, best) if np.isnan(r)]
        lines.append(f"{name}: B = {', '.join(f'{b:g}' for b in bs)}; rate "
                     f"{', '.join(f'{x:.3g}' for x in best)}; steps {', '.join(map(str, steps))}; "
                     f"peak {best[k]:.3g} at B = {bs[k]:g}, at B = {bs[-1]:g} "
                     f"{best[-1]:.3g} ({np.log(best[k] / best[-1]) / np.log(step):.1f} grid steps "
                     f"below the peak); on the grid's edge: {', '.join(edge) or 'none'}; no rate "
                     f"at the target in 5,000 steps: {', '.join(missed) or 'none'} "
                     f"({time.perf_counter() - start:.0f} s)")
    return "\n".join(lines)


def fact_li_horizon(quick: bool) -> str:
    """Session 50's later check (docs/nqm_adam.md): the rate of the lowest E[L] after T steps,
    per batch size, for T = 1 .. 1000; at which T does the surge stop?"""
    problem, R, bs, lrs, step = li_setting(quick)
    horizons = [1, 3, 10, 30, 100, 300, 1000]
    lines = [f"d = 32, noise_scale 30, b1 0.9, b2 0.999, {lrs.size} rates {lrs[0]:g} .. "
             f"{lrs[-1]:g} (grid step x{step:.3f}); the rate of the lowest E[L] after T steps"]
    for name, indep in (("rotated, noise independent per coordinate", True),
                        ("rotated, noise rotated along", False)):
        start = time.perf_counter()
        loss = adam_rotated.iterate_losses(problem, R, horizons[-1], np.repeat(bs, lrs.size),
                                           np.tile(lrs, bs.size), 0.9, 0.999,
                                           independent_noise=indep)
        loss = np.where(np.isfinite(loss), loss, np.inf).reshape(bs.size, lrs.size, -1)
        held = []
        for T in horizons:
            if not np.all(np.isfinite(loss[:, :, T]).any(axis=1)):
                lines.append(f"{name}, T = {T}: every rate diverged at some batch size")
                held.append(False)
                continue
            best = lrs[np.argmin(loss[:, :, T], axis=1)]
            k = int(np.argmax(best))
            below = np.log(best[k] / best[-1]) / np.log(step)
            surge = 0 < k < bs.size - 1 and below > 1.0 + 1e-9
            held.append(surge)
            edge = [f"B = {b:g}" for b, r in zip(bs, best) if r in (lrs[0], lrs[-1])]
            lines.append(f"{name}, T = {T}: rate {', '.join(f'{x:.3g}' for x in best)}; peak at "
                         f"B = {bs[k]:g}, {below:.0f} grid steps above B = {bs[-1]:g}: surge "
                         f"{'holds' if surge else 'does not hold'}; edge: "
                         f"{', '.join(edge) or 'none'}")
        last = max((T for T, h in zip(horizons, held) if h), default=None)
        lines.append(f"{name}: T* (the largest T at which the surge holds) = {last} "
                     f"({time.perf_counter() - start:.0f} s)")
    # the first step's greedy peak, continuous in B, at the start and with E theta^2 divided by
    # the ratio of the start's loss to the target (added after review: the x4 grid's 64 is
    # coarse)
    from scipy.optimize import minimize_scalar

    for label, shrink in (("at the start", 1.0), ("at the target's loss",
                                                  problem.initial_loss() / problem.target)):
        p = dataclasses.replace(problem, init_second_moment_D=problem.init_second_moment_D / shrink)
        best = minimize_scalar(
            lambda u: -adam_rotated.first_step_learning_rate(p, R, [np.exp(u)], True)[0],
            bounds=(0.0, np.log(65536.0)), method="bounded", options={"xatol": 1e-4})
        lines.append(f"first step's greedy peak (rotated, independent noise), {label}: "
                     f"B = {np.exp(best.x):.3g}")
    # diagnostic, added after the check: the diagonal NQM in the 4-node mean field, which
    # follows real Adam's Monte Carlo (the rotated model has one node: its transient is low)
    loss = adam.expected_loss(problem, horizons, np.repeat(bs, lrs.size), np.tile(lrs, bs.size),
                              0.9, 0.999)
    loss = np.where(np.isfinite(loss), loss, np.inf).reshape(bs.size, lrs.size, -1)
    for j, T in enumerate(horizons):
        best = lrs[np.argmin(loss[:, :, j], axis=1)]
        lines.append(f"diagonal, 4 nodes (adam.expected_loss), T = {T}: rate "
                     f"{', '.join(f'{x:.3g}' for x in best)}")
    for B in (16.0, 4096.0):
        parts = []
        for lr in (0.01, 0.0319, 0.102, 0.325):
            mc = adam.simulate_losses(problem, 300, B, lr, 0.9, 0.999, runs=200, seed=1)
            mf = adam.iterate_losses(problem, 300, B, lr, 0.9, 0.999)[300]
            one = adam.iterate_losses(problem, 300, B, lr, 0.9, 0.999, init_nodes=1)[300]
            parts.append(f"a = {lr:g}: {mc.mean_T[300]:.3g} +- {mc.stderr_T[300]:.2g} "
                         f"(4 nodes {mf:.3g}, 1 node {one:.3g})")
        lines.append(f"E[L] at T = 300, B = {B:g}, diagonal, real Adam (Monte Carlo, 200 runs): "
                     + "; ".join(parts))
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer batch sizes and MC runs")
    parser.add_argument("--only", action="append", choices=("segments", "monte-carlo", "zhang",
                                                            "li", "li-steps", "li-horizon"),
                        help="print only this section (repeatable)")
    args = parser.parse_args(argv)
    batch = [4 ** k for k in range(0, 8)] if args.quick else [2 ** k for k in range(0, 15)]
    sections = [("segments", "Segments against the step-by-step mean field (d = 16)", segments),
                ("monte-carlo", "Mean field against Monte Carlo of real Adam (d = 16)",
                 lambda: monte_carlo(100 if args.quick else 400)),
                ("zhang", "Fact 1: Adam-like preconditioning and perfect scaling",
                 lambda: fact_zhang(batch)),
                ("li", "Fact 2: the surge of the optimal learning rate",
                 lambda: fact_li(args.quick)),
                ("li-steps", "Fact 2 in steps to target (d = 32, independent noise)",
                 lambda: fact_li_steps(args.quick)),
                ("li-horizon", "Fact 2 against the horizon (d = 32)",
                 lambda: fact_li_horizon(args.quick))]
    for key, title, run in sections:
        if args.only and key not in args.only:
            continue
        start = time.perf_counter()
        body = run()
        print(f"## {title} ({time.perf_counter() - start:.1f} s)\n\n{body}\n", flush=True)


if __name__ == "__main__":
    main()

"""The numbers of docs/nqm_adam.md, printed as its tables: mean-field Adam's measured errors and
what it says about the two published facts.

Run: `python benchmarks/adam_facts.py` (about 4 minutes on a busy 2-core machine); `--quick`
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
   and the greedy one-step rate (`greedy_learning_rate`, d = 100 and 8).
"""

from __future__ import annotations

import argparse
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
    for d in (100, 8):
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
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer batch sizes and MC runs")
    args = parser.parse_args(argv)
    batch = [4 ** k for k in range(0, 8)] if args.quick else [2 ** k for k in range(0, 15)]
    sections = [("Segments against the step-by-step mean field (d = 16)", segments),
                ("Mean field against Monte Carlo of real Adam (d = 16)",
                 lambda: monte_carlo(100 if args.quick else 400)),
                ("Fact 1: Adam-like preconditioning and perfect scaling", lambda: fact_zhang(batch)),
                ("Fact 2: the surge of the optimal learning rate", lambda: fact_li(args.quick))]
    for title, run in sections:
        start = time.perf_counter()
        body = run()
        print(f"## {title} ({time.perf_counter() - start:.1f} s)\n\n{body}\n", flush=True)


if __name__ == "__main__":
    main()

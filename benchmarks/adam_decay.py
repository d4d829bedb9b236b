"""Fact 1 (Zhang et al. 2019) with a linear decay: does mean-field Adam extend perfect scaling
beyond momentum when both decay their rate linearly over the run?

Run: `python benchmarks/adam_decay.py` (39 s on the 2-core machine beside a niced sweep, with the
compiled step loops of `nqm.decay_kernels`; `--quick` uses d = 30 and B = 4 .. 4096; its numbers
are not the doc's). For each optimizer the constant-rate curve (`tune_curve` /
`tune_adam_curve`, the baseline, measured in the same run) and the linear-decay curve tuned from
it (`nqm.linear_decay.tune_decay_curve`; rates within the constant curve's default bounds, and
for Adam also up to momentum's ceiling of 10), on
`NQMConfig(dim=100, target=0.01)` (d = 10^4 is Zhang et al.'s; d = 100 keeps the step-by-step
evaluation short). Prints one table (steps at the smallest and largest batch size, the fit's
S_min and B_crit, cbs20), per curve S(B) B and the tuned metaparameters, and for constant-rate
Adam the share of the loss in directions where its update is sign-like, averaged over each run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nqm import adam
from nqm.adam_tuning import BETA2, tune_adam_curve
from nqm.linear_decay import final_losses, simulate_final_losses, tune_decay_curve
from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, default_space, tune_curve


def mean_signal_share(problem, point) -> float:
    """The share of E[L] in directions whose E[g^2] is mostly signal (`signal_share`), averaged
    over the steps of a constant-rate Adam point's run."""
    model = adam.MeanFieldAdam(problem, point.batch_size, point.learning_rate, point.momentum,
                               BETA2)
    shares = []
    for _ in range(point.steps):
        shares.append(model.signal_share()[0])
        model.advance(np.array([0]), np.array([1]))
    return float(np.mean(shares))


def fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="d = 30, fewer batch sizes")
    parser.add_argument("--dim", type=int, default=100,
                        help="dimensions d of the NQM (default 100, the doc's table; --quick: 30)")
    args = parser.parse_args(argv)
    cfg = NQMConfig(dim=30 if args.quick else args.dim, target=0.01)   # checks d
    batch = [4 ** k for k in range(1, 7)] if args.quick else [4 ** k for k in range(1, 8)]
    curves, seconds = {}, {}
    for name, make in (("momentum", lambda: tune_curve(cfg, OptimizerSpec("momentum"), batch)),
                       ("adam", lambda: tune_adam_curve(cfg, batch))):
        start = time.perf_counter()
        curves[f"{name}, constant rate"] = constant = make()
        seconds[f"{name}, constant rate"] = time.perf_counter() - start
        lo, hi = default_space(OptimizerSpec(name)).learning_rate    # the constant curve's
        # Adam's default space stops at 1; its decay also runs with momentum's ceiling, 10
        for top in (hi,) if name == "momentum" else (hi, 10.0):
            label = f"{name}, linear decay, a <= {top:g}"
            start = time.perf_counter()
            curves[label] = tune_decay_curve(cfg, name, constant, learning_rate_bounds=(lo, top))
            seconds[label] = time.perf_counter() - start
        print(f"{name}: tuned in {sum(v for k, v in seconds.items() if k.startswith(name)):.0f} s",
              flush=True)
    print(f"NQMConfig(dim={cfg.dim}, target={cfg.target}), B = {batch[0]} .. {batch[-1]}\n")
    print(f"| optimizer | steps at B = {batch[0]} | steps at B = {batch[-1]} | S_min (fit) | "
          "B_crit (fit) | cbs20 | tuning time |")
    print("|---|---|---|---|---|---|---|")
    for name, curve in curves.items():
        a = analyse_curve(curve)
        print(f"| {name} | {curve.points[0].steps} | {curve.points[-1].steps} | "
              f"{fmt(a.fit.s_min)} | {fmt(a.fit.b_crit)} | {a.cbs20} | {seconds[name]:.0f} s |")
    print()
    for name, curve in curves.items():
        rows = [f"B = {p.batch_size}: S B = {p.steps * p.batch_size if p.steps else '-'}, "
                f"a = {fmt(p.learning_rate)}, b = {fmt(p.momentum)}"
                + ("" if p.final_lr_fraction is None else f", f = {p.final_lr_fraction:g}")
                + (f" (edge: {', '.join(p.edge)})" if p.edge else "")
                for p in curve.points]
        print(f"{name}:\n  " + "\n  ".join(rows))
    lines = []
    for p in curves["adam, linear decay, a <= 10"].points:
        if p.steps and p.batch_size >= 256:
            args = (cfg.problem(), "adam", p.steps, p.batch_size, p.learning_rate, p.momentum,
                    p.final_lr_fraction)
            model = final_losses(*args)[0]
            mean, se = simulate_final_losses(*args, runs=4000, seed=1)
            lines.append(f"B = {p.batch_size} (T = {p.steps}): {model:.4g} against {mean:.4g} "
                         f"+- {se:.2g} ({100 * (model / mean - 1):+.0f}%)")
    print("adam, linear decay, a <= 10: the mean field against Monte Carlo of real Adam (4000 runs) at the "
          "tuned point, E[L] at T: " + "; ".join(lines))
    constant = curves["adam, constant rate"]
    print("adam, constant rate: share of E[L] in signal-dominated directions (h^2 E theta^2 > "
          "c / B), mean over the run: " + ", ".join(
              f"{mean_signal_share(cfg.problem(), p):.2f} (B = {p.batch_size})"
              for p in constant.points if p.steps))


if __name__ == "__main__":
    main()

"""Fact 1 (Zhang et al. 2019) with a linear decay: does mean-field Adam extend perfect scaling
beyond momentum when both decay their rate linearly over the run?

Run: `python benchmarks/adam_decay.py` (6 min on a busy 2-core machine, 4.5 of them Adam's decay;
`--quick` uses d = 30 and B = 4 .. 4096, 30 s; its numbers are not the doc's). For each optimizer
the constant-rate curve (`tune_curve` / `tune_adam_curve`, the baseline, measured in the same run)
and the linear-decay curve tuned from it (`nqm.linear_decay.tune_decay_curve`), on
`NQMConfig(dim=100, target=0.01)` (d = 10^4 is Zhang et al.'s; d = 100 keeps the step-by-step
evaluation to minutes). Prints one table (steps at the smallest and largest batch size, the fit's
S_min and B_crit, cbs20), per curve S(B) B and the tuned metaparameters, and for constant-rate
Adam the share of the loss in directions where its update is sign-like, averaged over each run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nqm import adam
from nqm.adam_tuning import BETA2, tune_adam_curve
from nqm.linear_decay import tune_decay_curve
from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, tune_curve


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
    args = parser.parse_args(argv)
    cfg = NQMConfig(dim=30 if args.quick else 100, target=0.01)
    batch = [4 ** k for k in range(1, 7)] if args.quick else [4 ** k for k in range(1, 8)]
    curves, seconds = {}, {}
    for name, make in (("momentum", lambda: tune_curve(cfg, OptimizerSpec("momentum"), batch)),
                       ("adam", lambda: tune_adam_curve(cfg, batch))):
        start = time.perf_counter()
        curves[f"{name}, constant rate"] = constant = make()
        seconds[f"{name}, constant rate"] = time.perf_counter() - start
        start = time.perf_counter()
        curves[f"{name}, linear decay"] = tune_decay_curve(cfg, name, constant)
        seconds[f"{name}, linear decay"] = time.perf_counter() - start
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
    constant = curves["adam, constant rate"]
    print("adam, constant rate: share of E[L] in signal-dominated directions (h^2 E theta^2 > "
          "c / B), mean over the run: " + ", ".join(
              f"{mean_signal_share(cfg.problem(), p):.2f} (B = {p.batch_size})"
              for p in constant.points if p.steps))


if __name__ == "__main__":
    main()

"""`python -m nqm curve`: the tuned steps-to-target curve of the exact NQM, as a table, JSON or CSV.

All logic lives in the library (`nqm.tuning`, `nqm.scaling`, `nqm.noise_scale`); this module
only parses flags, calls it and prints. Bad input prints one line `error: ...` and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import csv
import io
import sys
import time

import numpy as np

from nqm import linear_decay, noise_scale, validation
from nqm.argparser import OneLineErrorParser
from nqm.curve import to_json
from nqm.problem import NOISE_MODELS, NQMConfig
from nqm.scaling import Thresholds, analyse_curve, b_crit_bound
from nqm.tuning import FAMILIES, OptimizerSpec, SearchSpace, default_space, tune_curve

DEFAULT_BATCH_SIZES = "4:2097152"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="python -m nqm", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser)
    c = sub.add_parser("curve", help="tuned steps to target at each batch size")
    c.add_argument("--optimizer", choices=FAMILIES, default="sgd",
                   help="sgd, heavy-ball momentum, SGD with iterate averaging (ema), SGD with "
                        "a piecewise-constant schedule tuned per batch size (schedule), or "
                        "mean-field Adam, learning rate and b1 tuned (adam, docs/nqm_adam.md)")
    c.add_argument("--pieces", type=int, default=10,
                   help="equal pieces of a tuned schedule (--optimizer schedule; default 10)")
    c.add_argument("--precond-power", type=float, default=0.0,
                   help="p in [0, 1]: preconditioner H^-p (0 SGD, 0.5 Adam-like, 1 K-FAC-like)")
    c.add_argument("--dim", type=int, default=10_000, help="dimensions d (default 10000)")
    c.add_argument("--spectrum-exponent", type=float, default=1.0, help="a in h_i = i^-a")
    c.add_argument("--noise", choices=NOISE_MODELS, default="curvature",
                   help="c_i = h_i (curvature), i^-b (power) or constant")
    c.add_argument("--noise-exponent", type=float, default=1.0, help="b in c_i = i^-b")
    c.add_argument("--noise-scale", type=float, default=1.0, help="factor on c_i")
    c.add_argument("--init-second-moment", type=float, default=1.0, help="E theta_i^2 at step 0")
    c.add_argument("--target", type=float, default=0.01, help="loss to reach (default 0.01)")
    c.add_argument("--train-size", type=int, default=None,
                   help="N: batches drawn without replacement from N examples (finite-population "
                        "correction of the noise; default: unlimited data)")
    c.add_argument("--batch-sizes", default=DEFAULT_BATCH_SIZES,
                   help="comma list (4,8,16) or LOW:HIGH powers of two (default 4:2097152)")
    c.add_argument("--max-steps", type=int, default=10 ** 8, help="step budget (default 1e8)")
    c.add_argument("--lr-range", default=None,
                   help="learning-rate search bounds LOW,HIGH (default 1e-8,10; adam 1e-5,1)")
    c.add_argument("--linear-decay", action="store_true",
                   help="decay the rate linearly over the run, its final fraction tuned too "
                        "(sgd, momentum, adam; evaluated step by step, so small problems only: "
                        "docs/nqm_adam.md)")
    c.add_argument("--certify", action="store_true",
                   help="hold each tuned point against the grid search (8-16x the time on "
                        "the default problem; the local search alone can take up to 50%% more "
                        "steps where a batch size needs a few: docs/nqm.md)")
    c.add_argument("--format", choices=("table", "json", "csv"), default="table")
    m = sub.add_parser("compare", help="several optimizers side by side on one problem",
                       parents=[_problem_flags()], conflict_handler="resolve")
    m.add_argument("--optimizers", default="sgd,momentum,sgd@0.5,ema,schedule",
                   help="comma list of NAME or NAME@p (p: preconditioning power; not for adam), "
                        "e.g. sgd,momentum,sgd@0.5,ema,schedule,adam")
    m.add_argument("--pieces", type=int, default=10, help="pieces of a tuned schedule")
    m.add_argument("--format", choices=("table", "json"), default="table")
    return parser


def _problem_flags() -> argparse.ArgumentParser:
    """The problem and budget flags shared by `curve` and `compare`."""
    p = OneLineErrorParser(add_help=False)
    p.add_argument("--dim", type=int, default=10_000)
    p.add_argument("--spectrum-exponent", type=float, default=1.0)
    p.add_argument("--noise", choices=NOISE_MODELS, default="curvature")
    p.add_argument("--noise-exponent", type=float, default=1.0)
    p.add_argument("--noise-scale", type=float, default=1.0)
    p.add_argument("--init-second-moment", type=float, default=1.0)
    p.add_argument("--target", type=float, default=0.01)
    p.add_argument("--train-size", type=int, default=None)
    p.add_argument("--batch-sizes", default=DEFAULT_BATCH_SIZES)
    p.add_argument("--max-steps", type=int, default=10 ** 8)
    p.add_argument("--lr-range", default=None)
    return p


def parse_optimizers(text: str) -> list[tuple[str, float]]:
    """'sgd,momentum,sgd@0.5' -> [('sgd', 0.0), ('momentum', 0.0), ('sgd', 0.5)]."""
    out = []
    for token in (t.strip() for t in text.split(",")):
        if not token:
            continue
        name, _, power = token.partition("@")
        if name not in FAMILIES:
            raise ValueError(f"optimizers: unknown optimizer {name!r}; choose from "
                             f"{', '.join(FAMILIES)} (optionally NAME@p)")
        try:
            p = float(power) if power else 0.0
        except ValueError:
            raise ValueError(f"optimizers: preconditioning power in {token!r} must be a number "
                             "in [0, 1]") from None
        if name == "adam" and p != 0.0:
            raise ValueError(f"optimizers: {token!r}: adam takes no preconditioning power "
                             "(its preconditioner is its own)")
        out.append((name, p))
    if not out:
        raise ValueError("optimizers must name at least one optimizer")
    return out


def run_compare(args) -> dict:
    """Tunes one curve per optimizer in `args.optimizers`; returns {label: curve JSON object}."""
    results = {}
    for name, power in parse_optimizers(args.optimizers):
        args.optimizer, args.precond_power = name, power
        label = name if power == 0 else f"{name}@{power:g}"
        results[label] = run_curve(args)
    return results


def format_compare(results: dict) -> str:
    labels = list(results)
    first = results[labels[0]]
    header = ["batch_size"] + [f"{k} steps" for k in labels]
    body = []
    for i, p in enumerate(first["points"]):
        body.append([str(p["batch_size"])] + [_fmt(results[k]["points"][i]["steps"]) for k in labels])
    summary = [("lr @ smallest B", lambda r: r["points"][0]["learning_rate"]),
               ("lr @ largest B", lambda r: r["points"][-1]["learning_rate"]),
               ("S_min (fit)", lambda r: r["fit"]["s_min"]),
               ("B_crit (fit)", lambda r: r["fit"]["b_crit"]),
               ("cbs20", lambda r: r["regimes"]["cbs20"]),
               ("maximal from", lambda r: r["regimes"]["maximal_from"]),
               ("seconds", lambda r: r["config"]["seconds"])]
    for name, fn in summary:
        body.append([name] + [_fmt(fn(results[k])) for k in labels])
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    n = len(first["points"])
    for j, row in enumerate(body):
        if j == n:
            lines.append("")
        lines.append("  ".join(v.rjust(w) for v, w in zip(row, widths)))
    return "\n".join(lines)


def _check_decay_work(problem, optimizer, steps, qualifier):
    linear_decay.check_work(problem, optimizer, steps, f"--linear-decay{qualifier}",
                            "use a smaller --dim or larger --batch-sizes")


@contextlib.contextmanager
def adam_progress(name: str):
    """A progress(done, total) callback drawing a tqdm bar on stderr while mean-field Adam is
    tuned (minutes on large problems); None for the other families, which take seconds. tqdm
    draws nothing when stderr is not a terminal."""
    if name != "adam":
        yield None
        return
    from tqdm import tqdm
    bar = tqdm(desc="tuning mean-field Adam", unit="rate", file=sys.stderr, disable=None)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield progress
    finally:
        bar.close()


def run_curve(args) -> dict:
    """Tunes the curve described by parsed `args`; returns the JSON object of docs/design.md,
    'Formats'."""
    config = NQMConfig(dim=args.dim, spectrum_exponent=args.spectrum_exponent, noise=args.noise,
                       noise_exponent=args.noise_exponent, noise_scale=args.noise_scale,
                       init_second_moment=args.init_second_moment, target=args.target,
                       train_size=args.train_size)
    try:
        problem = config.problem()
    except ValueError as err:
        raise ValueError(str(err).replace("train_size", "--train-size", 1)) from None
    try:
        spec = OptimizerSpec(args.optimizer, args.precond_power, args.pieces)
    except ValueError as err:
        raise ValueError(f"--precond-power / --pieces: {err}") from None
    try:
        space = (default_space(spec) if args.lr_range is None
                 else SearchSpace(learning_rate=validation.parse_range(args.lr_range, "lr-range")))
    except ValueError as err:
        raise ValueError(f"--lr-range: {err}") from None
    batch_sizes = validation.parse_batch_sizes(args.batch_sizes)
    problem.check_batch_sizes(batch_sizes, "--batch-sizes (at most --train-size)")
    # Adam's tuner marches every row to the budget at most (AdamSearch's cap)
    validation.check_whole("max-steps", args.max_steps, 1,
                           10 ** 9 if spec.name == "adam" else 10 ** 12)
    if problem.initial_loss() <= problem.target:
        raise ValueError(f"target {problem.target:g} is at or above the initial loss "
                         f"{problem.initial_loss():g}: nothing to train")
    decay = getattr(args, "linear_decay", False)
    if decay and (spec.name not in linear_decay.OPTIMIZERS or spec.precond_power != 0):
        raise ValueError("--linear-decay takes --optimizer sgd, momentum or adam without "
                         f"--precond-power, got {spec.name} with p = {spec.precond_power:g}")
    if decay and problem.train_size is None:     # refuse before tuning on the steps' bound
        _check_decay_work(problem, spec.name, problem.lower_bound_steps(batch_sizes),
                          " (at least: on the steps' lower bound)")
    start = time.perf_counter()
    with adam_progress(spec.name) as progress:
        curve = tune_curve(problem, spec, batch_sizes, args.max_steps, space, progress,
                           certify=getattr(args, "certify", False))
    curve = dataclasses.replace(curve, config={**curve.config,
                                               "certified": getattr(args, "certify", False)})
    if decay:
        _check_decay_work(problem, spec.name, [p.steps for p in curve.points], "")
        curve = linear_decay.tune_decay_curve(problem, spec.name, curve,
                                              learning_rate_bounds=space.learning_rate)
    seconds = time.perf_counter() - start
    analysis = analyse_curve(curve, Thresholds())
    b_simple, b_noise = noise_scale.initial_noise_scale(problem)
    out = {"config": {"problem": config.to_dict(), **curve.config, "seconds": round(seconds, 3)},
           "points": [p.to_dict() for p in curve.points]}
    out.update(analysis.to_dict())
    out["efficiency"] = analysis.efficiency
    out["regime"] = list(analysis.regimes)
    out["noise_scale"] = {"b_simple": float(b_simple), "b_noise": float(b_noise)}
    out["lower_bound"] = ([None] * len(curve.batch_sizes) if problem.train_size is not None
                          else problem.lower_bound_steps(curve.batch_sizes))
    return out


COLUMNS = ("batch_size", "steps", "learning_rate", "momentum", "ema_decay", "final_lr_fraction",
           "efficiency", "regime", "lower_bound", "edge")


def _rows(result: dict):
    for i, p in enumerate(result["points"]):
        yield {"batch_size": p["batch_size"], "steps": p["steps"],
               "learning_rate": p["learning_rate"], "momentum": p.get("momentum"),
               "ema_decay": p.get("ema_decay"), "final_lr_fraction": p.get("final_lr_fraction"),
               "efficiency": result["efficiency"][i],
               "regime": result["regime"][i], "lower_bound": result["lower_bound"][i],
               "edge": "+".join(p.get("edge", []))}


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def format_table(result: dict) -> str:
    cols = [c for c in COLUMNS if any(r[c] not in (None, "") for r in _rows(result))]
    body = [[_fmt(r[c]) for c in cols] for r in _rows(result)]
    widths = [max(len(c), *(len(row[i]) for row in body)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in body]
    fit, reg, ns = result["fit"], result["regimes"], result["noise_scale"]
    lines.append("")
    lines.append(f"fit S(B) = S_min (1 + B_crit / B): S_min = {_fmt(fit['s_min'])}, "
                 f"B_crit = {_fmt(fit['b_crit'])}, R^2 (log S) = {_fmt(fit['r2'])}")
    bound = b_crit_bound([p["batch_size"] for p in result["points"]],
                         [p["steps"] for p in result["points"]])
    if bound is not None:
        lines.append(bound.describe())
    lines.append(f"perfect scaling (within {reg['perfect_threshold']:g}x) up to B = "
                 f"{_fmt(reg['cbs20'])}; maximal data parallelism (within "
                 f"{reg['maximal_threshold']:g}x of the fewest steps) from B = "
                 f"{_fmt(reg['maximal_from'])}")
    lines.append(f"noise scale at the start: B_simple = {_fmt(ns['b_simple'])}, "
                 f"B_noise = {_fmt(ns['b_noise'])}")
    if result["config"]["optimizer"] == "adam":
        lines.append(f"mean-field Adam (docs/nqm_adam.md): the momentum column is b1 (tuned over "
                     f"{', '.join(f'{b:g}' for b in result['config']['beta1'])}), "
                     f"b2 = {result['config']['beta2']:g}")
    if result["config"].get("schedule") == "linear_decay":
        lines.append("linear decay of the rate over the run to final_lr_fraction times it, tuned "
                     "around the constant optimum (docs/nqm_adam.md)")
    lines.append(f"tuned in {result['config']['seconds']:.2f} s")
    return "\n".join(lines)


def format_csv(result: dict) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in _rows(result):
        writer.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return buf.getvalue()


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:       # bad flags (2) or --help (0): a status, not an exception
        return int(exit_.code or 0)
    try:
        result = run_compare(args) if args.command == "compare" else run_curve(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.command == "compare":
        print(to_json(result, indent=1) if args.format == "json" else format_compare(result))
        return 0
    if args.format == "json":
        print(to_json(result, indent=1))
    elif args.format == "csv":
        print(format_csv(result), end="")
    else:
        print(format_table(result))
    return 0

"""What the app's NQM explorer shows, as plain tables: tuned curves, their analysis, references.

Pure functions of plain values (usable as cache keys); `ui.charts` draws the tables and
`app.py` only parses the controls and calls these.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nqm import adam_rotated, linear_decay
from nqm.curve import ScalingCurve
from nqm.moments import expected_loss
from nqm.noise_scale import noise_scale_trajectory
from nqm.problem import NQMConfig
from nqm.scaling import Analysis, analyse_curve
from nqm.tuning import OptimizerSpec, default_space, tune_curve

OPTIMIZER_LABELS = {"sgd": "SGD", "momentum": "momentum", "ema": "EMA (averaging)",
                    "schedule": "schedule (10 pieces)", "adam": "Adam (mean field)",
                    "sgd_decay": "SGD, linear decay", "momentum_decay": "momentum, linear decay",
                    "adam_decay": "Adam (mean field), linear decay"}
# A linear decay of the rate over the run (`nqm.linear_decay`), tuned from the constant curve of
# its optimizer, within that optimizer's default rate bounds.
DECAY_OF = {"sgd_decay": "sgd", "momentum_decay": "momentum", "adam_decay": "adam"}
# Mean-field Adam is tuned by scanning learning rates for every b1 (`nqm.adam_tuning`): ~15 s
# at d = 100 over 13 batch sizes on a busy 2-core machine, and linear in d.
ADAM_MAX_DIM = 300
SURGE_PRESET = "Adam's surge (Li et al. 2024)"
SURGE_MAX_DIM = 1000   # the rotated model is dense (d, d)
DECAY_PRESET = "Adam beyond momentum, with a linear decay (Zhang et al. 2019)"


@dataclass(frozen=True)
class Exploration:
    """Tables for one problem and several optimizers.

    Attributes:
      points: one row per (optimizer, batch size): steps (NaN if not reached), learning_rate,
        momentum, effective_lr = a / (1 - b), regime, perfect (S(B0) B0 / B of that optimizer).
      summary: one row per optimizer: s_min, b_crit, r2, cbs20, maximal_from, seconds.
      lower_bound: batch_size, steps of the estimator bound sum(c/h) / (2 target B).
      analyses: optimizer label -> nqm.scaling.Analysis.
    """

    points: pd.DataFrame
    summary: pd.DataFrame
    lower_bound: pd.DataFrame
    analyses: dict


PRESETS = {
    "Momentum vs SGD": (
        dict(optimizers=["sgd", "momentum"], powers=[0.0], target=0.01),
        "At small batch sizes both need the same number of examples: halving the steps per "
        "doubling of the batch (perfect scaling) is limited by gradient noise, and momentum "
        "only acts like a larger learning rate a / (1 - b). At large batch sizes noise no longer "
        "matters and the curvature limits the step size (a < 2 / h_max for SGD): momentum's "
        "stable range a < 2 (1 + b) / h_max is wider, so its curve keeps falling long after "
        "SGD's has flattened. The critical batch size moves up by about 60x."),
    "The preconditioning ladder": (
        dict(optimizers=["sgd"], powers=[0.0, 0.5, 1.0], target=0.01),
        "Preconditioning with H^-p shrinks the spread of curvatures the step size must respect "
        "(p = 0: SGD; 0.5: Adam-like; 1: K-FAC-like, every direction contracts alike). The "
        "noise is rescaled too, so small batch sizes gain less than large ones: each step up "
        "the ladder extends perfect scaling to larger batches."),
    "Averaging at small batch": (
        dict(optimizers=["sgd", "ema"], powers=[0.0], target=0.01),
        "An exponential moving average of the iterates averages the noise away, which is what "
        "limits small batches: there it lets the step size grow and saves several times the "
        "steps. At large batch sizes there is little noise to average and the curves meet."),
    "Learning-rate schedules": (
        dict(optimizers=["sgd", "schedule"], powers=[0.0], target=0.01),
        "A schedule of 10 tuned pieces starts with large steps and ends with small ones, like "
        "averaging it fights noise: it pays in the noise-dominated regime (small batches) and "
        "brings almost nothing once the batch is large."),
    SURGE_PRESET: (
        dict(optimizers=["adam"], powers=[0.0], target=0.01, dim=100, batch_range=(4, 16384)),
        "Li et al. (2024) report that Adam's optimal learning rate first rises with the batch "
        "size and then falls, with the peak near the noise scale. In this mean-field Adam the "
        "rate tuned for steps to target (the curves below) only rises. The fall appears only in "
        "the greedy one-step rate, when the Hessian is not diagonal in Adam's coordinates and "
        "the gradient noise is independent per coordinate (the chart under this box). There "
        "Li et al.'s law, in its small-signal form, approximates the rate near its peak, which "
        "it puts at tr H / Q, where Q is the Hessian's off-diagonal mass between the "
        "coordinates' signal-to-noise ratios: below the noise scale when that mass is large, "
        "as here (docs/nqm_adam.md)."),
    DECAY_PRESET: (
        dict(optimizers=["momentum", "momentum_decay", "adam", "adam_decay"], powers=[0.0],
             target=0.01, dim=100, batch_range=(4, 16384)),
        "Zhang et al. (2019) found that Adam-like preconditioning extends perfect scaling to "
        "larger batches than momentum. In this mean-field Adam it does not at a constant rate: "
        "the rate must be small enough for the loss floor at the end, and at large batch sizes "
        "Adam's step is sign-like (about the rate per step, whatever the curvature) for most of "
        "the run, so a small rate is slow. With a linear decay of the rate over the run, tuned "
        "at each batch size within the same rate bounds, the decay cuts momentum's steps only "
        "where noise dominates and Adam's at most batch sizes, and Adam's curve bends later: "
        "compare B_crit in the table (docs/nqm_adam.md, 'Fact 1')."),
    "A tougher target": (
        dict(optimizers=["sgd", "momentum"], powers=[0.0], target=0.001),
        "Asking for a lower loss makes the noise matter for longer: the critical batch size "
        "grows as the target falls (McCandlish et al. 2018: B_noise grows as the loss falls)."),
}


def explore(config: NQMConfig, optimizers: tuple[str, ...], precond_powers: tuple[float, ...],
            batch_sizes: tuple[int, ...], max_steps: int = 10 ** 8) -> Exploration:
    """Tunes each optimizer at each preconditioning power on `config` and tabulates the curves.

    Raises ValueError (naming the control) on bad input.
    """
    problem = config.problem()
    if problem.initial_loss() <= problem.target:
        raise ValueError(f"target {problem.target:g} must be below the initial loss "
                         f"{problem.initial_loss():.4g}")
    if not optimizers:
        raise ValueError("choose at least one optimizer")
    if not precond_powers:
        raise ValueError("choose at least one preconditioning power")
    if not batch_sizes:
        raise ValueError("the batch-size range is empty")
    if {"adam", "adam_decay"} & set(optimizers) and problem.dim > ADAM_MAX_DIM:
        raise ValueError(f"Adam is tuned here for dimensions d <= {ADAM_MAX_DIM} (its tuning "
                         f"takes seconds per 100 dimensions), got d = {problem.dim}")
    for name in [n for n in DECAY_OF if n in optimizers]:   # refused on the steps' lower bound
        check_decay_work(problem, DECAY_OF[name], problem.lower_bound_steps(batch_sizes))
    # Adam has its own preconditioner and the decays are tuned without one: each is tuned once,
    # at p = 0, whatever the powers chosen
    once = ("adam", *DECAY_OF)
    runs = [(n, p) for p in precond_powers for n in optimizers if n not in once]
    runs += [(n, 0.0) for n in once if n in optimizers]
    rows, summary, analyses = [], [], {}
    for name, precond_power in runs:
        start = time.perf_counter()
        curve = tuned_curve(config, name, precond_power, batch_sizes, max_steps)
        seconds = time.perf_counter() - start
        label = OPTIMIZER_LABELS[name] + (f", p = {precond_power:g}" if precond_power else "")
        analysis: Analysis = analyse_curve(curve)
        analyses[label] = analysis
        steps = curve.steps
        base = steps[0] * curve.batch_sizes[0] if np.isfinite(steps[0]) else np.nan
        for i, p in enumerate(curve.points):
            # Adam's momentum field is b1; its rate already multiplies m's (1 - b1) average
            b = 0.0 if name in ("adam", "adam_decay") else (p.momentum or 0.0)
            rows.append({"optimizer": label, "batch_size": p.batch_size, "steps": steps[i],
                         "learning_rate": p.learning_rate, "momentum": p.momentum,
                         "effective_lr": None if p.learning_rate is None else p.learning_rate / (1 - b),
                         "regime": analysis.regimes[i], "perfect": base / p.batch_size,
                         "final_lr_fraction": p.final_lr_fraction, "edge": "+".join(p.edge)})
        summary.append({"optimizer": label, "s_min": analysis.fit.s_min,
                        "b_crit": analysis.fit.b_crit, "r2": analysis.fit.r2,
                        "cbs20": analysis.cbs20, "maximal_from": analysis.maximal_from,
                        "seconds": seconds})
    bs = np.asarray(batch_sizes, dtype=float)
    lower = pd.DataFrame({"batch_size": bs, "steps": problem.lower_bound_steps(bs)})
    return Exploration(pd.DataFrame(rows), pd.DataFrame(summary), lower, analyses)


def check_decay_work(problem, optimizer: str, steps) -> None:
    """`linear_decay.check_work` with the explorer's label and the controls that shrink it."""
    linear_decay.check_work(problem, optimizer, steps, OPTIMIZER_LABELS[optimizer + "_decay"],
                            "choose fewer dimensions d, a higher target loss or larger batch "
                            "sizes")


@functools.lru_cache(maxsize=64)
def constant_curve(config: NQMConfig, name: str, precond_power: float,
                   batch_sizes: tuple[int, ...], max_steps: int) -> ScalingCurve:
    """The tuned constant-rate curve of one optimizer in its default space, kept for the
    process: a decay added to a selection starts from the constant curve already tuned, and a
    decay refused on that curve's steps does not tune it again at the next redraw."""
    spec = OptimizerSpec(name, precond_power)
    return tune_curve(config.problem(), spec, batch_sizes, max_steps, default_space(spec))


def tuned_curve(config: NQMConfig, name: str, precond_power: float, batch_sizes,
                max_steps: int) -> ScalingCurve:
    """The tuned curve of one explorer optimizer (a name of OPTIMIZER_LABELS) in its default
    space; a decay starts from its optimizer's constant curve at the same power
    (`constant_curve`, cached), within that space's rates. The Measured tab draws the same."""
    base = DECAY_OF.get(name, name)
    constant = constant_curve(config, base, float(precond_power), tuple(batch_sizes), max_steps)
    if name not in DECAY_OF:
        return constant
    problem = config.problem()
    check_decay_work(problem, base, [p.steps for p in constant.points])
    space = default_space(OptimizerSpec(base, precond_power))
    return linear_decay.tune_decay_curve(problem, base, constant,
                                         learning_rate_bounds=space.learning_rate)


def noise_scale_along(config: NQMConfig, batch_size: int, learning_rate: float,
                      momentum: float = 0.0, precond_power: float = 0.0,
                      steps: int = 0, points: int = 60) -> pd.DataFrame:
    """B_simple, B_noise and E[L] along the expected trajectory of one run, at `points` steps
    spaced geometrically up to `steps`."""
    problem = config.problem()
    ts = np.unique(np.concatenate([[0], np.geomspace(1, max(steps, 1), points).astype(np.int64)]))
    b_simple, b_noise = noise_scale_trajectory(problem, ts, batch_size, learning_rate,
                                               momentum=momentum, precond_power=precond_power)
    loss = expected_loss(problem, ts, batch_size, learning_rate, momentum=momentum,
                         precond_power=precond_power)[0]
    return pd.DataFrame({"step": ts, "b_simple": b_simple[0], "b_noise": b_noise[0],
                         "loss": loss})


LAW_MODEL = "Li et al.'s law (small signal)"


def surge(config: NQMConfig, batch_sizes: tuple[int, ...],
          seed: int = 0) -> tuple[pd.DataFrame, float, adam_rotated.SurgeLaw]:
    """Adam's greedy one-step learning rate against B (`nqm.adam_rotated.greedy_learning_rate`):
    for the diagonal NQM and for the NQM turned by a random rotation R (`seed`) with gradient
    noise independent per Adam coordinate (Li et al. 2024's setting), from one start theta_0
    (seed 1, scaled by the problem's E[theta_0^2]), at `batch_sizes` and every power of two
    below them down to 1 (the peak sits at small B); and Li et al.'s law, the rotated model's
    small-signal form (`adam_rotated.surge_law`), where it has a peak, drawn from a tenth of
    its peak to three times it (it approximates the model there only).

    Returns:
      (table with columns batch_size, model, learning_rate; B_simple = tr(C) / |H theta_0|^2 at
      that start, the same for both models; the law, whose peak_batch is inf when it has none).
    """
    problem = config.problem()
    if problem.dim > SURGE_MAX_DIM:
        raise ValueError(f"the surge chart needs dimensions d <= {SURGE_MAX_DIM}, got d = {problem.dim}")
    if not batch_sizes:
        raise ValueError("the batch-size range is empty")
    d = problem.dim
    theta = np.random.default_rng(1).standard_normal(d) * np.sqrt(problem.init_second_moment_D)
    lowest = min(batch_sizes)
    below = [2.0 ** k for k in range(int(np.ceil(np.log2(lowest)))) if 2.0 ** k < lowest]
    batch = np.asarray(sorted({*below, *map(float, batch_sizes)}), dtype=float)
    rotation = adam_rotated.random_rotation(d, seed)
    diagonal = adam_rotated.greedy_learning_rate(problem, np.eye(d), theta, batch)
    rotated = adam_rotated.greedy_learning_rate(problem, rotation, theta, batch,
                                                independent_noise=True)
    law = adam_rotated.surge_law(problem, rotation, theta)
    grad = problem.curvature_D * theta
    b_simple = float(problem.noise_D.sum() / (grad @ grad))
    frames = [
        pd.DataFrame({"batch_size": batch, "model": "diagonal H", "learning_rate": diagonal}),
        pd.DataFrame({"batch_size": batch, "model": "rotated H, independent noise",
                      "learning_rate": rotated})]
    near = batch[(batch >= law.peak_batch / 10) & (batch <= 3 * law.peak_batch)]
    if np.isfinite(law.peak_batch) and near.size:
        frames.append(pd.DataFrame({"batch_size": near, "model": LAW_MODEL,
                                    "learning_rate": law.rate(near)}))
    return pd.concat(frames, ignore_index=True), b_simple, law


def surge_caption(table: pd.DataFrame, b_simple: float, law: adam_rotated.SurgeLaw) -> str:
    """What the surge table shows, in numbers: the rotated model's rise to its peak and fall
    after it, against the diagonal model's rise, and where Li et al.'s law puts the peak."""
    rot = table[table["model"] == "rotated H, independent noise"].reset_index(drop=True)
    diag = table[table["model"] == "diagonal H"].reset_index(drop=True)
    lr = rot["learning_rate"].to_numpy()
    peak = int(np.argmax(lr))
    b = rot["batch_size"].to_numpy()
    diag_lr = diag["learning_rate"].to_numpy()
    text = (f"Diagonal H: the one-step rate rises from {diag_lr[0]:.3g} to {diag_lr[-1]:.3g} "
            f"and never falls. Rotated H with independent noise: ")
    if 0 < peak < lr.size - 1:
        text += (f"{lr[0]:.3g} at B = {b[0]:g}, a peak of {lr[peak]:.3g} at B = {b[peak]:g} "
                 f"(+{100 * (lr[peak] / lr[0] - 1):.0f}%), then down to {lr[-1]:.3g} at "
                 f"B = {b[-1]:g} ({100 * (lr[-1] / lr[peak] - 1):.0f}%); ")
    else:
        text += (f"no surge over this range ({lr[0]:.3g} at B = {b[0]:g} to {lr[-1]:.3g} at "
                 f"B = {b[-1]:g}, largest at B = {b[peak]:g}); ")
    text += f"B_simple = {b_simple:.3g} at this start. "
    if np.isfinite(law.peak_batch):
        ratio = law.peak_batch / b_simple
        text += (f"Li et al.'s law (the small-signal form, docs/nqm_adam.md; drawn near its "
                 f"peak, where it approximates the rotated model) puts the peak at "
                 f"B = tr H / Q = {law.peak_batch:.3g}, {ratio:.2g} x B_simple: "
                 "the more of the Hessian lies off the diagonal, the further below the noise scale "
                 "the peak sits. ")
    else:
        text += "Li et al.'s law has no peak here (Q <= 0: the off-diagonal terms do not add up). "
    text += ("The effect is small, it is a one-step effect, and it needs d ~ 100 or more (at d = 8 "
             "it does not fall): the rate tuned for steps to target (the tuned-rate chart) does "
             "not show it.")
    return text


def curves_csv(points: pd.DataFrame) -> str:
    """The points table as CSV text (what the app's download button serves)."""
    return points.to_csv(index=False)

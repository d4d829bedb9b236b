"""What the app's NQM explorer shows, as plain tables: tuned curves, their analysis, references.

Pure functions of plain values (usable as cache keys); `ui.charts` draws the tables and
`app.py` only parses the controls and calls these.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nqm.moments import expected_loss
from nqm.noise_scale import noise_scale_trajectory
from nqm.problem import NQMConfig
from nqm.scaling import Analysis, analyse_curve
from nqm.tuning import OptimizerSpec, tune_curve

OPTIMIZER_LABELS = {"sgd": "SGD", "momentum": "momentum", "ema": "EMA (averaging)",
                    "schedule": "schedule (10 pieces)"}


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
    rows, summary, analyses = [], [], {}
    for name, precond_power in ((n, p) for p in precond_powers for n in optimizers):
        start = time.perf_counter()
        curve = tune_curve(problem, OptimizerSpec(name, precond_power), batch_sizes, max_steps)
        seconds = time.perf_counter() - start
        label = OPTIMIZER_LABELS[name] + (f", p = {precond_power:g}" if precond_power else "")
        analysis: Analysis = analyse_curve(curve)
        analyses[label] = analysis
        steps = curve.steps
        base = steps[0] * curve.batch_sizes[0] if np.isfinite(steps[0]) else np.nan
        for i, p in enumerate(curve.points):
            b = p.momentum or 0.0
            rows.append({"optimizer": label, "batch_size": p.batch_size, "steps": steps[i],
                         "learning_rate": p.learning_rate, "momentum": p.momentum,
                         "effective_lr": None if p.learning_rate is None else p.learning_rate / (1 - b),
                         "regime": analysis.regimes[i], "perfect": base / p.batch_size,
                         "edge": "+".join(p.edge)})
        summary.append({"optimizer": label, "s_min": analysis.fit.s_min,
                        "b_crit": analysis.fit.b_crit, "r2": analysis.fit.r2,
                        "cbs20": analysis.cbs20, "maximal_from": analysis.maximal_from,
                        "seconds": seconds})
    bs = np.asarray(batch_sizes, dtype=float)
    lower = pd.DataFrame({"batch_size": bs, "steps": problem.lower_bound_steps(bs)})
    return Exploration(pd.DataFrame(rows), pd.DataFrame(summary), lower, analyses)


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


def curves_csv(points: pd.DataFrame) -> str:
    """The points table as CSV text (what the app's download button serves)."""
    return points.to_csv(index=False)

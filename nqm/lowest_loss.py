"""The lowest expected loss an optimizer family can reach in a given number of steps.

`lowest_loss(problem, spec, B, T, space)` = min over the metaparameters z in `space` of
E[L](T; z, B). It is the inverse of tuning: the tuned curve's S(B) for target tau is the first T
with lowest_loss(T) <= tau, so a target of lowest_loss(T) at batch size B is reached by the tuned
optimizer in T steps (or fewer, where the envelope is not monotone). The validation's
step-matched target is built on it (docs/prediction_rule.md).

Search: a grid over the space in log coordinates (SGD: log a; momentum: the effective rate
log(a / (1 - b)) and log(1 - b); averaging: log a and log(1 - g)), then Nelder-Mead (scipy) from
the best grid point, inside the bounds; unstable points count as inf.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nqm import validation
from nqm.moments import dynamics
from nqm.problem import Problem, preconditioned
from nqm.tuning import OptimizerSpec, SearchSpace

GRID_1D = 241        # learning rates of the SGD grid
GRID_2D = (61, 25)   # learning rates x (1 - momentum or 1 - decay) of the two-parameter grid


@dataclass(frozen=True)
class LowestLoss:
    """min_z E[L](T; z, B) and the metaparameters that reach it (momentum / ema_decay None for
    families without them)."""

    loss: float
    learning_rate: float
    momentum: float | None = None
    ema_decay: float | None = None


def _metaparameters(spec: OptimizerSpec, z: np.ndarray):
    """(learning_rate, momentum, ema_decay), each (n,), from coordinates z (n, dims)."""
    zeros = np.zeros(z.shape[0])
    if spec.name == "sgd":
        return np.exp(z[:, 0]), zeros, zeros
    rest = -np.expm1(z[:, 1])          # 1 - exp(z1) without cancellation
    if spec.name == "momentum":
        return np.exp(z[:, 0] + z[:, 1]), rest, zeros
    return np.exp(z[:, 0]), zeros, rest


def _bounds(spec: OptimizerSpec, space: SearchSpace, h_max: float) -> list[tuple[float, float]]:
    """Box bounds in search coordinates. The learning rate's upper end is capped by stability
    (a h_max < 2 (1 + b), taken at b = 0 for SGD and averaging)."""
    lr_lo, lr_hi = space.learning_rate
    if spec.name == "sgd":
        return [(np.log(lr_lo), np.log(min(lr_hi, 2.0 / h_max * (1 - 1e-9))))]
    if spec.name == "momentum":
        om_lo, om_hi = space.one_minus_momentum
        # coordinates (log(a / (1 - b)), log(1 - b)): the effective rate's range covers the
        # learning rate's over the whole 1 - b range
        return [(np.log(lr_lo / om_hi), np.log(lr_hi / om_lo)), (np.log(om_lo), np.log(om_hi))]
    og_lo, og_hi = space.one_minus_ema_decay
    return [(np.log(lr_lo), np.log(min(lr_hi, 2.0 / h_max * (1 - 1e-9)))),
            (np.log(og_lo), np.log(og_hi))]


def lowest_loss(problem: Problem, spec: OptimizerSpec, batch_size: float, steps: int,
                space: SearchSpace = SearchSpace()) -> LowestLoss:
    """min over `space` of E[L] after `steps` steps at `batch_size`.

    Args:
      problem: the NQM arrays.
      spec: 'sgd', 'momentum' or 'ema' (with any preconditioning power).
      batch_size: B >= 1 (at most the problem's training-set size).
      steps: T, a whole number >= 1.
      space: the bounds of the metaparameters.

    Returns:
      LowestLoss with the loss and the minimising metaparameters.
    """
    if spec.name not in ("sgd", "momentum", "ema"):
        raise ValueError(f"optimizer must be one of sgd, momentum, ema, got {spec.name!r}")
    steps = validation.check_whole("steps", steps, 1)
    batch = validation.check_in_range("batch_size", batch_size, 1.0, np.inf)
    problem.check_batch_sizes(batch, "batch_size")
    h_eff, _ = preconditioned(problem.curvature_D, problem.noise_D, spec.precond_power)
    bounds = _bounds(spec, space, float(h_eff.max()))
    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    if np.any(lo > hi):
        raise ValueError("learning_rate bounds lie entirely above the stable limit 2 / h_max = "
                         f"{2.0 / float(h_eff.max()):.4g}")
    space_lr = np.log(space.learning_rate)

    def values(z: np.ndarray) -> np.ndarray:
        z = np.atleast_2d(z)
        a, b, g = _metaparameters(spec, z)
        inside = np.all((z >= lo - 1e-12) & (z <= hi + 1e-12), axis=1)
        inside &= (np.log(a) >= space_lr[0] - 1e-12) & (np.log(a) <= space_lr[1] + 1e-12)
        out = np.full(z.shape[0], np.inf)
        ok = np.flatnonzero(inside)
        if ok.size:
            dyn = dynamics(problem, batch, a[ok], b[ok], g[ok], spec.precond_power)
            out[ok] = dyn.loss(np.full(ok.size, steps))
        return out

    if spec.dims == 1:
        grid = np.linspace(lo[0], hi[0], GRID_1D)[:, None]
    else:
        axes = [np.linspace(lo[i], hi[i], n) for i, n in enumerate(GRID_2D)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 2)
    f = values(grid)
    if not np.any(np.isfinite(f)):
        raise ValueError("no metaparameters in the search space are stable for this problem")
    z0 = grid[int(np.argmin(f))]
    from scipy.optimize import minimize    # scipy only on this path (the engine's CLI avoids it)

    res = minimize(lambda z: float(values(z)[0]), z0, method="Nelder-Mead",
                   bounds=list(zip(lo, hi)),
                   options={"xatol": 1e-4, "fatol": 0.0, "maxiter": 400})
    z = res.x if res.fun <= f.min() else z0
    loss = float(min(res.fun, f.min()))
    a, b, g = (float(x[0]) for x in _metaparameters(spec, np.atleast_2d(z)))
    return LowestLoss(loss=loss, learning_rate=a,
                      momentum=b if spec.name == "momentum" else None,
                      ema_decay=g if spec.name == "ema" else None)

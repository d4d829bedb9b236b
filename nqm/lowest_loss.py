"""The lowest expected loss an optimizer family can reach in a given number of steps.

`lowest_loss(problem, spec, B, T, space)` = min over the metaparameters z in `space` of
E[L](T; z, B). It is the inverse of tuning: the tuned curve's S(B) for target tau is the first T
with lowest_loss(T) <= tau, so a target of lowest_loss(T) at batch size B is reached by the tuned
optimizer in T steps (or fewer, where the envelope is not monotone). The validation's
step-matched target is built on it (docs/prediction_rule.md).

Search: a grid over the space in the tuner's coordinates (`nqm.tuning.metaparameters`), then
Nelder-Mead (scipy) from the best grid point, inside the bounds; unstable points count as inf. Adam (mean-field,
`nqm.adam`): the same space as its tuner (`nqm.adam_tuning`): b1 from the spec's list, b2 fixed,
the learning rate over the space's bounds: a log grid for every b1 at once, then a bounded
scalar search (scipy) around each b1's best rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nqm import adam, validation
from nqm.moments import dynamics
from nqm.optimizer_spec import OptimizerSpec, SearchSpace, metaparameters
from nqm.problem import Problem, preconditioned

GRID_1D = 241        # learning rates of the SGD grid
GRID_2D = (61, 25)   # learning rates x (1 - momentum or 1 - decay) of the two-parameter grid
ADAM_PER_DECADE = 8  # Adam's learning-rate grid (per b1), before the scalar search
# a loss within this relative rounding of the target counts as reaching it (a target set to a
# lowest loss, as the validation's step-matched one, comes back a float unit above it)
AT_TARGET = 1.0 + 1e-9


@dataclass(frozen=True)
class LowestLoss:
    """min_z E[L](T; z, B) and the metaparameters that reach it (momentum / ema_decay None for
    families without them; for adam, momentum holds b1)."""

    loss: float
    learning_rate: float
    momentum: float | None = None
    ema_decay: float | None = None


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
    # averaging: the tuner's logit of a h_max / 2 (`nqm.tuning.coordinates`)
    og_lo, og_hi = space.one_minus_ema_decay
    u_lo, u_hi = lr_lo * h_max / 2.0, min(lr_hi * h_max / 2.0, 1.0 - 1e-9)
    return [(np.log(u_lo) - np.log1p(-u_lo) if u_lo < 1.0 else np.inf,
             np.log(u_hi) - np.log1p(-u_hi)), (np.log(og_lo), np.log(og_hi))]


def lowest_loss(problem: Problem, spec: OptimizerSpec, batch_size: float, steps: int,
                space: SearchSpace = SearchSpace()) -> LowestLoss:
    """min over `space` of E[L] after `steps` steps at `batch_size`.

    Args:
      problem: the NQM arrays.
      spec: 'sgd', 'momentum' or 'ema' (with any preconditioning power), or 'adam' (b1 from
        spec.beta1, b2 = spec.beta2; only space.learning_rate applies).
      batch_size: B >= 1 (at most the problem's training-set size).
      steps: T, a whole number >= 1.
      space: the bounds of the metaparameters.

    Returns:
      LowestLoss with the loss and the minimising metaparameters.
    """
    if spec.name not in ("sgd", "momentum", "ema", "adam"):
        raise ValueError(f"optimizer must be one of sgd, momentum, ema, adam, got {spec.name!r}")
    steps = validation.check_whole("steps", steps, 1)
    batch = validation.check_in_range("batch_size", batch_size, 1.0, np.inf)
    problem.check_batch_sizes(batch, "batch_size")
    if spec.name == "adam":
        return _lowest_adam_loss(problem, spec, batch, steps, space)
    h_eff, _ = preconditioned(problem.curvature_D, problem.noise_D, spec.precond_power)
    h_max = float(h_eff.max())
    bounds = _bounds(spec, space, h_max)
    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    if np.any(lo > hi):
        raise ValueError("learning_rate bounds lie entirely above the stable limit 2 / h_max = "
                         f"{2.0 / float(h_eff.max()):.4g}")
    space_lr = np.log(space.learning_rate)

    def values(z: np.ndarray) -> np.ndarray:
        z = np.atleast_2d(z)
        a, b, g = metaparameters(spec, z, h_max)
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
    a, b, g = (float(x[0]) for x in metaparameters(spec, np.atleast_2d(z), h_max))
    return LowestLoss(loss=loss, learning_rate=a,
                      momentum=b if spec.name == "momentum" else None,
                      ema_decay=g if spec.name == "ema" else None)


def _lowest_adam_loss(problem: Problem, spec: OptimizerSpec, batch: float, steps: int,
                      space: SearchSpace) -> LowestLoss:
    """min over b1 in spec.beta1 and a in space.learning_rate of mean-field Adam's E[L](T)."""
    from scipy.optimize import minimize_scalar

    lo, hi = np.log(space.learning_rate)
    n_grid = max(3, int(np.ceil((hi - lo) / np.log(10.0) * ADAM_PER_DECADE)) + 1)
    log_lr = np.linspace(lo, hi, n_grid)
    beta1 = np.asarray(spec.beta1)

    def values(log_a, b1):
        with np.errstate(over="ignore", invalid="ignore"):
            out = adam.expected_loss(problem, [steps], batch, np.exp(log_a), b1, spec.beta2)[:, 0]
        return np.where(np.isfinite(out), out, np.inf)

    f = values(np.tile(log_lr, beta1.size), np.repeat(beta1, n_grid)).reshape(beta1.size, n_grid)
    if not np.any(np.isfinite(f)):
        raise ValueError("no learning rate in the search space gives a finite loss")
    best = (np.inf, np.nan, np.nan)
    for i, b1 in enumerate(beta1):
        j = int(np.argmin(f[i]))
        if f[i, j] < best[0]:
            best = (f[i, j], log_lr[j], b1)
        # the grid's best and its two neighbours bracket the minimum (or it sits on a bound)
        res = minimize_scalar(lambda x: float(values(np.array([x]), b1)[0]), method="bounded",
                              bounds=(log_lr[max(j - 1, 0)], log_lr[min(j + 1, n_grid - 1)]),
                              options={"xatol": 1e-4})
        if res.fun < best[0]:
            best = (float(res.fun), float(res.x), b1)
    return LowestLoss(loss=float(best[0]), learning_rate=float(np.exp(best[1])),
                      momentum=float(best[2]))


def first_steps_at_target(problem: Problem, spec: OptimizerSpec, batch_size: float, bound: int,
                          space: SearchSpace = SearchSpace()) -> int:
    """The fewest steps any metaparameters in `space` need to reach `problem.target` at
    `batch_size`: the first T in 1 .. bound - 1 with lowest_loss(T) <= target, scanned upward
    (the envelope need not be monotone in T), else `bound`, a step count some known setting
    takes. One `lowest_loss` search per T: for small bounds (tens of steps)."""
    bound = validation.check_whole("bound", bound, 1)
    for t in range(1, bound):
        if lowest_loss(problem, spec, batch_size, t, space).loss <= problem.target * AT_TARGET:
            return t
    return bound


def steps_below(problem: Problem, spec: OptimizerSpec, batch_size: float, steps: int,
                space: SearchSpace = SearchSpace()) -> int:
    """From a step count `steps` that reaches `problem.target` at `batch_size`, walk down while
    the lowest loss one step sooner still reaches it; the step count where that stops. Fewer
    than `steps` means the setting behind `steps` was not the best the space holds (a check of
    a tuned curve against the grid search; it can stop above `first_steps_at_target` where
    the envelope dips)."""
    t = validation.check_whole("steps", steps, 1)
    while t > 1 and (lowest_loss(problem, spec, batch_size, t - 1, space).loss
                     <= problem.target * AT_TARGET):
        t -= 1
    return t

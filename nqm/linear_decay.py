"""The trainer's learning-rate schedule in the NQM: linear decay over the run, for heavy-ball
momentum (exact second moments) and mean-field Adam (`nqm.adam`), and steps to target with the
schedule tuned per batch size.

A run of horizon T takes the rate a_t = a (1 - (1 - f) t / T) at steps t = 0 .. T-1: it decays
linearly from a to a f over the run, the schedule Shallue et al. 2018 tuned and the trainer offers
(`realnets.training.step.make_optimizer`, decaying over a trial's budget; a sweep searches f with
`--final-lr-fraction-range`, and the shipped sweeps keep f = 1). f = 1 is the constant rate of
`nqm.moments` and `nqm.adam`. The rate depends on the horizon, so steps to target is the
smallest horizon T whose run ends at or below the target: a bisection over T, each candidate
evaluated step by step for every row of metaparameters at once (no closed form over segments).

Momentum follows `nqm.moments.MomentumDynamics` (v' = b v + g, theta' = theta - a_t v'); Adam
follows `nqm.adam.MeanFieldAdam` with its learning rate replaced at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nqm import adam, validation
from nqm.adam_tuning import BETA2
from nqm.curve import CurvePoint, ScalingCurve
from nqm.problem import NQMConfig, Problem

OPTIMIZERS = ("momentum", "adam")
# The cap on `estimated_work` that entry points enforce before tuning, about 5 minutes here:
# benchmarks/adam_decay.py's Adam is 2.0e9 direction-steps (272 s on a busy 2-core machine),
# its momentum 1.1e9 (59 s).
MAX_WORK = 2.1e9


@dataclass(frozen=True)
class DecaySearch:
    """What the schedule tuner searches at each batch size, around the constant-rate optimum.

    Attributes:
      rate_factors: multiples of the constant-rate optimum's learning rate to try (for momentum,
        of its effective rate a / (1 - b), kept across the momenta).
      final_fractions: f values to try; 1 is the constant rate, 0 decays to zero.
      betas: momenta (b for momentum, b1 for Adam) to try, besides the constant optimum's own.
      precision: the bisection over the horizon stops when hi / lo <= 1 + precision.
      max_doublings: times the horizon may double when the constant optimum's own steps do not
        reach the target step by step (the constant tuner evaluates over segments).
    """

    rate_factors: tuple[float, ...] = tuple(float(x) for x in np.geomspace(0.25, 16.0, 9))
    final_fractions: tuple[float, ...] = (1.0, 0.3, 0.1, 0.03, 0.01, 0.0)
    betas: tuple[float, ...] = (0.0, 0.5, 0.9, 0.99)
    precision: float = 0.03
    max_doublings: int = 4

    def __post_init__(self):
        validation.check_array("rate_factors", self.rate_factors)
        validation.check_all_in_range("final_fractions", self.final_fractions, 0.0, 1.0)
        validation.check_all_in_range("betas", self.betas, 0.0, 1.0, closed_high=False)
        if not self.rate_factors or not self.final_fractions or not self.betas:
            raise ValueError("rate_factors, final_fractions and betas must each hold a value")
        validation.check_in_range("precision", self.precision, 0.0, 1.0, closed_low=False)
        validation.check_whole("max_doublings", self.max_doublings, 0, 20)


def _check_rows(optimizer, learning_rate, beta, final_fraction):
    validation.check_choice("optimizer", optimizer, OPTIMIZERS)
    rows = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in
            (learning_rate, beta, final_fraction)]
    try:
        lr, b, f = (np.ascontiguousarray(a.reshape(-1)).copy() for a in np.broadcast_arrays(*rows))
    except ValueError:
        raise ValueError("learning_rate, beta and final_fraction must broadcast to one shape "
                         f"(N,), got {[r.shape for r in rows]}") from None
    validation.check_all_in_range("learning_rate", lr, 0.0, np.inf, closed_low=False,
                                  closed_high=False)
    validation.check_all_in_range("beta", b, 0.0, 1.0, closed_high=False)
    validation.check_all_in_range("final_fraction", f, 0.0, 1.0)
    return lr, b, f


def final_losses(problem: Problem, optimizer: str, horizon: int, batch_size: float,
                 learning_rate, beta, final_fraction, beta2: float = BETA2) -> np.ndarray:
    """E[L] after a run of `horizon` steps with the rate decaying linearly from a to a f.

    Args:
      problem: the NQM arrays, each (d,).
      optimizer: 'momentum' (heavy ball, b = beta) or 'adam' (mean field, b1 = beta, b2 = beta2,
        epsilon 0, bias corrections; `nqm.adam`).
      horizon: T >= 1 steps; the rate at step t = 0 .. T-1 is a (1 - (1 - f) t / T).
      batch_size: B (examples per step).
      learning_rate, beta, final_fraction: a, the momentum or b1, and f: scalars or arrays
        broadcasting to (N,).

    Returns:
      float64 (N,): the expected loss at step T (inf where a row diverged).
    """
    horizon = validation.check_whole("horizon", horizon, 1, 10 ** 7)
    lr, b, f = _check_rows(optimizer, learning_rate, beta, final_fraction)
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be an nqm.problem.Problem, got {type(problem).__name__}")
    validation.check_in_range("batch_size", batch_size, 1.0, np.inf, closed_high=False)
    problem.check_batch_sizes(batch_size, "batch_size")
    slope = (1.0 - f) / horizon
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        if optimizer == "adam":
            loss = _adam_final(problem, horizon, batch_size, lr, b, slope, beta2)
        else:
            loss = _momentum_final(problem, horizon, batch_size, lr, b, slope)
    return np.where(np.isfinite(loss), loss, np.inf)


def _momentum_final(problem, horizon, batch_size, lr, b, slope):
    h = problem.curvature_D
    sigma2 = problem.noise_D * float(problem.noise_factor(np.array([float(batch_size)]))[0])
    s11 = np.broadcast_to(problem.init_second_moment_D, (lr.size, h.size)).copy()
    s12 = np.zeros_like(s11)
    s22 = np.zeros_like(s11)
    b_col = b[:, None]
    for t in range(horizon):
        eta = (lr * (1.0 - slope * t))[:, None]
        s11, s12, s22 = adam.one_step(s11, s12, s22, eta, h, b_col, sigma2)
    return s11 @ (0.5 * h)


def _adam_final(problem, horizon, batch_size, lr, b1, slope, beta2):
    model = adam.MeanFieldAdam(problem, batch_size, lr, b1, beta2, 0.0)
    rows = np.arange(lr.size)
    one = np.ones(lr.size, dtype=np.int64)
    for t in range(horizon):
        model.lr_N = lr * (1.0 - slope * t)
        model.advance(rows, one)
    return model.loss()


def _candidates(optimizer, point: CurvePoint, search: DecaySearch):
    """Rows (a, b, f) around a constant-rate optimum; the optimum itself is one of them."""
    b0 = float(point.momentum or 0.0)
    betas = np.array(sorted(set(search.betas) | {b0}))
    factors = np.array(sorted(set(search.rate_factors) | {1.0}))
    F, Bt, Fr = (x.ravel() for x in np.meshgrid(factors, betas, search.final_fractions,
                                                indexing="ij"))
    if optimizer == "momentum":    # keep the effective rate a / (1 - b) across the momenta
        lr = F * point.learning_rate / (1.0 - b0) * (1.0 - Bt)
    else:
        lr = F * point.learning_rate
    return lr, Bt, Fr, F


def _reach(problem, optimizer, horizon, batch, rows, beta2):
    lr, b, f, _ = rows
    loss = final_losses(problem, optimizer, horizon, batch, lr, b, f, beta2)
    best = int(np.argmin(loss))
    return loss[best] <= problem.target, best


def tune_decay_point(problem: Problem, optimizer: str, point: CurvePoint,
                     search: DecaySearch = DecaySearch(), beta2: float = BETA2) -> CurvePoint:
    """Steps to target at one batch size with linear decay, from the constant-rate optimum.

    The constant optimum (`point`: its steps, learning rate and momentum or b1, as
    `tune_curve` / `tune_adam_curve` give them) is one of the candidates with f = 1, so the
    result needs at most its steps, up to the step-by-step evaluation against the constant
    tuner's segments (the horizon doubles, at most `search.max_doublings` times, if those
    steps fall short). Bisection: the smallest horizon found within `search.precision`.

    Returns:
      A CurvePoint with steps, learning_rate (a), momentum (b or b1), final_lr_fraction (f)
      and edge naming 'learning_rate' or 'final_lr_fraction' when the best value is the first
      or last tried; steps None when the constant point was unreached or the doublings ran out.
    """
    validation.check_choice("optimizer", optimizer, OPTIMIZERS)
    if point.steps is None or point.learning_rate is None:
        return CurvePoint(point.batch_size, None)
    rows = _candidates(optimizer, point, search)
    hi = max(1, int(point.steps))
    ok, best = _reach(problem, optimizer, hi, point.batch_size, rows, beta2)
    doublings = 0
    while not ok:
        if doublings == search.max_doublings:
            return CurvePoint(point.batch_size, None)
        hi, doublings = 2 * hi, doublings + 1
        ok, best = _reach(problem, optimizer, hi, point.batch_size, rows, beta2)
    lo = 0
    while hi - lo > 1 and hi > (1.0 + search.precision) * max(lo, 1):
        mid = int(round(np.sqrt(max(lo, 1) * hi))) if lo else max(1, hi // 8)
        mid = min(max(mid, lo + 1), hi - 1)
        ok, row = _reach(problem, optimizer, mid, point.batch_size, rows, beta2)
        if ok:
            hi, best = mid, row
        else:
            lo = mid
    lr, b, f, factor = (r[best] for r in rows)
    edge = []
    if factor in (min(search.rate_factors + (1.0,)), max(search.rate_factors + (1.0,))):
        edge.append("learning_rate")
    if f == min(search.final_fractions) and 0.0 < f < 1.0:
        edge.append("final_lr_fraction")
    return CurvePoint(batch_size=point.batch_size, steps=int(hi), learning_rate=float(lr),
                      momentum=float(b), final_lr_fraction=float(f), edge=tuple(edge))


def estimated_work(problem: Problem, optimizer: str, steps,
                   search: DecaySearch = DecaySearch()) -> float:
    """Direction-steps `tune_decay_curve` will march, given the constant curve's steps at each
    batch size (or a lower bound on them: `Problem.lower_bound_steps`): candidates x directions
    (x the mean field's start nodes for Adam) x about 4 horizons' worth of those steps (the first
    at the constant steps, the bisection below them). None or NaN steps count as 0."""
    total = float(np.nansum(np.array([np.nan if x is None else x for x in steps], dtype=float)))
    rows = (len(set(search.rate_factors) | {1.0}) * (len(search.betas) + 1)
            * len(search.final_fractions))
    nodes = adam.INIT_NODES if optimizer == "adam" else 1
    return 4.0 * total * rows * problem.dim * nodes


def tune_decay_curve(config: NQMConfig | Problem, optimizer: str, constant: ScalingCurve,
                     search: DecaySearch = DecaySearch(), beta2: float = BETA2) -> ScalingCurve:
    """`tune_decay_point` at every batch size of a constant-rate curve of the same problem.

    Args:
      config: the problem the constant curve was tuned on.
      optimizer: 'momentum' (constant from `tune_curve(config, OptimizerSpec('momentum'))`) or
        'adam' (from `tune_adam_curve(config, ...)` with the same beta2).
      constant: that curve.

    Returns:
      A ScalingCurve (source 'nqm'); its config is the constant curve's with 'schedule'
      ('linear_decay') and 'decay_search' added.
    """
    problem = config.problem() if isinstance(config, NQMConfig) else config
    validation.check_choice("optimizer", optimizer, OPTIMIZERS)
    if not isinstance(constant, ScalingCurve):
        raise ValueError(f"constant must be a ScalingCurve, got {type(constant).__name__}")
    points = tuple(tune_decay_point(problem, optimizer, p, search, beta2) for p in constant.points)
    cfg = {**constant.config, "optimizer": optimizer, "schedule": "linear_decay",
           "target": problem.target,
           "decay_search": {"rate_factors": list(search.rate_factors),
                            "final_fractions": list(search.final_fractions),
                            "betas": list(search.betas), "precision": search.precision}}
    if optimizer == "adam":
        cfg["beta2"] = beta2
    if isinstance(config, NQMConfig):
        cfg["problem"] = config.to_dict()
    return ScalingCurve(points=points, source="nqm", config=cfg)

"""A linear decay of the learning rate over the run, in the NQM, for SGD and heavy-ball
momentum (exact second moments; SGD is momentum with b = 0) and mean-field Adam (`nqm.adam`),
and steps to target with the decay tuned per batch size.

A run of horizon T takes the rate a_t = a (1 - (1 - f) t / T) at steps t = 0 .. T-1: it decays
linearly from a to a f over exactly the run to the target (the horizon is tuned with the other
metaparameters: the best case of a decay over a fixed budget). That is Shallue et al. 2018's
linear decay with its horizon at the steps to target; the trainer's decays over a trial's whole
budget by default instead (`realnets.training.step.make_optimizer`, decay_steps = the budget
unless `--decay-steps-range` searches it; a sweep searches f with `--final-lr-fraction-range`),
which changes the rate little before a goal reached early in the budget; the shipped sweeps
keep f = 1 but for the decay test's (docs/nqm_adam.md). f = 1 is the constant rate of
`nqm.moments` and `nqm.adam`. Steps to target is the
smallest horizon T whose run ends at or below the target: a bisection over T, each candidate
evaluated step by step for every row of metaparameters at once (no closed form over segments).
`simulate_final_losses` is the Monte-Carlo reference of the real optimizers with the same schedule.

Momentum follows `nqm.moments.MomentumDynamics` (v' = b v + g, theta' = theta - a_t v'); Adam
follows `nqm.adam.MeanFieldAdam` with its learning rate replaced at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nqm import adam, montecarlo, validation
from nqm.adam_tuning import BETA1, BETA2
from nqm.curve import CurvePoint, ScalingCurve
from nqm.problem import NQMConfig, Problem

OPTIMIZERS = ("sgd", "momentum", "adam")
MOMENTUM_BETAS = (0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
# The cap on `estimated_work` that entry points enforce before tuning: a minute or two here
# (benchmarks/adam_decay.py, compiled loops, 2-core machine beside a niced sweep: momentum's decay
# 2.0e9 direction-steps in 3 s, Adam's 2.0e9 in 7 s).
MAX_WORK = 2.4e10


@dataclass(frozen=True)
class DecaySearch:
    """What the schedule tuner searches at each batch size, around the constant-rate optimum.

    Attributes:
      rate_factors: multiples of the constant-rate optimum's learning rate to try (for momentum,
        of its effective rate a / (1 - b), kept across the momenta); 1 is always added.
      final_fractions: f values to try; 1 is the constant rate, 0 decays to zero.
      betas: momenta (b for momentum, b1 for Adam) to try, besides the constant optimum's own;
        None: MOMENTUM_BETAS for momentum (its constant tuner's b is continuous), Adam's
        constant tuner's list (`nqm.adam_tuning.BETA1`) for Adam. SGD tries b = 0 only.
      precision: the bisection over the horizon stops when hi / lo <= 1 + precision.
      max_doublings: times the horizon may double when the constant optimum's own steps do not
        reach the target step by step (the constant Adam tuner evaluates over segments).
    """

    rate_factors: tuple[float, ...] = tuple(float(f"{x:.6g}") for x in np.geomspace(0.25, 16.0, 9))
    final_fractions: tuple[float, ...] = (1.0, 0.3, 0.1, 0.03, 0.01, 0.0)
    betas: tuple[float, ...] | None = None
    precision: float = 0.03
    max_doublings: int = 4

    def __post_init__(self):
        for name, low, high, closed_high in (("rate_factors", 0.0, np.inf, False),
                                             ("final_fractions", 0.0, 1.0, True),
                                             ("betas", 0.0, 1.0, False)):
            if getattr(self, name) is None and name == "betas":
                continue
            values = np.atleast_1d(np.asarray(getattr(self, name), dtype=object))
            if values.ndim != 1 or len(values) == 0:
                raise ValueError(f"{name} must be a non-empty list of numbers")
            try:
                values = values.astype(np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be a non-empty list of numbers") from None
            validation.check_all_in_range(name, values, low, high, closed_high=closed_high,
                                          closed_low=name != "rate_factors")
            object.__setattr__(self, name, tuple(float(x) for x in values))
        validation.check_in_range("precision", self.precision, 0.0, 1.0, closed_low=False)
        validation.check_whole("max_doublings", self.max_doublings, 0, 20)

    def betas_for(self, optimizer: str) -> tuple[float, ...]:
        if optimizer == "sgd":
            return (0.0,)
        if self.betas is not None:
            return self.betas
        return MOMENTUM_BETAS if optimizer == "momentum" else tuple(BETA1)

    def rows(self, optimizer: str, beta0: float) -> int:
        """Candidates per batch size, the constant optimum's b or b1 being `beta0`."""
        return (len(set(self.rate_factors) | {1.0}) * len(set(self.betas_for(optimizer)) | {beta0})
                * len(self.final_fractions))


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
    if optimizer == "sgd" and np.any(b != 0.0):
        raise ValueError("beta must be 0 for optimizer sgd (plain SGD has no momentum)")
    validation.check_all_in_range("final_fraction", f, 0.0, 1.0)
    return lr, b, f


def final_losses(problem: Problem, optimizer: str, horizon: int, batch_size: float,
                 learning_rate, beta, final_fraction, beta2: float = BETA2) -> np.ndarray:
    """E[L] after a run of `horizon` steps with the rate decaying linearly from a to a f.

    Args:
      problem: the NQM arrays, each (d,).
      optimizer: 'sgd' (beta 0), 'momentum' (heavy ball, b = beta) or 'adam' (mean field,
        b1 = beta, b2 = beta2, epsilon 0, bias corrections; `nqm.adam`).
      horizon: T >= 1 steps; the rate at step t = 0 .. T-1 is a (1 - (1 - f) t / T).
      batch_size: B (examples per step).
      learning_rate, beta, final_fraction: a, the momentum or b1, and f: scalars or arrays
        broadcasting to (N,).

    Returns:
      float64 (N,): the expected loss at step T (inf where a row diverged). Marched by the
      compiled loops of `nqm.decay_kernels`; `reference_final_losses` is the same run through
      the numpy step functions of `nqm.adam`.
    """
    horizon, lr, b, f, beta2 = _check_run(problem, optimizer, horizon, batch_size, learning_rate,
                                          beta, final_fraction, beta2)
    if lr.size == 0:
        return np.empty(0)
    from nqm import decay_kernels   # loads numba, which `python -m nqm curve` for SGD does not

    if optimizer == "adam":     # the mean field's directions: d at each start node
        h, weight, noise, x0 = adam.node_arrays(problem)
    else:
        h, noise, x0 = problem.curvature_D, problem.noise_D, problem.init_second_moment_D
        weight = 0.5 * h
    # one layout and dtype, so numba compiles each kernel once
    arrays = [np.ascontiguousarray(a, dtype=np.float64) for a in
              (h, weight, noise * problem.noise_factor(float(batch_size)), x0)]
    if optimizer == "adam":
        loss = decay_kernels.adam_final(*arrays, lr, b, f, beta2, horizon)
    else:
        loss = decay_kernels.momentum_final(*arrays, lr, b, f, horizon)
    return np.where(np.isfinite(loss), loss, np.inf)


def reference_final_losses(problem: Problem, optimizer: str, horizon: int, batch_size: float,
                           learning_rate, beta, final_fraction,
                           beta2: float = BETA2) -> np.ndarray:
    """`final_losses` marched by the numpy step functions the engines use (`adam.one_step`,
    `MeanFieldAdam.advance` one step at a time): the reference its compiled loops are held to,
    and the baseline of `benchmarks/decay_kernels.py`. Same arguments and result."""
    horizon, lr, b, f, beta2 = _check_run(problem, optimizer, horizon, batch_size, learning_rate,
                                          beta, final_fraction, beta2)
    with np.errstate(over="ignore", invalid="ignore", under="ignore", divide="ignore"):
        loss = _march(problem, optimizer, batch_size, lr, b, beta2,
                      lambda t: _rate(lr, f, t, horizon), horizon)
    return np.where(np.isfinite(loss), loss, np.inf)


def _check_run(problem, optimizer, horizon, batch_size, learning_rate, beta, final_fraction,
               beta2):
    horizon = validation.check_whole("horizon", horizon, 1, 10 ** 7)
    lr, b, f = _check_rows(optimizer, learning_rate, beta, final_fraction)
    beta2 = validation.check_in_range("beta2", beta2, 0.0, 1.0, closed_high=False)
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be an nqm.problem.Problem, got {type(problem).__name__}")
    validation.check_in_range("batch_size", batch_size, 1.0, np.inf, closed_high=False)
    problem.check_batch_sizes(batch_size, "batch_size")
    return horizon, lr, b, f, beta2


def _rate(learning_rate, final_fraction, t, horizon):
    """a_t = a (1 - (1 - f) t / T): the one formula of the schedule (`nqm.decay_kernels` spells
    it out in its loops)."""
    return learning_rate * (1.0 - (1.0 - final_fraction) * t / horizon)


def _march(problem, optimizer, batch_size, lr, b, beta2, rate_at, steps, record=False):
    """Every row's run for `steps` steps, the rows' rates at step t being rate_at(t) (N,), by
    the step functions (`adam.one_step` for SGD and momentum, `MeanFieldAdam.advance`, compiled):
    E[L] (N,) after the last step, or with `record` float64 (steps + 1, N) after 0 .. steps."""
    if optimizer == "adam":
        model = adam.MeanFieldAdam(problem, batch_size, lr, b, beta2, 0.0)
        rows, one = np.arange(lr.size), np.ones(lr.size, dtype=np.int64)

        def step(t):
            model.lr_N = rate_at(t)
            model.advance(rows, one)
        loss = model.loss
    else:
        h = problem.curvature_D
        sigma2 = problem.noise_D * problem.noise_factor(float(batch_size))
        s = [np.broadcast_to(problem.init_second_moment_D, (lr.size, h.size)).astype(float),
             np.zeros((lr.size, h.size)), np.zeros((lr.size, h.size))]
        b_col = b[:, None]

        def step(t):
            s[:] = adam.one_step(*s, rate_at(t)[:, None], h, b_col, sigma2)

        def loss():
            return s[0] @ (0.5 * h)
    losses = [loss()] if record else None
    for t in range(steps):
        step(t)
        if record:
            losses.append(loss())
    return np.array(losses) if record else loss()


def held_schedule(learning_rate: float, final_fraction: float, decay_steps: int,
                  steps: int) -> np.ndarray:
    """The trainer's rates (`realnets.training.step`): a_t = a (1 - (1 - f) min(t / T, 1)) for
    t = 0 .. steps-1, T = decay_steps: linear to a f over T steps, then held there. float64
    (steps,); equal to `schedule(a, f, T)` over its first T steps."""
    validation.check_in_range("learning_rate", learning_rate, 0.0, np.inf, closed_low=False,
                              closed_high=False)
    validation.check_in_range("final_fraction", final_fraction, 0.0, 1.0)
    steps = validation.check_whole("steps", steps, 1, 10 ** 7)
    decay_steps = validation.check_whole("decay_steps", decay_steps, 1)
    t = np.minimum(np.arange(steps), decay_steps)
    return _rate(learning_rate, final_fraction, t, decay_steps)


def held_decay_losses(problem: Problem, optimizer: str, batch_size: float, learning_rate: float,
                      beta: float, final_fraction: float, decay_steps: int, steps: int,
                      beta2: float = BETA2) -> np.ndarray:
    """E[L] at steps 0 .. `steps` of one run with the trainer's schedule (`held_schedule`): the
    NQM's counterpart of a trial whose decay length was fixed or searched (`--decay-steps-range`),
    where `final_losses` ends its decay exactly at the horizon.

    Args:
      problem, optimizer, batch_size, beta2: as for `final_losses`.
      learning_rate, beta, final_fraction: a, the momentum or b1, and f (scalars).
      decay_steps: T >= 1, the steps the decay takes (the rate stays at a f after it).
      steps: how many steps to run (>= 1).

    Returns:
      float64 (steps + 1,): the expected loss after 0 .. steps steps (inf once a step diverged).
      Marched by the numpy step functions of `nqm.adam`, as `reference_final_losses` (one row:
      no compiled loop needed).
    """
    steps = validation.check_whole("steps", steps, 1, 10 ** 7)   # named here, not 'horizon'
    horizon, lr, b, f, beta2 = _check_run(problem, optimizer, steps, batch_size, learning_rate,
                                          beta, final_fraction, beta2)
    if lr.size != 1:
        raise ValueError(f"learning_rate, beta and final_fraction must be scalars, got {lr.size} rows")
    rates = held_schedule(float(lr[0]), float(f[0]), decay_steps, horizon)
    with np.errstate(over="ignore", invalid="ignore", under="ignore", divide="ignore"):
        out = _march(problem, optimizer, batch_size, lr, b, beta2, lambda t: rates[t:t + 1],
                     horizon, record=True)[:, 0]
    return np.where(np.isfinite(out), out, np.inf)


def held_decay_steps(problem: Problem, optimizer: str, batch_size: float, learning_rate: float,
                     beta: float, final_fraction: float, decay_steps: int, max_steps: int,
                     beta2: float = BETA2) -> int | None:
    """Steps to target of one run with the trainer's schedule: the first step at which
    `held_decay_losses` is <= problem.target, or None if not within `max_steps`."""
    max_steps = validation.check_whole("max_steps", max_steps, 1, 10 ** 7)
    loss = held_decay_losses(problem, optimizer, batch_size, learning_rate, beta, final_fraction,
                             decay_steps, max_steps, beta2)
    hit = np.flatnonzero(loss <= problem.target)
    return int(hit[0]) if hit.size else None


def schedule(learning_rate: float, final_fraction: float, horizon: int) -> np.ndarray:
    """The rates a_t = a (1 - (1 - f) t / T) of steps t = 0 .. T-1, float64 (T,)."""
    return _rate(learning_rate, final_fraction, np.arange(horizon), horizon)


def simulate_final_losses(problem: Problem, optimizer: str, horizon: int, batch_size: float,
                          learning_rate: float, beta: float, final_fraction: float,
                          beta2: float = BETA2, runs: int = 1000, seed: int = 0):
    """Monte Carlo of the real optimizer with the decay: `nqm.montecarlo.simulate_losses`
    (SGD, momentum) or `nqm.adam.simulate_losses` (Adam: its squared gradients, not their
    expectation; epsilon 0, bias corrections) with the rates of `schedule`.

    Returns:
      (mean, standard error) of the loss at step T over `runs` runs (floats).
    """
    horizon = validation.check_whole("horizon", horizon, 1, 10 ** 6)
    lr, b, f = (float(x[0]) for x in _check_rows(optimizer, learning_rate, beta, final_fraction))
    rates = schedule(lr, f, horizon)
    if optimizer in ("sgd", "momentum"):
        result = montecarlo.simulate_losses(problem, horizon, batch_size, rates, momentum=b,
                                            runs=runs, seed=seed)
    else:
        result = adam.simulate_losses(problem, horizon, batch_size, rates, b, beta2, runs=runs,
                                      seed=seed)
    return float(result.mean_T[-1]), float(result.stderr_T[-1])


def _candidates(optimizer, point: CurvePoint, search: DecaySearch, bounds=None):
    """Rows (a, b, f, factor) around a constant-rate optimum, inside the learning-rate bounds
    (lo, hi) if given; the optimum itself (factor 1, its b, f = 1) is one of them."""
    b0 = float(point.momentum or 0.0)
    betas = np.array(sorted(set(search.betas_for(optimizer)) | {b0}))
    factors = np.array(sorted(set(search.rate_factors) | {1.0}))
    F, Bt, Fr = (x.ravel() for x in np.meshgrid(factors, betas, search.final_fractions,
                                                indexing="ij"))
    if optimizer == "momentum":    # keep the effective rate a / (1 - b) across the momenta
        lr = F * point.learning_rate / (1.0 - b0) * (1.0 - Bt)
    else:
        lr = F * point.learning_rate
    keep = np.ones(lr.size, dtype=bool) if bounds is None else (
        (lr >= bounds[0]) & (lr <= bounds[1]) | ((F == 1.0) & (Bt == b0)))
    return lr[keep], Bt[keep], Fr[keep], F[keep]


def _reach(problem, optimizer, horizon, batch, rows, beta2):
    lr, b, f, _ = rows
    loss = final_losses(problem, optimizer, horizon, batch, lr, b, f, beta2)
    best = int(np.argmin(loss))
    return loss[best] <= problem.target, best


def _check_point(point, search):
    if not isinstance(point, CurvePoint):
        raise ValueError(f"point must be an nqm.curve.CurvePoint, got {type(point).__name__}")
    if not isinstance(search, DecaySearch):
        raise ValueError(f"search must be a DecaySearch, got {type(search).__name__}")
    if point.steps is None:
        return False
    validation.check_whole("point steps", point.steps, 1)
    validation.check_in_range("point learning_rate", point.learning_rate, 0.0, np.inf,
                              closed_low=False, closed_high=False)
    validation.check_in_range("point momentum", point.momentum or 0.0, 0.0, 1.0,
                              closed_high=False)
    return True


def tune_decay_point(problem: Problem, optimizer: str, point: CurvePoint,
                     search: DecaySearch = DecaySearch(), beta2: float = BETA2,
                     learning_rate_bounds: tuple[float, float] | None = None) -> CurvePoint:
    """Steps to target at one batch size with linear decay, from the constant-rate optimum.

    Args:
      problem: the problem the constant point was tuned on.
      optimizer: 'sgd', 'momentum' or 'adam'.
      point: the constant optimum at this batch size (its steps, learning rate and momentum or
        b1, as `tune_curve` / `tune_adam_curve` give them).
      search: the candidates (`DecaySearch`).
      beta2: Adam's, as in the constant tuning.
      learning_rate_bounds: (lo, hi): candidates with a rate outside are dropped (the constant
        optimum itself is kept).

    The constant optimum with f = 1 is one of the candidates, so the result needs at most its
    steps wherever the step-by-step run confirms them (the constant Adam tuner evaluates over
    segments; if its steps fall short, the horizon doubles, at most `search.max_doublings`
    times). Bisection: the smallest horizon found within `search.precision`.

    Returns:
      A CurvePoint with steps, learning_rate (a), momentum (b or b1), final_lr_fraction (f)
      and edge naming 'learning_rate' (the first or last factor tried, or within 2% of a bound)
      or 'final_lr_fraction' (the smallest f tried, above 0); steps None when the constant point
      was unreached or the doublings ran out.
    """
    validation.check_choice("optimizer", optimizer, OPTIMIZERS)
    if learning_rate_bounds is not None:
        learning_rate_bounds = validation.check_range_pair("learning_rate_bounds",
                                                           learning_rate_bounds, 0.0, np.inf)
    if not _check_point(point, search):
        return CurvePoint(point.batch_size, None)
    rows = _candidates(optimizer, point, search, learning_rate_bounds)
    hi = int(point.steps)
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
    factors = search.rate_factors + (1.0,)
    at_bound = learning_rate_bounds is not None and (
        lr <= learning_rate_bounds[0] * 1.02 or lr >= learning_rate_bounds[1] / 1.02)
    if factor in (min(factors), max(factors)) or at_bound:
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
    at the constant steps, the bisection below them; doublings not counted). None or NaN steps
    count as 0."""
    validation.check_choice("optimizer", optimizer, OPTIMIZERS)
    arr = np.atleast_1d(np.array([np.nan if x is None else x for x in np.atleast_1d(steps)],
                                 dtype=float))
    finite = arr[np.isfinite(arr)]
    validation.check_all_in_range("steps", finite, 0.0, np.inf)
    nodes = adam.INIT_NODES if optimizer == "adam" else 1
    return 4.0 * float(finite.sum()) * search.rows(optimizer, -1.0) * problem.dim * nodes


def check_work(problem: Problem, optimizer: str, steps, name: str = "decay",
               advice: str = "") -> float:
    """Raises a one-line ValueError when `estimated_work(problem, optimizer, steps)` exceeds
    MAX_WORK; returns the work otherwise. The entry points call it before tuning, on the
    constant curve's steps or an estimate of them, with `name` (what the message starts with:
    their parameter) and `advice` (their controls that shrink the work)."""
    work = estimated_work(problem, optimizer, steps)
    if work > MAX_WORK:
        raise ValueError(f"{name}: the step-by-step tuning of the decay would march about "
                         f"{work:.2g} direction-steps or more, above {MAX_WORK:.2g} (a minute or "
                         f"two here){'; ' + advice if advice else ''}")
    return work


def tune_decay_curve(config: NQMConfig | Problem, optimizer: str, constant: ScalingCurve,
                     search: DecaySearch = DecaySearch(), beta2: float = BETA2,
                     learning_rate_bounds: tuple[float, float] | None = None) -> ScalingCurve:
    """`tune_decay_point` at every batch size of a constant-rate curve of the same problem.

    Args:
      config: the problem the constant curve was tuned on.
      optimizer: 'sgd' or 'momentum' (constant from `tune_curve(config, OptimizerSpec(...))` of
        the same name) or 'adam' (from `tune_adam_curve(config, ...)` with the same beta2).
      constant: that curve; refused when its config names another optimizer, beta2 or target.
      search, beta2, learning_rate_bounds: as for `tune_decay_point`.

    Returns:
      A ScalingCurve (source 'nqm'); its config is the constant curve's with 'schedule'
      ('linear_decay') and 'decay_search' added.
    """
    problem = config.problem() if isinstance(config, NQMConfig) else config
    if not isinstance(problem, Problem):
        raise ValueError(f"config must be an NQMConfig or Problem, got {type(config).__name__}")
    validation.check_choice("optimizer", optimizer, OPTIMIZERS)
    if not isinstance(constant, ScalingCurve):
        raise ValueError(f"constant must be a ScalingCurve, got {type(constant).__name__}")
    made = constant.config
    for key, want in (("optimizer", optimizer), ("target", problem.target),
                      ("beta2", beta2 if optimizer == "adam" else None)):
        have = made.get(key)
        if want is not None and have is not None and have != want:
            raise ValueError(f"constant was tuned with {key} {have!r}, not {want!r}: tune the "
                             "decay on the same problem and optimizer")
    points = tuple(tune_decay_point(problem, optimizer, p, search, beta2, learning_rate_bounds)
                   for p in constant.points)
    cfg = {**made, "optimizer": optimizer, "schedule": "linear_decay", "target": problem.target,
           "decay_search": {"rate_factors": list(search.rate_factors),
                            "final_fractions": list(search.final_fractions),
                            "betas": list(search.betas_for(optimizer)),
                            "precision": search.precision,
                            "max_doublings": search.max_doublings,
                            "learning_rate_bounds": (None if learning_rate_bounds is None
                                                     else list(learning_rate_bounds))}}
    if optimizer == "adam":
        cfg["beta2"] = beta2
    if isinstance(config, NQMConfig):
        cfg["problem"] = config.to_dict()
    return ScalingCurve(points=points, source="nqm", config=cfg)

"""Metaparameters tuned per batch size, and the steps-to-target curve they give.

For each batch size B the tuned steps are S(B) = min over metaparameters z of the first step at
which E[L] <= target. Equivalently S(B) is the first T at which the lower envelope
m_B(T) = min_z E[L](T; z, B) reaches the target, which is how it is searched:

1. A grid of learning rates (plain SGD, with the family's preconditioner) is scanned once for
   all batch sizes (`crossing.best_crossing_per_batch`): a feasible (z, S) per B.
2. The envelope search brackets S(B) between a T where no z was found (lo) and one where the
   best z reaches the target (hi), picks the next T by interpolating log m_B(T), and at each T
   minimises E[L](T; z, B) over z by a compass search that starts from the best z so far
   (learning rate, momentum or average decay in log coordinates). It stops as soon as a z
   reaches the target at T.
3. The reported steps are the exact first crossing of the final z (`crossing.first_crossing`).

Coordinates: SGD z = log a; momentum z = (log(a / (1 - b)), log(1 - b)), so the first axis is the
effective learning rate, which the noise-dominated regime depends on; averaging
z = (log(u / (1 - u)), log(1 - g)) with u = a h_max / 2: log a for small a, and
-log(1 - a h_max / 2) near the stability limit, where averaging's optimum sits at large batch
sizes (within ~1e-3 of it: steps of 1e-3 in log a could not resolve it).

Mean-field Adam ('adam') has its own tuner (`nqm.adam_tuning`: a learning-rate scan per b1 in a
list), to which `tune_curve` hands the space's learning-rate bounds and the budget.

Momentum and averaging are searched one batch size at a time from the smallest
(`_chained_search`), each start and first T predicted from the batch sizes before it (the SGD
grid's seeds only for the first two); the others, all batch sizes in lockstep.

References:
  Zhang et al. 2019, section 3: step size (and momentum) tuned per batch size on grids of
  100 learning rates in logspace(-5, 0.5) (SGD) and logspace(-8, 1) x 20 values of 1 - b in
  logspace(-5, 0) (momentum). Those grids are this module's floor, checked by the tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from nqm import adam, adam_tuning, crossing, schedule_tuning, sgd_tuning, validation
from nqm.curve import CurvePoint, ScalingCurve
from nqm.lowest_loss import AT_TARGET, GRID_1D, lowest_loss
from nqm.moments import RowsFactory, dynamics
from nqm.optimizer_spec import (  # noqa: F401
    FAMILIES,
    OptimizerSpec,
    SearchSpace,
    adam_search,
    coordinates,
    default_space,
    metaparameters,
)
from nqm.problem import NQMConfig, Problem, preconditioned

GRID_FLOOR = 1e-5  # lowest learning rate of the seeding grid (Zhang et al.'s SGD grid starts here)
SEED_BUDGET = 10 ** 8  # step budget of the seeding grid, whatever the caller's budget
# The envelope search stops when its bracket is narrower than this (relative; the exact step
# below 2,000 steps). Every local search's tuned steps depend on its path by more (~3% for
# momentum), and the steps reported are the exact first crossing of the z found.
REL_TOL = 1e-3
# The descent's compass searches start with this step (log units): the optimum at the next T
# tried is close to the last one.
DESCEND_STEP = 0.1
# Families tuned one batch size at a time (`_chained_search`), each warm-started by the ones
# before it. Momentum's loss at fixed T ripples across z (the stiff directions' oscillations,
# ~1e-3 of the loss), so both its searches are local and their tuned steps depend on the path
# by up to ~3%: on the default problem the chain against the lockstep search is 3 to 0.5%
# better at 6 batch sizes and 0.01 to 3% worse at 7, in about 3/4 of the time (docs/performance.md).
CHAINED = ("ema", "momentum")
# The certification's rounds per batch size (`_certify`): each lowers the steps by at least the
# bracket's tolerance; a cap on its cost where the local search fell far short.
CERTIFY_ROUNDS = 20


class _Objective:
    """E[L](T; z, B) for rows of (z, T, B); inf outside the search space or when unstable."""

    def __init__(self, problem: Problem, spec: OptimizerSpec, space: SearchSpace):
        self.problem = problem
        self.spec = spec
        self.space = space
        self.rows = RowsFactory(problem, spec.name, spec.precond_power)
        self.h_eff, self.c_eff = self.rows.h_D, self.rows.c_D
        self.h_max = float(self.h_eff.max())
        self.evaluations = 0

    def inside(self, a, b, g):
        sp = self.space
        ok = (a >= sp.learning_rate[0] * (1 - 1e-12)) & (a <= sp.learning_rate[1] * (1 + 1e-12))
        if self.spec.name == "momentum":
            om = 1.0 - b
            ok &= (om >= sp.one_minus_momentum[0] * (1 - 1e-12)) & (om <= sp.one_minus_momentum[1])
        if self.spec.name == "ema":
            og = 1.0 - g
            ok &= (og >= sp.one_minus_ema_decay[0] * (1 - 1e-12)) & (og <= sp.one_minus_ema_decay[1])
        return ok & (a * self.h_max < 2.0 * (1.0 + b))

    def __call__(self, z, t, batch):
        a, b, g = metaparameters(self.spec, z, self.h_max)
        out = np.full(a.shape[0], np.inf)
        ok = np.flatnonzero(self.inside(a, b, g))
        if ok.size:
            # rows inside the space are valid metaparameters of the family: no checks per call
            param = b if self.spec.name == "momentum" else g
            out[ok] = self.rows(batch[ok], a[ok], param[ok]).loss(t[ok])
            self.evaluations += ok.size
        return out


def _compass(objective, z, f, t, batch, step, target, min_step=1e-3, max_iter=60):
    """Minimise objective(., t, batch) from z (n, k) by compass search, in place, per row.

    Each iteration tries +-step along every axis, then the vertex of the parabolas through those
    points (a diagonal Newton step, when every axis curves upward). The best point moves the row;
    the step then follows the Newton step's length, or halves when nothing improved. A row stops
    when its step is below `min_step` or its value is at or below `target` (then the question
    "can T steps reach the target?" is answered).
    """
    n, k = z.shape
    step = np.broadcast_to(np.asarray(step, dtype=float), (n,)).copy()
    moves = np.concatenate([np.eye(k), -np.eye(k)])  # (2k, k)
    for _ in range(max_iter):
        live = np.flatnonzero((step >= min_step) & (f > target))
        if live.size == 0:
            break
        s = step[live]
        cand = z[live, None, :] + s[:, None, None] * moves[None, :, :]  # (n, 2k, k)
        fc = objective(cand.reshape(-1, k), np.repeat(t[live], 2 * k),
                       np.repeat(batch[live], 2 * k)).reshape(live.size, 2 * k)
        f0 = f[live]
        plus, minus = fc[:, :k], fc[:, k:]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            curv = plus + minus - 2.0 * f0[:, None]
            offset = s[:, None] * (minus - plus) / (2.0 * curv)
        usable = np.all(np.isfinite(offset) & (curv > 0), axis=1)
        offset = np.clip(np.where(usable[:, None], offset, 0.0), -2.0 * s[:, None], 2.0 * s[:, None])
        newton = z[live] + offset
        fn = np.full(live.size, np.inf)
        if usable.any():
            fn[usable] = objective(newton[usable], t[live[usable]], batch[live[usable]])
        j = np.argmin(fc, axis=1)
        best = fc[np.arange(live.size), j]
        best_z = cand[np.arange(live.size), j]
        take_newton = fn < best
        best = np.where(take_newton, fn, best)
        best_z = np.where(take_newton[:, None], newton, best_z)
        better = best < f0
        rows = live[better]
        z[rows] = best_z[better]
        f[rows] = best[better]
        # Newton moves set the next step to their length (at least a quarter of the old one).
        length = np.max(np.abs(offset), axis=1)
        step[live] = np.where(take_newton & better, np.maximum(length, 0.25 * s),
                              np.where(better, s, 0.5 * s))
    return z, f


def _slide_down(objective, z, t, f, batch, lo, target, probes: int = 6):
    """For rows where z reaches the target at t, the smallest of t * 2^(-k/3), k = 0..probes, above
    `lo` from which every probe up to t is at or below the target. Returns (t, loss at t)."""
    n = t.shape[0]
    k = np.arange(1, probes + 1)
    tt = np.maximum((t[:, None] * 2.0 ** (-k[None, :] / 3.0)).astype(np.int64), lo[:, None] + 1)
    vals = objective(np.repeat(z, probes, axis=0), tt.reshape(-1),
                     np.repeat(batch, probes)).reshape(n, probes)
    good = np.cumprod(vals <= target, axis=1).astype(bool)  # contiguous from k = 1
    depth = good.sum(axis=1)
    rows = np.flatnonzero(depth > 0)
    t = t.copy()
    f = f.copy()
    t[rows] = tt[rows, depth[rows] - 1]
    f[rows] = vals[rows, depth[rows] - 1]
    return t, f


def _seeds(spec: OptimizerSpec, z_sgd: np.ndarray, h_max: float) -> list[np.ndarray]:
    """Starting points for the first envelope step: the SGD winner and momentum/averaging variants."""
    a = np.exp(z_sgd[:, 0])
    if spec.name == "sgd":
        return [z_sgd]
    seeds = []
    for keep in (0.0, 0.5, 0.9, 0.95, 0.98, 0.99, 0.999):
        if spec.name == "momentum":
            # the SGD winner's effective rate a / (1 - b), and near the stable limit at b
            seeds.append(coordinates(spec, h_max, a * (1 - keep), keep))
        else:
            seeds.append(coordinates(spec, h_max, a, ema_decay=keep))
        for frac in (1.0, 1.9):
            if spec.name == "momentum":
                seeds.append(coordinates(spec, h_max, np.full_like(a, frac * (1 + keep) / h_max),
                                         keep))
            else:
                seeds.append(coordinates(spec, h_max, np.full_like(a, frac / h_max),
                                         ema_decay=keep))
    return seeds


def _cross_seed(objective, spec, z, steps, batch, target, reach: int = 2):
    """Tries the winners of the `reach` nearest batch sizes on each side, one step below the
    local steps.

    A larger batch only lowers E[L] at fixed metaparameters and t, and the best metaparameters
    move smoothly with B, so a neighbour's winner is often a better start than the local search
    found. Returns (z with improved rows replaced, improved mask).
    """
    n = z.shape[0]
    live = np.flatnonzero(steps > 0)
    if live.size < 2:
        return z, np.zeros(n, dtype=bool)
    offsets = [o for o in range(-reach, reach + 1) if o != 0]
    pos = np.arange(live.size)
    src = np.clip(pos[:, None] + np.array(offsets)[None, :], 0, live.size - 1)  # (L, 2 reach)
    rows = np.repeat(live, len(offsets))
    cand = z[live[src.reshape(-1)]]
    vals = objective(cand, np.maximum(steps[rows] - 1, 0), batch[rows]).reshape(live.size, -1)
    best = np.argmin(vals, axis=1)
    improved = vals[pos, best] <= target
    z = z.copy()
    z[live[improved]] = z[live[src[pos, best]][improved]]
    mask = np.zeros(n, dtype=bool)
    mask[live[improved]] = True
    return z, mask


def _crossing(objective, z, lo, hi, batch, target, tol):
    """A step at which z (n, k) reaches the target in (lo, hi], close to its first: probes below
    hi (hi - tol 4^j, then hi 2^(-j/2)), then bisection between the lowest probe that reaches
    the target and the probe below it, to `tol`. Rows where no probe reaches it get -1.

    Returns (t (n,) int64, loss at t (n,)).
    """
    n = z.shape[0]
    drops = [tol * 4 ** j for j in range(6)]
    cand = [hi] + [hi - d for d in drops] + [(hi * 2.0 ** (-j / 2)).astype(np.int64)
                                            for j in range(1, 3)]
    tt = np.stack(cand, axis=1)                                  # (n, P), non-increasing
    tt = np.where(tt > lo[:, None], tt, -1)
    tt = np.sort(tt, axis=1)[:, ::-1]
    rr, cc = np.nonzero(tt > 0)
    vals = np.full(tt.shape, np.inf)
    vals[rr, cc] = objective(z[rr], tt[rr, cc], batch[rr])
    hit = vals <= target
    # the lowest probe reaching the target with every probe above it reaching it too
    depth = np.cumprod(hit, axis=1).sum(axis=1)
    out_t = np.full(n, -1, dtype=np.int64)
    out_f = np.full(n, np.inf)
    rows = np.flatnonzero(depth > 0)
    j = depth[rows] - 1
    out_t[rows] = tt[rows, j]
    out_f[rows] = vals[rows, j]
    below = np.where(j + 1 < tt.shape[1], tt[rows, np.minimum(j + 1, tt.shape[1] - 1)], -1)
    a = np.maximum(np.where(below > 0, below, lo[rows]), lo[rows])
    b = out_t[rows].copy()
    fb = out_f[rows].copy()
    live = np.flatnonzero(b - a > tol[rows])
    while live.size:
        mid = (a[live] + b[live]) // 2
        f = objective(z[rows[live]], mid, batch[rows[live]])
        ok = f <= target
        b[live[ok]], fb[live[ok]] = mid[ok], f[ok]
        a[live[~ok]] = mid[~ok]
        live = live[b[live] - a[live] > tol[rows[live]]]
    out_t[rows], out_f[rows] = b, fb
    return out_t, out_f


def _envelope_search(objective, spec, z_start, t_start, batch, target, initial_loss,
                     seeds_from=None, t_first=None, starts=None, descend=False):
    """Smallest T (per row) at which some z reaches the target, searched from a feasible start.

    Args:
      z_start: (n, k) coordinates that reach the target within t_start steps.
      t_start: (n,) int, an upper bracket.
      batch: (n,) batch sizes.
      seeds_from: optional (n, 1) SGD winners; extra starting points at the first T.
      t_first: optional (n,) int, the first T to try (default 0.97 t_start).
      starts: optional list of (n, k) more starting points, tried at the first T.
      descend: after every T tried, look for the first crossing of the z found (a success's
        below T, a failure's minimiser above it), and try next the upper end minus the
        tolerance, doubling the distance after each success (shrinking by 0.9, 0.81, ... while
        no lower end is known), instead of interpolating log m(T).

    Returns:
      (z (n, k), T (n,)): the best z found and the T it reaches the target in.
    """
    z_hi = np.array(z_start, dtype=float)
    T_hi = np.asarray(t_start, dtype=np.int64).copy()
    T_lo = np.zeros_like(T_hi)
    m_hi = objective(z_hi, T_hi, batch)
    m_lo = np.full(T_hi.size, initial_loss)
    last_side = np.zeros(T_hi.size, dtype=np.int8)  # +1: hi moved last time, -1: lo moved
    repeat = np.zeros(T_hi.size, dtype=bool)        # the same end moved twice in a row
    first = True
    succ = np.zeros(T_hi.size, dtype=np.int64)  # successes in a row (descend)
    while True:
        # Bracket to the exact step below 2,000 steps; above, to a relative REL_TOL.
        open_ = np.flatnonzero(T_hi - T_lo > np.maximum(1, (T_hi * REL_TOL).astype(np.int64)))
        if open_.size == 0:
            break
        lo, hi = T_lo[open_], T_hi[open_]
        # Next T: shrink from hi while no lower bracket is known; then regula falsi on
        # log m(T), falling back to bisection when the same end moved twice (Illinois-like).
        g_lo = np.log(np.maximum(m_lo[open_], target) / target)
        g_hi = np.log(np.maximum(m_hi[open_], 1e-300) / target)
        frac = np.where(g_lo - g_hi > 0, g_lo / np.maximum(g_lo - g_hi, 1e-300), 0.5)
        t = lo + np.round(frac * (hi - lo)).astype(np.int64)
        t = np.where(repeat[open_], (lo + hi) // 2, t)
        shrink = (hi * (0.97 if first else 0.9)).astype(np.int64)
        tol = np.maximum(1, (hi * REL_TOL).astype(np.int64))
        if descend:
            t = hi - tol * 2 ** np.minimum(succ[open_], 40)
            shrink = (hi * 0.9 ** (succ[open_] + 1)).astype(np.int64)
        if first and t_first is not None:
            shrink = np.asarray(t_first, dtype=np.int64)[open_]
        t = np.where(lo == 0, shrink, t)
        t = np.clip(t, lo + 1, hi - 1)
        bsel = batch[open_]
        zs = z_hi[open_].copy()
        fs = objective(zs, t, bsel)
        if first and (seeds_from is not None or starts):
            # every seed of every row in one call; the best seed replaces a worse start
            seeds = [] if seeds_from is None else _seeds(spec, seeds_from[open_], objective.h_max)
            seeds = np.stack(seeds + [s[open_] for s in starts or []])  # (S, n, k)
            n_s = seeds.shape[0]
            fz = objective(seeds.reshape(-1, seeds.shape[2]), np.tile(t, n_s),
                           np.tile(bsel, n_s)).reshape(n_s, -1)
            j = np.argmin(fz, axis=0)
            cols = np.arange(fz.shape[1])
            better = fz[j, cols] < fs
            zs[better], fs[better] = seeds[j, cols][better], fz[j, cols][better]
        step = 0.5 if first else (DESCEND_STEP if descend else 0.25)
        zs, fs = _compass(objective, zs, fs, t, bsel, step, target)
        ok = fs <= target
        if descend:
            tc, fc = _crossing(objective, zs, np.where(ok, lo, t), np.where(ok, t, hi - 1), bsel,
                               target, tol)
            found = tc > 0
            z_hi[open_[found]] = zs[found]
            T_hi[open_[found]] = tc[found]
            T_lo[open_[~ok]] = t[~ok]
            succ[open_] = np.where(ok, succ[open_] + 1, 0)
            first = False
            continue
        slide = ok & (lo == 0)
        if slide.any():
            # Slide down: the z found may reach the target well before t.
            t[slide], fs[slide] = _slide_down(objective, zs[slide], t[slide], fs[slide],
                                              bsel[slide], lo[slide], target)
        z_hi[open_[ok]] = zs[ok]
        T_hi[open_[ok]] = t[ok]
        m_hi[open_[ok]] = fs[ok]
        T_lo[open_[~ok]] = t[~ok]
        m_lo[open_[~ok]] = fs[~ok]
        side = np.where(ok, 1, -1).astype(np.int8)
        repeat[open_] = last_side[open_] == side
        last_side[open_] = side
        first = False
    return z_hi, T_hi


def _grid_search_1d(objective, t: int, batch, target: float):
    """min over log a of E[L](t; a, B) for one row: `nqm.lowest_loss`'s grid of GRID_1D rates
    over the space (capped at the stable limit), then the compass search from the grid's best
    to a step of 1e-9 (in one dimension it has no valley to stall in) in place of
    `lowest_loss`'s Nelder-Mead: the same steps on every benchmark and report, 0.6 s less on
    the default problem's 20 batch sizes (`benchmarks/bench_certify.py`, 2026-11-28: 1.46 s
    against 2.02 s), and the committed SGD reports were tuned with it (their rates at B_ref
    move in the fifth digit with Nelder-Mead's). Returns (z (1, 1), loss)."""
    lo = np.log(objective.space.learning_rate[0])
    hi = np.log(min(objective.space.learning_rate[1], 2.0 / objective.h_max * (1 - 1e-9)))
    grid = np.linspace(lo, hi, GRID_1D)[:, None]
    f = objective(grid, np.full(GRID_1D, t), np.repeat(batch, GRID_1D))
    j = int(np.argmin(f))
    z, f_best = _compass(objective, grid[j:j + 1].copy(), f[j:j + 1].copy(), np.array([t]), batch,
                         (hi - lo) / (GRID_1D - 1), target, min_step=1e-9, max_iter=200)
    return z, float(f_best[0])


def _certify(problem: Problem, spec: OptimizerSpec, space: SearchSpace, objective, z, steps,
             batch, target: float, initial_loss: float):
    """The tuned steps held against the grid search (`nqm.lowest_loss`), per row, in place.

    The local searches can stop short: a T at which the compass search from the best z so far
    fails is taken as a lower bracket although other z in the space reach the target there
    (momentum's loss at fixed T has ripples and curved valleys). For each row with steps > 1,
    while the grid search (a grid over the space, then Nelder-Mead) reaches the target at one
    bracket tolerance below the steps, its metaparameters replace the row's and the envelope
    search descends from them; a row stops when the grid search fails there (it is then not
    improvable by that search, which is not exhaustive either) or after CERTIFY_ROUNDS rounds.
    A loss within AT_TARGET's rounding of the target counts as reaching it (a target set to a
    lowest loss, as the validation's step-matched one, comes back a float unit above it).

    Args:
      z: (n, k) the rows' coordinates; steps: (n,) int, steps at which each z reaches the target
        (< 0: unreached, left alone); batch: (n,) batch sizes.

    Returns:
      (z, steps), changed in place.
    """
    reach = target * AT_TARGET
    for i in np.flatnonzero(steps > 1):
        def attempt(t, i=i):
            if spec.dims == 1:
                z_i, f_i = _grid_search_1d(objective, t, batch[i:i + 1], reach)
            else:
                best = lowest_loss(problem, spec, float(batch[i]), t, space)
                f_i = best.loss
                z_i = coordinates(spec, objective.h_max, best.learning_rate,
                                  best.momentum or 0.0, best.ema_decay or 0.0)
            if not f_i <= reach:
                return None
            z_i, t_i = _envelope_search(objective, spec, z_i, np.array([t]), batch[i:i + 1],
                                        reach, initial_loss, descend=True)
            z[i] = z_i[0]
            return int(t_i[0])

        steps[i] = _walk_down(int(steps[i]), attempt)
    return z, steps


def _walk_down(steps: int, attempt: Callable[[int], int | None]) -> int:
    """The certificate's walk from a tuned step count, shared by `_certify` and `_certify_adam`:
    at T = steps less one bracket tolerance (one step below 2,000 steps), `attempt(T)` returns
    the steps of metaparameters the grid search found reaching the target at T (and keeps
    them), or None where it found none; the walk goes on from min(that, T) and stops at None,
    at step 1 or after CERTIFY_ROUNDS rounds. Returns the final step count."""
    for _ in range(CERTIFY_ROUNDS):
        t = steps - max(1, int(steps * REL_TOL))
        if t < 1:
            break
        found = attempt(t)
        if found is None:
            break
        steps = min(found, t)
    return steps


def _certify_adam(problem: Problem, spec: OptimizerSpec, space: SearchSpace,
                  curve: ScalingCurve) -> ScalingCurve:
    """Mean-field Adam's tuned curve (`nqm.adam_tuning`) held against the grid search, per point.

    Its tuner scans a grid of rates and refines around the best; between two rates of the last
    round a narrow window of rates can take a step fewer. For each point with steps S > 1,
    while the grid search over the same space (`nqm.lowest_loss`: b1 from spec.beta1, a grid of
    rates, then a bounded scalar search; mean-field E[L] by `adam.expected_loss`) reaches the
    target within AT_TARGET's rounding at T = S - max(1, S REL_TOL), the point takes T and the
    grid's (rate, b1); then, if `adam.steps_to_target` gives that rate fewer steps still and the
    same evaluation as the grid's confirms the loss there, it takes those. A point stops when
    the grid search fails or after CERTIFY_ROUNDS rounds. Points not improved keep the tuner's
    steps and its rate (the middle of its best rates); a certified point's rate is the grid
    search's minimiser at its steps.

    Returns a new ScalingCurve; its config gains "certified": True."""
    reach = problem.target * AT_TARGET
    points = []
    for p in curve.points:
        if p.steps is None or p.steps <= 1:
            points.append(p)
            continue
        found = {}

        def attempt(t, p=p, found=found):
            best = lowest_loss(problem, spec, float(p.batch_size), t, space)
            if not best.loss <= reach:
                return None
            lr, b1 = best.learning_rate, best.momentum
            found.update(lr=lr, b1=b1)
            s = int(adam.steps_to_target(problem, p.batch_size, lr, b1, spec.beta2,
                                         max_steps=t)[0])
            return s if 0 < s < t and adam.expected_loss(
                problem, [s], p.batch_size, lr, b1, spec.beta2)[0, 0] <= reach else t

        steps = _walk_down(p.steps, attempt)
        points.append(p if steps == p.steps else dataclasses.replace(
            p, steps=steps, learning_rate=found["lr"], momentum=found["b1"],
            edge=adam_tuning.rate_edge(found["lr"], space.learning_rate)))
    return dataclasses.replace(curve, points=tuple(points),
                               config={**curve.config, "certified": True})


def _chained_search(objective, spec, z_start, t_start, batch, target, initial_loss, z_sgd):
    """The envelope search one batch size at a time, from the smallest, each warm-started by
    the batch sizes before it.

    A larger batch only lowers E[L] at the same metaparameters and step, so the previous winner
    reaches the target within its own steps here too (an upper bracket), and the optimum moves
    smoothly with B: the first T tried is the previous steps times the last ratio of steps, and
    the starting points include the previous winner and its linear extrapolation in log B.

    Args and returns: as `_envelope_search` (batch ascending; z_sgd: (n, 1) the SGD grid's
    winners).
    """
    z_out = np.array(z_start, dtype=float)
    t_out = np.asarray(t_start, dtype=np.int64).copy()
    for i in range(batch.size):
        row, prev = slice(i, i + 1), slice(i - 1, i)
        z0, t0, t_first, starts = z_out[row], t_out[row], None, []
        if i >= 1:
            starts.append(z_out[prev])
            if t_out[i - 1] < t0[0]:
                z0, t0 = z_out[prev], t_out[prev]
            ratio = 0.5   # perfect scaling
            if i >= 2:
                ratio = min(max(t_out[i - 1] / t_out[i - 2], 0.3), 1.0)
                slope = np.log(batch[i] / batch[i - 1]) / np.log(batch[i - 1] / batch[i - 2])
                starts.append(z_out[prev] + slope * (z_out[prev] - z_out[i - 2:i - 1]))
            t_first = np.array([max(1, min(int(t_out[i - 1] * ratio), t0[0] - 1))])
        z_out[row], t_out[row] = _envelope_search(
            objective, spec, z0, t0, batch[row], target, initial_loss,
            seeds_from=z_sgd[row] if i < 2 else None,
            t_first=t_first, starts=starts, descend=True)
    return z_out, t_out


def _edges(spec: OptimizerSpec, space: SearchSpace, a, b, g) -> tuple[str, ...]:
    out = []
    tol = 1.02
    if a <= space.learning_rate[0] * tol or a >= space.learning_rate[1] / tol:
        out.append("learning_rate")
    if spec.name == "momentum" and (1 - b) <= space.one_minus_momentum[0] * tol:
        out.append("momentum")
    if spec.name == "ema" and (1 - g) <= space.one_minus_ema_decay[0] * tol:
        out.append("ema_decay")
    return tuple(out)


def tune_curve(config: NQMConfig | Problem, spec: OptimizerSpec = OptimizerSpec(),
               batch_sizes=tuple(2 ** k for k in range(2, 22)), max_steps: int = 10 ** 8,
               space: SearchSpace = SearchSpace(),
               progress: Callable[[int, int], None] | None = None,
               certify: bool = False) -> ScalingCurve:
    """Steps to target at each batch size with the metaparameters tuned per batch size.

    Args:
      config: the problem (an NQMConfig, or Problem arrays).
      spec: the optimizer family.
      batch_sizes: batch sizes (whole numbers >= 1).
      max_steps: step budget; a batch size that cannot reach the target within it is unreached.
      space: search bounds.
      progress: mean-field Adam only (minutes on large problems): progress(done, total) after
        each pass of its search (`nqm.adam_tuning.tune_adam_curve`); ignored by the others.
      certify: also hold every tuned point against the grid search (`_certify`; sgd,
        momentum, ema and the schedules' constant curve), as the validation does. The local
        searches alone (False) are 8-16x faster on the default problem (d = 10,000) and take
        up to 3% more steps there, but up to 25% more at some batch sizes of calibrated
        momentum NQMs (docs/validation.md, 'The NQM's tuner against the engine's grid search')
        and 50% (3 steps for 2) on benchmarks/bench_certify.py's small problem. Mean-field
        Adam's curve is certified point by point after its own tuner (`_certify_adam`).

    Returns:
      A ScalingCurve (source 'nqm') whose config records problem, optimizer, budget and search
      (`python -m nqm curve` adds whether it was certified).
    """
    problem = config.problem() if isinstance(config, NQMConfig) else config
    batch = validation.check_batch_sizes(batch_sizes).astype(np.float64)
    problem.check_batch_sizes(batch)
    max_steps = validation.check_whole("max_steps", max_steps, 1, 10 ** 12)
    if spec.name == "schedule":
        return _tune_schedule_curve(config, problem, spec, batch, max_steps, space, certify)
    if spec.name == "adam":
        curve = adam_tuning.tune_adam_curve(config, batch, spec.beta1, spec.beta2,
                                            search=adam_search(space, max_steps),
                                            progress=progress)
        return _certify_adam(problem, spec, space, curve) if certify else curve
    objective = _Objective(problem, spec, space)
    target = problem.target
    n_b = batch.size

    # 1. SGD learning-rate grid, one ladder scan for all batch sizes. Its budget is at least
    # SEED_BUDGET: the tuned family may reach the target well within max_steps where SGD does
    # not, and it needs a feasible start to search from. The budget is applied at the end.
    seed_budget = max(max_steps, SEED_BUDGET)
    lr_hi = min(space.learning_rate[1], 2.0 / objective.h_max * (1 - 1e-9))
    # The grid only seeds the search; it starts at the paper's SGD floor (the search itself
    # goes down to the space's lower bound).
    lr_lo = min(max(space.learning_rate[0], GRID_FLOOR), lr_hi)
    # SGD's Newton search converges from a learning rate a factor ~2 off: half the density.
    per_decade = space.grid_per_decade / (2 if spec.name == "sgd" else 1)
    n_grid = max(2, int(np.ceil(np.log10(lr_hi / lr_lo) * per_decade)) + 1)
    grid = np.geomspace(lr_lo, lr_hi, n_grid)
    dyn = dynamics(problem, 1.0, grid, precond_power=spec.precond_power)
    # A coarse ladder suffices here: this stage only seeds the search (SGD's Newton search
    # converges from steps a factor 2 off, so it gets the coarsest, and no bisection: its
    # steps are the winning rung, a feasible upper bound).
    hi, row = crossing.best_crossing_per_batch(
        crossing.Compacting(dyn, "signal_noise"), grid.size, batch, target, seed_budget,
        active=dyn.stable_N, rungs=crossing.ladder(seed_budget, dense=8,
                                                   per_octave=1 if spec.name == "sgd" else 2),
        bisect=spec.name != "sgd", train_size=problem.train_size)
    reached = hi >= 0
    z_sgd = np.log(grid[np.maximum(row, 0)])[:, None]
    z = coordinates(spec, objective.h_max, np.exp(z_sgd[:, 0]))

    # 2. Plain SGD: Newton on the closed form from the grid's winners (`nqm.sgd_tuning`), where
    # it provably lands on the local optimum; every other row: the envelope search, all batch
    # sizes in lockstep, then every winner tried at its neighbours.
    idx = np.flatnonzero(reached & (hi > 0))
    if spec.name == "sgd" and idx.size:
        lr, t_star, solved = sgd_tuning.newton_optimum(
            objective.h_eff, objective.c_eff, 0.5 * problem.curvature_D,
            problem.init_second_moment_D, batch[idx], np.exp(z_sgd[idx, 0]), hi[idx], target,
            (space.learning_rate[0], lr_hi), problem.train_size)
        # ceil(T*) reaches the target (up to rounding, checked); the exact crossing is step 3's.
        t_int = np.ceil(t_star * (1 - 1e-12)).astype(np.int64)
        z_new = coordinates(spec, objective.h_max, lr)
        solved &= objective(z_new, t_int, batch[idx]) <= target
        solved &= t_int <= hi[idx]
        z[idx[solved]] = z_new[solved]
        hi[idx[solved]] = t_int[solved]
        idx = idx[~solved]
    if idx.size and spec.name in CHAINED:
        z_idx, t_idx = _chained_search(objective, spec, z[idx], hi[idx], batch[idx], target,
                                       problem.initial_loss(), z_sgd[idx])
    elif idx.size:
        z_idx, t_idx = _envelope_search(objective, spec, z[idx], hi[idx], batch[idx], target,
                                        problem.initial_loss(), seeds_from=z_sgd[idx])
    if idx.size:
        z_x, improved = _cross_seed(objective, spec, z_idx, t_idx, batch[idx], target)
        if improved.any():
            z_idx[improved], t_idx[improved] = _envelope_search(
                objective, spec, z_x[improved], t_idx[improved], batch[idx[improved]], target,
                problem.initial_loss())
        z[idx] = z_idx
        hi[idx] = t_idx
    # 2b. Every winner held against the grid search, which the local searches can fall short of.
    if certify:
        # rows over the budget are dropped below: not worth certifying
        live = np.where(hi <= max_steps, hi, -1)
        z, live = _certify(problem, spec, space, objective, z, live, batch, target,
                           problem.initial_loss())
        hi = np.where(live > 0, live, hi)

    # 3. Exact first crossing of each winner (certified: within AT_TARGET's rounding of the
    # target, as the certificate counts it).
    reach = target * AT_TARGET if certify else target
    a, b, g = metaparameters(spec, z, objective.h_max)
    steps = np.full(n_b, crossing.NOT_REACHED, dtype=np.int64)
    if reached.any():
        win = np.flatnonzero(reached)
        dyn = dynamics(problem, batch[win], a[win], b[win], g[win], spec.precond_power)
        steps[win] = crossing.certified_steps(dyn, reach, hi[win])
        # A larger batch only lowers E[L] at the same metaparameters and step: carry a smaller
        # batch's winner forward wherever it beats the local one.
        for j in range(1, n_b):
            i = j - 1
            if steps[i] < 0 or (0 <= steps[j] <= steps[i]):
                continue
            carried = dynamics(problem, batch[j], a[i], b[i], g[i], spec.precond_power)
            s = crossing.certified_steps(carried, reach, [steps[i]])[0]
            if s >= 0 and (steps[j] < 0 or s < steps[j]):
                steps[j], a[j], b[j], g[j] = s, a[i], b[i], g[i]
    steps[steps > max_steps] = crossing.NOT_REACHED   # the budget: over it is not reached
    points = []
    for i in range(n_b):
        if steps[i] < 0:
            points.append(CurvePoint(int(batch[i]), None))
            continue
        points.append(CurvePoint(
            batch_size=int(batch[i]), steps=int(steps[i]), learning_rate=float(a[i]),
            momentum=float(b[i]) if spec.name == "momentum" else None,
            ema_decay=float(g[i]) if spec.name == "ema" else None,
            edge=_edges(spec, space, a[i], b[i], g[i])))
    cfg = {"optimizer": spec.name, "precond_power": spec.precond_power,
           "max_steps": max_steps, "target": target,
           "search": {"learning_rate": list(space.learning_rate),
                      "one_minus_momentum": list(space.one_minus_momentum),
                      "one_minus_ema_decay": list(space.one_minus_ema_decay)}}
    if isinstance(config, NQMConfig):
        cfg["problem"] = config.to_dict()
    return ScalingCurve(points=tuple(points), source="nqm", config=cfg)


def _tune_schedule_curve(config, problem: Problem, spec: OptimizerSpec, batch: np.ndarray,
                         max_steps: int, space: SearchSpace, certify: bool) -> ScalingCurve:
    """The constant-step-size curve, then K-piece schedules tuned from it per batch size."""
    constant = tune_curve(problem, OptimizerSpec("sgd", spec.precond_power), batch,
                          max(max_steps, SEED_BUDGET), space, certify=certify)
    h_eff, _ = preconditioned(problem.curvature_D, problem.noise_D, spec.precond_power)
    lr_bounds = (space.learning_rate[0],
                 min(space.learning_rate[1], 2.0 / float(h_eff.max()) * (1 - 1e-9)))
    points = []
    for p in constant.points:
        if p.steps is None:
            points.append(p)
            continue
        steps, lrs = schedule_tuning.tune_schedule(problem, p.batch_size, spec.pieces,
                                                   p.learning_rate, p.steps, lr_bounds,
                                                   spec.precond_power)
        if steps > max_steps:
            points.append(CurvePoint(p.batch_size, None))
            continue
        edge = ("learning_rate",) if np.any(lrs <= lr_bounds[0] * 1.02) else ()
        points.append(CurvePoint(batch_size=p.batch_size, steps=int(steps),
                                 learning_rate=float(lrs[0]), edge=edge,
                                 schedule=tuple(float(x) for x in lrs)))
    cfg = dict(constant.config, optimizer="schedule", pieces=spec.pieces)
    if isinstance(config, NQMConfig):
        cfg["problem"] = config.to_dict()
    return ScalingCurve(points=tuple(points), source="nqm", config=cfg)

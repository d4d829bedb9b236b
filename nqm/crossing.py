"""Steps to target: the first integer step at which the expected loss is at or below the target.

The search is vectorised over N rows of metaparameters. It scans a ladder of step counts (every
step up to `DENSE_STEPS`, then a geometric ladder with `LADDER_PER_OCTAVE` rungs per doubling),
takes the first rung at or below the target, and bisects the interval before it to the exact
integer. A row stops early, as unreachable, once the noise part of its loss (non-decreasing in t,
see `Dynamics.loss_parts`) exceeds the target, or when it is unstable.

Exactness: a non-increasing curve (plain SGD started above its stationary moments) has one
crossing, which ladder and bisection find exactly. A curve that can oscillate (momentum,
averaging) whose crossing is known to lie within `CERTIFY_DENSE` steps is checked at every step up
to it; beyond that (every step up to `DENSE_STEPS`, then rungs), a dip below the target that
comes back above it *between two rungs* can be missed, and a later crossing is returned:
rungs 9% apart in `first_crossing`, 3.1-6.3% apart in `certified_steps` (the tuned curves'
steps), whose ladder runs on the one-step recurrence with jumps of 2^m steps
(`Dynamics.jump_trajectory`). `exhaustive_first_crossing` checks every step and is the tests'
reference.
"""

from __future__ import annotations

import numpy as np

from nqm.problem import noise_factor

DENSE_STEPS = 64
CERTIFY_DENSE = 2048
CERTIFY_PER_OCTAVE = 16   # rungs an octave on `certified_steps`' ladder (3.1-6.3% apart)
LADDER_PER_OCTAVE = 8
NOT_REACHED = -1


class Compacting:
    """Calls `getattr(dyn, method)(t, rows)` on a shrinking set of rows without copying each time.

    Indexing a (N, d) system by a row subset copies it; during a ladder scan the subset shrinks
    slowly, so the system is compacted only when fewer than `keep` of its rows are still asked
    for, and otherwise evaluated on all its rows (the unused ones at step 0).
    """

    def __init__(self, dyn, method: str, keep: float = 0.6):
        self.original = dyn
        self.dyn = dyn
        self.ids = np.arange(dyn.rows)
        self.method = method
        self.keep = keep

    def __call__(self, t, rows):
        rows = np.asarray(rows)
        unique_sorted = rows.size < 2 or bool(np.all(np.diff(rows) > 0))
        local = np.searchsorted(self.ids, rows)
        inside = unique_sorted and bool(np.all(local < self.ids.size)) and bool(
            np.all(self.ids[np.minimum(local, self.ids.size - 1)] == rows))
        if not inside:
            return getattr(self.original, self.method)(t, rows)
        if rows.size < self.keep * self.ids.size:
            self.dyn = self.dyn.take(local)
            self.ids = rows
            local = np.arange(rows.size)
        fn = getattr(self.dyn, self.method)
        if rows.size == self.ids.size:
            return fn(t)
        full = np.zeros(self.ids.size, dtype=np.int64)
        full[local] = t
        return tuple(o[local] for o in fn(full))


def ladder(max_steps: int, dense: int = DENSE_STEPS,
           per_octave: int = LADDER_PER_OCTAVE) -> np.ndarray:
    """The rungs: 0..dense, then dense * 2^(k / per_octave), capped at max_steps."""
    max_steps = int(max_steps)
    dense_steps = dense
    dense = np.arange(0, min(dense_steps, max_steps) + 1, dtype=np.int64)
    if max_steps <= dense_steps:
        return dense
    octaves = np.log2(max_steps / dense_steps)
    k = np.arange(1, int(np.ceil(octaves * per_octave)) + 1)
    geo = np.unique(np.round(dense_steps * 2.0 ** (k / per_octave)).astype(np.int64))
    geo = geo[(geo > dense_steps) & (geo < max_steps)]
    return np.concatenate([dense, geo, [max_steps]])


def first_crossing(loss_parts, n_rows: int, target: float, max_steps: int,
                   active=None, dense: int = DENSE_STEPS, start: int = 0) -> np.ndarray:
    """First t in [0, max_steps] with loss(t) <= target, per row; NOT_REACHED (-1) if none.

    Args:
      loss_parts: callable (t (n,) int64, rows (n,) int) -> (loss (n,), noise part (n,)).
      n_rows: N.
      target: the loss to reach.
      max_steps: the step budget.
      active: optional bool (N,) of rows to search (others get NOT_REACHED).
      dense: every step up to this one is checked (exact first crossing there).
      start: the search begins at this step (the caller knows every earlier loss > target).

    Returns:
      int64 array (N,).
    """
    steps = np.full(n_rows, NOT_REACHED, dtype=np.int64)
    pending = np.arange(n_rows) if active is None else np.flatnonzero(active)
    lo = np.zeros(n_rows, dtype=np.int64)
    hi = np.full(n_rows, NOT_REACHED, dtype=np.int64)
    prev = start
    lo[:] = start
    rungs = ladder(max_steps, dense=dense)
    for rung in rungs[rungs >= start]:
        if pending.size == 0:
            break
        loss, noise = loss_parts(np.full(pending.size, rung, dtype=np.int64), pending)
        hit = loss <= target
        hi[pending[hit]] = rung
        lo[pending[hit]] = prev
        # Unreachable from here on: the noise part only grows; inf/nan: unstable.
        dead = ~hit & ((noise > target) | ~np.isfinite(loss))
        pending = pending[~hit & ~dead]
        prev = rung
    # Bisection on (lo, hi]: loss(lo) > target >= loss(hi).
    bracket = np.flatnonzero(hi >= 0)
    steps[bracket] = first_crossing_in_brackets(
        lambda t, idx: loss_parts(t, bracket[idx]), lo[bracket], hi[bracket], target)
    return steps


def exhaustive_first_crossing(losses_T: np.ndarray, target: float) -> int:
    """First index of a loss trajectory (every step) at or below target, or NOT_REACHED."""
    hits = np.flatnonzero(np.asarray(losses_T) <= target)
    return int(hits[0]) if hits.size else NOT_REACHED


def steps_to_target(dyn, target: float, max_steps: int) -> np.ndarray:
    """First crossing for every row of a `nqm.moments.Dynamics`; NOT_REACHED where none.

    Rows whose loss is non-increasing (`dyn.monotone_N`: SGD started above its stationary
    moments) are searched by ladder and bisection, exact. The others are checked at every step
    up to `CERTIFY_DENSE` (the one-step recurrence, `Dynamics.trajectory`), then by the ladder.
    """
    max_steps = int(max_steps)
    out = np.full(dyn.rows, NOT_REACHED, dtype=np.int64)
    monotone = dyn.stable_N & dyn.monotone_N
    if monotone.any():
        out[monotone] = first_crossing(Compacting(dyn, "loss_parts"), dyn.rows, target,
                                       max_steps, active=monotone)[monotone]
    rest = np.flatnonzero(dyn.stable_N & ~monotone)
    horizon = min(CERTIFY_DENSE, max_steps)
    later = np.zeros(dyn.rows, dtype=bool)
    for row in rest:
        hits = np.flatnonzero(dyn.trajectory(int(row), horizon) <= target)
        if hits.size:
            out[row] = hits[0]
        elif max_steps > horizon:
            later[row] = True
    if later.any():
        out[later] = first_crossing(Compacting(dyn, "loss_parts"), dyn.rows, target, max_steps,
                                    active=later, start=horizon)[later]
    return out


def octave_jumps(steps: int, dense: int = DENSE_STEPS,
                 per_octave: int = CERTIFY_PER_OCTAVE) -> np.ndarray:
    """log2 of the jumps of the certifying ladder below `steps`: single steps up to `dense`,
    then `per_octave` equal jumps an octave (dense 2^o / per_octave steps each in octave o),
    for `Dynamics.jump_trajectory`. Its rungs, cumsum(2^jumps), all lie below `steps`.

    dense and per_octave must be powers of two with per_octave <= dense.
    """
    steps = int(steps)
    unit = min(dense, max(steps - 1, 0))
    out = [np.zeros(unit, dtype=np.int64)]
    t = unit
    m = int(np.log2(dense // per_octave))
    while t < steps - 1 and unit == dense:
        k = 2 ** m
        n = min(per_octave, (steps - 1 - t) // k)
        if n == 0:
            break
        out.append(np.full(n, m, dtype=np.int64))
        t += n * k
        m += 1
    return np.concatenate(out)


def certified_steps(dyn, target: float, known_steps,
                    dense_limit: int = CERTIFY_DENSE) -> np.ndarray:
    """First crossing of each row, given a step `known_steps` at which its loss is <= target.

    The first crossing is at most `known_steps`. Non-increasing rows are bisected. Rows whose
    known step is within `dense_limit` are checked at every step up to it (the recurrence: exact
    whatever the oscillations); the others at every step up to `DENSE_STEPS`, then on a ladder
    of `CERTIFY_PER_OCTAVE` rungs an octave below their known step (`octave_jumps`, the jumped
    recurrence), and bisected before the first rung that reaches the target. The rungs are
    judged by the recurrence and the bisection by the closed form, which agree to ~1e-9
    relative: a rung whose loss is that close to the target can move the answer by a step.
    """
    known = np.asarray(known_steps, dtype=np.int64)
    out = np.full(dyn.rows, NOT_REACHED, dtype=np.int64)
    # Non-increasing rows: one crossing, so bisection on (0, known] is exact.
    mono = np.flatnonzero((known >= 0) & dyn.stable_N & dyn.monotone_N)
    if mono.size:
        out[mono] = first_crossing_in_brackets(
            lambda t, idx: dyn.loss_parts(t, mono[idx]), np.full(mono.size, -1),
            known[mono], target)
        known = known.copy()
        known[mono] = NOT_REACHED           # done: skip the searches below
    for row in np.flatnonzero((known >= 0) & (known <= dense_limit)):
        hits = np.flatnonzero(dyn.trajectory(int(row), int(known[row])) <= target)
        out[row] = hits[0] if hits.size else known[row]
    large = np.flatnonzero(known > dense_limit)
    lo = np.zeros(large.size, dtype=np.int64)
    hi = known[large].copy()
    for j, row in enumerate(large):
        jumps = octave_jumps(int(known[row]))
        rungs = np.concatenate([[0], np.cumsum(2 ** jumps)])
        hits = np.flatnonzero(dyn.jump_trajectory(int(row), jumps) <= target)
        if hits.size == 0:
            lo[j] = rungs[-1]               # the first crossing is the known step or before it
        elif hits[0] == 0:
            lo[j], hi[j] = -1, 0
        else:
            lo[j], hi[j] = rungs[hits[0] - 1], rungs[hits[0]]
    if large.size:
        out[large] = first_crossing_in_brackets(
            lambda t, idx: dyn.loss_parts(t, large[idx]), lo, hi, target)
    return out


def best_crossing_per_batch(signal_noise, n_rows: int, batch_sizes, target: float,
                            max_steps: int, active=None, rungs=None, bisect: bool = True,
                            train_size=None):
    """For each batch size, the fewest steps to target over N metaparameter rows, and which row.

    The loss of row r at batch size B is `signal_r(t) + noise_r(t) f(B)` (`signal_noise` is
    evaluated once at unit batch size), so one ladder scan serves every batch size. A (row, B)
    pair stops as soon as another row has reached the target at B on an earlier rung: it can no
    longer be the best. Only the pairs still tied on the first winning rung are bisected.

    Args:
      signal_noise: callable (t (n,), rows (n,)) -> (signal (n,), noise at B = 1 (n,)).
      n_rows: N.
      batch_sizes: (n_B,) batch sizes.
      target, max_steps: as in `first_crossing`.
      active: optional bool (N,) rows to consider (e.g. stable ones).
      rungs: the ladder to scan (default `ladder(max_steps)`).
      bisect: False skips the bisection: steps is then the first winning rung (an upper bound
        on the exact fewest steps) and best_row the row with the lowest loss there.
      train_size: N of the problem (f(B) = `nqm.problem.noise_factor(B, N)`), or None.

    Returns:
      (steps (n_B,) int64 with NOT_REACHED where no row reaches, best_row (n_B,) int64, -1 if none).
    """
    batch = np.asarray(batch_sizes, dtype=np.float64)
    factor = noise_factor(batch, train_size)
    n_b = batch.size
    rows_all = np.arange(n_rows) if active is None else np.flatnonzero(active)
    pending = np.zeros((n_rows, n_b), dtype=bool)
    pending[rows_all] = True
    lo = np.zeros((n_rows, n_b), dtype=np.int64)
    hit_rung = np.full(n_b, NOT_REACHED, dtype=np.int64)
    hit_mask = np.zeros((n_rows, n_b), dtype=bool)
    hit_loss = np.full((n_rows, n_b), np.inf)
    prev = 0
    for rung in ladder(max_steps) if rungs is None else rungs:
        rows = np.flatnonzero(pending.any(axis=1))
        if rows.size == 0:
            break
        signal, noise = signal_noise(np.full(rows.size, rung, dtype=np.int64), rows)
        with np.errstate(invalid="ignore"):
            loss = signal[:, None] + noise[:, None] * factor[None, :]
            hit = pending[rows] & (loss <= target)
            dead = (noise[:, None] * factor[None, :] > target) | ~np.isfinite(loss)
        newly = hit.any(axis=0)
        hit_rung[newly] = rung
        hit_mask[rows[:, None], np.arange(n_b)[None, :]] |= hit
        if not bisect and newly.any():
            cols = np.flatnonzero(newly)
            hit_loss[rows[:, None], cols[None, :]] = np.where(hit[:, cols], loss[:, cols], np.inf)
        lo[rows[:, None], np.where(newly)[0][None, :]] = prev
        still = pending[rows] & ~hit & ~dead
        still[:, newly] = False      # a winner exists at this rung: the rest are slower
        pending[rows] = still
        pending[:, newly] = False
        prev = rung
    steps = np.full(n_b, NOT_REACHED, dtype=np.int64)
    best_row = np.full(n_b, -1, dtype=np.int64)
    if not bisect:
        reached = hit_rung >= 0
        steps[reached] = hit_rung[reached]
        best_row[reached] = np.argmin(hit_loss[:, reached], axis=0)
        return steps, best_row
    # Bisect every tied pair on its winning rung; keep the smallest.
    pair_r, pair_b = np.nonzero(hit_mask)
    pair_lo = lo[pair_r, pair_b]
    pair_hi = hit_rung[pair_b].copy()

    def pair_loss(t, idx):
        s, n = signal_noise(t, pair_r[idx])
        return s + n * factor[pair_b[idx]], n

    result = first_crossing_in_brackets(pair_loss, pair_lo, pair_hi, target)
    for b_idx in range(n_b):
        mine = np.flatnonzero(pair_b == b_idx)
        if mine.size:
            k = mine[np.argmin(result[mine])]
            steps[b_idx] = result[k]
            best_row[b_idx] = pair_r[k]
    return steps, best_row


def first_crossing_in_brackets(loss_parts, lo, hi, target: float) -> np.ndarray:
    """Bisection to the exact integer crossing in (lo, hi], given loss(lo) > target >= loss(hi).

    Args:
      loss_parts: callable (t (n,), idx (n,)) -> (loss (n,), anything).
      lo, hi: int64 (n,); hi == 0 means the target is met at step 0.
    """
    lo = np.array(lo, dtype=np.int64)
    hi = np.array(hi, dtype=np.int64)
    active = np.flatnonzero(hi - lo > 1)
    while active.size:
        mid = (lo[active] + hi[active]) // 2
        loss, _ = loss_parts(mid, active)
        below = loss <= target
        hi[active[below]] = mid[below]
        lo[active[~below]] = mid[~below]
        active = active[hi[active] - lo[active] > 1]
    return hi

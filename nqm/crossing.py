"""Steps to target: the first integer step at which the expected loss is at or below the target.

The search is vectorised over N rows of metaparameters. It scans a ladder of step counts (every
step up to `DENSE_STEPS`, then a geometric ladder with `LADDER_PER_OCTAVE` rungs per doubling),
takes the first rung at or below the target, and bisects the interval before it to the exact
integer. A row stops early, as unreachable, once the noise part of its loss (non-decreasing in t,
see `Dynamics.loss_parts`) exceeds the target, or when it is unstable.

Exactness: the step returned is the first crossing unless the curve dips below the target and
comes back above it *between two rungs* before the rung found; momentum oscillations do that
only early, where the ladder is dense. `exhaustive_first_crossing` checks every step and is the
reference the tests compare against.
"""

from __future__ import annotations

import numpy as np

DENSE_STEPS = 64
LADDER_PER_OCTAVE = 8
NOT_REACHED = -1


def ladder(max_steps: int) -> np.ndarray:
    """The rungs: 0..DENSE_STEPS, then DENSE_STEPS * 2^(k / LADDER_PER_OCTAVE), capped at max_steps."""
    max_steps = int(max_steps)
    dense = np.arange(0, min(DENSE_STEPS, max_steps) + 1, dtype=np.int64)
    if max_steps <= DENSE_STEPS:
        return dense
    octaves = np.log2(max_steps / DENSE_STEPS)
    k = np.arange(1, int(np.ceil(octaves * LADDER_PER_OCTAVE)) + 1)
    geo = np.unique(np.round(DENSE_STEPS * 2.0 ** (k / LADDER_PER_OCTAVE)).astype(np.int64))
    geo = geo[geo < max_steps]
    return np.concatenate([dense, geo, [max_steps]])


def first_crossing(loss_parts, n_rows: int, target: float, max_steps: int,
                   active=None) -> np.ndarray:
    """First t in [0, max_steps] with loss(t) <= target, per row; NOT_REACHED (-1) if none.

    Args:
      loss_parts: callable (t (n,) int64, rows (n,) int) -> (loss (n,), noise part (n,)).
      n_rows: N.
      target: the loss to reach.
      max_steps: the step budget.
      active: optional bool (N,) of rows to search (others get NOT_REACHED).

    Returns:
      int64 array (N,).
    """
    steps = np.full(n_rows, NOT_REACHED, dtype=np.int64)
    pending = np.arange(n_rows) if active is None else np.flatnonzero(active)
    lo = np.zeros(n_rows, dtype=np.int64)
    hi = np.full(n_rows, NOT_REACHED, dtype=np.int64)
    prev = 0
    for rung in ladder(max_steps):
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
    zero = bracket[hi[bracket] == 0]
    steps[zero] = 0
    bracket = bracket[hi[bracket] > 0]
    while bracket.size:
        wide = hi[bracket] - lo[bracket] > 1
        done = bracket[~wide]
        steps[done] = hi[done]
        bracket = bracket[wide]
        if bracket.size == 0:
            break
        mid = (lo[bracket] + hi[bracket]) // 2
        loss, _ = loss_parts(mid, bracket)
        below = loss <= target
        hi[bracket[below]] = mid[below]
        lo[bracket[~below]] = mid[~below]
    return steps


def exhaustive_first_crossing(losses_T: np.ndarray, target: float) -> int:
    """First index of a loss trajectory (every step) at or below target, or NOT_REACHED."""
    hits = np.flatnonzero(np.asarray(losses_T) <= target)
    return int(hits[0]) if hits.size else NOT_REACHED


def steps_to_target(dyn, target: float, max_steps: int) -> np.ndarray:
    """First crossing for every row of a `nqm.moments.Dynamics`; NOT_REACHED where none."""
    return first_crossing(dyn.loss_parts, dyn.rows, target, max_steps, active=dyn.stable_N)

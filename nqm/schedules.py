"""Piecewise-constant step-size schedules: constant segments composed exactly.

Segment k runs `segment_steps[k]` steps at step size `learning_rates[k]`; the second moments at
its end (`Dynamics.state`) start segment k + 1 (docs/design.md, 'The NQM': the state at the end of a
segment starts the next). Momentum and averaging carry their velocity / average across segments.
"""

from __future__ import annotations

import numpy as np

from nqm import validation
from nqm.moments import Dynamics, dynamics
from nqm.problem import Problem


def _check_schedule(learning_rates, segment_steps):
    lrs = np.atleast_2d(np.asarray(learning_rates, dtype=np.float64))
    seg = np.asarray(segment_steps)
    if seg.ndim != 1 or seg.size == 0:
        raise ValueError("segment_steps must be a non-empty list of whole numbers >= 1")
    seg = np.array([validation.check_whole("segment_steps entry", s, 1) for s in seg],
                   dtype=np.int64)
    if lrs.shape[-1] != seg.size:
        raise ValueError(f"learning_rates must have one entry per segment ({seg.size}), "
                         f"got {lrs.shape[-1]}")
    return lrs, seg


class ScheduleDynamics:
    """E[L] along a piecewise-constant schedule, for N rows of schedules of one segment layout.

    Attributes:
      segments: one `Dynamics` per segment, each started from the end state of the previous.
      boundaries: int64 (K + 1,), step at which each segment starts, then the total.
      stable_N: every segment stable, (N,).
    """

    def __init__(self, problem: Problem, batch_size, learning_rates, segment_steps,
                 momentum=0.0, ema_decay=0.0, precond_power: float = 0.0):
        lrs_NK, seg = _check_schedule(learning_rates, segment_steps)
        n = lrs_NK.shape[0]
        self.boundaries = np.concatenate([[0], np.cumsum(seg)])
        self.segments: list[Dynamics] = []
        start = None
        for k in range(seg.size):
            dyn = dynamics(problem, np.broadcast_to(batch_size, (n,)), lrs_NK[:, k],
                           np.broadcast_to(momentum, (n,)), np.broadcast_to(ema_decay, (n,)),
                           precond_power, start=start)
            self.segments.append(dyn)
            if k + 1 < seg.size:
                start = dyn.state(np.full(n, seg[k]))
        self.stable_N = np.all([d.stable_N for d in self.segments], axis=0)

    @property
    def rows(self) -> int:
        return self.stable_N.shape[0]

    @property
    def total_steps(self) -> int:
        return int(self.boundaries[-1])

    def loss(self, t_N, rows=None) -> np.ndarray:
        """E[L] after t steps (0 <= t <= total_steps), shape (n,); inf where a segment is unstable."""
        t_N = np.asarray(t_N, dtype=np.int64)
        rows = np.arange(self.rows) if rows is None else np.asarray(rows)
        if np.any(t_N < 0) or np.any(t_N > self.total_steps):
            raise ValueError(f"steps must be in [0, {self.total_steps}] for this schedule")
        seg = np.clip(np.searchsorted(self.boundaries, t_N, side="right") - 1, 0,
                      len(self.segments) - 1)
        out = np.empty(t_N.shape[0])
        for k in np.unique(seg):
            mine = np.flatnonzero(seg == k)
            out[mine] = self.segments[k].loss(t_N[mine] - self.boundaries[k], rows[mine])
        stable = self.stable_N[rows]
        return np.where(stable, out, np.inf)

    def loss_parts(self, t_N, rows=None):
        """(E[L], 0): a lower learning rate later can undo earlier noise, so there is no
        non-decreasing noise part to stop the crossing search early."""
        loss = self.loss(t_N, rows)
        return loss, np.zeros_like(loss)


def schedule_losses(problem: Problem, steps, batch_size, learning_rates, segment_steps,
                    momentum: float = 0.0, ema_decay: float = 0.0,
                    precond_power: float = 0.0) -> np.ndarray:
    """E[L] at each of `steps` (whole numbers in [0, sum(segment_steps)]) for one schedule.

    Args:
      learning_rates: (K,) step size of each segment.
      segment_steps: (K,) length of each segment in steps.

    Returns:
      float64 (len(steps),).
    """
    sched = ScheduleDynamics(problem, batch_size, learning_rates, segment_steps, momentum,
                             ema_decay, precond_power)
    steps = np.atleast_1d(np.asarray(steps, dtype=np.int64))
    return sched.loss(steps, np.zeros(steps.shape[0], dtype=np.int64))

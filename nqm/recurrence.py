"""The one-step second-moment recurrence, iterated step by step: the reference for the closed forms.

State (theta, v, avg) per direction, covariance S (d, 3, 3):
    S_{t+1} = F_t S_t F_t^T + (c / B) f_t f_t^T
with F_t, f_t from the step size a_t of step t, momentum b and average decay g. Slow (one Python
iteration a step) and general: any schedule, momentum and averaging together. Used by the tests
and as the plain per-step baseline of the benchmarks, never by the engine.
"""

from __future__ import annotations

import numpy as np

from nqm import validation
from nqm.problem import Problem, preconditioned


def step_matrices(h_D, lr, momentum, ema_decay):
    """F (d, 3, 3) and f (d, 3) of one step of heavy-ball momentum followed by the average update."""
    a, b, g = float(lr), float(momentum), float(ema_decay)
    d = h_D.shape[0]
    F = np.zeros((d, 3, 3))
    F[:, 0, 0] = 1.0 - a * h_D
    F[:, 0, 1] = -a * b
    F[:, 1, 0] = h_D
    F[:, 1, 1] = b
    F[:, 2, :] = (1.0 - g) * F[:, 0, :]
    F[:, 2, 2] = g
    f = np.zeros((d, 3))
    f[:, 0] = -a
    f[:, 1] = 1.0
    f[:, 2] = -(1.0 - g) * a
    return F, f


def iterate_losses(problem: Problem, steps: int, batch_size: float, learning_rates,
                   momentum: float = 0.0, ema_decay: float = 0.0,
                   precond_power: float = 0.0) -> np.ndarray:
    """E[L] at t = 0..steps by iterating the recurrence.

    Args:
      learning_rates: a scalar, or an array of shape (steps,) giving the step size of each step.

    Returns:
      Array (steps + 1,). The loss is read at theta, or at the average when ema_decay > 0.
    """
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a whole number >= 0, got {steps!r}")
    validation.check_positive("batch_size", batch_size)
    validation.check_in_range("momentum", momentum, 0.0, 1.0, closed_high=False)
    validation.check_in_range("ema_decay", ema_decay, 0.0, 1.0, closed_high=False)
    h_eff, c_eff = preconditioned(problem.curvature_D, problem.noise_D, precond_power)
    lrs = np.broadcast_to(np.asarray(learning_rates, dtype=np.float64), (steps,))
    problem.check_batch_sizes(batch_size, "batch_size")
    sigma2 = c_eff * float(problem.noise_factor(float(batch_size)))
    x0 = problem.init_second_moment_D
    S = np.zeros((problem.dim, 3, 3))
    S[:, 0, 0] = S[:, 0, 2] = S[:, 2, 0] = S[:, 2, 2] = x0
    read = 2 if ema_decay > 0 else 0
    weight = 0.5 * problem.curvature_D
    out = np.empty(steps + 1)
    out[0] = weight @ S[:, read, read]
    cache = {}
    for t in range(steps):
        a = lrs[t]
        if a not in cache:
            cache[a] = step_matrices(h_eff, a, momentum, ema_decay)
        F, f = cache[a]
        S = np.einsum("dij,djk,dlk->dil", F, S, F) + sigma2[:, None, None] * f[:, :, None] * f[:, None, :]
        out[t + 1] = weight @ S[:, read, read]
    return out

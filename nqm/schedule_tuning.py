"""Step-size schedules tuned per batch size: K equal pieces, each with its own step size.

For a budget of T steps split into K near-equal pieces, the K step sizes that minimise the loss
at step T are found by L-BFGS-B on their logarithms, bounded by the stable step size
(a h_max < 2), with the exact gradient below. Steps to target at batch size B is the smallest T
whose optimised schedule ends at or below the target, bracketed from the tuned constant step
size (a constant schedule is one of the candidates) like `tuning._envelope_search`.

Plain SGD (any preconditioning power) only: with momentum the state is 2x2 per direction and the
gradient is left for later.

Per direction, with q_k = (1 - a_k h)^(2 n_k) and s_k = a_k c / (B h (2 - a_k h)):
    x_{k+1} = s_k + q_k (x_k - s_k),   E[L](T) = sum_i 1/2 h_i x_K,
    dL/da_k = sum_i lambda_{k+1} (dq_k/da_k (x_k - s_k) + ds_k/da_k (1 - q_k)),
    lambda_K = 1/2 h, lambda_k = lambda_{k+1} q_k,
    dq/da = -2 n h q / (1 - a h),   ds/da = 2 c / (B h (2 - a h)^2).

References:
  Zhang et al. 2019, section 3.3: piecewise-constant schedules with K = 10 pieces optimised
  per batch size; they pay only in the noise-dominated (small batch) regime.
"""

from __future__ import annotations

import numpy as np

from nqm.moments import sgd_stationary
from nqm.problem import Problem, preconditioned


def piece_lengths(total_steps: int, pieces: int) -> np.ndarray:
    """K near-equal positive lengths summing to total_steps (longer pieces first); needs T >= K."""
    base, extra = divmod(int(total_steps), int(pieces))
    return np.array([base + (1 if k < extra else 0) for k in range(pieces)], dtype=np.int64)


class _ScheduleLoss:
    """E[L](T) of a K-piece SGD schedule and its gradient in log step sizes, at one batch size."""

    def __init__(self, problem: Problem, batch_size: float, precond_power: float):
        self.h, self.c = preconditioned(problem.curvature_D, problem.noise_D, precond_power)
        self.w = 0.5 * problem.curvature_D
        self.x0 = problem.init_second_moment_D
        problem.check_batch_sizes(batch_size, "batch_size")
        self.inv_b = float(problem.noise_factor(float(batch_size)))

    def __call__(self, log_lrs: np.ndarray, lengths: np.ndarray):
        a = np.exp(log_lrs)[:, None]                       # (K, 1)
        n = lengths[:, None].astype(np.float64)
        ah = a * self.h                                    # (K, d)
        r = 1.0 - ah
        if np.any(ah >= 2.0):
            return np.inf, np.zeros_like(log_lrs)
        with np.errstate(divide="ignore", under="ignore"):
            log_r2 = np.maximum(2.0 * np.log(np.abs(r)), -700.0)
        q = np.exp(np.maximum(n * log_r2, -700.0))
        s = sgd_stationary(a, self.c, self.inv_b, self.h)
        xs = [self.x0]
        for k in range(a.shape[0]):
            xs.append(s[k] + q[k] * (xs[-1] - s[k]))
        loss = float(self.w @ xs[-1])
        lam = self.w
        grad = np.empty(a.shape[0])
        with np.errstate(divide="ignore", invalid="ignore"):
            dq = np.where(r != 0.0, -2.0 * n * self.h * q / r, 0.0)
        ds = 2.0 * self.c * self.inv_b / (self.h * (2.0 - ah) ** 2)
        for k in range(a.shape[0] - 1, -1, -1):
            grad[k] = lam @ (dq[k] * (xs[k] - s[k]) + ds[k] * (1.0 - q[k]))
            lam = lam * q[k]
        return loss, grad * a[:, 0]


def best_schedule(problem: Problem, batch_size: float, total_steps: int, pieces: int,
                  start_log_lrs: np.ndarray, bounds: tuple[float, float],
                  precond_power: float = 0.0):
    """The K step sizes minimising E[L](total_steps); returns (log_lrs (K,), loss)."""
    from scipy import optimize  # here, not at the top: only schedules need it (0.3-0.6 s)

    fn = _ScheduleLoss(problem, batch_size, precond_power)
    lengths = piece_lengths(total_steps, pieces)
    x0 = np.clip(start_log_lrs, bounds[0], bounds[1])
    res = optimize.minimize(fn, x0, args=(lengths,), jac=True, method="L-BFGS-B",
                            bounds=[bounds] * pieces, options={"maxiter": 200, "ftol": 1e-13,
                                                               "gtol": 1e-12})
    loss, _ = fn(res.x, lengths)
    return res.x, loss


def tune_schedule(problem: Problem, batch_size: float, pieces: int, constant_lr: float,
                  constant_steps: int, lr_bounds: tuple[float, float],
                  precond_power: float = 0.0):
    """Smallest T whose optimised K-piece schedule ends at or below the target.

    Args:
      constant_lr, constant_steps: the tuned constant step size and its steps to target, which
        bracket T from above (the constant schedule is feasible there).
      lr_bounds: (lowest, highest) step size; the highest must be below the stable limit.

    Returns:
      (steps, learning_rates (K,)).
    """
    target = problem.target
    bounds = (float(np.log(lr_bounds[0])), float(np.log(lr_bounds[1])))
    hi = int(constant_steps)
    z_hi = np.full(pieces, np.log(constant_lr))
    if hi <= pieces:
        return hi, np.exp(z_hi)
    lo = pieces - 1          # fewer steps than pieces cannot be split
    m_lo, m_hi = problem.initial_loss(), target
    last_side, repeat = 0, False
    while hi - lo > 1:
        if lo == pieces - 1:
            t = int(hi * 0.9)                     # no lower bracket yet: shrink
        elif repeat:
            t = (lo + hi) // 2                    # the same end moved twice: bisect
        else:                                     # regula falsi on log loss
            g_lo = np.log(max(m_lo, target) / target)
            g_hi = np.log(max(m_hi, 1e-300) / target)
            frac = g_lo / (g_lo - g_hi) if g_lo - g_hi > 0 else 0.5
            t = lo + int(round(frac * (hi - lo)))
        t = min(max(t, lo + 1), hi - 1)
        z, m = best_schedule(problem, batch_size, t, pieces, z_hi, bounds, precond_power)
        side = 1 if m <= target else -1
        if side > 0:
            hi, z_hi, m_hi = t, z, m
        else:
            lo, m_lo = t, m
        repeat = side == last_side
        last_side = side
    return hi, np.exp(z_hi)

"""The gradient noise scale (McCandlish et al. 2018) on the NQM, exact along the mean trajectory.

At parameters theta the true gradient is G = H theta and the per-example gradient covariance is
Sigma = C (diagonal c_i), so (docs/design.md, 'Noise scale')

    B_simple = tr(Sigma) / |G|^2          = sum_i c_i / sum_i h_i^2 theta_i^2
    B_noise  = tr(H Sigma) / (G^T H G)    = sum_i h_i c_i / sum_i h_i^3 theta_i^2.

B_simple is the batch size at which the noise in a batch gradient equals its signal:
E|g_B|^2 = |G|^2 + tr(Sigma) / B. B_noise is the batch size at which the best single SGD step
achieves half the loss decrease of a noiseless one (McCandlish et al. section 2.2).

The engine knows only expected second moments E[theta_i^2], so theta_i^2 is replaced by them:
the functions here return the ratio of expectations, tr(C) / E|G|^2 and tr(HC) / E[G^T H G],
not the expectation of the ratio. Both use the true H and C whatever optimizer moves theta: the
noise scale is a property of the loss and of its gradient noise at theta, not of the update.

References:
  McCandlish, Kaplan, Amodei and the OpenAI Dota Team 2018, "An Empirical Model of Large-Batch
  Training", arXiv:1812.06162, section 2.2: eq. 2.8 (B_noise) and eqs. 2.9/2.10 (B_simple).
"""

from __future__ import annotations

import numpy as np

from nqm import validation
from nqm.moments import dynamics
from nqm.problem import Problem


def _check_second_moment(problem: Problem, second_moment) -> np.ndarray:
    try:
        m = np.asarray(second_moment, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("second_moment must be an array of numbers") from None
    if m.ndim not in (1, 2) or m.shape[-1] != problem.dim:
        raise ValueError(f"second_moment must have shape (d,) or (n, d) with d = {problem.dim}, "
                         f"got shape {m.shape}")
    if not np.all(np.isfinite(m)):
        raise ValueError("second_moment must be finite everywhere, got "
                         f"{m.reshape(-1)[np.flatnonzero(~np.isfinite(m.reshape(-1)))[0]]}")
    if np.any(m < 0):
        raise ValueError(f"second_moment must be >= 0 everywhere, got {m[m < 0].reshape(-1)[0]:g}")
    return m


def _ratios(h_D, c_D, m_ND):
    """(B_simple, B_noise) for second moments m of shape (..., d); inf where G = 0."""
    trace_cov = np.sum(c_D)
    trace_h_cov = np.dot(h_D, c_D)
    grad_sq_norm = m_ND @ (h_D * h_D)       # E |G|^2 = sum h^2 E theta^2
    grad_h_grad = m_ND @ (h_D * h_D * h_D)  # E G^T H G = sum h^3 E theta^2
    with np.errstate(divide="ignore"):
        return trace_cov / grad_sq_norm, trace_h_cov / grad_h_grad


def noise_scale_at(problem: Problem, second_moment_D):
    """B_simple and B_noise at parameters with second moments E[theta_i^2].

    Args:
      problem: the NQM arrays; h and c of shape (d,).
      second_moment_D: E[theta_i^2] >= 0, shape (d,) for one point or (n, d) for n points (for a
        deterministic theta, pass theta**2).

    Returns:
      (b_simple, b_noise): floats for a (d,) input, arrays (n,) for an (n, d) input; inf where
      the gradient vanishes (theta = 0).
    """
    m = _check_second_moment(problem, second_moment_D)
    b_simple, b_noise = _ratios(problem.curvature_D, problem.noise_D, m)
    if m.ndim == 1:
        return float(b_simple), float(b_noise)
    return b_simple, b_noise


def initial_noise_scale(problem: Problem):
    """(b_simple, b_noise) as floats at the start, E[theta_i^2] = init_second_moment_D.

    With the defaults (h_i = c_i = 1/i, E theta_i^2 = 1) these are sum(1/i) / sum(1/i^2) and
    sum(1/i^2) / sum(1/i^3).
    """
    return noise_scale_at(problem, problem.init_second_moment_D)


def noise_scale_trajectory(problem: Problem, steps, batch_size, learning_rate, momentum=0.0,
                           ema_decay=0.0, precond_power: float = 0.0):
    """B_simple and B_noise along the expected trajectory of an optimizer, in closed form.

    The gradient is evaluated at the iterate theta (for iterate averaging too: the average is
    only where the loss is read), so the second moment used is E[theta_i^2], the first entry S11
    of `Dynamics.state` for every optimizer family (SGD: theta; momentum: (theta, v); averaging:
    (theta, avg)).

    Args:
      problem: the NQM arrays, shape (d,).
      steps: step counts t >= 0 (whole numbers), shape (T,), or one scalar.
      batch_size, learning_rate, momentum, ema_decay: scalars or arrays of one shape (N,), as in
        `nqm.moments.dynamics`.
      precond_power: p in [0, 1]; it changes the trajectory of theta, not the definition of the
        noise scale (true H and C).

    Returns:
      (b_simple_NT, b_noise_NT), each float64 (N, T); nan for rows whose dynamics are unstable.
    """
    steps_T = validation.check_whole_array("steps", steps, 0)
    dyn = dynamics(problem, batch_size, learning_rate, momentum, ema_decay, precond_power)
    n = dyn.rows
    b_simple_NT = np.empty((n, steps_T.shape[0]))
    b_noise_NT = np.empty((n, steps_T.shape[0]))
    with np.errstate(over="ignore", invalid="ignore"):
        for j, t in enumerate(steps_T):
            s11_ND = dyn.state(np.full(n, t))[0]  # E[theta_i^2] after t steps
            b_simple_NT[:, j], b_noise_NT[:, j] = _ratios(problem.curvature_D, problem.noise_D,
                                                          s11_ND)
    unstable = ~dyn.stable_N
    b_simple_NT[unstable] = np.nan
    b_noise_NT[unstable] = np.nan
    return b_simple_NT, b_noise_NT

"""The plain-SGD step size with the fewest steps to target, by Newton on the closed form.

For SGD (any preconditioning power) started at E theta_i^2 = x0_i, direction i after T steps
holds s_i + q_i (x0_i - s_i), with q_i = |1 - a h_i|^(2T) and s_i = a c_i / (B h_i (2 - a h_i)).
Read with T continuous, E[L](a, T) is smooth, and the tuned pair (a*, T*) solves

    E[L](a, T) = target,   dE[L]/da = 0

(the first crossing T(a) is smallest where dT/da = -L_a / L_T vanishes). Newton on these two
equations in u = log a and v = log T, with the derivatives below computed in the same pass over
the directions, converges in a handful of iterations from the seeding grid's winner, where the
general search (`tuning._envelope_search`) needs hundreds of loss evaluations per batch size.
The integer answer is then ceil(T*): no step size reaches the target sooner, and a* does by then.

Per direction, with E = 2 T log|r|, r = 1 - a h, D = x0 - s (derivatives in u and v):
    E_u = -2 T a h / r,  E_uu = -2 T a h / r^2,  E_v = E,
    s_u = 2 s / (2 - a h),  s_uu = 2 s (2 + a h) / (2 - a h)^2,
    L    = sum w (s + q D),                 L_v  = sum w q E D,
    L_u  = sum w (s_u (1 - q) + q E_u D),   L_uv = sum w (q E_u (1 + E) D - q E s_u),
    L_uu = sum w (s_uu (1 - q) - 2 q E_u s_u + q (E_uu + E_u^2) D).

A row is answered here only where the answer is provably the local optimum's: Newton converged
inside the search bounds, E[L] curves upward in u there, and every direction starts at or above
its stationary moment (so E[L] decreases in t and has one crossing). The caller searches the
other rows the general way.
"""

from __future__ import annotations

import numpy as np

from nqm.moments import sgd_stationary
from nqm.problem import noise_factor

MAX_ITER = 40
MAX_MOVE = 0.5  # largest Newton move in log a or log T per iteration
BLOCK_ELEMENTS = 16384  # rows x directions evaluated at once (temporaries of 128 KiB)


def loss_derivatives(h_D, c_D, w_D, x0_D, inv_batch_n, u_n, v_n):
    """E[L] of SGD at a = e^u, T = e^v and its derivatives, per row.

    Args:
      h_D, c_D: effective curvature and noise (after preconditioning), (d,).
      w_D: loss weights 1/2 h_i (true curvature), (d,).
      x0_D: start second moments, (d,).
      inv_batch_n, u_n, v_n: 1 / B, log step size, log steps, each (n,).

    Returns:
      (L, L_u, L_v, L_uu, L_uv), each (n,).
    """
    # A few rows at a time: the temporaries then stay in cache (~4x faster than (n, d) at once).
    block = max(1, BLOCK_ELEMENTS // h_D.shape[0])
    if u_n.shape[0] == 0:
        return tuple(np.zeros(0) for _ in range(5))
    parts = [_loss_derivatives_block(h_D, c_D, w_D, x0_D, inv_batch_n[i:i + block],
                                     u_n[i:i + block], v_n[i:i + block])
             for i in range(0, u_n.shape[0], block)]
    return tuple(np.concatenate(p) for p in zip(*parts))


def _loss_derivatives_block(h_D, c_D, w_D, x0_D, inv_batch_n, u_n, v_n):
    a = np.exp(u_n)[:, None]
    t = np.exp(v_n)[:, None]
    ah = a * h_D
    r = 1.0 - ah
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        e = 2.0 * t * np.log(np.abs(r))                       # log q
        # q below e^-300 set to 0: its terms are far below rounding, and products of tiny q
        # with small weights would be denormal numbers, ~100x slower to compute with.
        np.maximum(e, -300.0, out=e)
        q = np.exp(e)
        q[e <= -300.0] = 0.0
        e_u = np.where(r != 0.0, -2.0 * t * ah / r, 0.0)
        e_uu = np.where(r != 0.0, e_u / r, 0.0)
    two_minus = 2.0 - ah
    s = a * c_D * inv_batch_n[:, None] / (h_D * two_minus)
    s_u = 2.0 * s / two_minus
    s_uu = s_u * (2.0 + ah) / two_minus
    wd = w_D * (x0_D - s)              # w D
    wq_d = q * wd                      # w q D
    w_one_q = w_D * (1.0 - q)
    wq_su = q * w_D * s_u
    loss = (w_D * s).sum(axis=1) + wq_d.sum(axis=1)
    l_u = (w_one_q * s_u).sum(axis=1) + (wq_d * e_u).sum(axis=1)
    l_v = (wq_d * e).sum(axis=1)
    l_uu = ((w_one_q * s_uu).sum(axis=1) - 2.0 * (wq_su * e_u).sum(axis=1)
            + (wq_d * (e_uu + e_u * e_u)).sum(axis=1))
    l_uv = (wq_d * e_u * (1.0 + e)).sum(axis=1) - (wq_su * e).sum(axis=1)
    return loss, l_u, l_v, l_uu, l_uv


def newton_optimum(h_D, c_D, w_D, x0_D, batch_n, lr_n, steps_n, target, lr_bounds,
                   train_size=None):
    """The step size a* and continuous steps T* with E[L](a*, T*) = target and dE[L]/da = 0.

    Args:
      h_D, c_D, w_D, x0_D: as in `loss_derivatives`.
      batch_n: batch sizes, (n,).
      lr_n, steps_n: a start per row (a feasible grid point and its steps), (n,).
      target: the loss to reach.
      lr_bounds: (lowest, highest) step size; the highest below the stable limit 2 / h_max.
      train_size: N for the finite-population correction of the noise (`problem.noise_factor`),
        or None.

    Returns:
      (lr (n,), steps (n,) float, solved (n,) bool); rows not solved keep their start.
    """
    inv_b = noise_factor(np.asarray(batch_n, dtype=np.float64), train_size)
    u_lo, u_hi = np.log(lr_bounds[0]), np.log(lr_bounds[1])
    u = np.clip(np.log(np.asarray(lr_n, dtype=np.float64)), u_lo, u_hi)
    v = np.log(np.maximum(np.asarray(steps_n, dtype=np.float64), 1.0))
    log_target = np.log(target)

    def residuals(rows, uu, vv):
        """(F (n, 2), Jacobian (n, 2, 2)) of F = (log E[L] - log target, d log E[L] / du)."""
        loss, l_u, l_v, l_uu, l_uv = loss_derivatives(h_D, c_D, w_D, x0_D, inv_b[rows], uu, vv)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            f1 = np.log(loss) - log_target
            f2 = l_u / loss
            g = l_v / loss
            jac = np.stack([np.stack([f2, g], -1),
                            np.stack([l_uu / loss - f2 * f2, l_uv / loss - f2 * g], -1)], -2)
        return np.stack([f1, f2], -1), jac

    live = np.arange(u.size)
    done = np.zeros(u.size, dtype=bool)
    f, jac = residuals(live, u, v)
    for _ in range(MAX_ITER):
        if live.size == 0:
            break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            det = jac[:, 0, 0] * jac[:, 1, 1] - jac[:, 0, 1] * jac[:, 1, 0]
            du = (jac[:, 0, 1] * f[:, 1] - jac[:, 1, 1] * f[:, 0]) / det
            dv = (jac[:, 1, 0] * f[:, 0] - jac[:, 0, 0] * f[:, 1]) / det
            scale = np.minimum(1.0, MAX_MOVE / np.maximum(np.abs(du), np.abs(dv)))
        # E[L] must fall with T (else give up the row); at a solution it must also curve
        # upward in u (a minimum over the step size, not a maximum).
        ok = np.isfinite(du) & np.isfinite(dv) & (jac[:, 0, 1] < 0)
        converged = ok & (np.abs(du) < 1e-10) & (np.abs(dv) < 1e-10) & (jac[:, 1, 0] > 0)
        done[live[converged]] = True
        u[live[converged]] += du[converged]
        v[live[converged]] += dv[converged]
        keep = ok & ~converged
        live, f, jac = live[keep], f[keep], jac[keep]
        du, dv = du[keep] * scale[keep], dv[keep] * scale[keep]
        # Where log E[L] curves downward in u, Newton may head uphill, for a maximum: then move
        # downhill in u instead, v along the tangent of the level set, accepting only fewer steps.
        concave = ~(jac[:, 1, 0] > 0) & (du * f[:, 1] > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            du = np.where(concave, -np.sign(f[:, 1]) * MAX_MOVE / 2, du)
            dv = np.where(concave, -(f[:, 0] + jac[:, 0, 0] * du) / jac[:, 0, 1], dv)
        # Backtracking on |F|^2: near the stability edge E[L] is far from quadratic in log a.
        merit = np.sum(f * f, axis=1)
        moved = np.zeros(live.size, dtype=bool)
        for _ in range(30):
            rows = np.flatnonzero(~moved)
            if rows.size == 0:
                break
            uu = np.clip(u[live[rows]] + du[rows], u_lo, u_hi)
            vv = np.maximum(v[live[rows]] + dv[rows], 0.0)
            f_new, jac_new = residuals(live[rows], uu, vv)
            better = np.where(concave[rows],
                              (vv < v[live[rows]]) & (f_new[:, 0] <= np.maximum(f[rows, 0], 1e-9)),
                              np.sum(f_new * f_new, axis=1) < merit[rows])
            take = rows[better]
            u[live[take]], v[live[take]] = uu[better], vv[better]
            f[take], jac[take] = f_new[better], jac_new[better]
            moved[take] = True
            du[rows[~better]] *= 0.5
            dv[rows[~better]] *= 0.5
        live, f, jac = live[moved], f[moved], jac[moved]
    inside = (u > u_lo) & (u < u_hi)
    a = np.exp(u)
    # One crossing: every direction starts at or above its stationary moment at a*.
    s_star = sgd_stationary(a[:, None], c_D, inv_b[:, None], h_D)
    monotone = np.all(x0_D >= s_star, axis=1)
    solved = done & inside & monotone
    lr = np.where(solved, a, lr_n)
    return lr, np.where(solved, np.exp(v), steps_n), solved

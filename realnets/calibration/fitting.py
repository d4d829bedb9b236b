"""Choices made when an NQM is fitted at a checkpoint of a trained network: where the power-law
tail stops, the fitted quadratic's own loss there, and how closely the noise follows the curvature."""

from __future__ import annotations

import math

import numpy as np

from nqm.problem import NQMConfig
from realnets.calibration import gradient_stats, slq


def alignment(h, c) -> dict:
    """How well c_i follows h_i on the top-k: the ratios c_i / h_i, their spread, and the slope
    of log c on log h (1 when c is proportional to h, the NQM's default)."""
    h, c = np.asarray(h, float), np.asarray(c, float)
    ratio = c / h
    out = {"ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
           "ratio_median": float(np.median(ratio))}
    if h.size > 2 and np.ptp(np.log(h)) > 0:
        slope, _ = np.polyfit(np.log(h), np.log(c), 1)
        out["log_slope"] = float(slope)
        out["log_correlation"] = float(np.corrcoef(np.log(h), np.log(c))[0, 1])
    return out


def tail_floor(density: slq.SpectralDensity, top_eigenvalues, floor_ratio: float) -> float:
    """Lowest curvature of the NQM's tail: floor_ratio * h_1, raised to 0.99 times the smallest
    SLQ node when the whole spectrum is positive (below the smallest eigenvalue the counting
    function is flat, and such grid points would bend the power-law fit), and at most h_k / 2."""
    h = np.asarray(top_eigenvalues, float)
    floor = floor_ratio * float(h.max())
    used = density.weights_LxM > 0
    lowest = float(density.nodes_LxM[used].min()) if used.any() else -math.inf
    if lowest > 0:
        floor = max(floor, 0.99 * lowest)
    return min(floor, 0.5 * float(h.min()))


def quadratic_target(config: NQMConfig, top_k: int, goal: gradient_stats.GradientStatistics) -> float:
    """The fitted NQM's own loss at the goal checkpoint: 0.5 sum_i g_i^2 / h_i (on a quadratic
    g_i = h_i theta_i, so this is 0.5 sum_i h_i theta_i^2), from the goal's gradient.

    Top-k: g_i = v_i . G_goal, debiased by c_i / n (the sample mean's own noise), clipped at 0.
    Tail: the rest of |G_goal|^2 spread like `nqm_fit.fit_nqm`'s start, E[theta_i^2] = m with
    m = (|G|^2 - sum_top g_i^2) / sum_tail h_i^2, giving 0.5 m sum_tail h_i. The directions must
    be those of `config` in the same (descending) order.
    """
    problem = config.problem()
    h = problem.curvature_D
    g2 = np.maximum(goal.grad_components_K ** 2
                    - goal.noise_projections_K / goal.num_examples, 0.0)
    loss = 0.5 * float(np.sum(g2 / h[:top_k]))
    tail = h[top_k:]
    if tail.size:
        rest = max(goal.grad_sq_norm - float(g2.sum()), 0.0)
        loss += 0.5 * rest / float(tail @ tail) * float(tail.sum())
    return loss

"""One analysis for every steps-vs-batch-size curve: critical batch size, regimes, efficiency.

References:
  McCandlish et al. 2018, "An empirical model of large-batch training", eq. 2.11:
    S(B) = S_min (1 + B_crit / B).
  Zhang et al. 2024, "How does critical batch size scale in pre-training?": the critical batch
    size as the largest B whose steps stay within 20% of perfect scaling (`cbs20`).
  Shallue et al. 2018, "Measuring the effects of data parallelism on neural network training":
    perfect scaling, diminishing returns and maximal data parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize

from nqm.curve import ScalingCurve


@dataclass(frozen=True)
class Thresholds:
    """perfect: S(B) <= perfect * S(B0) B0 / B counts as perfect scaling (1.2: the 20% rule);
    maximal: S(B) <= maximal * min S counts as maximal data parallelism (1.1: within 10%)."""

    perfect: float = 1.2
    maximal: float = 1.1

    def __post_init__(self):
        if not (self.perfect >= 1.0 and np.isfinite(self.perfect)):
            raise ValueError(f"perfect-scaling threshold must be >= 1, got {self.perfect}")
        if not (self.maximal >= 1.0 and np.isfinite(self.maximal)):
            raise ValueError(f"maximal-parallelism threshold must be >= 1, got {self.maximal}")


@dataclass(frozen=True)
class Fit:
    """S(B) = s_min (1 + b_crit / B) fitted on log S; r2 is the R^2 on log S."""

    s_min: float | None
    b_crit: float | None
    r2: float | None
    points_used: int

    def predict(self, batch_sizes) -> np.ndarray:
        b = np.asarray(batch_sizes, dtype=float)
        if self.s_min is None:
            return np.full(b.shape, np.nan)
        return self.s_min * (1.0 + self.b_crit / b)


@dataclass(frozen=True)
class Analysis:
    """Everything DESIGN.md section 3 reports for one curve.

    Attributes:
      fit: the McCandlish fit.
      cbs20: largest B of the perfect-scaling run that starts at the smallest B, or None.
      maximal_from: smallest B whose steps are within `maximal` of the fewest steps, or None.
      efficiency: S(B0) B0 / (S(B) B) per batch size (NaN where unreached), shape (n,).
      regimes: 'perfect', 'diminishing', 'maximal' or 'not reached' per batch size.
    """

    fit: Fit
    cbs20: int | None
    maximal_from: int | None
    efficiency: np.ndarray
    regimes: tuple[str, ...]
    thresholds: Thresholds

    def to_dict(self) -> dict:
        return {"fit": {"s_min": self.fit.s_min, "b_crit": self.fit.b_crit, "r2": self.fit.r2},
                "regimes": {"cbs20": self.cbs20, "maximal_from": self.maximal_from,
                            "perfect_threshold": self.thresholds.perfect,
                            "maximal_threshold": self.thresholds.maximal}}


def fit_mccandlish(batch_sizes, steps) -> Fit:
    """Least squares of log S against log(S_min (1 + B_crit / B)) over the reached points.

    Args:
      batch_sizes: (n,) positive.
      steps: (n,) steps, NaN where not reached.

    Returns:
      The fit; all None when fewer than two points were reached (r2 None below three).
    """
    b = np.asarray(batch_sizes, dtype=float)
    s = np.asarray(steps, dtype=float)
    ok = np.isfinite(s) & (s > 0)
    b, s = b[ok], s[ok]
    if b.size < 2:
        return Fit(None, None, None, int(b.size))
    log_s = np.log(s)

    def residual(x):
        return log_s - (x[0] + np.log1p(np.exp(x[1]) / b))

    # Start: S_min from the plateau, B_crit where the curve is twice the plateau.
    s_min0 = s.min()
    above = b[s >= 2.0 * s_min0]
    b_crit0 = above.max() if above.size else b.min()
    lo = np.array([log_s.min() - 10.0, np.log(b.min()) - 20.0])
    hi = np.array([log_s.max() + 1.0, np.log(b.max()) + 20.0])
    x0 = np.clip([np.log(s_min0), np.log(b_crit0)], lo + 1e-9, hi - 1e-9)
    res = optimize.least_squares(residual, x0, bounds=(lo, hi), x_scale=1.0, xtol=1e-14,
                                 ftol=1e-14, gtol=1e-14)
    ss_res = float(np.sum(res.fun ** 2))
    ss_tot = float(np.sum((log_s - log_s.mean()) ** 2))
    r2 = None if b.size < 3 or ss_tot == 0 else 1.0 - ss_res / ss_tot
    return Fit(float(np.exp(res.x[0])), float(np.exp(res.x[1])), r2, int(b.size))


def analyse(batch_sizes, steps, thresholds: Thresholds = Thresholds()) -> Analysis:
    """Critical batch size, regimes and efficiency of one curve (DESIGN.md section 3).

    Args:
      batch_sizes: (n,) increasing.
      steps: (n,) steps to target, NaN where not reached.
    """
    b = np.asarray(batch_sizes, dtype=float)
    s = np.asarray(steps, dtype=float)
    if b.shape != s.shape or b.ndim != 1:
        raise ValueError("batch_sizes and steps must be 1-D arrays of one length")
    if np.any(np.diff(b) <= 0):
        raise ValueError("batch_sizes must be strictly increasing")
    fit = fit_mccandlish(b, s)
    reached = np.isfinite(s)
    n = b.size
    efficiency = np.full(n, np.nan)
    cbs20 = None
    maximal_from = None
    if n and reached[0]:
        work0 = s[0] * b[0]
        efficiency = work0 / (s * b)
        for i in range(n):
            if not reached[i] or s[i] > thresholds.perfect * work0 / b[i]:
                break
            cbs20 = int(b[i])
    if reached.any():
        best = np.nanmin(s)
        within = np.flatnonzero(reached & (s <= thresholds.maximal * best))
        maximal_from = int(b[within[0]])
    regimes = []
    for i in range(n):
        if not reached[i]:
            regimes.append("not reached")
        elif cbs20 is not None and b[i] <= cbs20:
            regimes.append("perfect")
        elif maximal_from is not None and b[i] >= maximal_from:
            regimes.append("maximal")
        else:
            regimes.append("diminishing")
    return Analysis(fit, cbs20, maximal_from, efficiency, tuple(regimes), thresholds)


def analyse_curve(curve: ScalingCurve, thresholds: Thresholds = Thresholds()) -> Analysis:
    """`analyse` on a ScalingCurve."""
    return analyse(curve.batch_sizes, curve.steps, thresholds)

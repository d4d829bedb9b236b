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
    """Everything docs/design.md, 'Critical batch size', reports for one curve.

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

    The model is linear in log S_min, so for each u = log B_crit the best log S_min is the mean
    residual and the fit is a 1-D problem in u (variable projection): a dense grid over
    u in [log B_min - 20, log B_max + 20], then Newton on the projected sum of squares from the
    best grid point, kept inside that point's neighbours by bisection. No scipy: this runs in every
    `python -m nqm curve`, whose import budget scipy.optimize alone would exceed.

    Args:
      batch_sizes: (n,) positive.
      steps: (n,) steps, NaN where not reached.

    Returns:
      The fit; all None when fewer than two points were reached (r2 None below three).

    References:
      Golub and Pereyra 1973, "The differentiation of pseudo-inverses and nonlinear least
      squares problems whose variables separate" (variable projection).
    """
    b = np.asarray(batch_sizes, dtype=float)
    s = np.asarray(steps, dtype=float)
    ok = np.isfinite(s) & (s > 0)
    b, s = b[ok], s[ok]
    if b.size < 2:
        return Fit(None, None, None, int(b.size))
    log_s = np.log(s)
    log_b = np.log(b)
    x0_lo = log_s.min() - 10.0          # bounds on log S_min (never active on a sane curve)
    x0_hi = log_s.max() + 1.0

    def projected(u):
        """(log S_min, residuals (..., n)) at u = log B_crit, u of any shape."""
        g = np.logaddexp(0.0, np.asarray(u)[..., None] - log_b)    # log(1 + B_crit / B)
        x0 = np.clip(np.mean(log_s - g, axis=-1), x0_lo, x0_hi)
        return x0, log_s - x0[..., None] - g

    def slope(u):
        """(d/du, d2/du2) of the projected sum of squares. With p = sigmoid(u - log B) =
        d/du log(1 + B_crit / B), the residuals move by -(p - mean p), or by -p where
        log S_min sits at a bound."""
        x0, r = projected(u)
        p = 0.5 * (1.0 + np.tanh(0.5 * (u - log_b)))
        dp = p if x0 in (x0_lo, x0_hi) else p - p.mean()
        return -2.0 * np.sum(r * dp), 2.0 * np.sum(dp * dp) - 2.0 * np.sum(r * p * (1.0 - p))

    grid = np.linspace(log_b.min() - 20.0, log_b.max() + 20.0, 801)
    k = int(np.argmin(np.sum(projected(grid)[1] ** 2, axis=-1)))
    u = grid[k]
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
    # Newton on the slope, safeguarded by bisection inside [lo, hi] (the minimum is within
    # one grid cell of the grid's best point).
    for _ in range(100):
        grad, curv = slope(u)
        if grad == 0.0:
            break
        if grad > 0:
            hi = u
        else:
            lo = u
        new = u - grad / curv if curv > 0 else 0.5 * (lo + hi)
        if not lo < new < hi:
            new = 0.5 * (lo + hi)
        if new == u or hi - lo <= 4e-16 * max(1.0, abs(u)):
            break
        u = new
    x0, r = projected(u)
    ss_res = float(np.sum(r ** 2))
    ss_tot = float(np.sum((log_s - log_s.mean()) ** 2))
    r2 = None if b.size < 3 or ss_tot == 0 else 1.0 - ss_res / ss_tot
    return Fit(float(np.exp(x0)), float(np.exp(u)), r2, int(b.size))


def analyse(batch_sizes, steps, thresholds: Thresholds = Thresholds()) -> Analysis:
    """Critical batch size, regimes and efficiency of one curve (docs/design.md, 'Critical batch
    size').

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


@dataclass(frozen=True)
class Bound:
    """What a curve's batch sizes say of B_crit when the bend lies outside them: side 'lower'
    (B_crit >= value) or 'upper' (B_crit <= value), per example like B_crit."""

    side: str
    value: float

    def to_dict(self) -> dict:
        return {"side": self.side, "value": self.value}

    def describe(self) -> str:
        """The sentence every report prints for this bound."""
        sign = ">=" if self.side == "lower" else "<="
        return (f"no bend between the batch sizes: B_crit {sign} {self.value:.4g} is all they "
                "say (the fitted B_crit is an extrapolation)")


def b_crit_bound(batch_sizes, steps, thresholds: Thresholds = Thresholds()) -> Bound | None:
    """The bound on B_crit when the curve has no bend between its batch sizes, else None.

    A curve that still scales perfectly at its largest reached batch size B_max (cbs20 = B_max)
    only says, under S(B) = S_min (1 + B_crit / B), that the efficiency
    (B_0 + B_crit) / (B_max + B_crit) stays >= 1 / p (p = thresholds.perfect, the 20% rule):
    B_crit >= (B_max - p B_0) / (p - 1), 5 B_max - 6 B_0 for p = 1.2. Any larger B_crit fits the
    points as well, so the fitted value is an extrapolation. Likewise a curve within
    m = thresholds.maximal of its fewest steps from its smallest batch size B_0 on gives
    1 + B_crit / B_0 <= m (1 + B_crit / B_max): B_crit <= (m - 1) / (1 / B_0 - m / B_max).

    Args:
      batch_sizes: (n,) increasing; steps: (n,), NaN or None where not reached.
    """
    b = np.asarray(batch_sizes, dtype=float)
    s = np.array([np.nan if x is None else x for x in steps], dtype=float)
    analysis = analyse(b, s, thresholds)
    reached = np.flatnonzero(np.isfinite(s) & (s > 0))
    if reached.size < 2 or reached[0] != 0:
        return None
    b0, b_max = b[0], b[reached[-1]]
    p, m = thresholds.perfect, thresholds.maximal
    if analysis.cbs20 is not None and analysis.cbs20 == b_max and p > 1.0:
        return Bound("lower", float((b_max - p * b0) / (p - 1.0)))
    if (analysis.maximal_from is not None and analysis.maximal_from == b0 and m > 1.0
            and 1.0 / b0 > m / b_max):
        return Bound("upper", float((m - 1.0) / (1.0 / b0 - m / b_max)))
    return None


def analyse_curve(curve: ScalingCurve, thresholds: Thresholds = Thresholds()) -> Analysis:
    """`analyse` on a ScalingCurve."""
    return analyse(curve.batch_sizes, curve.steps, thresholds)

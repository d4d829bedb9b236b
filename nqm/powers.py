"""Numerically stable powers of the 2x2 first-moment maps, at any integer step count.

Every optimizer here moves each eigen-direction by a 2x2 linear map F (momentum: state
(theta, v); iterate averaging: state (theta, avg)). `F^t` is written with scalar sequences whose
closed forms stay accurate through the degenerate cases (critical damping for momentum, equal
rates for averaging) where an eigen-decomposition of F would divide by a vanishing gap.

All functions broadcast over their array arguments; `t` is an integer array (steps >= 0).
"""

from __future__ import annotations

import numpy as np


def _signed_power(base, exponent):
    """base ** exponent for real base (possibly negative) and integer exponent >= 0."""
    mag = np.abs(base) ** exponent
    odd = (exponent % 2) == 1
    return np.where((base < 0) & odd, -mag, mag)


class LucasSequence:
    """p_t = (l1^t - l2^t) / (l1 - l2) for the roots of z^2 - tau z + b = 0, any t >= 0.

    p_0 = 0, p_1 = 1, p_{t+1} = tau p_t - b p_{t-1}. By Cayley-Hamilton, a 2x2 matrix F with
    trace tau and determinant b has F^t = p_t (F - tau I) + p_{t+1} I.

    The closed form uses |tau| and restores the sign as p_t(tau) = sign(tau)^(t-1) p_t(|tau|):
      complex roots (|tau| < 2 sqrt(b)): p_t = b^((t-1)/2) sin(t w) / sin(w),
      real roots (|tau| >= 2 sqrt(b)):   p_t = l1^(t-1) (1 - q^t) / (1 - q), q = l2 / l1 = exp(-2 u),
    with w and u computed from the gap `gap = tau_abs - 2 sqrt(b)`, given by the caller in a
    cancellation-free form, so the value stays accurate at and near critical damping (gap = 0).

    Args:
      tau_abs: |tau| >= 0, any shape.
      b: determinant in [0, 1), broadcastable with tau_abs.
      gap: |tau| - 2 sqrt(b), computed by the caller without cancellation.
      negative: tau < 0 (bool), broadcastable.
    """

    def __init__(self, tau_abs, b, gap, negative):
        tau_abs, b, gap, negative = np.broadcast_arrays(
            np.asarray(tau_abs, float), np.asarray(b, float), np.asarray(gap, float),
            np.asarray(negative, bool))
        self.negative = negative
        self.b_zero = b == 0.0
        self.tau_abs = tau_abs
        sqrt_b = np.sqrt(b)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # Half-angle forms: cos w = 1 - e and cosh u = 1 + e, with e = |gap| / (2 sqrt b).
            e = np.abs(gap) / np.where(self.b_zero, 1.0, 2.0 * sqrt_b)
            self.complex_ = (gap < 0) & ~self.b_zero
            half = np.sqrt(e / 2.0)
            self.w = np.where(self.complex_, 2.0 * np.arcsin(np.minimum(half, 1.0)), 0.0)
            self.u = np.where(self.complex_ | self.b_zero, 0.0, 2.0 * np.arcsinh(half))
            self.sin_w = np.sin(self.w)
            self.log_sqrt_b = np.where(self.b_zero, 0.0, np.log(np.where(self.b_zero, 1.0, sqrt_b)))
            # log of the larger root l1 = sqrt(b) e^u (real case), or of |tau| when b = 0.
            self.log_l1 = np.where(self.b_zero, np.log(tau_abs), self.log_sqrt_b + self.u)
            self.expm1_q = np.expm1(-2.0 * self.u)

    _FIELDS = ("negative", "b_zero", "tau_abs", "complex_", "w", "u", "sin_w", "log_sqrt_b",
               "log_l1", "expm1_q")

    def take(self, rows):
        """The sequence restricted to rows `rows` of the leading axis."""
        out = object.__new__(LucasSequence)
        for name in self._FIELDS:
            setattr(out, name, getattr(self, name)[rows])
        return out

    def __call__(self, t):
        """p_t, broadcast with t (integer array, t >= 0)."""
        t = np.asarray(t)
        tf = t.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            tm1 = np.maximum(tf - 1.0, 0.0)
            # complex roots
            ratio_c = np.where(self.w > 0, np.sin(tf * self.w) / np.where(self.w > 0, self.sin_w, 1.0), tf)
            mag_c = np.exp(tm1 * self.log_sqrt_b) * ratio_c
            # real roots (u may be 0: critical damping, ratio -> t)
            ratio_r = np.where(self.u > 0, np.expm1(-2.0 * self.u * tf) / np.where(self.u > 0, self.expm1_q, 1.0), tf)
            mag_r = np.exp(tm1 * self.log_l1) * ratio_r
            # b = 0: p_t = tau^(t-1) for t >= 1, p_0 = 0
            mag_0 = np.where(tf >= 1, self.tau_abs ** tm1, 0.0)
            mag = np.where(self.b_zero, mag_0, np.where(self.complex_, mag_c, mag_r))
        flip = self.negative & ((np.maximum(t - 1, 0) % 2) == 1)
        return np.where(flip, -mag, mag)


def divided_power(r, g, t):
    """(r^t - g^t) / (r - g) for real r, g with |r|, |g| <= 1 and integer t >= 0; t r^(t-1) at r = g.

    For r and g of the same sign the form m^(t-1) (1 - q^t) / (1 - q), q = small / large, avoids
    the cancellation of r^t - g^t when r is close to g.
    """
    r, g, t = np.broadcast_arrays(np.asarray(r, float), np.asarray(g, float), np.asarray(t))
    tf = t.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        same_sign = (r >= 0) == (g >= 0)
        big = np.where(np.abs(r) >= np.abs(g), r, g)
        small = np.where(np.abs(r) >= np.abs(g), g, r)
        q = np.where(big != 0, small / np.where(big != 0, big, 1.0), 0.0)
        log_q = np.log(np.where(q > 0, q, 1.0))
        ratio = np.where(q == 1.0, tf,
                         np.where(q > 0, np.expm1(tf * log_q) / np.where(q > 0, np.expm1(log_q), 1.0),
                                  np.where(tf >= 1, 1.0, 0.0)))  # q == 0: (1 - 0^t)
        tm1 = np.maximum(t - 1, 0)
        same = _signed_power(big, tm1) * ratio
        same = np.where(big == 0, np.where(t == 1, 1.0, 0.0), same)
        opposite = (_signed_power(r, t) - _signed_power(g, t)) / np.where(r != g, r - g, 1.0)
    out = np.where(same_sign, same, opposite)
    return np.where(t == 0, 0.0, out)


def signed_power(base, t):
    """base ** t for real base of any sign and integer t >= 0 (0 ** 0 = 1)."""
    with np.errstate(under="ignore", over="ignore"):
        return _signed_power(np.asarray(base, float), np.asarray(t))

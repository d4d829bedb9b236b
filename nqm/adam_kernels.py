"""Compiled closed form of one mean-field Adam segment (`nqm.adam.closed_form`).

Over a segment the mean-field Adam step size eta is frozen, so the second moments of (theta, u)
move as heavy-ball momentum: S_n = S* + F^n (S_0 - S*) F^nT with F^n = p_n (F - tau I) + p_{n+1} I
and p the Lucas sequence of (tau, b) (`nqm.powers.LucasSequence`). Written in numpy, every call
builds some forty (k, d) temporaries and evaluates all three branches of the sequence (complex
roots, real roots, b = 0) for every element; the segment march and its bisection call it tens of
thousands of times in one tuned curve, and it was about three quarters of the tuner's time. Here
each element takes only its own branch, with no temporaries, by the same formulas in the same
order (the tests hold it against the numpy reference, `nqm.adam.closed_form_reference`, to
rounding; `benchmarks/adam_segments.py` measures the gain).

Inputs: s11, s12, s22, eta, h, sigma2 as (k, d) arrays (h and sigma2 may be (d,) or (k, d));
b (k,) the momentum b1 of each row; n (k,) whole step counts >= 0. Unstable rows give inf or nan,
as the numpy form does (the caller keeps only stable ones).
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, error_model="numpy")
def _lucas(t, tau_abs, b_zero, complex_, w, sin_w, log_sqrt_b, u, expm1_q, log_l1, negative):
    """p_t of `nqm.powers.LucasSequence` for one element, with its per-element constants."""
    tf = float(t)
    tm1 = max(tf - 1.0, 0.0)
    if b_zero:
        mag = tau_abs ** tm1 if tf >= 1.0 else 0.0
    elif complex_:
        ratio = math.sin(tf * w) / sin_w if w > 0.0 else tf
        mag = math.exp(tm1 * log_sqrt_b) * ratio
    else:
        ratio = math.expm1(-2.0 * u * tf) / expm1_q if u > 0.0 else tf
        mag = math.exp(tm1 * log_l1) * ratio
    if negative and (max(t - 1, 0) % 2) == 1:
        return -mag
    return mag


@numba.njit(cache=True, error_model="numpy")
def _segments(s11, s12, s22, eta, h2, b, sig2, n):
    """The loop of `segment_moments`; h2 and sig2 are (1, d) or (k, d)."""
    rows, dim = eta.shape
    out11 = np.empty((rows, dim))
    out12 = np.empty((rows, dim))
    out22 = np.empty((rows, dim))
    for r in range(rows):
        bb = b[r]
        t = n[r]
        sqrt_b = math.sqrt(bb)
        b_zero = bb == 0.0
        log_sqrt_b = math.log(sqrt_b) if not b_zero else 0.0
        hr = 0 if h2.shape[0] == 1 else r
        sr = 0 if sig2.shape[0] == 1 else r
        for i in range(dim):
            e_ = eta[r, i]
            hh = h2[hr, i]
            sg = sig2[sr, i]
            eh = e_ * hh
            # the stationary point S* of heavy-ball momentum with step size eta
            uu = e_ * sg * (1.0 + bb) / (hh * (1.0 - bb) * (2.0 * (1.0 + bb) - eh))
            st11 = uu
            st12 = -uu * hh / (1.0 + bb)
            st22 = 2.0 * uu * hh / ((1.0 + bb) * e_)
            tau = 1.0 - eh + bb
            if tau >= 0.0:
                gap = (1.0 - sqrt_b) ** 2 - eh
            else:
                gap = eh - (1.0 + sqrt_b) ** 2
            tau_abs = abs(tau)
            negative = tau < 0.0
            e = abs(gap) / (1.0 if b_zero else 2.0 * sqrt_b)
            complex_ = gap < 0.0 and not b_zero
            half = math.sqrt(e / 2.0)
            w = 2.0 * math.asin(min(half, 1.0)) if complex_ else 0.0
            u = 0.0 if (complex_ or b_zero) else 2.0 * math.asinh(half)
            sin_w = math.sin(w)
            log_l1 = math.log(tau_abs) if b_zero else log_sqrt_b + u
            expm1_q = math.expm1(-2.0 * u)
            p_n = _lucas(t, tau_abs, b_zero, complex_, w, sin_w, log_sqrt_b, u, expm1_q, log_l1,
                         negative)
            p_next = _lucas(t + 1, tau_abs, b_zero, complex_, w, sin_w, log_sqrt_b, u, expm1_q,
                            log_l1, negative)
            f11 = p_next - bb * p_n
            f12 = -e_ * bb * p_n
            f21 = hh * p_n
            f22 = (eh - 1.0) * p_n + p_next
            d11 = s11[r, i] - st11
            d12 = s12[r, i] - st12
            d22 = s22[r, i] - st22
            a11 = f11 * d11 + f12 * d12
            a12 = f11 * d12 + f12 * d22
            a21 = f21 * d11 + f22 * d12
            a22 = f21 * d12 + f22 * d22
            out11[r, i] = st11 + a11 * f11 + a12 * f12
            out12[r, i] = st12 + a11 * f21 + a12 * f22
            out22[r, i] = st22 + a21 * f21 + a22 * f22
    return out11, out12, out22


def segment_moments(s11, s12, s22, eta, h, b, sigma2, n):
    """(S11, S12, S22) after n[r] steps of row r with frozen eta, float64 (k, d) each.

    Args: s11, s12, s22, eta (k, d); h, sigma2 (d,) or (k, d); b (k,) or (k, 1) in [0, 1);
    n (k,) or (k, 1) whole numbers >= 0 (or one for all rows).
    """
    eta = np.ascontiguousarray(eta, dtype=np.float64)
    if eta.ndim != 2:
        raise ValueError(f"eta must be (k, d), got shape {eta.shape}")
    rows, dim = eta.shape

    def moments(x):     # the start moments, broadcast to every row as numpy would
        return np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=np.float64), (rows, dim)))

    def per_row(x, name):   # h and sigma2: one row for all, or one per row (numba checks no bounds)
        x = np.ascontiguousarray(np.asarray(x, dtype=np.float64).reshape(-1, dim))
        if x.shape[0] not in (1, rows):
            raise ValueError(f"{name} must be (d,), (1, d) or ({rows}, d), got {x.shape[0]} rows")
        return x

    b_k = np.ascontiguousarray(np.broadcast_to(np.asarray(b, np.float64).reshape(-1), (rows,)))
    n_k = np.ascontiguousarray(np.broadcast_to(np.asarray(n, np.int64).reshape(-1), (rows,)))
    return _segments(moments(s11), moments(s12), moments(s22), eta, per_row(h, "h"), b_k,
                     per_row(sigma2, "sigma2"), n_k)

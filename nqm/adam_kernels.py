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

# The thresholds of the engine's parallel kernels (importing nqm.kernels also sets libgomp's
# GOMP_SPINCOUNT before the first parallel launch: docs/performance.md, 'OpenMP spinning on a
# busy core').
from nqm.kernels import PARALLEL_MIN_ROWS, PARALLEL_MIN_WORK


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


@numba.njit(cache=True, error_model="numpy", inline="always")
def _row_constants(bb):
    """(sqrt b, b == 0, log sqrt b) of a row's momentum b, as `_segment_element` takes them."""
    sqrt_b = math.sqrt(bb)
    b_zero = bb == 0.0
    log_sqrt_b = math.log(sqrt_b) if not b_zero else 0.0
    return sqrt_b, b_zero, log_sqrt_b


@numba.njit(cache=True, error_model="numpy", inline="always")
def _segment_element(x11, x12, x22, e_, hh, sg, bb, sqrt_b, b_zero, log_sqrt_b, t):
    """One direction's (S11, S12, S22) after t steps with frozen step size e_: S* + F^t (S_0 -
    S*) F^tT (the formulas of `nqm.adam.closed_form_reference`, one element; the row's
    constants from `_row_constants(bb)`)."""
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
    d11 = x11 - st11
    d12 = x12 - st12
    d22 = x22 - st22
    a11 = f11 * d11 + f12 * d12
    a12 = f11 * d12 + f12 * d22
    a21 = f21 * d11 + f22 * d12
    a22 = f21 * d12 + f22 * d22
    return (st11 + a11 * f11 + a12 * f12, st12 + a11 * f21 + a12 * f22,
            st22 + a21 * f21 + a22 * f22)


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
        sqrt_b, b_zero, log_sqrt_b = _row_constants(bb)
        hr = 0 if h2.shape[0] == 1 else r
        sr = 0 if sig2.shape[0] == 1 else r
        for i in range(dim):
            out11[r, i], out12[r, i], out22[r, i] = _segment_element(
                s11[r, i], s12[r, i], s22[r, i], eta[r, i], h2[hr, i], sig2[sr, i], bb, sqrt_b,
                b_zero, log_sqrt_b, t)
    return out11, out12, out22


@numba.njit(cache=True, error_model="numpy")
def _advance_row(r, scratch, s11, s12, s22, V, idx, h, sig2, b1, b2, eps, coef_first,
                 omp2_first, coef_last, omp2_last, qn, w, n, eta_out, step_out):
    """Moves row idx[r] (`advance_rows`' arithmetic for one row, in place): it reads and writes
    only state row idx[r], eta_out[r], step_out[r] and its scratch (4, d)."""
    dim = h.shape[0]
    x0 = scratch[0]
    v1 = scratch[1]
    e1 = scratch[2]
    em = scratch[3]
    row = idx[r]
    bb, q, e0 = b1[r], b2[r], eps[r]
    edge = 2.0 * (1.0 + bb)
    # the first step's EMA V_1 and step size eta_first, and whether its segment is stable
    stable = True
    for i in range(dim):
        hh = h[i]
        x = hh * hh * s11[row, i] + sig2[row, i]
        x0[i] = x
        v = q * V[row, i] + (1.0 - q) * x
        v1[i] = v
        e = coef_first[r] / (math.sqrt(v / omp2_first[r]) + e0)
        e1[i] = e
        if not e * hh < edge:
            stable = False
    nr = n[r]
    ok = nr > 1 and stable
    sqrt_b, b_zero, log_sqrt_b = _row_constants(bb)
    qq, ww = qn[r], w[r]
    if ok:
        # predictor: the segment at eta_first gives V at its end, hence eta_last; the
        # corrector runs at their mean, where that is stable and the prediction finite
        for i in range(dim):
            hh = h[i]
            sg = sig2[row, i]
            p11, _, _ = _segment_element(s11[row, i], s12[row, i], s22[row, i], e1[i], hh,
                                         sg, bb, sqrt_b, b_zero, log_sqrt_b, nr)
            xn = hh * hh * p11 + sg
            v_end = qq * V[row, i] + (1.0 - qq) * (x0[i] + ww * (xn - x0[i]))
            e_last = coef_last[r] / (math.sqrt(v_end / omp2_last[r]) + e0)
            e_mid = 0.5 * (e1[i] + e_last)
            em[i] = e_mid
            if not (e_mid * hh < edge and math.isfinite(p11)):
                ok = False
                break
    if ok:
        for i in range(dim):
            hh = h[i]
            sg = sig2[row, i]
            c11, c12, c22 = _segment_element(s11[row, i], s12[row, i], s22[row, i], em[i],
                                             hh, sg, bb, sqrt_b, b_zero, log_sqrt_b, nr)
            xn = hh * hh * c11 + sg
            V[row, i] = qq * V[row, i] + (1.0 - qq) * (x0[i] + ww * (xn - x0[i]))
            s11[row, i], s12[row, i], s22[row, i] = c11, c12, c22
            eta_out[r, i] = em[i]
        step_out[r] = nr
    else:
        # one exact step at eta_first (`nqm.adam.one_step`)
        for i in range(dim):
            hh = h[i]
            sg = sig2[row, i]
            e = e1[i]
            x11, x12, x22 = s11[row, i], s12[row, i], s22[row, i]
            f11 = 1.0 - e * hh
            f12 = -e * bb
            s11[row, i] = f11 * f11 * x11 + 2.0 * f11 * f12 * x12 + f12 * f12 * x22 + e * e * sg
            s12[row, i] = f11 * hh * x11 + (f11 * bb + f12 * hh) * x12 + f12 * bb * x22 - e * sg
            s22[row, i] = hh * hh * x11 + 2.0 * hh * bb * x12 + bb * bb * x22 + sg
            V[row, i] = v1[i]
            eta_out[r, i] = e
        step_out[r] = 1


@numba.njit(cache=True, error_model="numpy")
def _advance_rows_serial(s11, s12, s22, V, idx, h, sig2, b1, b2, eps, coef_first, omp2_first,
                         coef_last, omp2_last, qn, w, n, eta_out, step_out):
    scratch = np.empty((4, h.shape[0]))
    for r in range(idx.shape[0]):
        _advance_row(r, scratch, s11, s12, s22, V, idx, h, sig2, b1, b2, eps, coef_first,
                     omp2_first, coef_last, omp2_last, qn, w, n, eta_out, step_out)


@numba.njit(parallel=True, cache=True, error_model="numpy")
def _advance_rows_parallel(threads, s11, s12, s22, V, idx, h, sig2, b1, b2, eps, coef_first,
                           omp2_first, coef_last, omp2_last, qn, w, n, eta_out, step_out):
    # one piece per thread, piece j moving rows j, j + threads, ... with its own scratch
    # (interleaved, as `nqm.kernels` splits directions: costly and cheap rows are shared)
    scratch = np.empty((threads, 4, h.shape[0]))
    for j in numba.prange(threads):
        for r in range(j, idx.shape[0], threads):
            _advance_row(r, scratch[j], s11, s12, s22, V, idx, h, sig2, b1, b2, eps,
                         coef_first, omp2_first, coef_last, omp2_last, qn, w, n, eta_out,
                         step_out)


def advance_rows(s11, s12, s22, V, idx, h, sig2, b1, b2, eps, coef_first, omp2_first,
                 coef_last, omp2_last, qn, w, n, eta_out, step_out):
    """`nqm.adam.MeanFieldAdam.advance_reference`'s arithmetic, row by row, in place.

    State s11, s12, s22, V, sig2: (N, d), of which rows idx (k,) move. Per moving row r (k,):
    b1, b2, eps; coef_first = a (1 - b1) / (1 - b1^k) and omp2_first = 1 - b2^k at the
    segment's first step k = t + 1, coef_last and omp2_last at its last, k = t + n[r]; qn =
    b2^n and w = `nqm.adam._ema_weight(b2, n)` (those of rows with n > 1 are used). The
    transcendental row constants come in from numpy, so every element takes the reference's
    operations in its order. Writes the step size used (k, d) into eta_out and the steps taken
    (n[r], or 1 where the row takes one exact step) into step_out.

    The rows idx must be distinct (a ValueError otherwise): each moves only its own state row.
    Like `nqm.kernels.loss_rows`, calls of at least `PARALLEL_MIN_ROWS` rows and
    `PARALLEL_MIN_WORK` rows x directions run their rows on all cores, smaller ones serially;
    a row takes the same operations on either path, so both give the same bits.
    """
    k = idx.shape[0]
    if k > 1 and np.unique(idx).size != k:
        raise ValueError("advance_rows: the rows idx must be distinct (a repeated row would be "
                         "moved twice, and by two threads at once)")
    args = (s11, s12, s22, V, idx, h, sig2, b1, b2, eps, coef_first, omp2_first, coef_last,
            omp2_last, qn, w, n, eta_out, step_out)
    if k >= PARALLEL_MIN_ROWS and k * h.shape[0] >= PARALLEL_MIN_WORK:
        _advance_rows_parallel(min(numba.get_num_threads(), k), *args)
    else:
        _advance_rows_serial(*args)


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

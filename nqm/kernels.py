"""Compiled loops for the engine's hot path: E[L](t) summed over all directions, one row at a time.

Plain SGD is evaluated by numpy with its logarithms cached (`moments.SGDDynamics`), so the SGD
path loads no numba; `loss_rows(SGD, ...)` (`_sgd_row`) stays for callers that want the kernel.
Each kernel evaluates, for rows n (metaparameters and a step t each) and every direction i, the
closed form of `nqm.moments` and sums 1/2 h_i (second moment) over i, without building (N, d)
temporaries: numpy's per-operation passes over memory cost more than the arithmetic here, and
the trigonometric functions dominate what is left. Calls of at least `PARALLEL_MIN_ROWS` rows
are spread over the cores in pieces (a row and every CHUNKS-th direction: equal shares of cheap
and costly directions, whatever the number of rows); smaller calls stay serial, where a parallel
launch would cost more than it saves. Both paths sum each row chunk by chunk in one order, so a
row's loss has the same bits whichever path evaluated it.

Every kernel returns `total` (the expected loss) and `noise` (the loss of the same run started
from zero second moments: the noise injected so far). Rows must be stable and have t >= 1 (the
callers mask unstable rows and answer t = 0 with the start itself).

Inputs shared by all kernels (d directions, n rows):
  h_D, c_D: effective curvature and noise (after preconditioning), (d,).
  w_D: loss weights 1/2 h_i with the true curvature, (d,).
  s11_MD, s12_MD, s22_MD: start second moments, (M, d); row n uses start row `start_n[n]`.
  lr_n, inv_batch_n: step size and 1 / B, (n,).
  t_n: steps >= 1, int64 (n,).
"""

from __future__ import annotations

import math
import os

# numba's parallel kernels run on GNU OpenMP, whose idle threads spin for 300,000 iterations
# before they sleep. When another thread or process holds a core (the app's warm-up thread, a
# sweep, a CI neighbour) the spinning thread and the busy one share it, and every parallel launch
# waits for a thread that is not running: a tuned momentum curve took 1.5x, and an SGD curve
# 2x, the time of a serial run with one core busy. Spinning 1,000 iterations keeps the gain of
# two free cores (momentum within ~7%) and removes that loss (benchmarks/bench_omp_spin.py). Read when
# libgomp loads, at the first parallel launch; a value the user set is kept.
os.environ.setdefault("GOMP_SPINCOUNT", "1000")

import numba  # noqa: E402
import numpy as np  # noqa: E402

# Smaller calls run serially. A parallel launch wakes threads that libgomp has put to sleep
# (see GOMP_SPINCOUNT above): on this project's VM that cost about as much as one row of the
# default problem (10^4 directions, ~0.4 ms), so one- to three-row calls gain nothing from it.
PARALLEL_MIN_ROWS = 4
PARALLEL_MIN_WORK = 8192  # rows x directions: below this (small problems) serial too
CHUNKS = 8  # each row is summed in this many pieces, piece j holding directions j, j + 8, ...
TINY = 1e-170  # a factor below this squares (or multiplies another) to exactly 0.0 in float64
LOG_TINY = math.log(TINY)


@numba.njit(cache=True)
def _sgd_row(k, i0, di, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, b_n, inv_batch_n, t_n):
    """Plain SGD: E theta^2(t) = s + r^(2t) (x0 - s), r = 1 - a h, s = a c / (B h (2 - a h))."""
    a = lr_n[k]
    t = t_n[k]
    m = start_n[k]
    acc_t = 0.0
    acc_n = 0.0
    for i in range(i0, h_D.shape[0], di):
        ah = a * h_D[i]
        s = a * c_D[i] * inv_batch_n[k] / (h_D[i] * (2.0 - ah))
        r = abs(1.0 - ah)
        q = math.exp(max(2.0 * t * math.log(r), -700.0)) if r > 0.0 else 0.0
        acc_t += w_D[i] * (s + q * (s11_MD[m, i] - s))
        acc_n += w_D[i] * s * (1.0 - q)
    return acc_t, acc_n


@numba.njit(cache=True)
def _quad(phi, chi, x11, x12, x22):
    return phi * phi * x11 + 2.0 * phi * chi * x12 + chi * chi * x22


@numba.njit(cache=True)
def _momentum_row(k, i0, di, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, b_n, inv_batch_n, t_n):
    """Heavy-ball momentum, state (theta, v); see `moments.MomentumDynamics` for the forms.

    With P_t = |p_t| the Lucas sequence of |tau| (tau = 1 - a h + b), e1^T F^t = (phi, chi) with
    phi = sign^t (P_{t+1} - sign b P_t) and chi = -a b sign^(t-1) P_t. phi is formed without
    cancellation: underdamped P_{t+1} - s b P_t = rho^t (sin(tw) (cos w - s rho) / sin w + cos(tw)),
    rho = sqrt(b); overdamped l1^(t-1) (l1 + E_t (l2 - s b)), E_t = (1 - q^t) / (1 - q), q = l2 / l1.
    """
    a = lr_n[k]
    b = b_n[k]
    t = t_n[k]
    m = start_n[k]
    acc_t = 0.0
    acc_n = 0.0
    # per-row constants, hoisted out of the loop over directions
    rho = math.sqrt(b)
    log_rho = math.log(rho) if b > 0.0 else 0.0
    scale = math.exp(max((t - 1) * log_rho, -700.0))   # rho^(t-1), complex branch
    u_fac = a * inv_batch_n[k] * (1.0 + b) / (1.0 - b)
    two_1b = 2.0 * (1.0 + b)
    inv_4rho = 1.0 / (4.0 * rho) if b > 0.0 else 0.0
    lo_edge = (1.0 - rho) ** 2
    hi_edge = (1.0 + rho) ** 2
    ab = a * b
    log_bound = math.log((2.0 * t + 2.0) * (1.0 + ab))
    k12 = -1.0 / (1.0 + b)            # S*_12 = k12 u h, S*_22 = k22 u h
    k22 = 2.0 / ((1.0 + b) * a)
    for i in range(i0, h_D.shape[0], di):
        h = h_D[i]
        ah = a * h
        tau = 1.0 - ah + b
        sgn = 1.0 if tau >= 0.0 else -1.0
        u = u_fac * c_D[i] / (h * (two_1b - ah))
        uh = u * h
        st12 = k12 * uh
        st22 = k22 * uh
        if b == 0.0:
            tau_abs = abs(tau)
            p_t = tau_abs ** (t - 1)
            phi_mag = tau_abs * p_t
        else:
            gap = lo_edge - ah if tau >= 0.0 else ah - hi_edge
            half = math.sqrt(abs(gap) * inv_4rho)
            if gap < 0.0:
                hc = min(half, 1.0)
                sin_w = 2.0 * hc * math.sqrt(max(1.0 - hc * hc, 0.0))
                # |phi|, |chi| <= scale (3 + a b) / sin_w: below 1e-170 their products are
                # exactly 0 in float64 and the direction holds its stationary moment u.
                if sin_w > 0.0 and scale * (3.0 + ab) < TINY * sin_w:
                    acc_t += w_D[i] * u
                    acc_n += w_D[i] * u
                    continue
                w = 2.0 * math.asin(hc)
                cos_w = 1.0 - 2.0 * hc * hc
                s0 = math.sin(t * w)
                c0 = math.cos(t * w)
                p_t = scale * s0 / sin_w
                phi_mag = rho * ((cos_w - sgn * rho) * p_t + scale * c0)
            else:
                # y = half + sqrt(1 + half^2), l1,2 = rho y^(+-2); y^2 - 1 = 2 half y exactly,
                # so log y^2 and q - 1 (q = l2 / l1 = y^-4) need no cancelling subtraction.
                y = half + math.sqrt(1.0 + half * half)
                y2 = y * y
                y2m1 = 2.0 * half * y
                l1 = rho * y2
                l2 = rho / y2
                log_y2 = math.log1p(y2m1)
                log_l1 = log_rho + log_y2
                # |phi|, |chi| <= l1^(t-1) (2 t + 2) (1 + a b) (l1 < 1, E_t <= t): as above.
                if (t - 1) * log_l1 + log_bound < LOG_TINY:
                    acc_t += w_D[i] * u
                    acc_n += w_D[i] * u
                    continue
                if y2m1 > 0.0:
                    log_q = -2.0 * log_y2
                    qm1 = -y2m1 * (y2 + 1.0) / (y2 * y2)
                    e_t = math.expm1(max(t * log_q, -700.0)) / qm1
                else:
                    e_t = float(t)
                lt = math.exp(max((t - 1) * log_l1, -700.0))
                p_t = lt * e_t
                phi_mag = lt * (l1 + e_t * (l2 - sgn * b))
        # phi chi = sign^(2t-1) phi_mag (-a b P_t) = -sgn a b phi_mag P_t
        phi = phi_mag
        chi = -sgn * ab * p_t
        pp = phi * phi
        pc = 2.0 * phi * chi
        cc = chi * chi
        moved = pp * u + pc * st12 + cc * st22       # the quadratic form of S*
        start = pp * s11_MD[m, i] + pc * s12_MD[m, i] + cc * s22_MD[m, i]
        acc_t += w_D[i] * (u - moved + start)
        acc_n += w_D[i] * (u - moved)
    return acc_t, acc_n




@numba.njit(cache=True)
def _divided_power(r, g, t, log_g, g_t1):
    """(r^t - g^t) / (r - g) for real r in (-1, 1], g in [0, 1), integer t >= 1, stable at r ~ g.

    log_g = log g and g_t1 = g^(t-1) are the row's constants (unused when g = 0). For r >= 0,
    with big = max(r, g) and q = min / big: big^(t-1) expm1(t log q) / (q - 1), q - 1 formed as
    (min - big) / big (no cancellation) and log q = log1p(q - 1): two or three transcendentals.
    """
    if r >= 0.0:
        if g == 0.0:
            return math.exp(max((t - 1) * math.log(r), -700.0)) if r > 0.0 else (
                1.0 if t == 1 else 0.0)
        if r == g:
            return t * g_t1
        if r > g:
            qm1 = (g - r) / r
            log_q = math.log1p(qm1)
            lead = math.exp(max((t - 1) * (log_g - log_q), -700.0))   # r^(t-1)
        else:
            qm1 = (r - g) / g
            log_q = math.log1p(qm1) if r > 0.0 else -math.inf
            lead = g_t1
        return lead * math.expm1(max(t * log_q, -700.0)) / qm1
    # opposite signs: no cancellation in r - g
    rt = abs(r) ** t
    if t % 2 == 1:
        rt = -rt
    return (rt - g_t1 * g) / (r - g)


@numba.njit(cache=True)
def _ema_row(k, i0, di, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, g_n, inv_batch_n, t_n):
    """SGD read at the moving average, state (theta, avg); see `moments.EMADynamics`."""
    a = lr_n[k]
    g = g_n[k]
    t = t_n[k]
    m = start_n[k]
    acc_t = 0.0
    acc_n = 0.0
    gt = g ** t
    g_t1 = g ** (t - 1)
    log_g = math.log(g) if g > 0.0 else 0.0
    for i in range(i0, h_D.shape[0], di):
        h = h_D[i]
        ah = a * h
        r = 1.0 - ah
        s_tt = a * c_D[i] * inv_batch_n[k] / (h * (2.0 - ah))
        s_ta = (1.0 - g) * s_tt / (1.0 - g * r)
        s_aa = (2.0 * g * (1.0 - g) * r * s_ta + (1.0 - g) ** 2 * s_tt) / (1.0 - g * g)
        phi = (1.0 - g) * r * _divided_power(r, g, t, log_g, g_t1)
        chi = gt
        dev = _quad(phi, chi, s11_MD[m, i] - s_tt, s12_MD[m, i] - s_ta, s22_MD[m, i] - s_aa)
        inj = _quad(phi, chi, -s_tt, -s_ta, -s_aa)
        acc_t += w_D[i] * (s_aa + dev)
        acc_n += w_D[i] * (s_aa + inj)
    return acc_t, acc_n




SGD, MOMENTUM, EMA = 0, 1, 2  # `family` of `loss_rows`


@numba.njit(cache=True)
def _row(family, k, i0, di, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n):
    """(total, noise) of row k summed over directions i0, i0 + di, i0 + 2 di, ..."""
    if family == SGD:
        return _sgd_row(k, i0, di, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n)
    if family == MOMENTUM:
        return _momentum_row(k, i0, di, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n)
    return _ema_row(k, i0, di, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n)


@numba.njit(cache=True)
def _rows_serial(family, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n):
    n = lr_n.shape[0]
    total = np.zeros(n)
    noise = np.zeros(n)
    for k in range(n):
        for j in range(CHUNKS):
            pt, pn = _row(family, k, j, CHUNKS, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n)
            total[k] += pt
            noise[k] += pn
    return total, noise


@numba.njit(parallel=True, cache=True)
def _rows_parallel(family, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n):
    n = lr_n.shape[0]
    part_t = np.zeros((n, CHUNKS))
    part_n = np.zeros((n, CHUNKS))
    for u in numba.prange(n * CHUNKS):
        k = u // CHUNKS
        j = u % CHUNKS
        part_t[k, j], part_n[k, j] = _row(family, k, j, CHUNKS, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n)
    total = np.zeros(n)
    noise = np.zeros(n)
    for k in range(n):
        for j in range(CHUNKS):   # the serial loop's order: the same sums to the last bit
            total[k] += part_t[k, j]
            noise[k] += part_n[k, j]
    return total, noise


def loss_rows(family: int, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n):
    """(total, noise) per row, each (n,), for `family` SGD, MOMENTUM or EMA (param_n: momentum
    b or average decay g; unused for SGD). Calls of at least `PARALLEL_MIN_ROWS` rows and
    `PARALLEL_MIN_WORK` rows x directions are spread over the cores in pieces of one row and
    every CHUNKS-th direction (balanced whatever the number of rows); every row is summed chunk
    by chunk in the same order whichever path runs, so both give the same bits."""
    parallel = (lr_n.shape[0] >= PARALLEL_MIN_ROWS
                and lr_n.shape[0] * h_D.shape[0] >= PARALLEL_MIN_WORK)
    fn = _rows_parallel if parallel else _rows_serial
    return fn(family, h_D, c_D, w_D, s11_MD, s12_MD, s22_MD, start_n, lr_n, param_n, inv_batch_n, t_n)


@numba.njit(parallel=True, cache=True)
def jump_trajectory(f11_D, f12_D, f21_D, f22_D, g1_D, g2_D, sigma2_D, s11_D, s12_D, s22_D, w_D,
                    loss_index, log2_jump_R):
    """E[L] at rungs reached by jumps of 2^m steps, by iterating S <- F^k S F^kT + Q_k.

    Rung 0 is the start; rung r is 2^log2_jump_R[r - 1] steps after rung r - 1. The jumps must
    not shrink: F^k and Q_k = sum_{j<k} F^j (sigma^2 g g^T) F^jT are carried from one jump
    length to the next by doubling, F^2k = F^k F^k and Q_2k = F^k Q_k F^kT + Q_k. A rung costs
    one multiply-add pass however far it jumps (the closed form's trigonometry avoided), so a
    ladder of 16 rungs an octave costs less than the closed form's 8. With every jump 0 (single
    steps) this is the one-step recurrence S <- F S F^T + sigma^2 g g^T at every step, which
    checks every step of a short stretch when a first crossing is certified. Each squaring
    doubles the relative error already in F^k, so a rung t steps out carries about t * eps,
    as the one-step recurrence does (~1e-9 relative at 10^8 steps). The directions are split
    into CHUNKS interleaved pieces spread over the cores and summed in one order.

    Args:
      f11_D .. f22_D: the 2x2 map F per direction; g1_D, g2_D: the noise direction; sigma2_D:
        noise variance c / B; s11_D .. s22_D: start; w_D: loss weights; loss_index: 0 reads
        S11, 2 reads S22; log2_jump_R: non-decreasing int64 (R,).

    Returns:
      float64 (R + 1,), E[L] at the start and at each rung.
    """
    d = f11_D.shape[0]
    n_r = log2_jump_R.shape[0]
    part = np.zeros((CHUNKS, n_r + 1))
    for j in numba.prange(CHUNKS):
        for i in range(j, d, CHUNKS):
            a11, a12, a21, a22 = f11_D[i], f12_D[i], f21_D[i], f22_D[i]
            q11 = sigma2_D[i] * g1_D[i] * g1_D[i]
            q12 = sigma2_D[i] * g1_D[i] * g2_D[i]
            q22 = sigma2_D[i] * g2_D[i] * g2_D[i]
            x11, x12, x22 = s11_D[i], s12_D[i], s22_D[i]
            w = w_D[i]
            part[j, 0] += w * (x11 if loss_index == 0 else x22)
            m = 0
            for r in range(n_r):
                while m < log2_jump_R[r]:
                    # Q <- A Q A^T + Q, then A <- A A
                    y11 = a11 * a11 * q11 + 2.0 * a11 * a12 * q12 + a12 * a12 * q22 + q11
                    y12 = (a11 * a21 * q11 + (a11 * a22 + a12 * a21) * q12 + a12 * a22 * q22
                           + q12)
                    y22 = a21 * a21 * q11 + 2.0 * a21 * a22 * q12 + a22 * a22 * q22 + q22
                    q11, q12, q22 = y11, y12, y22
                    b11 = a11 * a11 + a12 * a21
                    b12 = a11 * a12 + a12 * a22
                    b21 = a21 * a11 + a22 * a21
                    b22 = a21 * a12 + a22 * a22
                    a11, a12, a21, a22 = b11, b12, b21, b22
                    # a decayed map: exactly zero (denormal products are several times slower)
                    if max(abs(a11), abs(a12), abs(a21), abs(a22)) < TINY:
                        a11, a12, a21, a22 = 0.0, 0.0, 0.0, 0.0
                    m += 1
                y11 = a11 * a11 * x11 + 2.0 * a11 * a12 * x12 + a12 * a12 * x22 + q11
                y12 = a11 * a21 * x11 + (a11 * a22 + a12 * a21) * x12 + a12 * a22 * x22 + q12
                y22 = a21 * a21 * x11 + 2.0 * a21 * a22 * x12 + a22 * a22 * x22 + q22
                x11, x12, x22 = y11, y12, y22
                part[j, r + 1] += w * (x11 if loss_index == 0 else x22)
    out = np.zeros(n_r + 1)
    for j in range(CHUNKS):
        out += part[j]
    return out

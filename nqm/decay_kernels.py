"""Compiled step loops of a linearly decaying rate (`nqm.linear_decay`): E[L] after T steps.

A rate that changes every step has no closed form over a segment, so the run is marched one step
at a time. Written in numpy, each step builds about twenty (N, d) temporaries; for the tuner's
calls (tens of rows, 10^2-10^3 directions) those are ~1 MB each, which glibc maps and unmaps on
every allocation, so half the time went to page faults. Here each row is marched step by step
over (d,) state arrays with the directions innermost, where they do not depend on each other and
the compiler vectorises them (3.5x faster than marching each direction through all T steps in
turn, which waits on every step's result): the same recurrences, the same order of operations, no
temporaries (`benchmarks/decay_kernels.py` measures the gain; the tests hold both against the
numpy step functions they replace, `nqm.adam.one_step` and `MeanFieldAdam.advance`).

Inputs (d directions, n rows):
  h_D: curvature, (d,).  w_D: loss weight of each direction (1/2 h, times a quadrature weight
  for Adam), (d,).  sigma2_D: gradient noise variance at the run's batch size, (d,).
  x0_D: start E[theta^2], (d,).  lr_n, b_n, f_n: the rate a, the momentum (b1 for Adam) and the
  final fraction f of each row, (n,).  horizon: T >= 1; the rate at step t = 0 .. T-1 is
  a (1 - (1 - f) t / T), the formula of `linear_decay._rate`.
Each kernel returns the expected loss at step T, (n,); a diverged row gives inf or nan (the
caller maps both to inf).
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, error_model="numpy")
def _heavy_ball_step(s11, s12, s22, i, eta, h, b, sig):
    """Direction i's second moments (in place) after one heavy-ball step of size eta:
    F = [[1 - eta h, -eta b], [h, b]], noise direction (-eta, 1), as `nqm.adam.one_step`."""
    x11, x12, x22 = s11[i], s12[i], s22[i]
    f11, f12 = 1.0 - eta * h, -eta * b
    s11[i] = f11 * f11 * x11 + 2.0 * f11 * f12 * x12 + f12 * f12 * x22 + eta * eta * sig
    s12[i] = f11 * h * x11 + (f11 * b + f12 * h) * x12 + f12 * b * x22 - eta * sig
    s22[i] = h * h * x11 + 2.0 * h * b * x12 + b * b * x22 + sig


@numba.njit(cache=True, error_model="numpy")
def _weighted_sum(w_D, s11):
    total = 0.0
    for i in range(w_D.shape[0]):
        total += w_D[i] * s11[i]
    return total


@numba.njit(cache=True, error_model="numpy")
def momentum_final(h_D, w_D, sigma2_D, x0_D, lr_n, b_n, f_n, horizon):
    """Heavy-ball momentum: the second moments of (theta, u) (`_heavy_ball_step`)."""
    n_rows, dim = lr_n.shape[0], h_D.shape[0]
    out = np.empty(n_rows)
    s11, s12, s22 = np.empty(dim), np.empty(dim), np.empty(dim)
    for n in range(n_rows):
        a, b, f = lr_n[n], b_n[n], f_n[n]
        s11[:] = x0_D
        s12[:] = 0.0
        s22[:] = 0.0
        for t in range(horizon):
            eta = a * (1.0 - (1.0 - f) * t / horizon)
            for i in range(dim):
                _heavy_ball_step(s11, s12, s22, i, eta, h_D[i], b, sigma2_D[i])
        out[n] = _weighted_sum(w_D, s11)
    return out


@numba.njit(cache=True, error_model="numpy")
def _one_minus_power(b, k):
    """1 - b^k without cancellation (1 at b = 0), as `nqm.adam._one_minus_power`."""
    return -math.expm1(k * math.log(b)) if b > 0.0 else 1.0


@numba.njit(cache=True, error_model="numpy")
def adam_final(h_D, w_D, sigma2_D, x0_D, lr_n, b_n, f_n, beta2, horizon):
    """Mean-field Adam (epsilon 0, bias corrections), one exact step at a time, as
    `nqm.adam.MeanFieldAdam.advance` with one step per call: V_k = b2 V_{k-1} + (1 - b2)
    (h^2 E theta^2 + sigma^2), eta_k = a_k (1 - b1) / (1 - b1^k) / sqrt(V_k / (1 - b2^k)), then
    the heavy-ball moments with b = b1. The directions are the model's quadrature nodes; the
    bias corrections are computed once a step."""
    n_rows, dim = lr_n.shape[0], h_D.shape[0]
    out = np.empty(n_rows)
    s11, s12, s22, v = np.empty(dim), np.empty(dim), np.empty(dim), np.empty(dim)
    for n in range(n_rows):
        a, b, f = lr_n[n], b_n[n], f_n[n]
        s11[:] = x0_D
        s12[:] = 0.0
        s22[:] = 0.0
        v[:] = 0.0
        for t in range(horizon):
            k = t + 1.0
            bias2 = _one_minus_power(beta2, k)
            step = a * (1.0 - (1.0 - f) * t / horizon) * (1.0 - b) / _one_minus_power(b, k)
            for i in range(dim):
                h, sig = h_D[i], sigma2_D[i]
                v[i] = beta2 * v[i] + (1.0 - beta2) * (h * h * s11[i] + sig)
                _heavy_ball_step(s11, s12, s22, i, step / math.sqrt(v[i] / bias2), h, b, sig)
        out[n] = _weighted_sum(w_D, s11)
    return out

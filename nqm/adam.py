"""Adam on the NQM: a mean-field model whose preconditioner is the expected squared gradient.

Real Adam (Kingma and Ba 2015, algorithm 1) on the NQM, per direction i and step k = 1, 2, ...:

    g_k = h theta_{k-1} + eps_k,            eps_k ~ N(0, c f(B))
    m_k = b1 m_{k-1} + (1 - b1) g_k,         V_k = b2 V_{k-1} + (1 - b2) g_k^2
    theta_k = theta_{k-1} - a (m_k / (1 - b1^k)) / (sqrt(V_k / (1 - b2^k)) + epsilon)

The stated approximation (mean field): the random V_k is replaced by its expectation given the
second moments, i.e. the EMA runs over E[g_k^2] = h^2 E[theta_{k-1}^2] + c f(B) instead of g_k^2.
Then the preconditioner P_k = 1 / (sqrt(V_k / (1 - b2^k)) + epsilon) is deterministic and the
step is heavy-ball momentum (u = m / (1 - b1): u_k = b1 u_{k-1} + g_k, theta_k = theta_{k-1} -
eta_k u_k) with a per-direction step size eta_k = a (1 - b1) P_k / (1 - b1^k), so the second
moments of (theta, u) follow the exact 2x2 recurrence of `nqm.moments.MomentumDynamics`.
b2 = 0 tracks E[g^2] instantly. `iterate_losses` runs that mean-field recurrence step by step
(the reference); `expected_loss` and `steps_to_target` evaluate it over segments of
`growth * t` steps with the preconditioner frozen at the mean of its predicted values at the
segment's two ends (predictor-corrector, second order in the segment length), each segment in
one closed form (docs/nqm_adam.md gives the measured error of both approximations).

The randomness of theta_0 is kept: each direction is split over `init_nodes` Gauss-Hermite
values of |theta_0| (each run's V follows its own start; the ensemble mean alone is 30-98% off
in the transient). The noise part of V is still replaced by its mean, which holds when V averages
many steps (b2 near 1) and fails for sign-like updates (real Adam with b2 = 0 is g / |g|, the
mean field g / rms(g)).

References:
  Kingma and Ba 2015, "Adam: a method for stochastic optimization", algorithm 1.
  Zhang et al. 2019, "Which algorithmic choices matter at which batch sizes?", sections 3-4
    (the NQM; Adam-like preconditioning extends perfect scaling).
"""

from __future__ import annotations

import math

import numpy as np

from nqm import validation
from nqm.montecarlo import MonteCarloResult, check_learning_rates
from nqm.powers import LucasSequence
from nqm.problem import Problem

GROWTH = 0.05      # segment length as a fraction of the step count it starts at
INIT_NODES = 4     # Gauss-Hermite nodes over |theta_0| (the conditioning on the start)
MAX_ITERATIONS = 200_000  # segments per evaluation, a guard against a row stuck at one step


def check_adam(batch_size, learning_rate, beta1, beta2, epsilon):
    """Validates arrays of Adam metaparameters; raises ValueError naming the first bad one."""
    validation.check_all_in_range("batch_size", batch_size, 1.0, np.inf)
    validation.check_all_in_range("learning_rate", learning_rate, 0.0, np.inf, closed_low=False)
    validation.check_all_in_range("beta1", beta1, 0.0, 1.0, closed_high=False)
    validation.check_all_in_range("beta2", beta2, 0.0, 1.0, closed_high=False)
    validation.check_all_in_range("epsilon", epsilon, 0.0, np.inf)


def _rows(*values):
    arrays = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in values]
    shapes = {a.shape for a in arrays if a.size != 1}
    if len(shapes) > 1:
        raise ValueError(f"Adam metaparameter arrays must share one shape, got {sorted(shapes)}")
    return [np.ascontiguousarray(a.reshape(-1)) for a in np.broadcast_arrays(*arrays)]


def one_step(s11, s12, s22, eta, h, b, sigma2):
    """Second moments of (theta, u) after one heavy-ball step with per-direction step eta.

    F = [[1 - eta h, -eta b], [h, b]], noise direction (-eta, 1) with variance sigma2; all
    arguments broadcast to (n, d). Returns (S11, S12, S22).
    """
    f11, f12, f21, f22 = 1.0 - eta * h, -eta * b, h, b
    return (f11 * f11 * s11 + 2.0 * f11 * f12 * s12 + f12 * f12 * s22 + eta * eta * sigma2,
            f11 * f21 * s11 + (f11 * f22 + f12 * f21) * s12 + f12 * f22 * s22 - eta * sigma2,
            f21 * f21 * s11 + 2.0 * f21 * f22 * s12 + f22 * f22 * s22 + sigma2)


def stable(eta, h, b):
    """Every direction's F has spectral radius < 1: 0 < eta h < 2 (1 + b); (n,) bool."""
    return np.all(eta * h < 2.0 * (1.0 + b), axis=-1)


def closed_form(s11, s12, s22, eta, h, b, sigma2, n):
    """Second moments after n steps with frozen eta: S* + F^n (S_0 - S*) F^nT (stable rows).

    Arrays (k, d) (h, sigma2 may be (d,); b, n: (k, 1)). Compiled (`nqm.adam_kernels`); the
    numpy form it replaces is `closed_form_reference`.
    """
    from nqm import adam_kernels   # here, so that importing nqm.adam loads no numba (SGD's CLI)

    return adam_kernels.segment_moments(s11, s12, s22, eta, h, b, sigma2, n)


def closed_form_reference(s11, s12, s22, eta, h, b, sigma2, n):
    """`closed_form` in numpy: the reference the compiled form is tested against.

    F^n = p_n (F - tau I) + p_{n+1} I with p the Lucas sequence of (tau, b), tau = 1 - eta h + b
    (`nqm.powers`); S* is the momentum stationary point of `nqm.moments.MomentumDynamics` with
    the step size eta.
    """
    eh = eta * h
    bb = np.broadcast_to(b, eh.shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        u = eta * sigma2 * (1.0 + b) / (h * (1.0 - b) * (2.0 * (1.0 + b) - eh))
        star = (u, -u * h / (1.0 + b), 2.0 * u * h / ((1.0 + b) * eta))
        tau = 1.0 - eh + bb
        sqrt_b = np.sqrt(bb)
        gap = np.where(tau >= 0, (1.0 - sqrt_b) ** 2 - eh, eh - (1.0 + sqrt_b) ** 2)
        seq = LucasSequence(np.abs(tau), bb, gap, tau < 0)
        p_n, p_next = seq(n), seq(n + 1)
        f11 = p_next - bb * p_n
        f12 = -eta * bb * p_n
        f21 = h * p_n
        f22 = (eh - 1.0) * p_n + p_next
        d11, d12, d22 = s11 - star[0], s12 - star[1], s22 - star[2]
        a11 = f11 * d11 + f12 * d12
        a12 = f11 * d12 + f12 * d22
        a21 = f21 * d11 + f22 * d12
        a22 = f21 * d12 + f22 * d22
        return (star[0] + a11 * f11 + a12 * f12, star[1] + a11 * f21 + a12 * f22,
                star[2] + a21 * f21 + a22 * f22)


def init_quadrature(nodes: int):
    """Gauss-Hermite nodes for |theta_0| / sqrt(x0) (theta_0 Gaussian): (z_K, w_K), w summing to 1.

    The K positive nodes of the 2K-point rule for N(0, 1), each with its mirror's weight added:
    exact for the polynomial moments of theta_0^2 up to degree 2K - 1. K = 1 puts every run at
    theta_0^2 = x0 (the plain mean field over the start).
    """
    x, w = np.polynomial.hermite_e.hermegauss(2 * nodes)
    pos = x > 0
    return x[pos], 2.0 * w[pos] / math.sqrt(2.0 * math.pi)


def _one_minus_power(b, k):
    """1 - b^k for b in [0, 1) and k >= 1 without cancellation (1 at b = 0)."""
    with np.errstate(divide="ignore"):
        return np.where(b > 0, -np.expm1(k * np.log(np.where(b > 0, b, 0.5))), 1.0)


def _ema_weight(q, n):
    """w with sum_{j<n} q^(n-1-j) x_j = (1 - q^n) / (1 - q) (x_0 + w (x_n - x_0)) for x linear in j.

    w = sum_j j q^(n-1-j) / (n sum_j q^(n-1-j)); (n - 1) / (2 n) as q -> 1, (n - 1) / n at q = 0.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        qn = q ** n
        a = (1.0 - qn) / (1.0 - q)
        s = q * (1.0 - n * q ** (n - 1) + (n - 1) * qn) / (1.0 - q) ** 2   # sum_i i q^i, i < n
        w = ((n - 1) * a - s) / (n * a)
    flat = (1.0 - q) * n < 1e-3    # the closed form cancels there; use the q -> 1 limit
    w = np.where(flat, (n - 1.0) / (2.0 * n), w)
    return np.clip(np.where(q == 0.0, (n - 1.0) / n, w), 0.0, 1.0)


def node_arrays(problem: Problem, init_nodes: int = INIT_NODES):
    """The mean field's directions: each of the d directions at each of the K start nodes
    (direction i at node k starts at E[theta^2] = x0_i z_k^2 with loss weight w_k h_i / 2).

    Returns (h, weight, noise, x0), each float64 (K d,); noise is c_i before the batch-size
    factor."""
    z_K, w_K = init_quadrature(init_nodes)
    h_D = np.tile(problem.curvature_D, z_K.size)
    weight_D = np.repeat(w_K, problem.dim) * 0.5 * h_D
    noise_D = np.tile(problem.noise_D, z_K.size)
    x0_D = np.repeat(z_K ** 2, problem.dim) * np.tile(problem.init_second_moment_D, z_K.size)
    return h_D, weight_D, noise_D, x0_D


class MeanFieldAdam:
    """The mean-field Adam second moments of N rows of metaparameters, marched in time.

    State per row and direction: (S11, S12, S22) = E of (theta^2, theta u, u^2) and V, the
    (un-normalised) EMA of E[g^2]; every row has its own step count t (N,).

    Args:
      problem: the NQM arrays, each (d,).
      batch_size, learning_rate, beta1, beta2, epsilon: scalars or arrays of one shape (N,).

    `lr_N` (N,) may be replaced between steps: a learning-rate schedule (`nqm.linear_decay`).
    """

    def __init__(self, problem: Problem, batch_size, learning_rate, beta1=0.9, beta2=0.999,
                 epsilon=0.0, init_nodes: int = INIT_NODES):
        if not isinstance(problem, Problem):
            raise ValueError(f"problem must be an nqm.problem.Problem, got {type(problem).__name__}")
        check_adam(batch_size, learning_rate, beta1, beta2, epsilon)
        init_nodes = validation.check_whole("init_nodes", init_nodes, 1, 64)
        problem.check_batch_sizes(batch_size, "batch_size")
        batch, self.lr_N, self.b1_N, self.b2_N, self.eps_N = _rows(
            batch_size, learning_rate, beta1, beta2, epsilon)
        self.h_D, self.weight_D, noise_D, x0_D = node_arrays(problem, init_nodes)
        self.sigma2_ND = noise_D * problem.noise_factor(batch)[:, None]
        n, d = self.lr_N.shape[0], self.h_D.size
        self.s11 = np.broadcast_to(x0_D, (n, d)).copy()
        self.s12 = np.zeros((n, d))
        self.s22 = np.zeros((n, d))
        self.V = np.zeros((n, d))
        self.t_N = np.zeros(n, dtype=np.int64)

    @property
    def rows(self) -> int:
        return self.lr_N.shape[0]

    def loss(self, rows=None) -> np.ndarray:
        """E[L] at each row's current step, (n,)."""
        s11 = self.s11 if rows is None else self.s11[rows]
        return s11 @ self.weight_D

    def signal_share(self) -> np.ndarray:
        """Share of each row's E[L] held by directions whose E[g^2] is mostly signal
        (h^2 E theta^2 > the gradient noise c f(B)): there the step is sign-like. (n,)."""
        part = self.s11 * self.weight_D
        signal = self.h_D ** 2 * self.s11 > self.sigma2_ND
        return np.where(signal, part, 0.0).sum(axis=1) / part.sum(axis=1)

    def _eta(self, idx, V, k):
        """Per-direction heavy-ball step size at step k (1-based) given the EMA V_k, (n, d)."""
        b1, b2 = self.b1_N[idx, None], self.b2_N[idx, None]
        kf = k.astype(np.float64)[:, None]
        vhat = V / _one_minus_power(b2, kf)
        bias1 = _one_minus_power(b1, kf)
        return self.lr_N[idx, None] * (1.0 - b1) / bias1 / (np.sqrt(vhat) + self.eps_N[idx, None])

    def advance(self, idx, n_steps):
        """Moves rows idx (n,) forward by n_steps (n,) >= 1 each, in place; returns the steps
        taken (n,), the eta (n, d) used over each row's segment (for evaluation inside it) and
        the start state. The rows must be distinct (as every caller's are; a ValueError
        otherwise): each row moves only its own state, and large calls move them on all cores.

        A row takes one exact mean-field step instead when its segment would be unstable with
        the frozen step size. Compiled (`nqm.adam_kernels.advance_rows`): the same operations
        in the same order as `advance_reference`, the numpy form it replaces, with the
        transcendental row constants still from numpy, so both give the same bits (the tests
        hold them equal; `benchmarks/adam_advance.py` measures the gain).
        """
        from nqm import adam_kernels

        idx = np.asarray(idx)
        idx = (np.flatnonzero(idx) if idx.dtype == bool else idx.astype(np.int64)).reshape(-1)
        n = np.ascontiguousarray(np.broadcast_to(np.asarray(n_steps, dtype=np.int64), idx.shape))
        b1, b2 = self.b1_N[idx, None], self.b2_N[idx, None]
        t0 = self.t_N[idx]
        s0 = (self.s11[idx], self.s12[idx], self.s22[idx])

        # `_eta`'s row factors at step k, (rows,) each: a (1 - b1) / (1 - b1^k) and 1 - b2^k
        def constants(rows, k):
            kf = k.astype(np.float64)[:, None]
            coef = self.lr_N[idx[rows], None] * (1.0 - b1[rows]) / _one_minus_power(b1[rows], kf)
            return coef.reshape(-1), _one_minus_power(b2[rows], kf).reshape(-1)

        coef_first, omp2_first = constants(slice(None), t0 + 1)
        coef_last, omp2_last, qn, w = (np.zeros(idx.size) for _ in range(4))
        m = np.flatnonzero(n > 1)   # the rows that may take a segment (`advance_reference`'s m)
        if m.size:
            coef_last[m], omp2_last[m] = constants(m, t0[m] + n[m])
            nm = n[m][:, None]
            qn[m] = (b2[m] ** nm).reshape(-1)
            w[m] = _ema_weight(b2[m], nm).reshape(-1)
        eta_used = np.empty((idx.size, self.h_D.size))
        step = np.empty(idx.size, dtype=np.int64)
        adam_kernels.advance_rows(self.s11, self.s12, self.s22, self.V, idx, self.h_D,
                                  self.sigma2_ND, self.b1_N[idx], self.b2_N[idx],
                                  self.eps_N[idx], coef_first, omp2_first, coef_last, omp2_last,
                                  qn, w, n, eta_used, step)
        self.t_N[idx] = t0 + step
        return step, eta_used, s0

    def advance_reference(self, idx, n_steps):
        """`advance` in numpy: the reference the compiled form is tested against."""
        h = self.h_D
        b1, b2 = self.b1_N[idx, None], self.b2_N[idx, None]
        sig = self.sigma2_ND[idx]
        s0 = (self.s11[idx], self.s12[idx], self.s22[idx])
        V0 = self.V[idx]
        t0 = self.t_N[idx]
        n = np.asarray(n_steps, dtype=np.int64)
        x0 = h * h * s0[0] + sig
        V1 = b2 * V0 + (1.0 - b2) * x0
        eta_first = self._eta(idx, V1, t0 + 1)
        single = one_step(*s0, eta_first, h, b1, sig)
        multi = (n > 1) & stable(eta_first, h, b1)
        out = list(single)
        V_out = V1
        eta_used = eta_first
        m = np.flatnonzero(multi)
        if m.size:
            nm = n[m][:, None]
            sm = tuple(s[m] for s in s0)
            b1m, b2m, sigm = b1[m], b2[m], sig[m]
            qn = b2m ** nm
            w = _ema_weight(b2m, nm)

            def segment(eta):
                st = closed_form(*sm, eta, h, b1m, sigm, nm)
                xn = h * h * st[0] + sigm
                V_end = qn * V0[m] + (1.0 - qn) * (x0[m] + w * (xn - x0[m]))
                return st, V_end

            pred, V_end = segment(eta_first[m])
            eta_last = self._eta(idx[m], V_end, t0[m] + n[m])
            eta_mid = 0.5 * (eta_first[m] + eta_last)
            ok = stable(eta_mid, h, b1m) & np.all(np.isfinite(pred[0]), axis=1)
            corr, V_corr = segment(eta_mid)
            keep = m[ok]
            for j in range(3):
                out[j][keep] = corr[j][ok]
            V_out = V_out.copy()
            V_out[keep] = V_corr[ok]
            eta_used = eta_used.copy()
            eta_used[keep] = eta_mid[ok]
            multi = np.zeros_like(multi)
            multi[keep] = True
        step = np.where(multi, n, 1)
        self.s11[idx], self.s12[idx], self.s22[idx] = out
        self.V[idx] = V_out
        self.t_N[idx] = t0 + step
        return step, eta_used, s0

    def segment_lengths(self, idx, stop_N, growth=GROWTH):
        """max(1, floor(growth t)), not past stop, (n,)."""
        t = self.t_N[idx]
        return np.minimum(np.maximum(1, (growth * t).astype(np.int64)), stop_N - t)


def _check_growth(growth):
    return validation.check_in_range("growth", growth, 0.0, 1.0, closed_low=False)


def expected_loss(problem: Problem, steps, batch_size, learning_rate, beta1=0.9, beta2=0.999,
                  epsilon=0.0, growth: float = GROWTH, init_nodes: int = INIT_NODES) -> np.ndarray:
    """Mean-field E[L] of Adam after each of `steps` for N metaparameter rows (segmented).

    Args:
      problem: the NQM arrays.
      steps: whole numbers >= 0, shape (T,).
      batch_size, learning_rate, beta1, beta2, epsilon: scalars or arrays of one shape (N,).
      growth: segment length as a fraction of the current step (0, 1]; smaller is more accurate.

    Returns:
      (N, T) float64.
    """
    steps = validation.check_whole_array("steps", steps, 0)
    growth = _check_growth(growth)
    model = MeanFieldAdam(problem, batch_size, learning_rate, beta1, beta2, epsilon, init_nodes)
    order = np.argsort(steps, kind="stable")
    out = np.empty((model.rows, steps.shape[0]))
    all_rows = np.arange(model.rows)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in order:
            stop = np.full(model.rows, steps[j])
            for _ in range(MAX_ITERATIONS):
                idx = all_rows[model.t_N < stop]
                if idx.size == 0:
                    break
                model.advance(idx, model.segment_lengths(idx, stop[idx], growth))
            out[:, j] = model.loss()
    return out


def steps_to_target(problem: Problem, batch_size, learning_rate, beta1=0.9, beta2=0.999,
                    epsilon=0.0, max_steps: int = 10 ** 6, growth: float = GROWTH,
                    init_nodes: int = INIT_NODES, group_N=None) -> np.ndarray:
    """First step at which the mean-field E[L] is at or below problem.target, per row.

    group_N: optional ints (N,); rows of one group compete (e.g. learning rates at one batch
    size): a row stops, unreached, once another row of its group reached the target sooner.

    Segments are marched until a segment ends at or below the target; inside that segment the
    frozen-preconditioner closed form is bisected to the step (a dip below the target that
    comes back up inside one segment is not seen). Returns int64 (N,), -1 where not reached
    within max_steps.
    """
    max_steps = validation.check_whole("max_steps", max_steps, 1, 10 ** 12)
    growth = _check_growth(growth)
    model = MeanFieldAdam(problem, batch_size, learning_rate, beta1, beta2, epsilon, init_nodes)
    target = problem.target
    result = np.full(model.rows, -1, dtype=np.int64)
    result[model.loss() <= target] = 0
    active = result < 0
    stop = np.full(model.rows, max_steps)
    group = np.zeros(model.rows, dtype=np.int64) if group_N is None else np.unique(
        np.asarray(group_N), return_inverse=True)[1].reshape(-1)
    if group.shape != (model.rows,):
        raise ValueError(f"group_N must have one entry per row ({model.rows}), got {group.shape}")
    h = model.h_D
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(MAX_ITERATIONS):
            idx = np.flatnonzero(active & (model.t_N < stop))
            if idx.size == 0:
                break
            t_before = model.t_N[idx].copy()
            n, eta, s0 = model.advance(idx, model.segment_lengths(idx, stop[idx], growth))
            hit = model.loss(idx) <= target
            if not hit.any():
                continue
            rows = idx[hit]
            lo = np.zeros(rows.size, dtype=np.int64)     # lo: above target, hi: at or below
            hi = n[hit].copy()
            b1 = model.b1_N[rows, None]
            sig = model.sigma2_ND[rows]
            start = tuple(s[hit] for s in s0)
            e = eta[hit]
            while np.any(hi - lo > 1):
                mid = (lo + hi) // 2
                st = closed_form(*start, e, h, b1, sig, mid[:, None])
                below = (st[0] @ model.weight_D) <= target
                open_ = hi - lo > 1
                hi = np.where(open_ & below, mid, hi)
                lo = np.where(open_ & ~below, mid, lo)
            result[rows] = t_before[hit] + hi
            active[rows] = False
            if group_N is not None:
                best = np.full(group.max() + 1, max_steps)
                np.minimum.at(best, group[rows], result[rows])
                stop = np.minimum(stop, best[group])
    return result


def iterate_losses(problem: Problem, steps: int, batch_size: float, learning_rate: float,
                   beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 0.0,
                   init_nodes: int = INIT_NODES) -> np.ndarray:
    """Mean-field E[L] at t = 0..steps by iterating the one-step recurrence (the reference).

    Returns float64 (steps + 1,).
    """
    steps = validation.check_whole("steps", steps, 0)
    model = MeanFieldAdam(problem, batch_size, learning_rate, beta1, beta2, epsilon, init_nodes)
    if model.rows != 1:
        raise ValueError("iterate_losses takes scalar metaparameters (one row)")
    out = np.empty(steps + 1)
    out[0] = model.loss()[0]
    idx = np.array([0])
    one = np.array([1])
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps):
            model.advance(idx, one)
            out[t + 1] = model.loss()[0]
    return out


def simulate_losses(problem: Problem, steps: int, batch_size: float, learning_rate,
                    beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 0.0,
                    runs: int = 500, seed: int = 0, rotation_DD=None) -> MonteCarloResult:
    """Monte Carlo of real Adam (random V, bias corrections) on the NQM.

    Args:
      learning_rate: a > 0, or one per step (shape (steps,): a schedule, as in
        `nqm.montecarlo.simulate_losses`).
      rotation_DD: optional orthogonal R (d, d); Adam then works in coordinates x = R theta,
        where the Hessian is R diag(h) R^T and the noise covariance R diag(c f(B)) R^T (Adam's
        coordinates are not the eigenbasis). None: the identity (the diagonal NQM).
      runs: R >= 2 independent runs; seed for `np.random.default_rng`.

    Returns:
      Mean loss and its standard error at t = 0..steps.
    """
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be an nqm.problem.Problem, got {type(problem).__name__}")
    steps = validation.check_whole("steps", steps, 0)
    runs = validation.check_whole("runs", runs, 2)
    seed = validation.check_whole("seed", seed, 0)
    rates = check_learning_rates(learning_rate, steps)
    check_adam(batch_size, 1.0, beta1, beta2, epsilon)
    problem.check_batch_sizes(batch_size, "batch_size")
    d = problem.dim
    # None: Adam's coordinates are the eigenbasis (no rotation to multiply by: d^2 per run-step)
    R = None if rotation_DD is None else check_rotation(rotation_DD, d)
    b1, b2, eps = float(beta1), float(beta2), float(epsilon)
    noise_std_D = np.sqrt(problem.noise_D * problem.noise_factor(float(batch_size)))
    h = problem.curvature_D
    rng = np.random.default_rng(seed)
    # eigen-coordinates z = R^T x: the gradient there is h z + xi, xi ~ N(0, c f(B)) per direction
    z = rng.standard_normal((runs, d)) * np.sqrt(problem.init_second_moment_D)
    m = np.zeros((runs, d))
    V = np.zeros((runs, d))
    loss = np.empty((steps + 1, runs))
    loss[0] = (z * z) @ (0.5 * h)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(1, steps + 1):
            g = h * z + noise_std_D * rng.standard_normal((runs, d))
            if R is not None:
                g = g @ R.T                                      # Adam's coordinates
            m = b1 * m + (1.0 - b1) * g
            V = b2 * V + (1.0 - b2) * g * g
            step = (m / (1.0 - b1 ** k)) / (np.sqrt(V / (1.0 - b2 ** k)) + eps)
            z = z - rates[k - 1] * (step if R is None else step @ R)
            loss[k] = (z * z) @ (0.5 * h)
    mean = loss.mean(axis=1)
    err = loss.std(axis=1, ddof=1) / math.sqrt(runs)
    return MonteCarloResult(mean_T=mean, stderr_T=err, runs=runs, seed=seed)


def check_rotation(rotation_DD, dim: int) -> np.ndarray:
    """R as a (d, d) float64 array if it is orthogonal (R R^T = I to 1e-8)."""
    R = np.asarray(rotation_DD, dtype=np.float64)
    if R.shape != (dim, dim) or not np.allclose(R @ R.T, np.eye(dim), atol=1e-8):
        raise ValueError(f"rotation must be an orthogonal ({dim}, {dim}) matrix, got shape {R.shape}")
    return R

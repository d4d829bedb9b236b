"""Exact expected loss of SGD, heavy-ball momentum and iterate averaging on the NQM, in closed form.

Each optimizer moves the first moments of direction i by a 2x2 map F_i and adds noise
`sigma_i^2 f_i f_i^T` to the second moments, `sigma_i^2 = c_i f(B)` (`f = Problem.noise_factor`:
1 / B, with the finite-population correction when the problem has a training-set size). With S* the stationary second
moment matrix (a fixed point of `S -> F S F^T + sigma^2 f f^T`), the deviation obeys
`S_t - S* = F^t (S_0 - S*) F^{tT}` exactly, so

    E[L](t) = sum_i 1/2 h_i (S*_i + F_i^t (S_0 - S*_i) F_i^{tT})_ee,

e the coordinate the loss is read at (theta, or the average for iterate averaging). `F^t` comes
from `nqm.powers`, accurate at critical damping. Every array here has a leading axis N (one row
per combination of batch size and metaparameters) and a trailing axis d (directions).

References:
  Zhang et al. 2019, "Which algorithmic choices matter at which batch sizes?", section 3 and
  appendix A (the NQM dynamics of SGD, momentum, preconditioning and averaging).
"""

from __future__ import annotations

import importlib

import numpy as np

from nqm import validation
from nqm.powers import LucasSequence, divided_power, signed_power
from nqm.problem import Problem, preconditioned


# Family codes of `nqm.kernels.loss_rows`, repeated here so that importing this module does not
# import numba: plain SGD runs on numpy alone, and numba's import and first dispatch (~0.5 s)
# are paid only by the families that run compiled loops.
SGD, MOMENTUM, EMA = 0, 1, 2
_BLOCK_ELEMENTS = 16384  # rows x directions per numpy pass (temporaries of 128 KiB stay in cache)


def _kernels():
    """`nqm.kernels`, imported on first use."""
    return importlib.import_module("nqm.kernels")


def _broadcast_rows(*values):
    arrays = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in values]
    shapes = {a.shape for a in arrays if a.size != 1}
    if len(shapes) > 1:
        raise ValueError(f"metaparameter arrays must share one shape, got {sorted(shapes)}")
    arrays = np.broadcast_arrays(*arrays)
    return [np.ascontiguousarray(a.reshape(-1)) for a in arrays]


def sgd_stationary(lr, noise, inv_batch, curvature):
    """Plain SGD's stationary second moment a c f(B) / (h (2 - a h)) per direction, broadcast
    over the arguments (learning rate a, per-example noise c, noise factor f(B) = inv_batch,
    effective curvature h); inf or negative past the stability limit a h >= 2."""
    return lr * noise * inv_batch / (curvature * (2.0 - lr * curvature))


def check_metaparameters(batch_size, learning_rate, momentum, ema_decay):
    """Validates arrays of metaparameters (vectorised); raises ValueError naming the first bad one."""
    validation.check_all_in_range("batch_size", batch_size, 1.0, np.inf)
    validation.check_all_in_range("learning_rate", learning_rate, 0.0, np.inf, closed_low=False)
    validation.check_all_in_range("momentum", momentum, 0.0, 1.0, closed_high=False)
    validation.check_all_in_range("ema_decay", ema_decay, 0.0, 1.0, closed_high=False)


class Dynamics:
    """Closed-form second moments of one optimizer family for N metaparameter rows.

    The hot path (`loss_parts`) is a compiled loop (`nqm.kernels`) over rows and directions that
    builds nothing of size N x d (plain SGD: numpy with cached logarithms); `state` (the full second moments, used to chain schedule
    segments and as an independent numpy reference) works on (n, d) arrays.

    Attributes:
      weight_D: 1/2 h_i, the loss weight of direction i (true curvature), shape (d,).
      h_D, c_D: effective curvature and per-example noise (after preconditioning), (d,).
      lr_N, param_N, inv_batch_N: step size, momentum or average decay, and the noise factor f(B)
        (1 / B for an unlimited training set; `Problem.noise_factor`), each (N,).
      start: start second moments (S11, S12, S22), each (M, d); row n starts from row
        start_index_N[n].
      stable_N: spectral radius of every F_i below 1, (N,).
    """

    kind = "base"
    _loss_index = 0  # which entry of (S11, S12, S22) holds the loss coordinate's second moment

    def __init__(self, weight_D, h_D, c_D, lr_N, param_N, inv_batch_N, start, start_index_N):
        self.weight_D = weight_D
        self.h_D = h_D
        self.c_D = c_D
        self.lr_N = lr_N
        self.param_N = param_N
        self.inv_batch_N = inv_batch_N
        self.start = tuple(np.ascontiguousarray(s, dtype=np.float64) for s in start)
        self.start_index_N = np.ascontiguousarray(start_index_N, dtype=np.int64)
        self.stable_N = self._stable()

    @property
    def rows(self) -> int:
        return self.lr_N.shape[0]

    def take(self, rows) -> "Dynamics":
        """The same system restricted to rows `rows` (no copy of the (M, d) start)."""
        rows = np.asarray(rows)
        return type(self)(self.weight_D, self.h_D, self.c_D, self.lr_N[rows], self.param_N[rows],
                          self.inv_batch_N[rows], self.start, self.start_index_N[rows])

    # -- family-specific pieces -------------------------------------------------------------
    def _stable(self):
        raise NotImplementedError

    _family = None  # kernels.SGD, MOMENTUM or EMA

    def _kernel(self, t_n, idx):
        """(total, noise) of rows idx (stable, t >= 1) from the compiled loop."""
        s11, s12, s22 = self.start
        return _kernels().loss_rows(self._family, self.h_D, self.c_D, self.weight_D, s11, s12, s22,
                                 self.start_index_N[idx], self.lr_N[idx], self.param_N[idx],
                                 self.inv_batch_N[idx], t_n)

    def _stationary(self, idx):
        """S* (S11, S12, S22), each (n, d), for rows idx."""
        raise NotImplementedError

    def _power(self, t_n, idx):
        """F^t as four (n, d) arrays (f11, f12, f21, f22); t_n of shape (n, 1)."""
        raise NotImplementedError

    # -- evaluation -----------------------------------------------------------------------
    def loss_parts(self, t_N, rows=None):
        """(E[L], its noise part) after t steps, each (n,); inf where unstable.

        The noise part is the loss of the same run started from zero second moments: the noise
        injected so far. For a constant step size it never decreases with t (it is a sum of
        squared impulse responses), so once it exceeds the target no later step can reach it.
        """
        idx = np.arange(self.rows) if rows is None else np.asarray(rows)
        t_n = np.ascontiguousarray(np.broadcast_to(np.asarray(t_N, dtype=np.int64), idx.shape))
        if np.any(t_n < 0):
            raise ValueError("steps must be >= 0")
        stable = self.stable_N[idx]
        total = np.full(idx.shape[0], np.inf)
        noise = np.full(idx.shape[0], np.inf)
        ok = np.flatnonzero(stable & (t_n > 0))
        if ok.size:
            total[ok], noise[ok] = self._kernel(t_n[ok], idx[ok])
        # t = 0: the start itself, summed as `Problem.initial_loss` sums it (same rounding)
        zero = np.flatnonzero(stable & (t_n == 0))
        if zero.size:
            start_e = self.start[self._loss_index][self.start_index_N[idx[zero]]]
            total[zero] = start_e @ self.weight_D
            noise[zero] = 0.0
        return total, noise

    def loss(self, t_N, rows=None) -> np.ndarray:
        """E[L] after t steps, shape (n,) (n = len(rows) or N); inf where unstable."""
        return self.loss_parts(t_N, rows)[0]

    def signal_noise(self, t_N, rows=None):
        """(signal, noise) parts of E[L] after t steps, each (n,): E[L] = signal + noise.

        Built at batch size 1 (f(1) = 1), the loss at batch size B is signal + noise f(B) (the
        stationary moments scale as f(B) and the signal does not depend on B). inf where unstable.
        """
        total, noise = self.loss_parts(t_N, rows)
        with np.errstate(invalid="ignore"):
            return np.where(np.isfinite(total), total - noise, np.inf), noise

    @property
    def monotone_N(self) -> np.ndarray:
        """Rows whose E[L](t) is known to be non-increasing in t, (N,) bool."""
        return np.zeros(self.rows, dtype=bool)

    @property
    def stationary_loss_N(self) -> np.ndarray:
        """lim E[L](t), (N,); inf where unstable."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            s_e = self._stationary(np.arange(self.rows))[self._loss_index] @ self.weight_D
        return np.where(self.stable_N, s_e, np.inf)

    def _start_rows(self, idx):
        return tuple(s[self.start_index_N[idx]] for s in self.start)

    def state(self, t_N, rows=None):
        """Second moments (S11, S12, S22) after t steps, each (n, d), from S* + F^t D F^tT.

        A numpy implementation independent of the compiled kernels: the start of the next
        schedule segment, and the reference the tests hold the kernels to.
        """
        idx = np.arange(self.rows) if rows is None else np.asarray(rows)
        t_n = np.broadcast_to(np.asarray(t_N, dtype=np.int64), idx.shape)[:, None]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            star = self._stationary(idx)
            s0 = self._start_rows(idx)
            d11, d12, d22 = (a - b for a, b in zip(s0, star))
            f11, f12, f21, f22 = self._power(t_n, idx)
            a11 = f11 * d11 + f12 * d12
            a12 = f11 * d12 + f12 * d22
            a21 = f21 * d11 + f22 * d12
            a22 = f21 * d12 + f22 * d22
            out = (star[0] + a11 * f11 + a12 * f12,
                   star[1] + a11 * f21 + a12 * f22,
                   star[2] + a21 * f21 + a22 * f22)
        # t = 0 exactly the start (S* + (S0 - S*) can be off in the last bit)
        zero = (t_n == 0)
        return tuple(np.where(zero, s, o) for s, o in zip(s0, out))

    def _step_map(self, row: int):
        """(F entries, noise direction g) of one step for one row, each (d,)."""
        raise NotImplementedError

    def trajectory(self, row: int, steps: int) -> np.ndarray:
        """E[L](t) for t = 0..steps of one row, by iterating the one-step recurrence (compiled).

        Returns inf everywhere for an unstable row; float64 (steps + 1,).
        """
        if not self.stable_N[row]:
            return np.full(steps + 1, np.inf)
        out = self.jump_trajectory(row, np.zeros(int(steps), dtype=np.int64))
        out[0] = self.loss(np.array([0]), np.array([row]))[0]
        return out

    def jump_trajectory(self, row: int, log2_jumps) -> np.ndarray:
        """E[L] of one row at the start and after each jump of 2^m steps (m from `log2_jumps`,
        non-decreasing ints, (R,)), by the jumped recurrence (`kernels.jump_trajectory`).

        Returns inf everywhere for an unstable row; float64 (R + 1,).
        """
        jumps = np.ascontiguousarray(log2_jumps, dtype=np.int64)
        if not self.stable_N[row]:
            return np.full(jumps.size + 1, np.inf)
        args = self._recurrence_args(row)
        return _kernels().jump_trajectory(*args, self.weight_D, self._loss_index, jumps)

    def _recurrence_args(self, row: int):
        """(f11, f12, f21, f22, g1, g2, sigma2, s11, s12, s22) of one row, each (d,)."""
        (f11, f12, f21, f22), (g1, g2) = self._step_map(row)
        d = self.h_D.shape[0]
        f11, f12, f21, f22, g1, g2 = (np.ascontiguousarray(np.broadcast_to(x, (d,)), dtype=float)
                                      for x in (f11, f12, f21, f22, g1, g2))
        s11, s12, s22 = (s[self.start_index_N[row]] for s in self.start)
        return f11, f12, f21, f22, g1, g2, self.c_D * self.inv_batch_N[row], s11, s12, s22

    def _rows_ah(self, idx):
        return self.lr_N[idx][:, None] * self.h_D


class SGDDynamics(Dynamics):
    """Plain (preconditioned) SGD: E theta_{t+1}^2 = r^2 E theta_t^2 + a^2 sigma^2, r = 1 - a h.

    Stable iff 0 < a h < 2; stationary E theta^2 = a sigma^2 / (h (2 - a h)).
    """

    kind = "sgd"
    _family = SGD

    def _stable(self):
        return (self.lr_N > 0) & (self.lr_N * self.h_D.max() < 2.0)

    def _kernel(self, t_n, idx):
        # numpy, with log r^2 and the weighted moments cached for the next evaluation (a ladder
        # scan evaluates one system again and again). Plain SGD never needs numba (see
        # `_kernels`); the compiled loop `kernels._sgd_row` is the tests' second opinion.
        if not hasattr(self, "_log_r2"):
            a = self.lr_N[:, None]
            ah = a * self.h_D
            with np.errstate(divide="ignore", invalid="ignore"):
                # Floored so that 0 * log_r2 stays 0 when r = 0 (e^-700 is 0 in double).
                self._log_r2 = np.maximum(2.0 * np.log(np.abs(1.0 - ah)), -700.0)
                self._ws = sgd_stationary(a, self.c_D, self.inv_batch_N[:, None],
                                          self.h_D) * self.weight_D
            self._ws_sum = self._ws.sum(axis=1)
            self._wx0 = self.start[0] * self.weight_D
        n = idx.shape[0]
        ws_q = np.empty(n)
        signal = np.empty(n)
        one_start = self._wx0.shape[0] == 1
        # A few rows at a time, so that the (rows, d) temporaries stay in cache.
        block = max(1, _BLOCK_ELEMENTS // self.h_D.shape[0])
        with np.errstate(under="ignore", over="ignore", invalid="ignore"):
            for i in range(0, n, block):
                rows = idx[i:i + block]
                q = np.multiply(t_n[i:i + block, None].astype(np.float64), self._log_r2[rows])
                # Clamped at e^-500 ~ 1e-217 (far below rounding): smaller q times small weights
                # gives denormal products, which make the dot products several times slower.
                np.maximum(q, -500.0, out=q)
                np.exp(q, out=q)
                ws_q[i:i + block] = np.einsum("nd,nd->n", q, self._ws[rows])
                signal[i:i + block] = (q @ self._wx0[0] if one_start else np.einsum(
                    "nd,nd->n", q, self._wx0[self.start_index_N[rows]]))
            noise = np.where(t_n == 0, 0.0, self._ws_sum[idx] - ws_q)
        return noise + signal, noise

    @property
    def monotone_N(self) -> np.ndarray:
        # Each direction moves monotonically from its start to s (q = r^(2t) decreases), so the
        # loss is non-increasing when every direction starts at or above its stationary moment.
        s11 = self._stationary(np.arange(self.rows))[0]
        return np.all(self.start[0][self.start_index_N] >= s11, axis=1)

    def _stationary(self, idx):
        a = self.lr_N[idx][:, None]
        s11 = sgd_stationary(a, self.c_D, self.inv_batch_N[idx][:, None], self.h_D)
        zero = np.zeros_like(s11)
        return (s11, zero, zero)

    def _step_map(self, row):
        a = self.lr_N[row]
        return (1.0 - a * self.h_D, 0.0, 0.0, 0.0), (-a, 0.0)

    def _power(self, t_n, idx):
        rt = signed_power(1.0 - self._rows_ah(idx), t_n)
        zero = np.zeros_like(rt)
        return rt, zero, zero, zero


class MomentumDynamics(Dynamics):
    """Heavy-ball momentum, state (theta, v): v' = b v + g, theta' = theta - a v'.

    F = [[1 - a h, -a b], [h, b]], f = (-a, 1); trace tau = 1 - a h + b, determinant b.
    Stable iff 0 < a h < 2 (1 + b) and b < 1. Stationary moments, with
    u = a sigma^2 (1 + b) / (h (1 - b) (2 (1 + b) - a h)):
    E theta^2 = u, E theta v = -u h / (1 + b), E v^2 = 2 u h / ((1 + b) a).
    F^t = p_t (F - tau I) + p_{t+1} I with p the Lucas sequence of (tau, b).
    """

    kind = "momentum"
    _family = MOMENTUM

    def _stable(self):
        b = self.param_N
        return (self.lr_N > 0) & (self.lr_N * self.h_D.max() < 2.0 * (1.0 + b)) & (b < 1.0)

    def _stationary(self, idx):
        a = self.lr_N[idx][:, None]
        b = self.param_N[idx][:, None]
        h = self.h_D
        u = (a * self.c_D * self.inv_batch_N[idx][:, None] * (1.0 + b)
             / (h * (1.0 - b) * (2.0 * (1.0 + b) - a * h)))
        return (u, -u * h / (1.0 + b), 2.0 * u * h / ((1.0 + b) * a))

    def _step_map(self, row):
        a, b = self.lr_N[row], self.param_N[row]
        return (1.0 - a * self.h_D, -a * b, self.h_D, b), (-a, 1.0)

    def _power(self, t_n, idx):
        a = self.lr_N[idx][:, None]
        b = np.broadcast_to(self.param_N[idx][:, None], (idx.size, self.h_D.size))
        ah = a * self.h_D
        tau = 1.0 - ah + b
        sqrt_b = np.sqrt(b)
        # |tau| - 2 sqrt(b) without cancellation near critical damping.
        gap = np.where(tau >= 0, (1.0 - sqrt_b) ** 2 - ah, ah - (1.0 + sqrt_b) ** 2)
        seq = LucasSequence(np.abs(tau), b, gap, tau < 0)
        p_t, p_next = seq(t_n), seq(t_n + 1)
        h = self.h_D
        return (p_t * (1.0 - ah - tau) + p_next, -p_t * a * b,
                p_t * h, p_t * (b - tau) + p_next)


class EMADynamics(Dynamics):
    """SGD with an exponential moving average of the iterates, read at the average.

    State (theta, A): theta' = r theta - a eps, A' = g A + (1 - g) theta', A_0 = theta_0.
    F = [[r, 0], [(1 - g) r, g]], F^t = [[r^t, 0], [(1 - g) r (r^t - g^t) / (r - g), g^t]].
    Stationary: s_tt = a sigma^2 / (h (2 - a h)), s_ta = (1 - g) s_tt / (1 - g r),
    s_aa = (2 g (1 - g) r s_ta + (1 - g)^2 s_tt) / (1 - g^2).
    """

    kind = "ema"
    _family = EMA
    _loss_index = 2

    def _stable(self):
        g = self.param_N
        return (self.lr_N > 0) & (self.lr_N * self.h_D.max() < 2.0) & (g < 1.0)

    def _stationary(self, idx):
        a = self.lr_N[idx][:, None]
        g = self.param_N[idx][:, None]
        ah = a * self.h_D
        r = 1.0 - ah
        s_tt = sgd_stationary(a, self.c_D, self.inv_batch_N[idx][:, None], self.h_D)
        s_ta = (1.0 - g) * s_tt / (1.0 - g * r)
        s_aa = (2.0 * g * (1.0 - g) * r * s_ta + (1.0 - g) ** 2 * s_tt) / (1.0 - g * g)
        return (s_tt, s_ta, s_aa)

    def _step_map(self, row):
        a, g = self.lr_N[row], self.param_N[row]
        r = 1.0 - a * self.h_D
        return (r, 0.0, (1.0 - g) * r, g), (-a, -(1.0 - g) * a)

    def _power(self, t_n, idx):
        g = self.param_N[idx][:, None]
        r = 1.0 - self._rows_ah(idx)
        rt = signed_power(r, t_n)
        gt = np.broadcast_to(g ** t_n, rt.shape)
        return rt, np.zeros_like(rt), (1.0 - g) * r * divided_power(r, g, t_n), gt


def initial_state(problem: Problem, kind: str):
    """S_0 as (1, d) rows: E theta^2 = x0, zero velocity, average started at theta_0."""
    x0 = problem.init_second_moment_D[None, :]
    zero = np.zeros_like(x0)
    if kind == "ema":
        return (x0, x0, x0)
    return (x0, zero, zero)


def dynamics(problem: Problem, batch_size, learning_rate, momentum=0.0, ema_decay=0.0,
             precond_power: float = 0.0, start=None) -> Dynamics:
    """The closed-form second-moment system for N rows of metaparameters.

    Args:
      problem: the NQM arrays.
      batch_size, learning_rate, momentum, ema_decay: scalars or arrays of one shape (N,),
        broadcast together; momentum and ema_decay may not both be non-zero in one row.
      precond_power: p in [0, 1], preconditioner H^-p.
      start: optional initial second moments (S11, S12, S22), each (N, d), in the family's state
        basis (used to chain schedule segments).

    Returns:
      A `Dynamics` whose `loss(t)` is E[L] after t steps.
    """
    check_metaparameters(batch_size, learning_rate, momentum, ema_decay)
    problem.check_batch_sizes(batch_size, "batch_size")
    batch_N, lr_N, b_N, g_N = _broadcast_rows(batch_size, learning_rate, momentum, ema_decay)
    if np.any(b_N > 0) and np.any(g_N > 0):
        raise ValueError("momentum and ema_decay cannot both be > 0 (in one run or in one call): "
                         "iterate averaging is modelled on plain SGD; set one of them to 0")
    if np.any(g_N > 0):
        kind, param = "ema", g_N
    elif np.any(b_N > 0):
        kind, param = "momentum", b_N
    else:
        kind, param = "sgd", b_N
    rows = RowsFactory(problem, kind, precond_power)
    if start is None:
        return rows(batch_N, lr_N, param)
    n = lr_N.shape[0]
    start = tuple(np.broadcast_to(np.asarray(s, dtype=np.float64), (n, problem.dim))
                  for s in start)
    return rows.cls(rows.weight_D, rows.h_D, rows.c_D, lr_N, param,
                    problem.noise_factor(batch_N), start, np.arange(n))


class RowsFactory:
    """Builds `Dynamics` of one family on one problem from start-of-run rows, for a search that
    asks for thousands of small row sets (`dynamics` builds through it after its checks): the
    preconditioned arrays and the start are made once, and nothing is checked per call (the
    caller keeps its rows valid: batch sizes the problem accepts, learning rates > 0, momentum
    or decay in [0, 1) of its own family)."""

    def __init__(self, problem: Problem, kind: str, precond_power: float = 0.0):
        classes = {"sgd": SGDDynamics, "momentum": MomentumDynamics, "ema": EMADynamics}
        if kind not in classes:
            raise ValueError(f"kind must be one of {', '.join(classes)}, got {kind!r}")
        self.problem = problem
        self.cls = classes[kind]
        self.h_D, self.c_D = preconditioned(problem.curvature_D, problem.noise_D, precond_power)
        self.weight_D = 0.5 * problem.curvature_D
        self.start = tuple(np.ascontiguousarray(s, dtype=np.float64)
                           for s in initial_state(problem, kind))

    def __call__(self, batch_N, lr_N, param_N) -> Dynamics:
        """Rows (N,) each: batch size, learning rate, momentum or average decay (0 for SGD)."""
        lr_N = np.ascontiguousarray(lr_N, dtype=np.float64)
        return self.cls(self.weight_D, self.h_D, self.c_D, lr_N,
                        np.ascontiguousarray(param_N, dtype=np.float64),
                        self.problem.noise_factor(np.asarray(batch_N, dtype=np.float64)),
                        self.start, np.zeros(lr_N.shape[0], dtype=np.int64))


def expected_loss(problem: Problem, steps, batch_size, learning_rate, momentum=0.0,
                  ema_decay=0.0, precond_power: float = 0.0) -> np.ndarray:
    """E[L] after each of `steps` for each metaparameter row.

    Args:
      steps: integer step counts >= 0, shape (T,).
      batch_size, learning_rate, momentum, ema_decay: as in `dynamics`, N rows.

    Returns:
      Array (N, T) of expected losses; inf for unstable rows.
    """
    steps = validation.check_whole_array("steps", steps, 0)
    dyn = dynamics(problem, batch_size, learning_rate, momentum, ema_decay, precond_power)
    out = np.empty((dyn.rows, steps.shape[0]))
    for j, t in enumerate(steps):
        out[:, j] = dyn.loss(np.full(dyn.rows, t))
    return out

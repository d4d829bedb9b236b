"""Exact expected loss of SGD, heavy-ball momentum and iterate averaging on the NQM, in closed form.

Each optimizer moves the first moments of direction i by a 2x2 map F_i and adds noise
`sigma_i^2 f_i f_i^T` to the second moments, `sigma_i^2 = c_i / B`. With S* the stationary second
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

import numpy as np

from nqm import validation
from nqm.powers import LucasSequence, divided_power
from nqm.problem import Problem, preconditioned


def _broadcast_rows(*values):
    arrays = [np.atleast_1d(np.asarray(v, dtype=np.float64)) for v in values]
    shapes = {a.shape for a in arrays if a.size != 1}
    if len(shapes) > 1:
        raise ValueError(f"metaparameter arrays must share one shape, got {sorted(shapes)}")
    arrays = np.broadcast_arrays(*arrays)
    return [np.ascontiguousarray(a.reshape(-1)) for a in arrays]


def check_metaparameters(batch_size, learning_rate, momentum, ema_decay):
    """Validates arrays of metaparameters; raises ValueError naming the first bad one."""
    checks = (("batch_size", batch_size, 1.0, np.inf, True, True),
              ("learning_rate", learning_rate, 0.0, np.inf, False, True),
              ("momentum", momentum, 0.0, 1.0, True, False),
              ("ema_decay", ema_decay, 0.0, 1.0, True, False))
    for name, value, low, high, closed_low, closed_high in checks:
        arr = np.asarray(value, dtype=np.float64)
        bad = ~np.isfinite(arr) | (arr < low if closed_low else arr <= low) | (
            arr > high if closed_high else arr >= high)
        if np.any(bad):
            first = float(arr.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]])
            left = "[" if closed_low else "("
            right = "]" if closed_high and np.isfinite(high) else ")"
            raise ValueError(f"{name} must be in {left}{low:g}, {high:g}{right}, got {first:g}")


class Dynamics:
    """Closed-form second moments of one optimizer family for N metaparameter rows.

    Attributes:
      weight_D: 1/2 h_i, the loss weight of direction i, shape (d,).
      stable_N: spectral radius of every F_i below 1, shape (N,).
      stationary_loss_N: lim E[L](t) (inf where unstable), shape (N,).
    """

    kind = "base"

    def __init__(self, weight_D, stable_N, star, start):
        self.weight_D = weight_D
        self.stable_N = stable_N
        self.star = star          # (S11, S12, S22), each (N, d)
        self.dev = tuple(s0 - s for s0, s in zip(start, star))
        s_e = star[self._loss_index]
        with np.errstate(invalid="ignore"):
            self.stationary_loss_N = np.where(stable_N, s_e @ weight_D, np.inf)

    _loss_index = 0  # which entry of (S11, S12, S22) holds the loss coordinate's second moment

    @property
    def rows(self) -> int:
        return self.stable_N.shape[0]

    def take(self, rows) -> "Dynamics":
        """The same system restricted to rows `rows` (rebuilt from the indexed inputs)."""
        weight, h, sigma2, *per_row, start = self._args
        return type(self)(weight, h, sigma2[rows], *[p[rows] for p in per_row],
                          tuple(s[rows] for s in start))

    def _power(self, t_N, rows):
        """F^t as four (n, d) arrays (f11, f12, f21, f22)."""
        raise NotImplementedError

    def _loss_row(self, t_N, rows):
        """e^T F^t as two (n, d) arrays."""
        f11, f12, f21, f22 = self._power(t_N, rows)
        return (f11, f12) if self._loss_index == 0 else (f21, f22)

    def _take(self, arrays, rows):
        return tuple(a if rows is None else a[rows] for a in arrays)

    def loss(self, t_N, rows=None) -> np.ndarray:
        """E[L] after t steps, for t of shape (n,) (n = len(rows) or N); inf where unstable."""
        t_N = np.asarray(t_N, dtype=np.int64)
        phi, chi = self._loss_row(t_N[:, None], rows)
        d11, d12, d22 = self._take(self.dev, rows)
        s_e, = self._take((self.star[self._loss_index],), rows)
        second = s_e + phi * phi * d11 + 2.0 * phi * chi * d12 + chi * chi * d22
        stable = self.stable_N if rows is None else self.stable_N[rows]
        return np.where(stable, second @ self.weight_D, np.inf)

    def loss_parts(self, t_N, rows=None):
        """(E[L], its noise part) after t steps, each (n,); inf where unstable.

        The noise part is the loss of the same run started from theta = 0: the noise injected
        so far. It never decreases with t (it is a sum of squares of impulse responses), so once
        it exceeds the target no later step can reach it.
        """
        t_N = np.asarray(t_N, dtype=np.int64)
        phi, chi = self._loss_row(t_N[:, None], rows)
        d11, d12, d22 = self._take(self.dev, rows)
        s11, s12, s22 = self._take(self.star, rows)
        s_e = (s11, s12, s22)[self._loss_index]
        pp, pc, cc = phi * phi, 2.0 * phi * chi, chi * chi
        signal = pp * (d11 + s11) + pc * (d12 + s12) + cc * (d22 + s22)
        noise = s_e - (pp * s11 + pc * s12 + cc * s22)
        stable = self.stable_N if rows is None else self.stable_N[rows]
        total = (signal + noise) @ self.weight_D
        return np.where(stable, total, np.inf), np.where(stable, noise @ self.weight_D, np.inf)

    def signal_noise(self, t_N, rows=None):
        """(signal, noise) parts of E[L] after t steps, each (n,): E[L] = signal + noise.

        Built at batch size 1, the loss at batch size B is signal + noise / B (the stationary
        moments scale as 1 / B and the signal does not depend on B).
        """
        total, noise = self.loss_parts(t_N, rows)
        with np.errstate(invalid="ignore"):
            return total - noise, noise

    def state(self, t_N, rows=None):
        """Second moments (S11, S12, S22) after t steps, each (n, d): the start of a next segment."""
        t_N = np.asarray(t_N, dtype=np.int64)
        f11, f12, f21, f22 = self._power(t_N[:, None], rows)
        d11, d12, d22 = self._take(self.dev, rows)
        s11, s12, s22 = self._take(self.star, rows)
        # (F D F^T) for symmetric D
        a11 = f11 * d11 + f12 * d12
        a12 = f11 * d12 + f12 * d22
        a21 = f21 * d11 + f22 * d12
        a22 = f21 * d12 + f22 * d22
        return (s11 + a11 * f11 + a12 * f12,
                s12 + a11 * f21 + a12 * f22,
                s22 + a21 * f21 + a22 * f22)

    def loss_of_state(self, state) -> np.ndarray:
        """E[L] of a second-moment state (S11, S12, S22), shape (N,)."""
        return state[self._loss_index] @ self.weight_D


class SGDDynamics(Dynamics):
    """Plain (preconditioned) SGD: E theta_{t+1}^2 = r^2 E theta_t^2 + a^2 sigma^2, r = 1 - a h.

    A lean one-state system: with q = r^(2t), E[L](t) = sum_i w_i (s_i + q_i (x_i - s_i)),
    s_i = a sigma_i^2 / (h_i (2 - a h_i)) the stationary second moment.
    """

    kind = "sgd"

    def __init__(self, weight_D, h_D, sigma2_ND, lr_N, start):
        self._args = (weight_D, h_D, sigma2_ND, lr_N, start)
        self.weight_D = weight_D
        a = lr_N[:, None]
        ah = a * h_D
        self.stable_N = np.all((ah > 0) & (ah < 2.0), axis=1)
        self.r = 1.0 - ah
        with np.errstate(divide="ignore", invalid="ignore"):
            # Floored so that 0 * log_r2 stays 0 when r = 0 (e^-700 is 0 to double precision).
            self.log_r2 = np.maximum(2.0 * np.log(np.abs(self.r)), -700.0)
            self.s11 = a * sigma2_ND / (h_D * (2.0 - ah))  # a^2 sigma^2 / (1 - r^2)
            self.ws11 = self.s11 * weight_D
            self.noise_inf_N = self.ws11.sum(axis=1)
        x0 = start[0]
        # The default start is one (d,) row broadcast over N: keep it as a vector.
        self.x0 = x0[0] if x0.ndim == 2 and x0.strides[0] == 0 else x0
        self.wx0 = self.x0 * weight_D
        self.stationary_loss_N = np.where(self.stable_N, self.noise_inf_N, np.inf)

    @property
    def star(self):
        zero = np.zeros_like(self.s11)
        return (self.s11, zero, zero)

    @property
    def dev(self):
        zero = np.zeros_like(self.s11)
        return (np.broadcast_to(self.x0, self.s11.shape) - self.s11, zero, zero)

    def _power(self, t_N, rows):
        r, = self._take((self.r,), rows)
        with np.errstate(under="ignore", over="ignore"):
            rt = np.where((t_N % 2 == 1) & (r < 0), -1.0, 1.0) * np.abs(r) ** t_N
        zero = np.zeros_like(rt)
        return rt, zero, zero, zero

    def _decay(self, t_N, log_r2):
        q = np.multiply(np.asarray(t_N, dtype=np.float64)[:, None], log_r2)
        # Clamp: exp of very negative numbers returns denormals, 4x slower; e^-700 ~ 1e-304.
        np.maximum(q, -700.0, out=q)
        return np.exp(q, out=q)

    def _signal(self, q, rows):
        if self.wx0.ndim == 1:
            return q @ self.wx0
        wx0 = self.wx0 if rows is None else self.wx0[rows]
        return np.einsum("nd,nd->n", q, wx0)

    def loss_parts(self, t_N, rows=None):
        log_r2, ws11 = self._take((self.log_r2, self.ws11), rows)
        noise_inf = self.noise_inf_N if rows is None else self.noise_inf_N[rows]
        stable = self.stable_N if rows is None else self.stable_N[rows]
        with np.errstate(under="ignore", over="ignore", invalid="ignore"):
            q = self._decay(t_N, log_r2)
            noise = noise_inf - np.einsum("nd,nd->n", q, ws11)
            total = noise + self._signal(q, rows)
        return np.where(stable, total, np.inf), np.where(stable, noise, np.inf)

    def loss(self, t_N, rows=None) -> np.ndarray:
        return self.loss_parts(t_N, rows)[0]


class MomentumDynamics(Dynamics):
    """Heavy-ball momentum, state (theta, v): v' = b v + g, theta' = theta - a v'.

    F = [[1 - a h, -a b], [h, b]], f = (-a, 1); trace tau = 1 - a h + b, determinant b.
    Stable iff 0 < a h < 2 (1 + b) and b < 1. Stationary moments, with
    u = a sigma^2 (1 + b) / (h (1 - b) (2 (1 + b) - a h)):
    E theta^2 = u, E theta v = -u h / (1 + b), E v^2 = 2 u h / ((1 + b) a).
    """

    kind = "momentum"

    def __init__(self, weight_D, h_D, sigma2_ND, lr_N, b_N, start):
        self._args = (weight_D, h_D, sigma2_ND, lr_N, b_N, start)
        a = lr_N[:, None]
        b = b_N[:, None]
        ah = a * h_D
        stable_N = np.all((ah > 0) & (ah < 2.0 * (1.0 + b)), axis=1) & (b_N < 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = a * sigma2_ND * (1.0 + b) / (h_D * (1.0 - b) * (2.0 * (1.0 + b) - ah))
            star = (u, -u * h_D / (1.0 + b), 2.0 * u * h_D / ((1.0 + b) * a))
        tau = 1.0 - ah + b
        sqrt_b = np.sqrt(b)
        # |tau| - 2 sqrt(b) without cancellation near critical damping.
        gap = np.where(tau >= 0, (1.0 - sqrt_b) ** 2 - ah, ah - (1.0 + sqrt_b) ** 2)
        self.seq = LucasSequence(np.abs(tau), b, gap, tau < 0)
        self.tau = tau
        self.a = np.broadcast_to(a, tau.shape)
        self.h_D = h_D
        self.b = np.broadcast_to(b, tau.shape)
        super().__init__(weight_D, stable_N, star, start)

    def _seq_rows(self, rows):
        return self.seq if rows is None else self.seq.take(rows)

    def loss_parts(self, t_N, rows=None):
        if not hasattr(self, "_kernel"):
            self._kernel = _MomentumLossKernel(self)
        return self._kernel(np.asarray(t_N, dtype=np.int64), rows)

    def loss(self, t_N, rows=None) -> np.ndarray:
        return self.loss_parts(t_N, rows)[0]

    def _loss_row(self, t_N, rows):
        seq = self._seq_rows(rows)
        a, b = self._take((self.a, self.b), rows)
        p_t, p_next = seq(t_N), seq(t_N + 1)
        # e1^T F^t = (p_{t+1} - b p_t, -a b p_t)
        return p_next - b * p_t, -a * b * p_t

    def _power(self, t_N, rows):
        seq = self._seq_rows(rows)
        a, b, tau = self._take((self.a, self.b, self.tau), rows)
        p_t, p_next = seq(t_N), seq(t_N + 1)
        # F^t = p_t (F - tau I) + p_{t+1} I
        h = self.h_D
        return (p_t * (1.0 - a * h - tau) + p_next, -p_t * a * b,
                p_t * h, p_t * (b - tau) + p_next)


class _ElementGroup:
    """Entries (row, direction) of an (N, d) system that share one closed form, stored flat and
    sorted by row, with per-entry constants; evaluated for any subset of rows (with repeats)."""

    def __init__(self, mask_ND, **fields):
        flat = np.flatnonzero(mask_ND)
        self.row = flat // mask_ND.shape[1]
        self.start = np.searchsorted(self.row, np.arange(mask_ND.shape[0] + 1))
        self.fields = {k: np.ascontiguousarray(v[mask_ND]) for k, v in fields.items()}

    def select(self, rows):
        """(entry indices, position in `rows` of each entry) for rows (n,), or all when None."""
        if rows is None:
            return slice(None), self.row
        lo, hi = self.start[rows], self.start[rows + 1]
        counts = hi - lo
        pos = np.repeat(np.arange(rows.size), counts)
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        return np.repeat(lo, counts) + offsets, pos


class _MomentumLossKernel:
    """E[L](t) of heavy-ball momentum, written per entry as s + A p1^2 + B p1 p0 + C p0^2.

    With p0 = p_t and p1 = p_{t+1} (`powers.LucasSequence`), e1^T F^t = (p1 - b p0, -a b p0),
    so for a deviation D the loss coordinate moves by A = D11, B = -2 b (D11 + a D12),
    C = b^2 (D11 + 2 a D12 + a^2 D22). Underdamped entries use
    p_t = b^((t-1)/2) sin(t w) / sin w; overdamped (and b = 0) entries
    p_t = l1^(t-1) (1 - q^t) / (1 - q); each entry evaluates only its own form. A negative
    trace flips the sign of p_t p_{t+1} only. The same form with D = -S* gives the noise part.
    """

    def __init__(self, dyn: "MomentumDynamics"):
        seq = dyn.seq
        a, b = dyn.a, dyn.b
        w = np.broadcast_to(dyn.weight_D, a.shape)
        d11, d12, d22 = dyn.dev
        n11, n12, n22 = (-s for s in dyn.star)
        sign = np.where(seq.negative, -1.0, 1.0)

        def coeffs(x11, x12, x22):
            return x11, -2.0 * b * (x11 + a * x12), b * b * (x11 + 2.0 * a * x12 + a * a * x22)

        with np.errstate(invalid="ignore", over="ignore"):  # unstable rows: masked below
            A, B, C = coeffs(d11, d12, d22)
            An, Bn, Cn = coeffs(n11, n12, n22)
        self.rows = a.shape[0]
        self.stable = dyn.stable_N
        self.base_total = dyn.star[0] @ dyn.weight_D
        self.base_noise = self.base_total
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            inv_s2 = 1.0 / seq.sin_w ** 2
            sb = np.exp(seq.log_sqrt_b)
            cplx = seq.complex_
            self.cplx = _ElementGroup(
                cplx, w=seq.w, cos_w=np.cos(seq.w), sin_w=seq.sin_w, log_b=2.0 * seq.log_sqrt_b,
                A=w * A * b * inv_s2, B=w * sign * B * sb * inv_s2, C=w * C * inv_s2,
                An=w * An * b * inv_s2, Bn=w * sign * Bn * sb * inv_s2, Cn=w * Cn * inv_s2)
            log_q = np.maximum(-2.0 * seq.u, -700.0)
            log_q = np.where(seq.b_zero, -700.0, log_q)
            self.real = _ElementGroup(
                ~cplx, log_l1=np.maximum(seq.log_l1, -700.0), log_q=log_q,
                inv_em1=np.where(log_q < 0, 1.0 / np.expm1(log_q), 0.0),
                A=w * A, B=w * sign * B, C=w * C, An=w * An, Bn=w * sign * Bn, Cn=w * Cn)

    def __call__(self, t_N, rows=None):
        n = self.rows if rows is None else rows.size
        total = np.zeros(n)
        noise = np.zeros(n)
        with np.errstate(under="ignore", over="ignore", invalid="ignore"):
            for group, forms in ((self.cplx, self._complex), (self.real, self._real)):
                idx, pos = group.select(rows)
                if group.row.size == 0:
                    continue
                f = {k: v[idx] for k, v in group.fields.items()}
                t = t_N[pos].astype(np.float64)
                p1p1, p1p0, p0p0 = forms(f, t)
                total += np.bincount(pos, p1p1 * f["A"] + p1p0 * f["B"] + p0p0 * f["C"], n)
                noise += np.bincount(pos, p1p1 * f["An"] + p1p0 * f["Bn"] + p0p0 * f["Cn"], n)
        base_t = self.base_total if rows is None else self.base_total[rows]
        base_n = self.base_noise if rows is None else self.base_noise[rows]
        stable = self.stable if rows is None else self.stable[rows]
        return np.where(stable, base_t + total, np.inf), np.where(stable, base_n + noise, np.inf)

    @staticmethod
    def _complex(f, t):
        # b^(t-1) is folded in; the constants carry b / sin^2 w etc.
        scale = np.exp((t - 1.0) * f["log_b"])
        tw = t * f["w"]
        s0, c0 = np.sin(tw), np.cos(tw)
        s1 = s0 * f["cos_w"] + c0 * f["sin_w"]
        return scale * s1 * s1, scale * s1 * s0, scale * s0 * s0

    @staticmethod
    def _real(f, t):
        lt = t * f["log_l1"]
        e0 = np.where(f["log_q"] < 0, np.expm1(t * f["log_q"]) * f["inv_em1"], t)
        e1 = 1.0 + np.exp(f["log_q"]) * e0
        p1 = np.exp(np.maximum(lt, -700.0)) * e1
        p0 = np.exp(np.maximum(lt - f["log_l1"], -700.0)) * e0
        return p1 * p1, p1 * p0, p0 * p0


class EMADynamics(Dynamics):
    """SGD with an exponential moving average of the iterates, read at the average.

    State (theta, A): theta' = r theta - a eps, A' = g A + (1 - g) theta', A_0 = theta_0.
    F = [[r, 0], [(1 - g) r, g]], F^t = [[r^t, 0], [(1 - g) r (r^t - g^t) / (r - g), g^t]].
    """

    kind = "ema"
    _loss_index = 2

    def __init__(self, weight_D, h_D, sigma2_ND, lr_N, g_N, start):
        self._args = (weight_D, h_D, sigma2_ND, lr_N, g_N, start)
        a = lr_N[:, None]
        g = g_N[:, None]
        ah = a * h_D
        r = 1.0 - ah
        stable_N = np.all((ah > 0) & (ah < 2.0), axis=1) & (g_N < 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            s_tt = a * sigma2_ND / (h_D * (2.0 - ah))
            s_ta = (1.0 - g) * s_tt / (1.0 - g * r)
            s_aa = (2.0 * g * (1.0 - g) * r * s_ta + (1.0 - g) ** 2 * s_tt) / (1.0 - g * g)
        self.r = r
        self.g = np.broadcast_to(g, r.shape)
        super().__init__(weight_D, stable_N, (s_tt, s_ta, s_aa), start)

    def _power(self, t_N, rows):
        r, g = self._take((self.r, self.g), rows)
        with np.errstate(under="ignore", over="ignore"):
            rt = np.where((t_N % 2 == 1) & (r < 0), -1.0, 1.0) * np.abs(r) ** t_N
            gt = g ** t_N
        return rt, np.zeros_like(rt), (1.0 - g) * r * divided_power(r, g, t_N), gt


def initial_state(problem: Problem, kind: str, rows: int):
    """S_0 for theta_0 with E theta^2 = x0, zero velocity, average started at theta_0."""
    x0 = np.broadcast_to(problem.init_second_moment_D, (rows, problem.dim))
    zero = np.zeros((rows, problem.dim))
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
    batch_N, lr_N, b_N, g_N = _broadcast_rows(batch_size, learning_rate, momentum, ema_decay)
    if np.any(b_N > 0) and np.any(g_N > 0):
        raise ValueError("momentum and ema_decay cannot both be > 0 (in one run or in one call): "
                         "iterate averaging is modelled on plain SGD; set one of them to 0")
    h_eff, c_eff = preconditioned(problem.curvature_D, problem.noise_D, precond_power)
    weight_D = 0.5 * problem.curvature_D
    sigma2_ND = c_eff[None, :] / batch_N[:, None]
    n = lr_N.shape[0]
    if np.any(g_N > 0):
        kind = "ema"
    elif np.any(b_N > 0):
        kind = "momentum"
    else:
        kind = "sgd"
    if start is None:
        start = initial_state(problem, kind, n)
    if kind == "ema":
        return EMADynamics(weight_D, h_eff, sigma2_ND, lr_N, g_N, start)
    if kind == "momentum":
        return MomentumDynamics(weight_D, h_eff, sigma2_ND, lr_N, b_N, start)
    return SGDDynamics(weight_D, h_eff, sigma2_ND, lr_N, start)


def expected_loss(problem: Problem, steps, batch_size, learning_rate, momentum=0.0,
                  ema_decay=0.0, precond_power: float = 0.0) -> np.ndarray:
    """E[L] after each of `steps` for each metaparameter row.

    Args:
      steps: integer step counts >= 0, shape (T,).
      batch_size, learning_rate, momentum, ema_decay: as in `dynamics`, N rows.

    Returns:
      Array (N, T) of expected losses; inf for unstable rows.
    """
    try:
        steps = np.atleast_1d(np.asarray(steps, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"steps must be whole numbers >= 0, got {steps!r:.100}") from None
    bad = ~np.isfinite(steps) | (steps < 0) | (steps != np.round(steps))
    if steps.ndim != 1 or np.any(bad):
        first = steps.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]] if np.any(bad) else steps
        raise ValueError(f"steps must be a 1-D list of whole numbers >= 0, got {first}")
    steps = steps.astype(np.int64)
    dyn = dynamics(problem, batch_size, learning_rate, momentum, ema_decay, precond_power)
    out = np.empty((dyn.rows, steps.shape[0]))
    for j, t in enumerate(steps):
        out[:, j] = dyn.loss(np.full(dyn.rows, t))
    return out

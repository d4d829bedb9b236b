"""Mean-field Adam when Adam's coordinates are not the Hessian's eigenbasis (small d, full covariance).

The quadratic is the NQM turned by an orthogonal R: in Adam's coordinates x = R theta the
Hessian is H = R diag(h) R^T and the per-example gradient covariance C = R diag(c) R^T (the
noise keeps its alignment with the curvature). Adam's diagonal preconditioner no longer
commutes with H, so the directions couple and the state is the full covariance S (2d, 2d) of
(x, u), u = m / (1 - b1). The mean field is that of `nqm.adam` (V runs over E[g_i^2] =
(H S_xx H + C f(B))_ii), iterated step by step:

    S' = F S F^T + f C f(B) f^T,   F = [[I - diag(eta) H, -b1 diag(eta)], [H, b1 I]],
    f = [[-diag(eta)], [I]],       eta = a (1 - b1) / (1 - b1^k) / (sqrt(V / (1 - b2^k)) + epsilon).

With R = I it is `nqm.adam` with init_nodes=1 (the tests hold them together). Cost O(steps N d^3):
meant for d up to a few dozen. This is the model in which the greedy one-step learning rate
falls again at large batch sizes (the surge): the off-diagonal terms of H make the second-order
term of the loss, sum_ij H_ij E[u_i u_j] / sqrt(v_i v_j), grow with B; `surge_law` gives its
small-signal form, Li et al.'s law, and `first_step_learning_rate` the same rate for the
ensemble's first step. The rate tuned for steps to target does not fall (d = 8 and 32;
docs/nqm_adam.md, 'Fact 2').

References:
  Li et al. 2024, "Surge phenomenon in optimal learning rate and batch size scaling", section 3
    (sign-like updates: the optimal rate rises, then falls past a batch size near the noise scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nqm import validation
from nqm.adam import _one_minus_power, _rows, check_adam, check_rotation
from nqm.problem import Problem


def check_flag(name: str, value) -> bool:
    """`value` if it is a bool; ValueError naming `name` otherwise (a string such as "no" is
    not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def turned(problem: Problem, rotation_DD, independent_noise: bool = False):
    """(R, H, C): the checked rotation and, in Adam's coordinates, the Hessian R diag(h) R^T and
    the per-example noise covariance R diag(c) R^T (only its diagonal with `independent_noise`),
    each (d, d). ValueError naming the first bad input."""
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be an nqm.problem.Problem, got {type(problem).__name__}")
    check_flag("independent_noise", independent_noise)
    R = check_rotation(rotation_DD, problem.dim)
    C = (R * problem.noise_D) @ R.T
    return R, (R * problem.curvature_D) @ R.T, np.diag(np.diag(C)) if independent_noise else C


def _one_step_rate(H, M, C, f_B) -> np.ndarray:
    """The rate of the largest expected one-step loss decrease of mean-field Adam's first step,
    a* = tr(P M) / tr(H P (M + C f) P) with P = diag(1 / sqrt(M_ii + C_ii f)), for each noise
    factor f (n_B,): M the gradient's signal second moment (mu mu^T from a point), H and C
    (d, d) in Adam's coordinates. Returns (n_B,)."""
    f = np.asarray(f_B, np.float64).reshape(-1, 1)
    p_BD = 1.0 / np.sqrt(np.diag(M) + np.diag(C) * f)
    signal = np.einsum("bi,ij,bj->b", p_BD, H * M, p_BD)
    noise = np.einsum("bi,ij,bj->b", p_BD, H * C, p_BD)
    return (p_BD @ np.diag(M)) / (signal + f[:, 0] * noise)


def check_point(problem: Problem, theta_D) -> np.ndarray:
    """theta (eigen-coordinates) as a float64 (d,) array; ValueError naming it otherwise."""
    theta = validation.check_array("theta", theta_D, positive=False)
    if theta.shape != (problem.dim,):
        raise ValueError(f"theta must have length d = {problem.dim}, got {theta.shape[0]}")
    return theta


def random_rotation(dim: int, seed: int = 0) -> np.ndarray:
    """A Haar-random orthogonal (d, d) matrix (QR of a Gaussian matrix, signs fixed)."""
    dim = validation.check_whole("dim", dim, 1, 1000)
    seed = validation.check_whole("seed", seed, 0)
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((dim, dim)))
    return q * np.sign(np.diag(r))


class RotatedMeanFieldAdam:
    """Full-covariance mean-field Adam for N rows of metaparameters, stepped together.

    Args:
      problem: the NQM arrays (d,) in the eigenbasis.
      rotation_DD: orthogonal R (d, d).
      batch_size, learning_rate, beta1, beta2, epsilon: scalars or arrays of one shape (N,).
      independent_noise: keep only the diagonal of C = R diag(c) R^T, i.e. gradient noise
        independent per Adam coordinate (Li et al. 2024's assumption; `greedy_learning_rate`).
    """

    def __init__(self, problem: Problem, rotation_DD, batch_size, learning_rate, beta1=0.9,
                 beta2=0.999, epsilon=0.0, independent_noise: bool = False):
        R, self.H, C = turned(problem, rotation_DD, independent_noise)
        check_adam(batch_size, learning_rate, beta1, beta2, epsilon)
        problem.check_batch_sizes(batch_size, "batch_size")
        d = problem.dim
        batch, self.lr_N, self.b1_N, self.b2_N, self.eps_N = _rows(
            batch_size, learning_rate, beta1, beta2, epsilon)
        self.C_NDD = C[None] * problem.noise_factor(batch)[:, None, None]
        n = self.lr_N.shape[0]
        S = np.zeros((n, 2 * d, 2 * d))
        S[:, :d, :d] = (R * problem.init_second_moment_D) @ R.T
        self.S = S
        self.V = np.zeros((n, d))
        self.t = 0
        self.d = d

    def loss(self) -> np.ndarray:
        """E[L] = tr(H S_xx) / 2 per row, (N,)."""
        return 0.5 * np.einsum("ij,nji->n", self.H, self.S[:, :self.d, :self.d])

    def step(self) -> None:
        """One mean-field Adam step of every row, in place."""
        d, H = self.d, self.H
        k = float(self.t + 1)
        b1, b2 = self.b1_N[:, None], self.b2_N[:, None]
        Sxx = self.S[:, :d, :d]
        x = np.einsum("ij,njk,ki->ni", H, Sxx, H) + np.diagonal(self.C_NDD, axis1=1, axis2=2)
        self.V = b2 * self.V + (1.0 - b2) * x
        vhat = self.V / _one_minus_power(b2, k)
        eta = (self.lr_N[:, None] * (1.0 - b1) / _one_minus_power(b1, k)
               / (np.sqrt(vhat) + self.eps_N[:, None]))                       # (N, d)
        n = eta.shape[0]
        F = np.zeros((n, 2 * d, 2 * d))
        eye = np.eye(d)
        F[:, :d, :d] = eye - eta[:, :, None] * H
        F[:, :d, d:] = -b1[:, :, None] * eta[:, :, None] * eye
        F[:, d:, :d] = H
        F[:, d:, d:] = b1[:, :, None] * eye
        f = np.concatenate([-eta[:, :, None] * eye, np.broadcast_to(eye, (n, d, d))], axis=1)
        self.S = F @ self.S @ F.transpose(0, 2, 1) + f @ self.C_NDD @ f.transpose(0, 2, 1)
        self.t += 1


def iterate_losses(problem: Problem, rotation_DD, steps: int, batch_size, learning_rate,
                   beta1=0.9, beta2=0.999, epsilon=0.0,
                   independent_noise: bool = False) -> np.ndarray:
    """E[L] at t = 0..steps for N rows, (N, steps + 1)."""
    steps = validation.check_whole("steps", steps, 0)
    model = RotatedMeanFieldAdam(problem, rotation_DD, batch_size, learning_rate, beta1, beta2,
                                 epsilon, independent_noise)
    out = np.empty((model.lr_N.shape[0], steps + 1))
    out[:, 0] = model.loss()
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(steps):
            model.step()
            out[:, t + 1] = model.loss()
    return out


def steps_to_target(problem: Problem, rotation_DD, batch_size, learning_rate, beta1=0.9,
                    beta2=0.999, epsilon=0.0, max_steps: int = 10_000,
                    independent_noise: bool = False) -> np.ndarray:
    """First step with E[L] <= problem.target per row (every step checked); -1 if not within
    max_steps. int64 (N,)."""
    max_steps = validation.check_whole("max_steps", max_steps, 1, 10 ** 7)
    model = RotatedMeanFieldAdam(problem, rotation_DD, batch_size, learning_rate, beta1, beta2,
                                 epsilon, independent_noise)
    out = np.full(model.lr_N.shape[0], -1, dtype=np.int64)
    out[model.loss() <= problem.target] = 0
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(1, max_steps + 1):
            if np.all(out >= 0):
                break
            model.step()
            out[(out < 0) & (model.loss() <= problem.target)] = t
    return out


def optimal_learning_rates(problem: Problem, rotation_DD, batch_sizes, learning_rates,
                           beta1=0.9, beta2=0.999, epsilon=0.0, max_steps: int = 10_000,
                           independent_noise: bool = False):
    """The learning rate with the fewest steps to target at each batch size, from a grid.

    Args:
      batch_sizes: (n_B,) batch sizes >= 1.
      learning_rates: (n_L,) candidate rates, increasing.

    Returns:
      (best rate (n_B,), its steps (n_B,), steps of every pair (n_B, n_L)). Among rates tied at
      the fewest steps the geometric middle is returned; NaN and -1 where none reached.
    """
    b = validation.check_all_in_range("batch_sizes", batch_sizes, 1.0, np.inf).reshape(-1)
    lr = validation.check_all_in_range("learning_rates", learning_rates, 0.0, np.inf,
                                       closed_low=False).reshape(-1)
    steps = steps_to_target(problem, rotation_DD, np.repeat(b, lr.size), np.tile(lr, b.size),
                            beta1, beta2, epsilon, max_steps,
                            independent_noise).reshape(b.size, lr.size)
    s = np.where(steps < 0, np.iinfo(np.int64).max, steps)
    best = s.min(axis=1)
    tied = (s == best[:, None]) & (steps >= 0)
    log_lr = np.log(lr)
    best_lr = np.full(b.size, np.nan)
    for i in range(b.size):
        if tied[i].any():
            best_lr[i] = np.exp(0.5 * (log_lr[tied[i]].min() + log_lr[tied[i]].max()))
    return best_lr, np.where(tied.any(axis=1), best, -1), steps


def greedy_learning_rate(problem: Problem, rotation_DD, theta_D, batch_sizes,
                         independent_noise: bool = False) -> np.ndarray:
    """The learning rate of the largest expected one-step loss decrease, per batch size.

    One mean-field Adam step from a given point theta (eigen-coordinates, (d,)), first step of
    a run (b1 and b2 drop out: u = g / sqrt(E[g^2]) per coordinate): with mu = H x and
    P = diag(1 / sqrt(mu_i^2 + C_ii f(B))),
        E[dL](a) = -a mu^T P mu + a^2 / 2 tr(H P (mu mu^T + C f(B)) P),
    so a* = mu^T P mu / tr(H P (mu mu^T + C f(B)) P). With R = I the denominator is tr(H) for
    every B and a* only rises; with R != I its off-diagonal part grows with B (Li et al. 2024,
    eqs. 6-9, for sign updates). independent_noise keeps only the diagonal of C in Adam's
    coordinates (Li et al.'s assumption) instead of C = R diag(c) R^T. Returns (n_B,).
    """
    R, H, C = turned(problem, rotation_DD, independent_noise)
    theta = check_point(problem, theta_D)
    b = validation.check_all_in_range("batch_sizes", batch_sizes, 1.0, np.inf).reshape(-1)
    problem.check_batch_sizes(b, "batch_sizes")
    mu = H @ (R @ theta)
    return _one_step_rate(H, np.outer(mu, mu), C, problem.noise_factor(b))


@dataclass(frozen=True)
class SurgeLaw:
    """The small-signal form of `greedy_learning_rate` with independent noise (docs/nqm_adam.md,
    'Fact 2'): a(B) = sqrt(B) signal / (trace + B q). Where q > 0 it is Li et al.'s law,
    a(B) = peak_rate / (1/2 (sqrt(peak_batch / B) + sqrt(B / peak_batch))). It approximates the
    greedy rate where B w_i^2 << 1 for every i (`small_signal_limit`), not beyond.

    Attributes:
      trace: tr H in Adam's coordinates (the loss's units per squared parameter).
      q: Q = sum_{i != j} H_ij w_i w_j, w_i = mu_i / sqrt(C_ii) (per example).
      signal: sum_i mu_i w_i, the coefficient of sqrt(B).
      peak_batch: B_peak = trace / q (examples); inf where q <= 0: the law has no peak (the
        greedy rate itself may still have one where the signal is not small).
      peak_rate: a_max = signal / (2 sqrt(trace q)); inf where q <= 0.
      small_signal_limit: 1 / max_i w_i^2 (examples): the law holds for B well below it.
    """

    trace: float
    q: float
    signal: float
    small_signal_limit: float

    @property
    def peak_batch(self) -> float:
        return self.trace / self.q if self.q > 0 else np.inf

    @property
    def peak_rate(self) -> float:
        return self.signal / (2.0 * np.sqrt(self.trace * self.q)) if self.q > 0 else np.inf

    def rate(self, batch_sizes) -> np.ndarray:
        """The law's learning rate at each batch size (> 0), (n_B,); NaN past its pole where
        q < 0 (trace + B q <= 0)."""
        b = validation.check_all_in_range("batch_sizes", batch_sizes, 0.0, np.inf,
                                          closed_low=False).reshape(-1)
        denominator = self.trace + b * self.q
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(denominator > 0, np.sqrt(b) * self.signal / denominator, np.nan)


def surge_law(problem: Problem, rotation_DD, theta_D) -> SurgeLaw:
    """The small-signal law of the greedy one-step rate with noise independent per Adam
    coordinate, from a point theta (eigen-coordinates, (d,), not zero), for unlimited data
    (f(B) = 1 / B: a problem with a train_size is refused).

    For B well below every C_ii / mu_i^2, beta_i = mu_i^2 / (mu_i^2 + C_ii / B) ~ B w_i^2 and
    `greedy_learning_rate` tends to sqrt(B) signal / (tr H + B Q), which peaks at B = tr H / Q.
    Scaling theta by s (its direction kept) scales Q by s^2: halving it moves the peak to 4
    times the batch size.
    """
    R, H, C = turned(problem, rotation_DD, independent_noise=True)
    if problem.train_size is not None:
        raise ValueError("problem.train_size must be None: the law assumes unlimited data "
                         f"(f(B) = 1 / B), got {problem.train_size:g}")
    theta = check_point(problem, theta_D)
    if not np.any(theta):
        raise ValueError("theta must not be zero (no gradient, no rate)")
    mu = H @ (R @ theta)
    w = mu / np.sqrt(np.diag(C))
    off_diagonal = H - np.diag(np.diag(H))       # exactly 0 for a diagonal H: q = 0, not +-eps
    return SurgeLaw(trace=float(np.trace(H)), q=float(w @ off_diagonal @ w),
                    signal=float(mu @ w), small_signal_limit=float(1.0 / np.max(w * w)))


def first_step_learning_rate(problem: Problem, rotation_DD, batch_sizes,
                             independent_noise: bool = False) -> np.ndarray:
    """The greedy rate of the first step of `RotatedMeanFieldAdam` from its ensemble of starts
    (E theta theta^T = diag(init_second_moment), so in Adam's coordinates the signal second
    moment is M = H R diag(m0) R^T H, a full matrix), per batch size, (n_B,).

    At step 1 the bias corrections cancel and u = g / sqrt(E[g^2]) per coordinate, so with
    P = diag(1 / sqrt(M_ii + C_ii f(B))): a* = tr(P M) / tr(H P (M + C f(B)) P). b1, b2 and
    epsilon = 0 drop out. independent_noise keeps only the diagonal of C = R diag(c) R^T.
    """
    R, H, C = turned(problem, rotation_DD, independent_noise)
    b = validation.check_all_in_range("batch_sizes", batch_sizes, 1.0, np.inf).reshape(-1)
    problem.check_batch_sizes(b, "batch_sizes")
    M = H @ ((R * problem.init_second_moment_D) @ R.T) @ H
    return _one_step_rate(H, M, C, problem.noise_factor(b))

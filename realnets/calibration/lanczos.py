"""Symmetric Lanczos with full reorthogonalisation (host numpy, float64) and the top eigenpairs with
their Ritz residuals |H y - theta y|, which bound each Ritz value's error.

Units: eigenvalues are in loss per squared parameter (loss / param^2). Every matvec takes and
returns float64 numpy vectors of length P (the number of scalar parameters). Memory: the k x P
basis is kept in float64 on the host (k = 100, P = 1e6: 800 MB).

References:
  Lanczos 1950; Paige 1972; Golub & Van Loan, "Matrix Computations" (4th ed.), sections 10.1 and
    10.3.1 (full reorthogonalisation).
  Parlett, "The Symmetric Eigenvalue Problem", section 13.2: an interval [theta - r, theta + r]
    holds an eigenvalue of H.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg


PROBES = ("rademacher", "gaussian")


def draw_probe(key, dim: int, kind: str = "rademacher") -> np.ndarray:
    """A random vector float64 (dim,) with E[v v^T] = I: Rademacher (+-1) or standard Gaussian."""
    if kind == "rademacher":
        return np.asarray(jax.random.rademacher(key, (dim,), jnp.float32), np.float64)
    if kind == "gaussian":
        return np.asarray(jax.random.normal(key, (dim,), jnp.float32), np.float64)
    raise ValueError(f"probe must be one of {', '.join(PROBES)}, got {kind!r}")


@dataclass(frozen=True)
class LanczosResult:
    """k steps of Lanczos: Q^T H Q = T with T tridiagonal (alphas on, betas off the diagonal).

    Attributes:
      alphas_K: diagonal of T, (m,) (m = k unless the start vector's Krylov space was exhausted
        and no new direction was left, then m < k).
      betas_K: off-diagonal of T, (m - 1,); a 0 marks a restart after an invariant subspace.
      basis_KxP: orthonormal rows q_1..q_m, float64 (m, P).
      last_beta: |r_m| after the last step, where H Q = Q T + r_m e_m^T.
    """

    alphas_K: np.ndarray
    betas_K: np.ndarray
    basis_KxP: np.ndarray
    last_beta: float

    @property
    def steps(self) -> int:
        return int(self.alphas_K.shape[0])

    def tridiagonal(self) -> np.ndarray:
        """T as a dense (m, m) array."""
        return np.diag(self.alphas_K) + np.diag(self.betas_K, 1) + np.diag(self.betas_K, -1)

    def ritz(self):
        """Eigen-decomposition of T: (theta_K ascending, S_KxK with eigenvectors as columns)."""
        return scipy.linalg.eigh_tridiagonal(self.alphas_K, self.betas_K)


def _orthogonalise(w: np.ndarray, basis: np.ndarray) -> np.ndarray:
    # Classical Gram-Schmidt applied twice ("twice is enough": Giraud et al. 2005).
    for _ in range(2):
        w = w - basis.T @ (basis @ w)
    return w


def lanczos(matvec: Callable, dim: int, k: int, key, *, start=None, probe: str = "gaussian",
            breakdown_tol: float = 1e-10) -> LanczosResult:
    """k steps of symmetric Lanczos with full reorthogonalisation.

    beta_j q_{j+1} = H q_j - alpha_j q_j - beta_{j-1} q_{j-1} (Golub & Van Loan 10.1.2), with
    every new vector orthogonalised again against all previous ones (twice), so Q stays
    orthonormal to working precision and no spurious copies of converged Ritz values appear.
    When beta_j falls below `breakdown_tol` times the largest |alpha| seen (an invariant subspace:
    the start vector has no component left to explore) the run restarts with a random vector
    orthogonal to Q and beta_j = 0, so T stays a projection Q^T H Q of H.

    Args:
      matvec: v float64 (P,) -> H v (P,), H symmetric.
      dim: P.
      k: number of steps (1 <= k <= P).
      key: a jax PRNG key (start vector when `start` is None, and restarts).
      start: optional start vector (P,), normalised here.
      probe: distribution of the random start ('gaussian' or 'rademacher').
      breakdown_tol: relative threshold on beta for a restart.

    Returns:
      LanczosResult (alphas (m,), betas (m-1,), basis (m, P), last_beta).
    """
    dim, k = int(dim), int(k)
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if not 1 <= k <= dim:
        raise ValueError(f"k (Lanczos steps) must be in [1, dim = {dim}], got {k}")
    start_key, restart_key = jax.random.split(key)
    q = draw_probe(start_key, dim, probe) if start is None else np.asarray(start, np.float64)
    if q.shape != (dim,):
        raise ValueError(f"start must have shape ({dim},), got {q.shape}")
    norm = np.linalg.norm(q)
    if not np.isfinite(norm) or norm == 0:
        raise ValueError("start must be a finite, non-zero vector")
    q = q / norm

    basis = np.zeros((k, dim))
    alphas, betas = np.zeros(k), np.zeros(max(k - 1, 0))
    scale, beta_prev, q_prev, last_beta = 0.0, 0.0, None, 0.0
    m = k
    for j in range(k):
        basis[j] = q
        w = np.asarray(matvec(q), np.float64)
        if w.shape != (dim,) or not np.all(np.isfinite(w)):
            raise ValueError(f"matvec returned a non-finite or mis-shaped vector at Lanczos step {j}")
        alpha = float(q @ w)
        w = w - alpha * q - (beta_prev * q_prev if q_prev is not None else 0.0)
        w = _orthogonalise(w, basis[: j + 1])
        beta = float(np.linalg.norm(w))
        alphas[j] = alpha
        scale = max(scale, abs(alpha), beta)
        if j == k - 1:
            last_beta = beta
            break
        if beta <= breakdown_tol * scale:
            # Invariant subspace found: restart orthogonally to everything seen so far.
            w = _orthogonalise(draw_probe(jax.random.fold_in(restart_key, j), dim, "gaussian"),
                               basis[: j + 1])
            fresh = float(np.linalg.norm(w))
            if fresh <= 1e-8 * math.sqrt(dim):         # no direction left (numerically)
                m = j + 1
                break
            betas[j], q_prev, beta_prev, q = 0.0, None, 0.0, w / fresh
            continue
        betas[j] = beta
        q_prev, beta_prev, q = q, beta, w / beta
    return LanczosResult(alphas_K=alphas[:m], betas_K=betas[: max(m - 1, 0)],
                         basis_KxP=basis[:m], last_beta=last_beta)


@dataclass(frozen=True)
class Eigenpairs:
    """Top Ritz pairs of H.

    Attributes:
      eigenvalues_K: Ritz values theta_1 >= ... >= theta_K (loss / param^2).
      eigenvectors_KxP: unit Ritz vectors y_i as rows, float64 (signs arbitrary).
      residuals_K: |H y_i - theta_i y_i|, computed with one extra matvec each: an eigenvalue of H
        lies within this distance of theta_i (and within residual^2 / gap when the gap to the
        rest of the spectrum is known); the eigenvector error is about residual / gap.
      residual_bounds_K: the same from the recurrence, last_beta * |s_{m,i}| (free; equal to
        `residuals_K` in exact arithmetic).
      lanczos_steps: steps taken.
    """

    eigenvalues_K: np.ndarray
    eigenvectors_KxP: np.ndarray
    residuals_K: np.ndarray
    residual_bounds_K: np.ndarray
    lanczos_steps: int

    def to_dict(self) -> dict:
        return {"eigenvalues": self.eigenvalues_K.tolist(), "residuals": self.residuals_K.tolist(),
                "residual_bounds": self.residual_bounds_K.tolist(),
                "lanczos_steps": self.lanczos_steps}


def top_eigenpairs(matvec: Callable, dim: int, k: int, key, *, num_steps: int | None = None,
                   start=None) -> Eigenpairs:
    """Ritz approximations to the k largest (algebraic) eigenvalues of H and their eigenvectors.

    Args:
      matvec: v (P,) -> H v (P,).
      dim: P.
      k: how many eigenpairs (1 <= k <= num_steps).
      key: jax PRNG key for the Lanczos start.
      num_steps: Lanczos steps (default min(P, max(2 k, k + 20))); more steps, smaller residuals.
      start: optional start vector.

    Returns:
      Eigenpairs, with the residual |H y - theta y| of each pair as its uncertainty (Parlett,
      section 13.2): k more matvecs.
    """
    steps = min(int(dim), max(2 * int(k), int(k) + 20)) if num_steps is None else int(num_steps)
    if not 1 <= k <= steps:
        raise ValueError(f"k must be in [1, num_steps = {steps}], got {k}")
    run = lanczos(matvec, dim, steps, key, start=start)
    if run.steps < k:
        raise ValueError(f"k = {k} eigenpairs asked but the Krylov space has only {run.steps} "
                         "dimensions (H has fewer distinct directions); lower k")
    theta, S = run.ritz()
    top = np.argsort(theta)[::-1][:k]
    values = theta[top]
    vectors = S[:, top].T @ run.basis_KxP
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    residuals = np.array([np.linalg.norm(np.asarray(matvec(y), np.float64) - t * y)
                          for t, y in zip(values, vectors)])
    bounds = run.last_beta * np.abs(S[-1, top])
    return Eigenpairs(eigenvalues_K=values, eigenvectors_KxP=vectors, residuals_K=residuals,
                      residual_bounds_K=bounds, lanczos_steps=run.steps)

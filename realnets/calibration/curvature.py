"""Curvature of the training loss: Hessian-vector products, Lanczos, stochastic Lanczos quadrature.

- `hvp`: the Hessian of the mean training loss over a sample, as a matrix-free operator on
  flattened parameter vectors (forward-over-reverse: `jax.jvp` of `jax.grad`). The sample is cut
  into chunks; each chunk is sharded along the `data` mesh exactly like the train step (one jit
  program, parameters and vector replicated, rows split; XLA inserts the all-reduce), and the
  chunks' products are averaged with weights rows / n on the host.
- `lanczos`: k steps of symmetric Lanczos with full reorthogonalisation (host numpy, float64).
- `top_eigenpairs`: Ritz pairs for the largest (algebraic) eigenvalues with their residual norms
  |H y - theta y|, which bound the error of each Ritz value.
- `spectral_density`: stochastic Lanczos quadrature (SLQ): per random probe, the Gauss quadrature
  nodes and weights of its spectral measure; traces, counts and a smoothed density from them.
- `hutchinson_trace`: the plain Hutchinson estimator, for cross-checking SLQ.

Units: eigenvalues are in units of the loss per squared parameter (loss / param^2). Every matvec
takes and returns float64 numpy vectors of length P (the number of scalar parameters); the
network itself runs in its own dtype (float32), so products are accurate to float32 rounding.

Memory: Lanczos keeps its k x P basis in float64 on the host (k = 100, P = 1e6: 800 MB).

References:
  Pearlmutter 1994, "Fast exact multiplication by the Hessian", Neural Computation 6(1): Hv is the
    directional derivative of the gradient, R{grad L} (section 3), computed here by `jax.jvp`.
  Lanczos 1950; Paige 1972; Golub & Van Loan, "Matrix Computations" (4th ed.), section 10.1 (the
    recurrence H Q_k = Q_k T_k + beta_k q_{k+1} e_k^T) and 10.3.1 (full reorthogonalisation).
  Parlett, "The Symmetric Eigenvalue Problem", section 13.2: Ritz residual |H y_i - theta_i y_i|
    = beta_k |s_ki|; an interval [theta - r, theta + r] holds an eigenvalue of H.
  Golub & Welsch 1969, "Calculation of Gauss quadrature rules": nodes are the eigenvalues of T,
    weights the squared first components of its eigenvectors.
  Ubaru, Chen & Saad 2017, "Fast estimation of tr(f(A)) via stochastic Lanczos quadrature",
    SIAM J. Matrix Anal. Appl. 38(4), section 3: tr f(H) ~ (1/m) sum_l |v_l|^2 sum_j tau_lj^2 f(theta_lj).
  Ghorbani, Krishnan & Xiao 2019, "An investigation into neural net optimization via Hessian
    eigenvalue density", ICML, section 2: the same nodes and weights smoothed by a Gaussian kernel
    of variance sigma^2 give the density estimate phi_sigma(t).
  Hutchinson 1989, "A stochastic estimator of the trace of the influence matrix": tr H ~ mean v^T H v.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax.flatten_util import ravel_pytree

from realnets.training import mesh as meshlib
PROBES = ("rademacher", "gaussian")


# ---------------------------------------------------------------------------------------------
# A host sample, cut into chunks, each sharded along the data mesh.


def row_count(batch: dict) -> int:
    """Rows of a dict of arrays that share their leading axis (ValueError if they disagree)."""
    if not batch:
        raise ValueError("sample must be a non-empty dict of arrays")
    sizes = {name: int(np.shape(rows)[0]) for name, rows in batch.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"sample arrays must share their number of rows, got {sizes}")
    n = next(iter(sizes.values()))
    if n < 1:
        raise ValueError("sample must have at least one row, got 0")
    return n


class ShardedSample:
    """A host sample (dict of arrays with n rows) cut into chunks of at most `chunk_rows` rows.

    Each chunk is placed once on its own data mesh (`realnets.training.mesh.data_mesh(rows)`: the rows are
    split over gcd(rows, device count) devices, as in training; with several processes over every
    device, so a chunk's rows must be a multiple of the global device count). `mean` runs a
    function that returns a mean over a chunk's rows and averages the chunks with weights rows / n;
    `rows` runs a per-row function and concatenates its outputs (gathered, so that every process
    gets the whole result). Calls are made one at a time and brought to the host before the next
    (multi-device CPU meshes deadlock with several collectives in flight:
    `realnets.training.mesh.needs_lockstep`).
    """

    def __init__(self, batch: dict, *, chunk_rows: int | None = None, devices=None):
        n = row_count(batch)
        chunk_rows = n if chunk_rows is None else int(chunk_rows)
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.num_rows = n
        self._programs = {}
        self.chunks = []            # (rows in chunk, mesh, batch placed on the mesh)
        for lo in range(0, n, chunk_rows):
            hi = min(n, lo + chunk_rows)
            mesh = meshlib.data_mesh(hi - lo, devices)
            host = {name: np.asarray(rows)[lo:hi] for name, rows in batch.items()}
            self.chunks.append((hi - lo, mesh, meshlib.place_batch(host, mesh)))

    def _program(self, fn: Callable, num_replicated: int, per_row: bool, rows: int, mesh):
        """fn jitted for chunks of `rows` rows: replicated arguments first, the rows sharded along
        `data`; the output replicated (a reduction over rows) or sharded (per-row)."""
        cache = self._programs.setdefault((id(fn), per_row), (fn, {}))[1]   # keeps fn alive
        if rows not in cache:
            rep, data = meshlib.replicated(mesh), meshlib.batch_sharding(mesh)
            # With several processes a per-row output sharded over their devices is not this
            # process's to read: gather it (replicated) inside the program instead.
            out = data if per_row and jax.process_count() == 1 else rep
            cache[rows] = jax.jit(fn, in_shardings=(rep,) * num_replicated + (data,),
                                  out_shardings=out)
        return cache[rows]

    def mean(self, fn: Callable, *replicated) -> np.ndarray:
        """sum_c (n_c / n) fn(*replicated, chunk_c), float64 (fn: a mean over its chunk's rows)."""
        total = 0.0
        for rows, mesh, placed in self.chunks:
            program = self._program(fn, len(replicated), False, rows, mesh)
            out = np.asarray(program(*replicated, placed), np.float64)
            total = total + (rows / self.num_rows) * out
        return total

    def rows(self, fn: Callable, *replicated):
        """fn(*replicated, chunk) per chunk (outputs with a leading row axis), concatenated on the
        host as float64 numpy (a pytree of arrays if fn returns one)."""
        outs = []
        for rows, mesh, placed in self.chunks:
            program = self._program(fn, len(replicated), True, rows, mesh)
            out = program(*replicated, placed)
            outs.append(jax.tree.map(lambda x: np.asarray(x, np.float64), out))
        return jax.tree.map(lambda *xs: np.concatenate(xs, axis=0), *outs)


# ---------------------------------------------------------------------------------------------
# Hessian-vector products.


class HessianOperator:
    """v -> H v for the Hessian H of the mean training loss over a sample (see `hvp`).

    Attributes:
      dim: P, the number of scalar parameters.
      num_rows: n, rows of the sample.
      params_P: the flattened parameters (float64 copy).
      unravel: flat vector (P,) -> parameter tree.
    """

    def __init__(self, loss_fn: Callable, params, batch: dict, *, chunk_rows: int | None = None,
                 devices=None):
        theta_P, unravel = ravel_pytree(params)
        self._theta_P = np.asarray(theta_P)
        self.dtype = self._theta_P.dtype
        self.dim = int(self._theta_P.shape[0])
        self.params_P = self._theta_P.astype(np.float64)
        self.unravel = unravel
        self.sample = ShardedSample(batch, chunk_rows=chunk_rows, devices=devices)
        self.num_rows = self.sample.num_rows

        def flat_loss(t_P, rows):
            return loss_fn(unravel(t_P), rows)

        def hvp_rows(t_P, v_P, rows):
            # Forward-over-reverse (Pearlmutter's R-operator): d/de grad L(theta + e v) at e = 0.
            return jax.jvp(lambda t: jax.grad(flat_loss)(t, rows), (t_P,), (v_P,))[1]

        self._hvp_rows = hvp_rows
        self._grad_rows = jax.grad(flat_loss)
        self.num_matvecs = 0

    def __call__(self, v_P) -> np.ndarray:
        """H v: v float (P,) -> float64 (P,)."""
        v_P = np.asarray(v_P)
        if v_P.shape != (self.dim,):
            raise ValueError(f"vector must have shape ({self.dim},), got {v_P.shape}")
        self.num_matvecs += 1
        return self.sample.mean(self._hvp_rows, self._theta_P, v_P.astype(self.dtype))

    matvec = __call__

    def gradient(self) -> np.ndarray:
        """The mean gradient over the sample, float64 (P,)."""
        return self.sample.mean(self._grad_rows, self._theta_P)


def hvp(loss_fn: Callable, params, batch: dict, *, chunk_rows: int | None = None,
        devices=None) -> HessianOperator:
    """The Hessian of the mean training loss over a sample, as a matrix-free operator.

    H = (1/n) sum_j d^2 loss_j / d theta^2 over the n rows of `batch`; `H(v)` costs about two
    gradient evaluations over the sample (Pearlmutter 1994, section 3).

    Args:
      loss_fn: (params, batch) -> mean loss over the batch's rows (a `Task.loss_fn`).
      params: the parameter tree at which H is taken.
      batch: the sample, a dict of host arrays with a leading row axis n (e.g. `Task.train` or a
        slice of it, or `Task.draw_batch(rng, n)`).
      chunk_rows: rows per compiled call (None: the whole sample at once); a sample too big for
        device memory is cut into chunks whose products are averaged (weights rows / n).
      devices: devices to shard over (default all); each chunk of b rows uses gcd(b, #devices).

    Returns:
      A `HessianOperator`: call it on a float vector (P,) to get H v, float64 (P,).
    """
    return HessianOperator(loss_fn, params, batch, chunk_rows=chunk_rows, devices=devices)


# ---------------------------------------------------------------------------------------------
# Lanczos.


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


# ---------------------------------------------------------------------------------------------
# Stochastic Lanczos quadrature.


@dataclass(frozen=True)
class SpectralDensity:
    """SLQ estimate of the spectral measure (1/P) sum_i delta(t - lambda_i) of H.

    Probe l gives Gauss nodes theta_lj (eigenvalues of its T) and weights
    w_lj = tau_lj^2 |v_l|^2 / P (tau_lj: first component of the j-th eigenvector of T), so that
    v_l^T f(H) v_l ~ P sum_j w_lj f(theta_lj) (exact for polynomials of degree < 2 m) and
    tr f(H) ~ P mean_l sum_j w_lj f(theta_lj) (Ubaru et al. 2017, section 3). For Rademacher
    probes |v|^2 = P, so each probe's weights sum to exactly 1.

    Attributes:
      nodes_LxM: float64 (probes, steps); unused slots (an exhausted Krylov space) have weight 0.
      weights_LxM: float64 (probes, steps).
      dim: P.
      probe: 'rademacher' or 'gaussian'.
    """

    nodes_LxM: np.ndarray
    weights_LxM: np.ndarray
    dim: int
    probe: str

    @property
    def num_probes(self) -> int:
        return int(self.nodes_LxM.shape[0])

    def per_probe(self, f: Callable) -> np.ndarray:
        """P sum_j w_lj f(theta_lj) for each probe l: (L,) unbiased-ish estimates of tr f(H)."""
        return self.dim * np.sum(self.weights_LxM * f(self.nodes_LxM), axis=1)

    def expectation(self, f: Callable) -> tuple[float, float]:
        """(estimate of tr f(H), its standard error across probes)."""
        values = self.per_probe(f)
        se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
        return float(np.mean(values)), se

    def trace(self) -> tuple[float, float]:
        """tr H (loss / param^2) and its standard error; equals Hutchinson's estimate with the same
        probes (sum_j tau_j^2 theta_j = e_1^T T e_1 = v^T H v / |v|^2)."""
        return self.expectation(lambda t: t)

    def count_above(self, threshold: float) -> tuple[float, float]:
        """Estimated number of eigenvalues > threshold, and its standard error across probes.

        Exact in the limit of many probes only up to the quadrature's resolution: the mass of a
        node near the threshold falls wholly on one side, so put thresholds in spectral gaps.
        """
        return self.expectation(lambda t: (t > threshold).astype(np.float64))

    def counts_above(self, thresholds) -> np.ndarray:
        """Per-probe counts above each threshold: float64 (L, T)."""
        t = np.asarray(thresholds, np.float64)
        above = self.nodes_LxM[:, :, None] > t[None, None, :]
        return self.dim * np.sum(self.weights_LxM[:, :, None] * above, axis=1)

    def density(self, grid, sigma: float) -> np.ndarray:
        """phi_sigma(t) = mean_l sum_j w_lj N(t; theta_lj, sigma^2) on `grid` (Ghorbani et al.
        2019, section 2): a probability density over eigenvalues (integrates to ~1; multiply by
        P for eigenvalues per unit of curvature). float64, shape of `grid`."""
        sigma = float(sigma)
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        t = np.asarray(grid, np.float64)
        z = (t[..., None, None] - self.nodes_LxM) / sigma
        kernel = np.exp(-0.5 * z * z) / (sigma * math.sqrt(2.0 * math.pi))
        return np.sum(kernel * self.weights_LxM, axis=(-2, -1)) / self.num_probes

    def to_dict(self) -> dict:
        return {"dim": self.dim, "probe": self.probe, "nodes": self.nodes_LxM.tolist(),
                "weights": self.weights_LxM.tolist()}


def spectral_density(matvec: Callable, dim: int, num_steps: int, num_probes: int, key, *,
                     probe: str = "rademacher") -> SpectralDensity:
    """Stochastic Lanczos quadrature of the spectrum of H (Ubaru et al. 2017; Ghorbani et al. 2019).

    For each of `num_probes` probes v_l (Rademacher or Gaussian, E v v^T = I), `num_steps`
    Lanczos steps from v_l / |v_l| give T_l = S diag(theta) S^T; the nodes are theta_lj and the
    weights tau_lj^2 |v_l|^2 / P with tau_lj = S_1j (Golub & Welsch 1969).

    Args:
      matvec: v (P,) -> H v (P,).
      dim: P.
      num_steps: Lanczos steps per probe m (quadrature exact for polynomials of degree < 2 m).
      num_probes: L >= 1 (>= 2 for standard errors).
      key: jax PRNG key; probe l uses fold_in(key, l), like `hutchinson_trace`.
      probe: 'rademacher' (default; lower variance) or 'gaussian'.

    Returns:
      SpectralDensity with nodes and weights (L, m).
    """
    if int(num_probes) < 1:
        raise ValueError(f"num_probes must be >= 1, got {num_probes}")
    nodes = np.zeros((int(num_probes), int(num_steps)))
    weights = np.zeros_like(nodes)
    for l in range(int(num_probes)):
        probe_key = jax.random.fold_in(key, l)
        v = draw_probe(probe_key, dim, probe)
        run = lanczos(matvec, dim, num_steps, jax.random.fold_in(probe_key, 1), start=v)
        theta, S = run.ritz()
        m = run.steps
        nodes[l, :m] = theta
        weights[l, :m] = S[0] ** 2 * float(v @ v) / dim
    return SpectralDensity(nodes_LxM=nodes, weights_LxM=weights, dim=int(dim), probe=probe)


def hutchinson_trace(matvec: Callable, dim: int, num_probes: int, key, *,
                     probe: str = "rademacher") -> tuple[float, float]:
    """tr H ~ mean_l v_l^T H v_l (Hutchinson 1989), and its standard error across probes.

    Probe l is drawn exactly as in `spectral_density` (fold_in(key, l)), so with the same key the
    SLQ trace equals this estimate up to rounding.
    """
    values = []
    for l in range(int(num_probes)):
        v = draw_probe(jax.random.fold_in(key, l), dim, probe)
        values.append(float(v @ np.asarray(matvec(v), np.float64)))
    values = np.asarray(values)
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
    return float(np.mean(values)), se

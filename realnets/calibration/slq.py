"""Stochastic Lanczos quadrature: per random probe the Gauss nodes and weights of its spectral
measure, and traces, counts and a smoothed density from them; Hutchinson's trace for a cross-check.

References:
  Golub & Welsch 1969 (nodes: eigenvalues of T; weights: squared first components).
  Ubaru, Chen & Saad 2017, SIAM J. Matrix Anal. Appl. 38(4), section 3.
  Ghorbani, Krishnan & Xiao 2019, ICML, section 2 (the Gaussian-smoothed density).
  Hutchinson 1989 (tr H ~ mean v^T H v).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import numpy as np

from realnets.calibration import lanczos


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
        v = lanczos.draw_probe(probe_key, dim, probe)
        run = lanczos.lanczos(matvec, dim, num_steps, jax.random.fold_in(probe_key, 1), start=v)
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
        v = lanczos.draw_probe(jax.random.fold_in(key, l), dim, probe)
        values.append(float(v @ np.asarray(matvec(v), np.float64)))
    values = np.asarray(values)
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
    return float(np.mean(values)), se

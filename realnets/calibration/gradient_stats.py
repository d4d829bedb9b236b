"""Per-example gradients over a sample and their statistics: the mean G, the noise c_i along given
directions, tr(Sigma), B_simple = tr(Sigma) / |G|^2, and B_noise = tr(H Sigma) / (G^T H G) by
Hessian-vector products (McCandlish et al. 2018, section 2.2 and eq. 2.11).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from realnets.calibration import hessian_products, measured, sharded_sample



def per_example_gradients(loss_fn: Callable, params, batch: dict) -> jax.Array:
    """Gradients of each row's loss, flattened: (n, P) (vmapped `jax.grad` over rows).

    Each row is passed to `loss_fn` as a batch of one, so g_j = grad loss(params, row j) and the
    mean over rows is the gradient of the mean loss. Pure jax: usable inside jit.
    """
    theta_P, unravel = ravel_pytree(params)

    def one(row):
        row = jax.tree.map(lambda x: x[None], row)
        return jax.grad(lambda t: loss_fn(unravel(t), row))(theta_P)

    return jax.vmap(one)(batch)


@dataclass(frozen=True)
class GradientStatistics:
    """Sample statistics of per-example gradients g_j (j = 1..n) along K unit directions v_i.

    Attributes (all float64; gradients in loss / param):
      num_examples: n.
      mean_gradient_P: G = mean_j g_j, (P,).
      grad_components_K, grad_components_se_K: g_i = v_i . G, standard error sd_j(v_i . g_j) / sqrt(n).
      noise_projections_K, noise_projections_se_K: c_i = v_i^T Sigma v_i, the sample variance of
        v_i . g_j (ddof 1); standard error sd_j((v_i . (g_j - G))^2) / sqrt(n) (large-n formula).
      trace_cov, trace_cov_se: tr(Sigma) = sum_j |g_j - G|^2 / (n - 1); sd_j(|g_j - G|^2) / sqrt(n).
      grad_sq_norm, grad_sq_norm_se: unbiased |E g|^2 = |G|^2 - tr(Sigma) / n; first-order standard
        error 2 sd_j((g_j - G) . G) / sqrt(n).
    """

    num_examples: int
    mean_gradient_P: np.ndarray
    grad_components_K: np.ndarray
    grad_components_se_K: np.ndarray
    noise_projections_K: np.ndarray
    noise_projections_se_K: np.ndarray
    trace_cov: float
    trace_cov_se: float
    grad_sq_norm: float
    grad_sq_norm_se: float

    @property
    def b_simple(self) -> float:
        """B_simple = tr(Sigma) / |G|^2 (nan when |G|^2 <= 0)."""
        return self.trace_cov / self.grad_sq_norm if self.grad_sq_norm > 0 else math.nan

    def to_dict(self) -> dict:
        """JSON-ready (without the P-vector G; B_simple null where |G|^2 is not positive)."""
        return {"num_examples": self.num_examples,
                "grad_components": measured.measured_value(self.grad_components_K, self.grad_components_se_K,
                                             "standard error over examples"),
                "noise_projections": measured.measured_value(self.noise_projections_K,
                                               self.noise_projections_se_K,
                                               "standard error over examples"),
                "trace_cov": measured.measured_value(self.trace_cov, self.trace_cov_se,
                                       "standard error over examples"),
                "grad_sq_norm": measured.measured_value(self.grad_sq_norm, self.grad_sq_norm_se,
                                          "first-order standard error over examples"),
                "b_simple": measured.finite_or_none(self.b_simple)}


def gradient_statistics(loss_fn: Callable, params, batch: dict, directions_KxP=None, *,
                        chunk_rows: int | None = None, devices=None) -> GradientStatistics:
    """Mean gradient, noise projections c_i, tr(Sigma) and g_i = v_i . G from per-example gradients.

    Two passes over the sample, each chunk sharded along the `data` mesh as in training: the mean
    gradient G first, then per-example gradients (vmapped `jax.grad`, `per_example_gradients`)
    reduced on the devices to their projections v_i . g_j, |g_j - G|^2 and (g_j - G) . G, so only
    O(n K) numbers reach the host (the n x P gradients never leave the chunk).

    Args:
      loss_fn: (params, batch) -> mean loss over rows.
      params: parameter tree.
      batch: the sample, dict of host arrays with n >= 2 rows.
      directions_KxP: unit vectors v_i as rows (e.g. `lanczos.Eigenpairs.eigenvectors_KxP`), or None.
      chunk_rows: rows per compiled call (bounds the chunk_rows x P per-example gradients).
      devices: devices to shard over (default all).

    Returns:
      GradientStatistics.
    """
    sample = sharded_sample.ShardedSample(batch, chunk_rows=chunk_rows, devices=devices)
    n = sample.num_rows
    if n < 2:
        raise ValueError(f"the sample must have at least 2 rows for a covariance, got {n}")
    theta_P, unravel = ravel_pytree(params)
    theta_P = np.asarray(theta_P)
    dim = theta_P.shape[0]
    if directions_KxP is None:
        directions_KxP = np.zeros((0, dim))
    V = np.asarray(directions_KxP, np.float64)
    if V.ndim != 2 or V.shape[1] != dim:
        raise ValueError(f"directions must have shape (K, {dim}), got {V.shape}")
    norms = np.linalg.norm(V, axis=1)
    if np.any(np.abs(norms - 1.0) > 1e-3):
        bad = int(np.flatnonzero(np.abs(norms - 1.0) > 1e-3)[0])
        raise ValueError(f"directions must be unit vectors, got norm {norms[bad]:g} for row {bad}")

    def flat_loss(t_P, rows):
        return loss_fn(unravel(t_P), rows)

    def project_rows(t_P, G_P, V_KxP, rows):
        g_NxP = per_example_gradients(flat_loss, t_P, rows)
        dev_NxP = g_NxP - G_P
        return g_NxP @ V_KxP.T, jnp.sum(dev_NxP * dev_NxP, axis=1), dev_NxP @ G_P

    G_P = sample.mean(jax.grad(flat_loss), theta_P)
    proj_NxK, dev_sq_N, dev_dot_N = sample.rows(project_rows, theta_P, G_P.astype(theta_P.dtype),
                                               V.astype(theta_P.dtype))
    g_K = proj_NxK.mean(axis=0)
    sq_NxK = (proj_NxK - g_K) ** 2
    trace_cov = float(dev_sq_N.sum() / (n - 1))
    grad_sq = float(G_P @ G_P) - trace_cov / n
    return GradientStatistics(
        num_examples=n, mean_gradient_P=G_P,
        grad_components_K=g_K, grad_components_se_K=measured.standard_error(proj_NxK),
        noise_projections_K=sq_NxK.sum(axis=0) / (n - 1),
        noise_projections_se_K=measured.standard_error(sq_NxK),
        trace_cov=trace_cov, trace_cov_se=float(measured.standard_error(dev_sq_N)),
        grad_sq_norm=grad_sq, grad_sq_norm_se=float(2.0 * measured.standard_error(dev_dot_N)))


@dataclass(frozen=True)
class HessianNoiseScale:
    """B_noise = tr(H Sigma) / (G^T H G) measured with Hessian-vector products.

    Attributes (H of the sample's mean loss, Sigma the per-example gradient covariance):
      trace_h_cov, trace_h_cov_se: tr(H Sigma) ~ n / (n - 1) mean_j (g_j - G)^T H (g_j - G) over
        the first m rows j of the sample (G: the mean gradient over all n rows); standard error
        over the m rows.
      grad_h_grad: unbiased G^T H G = G_n^T H G_n - tr(H Sigma) / n.
      b_noise, b_noise_se: their ratio and its first-order standard error (from tr(H Sigma)'s
        error only: the spread of G_n^T H G_n over resamples is not estimated).
      noise_rows: m; num_examples: n.
    """

    trace_h_cov: float
    trace_h_cov_se: float
    grad_h_grad: float
    b_noise: float
    b_noise_se: float
    noise_rows: int
    num_examples: int

    def _b_noise_null_reason(self) -> str | None:
        if math.isfinite(self.grad_h_grad) and self.grad_h_grad <= 0:
            return (f"G^T H G estimated at {self.grad_h_grad:.3g}, not positive: the mean gradient "
                    "is not distinguishable from zero, so B_noise is unbounded")
        return None

    def to_dict(self) -> dict:
        return {"trace_h_cov": measured.measured_value(self.trace_h_cov, self.trace_h_cov_se,
                                         "standard error over the rows' quadratic forms"),
                "grad_h_grad": measured.finite_or_none(self.grad_h_grad),
                "b_noise": measured.measured_value(
                    self.b_noise, self.b_noise_se,
                    "first-order standard error from tr(H Sigma) only",
                    null_reason=self._b_noise_null_reason()),
                "noise_rows": self.noise_rows, "num_examples": self.num_examples}


def hessian_noise_scale(hessian: hessian_products.HessianOperator, loss_fn: Callable, params,
                        sample: dict, noise_rows: int,
                        chunk_rows: int | None = None) -> HessianNoiseScale:
    """B_noise = tr(H Sigma) / (G^T H G) (McCandlish et al. 2018, eq. 2.8), by HVPs.

    The per-example deviations d_j = g_j - G of the first m = `noise_rows` rows of the sample
    (`per_example_gradients`, host float64 (m, P)) each cost one product H d_j. G is the mean
    gradient over all n rows, which include row j, so E[d_j d_j^T] = (1 - 1/n) Sigma: hence the
    factor n / (n - 1). G^T H G is unbiased like |G|^2 in `gradient_statistics`:
    E[G_n^T H G_n] = G^T H G + tr(H Sigma) / n.

    Args:
      hessian: `hessian_products.hvp(loss_fn, params, sample, ...)` (the same params and sample).
      loss_fn: (params, batch) -> mean loss over rows.
      params: the parameter tree.
      sample: dict of host arrays, the n rows the Hessian was built on.
      noise_rows: m, 2 <= m <= n (m + 1 Hessian-vector products).
      chunk_rows: per-example gradients taken this many rows at a time (bounds the host's
        chunk_rows x P float64 block; None: all m at once).

    Returns:
      HessianNoiseScale.
    """
    n = hessian.num_rows
    m = int(noise_rows)
    if not 2 <= m <= n:
        raise ValueError(f"noise_rows must be in [2, {n}] (the sample's rows), got {noise_rows}")
    chunk = m if chunk_rows is None else int(chunk_rows)
    if chunk < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    G_P = hessian.gradient()
    theta_P, unravel = ravel_pytree(params)

    def flat_loss(t_P, batch):
        return loss_fn(unravel(t_P), batch)

    per_row = jax.jit(lambda t, r: per_example_gradients(flat_loss, t, r))
    q = []
    for start in range(0, m, chunk):
        rows = {name: np.asarray(v)[start:min(start + chunk, m)] for name, v in sample.items()}
        g_CxP = np.asarray(per_row(theta_P, rows), np.float64)
        q.extend(float(d @ hessian(d)) for d in g_CxP - G_P)
    q_M = np.array(q) * n / (n - 1)
    trace_h_cov = float(q_M.mean())
    trace_se = float(measured.standard_error(q_M))
    grad_h_grad = float(G_P @ hessian(G_P)) - trace_h_cov / n
    if grad_h_grad > 0:
        b_noise = trace_h_cov / grad_h_grad
        # dB/dtr = 1 / gHg + tr / (n gHg^2): gHg depends on tr through its bias correction
        b_noise_se = abs(1.0 / grad_h_grad + trace_h_cov / (n * grad_h_grad ** 2)) * trace_se
    else:
        b_noise, b_noise_se = math.nan, math.nan
    return HessianNoiseScale(trace_h_cov=trace_h_cov, trace_h_cov_se=trace_se,
                             grad_h_grad=grad_h_grad, b_noise=b_noise, b_noise_se=b_noise_se,
                             noise_rows=m, num_examples=n)

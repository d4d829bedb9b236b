"""Fit a noisy quadratic model to a network: curvature, gradient noise and start, measured.

The NQM (DESIGN.md section 2) needs, per eigen-direction i of the Hessian H: the curvature h_i,
the per-example gradient variance c_i = v_i^T Sigma v_i along the eigenvector v_i, and the start
E[theta_i^2]. On a network at parameters theta we measure
- the top-k eigenpairs (h_i, v_i) by Lanczos (`realnets.calibration.curvature.top_eigenpairs`);
- the rest of the spectrum by stochastic Lanczos quadrature, summarised by a power law
  h_i = h_k (i / k)^-a fitted to its counting function (`fit_power_law_tail`);
- per-example gradients g_j over a sample: their mean G, c_i, tr(Sigma) and g_i = v_i . G
  (`gradient_statistics`);
- theta_i along v_i from g_i = h_i theta_i (on a quadratic G = H theta, measured from the
  minimum), so E[theta_i^2] ~ g_i^2 / h_i^2;
and `fit_nqm` turns these into an `NQMConfig` with caller arrays plus a JSON-ready record of
every fitted number with its uncertainty. `calibrate` runs the whole chain.

References:
  Zhang et al. 2019, "Which algorithmic choices matter at which batch sizes? Insights from a
    noisy quadratic model", section 3 (the model) and section 4 (c_i ~ h_i on real networks).
  McCandlish et al. 2018, "An empirical model of large-batch training", section 2.2: Sigma is the
    per-example covariance, tr(Sigma) / |G|^2 = B_simple.
  Ghorbani, Krishnan & Xiao 2019, section 2 (SLQ density); Gur-Ari, Roberts & Dyer 2018,
    "Gradient descent happens in a tiny subspace" (the gradient lies mostly in the top-k space).
  Hazen 1914 plotting position: on a counting function N(t) = #{lambda > t}, the eigenvalue t
    sits at index N + 1/2 on average (unbiased on a staircase of exact eigenvalues).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from nqm.problem import NQMConfig
from realnets.calibration import curvature
# ---------------------------------------------------------------------------------------------
# Per-example gradients and their statistics.


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


def _standard_error(x: np.ndarray, axis: int = 0) -> np.ndarray:
    n = x.shape[axis]
    if n < 2:
        return np.full(np.delete(x.shape, axis), np.nan)
    return np.std(x, axis=axis, ddof=1) / math.sqrt(n)


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
                "grad_components": _measured(self.grad_components_K, self.grad_components_se_K,
                                             "standard error over examples"),
                "noise_projections": _measured(self.noise_projections_K,
                                               self.noise_projections_se_K,
                                               "standard error over examples"),
                "trace_cov": _measured(self.trace_cov, self.trace_cov_se,
                                       "standard error over examples"),
                "grad_sq_norm": _measured(self.grad_sq_norm, self.grad_sq_norm_se,
                                          "first-order standard error over examples"),
                "b_simple": _finite_or_none(self.b_simple)}


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
      directions_KxP: unit vectors v_i as rows (e.g. `Eigenpairs.eigenvectors_KxP`), or None.
      chunk_rows: rows per compiled call (bounds the chunk_rows x P per-example gradients).
      devices: devices to shard over (default all).

    Returns:
      GradientStatistics.
    """
    sample = curvature.ShardedSample(batch, chunk_rows=chunk_rows, devices=devices)
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
        grad_components_K=g_K, grad_components_se_K=_standard_error(proj_NxK),
        noise_projections_K=sq_NxK.sum(axis=0) / (n - 1),
        noise_projections_se_K=_standard_error(sq_NxK),
        trace_cov=trace_cov, trace_cov_se=float(_standard_error(dev_sq_N)),
        grad_sq_norm=grad_sq, grad_sq_norm_se=float(2.0 * _standard_error(dev_dot_N)))


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

    def to_dict(self) -> dict:
        return {"trace_h_cov": _measured(self.trace_h_cov, self.trace_h_cov_se,
                                         "standard error over the rows' quadratic forms"),
                "grad_h_grad": _finite_or_none(self.grad_h_grad),
                "b_noise": _measured(self.b_noise, self.b_noise_se,
                                     "first-order standard error from tr(H Sigma) only"),
                "noise_rows": self.noise_rows, "num_examples": self.num_examples}


def hessian_noise_scale(hessian: curvature.HessianOperator, loss_fn: Callable, params,
                        sample: dict, noise_rows: int,
                        chunk_rows: int | None = None) -> HessianNoiseScale:
    """B_noise = tr(H Sigma) / (G^T H G) (McCandlish et al. 2018, eq. 2.8), by HVPs.

    The per-example deviations d_j = g_j - G of the first m = `noise_rows` rows of the sample
    (`per_example_gradients`, host float64 (m, P)) each cost one product H d_j. G is the mean
    gradient over all n rows, which include row j, so E[d_j d_j^T] = (1 - 1/n) Sigma: hence the
    factor n / (n - 1). G^T H G is unbiased like |G|^2 in `gradient_statistics`:
    E[G_n^T H G_n] = G^T H G + tr(H Sigma) / n.

    Args:
      hessian: `curvature.hvp(loss_fn, params, sample, ...)` (the same params and sample).
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
    trace_se = float(_standard_error(q_M))
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


# ---------------------------------------------------------------------------------------------
# The spectrum beyond the top-k: a power law fitted to the SLQ counting function.


def tail_curvature(index, anchor_index: int, anchor_curvature: float,
                   exponent: float) -> np.ndarray:
    """The power-law tail h_i = h_k (i / k)^-a at direction indices `index` (float64)."""
    i = np.asarray(index, np.float64)
    return anchor_curvature * (i / anchor_index) ** -exponent


@dataclass(frozen=True)
class PowerLawTail:
    """h_i = h_k (i / k)^-a for i = k+1 .. dim, fitted to an SLQ density.

    Attributes:
      exponent: a; exponent_se: its jackknife standard error over SLQ probes.
      anchor_index: k (the number of measured top eigenvalues).
      anchor_curvature: h_k, the smallest measured top eigenvalue.
      dim: d = round(N(floor)), the SLQ count of eigenvalues above `floor` (at least k + 1);
        dim_se: the count's standard error over probes; dim_resolution: the quadrature's
        resolution there, P times the weight of the node nearest the floor (averaged over probes):
        that node's mass falls wholly on one side, an error the probe spread does not show.
      floor: curvature below which directions are left out of the NQM.
      r2: R^2 of the log-log fit.
      points_curvature, points_index: the (t, N(t) + 1/2) points the fit used (for plots).
    """

    exponent: float
    exponent_se: float
    anchor_index: int
    anchor_curvature: float
    dim: int
    dim_se: float
    dim_resolution: float
    floor: float
    r2: float
    points_curvature: tuple[float, ...]
    points_index: tuple[float, ...]

    def curvature(self) -> np.ndarray:
        """Tail eigenvalues h_{k+1} .. h_d, float64 (d - k,)."""
        i = np.arange(self.anchor_index + 1, self.dim + 1, dtype=np.float64)
        return tail_curvature(i, self.anchor_index, self.anchor_curvature, self.exponent)

    def to_dict(self) -> dict:
        return {"exponent": _measured(self.exponent, self.exponent_se,
                                      "jackknife standard error over SLQ probes"),
                "anchor_index": self.anchor_index, "anchor_curvature": self.anchor_curvature,
                "dim": _measured(self.dim, self.dim_se, "standard error over SLQ probes"),
                "dim_resolution": _finite_or_none(self.dim_resolution),
                "floor": self.floor, "r2": _finite_or_none(self.r2),
                "points": {"curvature": list(self.points_curvature),
                           "index": list(self.points_index)}}


def _fit_exponent(index_T: np.ndarray, t_T: np.ndarray, k: int, h_k: float):
    """Least squares of log(t / h_k) = -a log(i / k) through the anchor; returns (a, r2) or None."""
    use = index_T > k
    if np.count_nonzero(use) < 2:
        return None
    x, y = np.log(index_T[use] / k), np.log(t_T[use] / h_k)
    slope = float(x @ y / (x @ x))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - slope * x) ** 2)) / ss_tot if ss_tot > 0 else math.nan
    return -slope, r2


def fit_power_law_tail(density: curvature.SpectralDensity, top_eigenvalues, *, floor: float,
                       num_points: int = 32) -> PowerLawTail:
    """Fit h_i = h_k (i / k)^-a to the SLQ counting function between `floor` and h_k.

    On a log grid of curvatures t in [floor, h_k), the SLQ count N(t) of eigenvalues above t
    (`SpectralDensity.counts_above`) puts eigenvalue t at index i = N(t) + 1/2 (Hazen plotting
    position); the points with i > k are fitted by least squares on log-log through the anchor
    (k, h_k): log(t / h_k) = -a log(i / k). The uncertainty of a is the jackknife over probes
    (the fit redone with each probe left out), which accounts for the correlation between the
    points of one cumulative count that a regression standard error would ignore. It does not
    see the quadrature's own discretisation (m nodes per probe): on a diagonal H with Rademacher
    probes every probe gives the same measure and the jackknife error is 0, while a = 0.5 comes
    out as 0.505 with 40 steps on d = 1000. Check the fit against `points_*` and `r2`.

    Args:
      density: SLQ of the same Hessian.
      top_eigenvalues: the k measured top eigenvalues (any order; h_k is their minimum).
      floor: lowest curvature kept (0 < floor < h_k); the NQM's d is the SLQ count above it.
      num_points: grid points.

    Returns:
      PowerLawTail.
    """
    h = np.sort(np.asarray(top_eigenvalues, np.float64))[::-1]
    k = int(h.shape[0])
    if k < 1 or not np.all(np.isfinite(h)) or h[-1] <= 0:
        raise ValueError("top_eigenvalues must be a non-empty list of finite positive numbers")
    h_k = float(h[-1])
    floor = float(floor)
    if not 0.0 < floor < h_k:
        raise ValueError(f"floor must be in (0, h_k = {h_k:g}), got {floor:g}")
    if int(num_points) < 2:
        raise ValueError(f"num_points must be >= 2, got {num_points}")
    t_T = np.geomspace(floor, h_k, int(num_points) + 1)[:-1]
    counts_LxT = density.counts_above(t_T)
    L = counts_LxT.shape[0]

    fitted = _fit_exponent(counts_LxT.mean(axis=0) + 0.5, t_T, k, h_k)
    if fitted is None:
        raise ValueError(f"the SLQ density has fewer than 2 grid points with more than k = {k} "
                         f"eigenvalues above them between floor {floor:g} and h_k {h_k:g}; lower "
                         "floor or take more Lanczos steps")
    exponent, r2 = fitted
    if not exponent > 0:
        raise ValueError(f"the fitted tail exponent must be > 0 (a decreasing spectrum), got "
                         f"{exponent:g}; check floor {floor:g}")
    exponent_se = math.nan
    if L > 1:
        loo = []
        for l in range(L):
            rest = np.delete(counts_LxT, l, axis=0).mean(axis=0) + 0.5
            fit = _fit_exponent(rest, t_T, k, h_k)
            loo.append(math.nan if fit is None else fit[0])
        loo = np.asarray(loo)
        exponent_se = float(math.sqrt((L - 1) / L * np.sum((loo - loo.mean()) ** 2)))

    count_floor_L = density.counts_above([floor])[:, 0]
    dim = int(round(float(count_floor_L.mean())))
    if dim <= k:
        raise ValueError(f"the SLQ density counts {count_floor_L.mean():.1f} eigenvalues above floor "
                         f"{floor:g}, no more than the k = {k} measured: no tail; lower floor")
    # the node nearest the floor in each probe (unused, zero-weight slots never count)
    distance_LxM = np.where(density.weights_LxM > 0, np.abs(density.nodes_LxM - floor), np.inf)
    nearest_L = np.argmin(distance_LxM, axis=1)
    resolution = density.dim * float(np.mean(density.weights_LxM[np.arange(L), nearest_L]))
    index_T = counts_LxT.mean(axis=0) + 0.5
    use = index_T > k
    return PowerLawTail(exponent=float(exponent), exponent_se=exponent_se, anchor_index=k,
                        anchor_curvature=h_k, dim=dim,
                        dim_se=float(_standard_error(count_floor_L)) if L > 1 else math.nan,
                        dim_resolution=resolution, floor=floor, r2=float(r2),
                        points_curvature=tuple(t_T[use].tolist()),
                        points_index=tuple(index_T[use].tolist()))


# ---------------------------------------------------------------------------------------------
# The NQM.


def _finite_or_none(x):
    x = float(x)
    return x if math.isfinite(x) else None


def _measured(value, uncertainty, kind: str) -> dict:
    """{"value", "uncertainty", "uncertainty_kind"}: floats or lists, non-finite as null."""
    def conv(x):
        if x is None:
            return None
        if np.ndim(x) == 0:
            return _finite_or_none(x)
        return [_finite_or_none(v) for v in np.asarray(x, np.float64).ravel()]

    out = {"value": conv(value), "uncertainty": conv(uncertainty), "uncertainty_kind": kind}
    flat = [v for x in (out["value"], out["uncertainty"])
            for v in (x if isinstance(x, list) else [x])]
    if None in flat:
        out["null_reason"] = "not finite (e.g. no uncertainty given, or fewer than 2 samples)"
    return out


def _optional(name: str, values, k: int) -> np.ndarray:
    if values is None:
        return np.full(k, np.nan)
    arr = np.asarray(values, np.float64).ravel()
    if arr.shape != (k,):
        raise ValueError(f"{name} must have length {k}, got {arr.shape[0]}")
    return arr


def fit_nqm(eigenvalues, noise_projections, grad_components, *, target: float | None,
            tail: PowerLawTail | None = None, eigenvalue_errors=None, noise_errors=None,
            grad_errors=None, grad_sq_norm: float | None = None,
            grad_sq_norm_se: float | None = None) -> tuple[NQMConfig, dict]:
    """An NQM with the measured top-k directions and an optional power-law tail.

    Top-k directions (measured): h_i = eigenvalues, c_i = noise_projections,
    E[theta_i^2] = g_i^2 / h_i^2 (G = H theta on a quadratic, so theta_i = g_i / h_i; one
    sample of theta_i^2, biased up by se(g_i)^2 / h_i^2, reported).
    Tail directions i = k+1 .. d (not measured one by one):
    - h_i = h_k (i / k)^-a from `tail`;
    - c_i = rho h_i with rho = sum_top c / sum_top h (the NQM's c proportional to h, Zhang et al.
      2019, with the constant measured on the top-k);
    - E[theta_i^2] = m for all i, with m = (|G|^2 - sum_top g_i^2) / sum_tail h_i^2 when
      `grad_sq_norm` is given (the part of the gradient outside the top-k space, clipped at 0),
      else the mean of the top-k E[theta_i^2].

    Args:
      eigenvalues: top-k Hessian eigenvalues h_i > 0 (K,).
      noise_projections: c_i = v_i^T Sigma v_i > 0 (K,).
      grad_components: g_i = v_i . G (K,).
      target: the loss the NQM must reach (> 0, below the fitted initial loss), or None to fit
        without one: then the target is not checked against the initial loss, the record's
        "target" is None and the returned config carries a placeholder target of 1.0, to be set
        by the caller (`dataclasses.replace`) once a target is chosen.
      tail: PowerLawTail anchored at these eigenvalues, or None (a d = k model).
      eigenvalue_errors, noise_errors, grad_errors: uncertainties (K,) (e.g. Ritz residuals and
        standard errors), propagated to first order.
      grad_sq_norm, grad_sq_norm_se: unbiased |G|^2 and its standard error.

    Returns:
      (NQMConfig with caller arrays curvature / noise_variance / init_second_moments of length d,
       record: a JSON-ready dict of every fitted number with its uncertainty).
    """
    h = np.asarray(eigenvalues, np.float64).ravel()
    k = int(h.shape[0])
    if k < 1 or not np.all(np.isfinite(h)) or np.any(h <= 0):
        raise ValueError("eigenvalues must be a non-empty list of finite numbers > 0 (an NQM needs "
                         f"positive curvature), got {h.tolist()[:8]}")
    c = _optional("noise_projections", noise_projections, k)
    g = _optional("grad_components", grad_components, k)
    if not np.all(np.isfinite(c)) or np.any(c <= 0):
        raise ValueError(f"noise_projections must be finite and > 0, got {c.tolist()[:8]}")
    if not np.all(np.isfinite(g)):
        raise ValueError(f"grad_components must be finite, got {g.tolist()[:8]}")
    h_err = _optional("eigenvalue_errors", eigenvalue_errors, k)
    c_err = _optional("noise_errors", noise_errors, k)
    g_err = _optional("grad_errors", grad_errors, k)
    order = np.argsort(h)[::-1]
    h, c, g, h_err, c_err, g_err = (a[order] for a in (h, c, g, h_err, c_err, g_err))

    x0 = g ** 2 / h ** 2
    x0_err = np.sqrt((2.0 * np.abs(g) * g_err / h ** 2) ** 2 + (2.0 * g ** 2 * h_err / h ** 3) ** 2)
    record = {
        "top_k": k,
        "top": {
            "curvature": _measured(h, h_err, "Ritz residual |Hv - hv| (an eigenvalue lies within it)"),
            "noise_variance": _measured(c, c_err, "standard error over examples"),
            "grad_components": _measured(g, g_err, "standard error over examples"),
            "init_second_moments": _measured(
                x0, x0_err, "first-order propagated error; one sample of theta_i^2, biased up by "
                "se(g_i)^2 / h_i^2 (see init_second_moments_bias)"),
            "init_second_moments_bias": [_finite_or_none(v) for v in g_err ** 2 / h ** 2],
        },
        "tail": None,
    }
    curv, noise, init = [h], [c], [x0]
    if tail is not None:
        if tail.anchor_index != k or not math.isclose(tail.anchor_curvature, h[-1], rel_tol=1e-9):
            raise ValueError(f"tail is anchored at (k = {tail.anchor_index}, h_k = "
                             f"{tail.anchor_curvature:g}), not at these {k} eigenvalues (h_k = {h[-1]:g})")
        h_tail = tail.curvature()
        rho = float(c.sum() / h.sum())
        rho_err = float(math.sqrt(np.nansum((c_err / h.sum()) ** 2)
                                  + np.nansum((rho * h_err / h.sum()) ** 2)))
        if grad_sq_norm is not None:
            rest = float(grad_sq_norm) - float(g @ g)
            m = max(rest, 0.0) / float(h_tail @ h_tail)
            se_rest = math.sqrt((grad_sq_norm_se or 0.0) ** 2 + float(np.nansum((2 * g * g_err) ** 2)))
            m_err = se_rest / float(h_tail @ h_tail)
            rule = ("(|G|^2 - sum_top g_i^2) / sum_tail h_i^2" + (
                    f" (clipped: the remainder was {rest:g})" if rest < 0 else ""))
        else:
            m = float(x0.mean())
            m_err = float(_standard_error(x0)) if k > 1 else math.nan
            rule = "mean of the top-k init second moments"
        curv.append(h_tail)
        noise.append(rho * h_tail)
        init.append(np.full(h_tail.shape, m))
        record["tail"] = dict(tail.to_dict(), **{
            "noise_ratio": _measured(rho, rho_err, "first-order propagated error; c_i = ratio * h_i"),
            "init_second_moment": _measured(m, m_err, "first-order propagated error"),
            "init_rule": rule})

    curv, noise, init = (np.concatenate(a) for a in (curv, noise, init))
    config = NQMConfig(dim=int(curv.shape[0]), target=1.0 if target is None else float(target),
                       curvature=tuple(curv.tolist()), noise_variance=tuple(noise.tolist()),
                       init_second_moments=tuple(init.tolist()))
    problem = config.problem()        # validates every array and the target
    initial = problem.initial_loss()
    if target is not None and not target < initial:
        raise ValueError(f"target must be in (0, {initial:g}) (the fitted initial loss), got {target:g}")
    record.update({"dim": problem.dim, "target": None if target is None else float(target),
                   "initial_loss": initial,
                   "trace_noise": float(noise.sum()),
                   "trace_curvature": float(curv.sum())})
    return config, record


# ---------------------------------------------------------------------------------------------
# The whole chain.


@dataclass(frozen=True)
class MeasuredSpectrum:
    """The Hessian at one parameter set: its operator, top-k eigenpairs and (optional) SLQ
    density, plus `spectrum`, the JSON-ready SLQ trace record (None without a density)."""

    hessian: curvature.HessianOperator
    pairs: curvature.Eigenpairs
    density: curvature.SpectralDensity | None
    spectrum: dict | None


def measure_spectrum(loss_fn: Callable, params, sample: dict, key, *, top_k: int,
                     lanczos_steps: int | None = None, slq_steps: int = 40,
                     slq_probes: int = 8, with_density: bool = True,
                     chunk_rows: int | None = None, devices=None) -> MeasuredSpectrum:
    """Hessian operator (`curvature.hvp`), top-k eigenpairs (Lanczos, `lanczos_steps`) and,
    with `with_density`, the SLQ density (`slq_probes` x `slq_steps`) of the mean loss of
    `sample` at `params`. `key` is split into the Lanczos start and the SLQ probes' keys."""
    hessian = curvature.hvp(loss_fn, params, sample, chunk_rows=chunk_rows, devices=devices)
    eig_key, slq_key = jax.random.split(key)
    pairs = curvature.top_eigenpairs(hessian, hessian.dim, top_k, eig_key, num_steps=lanczos_steps)
    density, spectrum = None, None
    if with_density:
        density = curvature.spectral_density(hessian, hessian.dim, slq_steps, slq_probes, slq_key)
        trace, trace_se = density.trace()
        spectrum = {"trace": _measured(trace, trace_se, "standard error over SLQ probes"),
                    "slq_steps": int(slq_steps), "slq_probes": int(slq_probes),
                    "density": density.to_dict()}
    return MeasuredSpectrum(hessian, pairs, density, spectrum)


def calibrate(loss_fn: Callable, params, sample: dict, *, key, target: float, top_k: int,
              lanczos_steps: int | None = None, slq_steps: int = 40, slq_probes: int = 8,
              floor: float | None = None, chunk_rows: int | None = None,
              devices=None) -> tuple[NQMConfig, dict]:
    """Measure the network at `params` on `sample` and fit an NQM to it.

    Steps: Hessian operator (`curvature.hvp`); top-k eigenpairs (Lanczos, `lanczos_steps`);
    with a `floor`, SLQ (`slq_probes` x `slq_steps`) and a power-law tail down to `floor`;
    per-example gradient statistics along the top-k eigenvectors; `fit_nqm`.

    Args:
      loss_fn, params, sample: the task's loss, the parameters, a dict of host arrays.
      key: jax PRNG key (Lanczos start, SLQ probes).
      target: the NQM's target loss.
      top_k: measured eigen-directions.
      lanczos_steps, slq_steps, slq_probes: Lanczos effort.
      floor: lowest curvature of the tail (None: no tail, d = top_k).
      chunk_rows, devices: as in `curvature.hvp`.

    Returns:
      (NQMConfig, record): the `fit_nqm` record plus "eigenpairs", "spectrum" (SLQ trace and
      Hutchinson-equivalent standard error; absent without a floor) and "gradient" statistics
      (including tr(Sigma), |G|^2 and B_simple = tr(Sigma) / |G|^2).
    """
    measured = measure_spectrum(loss_fn, params, sample, key, top_k=top_k,
                                lanczos_steps=lanczos_steps, slq_steps=slq_steps,
                                slq_probes=slq_probes, with_density=floor is not None,
                                chunk_rows=chunk_rows, devices=devices)
    hessian, pairs = measured.hessian, measured.pairs
    tail = None
    if floor is not None:
        tail = fit_power_law_tail(measured.density, pairs.eigenvalues_K, floor=floor)
    stats = gradient_statistics(loss_fn, params, sample, pairs.eigenvectors_KxP,
                                chunk_rows=chunk_rows, devices=devices)
    config, record = fit_nqm(pairs.eigenvalues_K, stats.noise_projections_K,
                             stats.grad_components_K, target=target, tail=tail,
                             eigenvalue_errors=pairs.residuals_K,
                             noise_errors=stats.noise_projections_se_K,
                             grad_errors=stats.grad_components_se_K,
                             grad_sq_norm=stats.grad_sq_norm, grad_sq_norm_se=stats.grad_sq_norm_se)
    record.update({"eigenpairs": pairs.to_dict(), "spectrum": measured.spectrum,
                   "gradient": stats.to_dict(),
                   "num_params": hessian.dim, "sample_rows": hessian.num_rows,
                   "hessian_matvecs": hessian.num_matvecs})
    return config, record

"""Fit a noisy quadratic model to a network: curvature, gradient noise and start, measured.

The NQM (docs/design.md, 'The NQM') needs, per eigen-direction i of the Hessian H: the curvature h_i,
the per-example gradient variance c_i = v_i^T Sigma v_i along the eigenvector v_i, and the start
E[theta_i^2]. On a network at parameters theta we measure
- the top-k eigenpairs (h_i, v_i) by Lanczos (`realnets.calibration.lanczos.top_eigenpairs`);
- the rest of the spectrum by stochastic Lanczos quadrature, summarised by a power law
  h_i = h_k (i / k)^-a fitted to its counting function (`realnets.calibration.power_tail`);
- per-example gradients g_j over a sample: their mean G, c_i, tr(Sigma) and g_i = v_i . G
  (`realnets.calibration.gradient_stats`);
- theta_i along v_i from g_i = h_i theta_i (on a quadratic G = H theta, measured from the
  minimum), so E[theta_i^2] ~ g_i^2 / h_i^2;
and `realnets.calibration.nqm_fit.fit_nqm` turns these into an `NQMConfig` with caller arrays plus a JSON-ready record of
every fitted number with its uncertainty. This module runs the whole chain (`calibrate`), and `measure_spectrum` its Hessian part.

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

from dataclasses import dataclass
from typing import Callable

import jax

from nqm.problem import NQMConfig
from realnets.calibration import (gradient_stats, hessian_products, lanczos, measured, nqm_fit,
                                  power_tail, slq)


@dataclass(frozen=True)
class MeasuredSpectrum:
    """The Hessian at one parameter set: its operator, top-k eigenpairs and (optional) SLQ
    density, plus `spectrum`, the JSON-ready SLQ trace record (None without a density)."""

    hessian: hessian_products.HessianOperator
    pairs: lanczos.Eigenpairs
    density: slq.SpectralDensity | None
    spectrum: dict | None


def measure_spectrum(loss_fn: Callable, params, sample: dict, key, *, top_k: int,
                     lanczos_steps: int | None = None, slq_steps: int = 40,
                     slq_probes: int = 8, with_density: bool = True,
                     chunk_rows: int | None = None, devices=None) -> MeasuredSpectrum:
    """Hessian operator (`hessian_products.hvp`), top-k eigenpairs (Lanczos, `lanczos_steps`) and,
    with `with_density`, the SLQ density (`slq_probes` x `slq_steps`) of the mean loss of
    `sample` at `params`. `key` is split into the Lanczos start and the SLQ probes' keys."""
    hessian = hessian_products.hvp(loss_fn, params, sample, chunk_rows=chunk_rows, devices=devices)
    eig_key, slq_key = jax.random.split(key)
    pairs = lanczos.top_eigenpairs(hessian, hessian.dim, top_k, eig_key, num_steps=lanczos_steps)
    density, spectrum = None, None
    if with_density:
        density = slq.spectral_density(hessian, hessian.dim, slq_steps, slq_probes, slq_key)
        trace, trace_se = density.trace()
        spectrum = {"trace": measured.measured_value(trace, trace_se, "standard error over SLQ probes"),
                    "slq_steps": int(slq_steps), "slq_probes": int(slq_probes),
                    "density": density.to_dict()}
    return MeasuredSpectrum(hessian, pairs, density, spectrum)


def calibrate(loss_fn: Callable, params, sample: dict, *, key, target: float, top_k: int,
              lanczos_steps: int | None = None, slq_steps: int = 40, slq_probes: int = 8,
              floor: float | None = None, chunk_rows: int | None = None,
              devices=None, train_size: int | None = None) -> tuple[NQMConfig, dict]:
    """Measure the network at `params` on `sample` and fit an NQM to it.

    Steps: Hessian operator (`hessian_products.hvp`); top-k eigenpairs (Lanczos, `lanczos_steps`);
    with a `floor`, SLQ (`slq_probes` x `slq_steps`) and a power-law tail down to `floor`;
    per-example gradient statistics along the top-k eigenvectors; `fit_nqm`.

    Args:
      loss_fn, params, sample: the task's loss, the parameters, a dict of host arrays.
      key: jax PRNG key (Lanczos start, SLQ probes).
      target: the NQM's target loss.
      top_k: measured eigen-directions.
      lanczos_steps, slq_steps, slq_probes: Lanczos effort.
      floor: lowest curvature of the tail (None: no tail, d = top_k).
      chunk_rows, devices: as in `hessian_products.hvp`.
      train_size: the task's training-set size (the NQM's finite-population correction), or None.

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
        tail = power_tail.fit_power_law_tail(measured.density, pairs.eigenvalues_K, floor=floor)
    stats = gradient_stats.gradient_statistics(loss_fn, params, sample, pairs.eigenvectors_KxP,
                                chunk_rows=chunk_rows, devices=devices)
    config, record = nqm_fit.fit_measured(pairs, stats, stats, target=target, tail=tail,
                                          train_size=train_size)
    record.update({"eigenpairs": pairs.to_dict(), "spectrum": measured.spectrum,
                   "gradient": stats.to_dict(),
                   "num_params": hessian.dim, "sample_rows": hessian.num_rows,
                   "hessian_matvecs": hessian.num_matvecs})
    return config, record

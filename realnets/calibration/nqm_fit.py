"""An NQM from measured curvature, noise and start (top-k directions plus an optional power-law
tail), with every fitted number and its uncertainty in a JSON-ready record (Zhang et al. 2019,
section 3).
"""

from __future__ import annotations

import math

import numpy as np

from nqm.problem import NQMConfig
from realnets.calibration import gradient_stats, lanczos, measured, power_tail


def _optional(name: str, values, k: int) -> np.ndarray:
    if values is None:
        return np.full(k, np.nan)
    arr = np.asarray(values, np.float64).ravel()
    if arr.shape != (k,):
        raise ValueError(f"{name} must have length {k}, got {arr.shape[0]}")
    return arr


def fit_nqm(eigenvalues, noise_projections, grad_components, *, target: float | None,
            tail: power_tail.PowerLawTail | None = None, eigenvalue_errors=None, noise_errors=None,
            grad_errors=None, grad_sq_norm: float | None = None,
            grad_sq_norm_se: float | None = None,
            train_size: int | None = None) -> tuple[NQMConfig, dict]:
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
      tail: power_tail.PowerLawTail anchored at these eigenvalues, or None (a d = k model).
      eigenvalue_errors, noise_errors, grad_errors: uncertainties (K,) (e.g. Ritz residuals and
        standard errors), propagated to first order.
      grad_sq_norm, grad_sq_norm_se: unbiased |G|^2 and its standard error.
      train_size: N, the training set the network's batches are drawn from without replacement
        (the NQM's noise then carries the finite-population correction), or None.

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
            "curvature": measured.measured_value(h, h_err, "Ritz residual |Hv - hv| (an eigenvalue lies within it)"),
            "noise_variance": measured.measured_value(c, c_err, "standard error over examples"),
            "grad_components": measured.measured_value(g, g_err, "standard error over examples"),
            "init_second_moments": measured.measured_value(
                x0, x0_err, "first-order propagated error; one sample of theta_i^2, biased up by "
                "se(g_i)^2 / h_i^2 (see init_second_moments_bias)"),
            "init_second_moments_bias": [measured.finite_or_none(v) for v in g_err ** 2 / h ** 2],
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
            m_err = float(measured.standard_error(x0)) if k > 1 else math.nan
            rule = "mean of the top-k init second moments"
        curv.append(h_tail)
        noise.append(rho * h_tail)
        init.append(np.full(h_tail.shape, m))
        record["tail"] = dict(tail.to_dict(), **{
            "noise_ratio": measured.measured_value(rho, rho_err, "first-order propagated error; c_i = ratio * h_i"),
            "init_second_moment": measured.measured_value(m, m_err, "first-order propagated error"),
            "init_rule": rule})

    curv, noise, init = (np.concatenate(a) for a in (curv, noise, init))
    config = NQMConfig(dim=int(curv.shape[0]), target=1.0 if target is None else float(target),
                       curvature=tuple(curv.tolist()), noise_variance=tuple(noise.tolist()),
                       init_second_moments=tuple(init.tolist()), train_size=train_size)
    problem = config.problem()        # validates every array and the target
    initial = problem.initial_loss()
    if target is not None and not target < initial:
        raise ValueError(f"target must be in (0, {initial:g}) (the fitted initial loss), got {target:g}")
    record.update({"dim": problem.dim, "target": None if target is None else float(target),
                   "train_size": train_size,
                   "initial_loss": initial,
                   "trace_noise": float(noise.sum()),
                   "trace_curvature": float(curv.sum())})
    return config, record


def fit_measured(pairs: lanczos.Eigenpairs, noise: gradient_stats.GradientStatistics,
                 start: gradient_stats.GradientStatistics, *, target: float | None,
                 tail: power_tail.PowerLawTail | None = None,
                 train_size: int | None = None) -> tuple[NQMConfig, dict]:
    """`fit_nqm` on measurements, with their uncertainties: curvature h_i (Ritz residuals) from
    `pairs`, noise c_i along the same eigenvectors from `noise`, and the start (components g_i
    and |G|^2, with standard errors) from `start`, the statistics at the parameters the NQM
    starts from (the same object as `noise` when it starts where it was measured); `train_size`
    as in `fit_nqm`."""
    return fit_nqm(pairs.eigenvalues_K, noise.noise_projections_K, start.grad_components_K,
                   target=target, tail=tail, eigenvalue_errors=pairs.residuals_K,
                   noise_errors=noise.noise_projections_se_K,
                   grad_errors=start.grad_components_se_K, grad_sq_norm=start.grad_sq_norm,
                   grad_sq_norm_se=start.grad_sq_norm_se, train_size=train_size)

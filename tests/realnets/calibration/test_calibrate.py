"""realnets.calibration.calibrate: per-example gradient statistics recover a covariance known in closed form
(linear regression), the same on 1 and 8 devices; the power-law tail fit recovers a known
exponent; and calibrating the NQM workload returns the NQM it was built from.
"""

from __future__ import annotations

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nqm.problem import NQMConfig
from realnets.calibration import calibrate, gradient_stats, nqm_fit, power_tail, slq
from realnets.workloads import tasks
# ---------------------------------------------------------------------------------------------
# Linear regression: x ~ N(0, I_d), y = x . w* + sigma eps. At w, with r = w - w*, the
# per-example gradient x (x . r - sigma eps) has mean r and covariance
#   Sigma = (|r|^2 + sigma^2) I + r r^T      (E[x x^T x x^T] terms of a Gaussian: Isserlis).

D, N, SIGMA = 10, 20000, 0.5


def _regression():
    rng = np.random.default_rng(0)
    w_star = rng.standard_normal(D)
    r = 0.6 * rng.standard_normal(D)
    x = rng.standard_normal((N, D)).astype(np.float32)
    y = (x @ w_star + SIGMA * rng.standard_normal(N)).astype(np.float32)
    return {"w": (w_star + r).astype(np.float32)}, {"x": x, "y": y}, r


def _squared_error(params, batch):
    return jnp.mean(0.5 * (batch["x"] @ params["w"] - batch["y"]) ** 2)


def _directions(r):
    """Unit vectors: along r, orthogonal to r, and halfway between."""
    along = r / np.linalg.norm(r)
    e = np.zeros(D)
    e[0] = 1.0
    ortho = e - (e @ along) * along
    ortho /= np.linalg.norm(ortho)
    mixed = (along + ortho) / np.sqrt(2.0)
    return np.stack([along, ortho, mixed])


def test_noise_projections_recover_the_known_covariance(one_device, eight_devices):
    params, sample, r = _regression()
    V = _directions(r)
    stats = gradient_stats.gradient_statistics(_squared_error, params, sample, V, devices=one_device)

    rr = float(r @ r)
    c_true = rr + SIGMA ** 2 + (V @ r) ** 2
    assert np.all(np.abs(stats.noise_projections_K - c_true) < 4 * stats.noise_projections_se_K)
    assert np.all(stats.noise_projections_se_K < 0.05 * c_true)     # a real measurement
    trace_true = D * (rr + SIGMA ** 2) + rr
    assert abs(stats.trace_cov - trace_true) < 4 * stats.trace_cov_se
    assert np.all(np.abs(stats.grad_components_K - V @ r) < 4 * stats.grad_components_se_K)
    assert abs(stats.grad_sq_norm - rr) < 4 * stats.grad_sq_norm_se
    b_se = stats.b_simple * math.hypot(stats.trace_cov_se / stats.trace_cov,
                                       stats.grad_sq_norm_se / stats.grad_sq_norm)
    assert abs(stats.b_simple - trace_true / rr) < 4 * b_se          # B_simple = tr(Sigma) / |G|^2
    assert math.isnan(dataclasses.replace(stats, grad_sq_norm=0.0).b_simple)
    np.testing.assert_allclose(stats.grad_components_K, V @ stats.mean_gradient_P, rtol=1e-5)

    # sharded over 8 devices in chunks (4096 x 4 + 3616 rows): the same numbers
    sharded = gradient_stats.gradient_statistics(_squared_error, params, sample, V, chunk_rows=4096,
                                            devices=eight_devices)
    np.testing.assert_allclose(sharded.noise_projections_K, stats.noise_projections_K, rtol=1e-5)
    np.testing.assert_allclose(sharded.trace_cov, stats.trace_cov, rtol=1e-5)
    np.testing.assert_allclose(sharded.mean_gradient_P, stats.mean_gradient_P, rtol=1e-5, atol=1e-7)


def test_per_example_gradients_average_to_the_gradient():
    params, sample, _ = _regression()
    rows = {k: v[:16] for k, v in sample.items()}
    g_NxP = gradient_stats.per_example_gradients(_squared_error, params, rows)
    assert g_NxP.shape == (16, D)
    x, y = rows["x"], rows["y"]
    expected = x * (x @ params["w"] - y)[:, None]          # grad of 1/2 (x . w - y)^2
    np.testing.assert_allclose(g_NxP, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_NxP.mean(axis=0), jax.grad(_squared_error)(params, rows)["w"],
                               rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# The power-law tail and fit_nqm on known inputs.


def test_power_law_tail_recovers_a_known_exponent():
    d, a, k = 1000, 0.5, 20
    h = np.arange(1, d + 1) ** -a
    # A diagonal H with Gaussian probes has the same SLQ statistics as any rotation of it.
    density = slq.spectral_density(lambda v: h * v, d, 40, 16, jax.random.key(0),
                                         probe="gaussian")
    tail = power_tail.fit_power_law_tail(density, h[:k], floor=0.999 * h[799])
    assert tail.exponent == pytest.approx(a, rel=0.03)
    assert abs(tail.exponent - a) < 4 * tail.exponent_se + 0.01   # + the quadrature's bias
    assert abs(tail.dim - 800) < 4 * tail.dim_se + tail.dim_resolution
    assert tail.r2 > 0.99
    curv = tail.curvature()
    assert curv.shape == (tail.dim - k,) and curv[0] < h[k - 1]


def test_fit_nqm_top_only_is_exact_and_checks_its_input():
    h, c, g = np.array([2.0, 1.0, 0.5]), np.array([0.3, 0.2, 0.1]), np.array([1.0, -0.5, 0.25])
    config, record = nqm_fit.fit_nqm(h[::-1], c[::-1], g[::-1], target=0.01)   # any order
    problem = config.problem()
    np.testing.assert_allclose(problem.curvature_D, h)
    np.testing.assert_allclose(problem.noise_D, c)
    np.testing.assert_allclose(problem.init_second_moment_D, g ** 2 / h ** 2)
    assert record["initial_loss"] == pytest.approx(0.5 * np.sum(g ** 2 / h))
    json.dumps(record, allow_nan=False)           # JSON-ready: missing errors are null
    assert record["top"]["curvature"]["uncertainty"] == [None] * 3

    with pytest.raises(ValueError, match="eigenvalues"):
        nqm_fit.fit_nqm([1.0, -0.1], [1.0, 1.0], [1.0, 1.0], target=0.01)
    with pytest.raises(ValueError, match="noise_projections must have length 2"):
        nqm_fit.fit_nqm([1.0, 0.5], [1.0], [1.0, 1.0], target=0.01)
    with pytest.raises(ValueError, match="target must be in"):
        nqm_fit.fit_nqm(h, c, g, target=10.0)
    # no target: the same NQM, unchecked, with the target left to the caller
    untargeted, record = nqm_fit.fit_nqm(h, c, g, target=None)
    assert record["target"] is None
    assert record["initial_loss"] == pytest.approx(0.5 * np.sum(g ** 2 / h))
    assert untargeted.curvature == config.curvature
    assert untargeted.init_second_moments == config.init_second_moments


# ---------------------------------------------------------------------------------------------
# Calibrating the NQM task returns the NQM.


def test_calibrating_the_nqm_task_returns_its_nqm(eight_devices):
    truth = NQMConfig(dim=50, spectrum_exponent=1.0, target=0.05).problem()
    task = tasks.quadratic_task(truth)
    params = jax.tree.map(np.asarray, task.init_params(jax.random.key(3)))
    theta = params["theta"].astype(np.float64)
    sample = task.draw_batch(np.random.default_rng(0), 2048)
    k = 20
    # 50 Lanczos steps on d = 50: the whole Krylov space, so SLQ sees every eigenvalue exactly
    # and the tail fit is tested rather than the quadrature; the floor just below h_50.
    config, record = calibrate.calibrate(
        task.loss_fn, params, sample, key=jax.random.key(0), target=0.05, top_k=k,
        lanczos_steps=50, slq_steps=50, slq_probes=4, floor=0.99 * truth.curvature_D[-1],
        chunk_rows=1024, devices=eight_devices)
    fitted = config.problem()
    json.dumps(record, allow_nan=False)

    # curvature: the top-k by Lanczos (float32 products), the tail from the power law
    assert fitted.dim == truth.dim == record["dim"]
    np.testing.assert_allclose(fitted.curvature_D[:k], truth.curvature_D[:k], rtol=1e-5)
    assert max(record["top"]["curvature"]["uncertainty"]) < 1e-5
    assert record["tail"]["exponent"]["value"] == pytest.approx(1.0, rel=0.01)
    np.testing.assert_allclose(fitted.curvature_D[k:], truth.curvature_D[k:], rtol=0.01)

    # noise: per-example gradient H theta + sqrt(c) z_j has covariance diag(c)
    top = record["top"]
    c_err = np.abs(fitted.noise_D[:k] - truth.noise_D[:k])
    assert np.all(c_err < 4 * np.array(top["noise_variance"]["uncertainty"]))
    ratio = record["tail"]["noise_ratio"]          # c = h here, so the ratio is 1
    assert abs(ratio["value"] - 1.0) < 4 * ratio["uncertainty"]
    np.testing.assert_allclose(fitted.noise_D, truth.noise_D, rtol=0.1)      # the tail's too
    trace = record["gradient"]["trace_cov"]
    assert abs(trace["value"] - truth.noise_D.sum()) < 4 * trace["uncertainty"]

    # gradient components g_i = h_i theta_i (eigenvectors are e_i up to sign), start g^2 / h^2
    g = np.array(top["grad_components"]["value"])
    g_se = np.array(top["grad_components"]["uncertainty"])
    assert np.all(np.abs(np.abs(g) - truth.curvature_D[:k] * np.abs(theta[:k])) < 4 * g_se)
    x0 = fitted.init_second_moment_D[:k]                  # E[theta_i^2] against the true theta_i^2
    x0_top = top["init_second_moments"]
    np.testing.assert_allclose(x0, x0_top["value"])
    assert np.all(np.abs(x0 - theta[:k] ** 2)
                  < 4 * np.array(x0_top["uncertainty"]) + np.array(top["init_second_moments_bias"]))
    grad_sq = record["gradient"]["grad_sq_norm"]
    exact = float(np.sum((truth.curvature_D * theta) ** 2))
    assert abs(grad_sq["value"] - exact) < 4 * grad_sq["uncertainty"]

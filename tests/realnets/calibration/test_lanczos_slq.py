"""realnets.calibration (lanczos, slq, hessian_products): Lanczos finds the top of a known spectrum (diagonal and rotated), SLQ
estimates its trace (equal to Hutchinson's with the same probes) and the count above a gap, and
the sharded Hessian-vector product is H v exactly on the NQM, equals the one-device product on an
MLP, and matches the dense Hessian and a finite difference of gradients.

The matrices in the Lanczos tests are numpy float64 (d = 200), so 1e-6 relative is a real test
of the algorithm, not of float32 rounding.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from nqm.problem import NQMConfig
from realnets.calibration import hessian_products, lanczos, slq
from realnets.workloads import models, tasks
D = 200
TOP = 10


def _spectrum(kind: str) -> np.ndarray:
    """Descending eigenvalues: h_i = 1/i, or 10 outliers in [3, 10] above a 1/i bulk (a gap)."""
    bulk = 1.0 / np.arange(1, D + 1)
    if kind == "power":
        return bulk
    return np.concatenate([np.linspace(10.0, 3.0, TOP), bulk[: D - TOP]])


def _matrix(kind: str, rotated: bool):
    """(matrix, eigenvalues descending, eigenvectors as columns)."""
    h = _spectrum(kind)
    if not rotated:
        return np.diag(h), h, np.eye(D)
    U, _ = np.linalg.qr(np.random.default_rng(7).standard_normal((D, D)))
    return (U * h) @ U.T, h, U


@pytest.mark.parametrize("kind", ["power", "gap"])
@pytest.mark.parametrize("rotated", [False, True])
def test_lanczos_recovers_top_eigenpairs(kind, rotated):
    A, h, U = _matrix(kind, rotated)
    pairs = lanczos.top_eigenpairs(lambda v: A @ v, D, TOP, jax.random.key(0), num_steps=60)
    np.testing.assert_allclose(pairs.eigenvalues_K, h[:TOP], rtol=1e-6)
    overlap = np.abs(np.sum(pairs.eigenvectors_KxP * U[:, :TOP].T, axis=1))    # up to sign
    np.testing.assert_allclose(overlap, 1.0, atol=1e-6)
    assert np.all(pairs.residuals_K < 1e-6 * h[0])
    # the explicit residual |Av - hv| and the recurrence's bound agree where both are resolved
    np.testing.assert_allclose(pairs.residual_bounds_K, pairs.residuals_K, atol=1e-9 * h[0])


def test_lanczos_basis_is_orthonormal_and_tridiagonalises():
    A, _, _ = _matrix("power", rotated=True)
    run = lanczos.lanczos(lambda v: A @ v, D, 30, jax.random.key(1))
    Q = run.basis_KxP
    np.testing.assert_allclose(Q @ Q.T, np.eye(30), atol=1e-12)
    np.testing.assert_allclose(Q @ A @ Q.T, run.tridiagonal(), atol=1e-12)


def test_lanczos_restarts_past_an_invariant_subspace():
    # Two distinct eigenvalues: every Krylov space has dimension 2, so plain Lanczos sees one copy
    # of the triple eigenvalue 5; the restart finds the other two.
    h = np.array([5.0, 5.0, 5.0] + [1.0] * 17)
    U, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((20, 20)))
    A = (U * h) @ U.T
    pairs = lanczos.top_eigenpairs(lambda v: A @ v, 20, 3, jax.random.key(2), num_steps=6)
    np.testing.assert_allclose(pairs.eigenvalues_K, [5.0, 5.0, 5.0], rtol=1e-10)
    projector = U[:, :3] @ U[:, :3].T
    np.testing.assert_allclose(pairs.eigenvectors_KxP @ projector, pairs.eigenvectors_KxP, atol=1e-9)


@pytest.mark.parametrize("kind, threshold", [("power", 0.0505), ("gap", 2.0)])
def test_slq_trace_and_count_above(kind, threshold):
    A, h, _ = _matrix(kind, rotated=True)
    matvec = lambda v: A @ v  # noqa: E731
    key = jax.random.key(5)
    density = slq.spectral_density(matvec, D, 40, 100, key)
    np.testing.assert_allclose(density.weights_LxM.sum(axis=1), 1.0, atol=1e-12)   # Rademacher

    # Hutchinson's variance with Rademacher probes is 2 (|A|_F^2 - sum_i A_ii^2) per probe: 100
    # probes give the trace to ~3% (1/i) and ~4% (the outliers dominate |A|_F)
    trace, trace_se = density.trace()
    assert trace_se < 0.05 * h.sum()
    assert abs(trace - h.sum()) < 3 * trace_se
    hutchinson, _ = slq.hutchinson_trace(matvec, D, 100, key)
    assert trace == pytest.approx(hutchinson, rel=1e-10)     # sum_j tau_j^2 theta_j = v^T A v / |v|^2

    true_count = int(np.sum(h > threshold))      # 19 (h_i = 1/i) or 10 (the outliers)
    count, count_se = density.count_above(threshold)
    assert abs(count - true_count) < 3 * count_se + 0.5

    # the smoothed density is a probability density
    grid = np.linspace(h.min() - 1.0, h.max() + 1.0, 4001)
    phi = density.density(grid, sigma=0.05)
    assert np.sum(phi) * (grid[1] - grid[0]) == pytest.approx(1.0, abs=1e-3)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="k \\(Lanczos steps\\)"):
        lanczos.lanczos(lambda v: v, 5, 6, jax.random.key(0))
    with pytest.raises(ValueError, match="probe"):
        slq.spectral_density(lambda v: v, 5, 3, 2, jax.random.key(0), probe="uniform")


# ---------------------------------------------------------------------------------------------
# Hessian-vector products of tasks.


def test_hvp_of_the_nqm_task_is_diag_h(eight_devices):
    problem = NQMConfig(dim=50).problem()
    task = tasks.quadratic_task(problem)
    params = task.init_params(jax.random.key(0))
    sample = task.draw_batch(np.random.default_rng(0), 24)      # chunks of 16 and 8 rows
    hessian = hessian_products.hvp(task.loss_fn, params, sample, chunk_rows=16, devices=eight_devices)
    assert hessian.dim == 50 and [c[0] for c in hessian.sample.chunks] == [16, 8]
    v = np.random.default_rng(1).standard_normal(50)
    np.testing.assert_allclose(hessian(v), problem.curvature_D * v.astype(np.float32), rtol=1e-6)


def _mlp_task(hidden):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 8)).astype(np.float32)
    y = rng.integers(0, 4, 40).astype(np.int32)
    task = tasks.classification_task(models.MLP(hidden=hidden, num_classes=4), x, y, x, y)
    params = jax.tree.map(np.asarray, jax.jit(task.init_params)(jax.random.key(1)))
    return task, params


def test_hvp_sharded_equals_one_device_and_dense_hessian(one_device, eight_devices):
    task, params = _mlp_task(hidden=(16,))
    one = hessian_products.hvp(task.loss_fn, params, task.train, devices=one_device)
    # 40 rows in chunks of 16, 16, 8: every chunk spread over 8 devices
    sharded = hessian_products.hvp(task.loss_fn, params, task.train, chunk_rows=16, devices=eight_devices)
    v = np.random.default_rng(2).standard_normal(one.dim)
    hv_one, hv_sharded = one(v), sharded(v)
    np.testing.assert_allclose(hv_sharded, hv_one, rtol=1e-5, atol=1e-6 * np.abs(hv_one).max())

    theta_P, unravel = ravel_pytree(params)
    dense = jax.jit(jax.hessian(lambda t: task.loss_fn(unravel(t), task.train)))(theta_P)
    expected = np.asarray(dense, np.float64) @ v.astype(np.float32)
    np.testing.assert_allclose(hv_one, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_hvp_matches_finite_difference_of_gradients(one_device):
    task, params = _mlp_task(hidden=())      # softmax regression: smooth, so the difference is
    hessian = hessian_products.hvp(task.loss_fn, params, task.train, devices=one_device)   # O(eps^2)
    v = np.random.default_rng(3).standard_normal(hessian.dim)
    v /= np.linalg.norm(v)
    theta_P, unravel = ravel_pytree(params)
    grad = jax.jit(jax.grad(lambda t: task.loss_fn(unravel(t), task.train)))
    eps = 1e-2
    fd = (np.asarray(grad(theta_P + eps * v), np.float64)
          - np.asarray(grad(theta_P - eps * v), np.float64)) / (2 * eps)
    hv = hessian(v)
    assert np.linalg.norm(hv - fd) < 1e-3 * np.linalg.norm(hv)
    np.testing.assert_allclose(hessian.gradient(), np.asarray(grad(theta_P)), rtol=1e-5, atol=1e-7)

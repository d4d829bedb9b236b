"""realnets.training.gradient_noise: the two-batch-size estimator is unbiased on a problem whose answer is
known in closed form, measured through the real train step (1 device and 8 devices).

Linear regression with Gaussian inputs, at a FIXED parameter w (learning rate 0):

  x ~ N(0, I_d),  y = x . w* + eps,  eps ~ N(0, sigma^2),  loss_j = 1/2 (x_j . w - y_j)^2.

With r = w - w*, the per-example gradient is g = x (x . w - y) = x (x . r - eps). Then

  G = E[g] = E[x x^T] r - E[x eps] = r                              so |G|^2 = |r|^2;
  E[g g^T] = E[(x . r)^2 x x^T] - 2 E[eps (x . r) x x^T] + E[eps^2 x x^T]
           = (|r|^2 I + 2 r r^T) + 0 + sigma^2 I
  (Isserlis: E[x_i x_j x_k x_l] r_k r_l = delta_ij |r|^2 + 2 r_i r_j; eps is independent of x
  with mean 0), so

  Sigma = E[g g^T] - G G^T = (|r|^2 + sigma^2) I + r r^T,
  tr(Sigma) = d (|r|^2 + sigma^2) + |r|^2 = (d + 1) |r|^2 + d sigma^2.

A batch mean of b independent gradients has E|G_b|^2 = |G|^2 + tr(Sigma) / b (McCandlish et al.
2018, appendix A.1), which the step's `grad_sq_small` (b = B / G, averaged over the G groups) and
`grad_sq_big` (b = B) should obey, and `unbiased_terms` of the two should average to |r|^2 and
tr(Sigma).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from realnets.training import mesh as meshlib
from realnets.training import step
from realnets.training.gradient_noise import NoiseEMA, unbiased_terms
from realnets.training.step import Metaparameters, StepConfig

DIM = 5
SIGMA = 0.5
BATCH = 64
NUM_BATCHES = 4000
W_STAR = np.array([0.5, -1.0, 0.25, 2.0, -0.75], np.float32)
R = np.array([0.6, 0.0, -0.48, 0.0, 0.64], np.float32)          # |r|^2 = 1
W = W_STAR + R
GRAD_SQ = float(np.sum(R.astype(np.float64) ** 2))                 # |G|^2 = |r|^2
TRACE_COV = (DIM + 1) * GRAD_SQ + DIM * SIGMA ** 2                # tr(Sigma) = 6 + 1.25


def _loss(params, batch):
    residual = batch["x"] @ params["w"] - batch["y"]
    return jnp.mean(0.5 * residual ** 2)


def _data(num_batches, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_batches, BATCH, DIM)).astype(np.float32)
    y = (x @ W_STAR + SIGMA * rng.standard_normal((num_batches, BATCH))).astype(np.float32)
    return {"x": x, "y": y}


def _fixed_states(config):
    """One trial at w = W, frozen by a learning rate of 0."""
    hps = Metaparameters(np.zeros(1, np.float32), np.ones(1, np.float32), np.ones(1, np.float32),
                         np.ones(1, np.float32))
    states = step.init_states(lambda key: {"w": jnp.asarray(W)}, config,
                              jax.random.key(0)[None], hps)
    return states, hps


def _stats_over_batches(devices, groups, data):
    """The train step's stats for each of many batches, in one program: the step vmapped over a
    leading batch-index axis, each batch sharded along `data` as in training."""
    mesh = meshlib.data_mesh(BATCH, devices)
    assert mesh.devices.size == len(devices)
    config = StepConfig(optimizer="sgd", groups=groups)
    states, hps = _fixed_states(config)
    rep = meshlib.replicated(mesh)
    many = jax.jit(jax.vmap(step.make_train_step(_loss, config), in_axes=(None, None, 0)),
                   in_shardings=(rep, rep, NamedSharding(mesh, PartitionSpec(None, "data"))),
                   out_shardings=rep)
    new_states, stats = many(states, hps, data)
    frozen = np.asarray(new_states.params["w"])[:, 0]                  # (batches, d); lr 0
    np.testing.assert_array_equal(frozen, np.broadcast_to(W, frozen.shape))
    return {k: np.asarray(v, np.float64)[:, 0] for k, v in stats.items()}


def _assert_mean(samples, expected, what, max_rel_se=0.05):
    mean = samples.mean()
    se = samples.std(ddof=1) / np.sqrt(samples.size)
    assert se < max_rel_se * abs(expected), f"{what}: too few batches to test (se {se:.3g})"
    print(f"{what}: mean {mean:.4f}, closed form {expected:.4f}, se {se:.4f}")
    assert abs(mean - expected) < 4.0 * se, (
        f"{what}: mean {mean:.4f} vs closed form {expected:.4f} (standard error {se:.4f})")


@pytest.mark.parametrize("num_devices,groups", [(1, 2), (8, 8)])
def test_noise_estimator_is_unbiased_on_linear_regression(eight_devices, num_devices, groups):
    data = _data(NUM_BATCHES, seed=num_devices)
    stats = _stats_over_batches(eight_devices[:num_devices], groups, data)
    small_b = BATCH // groups

    # The model behind the estimator, at both batch sizes of the step.
    _assert_mean(stats["grad_sq_big"], GRAD_SQ + TRACE_COV / BATCH, "|G_B|^2")
    _assert_mean(stats["grad_sq_small"], GRAD_SQ + TRACE_COV / small_b, "|G_b|^2")
    # The naive |G_B|^2 overestimates |G|^2 by tr(Sigma) / B; the test can tell.
    big = stats["grad_sq_big"]
    assert big.mean() - GRAD_SQ > 4.0 * big.std(ddof=1) / np.sqrt(big.size)

    grad_sq, trace_cov = unbiased_terms(stats["grad_sq_small"], stats["grad_sq_big"],
                                        small_b, BATCH)
    _assert_mean(np.asarray(grad_sq), GRAD_SQ, "|G|^2 estimate")
    _assert_mean(np.asarray(trace_cov), TRACE_COV, "tr(Sigma) estimate")


def test_step_stats_are_the_squared_norms_of_the_device_groups(eight_devices):
    # One batch, by hand: group k is rows [k b, (k + 1) b) (the rows device k holds).
    data = _data(1, seed=7)
    x, y = data["x"][0].astype(np.float64), data["y"][0].astype(np.float64)
    g_rows = x * (x @ W.astype(np.float64) - y)[:, None]                # per-example gradients
    for num_devices, groups in ((1, 2), (1, 8), (8, 8)):
        mesh = meshlib.data_mesh(BATCH, eight_devices[:num_devices])
        config = StepConfig(optimizer="sgd", groups=groups)
        states, hps = _fixed_states(config)
        train, _ = step.compile_steps(_loss, None, config, mesh)
        rep = meshlib.replicated(mesh)
        batch = meshlib.place_batch({"x": x.astype(np.float32), "y": y.astype(np.float32)}, mesh)
        _, stats = train(jax.device_put(states, rep), jax.device_put(hps, rep), batch)
        stats = jax.tree.map(lambda v: float(np.asarray(v)[0]), stats)
        group_means = g_rows.reshape(groups, BATCH // groups, DIM).mean(axis=1)
        np.testing.assert_allclose(stats["grad_sq_small"], np.mean(np.sum(group_means ** 2, -1)),
                                   rtol=1e-4)
        np.testing.assert_allclose(stats["grad_sq_big"], np.sum(g_rows.mean(axis=0) ** 2),
                                   rtol=1e-4)
        want_g, want_t = unbiased_terms(stats["grad_sq_small"], stats["grad_sq_big"],
                                        BATCH / groups, BATCH)
        np.testing.assert_allclose(stats["b_simple"], want_t / want_g, rtol=1e-4)


def test_one_group_disables_the_noise_scale(one_device):
    mesh = meshlib.data_mesh(BATCH, one_device)
    config = StepConfig(optimizer="sgd", groups=1)
    states, hps = _fixed_states(config)
    train, _ = step.compile_steps(_loss, None, config, mesh)
    data = _data(1, seed=3)
    rep = meshlib.replicated(mesh)
    new_states, stats = train(jax.device_put(states, rep), jax.device_put(hps, rep),
                              meshlib.place_batch({k: v[0] for k, v in data.items()}, mesh))
    assert set(stats) == {"loss"}          # no noise statistics with one group
    assert int(np.asarray(new_states.noise.count)[0]) == 0


# unbiased_terms and NoiseEMA, by hand ------------------------------------------------------

def test_unbiased_terms_invert_the_expected_norms():
    # If |G_b|^2 and |G_B|^2 equal their expectations |G|^2 + tr(Sigma) / b, the terms are exact.
    grad_sq, trace_cov = 1.5, 12.0
    for b, big in ((8, 64), (32, 64), (3, 12)):
        small_sq, big_sq = grad_sq + trace_cov / b, grad_sq + trace_cov / big
        got = unbiased_terms(small_sq, big_sq, b, big)
        np.testing.assert_allclose(got, (grad_sq, trace_cov), rtol=1e-12)
    # Elementwise over arrays, each the shape of the input.
    small = np.array([[2.0, 3.0]]), np.array([[1.0, 1.5]])
    g, t = unbiased_terms(*small, 2, 4)
    assert g.shape == t.shape == (1, 2)
    np.testing.assert_allclose(g, (4 * small[1] - 2 * small[0]) / 2)
    np.testing.assert_allclose(t, (small[0] - small[1]) / (1 / 2 - 1 / 4))


def test_noise_ema_is_a_ratio_of_averages():
    ema = NoiseEMA.zeros()
    assert np.isnan(float(ema.b_simple()))             # nothing folded in yet
    assert int(ema.count) == 0
    decay = 0.9
    terms = [(2.0, 10.0), (1.0, 30.0), (4.0, 8.0)]
    for grad_sq, trace_cov in terms:
        ema = ema.update(grad_sq, trace_cov, decay)
    assert int(ema.count) == 3
    weights = [(1 - decay) * decay ** (len(terms) - 1 - i) for i in range(len(terms))]
    avg_g = sum(w * g for w, (g, _) in zip(weights, terms))
    avg_t = sum(w * t for w, (_, t) in zip(weights, terms))
    np.testing.assert_allclose(float(ema.grad_sq), avg_g, rtol=1e-6)
    np.testing.assert_allclose(float(ema.trace_cov), avg_t, rtol=1e-6)
    np.testing.assert_allclose(float(ema.b_simple()), avg_t / avg_g, rtol=1e-6)
    # ...which is not the average of the per-step ratios.
    avg_ratio = sum(w * t / g for w, (g, t) in zip(weights, terms)) / sum(weights)
    assert abs(float(ema.b_simple()) - avg_ratio) > 0.1 * avg_ratio


def test_noise_ema_start_up_bias_cancels_in_the_ratio():
    # Both averages start at 0 with one decay: after one update b_simple is that step's ratio.
    ema = NoiseEMA.zeros().update(3.0, 12.0, 0.99)
    np.testing.assert_allclose(float(ema.b_simple()), 4.0, rtol=1e-6)


def test_finite_population_correction_is_exact_on_a_small_set():
    # N = 6 per-example gradients; all batches of b and B drawn without replacement, enumerated:
    # the corrected estimates average exactly to |G|^2 and tr(Sigma), Sigma the covariance of one
    # uniformly drawn example's gradient (1 / N: a batch of b = 1 has exactly that covariance).
    from itertools import combinations

    rng = np.random.default_rng(3)
    g_N = rng.normal(size=(6, 3))
    grad_sq_true = float(np.sum(g_N.mean(0) ** 2))
    trace_true = float(np.sum(np.var(g_N, axis=0, ddof=0)))
    b, B = 2, 4
    small = np.mean([np.sum(g_N[list(c)].mean(0) ** 2) for c in combinations(range(6), b)])
    big = np.mean([np.sum(g_N[list(c)].mean(0) ** 2) for c in combinations(range(6), B)])
    grad_sq, trace_cov = unbiased_terms(small, big, b, B, population=6)
    np.testing.assert_allclose([grad_sq, trace_cov], [grad_sq_true, trace_true], rtol=1e-12)
    naive_grad_sq, _ = unbiased_terms(small, big, b, B)
    assert abs(naive_grad_sq - grad_sq_true) > 0.05 * trace_true     # the correction matters

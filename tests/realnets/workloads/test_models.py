"""Tests for realnets.workloads.models: shapes, hand-counted parameters, causality, purity under jit/vmap.

Shapes and parameter counts use `jax.eval_shape` (no compilation); everything numeric reuses
one jitted init/apply per model and edits inputs and outputs as numpy arrays, because every
distinct eager jax op is compiled too; that keeps the file fast on a 2-core CPU.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from realnets.workloads.models import MLP, CharTransformer, SimpleCNN, count_params

# The models only split and fold the key they are given, so the PRNG implementation is immaterial
# here; "rbg" compiles several times faster than the default threefry on CPU.
KEY, OTHER_KEY = jax.random.key(0, impl="rbg"), jax.random.key(7, impl="rbg")
VOCAB, CONTEXT = 11, 8
TINY_LM = CharTransformer(VOCAB, context=CONTEXT, d_model=16, num_heads=2, num_layers=2,
                          mlp_ratio=2)


def _images(*shape):
    return np.random.default_rng(1).random(shape, dtype=np.float32)


def _tokens(batch, length):
    return np.random.default_rng(2).integers(0, VOCAB, (batch, length), dtype=np.int32)


# (model, example input) pairs used by the numeric tests.
CASES = {
    "mlp": (MLP(hidden=(8, 8), num_classes=3), _images(2, 4, 5)),
    "cnn2d": (SimpleCNN(features=(2, 3), kernel=3, dense=5, num_classes=4), _images(2, 8, 8)),
    "cnn1d": (SimpleCNN(features=(2,), kernel=3, dense=5, num_classes=4, spatial_dims=1),
              _images(2, 12)),
    "lm": (TINY_LM, _tokens(2, CONTEXT)),
}


@functools.cache
def _jitted(name):
    """(model, x, jitted init, jitted apply) for a case, compiled once per test session."""
    model, x = CASES[name]
    return model, x, jax.jit(model.init), jax.jit(model.apply)


def _num_params(model, x):
    return count_params(jax.eval_shape(model.init, KEY, x))


@pytest.mark.parametrize("model, x, out_shape", [
    (MLP(), _images(3, 28, 28), (3, 10)),
    (MLP(hidden=(16,), num_classes=7), _images(3, 40), (3, 7)),
    (SimpleCNN(), _images(3, 28, 28), (3, 10)),
    (SimpleCNN(), _images(3, 8, 8), (3, 10)),
    (SimpleCNN(), _images(3, 28, 28, 1), (3, 10)),
    (SimpleCNN(num_classes=5, spatial_dims=1), _images(3, 40), (3, 5)),
    (SimpleCNN(spatial_dims=1), _images(3, 40, 2), (3, 10)),
    (TINY_LM, _tokens(3, CONTEXT), (3, CONTEXT, VOCAB)),
    (TINY_LM, _tokens(3, CONTEXT - 3), (3, CONTEXT - 3, VOCAB)),
])
def test_output_shape_and_dtype(model, x, out_shape):
    out = jax.eval_shape(lambda x: model.apply(model.init(KEY, x), x), x)
    assert out.shape == out_shape
    assert out.dtype == jnp.float32


def test_param_counts_match_hand_count():
    # MLP (20 -> 8 -> 8 -> 3) on (B, 4, 5): 20*8 + 8, 8*8 + 8, 8*3 + 3.
    assert _num_params(*CASES["mlp"]) == (20 * 8 + 8) + (8 * 8 + 8) + (8 * 3 + 3)
    # Default MLP on MNIST: 784*128 + 128 + 128*128 + 128 + 128*10 + 10.
    assert _num_params(MLP(), _images(1, 28, 28)) == 118_282
    # CNN on 8x8x1: conv 3x3 1->2, pool to 4x4, conv 3x3 2->3, pool to 2x2x3 = 12 features,
    # dense 12->5, dense 5->4.
    expected = (9 * 1 * 2 + 2) + (9 * 2 * 3 + 3) + (12 * 5 + 5) + (5 * 4 + 4)
    assert _num_params(*CASES["cnn2d"]) == expected
    # Odd sizes floor: 7x7 pools to 3x3, then to 1x1x3 = 3 features.
    expected = (9 * 1 * 2 + 2) + (9 * 2 * 3 + 3) + (3 * 5 + 5) + (5 * 4 + 4)
    assert _num_params(CASES["cnn2d"][0], _images(1, 7, 7)) == expected
    # 1-D CNN on length 12: conv 3 1->2, pool to 6x2 = 12 features, dense 12->5, dense 5->4.
    assert _num_params(*CASES["cnn1d"]) == (3 * 1 * 2 + 2) + (12 * 5 + 5) + (5 * 4 + 4)


def test_transformer_param_count_matches_hand_count():
    d, v, ctx, m = 16, VOCAB, CONTEXT, 2 * 16
    attention = 4 * (d * d + d)  # q, k, v and output projections with biases
    block = 2 * (2 * d) + attention + (d * m + m) + (m * d + d)  # two LayerNorms, attn, MLP
    expected = v * d + ctx * d + 2 * block + 2 * d + (d * v + v)
    assert _num_params(*CASES["lm"]) == expected


def test_transformer_is_causal():
    _, tokens, init, apply = _jitted("lm")
    params = init(KEY, tokens)
    logits = np.asarray(apply(params, tokens))
    t = 3
    future_changed = tokens.copy()
    future_changed[:, t + 1:] = (tokens[:, t + 1:] + 1) % VOCAB
    changed = np.asarray(apply(params, future_changed))
    np.testing.assert_allclose(changed[:, :t + 1], logits[:, :t + 1], rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(changed[:, t + 1:] - logits[:, t + 1:]).max(axis=-1) > 1e-4)

    present_changed = tokens.copy()
    present_changed[:, t] = (tokens[:, t] + 1) % VOCAB
    changed = np.asarray(apply(params, present_changed))
    np.testing.assert_allclose(changed[:, :t], logits[:, :t], rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(changed[:, t] - logits[:, t]).max(axis=-1) > 1e-4)


def test_transformer_shorter_sequence_equals_prefix_and_longer_raises():
    _, tokens, init, apply = _jitted("lm")
    params = init(KEY, tokens)
    short = apply(params, tokens[:, :5])
    assert short.shape == (2, 5, VOCAB)
    # Causality means a prefix gets exactly the logits it has inside the full sequence.
    np.testing.assert_allclose(short, np.asarray(apply(params, tokens))[:, :5],
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="exceeds context"):
        jax.eval_shape(TINY_LM.apply, params, _tokens(2, CONTEXT + 1))


def test_cnn_rejects_wrong_rank():
    with pytest.raises(ValueError, match="axes"):
        jax.eval_shape(SimpleCNN(spatial_dims=1).init, KEY, _images(2, 8, 8, 1))


@pytest.mark.parametrize("name", CASES)
def test_init_is_deterministic_in_key(name):
    _, x, init, _ = _jitted(name)
    first, again, other = init(KEY, x), init(KEY, x), init(OTHER_KEY, x)
    assert all(jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.array_equal, first, again)))
    # Biases and LayerNorm parameters start at constants; every weight must differ by key.
    weights = [(a, b) for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(first),
                                              jax.tree_util.tree_leaves(other))
               if path[-1].key in ("kernel", "embedding")]
    assert weights and all(not np.array_equal(a, b) for a, b in weights)


@pytest.mark.parametrize("name", CASES)
def test_jit_equals_eager(name):
    model, x, init, apply = _jitted(name)
    params = init(KEY, x)
    eager = model.apply(params, x)
    assert np.all(np.isfinite(eager))
    np.testing.assert_allclose(apply(params, x), eager, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", CASES)
def test_vmap_over_stacked_params_equals_separate_applies(name):
    # The trainer runs independent trials as one program: params stacked on a leading axis.
    model, x, init, apply = _jitted(name)
    separate = [init(KEY, x), init(OTHER_KEY, x)]
    stacked = jax.tree_util.tree_map(lambda *p: np.stack(p), *separate)
    batched = np.asarray(jax.jit(jax.vmap(model.apply, in_axes=(0, None)))(stacked, x))
    for i, params in enumerate(separate):
        np.testing.assert_allclose(batched[i], apply(params, x), rtol=1e-5, atol=1e-6)
    assert not np.allclose(batched[0], batched[1])


def test_mlp_without_hidden_layers_is_softmax_regression():
    # mnist_logreg's model: MLP(hidden=()) must be exactly logits = x_flat @ W + b, nothing more.
    model, x = MLP(hidden=(), num_classes=3), _images(4, 2, 5)
    params = jax.jit(model.init)(KEY, x)
    assert count_params(params) == 10 * 3 + 3
    (dense,) = params["params"].values()
    by_hand = x.reshape(4, -1) @ np.asarray(dense["kernel"]) + np.asarray(dense["bias"])
    np.testing.assert_allclose(jax.jit(model.apply)(params, x), by_hand, rtol=1e-5, atol=1e-6)

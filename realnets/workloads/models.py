"""Small networks for the data-parallel batch-size study, as `flax.linen` modules.

- `MLP`: fully connected ReLU network on flattened inputs.
- `SimpleCNN`: conv + ReLU + 2x2 max-pool blocks, then two dense layers, on 2-D images or
  1-D signals; a scaled-down version of the "simple CNN" of Shallue et al.
- `CharTransformer`: a small decoder-only, pre-LayerNorm character language model.
- `count_params`: the number of scalars in a parameter tree.

Every module is a deterministic pure function `model.apply(params, x)`: no batch norm and no
dropout, so a step taken with gradient accumulation equals the step on the whole batch, and the
trainer can `jax.vmap` `apply` over stacked parameters of independent trials.

References:
  Shallue, Lee, Antognini, Sohl-Dickstein, Frostig, Dahl (2018), "Measuring the Effects of Data
  Parallelism on Neural Network Training", arXiv:1811.03600, Section 3 and Appendix B (models).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def count_params(params) -> int:
    """Number of scalars in a parameter tree (any pytree of arrays, e.g. `model.init(...)`)."""
    return int(sum(leaf.size for leaf in jax.tree_util.tree_leaves(params)))


class MLP(nn.Module):
    """Fully connected network with ReLU hidden layers.

    Input: float32 (B, ...) with any trailing shape, flattened to (B, F).
    Output: logits float32 (B, num_classes).
    """

    hidden: tuple[int, ...] = (128, 128)
    num_classes: int = 10

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h_BxF = jnp.asarray(x, jnp.float32).reshape(x.shape[0], -1)
        for width in self.hidden:
            h_BxF = nn.relu(nn.Dense(width)(h_BxF))
        return nn.Dense(self.num_classes)(h_BxF)


class SimpleCNN(nn.Module):
    """Conv (SAME padding) + ReLU + 2x2 max-pool (stride 2) per entry of `features`, then
    flatten, dense + ReLU, dense to logits.

    `spatial_dims` selects images (2) or signals (1); pooling floors odd sizes (7 -> 3).
    Input: float32 (B, H, W) or (B, H, W, C) when spatial_dims=2; float32 (B, L) or (B, L, C)
      when spatial_dims=1. Without a channel axis one is added (C = 1).
    Output: logits float32 (B, num_classes).
    """

    features: tuple[int, ...] = (16, 32)
    kernel: int = 5
    dense: int = 128
    num_classes: int = 10
    spatial_dims: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.spatial_dims not in (1, 2):
            raise ValueError(f"spatial_dims must be 1 or 2, got {self.spatial_dims}")
        h = jnp.asarray(x, jnp.float32)
        if h.ndim == self.spatial_dims + 1:
            h = h[..., None]
        elif h.ndim != self.spatial_dims + 2:
            raise ValueError(
                f"with spatial_dims={self.spatial_dims} the input must have "
                f"{self.spatial_dims + 1} or {self.spatial_dims + 2} axes, got shape {x.shape}")
        window = (2,) * self.spatial_dims
        for width in self.features:
            h = nn.Conv(width, (self.kernel,) * self.spatial_dims, padding="SAME")(h)
            h = nn.max_pool(nn.relu(h), window, strides=window)
        h_BxF = h.reshape(h.shape[0], -1)
        h_BxF = nn.relu(nn.Dense(self.dense)(h_BxF))
        return nn.Dense(self.num_classes)(h_BxF)


class _Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(LN(x)), then x + MLP(LN(x))."""

    num_heads: int
    mlp_ratio: int

    @nn.compact
    def __call__(self, x_BxTxD: jax.Array, mask_Bx1xTxT: jax.Array) -> jax.Array:
        d_model = x_BxTxD.shape[-1]
        h_BxTxD = nn.LayerNorm()(x_BxTxD)
        # Self-attention: queries, keys and values all come from h; no dropout (rate 0).
        x_BxTxD = x_BxTxD + nn.MultiHeadDotProductAttention(
            num_heads=self.num_heads, qkv_features=d_model)(h_BxTxD, mask=mask_Bx1xTxT)
        h_BxTxD = nn.LayerNorm()(x_BxTxD)
        h_BxTxM = nn.gelu(nn.Dense(self.mlp_ratio * d_model)(h_BxTxD))
        return x_BxTxD + nn.Dense(d_model)(h_BxTxM)


class CharTransformer(nn.Module):
    """Decoder-only, pre-LayerNorm, causal self-attention character language model with
    learned token and position embeddings (GPT-2 layout, no dropout).

    Input: int32 token ids (B, T) with T <= context.
    Output: next-token logits float32 (B, T, vocab_size); position t sees only tokens <= t.
    """

    vocab_size: int
    context: int = 64
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp_ratio: int = 4

    @nn.compact
    def __call__(self, tokens_BxT: jax.Array) -> jax.Array:
        seq_len = tokens_BxT.shape[1]
        if seq_len > self.context:
            raise ValueError(f"sequence length {seq_len} exceeds context {self.context}")
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model {self.d_model} must be divisible by num_heads {self.num_heads}")
        x_BxTxD = nn.Embed(self.vocab_size, self.d_model, name="token_embed")(tokens_BxT)
        pos_TxD = nn.Embed(self.context, self.d_model, name="pos_embed")(jnp.arange(seq_len))
        x_BxTxD = x_BxTxD + pos_TxD[None]
        # True where query position i may attend to key position j, i.e. j <= i.
        mask_Bx1xTxT = nn.make_causal_mask(tokens_BxT, dtype=jnp.bool_)
        for _ in range(self.num_layers):
            x_BxTxD = _Block(self.num_heads, self.mlp_ratio)(x_BxTxD, mask_Bx1xTxT)
        x_BxTxD = nn.LayerNorm()(x_BxTxD)
        return nn.Dense(self.vocab_size, name="head")(x_BxTxD)

"""An attention own workload: one transformer encoder block reading scikit-learn's 8x8 digits as
a sequence of 8 row tokens (8 pixels each; the data ship with scikit-learn, nothing is
downloaded), trained with Adam, the same split as the catalogue's digits workloads. Held out for
the two-point estimate with the median full-batch end (docs/prediction_rule.md, session 41)
before any run of it.

    python -m realnets sweep --workload examples/digits_attention.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/digits_attention
"""

import flax.linen as nn

from realnets.workloads.datasets import load_digits
from realnets.workloads.own import classifier_workload
from realnets.workloads.search_space import TrialSearchSpace

WIDTH = 32      # token width
HEADS = 2
ROWS = 8        # tokens per image


class RowAttention(nn.Module):
    """Input float32 (B, 8, 8) images; output (B, 10) logits. Each row is a token: a dense
    embedding of width `width` plus a learned position embedding, one pre-norm encoder block
    (self-attention with `heads` heads, then a two-layer GELU MLP, each residual), a final layer
    norm, the mean over tokens and a dense layer."""

    width: int = WIDTH
    heads: int = HEADS

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(self.width)(x)                                        # (B, 8, width)
        h = h + self.param("position", nn.initializers.normal(0.02), (ROWS, self.width))
        h = h + nn.MultiHeadDotProductAttention(num_heads=self.heads)(nn.LayerNorm()(h))
        m = nn.Dense(2 * self.width)(nn.LayerNorm()(h))
        h = h + nn.Dense(self.width)(nn.gelu(m))
        return nn.Dense(10)(nn.LayerNorm()(h).mean(axis=1))


def make_workload():
    return classifier_workload(
        "digits_attention", RowAttention(), load_digits(), optimizer="adam",
        search=TrialSearchSpace((1e-4, 1e-1), (0.05, 0.5)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512), max_steps=2000,
        data="scikit-learn's 8x8 digits (1,797 images; every 10th of each digit held out "
             "for validation), read as 8 row tokens",
        model=f"one pre-norm transformer encoder block (width {WIDTH}, {HEADS} heads, GELU "
              "MLP of twice the width) over the 8 rows, mean-pooled, dense 10 (flax)")

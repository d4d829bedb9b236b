"""A residual own workload: a pre-norm residual MLP (three blocks with layer norm) on
scikit-learn's 8x8 digits, flattened (the data ship with scikit-learn; nothing is downloaded),
trained with Nesterov momentum, the same split as the catalogue's digits workloads. Held out for
the two-point estimate with the median full-batch end (docs/prediction_rule.md, session 41)
before any run of it.

    python -m realnets sweep --workload examples/digits_resmlp.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/digits_resmlp
"""

import flax.linen as nn

from realnets.workloads.datasets import load_digits
from realnets.workloads.own import classifier_workload
from realnets.workloads.search_space import TrialSearchSpace

WIDTH = 64
BLOCKS = 3


class ResidualMLP(nn.Module):
    """Input float32 (B, 8, 8) images; output (B, 10) logits: the 64 pixels projected to
    `width`, `blocks` pre-norm residual blocks h + Dense(relu(Dense(LayerNorm(h)))) of width
    `width` (hidden width twice that), a final layer norm and a dense layer."""

    width: int = WIDTH
    blocks: int = BLOCKS

    @nn.compact
    def __call__(self, x):
        h = nn.Dense(self.width)(x.reshape(x.shape[0], -1))              # (B, width)
        for _ in range(self.blocks):
            h = h + nn.Dense(self.width)(nn.relu(nn.Dense(2 * self.width)(nn.LayerNorm()(h))))
        return nn.Dense(10)(nn.LayerNorm()(h))


def make_workload():
    return classifier_workload(
        "digits_resmlp", ResidualMLP(), load_digits(), optimizer="nesterov",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512), max_steps=2000,
        data="scikit-learn's 8x8 digits (1,797 images; every 10th of each digit held out "
             "for validation), flattened",
        model=f"pre-norm residual MLP ({BLOCKS} blocks of width {WIDTH}, hidden {2 * WIDTH}, "
              "layer norm), dense 10 (flax)")

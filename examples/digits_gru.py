"""A recurrent own workload: a GRU reading scikit-learn's 8x8 digits one row of 8 pixels per
step (the data ship with scikit-learn; nothing is downloaded), the same split as the catalogue's
digits workloads. The first recurrent network batchscope validates: held out for the
predictions' track record (docs/prediction_rule.md, session 40) before any run of it.

    python -m realnets sweep --workload examples/digits_gru.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/digits_gru
"""

import flax.linen as nn

from realnets.workloads.datasets import load_digits
from realnets.workloads.own import classifier_workload
from realnets.workloads.search_space import TrialSearchSpace

HIDDEN = 32


class RowGRU(nn.Module):
    """Input float32 (B, 8, 8) images; output (B, 10) logits: a GRU of `hidden` units over the 8
    rows (8 pixels each per step), a dense layer on its last state."""

    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):
        h = nn.RNN(nn.GRUCell(self.hidden))(x)            # (B, 8, hidden)
        return nn.Dense(10)(h[:, -1])


def make_workload():
    return classifier_workload(
        "digits_gru", RowGRU(), load_digits(), optimizer="momentum",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512), max_steps=2000,
        data="scikit-learn's 8x8 digits (1,797 images; every 10th of each digit held out "
             "for validation), read a row per step",
        model=f"GRU of {HIDDEN} units over the 8 rows, dense 10 on its last state (flax)")

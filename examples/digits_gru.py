"""A recurrent own workload: a GRU reading scikit-learn's 8x8 digits one row of 8 pixels per
step (the data ship with scikit-learn; nothing is downloaded), the same split as the catalogue's
digits workloads. The first recurrent network batchscope validates: held out for the
predictions' track record (docs/prediction_rule.md, session 40) before any run of it.

    python -m realnets sweep --workload examples/digits_gru.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/digits_gru
"""

import flax.linen as nn
import jax.numpy as jnp
import optax

from realnets.workloads.datasets import load_digits
from realnets.workloads.own import own_workload
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
    split = load_digits()
    model = RowGRU()

    def init_params(key):
        return model.init(key, split.train_x[:1])

    def loss(params, batch):                             # (B,) per-example cross-entropy
        logits = model.apply(params, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])

    def error(params, batch):                            # (B,) 1.0 where wrong
        logits = model.apply(params, batch["x"])
        return (jnp.argmax(logits, axis=-1) != batch["y"]).astype(jnp.float32)

    return own_workload(
        "digits_gru", init_params=init_params, loss=loss, metric=error, metric_name="error",
        train={"x": split.train_x, "y": split.train_y},
        val={"x": split.val_x, "y": split.val_y}, optimizer="momentum",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512), max_steps=2000,
        data="scikit-learn's 8x8 digits (1,797 images; every 10th of each digit held out "
             "for validation), read a row per step",
        model=f"GRU of {HIDDEN} units over the 8 rows, dense 10 on its last state (flax)")

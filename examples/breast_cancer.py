"""A second own workload: a small MLP (flax) on scikit-learn's bundled Wisconsin breast-cancer
data (569 tumours, 30 features; nothing is downloaded), tabular data unlike any shipped workload.

    python -m realnets sweep --workload examples/breast_cancer.py:make_workload \
        --trials 32 --full-trials --goal auto --out runs/breast_cancer

Held out for the rules of docs/prediction_rule.md (session 33, later).
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_breast_cancer

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace


class TabularMLP(nn.Module):
    """Input float32 (B, 30) standardised features; output (B, 2) logits. Two hidden layers of
    `width` units with ReLU."""

    width: int = 64

    @nn.compact
    def __call__(self, x):
        for _ in range(2):
            x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(2)(x)


def make_workload():
    data = load_breast_cancer()
    x, y = data.data.astype(np.float32), data.target.astype(np.int32)
    order = np.random.default_rng(0).permutation(len(y))     # a fixed 455 / 114 split
    train, val = order[:455], order[455:]
    mean, std = x[train].mean(axis=0), x[train].std(axis=0)  # standardised on the training rows
    x = (x - mean) / std
    model = TabularMLP()

    def init_params(key):
        return model.init(key, x[:1])

    def loss(params, batch):                             # (B,) per-example cross-entropy
        logits = model.apply(params, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])

    def error(params, batch):                            # (B,) 1.0 where wrong
        logits = model.apply(params, batch["x"])
        return (jnp.argmax(logits, axis=-1) != batch["y"]).astype(jnp.float32)

    return own_workload(
        "breast_cancer_mlp", init_params=init_params, loss=loss, metric=error,
        metric_name="error", train={"x": x[train], "y": y[train]},
        val={"x": x[val], "y": y[val]}, optimizer="momentum",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256), max_steps=2000,
        data="Wisconsin breast cancer (scikit-learn, bundled): 569 tumours, 30 features, "
             "455 train / 114 validation",
        model="MLP 30-64-64-2, ReLU (flax)")

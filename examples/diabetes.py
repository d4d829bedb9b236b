"""A third own workload, a regression: a small MLP (flax) on scikit-learn's bundled diabetes data
(442 patients, 10 baseline variables, disease progression after a year; nothing is downloaded).
The training loss and the validation metric are both the squared error.

    python -m realnets sweep --workload examples/diabetes.py:make_workload \
        --trials 32 --full-trials --goal auto --out runs/diabetes

Held out in docs/prediction_rule.md (session 33, last).
"""

import flax.linen as nn
import numpy as np
from sklearn.datasets import load_diabetes

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace


class RegressionMLP(nn.Module):
    """Input float32 (B, 10) standardised variables; output (B,) the standardised target. Two
    hidden layers of `width` units with ReLU."""

    width: int = 64

    @nn.compact
    def __call__(self, x):
        for _ in range(2):
            x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(1)(x)[:, 0]


def make_workload():
    data = load_diabetes()
    x, y = data.data.astype(np.float32), data.target.astype(np.float32)
    order = np.random.default_rng(0).permutation(len(y))     # a fixed 353 / 89 split
    train, val = order[:353], order[353:]
    x = (x - x[train].mean(axis=0)) / x[train].std(axis=0)     # standardised on the training rows
    y = (y - y[train].mean()) / y[train].std()
    model = RegressionMLP()

    def init_params(key):
        return model.init(key, x[:1])

    def loss(params, batch):                             # (B,) per-example squared error / 2
        return 0.5 * (model.apply(params, batch["x"]) - batch["y"]) ** 2

    return own_workload(
        "diabetes_mlp", init_params=init_params, loss=loss, metric_name="loss",
        train={"x": x[train], "y": y[train]}, val={"x": x[val], "y": y[val]},
        optimizer="momentum", search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256), max_steps=2000,
        data="diabetes (scikit-learn, bundled): 442 patients, 10 variables, 353 train / 89 "
             "validation, target standardised",
        model="MLP 10-64-64-1, ReLU (flax), squared error")

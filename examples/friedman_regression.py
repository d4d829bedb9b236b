"""A synthetic regression own workload: scikit-learn's `make_friedman1` (Friedman's first
benchmark, y = 10 sin(pi x1 x2) + 20 (x3 - 1/2)^2 + 10 x4 + 5 x5 + noise on 10 uniform inputs,
the last five irrelevant; generated on the spot, nothing is downloaded), fitted by an MLP with
SiLU units trained with heavy-ball momentum on the squared error. Held out for the two-point
estimate of record, B_2pt'(med) (docs/prediction_rule.md, session 42), before any run of it.

    python -m realnets sweep --workload examples/friedman_regression.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/friedman_regression
"""

import flax.linen as nn
import numpy as np

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace

ROWS, FEATURES = 8000, 10
TRAIN = 6400            # the first rows train, the rest validate
HIDDEN = 128
NOISE = 1.0             # the noise's standard deviation, in the target's raw units


def friedman_split(seed: int = 0) -> dict:
    """`make_friedman1` rows: {"train": {"x", "y"}, "val": {"x", "y"}}, x float32 (n, 10) and y
    float32 (n,), both standardised with the training rows' mean and standard deviation; the
    first TRAIN rows train, the rest validate."""
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=ROWS, n_features=FEATURES, noise=NOISE, random_state=seed)
    x = ((x - x[:TRAIN].mean(axis=0)) / x[:TRAIN].std(axis=0)).astype(np.float32)
    y = ((y - y[:TRAIN].mean()) / y[:TRAIN].std()).astype(np.float32)
    return {"train": {"x": x[:TRAIN], "y": y[:TRAIN]}, "val": {"x": x[TRAIN:], "y": y[TRAIN:]}}


class RegressionMLP(nn.Module):
    """Input float32 (B, 10) standardised inputs; output (B,) the standardised target. Two
    hidden layers of `hidden` units with SiLU."""

    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):
        h = nn.silu(nn.Dense(self.hidden)(x))
        h = nn.silu(nn.Dense(self.hidden)(h))
        return nn.Dense(1)(h)[:, 0]


def make_workload():
    split, model = friedman_split(), RegressionMLP()

    def init_params(key):
        return model.init(key, split["train"]["x"][:1])

    def loss(params, batch):                             # (B,) per-example squared error / 2
        return 0.5 * (model.apply(params, batch["x"]) - batch["y"]) ** 2

    return own_workload(
        "friedman_regression", init_params=init_params, loss=loss, metric_name="loss",
        train=split["train"], val=split["val"], optimizer="momentum",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512, 1024), max_steps=2000,
        data=f"scikit-learn's make_friedman1, {ROWS} rows of {FEATURES} inputs (5 irrelevant), "
             f"noise sd {NOISE}, {TRAIN} train, target standardised",
        model=f"MLP {FEATURES}-{HIDDEN}-{HIDDEN}-1, SiLU (flax), squared error")

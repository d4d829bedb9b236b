"""A real-data binary classification own workload: Fair's 1978 survey of extramarital affairs as
statsmodels ships it (`statsmodels.datasets.fair`, included there with the author's permission;
6,366 married women, nothing is downloaded): whether a woman reported any time in affairs
(32% did) from eight answers (rating of the marriage, age, years married, children, religiousness,
education, her and her husband's occupation codes, taken as numbers), fitted by an MLP with tanh
units on the softmax cross-entropy, trained with Adam. Held out for the estimate of record and
rule 4 (docs/prediction_rule.md, session 49), before any run of it.

    python -m realnets sweep --workload examples/fair_affairs.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/fair_affairs
"""

import flax.linen as nn
import numpy as np
import optax

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace

TRAIN = 5000            # rows after a fixed shuffle: the first train, the other 1,366 validate
HIDDEN = 64
SHUFFLE_SEED = 0


def fair_split() -> dict:
    """{"train": {"x", "y"}, "val": {"x", "y"}}: x float32 (n, 8) answers standardised with the
    training rows' mean and standard deviation, y int32 (n,) 1 where `affairs` > 0; rows
    shuffled by `np.random.default_rng(SHUFFLE_SEED)`, the first TRAIN train."""
    from statsmodels.datasets import fair

    frame = fair.load_pandas().data
    y = (frame["affairs"].to_numpy(np.float64) > 0).astype(np.int32)
    x = frame.drop(columns="affairs").to_numpy(np.float64)
    order = np.random.default_rng(SHUFFLE_SEED).permutation(len(y))
    x, y = x[order], y[order]
    x = ((x - x[:TRAIN].mean(axis=0)) / x[:TRAIN].std(axis=0)).astype(np.float32)
    return {"train": {"x": x[:TRAIN], "y": y[:TRAIN]}, "val": {"x": x[TRAIN:], "y": y[TRAIN:]}}


class AffairsMLP(nn.Module):
    """Input float32 (B, 8) standardised answers; output (B, 2) logits (no affair, affair). Two
    hidden layers of `hidden` units with tanh."""

    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):
        h = nn.tanh(nn.Dense(self.hidden)(x))
        h = nn.tanh(nn.Dense(self.hidden)(h))
        return nn.Dense(2)(h)


def make_workload():
    split, model = fair_split(), AffairsMLP()

    def init_params(key):
        return model.init(key, split["train"]["x"][:1])

    def loss(params, batch):                  # (B,) per-example cross-entropy, in nats
        logits = model.apply(params, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])

    rows = len(split["train"]["y"]) + len(split["val"]["y"])
    return own_workload(
        "fair_affairs", init_params=init_params, loss=loss, metric_name="cross_entropy",
        train=split["train"], val=split["val"], optimizer="adam",
        search=TrialSearchSpace((1e-4, 1e-1), (0.02, 0.5)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512, 1024), max_steps=2000,
        data=f"Fair (1978) affairs survey (statsmodels' fair), {rows} women, any affair from 8 "
             f"answers, {TRAIN} train",
        model=f"MLP 8-{HIDDEN}-{HIDDEN}-2, tanh (flax), softmax cross-entropy")

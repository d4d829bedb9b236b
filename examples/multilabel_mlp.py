"""A multi-label own workload: scikit-learn's `make_multilabel_classification` (each row a bag of
word counts over 20 features drawn from 2 of 5 topics on average; 5 labels that are not
exclusive; generated on the spot, nothing is downloaded), fitted by an MLP with GELU units on
the summed binary cross-entropy of the labels, trained with Adam. Held out for the two-point
estimate of record, B_2pt'(med) (docs/prediction_rule.md, session 42), before any run of it.

    python -m realnets sweep --workload examples/multilabel_mlp.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/multilabel_mlp
"""

import flax.linen as nn
import numpy as np
import optax

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace

ROWS, FEATURES, LABELS = 8000, 20, 5
TRAIN = 6400            # the first rows train, the rest validate
HIDDEN = 128


def multilabel_split(seed: int = 0) -> dict:
    """`make_multilabel_classification` rows: {"train": {"x", "y"}, "val": {"x", "y"}}, x
    float32 (n, 20) counts standardised with the training rows' mean and standard deviation,
    y float32 (n, 5) in {0, 1}; the first TRAIN rows train, the rest validate."""
    from sklearn.datasets import make_multilabel_classification

    x, y = make_multilabel_classification(n_samples=ROWS, n_features=FEATURES,
                                          n_classes=LABELS, n_labels=2, random_state=seed)
    x = ((x - x[:TRAIN].mean(axis=0)) / x[:TRAIN].std(axis=0)).astype(np.float32)
    y = y.astype(np.float32)
    return {"train": {"x": x[:TRAIN], "y": y[:TRAIN]}, "val": {"x": x[TRAIN:], "y": y[TRAIN:]}}


class MultiLabelMLP(nn.Module):
    """Input float32 (B, 20) standardised counts; output (B, 5) one logit per label. Two hidden
    layers of `hidden` units with GELU."""

    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):
        h = nn.gelu(nn.Dense(self.hidden)(x))
        h = nn.gelu(nn.Dense(self.hidden)(h))
        return nn.Dense(LABELS)(h)


def make_workload():
    split, model = multilabel_split(), MultiLabelMLP()

    def init_params(key):
        return model.init(key, split["train"]["x"][:1])

    def loss(params, batch):         # (B,) per-example binary cross-entropy summed over labels
        logits = model.apply(params, batch["x"])
        return optax.sigmoid_binary_cross_entropy(logits, batch["y"]).sum(axis=-1)

    return own_workload(
        "multilabel_mlp", init_params=init_params, loss=loss, metric_name="loss",
        train=split["train"], val=split["val"], optimizer="adam",
        search=TrialSearchSpace((1e-4, 1e-1), (0.02, 0.5)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512, 1024), max_steps=2000,
        data=f"scikit-learn's make_multilabel_classification, {ROWS} rows of {FEATURES} counts, "
             f"{LABELS} labels (2 per row on average), {TRAIN} train",
        model=f"MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{LABELS}, GELU (flax), summed sigmoid "
              "cross-entropy")

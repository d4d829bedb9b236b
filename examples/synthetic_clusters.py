"""A synthetic own workload: scikit-learn's `make_classification` (Guyon's design: Gaussian
clusters on the vertices of a hypercube, 5 classes of 2 clusters each in 20 features, 8 of them
informative and 4 their linear combinations, 5% of the labels flipped; generated on the spot,
nothing is downloaded), classified by an MLP trained with plain SGD. Held out for the two-point
estimate with the median full-batch end (docs/prediction_rule.md, session 41) before any run of
it.

    python -m realnets sweep --workload examples/synthetic_clusters.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/synthetic_clusters
"""

import flax.linen as nn
import numpy as np

from realnets.workloads.datasets import Split
from realnets.workloads.own import classifier_workload
from realnets.workloads.search_space import TrialSearchSpace

ROWS, FEATURES, CLASSES = 8000, 20, 5
TRAIN = 6400            # the first rows train, the rest validate
HIDDEN = 128


def cluster_split(seed: int = 0) -> Split:
    """`make_classification` rows (float32 (n, 20), int32 labels), standardised with the
    training rows' mean and standard deviation; the first TRAIN rows train, the rest validate."""
    from sklearn.datasets import make_classification

    x, y = make_classification(n_samples=ROWS, n_features=FEATURES, n_informative=8,
                               n_redundant=4, n_classes=CLASSES, n_clusters_per_class=2,
                               flip_y=0.05, class_sep=1.0, random_state=seed)
    mean, std = x[:TRAIN].mean(axis=0), x[:TRAIN].std(axis=0)
    x = ((x - mean) / std).astype(np.float32)
    y = y.astype(np.int32)
    return Split(x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:], "make_classification")


class MLP(nn.Module):
    """Input float32 (B, 20); output (B, 5) logits: two ReLU layers of `hidden` units."""

    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(self.hidden)(x))
        h = nn.relu(nn.Dense(self.hidden)(h))
        return nn.Dense(CLASSES)(h)


def make_workload():
    return classifier_workload(
        "synthetic_clusters", MLP(), cluster_split(), optimizer="sgd",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512, 1024), max_steps=2000,
        data=f"scikit-learn's make_classification, {ROWS} rows of {FEATURES} features, "
             f"{CLASSES} classes of 2 clusters, 5% labels flipped ({TRAIN} train)",
        model=f"MLP {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES}, ReLU (flax)")

"""A real-data regression own workload: the diamonds data set as plotnine ships it
(`plotnine/data/diamonds.csv`, from ggplot2, MIT licence; 53,940 diamonds, nothing is
downloaded): the log price from carat, cut, colour, clarity and the five measurements, fitted
by an MLP with ReLU units on the squared error, trained with heavy-ball momentum. Held out for
the estimate of record and rule 4 (docs/prediction_rule.md, session 50), before any run of it.

    python -m realnets sweep --workload examples/diamonds.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/diamonds
"""

import importlib.util
from pathlib import Path

import flax.linen as nn
import numpy as np

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace

TRAIN = 40000           # rows after a fixed shuffle: the first train, the other 13,920 validate
HIDDEN = 64
SHUFFLE_SEED = 0
# the grades in order, worst first (ggplot2's ordered factors)
CUT = ("Fair", "Good", "Very Good", "Premium", "Ideal")
COLOR = ("J", "I", "H", "G", "F", "E", "D")
CLARITY = ("I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF")
FEATURES = ("carat", "cut", "color", "clarity", "depth", "table", "x", "y", "z")


def diamonds_csv() -> Path:
    """The CSV inside the installed plotnine package, found without importing plotnine (whose
    import loads matplotlib)."""
    spec = importlib.util.find_spec("plotnine")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the diamonds example needs plotnine installed (pip install plotnine)")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "diamonds.csv"


def diamonds_split() -> dict:
    """{"train": {"x", "y"}, "val": {"x", "y"}}: x float32 (n, 9), the grades as their rank
    (0 = worst) and every column standardised with the training rows' mean and standard
    deviation; y float32 (n,), log(price in US dollars) standardised the same way. The 20 rows
    with a zero length, width or depth (not measured) are dropped, the other 53,920 shuffled by
    `np.random.default_rng(SHUFFLE_SEED)`, the first TRAIN train."""
    import pandas as pd

    frame = pd.read_csv(diamonds_csv())
    frame = frame[(frame[["x", "y", "z"]] > 0).all(axis=1)]
    for name, grades in (("cut", CUT), ("color", COLOR), ("clarity", CLARITY)):
        frame[name] = frame[name].map({g: i for i, g in enumerate(grades)})
    x = frame[list(FEATURES)].to_numpy(np.float64)
    y = np.log(frame["price"].to_numpy(np.float64))
    order = np.random.default_rng(SHUFFLE_SEED).permutation(len(y))
    x, y = x[order], y[order]
    x = ((x - x[:TRAIN].mean(axis=0)) / x[:TRAIN].std(axis=0)).astype(np.float32)
    y = ((y - y[:TRAIN].mean()) / y[:TRAIN].std()).astype(np.float32)
    return {"train": {"x": x[:TRAIN], "y": y[:TRAIN]}, "val": {"x": x[TRAIN:], "y": y[TRAIN:]}}


class PriceMLP(nn.Module):
    """Input float32 (B, 9) standardised features; output (B,) the standardised log price.
    Two hidden layers of `hidden` units with ReLU."""

    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(self.hidden)(x))
        h = nn.relu(nn.Dense(self.hidden)(h))
        return nn.Dense(1)(h)[:, 0]


def make_workload():
    split, model = diamonds_split(), PriceMLP()

    def init_params(key):
        return model.init(key, split["train"]["x"][:1])

    def loss(params, batch):      # (B,) squared error of the standardised log price
        return (model.apply(params, batch["x"]) - batch["y"]) ** 2

    rows = len(split["train"]["y"]) + len(split["val"]["y"])
    return own_workload(
        "diamonds", init_params=init_params, loss=loss, metric_name="loss",
        train=split["train"], val=split["val"], optimizer="momentum",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512, 1024), max_steps=2000,
        data=f"diamonds (plotnine's copy of ggplot2's, MIT), {rows} diamonds, standardised log "
             f"price from 9 features, {TRAIN} train",
        model=f"MLP 9-{HIDDEN}-{HIDDEN}-1, ReLU (flax), squared error")

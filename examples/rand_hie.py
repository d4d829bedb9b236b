"""A real-data count regression own workload: the RAND Health Insurance Experiment as statsmodels
ships it (`statsmodels.datasets.randhie`, public domain; 20,190 person-years, nothing is
downloaded): the number of outpatient doctor visits (`mdvis`, 0 .. 77, mean 2.9) from nine
covariates (coinsurance, deductible plan, incentive payment, physical limitation, chronic
diseases, self-rated health), fitted by an MLP with ReLU units whose output is the log of a
Poisson rate, trained with heavy-ball momentum on the Poisson negative log-likelihood. Held out
for the estimate of record and rule 4 (docs/prediction_rule.md, session 49), before any run of it.

    python -m realnets sweep --workload examples/rand_hie.py:make_workload \
        --trials 32 --full-trials --goal auto --vmap-trials 4 --out runs/rand_hie
"""

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from realnets.workloads.own import own_workload
from realnets.workloads.search_space import TrialSearchSpace

TRAIN = 16000           # rows after a fixed shuffle: the first train, the other 4,190 validate
HIDDEN = 64
SHUFFLE_SEED = 0


def rand_hie_split() -> dict:
    """{"train": {"x", "y"}, "val": {"x", "y"}}: x float32 (n, 9) covariates standardised with
    the training rows' mean and standard deviation, y float32 (n,) visit counts; rows shuffled
    by `np.random.default_rng(SHUFFLE_SEED)` (the file is ordered by person), the first TRAIN
    train: a person's other years may validate, as in any split by rows."""
    from statsmodels.datasets import randhie

    frame = randhie.load_pandas().data
    y = frame["mdvis"].to_numpy(np.float64)
    x = frame.drop(columns="mdvis").to_numpy(np.float64)
    order = np.random.default_rng(SHUFFLE_SEED).permutation(len(y))
    x, y = x[order], y[order]
    x = ((x - x[:TRAIN].mean(axis=0)) / x[:TRAIN].std(axis=0)).astype(np.float32)
    y = y.astype(np.float32)
    return {"train": {"x": x[:TRAIN], "y": y[:TRAIN]}, "val": {"x": x[TRAIN:], "y": y[TRAIN:]}}


class PoissonMLP(nn.Module):
    """Input float32 (B, 9) standardised covariates; output (B,) the log Poisson rate of the
    visits. Two hidden layers of `hidden` units with ReLU."""

    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Dense(self.hidden)(x))
        h = nn.relu(nn.Dense(self.hidden)(h))
        return nn.Dense(1)(h)[:, 0]


def make_workload():
    split, model = rand_hie_split(), PoissonMLP()

    def init_params(key):
        return model.init(key, split["train"]["x"][:1])

    def loss(params, batch):      # (B,) Poisson -log p(y): e^z - y z + log y!, in nats, >= 0
        z = model.apply(params, batch["x"])
        return jnp.exp(z) - batch["y"] * z + gammaln(batch["y"] + 1.0)

    rows = len(split["train"]["y"]) + len(split["val"]["y"])
    return own_workload(
        "rand_hie", init_params=init_params, loss=loss, metric_name="loss",
        train=split["train"], val=split["val"], optimizer="momentum",
        search=TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=(8, 16, 32, 64, 128, 256, 512, 1024), max_steps=2000,
        data=f"RAND Health Insurance Experiment (statsmodels' randhie, public domain), {rows} "
             f"person-years, doctor visits from 9 covariates, {TRAIN} train",
        model=f"MLP 9-{HIDDEN}-{HIDDEN}-1, ReLU (flax), Poisson negative log-likelihood")

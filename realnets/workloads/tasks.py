"""A workload made concrete: host data and the pure functions the trainer compiles.

A `Task` holds
- `init_params(key) -> params`;
- `loss_fn(params, batch) -> scalar`: mean training loss over the batch rows;
- `eval_fn(params, batch) -> {"metric_sum", "loss_sum", "count"}`: sums over the rows whose
  `mask` is 1 (the validation set is padded to a whole number of device shards);
- the training data as a dict of arrays with n rows (sampled by epoch permutations), or a
  `draw_batch(rng, B)` for tasks with unlimited data (the NQM);
- the validation data (or `exact_eval(params)` when the metric is known in closed form).

Builders: `classification_task` (images or signals, metric: error rate), `language_task`
(characters, metric: cross-entropy in nats per character), `quadratic_task` (the NQM).
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nqm.problem import Problem


# The values each metric can take (lower is better): a goal outside is refused before training.
METRIC_RANGES = {"error": (0.0, 1.0), "cross_entropy": (0.0, math.inf), "loss": (0.0, math.inf)}


def check_goal(goal: float, metric: str) -> float:
    """`goal` if the metric can take it; else ValueError naming --goal and the range."""
    lo, hi = METRIC_RANGES[metric]
    if not (math.isfinite(goal) and lo <= goal <= hi):
        raise ValueError(f"--goal must be in [{lo:g}, {hi:g}] for the {metric} metric (lower is "
                         f"better), got {goal:g}")
    return float(goal)


def check_batch_sizes_fit(train_size: int | None, batch_sizes) -> None:
    """ValueError naming --batch-sizes when a batch is larger than the training set (an epoch
    must hold at least one batch); tasks with unlimited data (train_size None) take any."""
    if train_size is not None and max(batch_sizes) > train_size:
        raise ValueError(f"batch-sizes entry {max(batch_sizes)} exceeds the {train_size} "
                         "training examples of this workload")


@dataclass(frozen=True)
class Task:
    """See the module docstring. metric: 'error', 'cross_entropy' or 'loss' (lower is better)."""

    init_params: Callable
    loss_fn: Callable
    metric: str
    train: dict | None = None
    val: dict | None = None
    eval_fn: Callable | None = None
    draw_batch: Callable | None = None
    exact_eval: Callable | None = None
    # rows whose mean training loss is the population loss exactly: a task with unlimited data
    # whose expectation is known (the NQM: one row without noise); None for every other task
    population: dict | None = None

    @property
    def train_size(self) -> int | None:
        return None if self.train is None else int(next(iter(self.train.values())).shape[0])


def _model_init(model, example):
    def init(key):
        return model.init(key, jnp.asarray(example))

    return init


def classification_task(model, train_x, train_y, val_x, val_y) -> Task:
    """Softmax classifier; metric = validation error rate (fraction misclassified)."""

    def loss_fn(params, batch):
        logits = model.apply(params, batch["x"])
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]))

    def eval_fn(params, batch):
        logits = model.apply(params, batch["x"])
        # argmax compare, not a gather on the label: the batch is sharded
        wrong = (jnp.argmax(logits, axis=-1) != batch["y"]).astype(jnp.float32)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])
        return {"metric_sum": jnp.sum(wrong * batch["mask"]),
                "loss_sum": jnp.sum(ce * batch["mask"]), "count": jnp.sum(batch["mask"])}

    return Task(init_params=_model_init(model, train_x[:1]), loss_fn=loss_fn, metric="error",
                train={"x": train_x, "y": train_y}, val={"x": val_x, "y": val_y}, eval_fn=eval_fn)


def windows(ids: np.ndarray, length: int) -> np.ndarray:
    """Non-overlapping windows of `length` ids: int32 (n, length)."""
    n = ids.shape[0] // length
    if n < 1:
        raise ValueError(f"text of {ids.shape[0]} characters is shorter than one window of {length}")
    return ids[: n * length].reshape(n, length).astype(np.int32)


def language_task(model, train_ids, val_ids, context: int, max_val_windows: int = 256) -> Task:
    """Next-character prediction on windows of context + 1 characters; metric = validation
    cross-entropy (nats per character) on at most `max_val_windows` windows spread evenly over
    the validation text (a full pass over it at every evaluation would cost more than training
    at small batch sizes; 256 x 32 characters give the metric to about 0.02 nats)."""
    train = {"tokens": windows(train_ids, context + 1)}
    val_windows = windows(val_ids, context + 1)
    keep = np.unique(np.linspace(0, val_windows.shape[0] - 1, max_val_windows).astype(np.int64))
    val = {"tokens": val_windows[keep]}

    def per_token(params, tokens):
        logits = model.apply(params, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])

    def loss_fn(params, batch):
        return jnp.mean(per_token(params, batch["tokens"]))

    def eval_fn(params, batch):
        ce = jnp.mean(per_token(params, batch["tokens"]), axis=-1)
        total = jnp.sum(ce * batch["mask"])
        return {"metric_sum": total, "loss_sum": total, "count": jnp.sum(batch["mask"])}

    return Task(init_params=_model_init(model, train["tokens"][:1, :-1]), loss_fn=loss_fn,
                metric="cross_entropy", train=train, val=val, eval_fn=eval_fn)


def quadratic_task(problem: Problem) -> Task:
    """The NQM as a trainable workload (Zhang et al. 2019, section 3).

    Parameters theta (d,), theta_0 ~ N(0, diag(init second moments)). Example j carries
    z_j ~ N(0, I_d) and has loss `1/2 theta^T H theta + (sqrt(c) * z_j) . theta`, so a batch of B
    examples has gradient `H theta + eps` with `eps ~ N(0, C / B)` exactly as in `nqm/`. The metric
    is the exact loss `1/2 theta^T H theta`.
    """
    h = jnp.asarray(problem.curvature_D, jnp.float32)
    sqrt_c = jnp.asarray(np.sqrt(problem.noise_D), jnp.float32)
    init_sd = jnp.asarray(np.sqrt(problem.init_second_moment_D), jnp.float32)
    dim = problem.dim

    def init_params(key):
        return {"theta": init_sd * jax.random.normal(key, (dim,), jnp.float32)}

    def exact_loss(params):
        return 0.5 * jnp.sum(h * params["theta"] ** 2)

    def loss_fn(params, batch):
        noise = jnp.mean(batch["z"], axis=0) * sqrt_c
        return exact_loss(params) + jnp.dot(noise, params["theta"])

    def draw_batch(rng: np.random.Generator, batch_size: int) -> dict:
        return {"z": rng.standard_normal((batch_size, dim), dtype=np.float32)}

    def exact_eval(params):
        loss = exact_loss(params)
        return {"metric_sum": loss, "loss_sum": loss, "count": jnp.ones((), jnp.float32)}

    return Task(init_params=init_params, loss_fn=loss_fn, metric="loss",
                draw_batch=draw_batch, exact_eval=exact_eval,
                population={"z": np.zeros((1, dim), np.float32)})

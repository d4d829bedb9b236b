"""Bring your own workload: a `Workload` built from the user's own model, loss, metric and data,
and the loader that finds it from a `--workload` value (docs/own_workload.md).

A user writes a function returning `own_workload(...)` in a file or an installed module, and
passes `--workload path/to/file.py:make_workload` (or `package.module:make_workload`) wherever a
workload name is taken: sweep, throughput, plan, report, validate and the app. The value is
stored in the sweep's config.json, so resuming, reporting and validating find the same workload.

The parts (all pure functions of arrays, so the trainer can jit, vmap and shard them):
- `init_params(key) -> params`: any pytree of float arrays;
- `loss(params, batch) -> (B,)`: per-example training loss (the trainer takes its mean);
- `metric(params, batch) -> (B,)`: per-example value of the evaluation metric, averaged over the
  validation set (for 'error': 1.0 where the prediction is wrong, 0.0 where it is right); by
  default the loss itself (then `metric_name` must be 'loss' or 'cross_entropy');
- `train`, `val`: dicts of arrays sharing their leading (example) axis; or, for unlimited data,
  `draw_batch(rng, B) -> batch` with `rng` a numpy Generator (then `val` is still needed).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import math
import sys
from pathlib import Path
from typing import Callable

import jax.numpy as jnp
import numpy as np

from nqm import validation
from realnets.workloads.catalog import Workload
from realnets.workloads.search_space import TrialSearchSpace
from realnets.workloads.tasks import METRIC_RANGES, Task, check_batch_sizes_fit, check_goal

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam")
DEFAULT_BATCH_SIZES = (16, 32, 64, 128, 256, 512, 1024)


def _rows(name: str, arrays) -> int:
    """The common leading size of a dict of arrays (ValueError naming `name` otherwise)."""
    if not isinstance(arrays, dict) or not arrays:
        raise ValueError(f"{name} must be a non-empty dict of arrays, got {type(arrays).__name__}")
    sizes = {k: np.shape(v)[0] if np.ndim(v) else None for k, v in arrays.items()}
    if None in sizes.values() or len(set(sizes.values())) != 1:
        raise ValueError(f"{name}: every array must share one leading (example) axis, got "
                         f"{sizes}")
    if "mask" in arrays:
        raise ValueError(f"{name}: the key 'mask' is reserved for the trainer's padding")
    n = next(iter(sizes.values()))
    if n < 1:
        raise ValueError(f"{name} must hold at least one example")
    return int(n)


def own_task(init_params: Callable, loss: Callable, metric_name: str,
             train: dict | None, val: dict, metric: Callable | None = None,
             draw_batch: Callable | None = None) -> Task:
    """A trainer `Task` from per-example functions (see the module docstring for the parts)."""
    validation.check_choice("metric_name", metric_name, tuple(METRIC_RANGES))
    if (train is None) == (draw_batch is None):
        raise ValueError("give exactly one of train (arrays) and draw_batch (a batch function)")
    if train is not None:
        _rows("train", train)
        train = {k: np.asarray(v) for k, v in train.items()}
    _rows("val", val)
    val = {k: np.asarray(v) for k, v in val.items()}
    if metric is None:
        if metric_name == "error":
            raise ValueError("metric_name 'error' needs a metric function (1 where wrong, 0 "
                             "where right, per example)")
        metric = loss

    def loss_fn(params, batch):
        return jnp.mean(loss(params, batch))

    def eval_fn(params, batch):
        rows = {k: v for k, v in batch.items() if k != "mask"}
        mask = batch["mask"]
        return {"metric_sum": jnp.sum(metric(params, rows) * mask),
                "loss_sum": jnp.sum(loss(params, rows) * mask), "count": jnp.sum(mask)}

    return Task(init_params=init_params, loss_fn=loss_fn, metric=metric_name, train=train,
                val=val, eval_fn=eval_fn, draw_batch=draw_batch)


def own_workload(name: str, *, init_params: Callable, loss: Callable, train: dict | None = None,
                 val: dict, metric: Callable | None = None, metric_name: str = "error",
                 draw_batch: Callable | None = None, goal: float | None = None,
                 optimizer: str = "momentum", search: TrialSearchSpace | None = None,
                 batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES, max_steps: int = 2000,
                 eval_resolution: float = 0.02, data: str = "", model: str = "") -> Workload:
    """A Workload from the user's parts, checked now (before any training).

    Args:
      name: a short name (used for default directories and titles).
      init_params, loss, metric, train, val, draw_batch: see the module docstring.
      metric_name: 'error' (in [0, 1]), 'cross_entropy' or 'loss' (>= 0); lower is better.
      goal: the metric to reach; None: chosen by the pilot rule (`--goal auto`) unless given.
      optimizer: sgd, momentum, nesterov or adam.
      search: the trials' search space (default: learning rate 1e-3..3, 1 - momentum 1e-2..1).
      batch_sizes, max_steps, eval_resolution: the sweep's defaults (see SweepConfig).
      data, model: descriptions shown by `python -m realnets workloads` and in reports.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    validation.check_choice("optimizer", optimizer, OPTIMIZERS)
    sizes = tuple(validation.check_whole("batch_sizes entry", b, 1) for b in batch_sizes)
    if not sizes:
        raise ValueError("batch_sizes must hold at least one batch size")
    max_steps = validation.check_whole("max_steps", max_steps, 1, 10 ** 9)
    validation.check_in_range("eval_resolution", eval_resolution, 0.0, 1.0)
    task = own_task(init_params, loss, metric_name, train, val, metric, draw_batch)
    if goal is not None:
        goal = check_goal(goal, metric_name)
    check_batch_sizes_fit(task.train_size, sizes)
    return Workload(
        name=name.strip(), data=data or "the user's own data", model=model or "the user's own model",
        metric=metric_name, goal=math.nan if goal is None else goal,
        goal_note="the workload's own goal" if goal is not None
        else "none given: chosen by the pilot rule (--goal auto)",
        optimizer=optimizer, search=search or TrialSearchSpace((1e-3, 3.0), (1e-2, 1.0)),
        batch_sizes=sizes, max_steps=max_steps, eval_resolution=float(eval_resolution),
        build=lambda **_: task)


def classifier_workload(name: str, network, split, **kwargs) -> Workload:
    """`own_workload` for a classifier: `network`, a flax module mapping a batch of
    `split.train_x` rows to (B, classes) logits, on a labelled split
    (`realnets.workloads.datasets.Split`: train_x, train_y, val_x, val_y, integer labels).
    Loss: per-example softmax cross-entropy; metric: 'error', 1.0 where the logits' argmax is
    not the label. `kwargs` go to `own_workload` (optimizer, search, batch_sizes, max_steps,
    goal, and the data and model descriptions)."""
    import optax

    def init_params(key):
        return network.init(key, split.train_x[:1])

    def loss(params, batch):                             # (B,) per-example cross-entropy
        logits = network.apply(params, batch["x"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"])

    def error(params, batch):                            # (B,) 1.0 where wrong
        logits = network.apply(params, batch["x"])
        return (jnp.argmax(logits, axis=-1) != batch["y"]).astype(jnp.float32)

    return own_workload(name, init_params=init_params, loss=loss, metric=error,
                        metric_name="error", train={"x": split.train_x, "y": split.train_y},
                        val={"x": split.val_x, "y": split.val_y}, **kwargs)


def is_spec(value: str) -> bool:
    """True if `value` names an own workload ('file.py:function' or 'module:function')."""
    return isinstance(value, str) and ":" in value


def _import_file(path: Path):
    module_name = f"_batchscope_own_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"workload: cannot import {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module      # dataclasses in the file look their module up here
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=8)
def _load(source: str, cwd: str) -> Workload:
    where, _, function = source.rpartition(":")
    if not where or not function.isidentifier():
        raise ValueError(f"workload must be a name or FILE.py:FUNCTION or MODULE:FUNCTION, got "
                         f"{source!r}")
    path = Path(where) if Path(where).is_absolute() else Path(cwd) / where
    if where.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ValueError(f"workload: file {where} does not exist")
        module = _import_file(path.resolve())
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise ValueError(f"workload: cannot import module {where!r} ({err})") from None
    make = getattr(module, function, None)
    if not callable(make):
        raise ValueError(f"workload: {where} has no function {function!r}")
    workload = make()
    if not isinstance(workload, Workload):
        raise ValueError(f"workload: {source} must return a Workload "
                         f"(realnets.workloads.own.own_workload), got {type(workload).__name__}")
    return workload


def load_own(source: str) -> Workload:
    """The Workload that `source` ('file.py:function' or 'module:function') makes, loaded once
    per process; a relative file is taken from the current directory. Its `source` field holds
    `source`, which sweeps store as their workload."""
    workload = _load(source, str(Path.cwd()))
    return dataclasses.replace(workload, source=source)

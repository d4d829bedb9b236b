"""Runs the trials of one batch size together, until each reaches the goal, diverges or runs
out of budget, and returns one record per trial (the trials.jsonl format of docs/design.md,
'Formats').

The trials share one data order (the run's seed) and one compiled program; each has its own
initialisation (the seed folded with its trial id, so a trial's result does not depend on which
other trials ran beside it) and its own metaparameters.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from nqm import validation
from realnets.training import mesh as meshlib
from realnets.training.step import (Metaparameters, StepConfig, TrainState, compile_steps,
                                     groups_for, init_states)
from realnets.workloads.tasks import Task

STATUSES = ("COMPLETE", "INCOMPLETE", "INFEASIBLE")


@dataclass(frozen=True)
class TrialSpec:
    """One trial's metaparameters (momentum None for plain SGD).

    The learning rate decays linearly from learning_rate to final_lr_fraction times it over
    decay_steps steps (whole, >= 1; None: the run's step budget, max_steps) and stays there.
    """

    trial_id: int
    learning_rate: float
    momentum: float | None = None
    final_lr_fraction: float = 1.0
    decay_steps: int | None = None

    def __post_init__(self):
        validation.check_positive("learning_rate", self.learning_rate)
        if self.momentum is not None:
            validation.check_in_range("momentum", self.momentum, 0.0, 1.0, closed_high=False)
        validation.check_in_range("final_lr_fraction", self.final_lr_fraction, 0.0, 1.0)
        if self.decay_steps is not None:
            object.__setattr__(self, "decay_steps",
                               validation.check_whole("decay_steps", self.decay_steps, 1))


MAX_SEED = 2 ** 63 - 1    # the largest seed jax.random.key accepts


@dataclass(frozen=True)
class RunConfig:
    """How one batch size is trained.

    Attributes:
      batch_size: examples per step (the global batch over all devices).
      max_steps: step budget.
      goal: a trial succeeds at the first evaluation whose metric is <= goal.
      optimizer: sgd, momentum, nesterov or adam.
      seed: data order (shared by the trials) and, folded with the trial id, initialisation;
        0 to MAX_SEED.
      eval_resolution: evaluate after step t when t >= (1 + eval_resolution) * (last evaluated
        step), and at every step while that gap is below one: steps to goal are resolved to
        this fraction. 0 evaluates every step.
      max_rows_per_device: cap on the examples one device processes at once; larger per-device
        shares are accumulated over microbatches (the same step).
      eval_batch_size: validation rows per evaluation chunk.
      noise_decay: decay of the noise-scale moving averages per step (a window of about
        1 / (1 - noise_decay) steps).
      divergence_factor: a training loss above this multiple of the first step's loss (or not
        finite) marks a trial INFEASIBLE.
      stop_at_first_goal: stop every trial at the first evaluation where one reached the goal
        (the others are INCOMPLETE, reason "stopped"): steps to result, the first step at which
        any trial reaches the goal, cannot change after it, and the rest is compute spent on
        trials that no longer matter. False runs every trial to its own end, as Shallue et al.
      stop_after: stop at this step at the latest (a previous group of trials of the same batch
        size already reached the goal here); None for no such limit.
      noise_every: measure the gradient noise scale every this many steps; None (default):
        every step, as docs/design.md, 'Noise scale' has it. Several devices measure it for free
        (the per-device gradients come with the all-reduce); one device splits the batch in two,
        which costs up to ~1.8x a plain step where a step is tiny (an MLP at B = 16 on a CPU),
        ~1.05x at B = 256 and nothing measurable on the CNN (benchmarks/bench_trainer.py).
        A sparser cadence is cheaper but much noisier at small batch sizes, where the |G|^2
        estimate is noise-dominated: benchmarks/noise_cadence.py measures the error. The
        moving averages decay by noise_decay per step whatever the cadence. 0: not measured on
        one device (b_simple None); several devices measure it every step anyway.
    """

    batch_size: int
    max_steps: int
    goal: float
    optimizer: str = "sgd"
    seed: int = 0
    eval_resolution: float = 0.02
    max_rows_per_device: int = 4096
    eval_batch_size: int = 1024
    noise_decay: float = 0.99
    divergence_factor: float = 1e4
    stop_at_first_goal: bool = True
    stop_after: int | None = None
    noise_every: int | None = None

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)   # normalised values on a frozen record
        for name in ("batch_size", "max_steps", "max_rows_per_device", "eval_batch_size"):
            set_(name, validation.check_whole(name, getattr(self, name), 1))
        set_("seed", validation.check_whole("seed", self.seed, 0, MAX_SEED))
        validation.check_finite("goal", self.goal)
        if self.noise_every is not None:
            set_("noise_every", validation.check_whole("noise_every", self.noise_every, 0))
        validation.check_in_range("eval_resolution", self.eval_resolution, 0.0, 1.0)


def eval_steps(max_steps: int, resolution: float) -> list[int]:
    """The steps after which the trainer evaluates: 1, 2, ... then geometric, and max_steps."""
    steps, t = [], 1
    while t < max_steps:
        steps.append(t)
        t = max(t + 1, math.ceil(round(t * (1.0 + resolution), 9)))
    steps.append(max_steps)
    return steps


def microbatches_for(rows_per_group: int, max_rows: int) -> int:
    """Smallest M dividing rows_per_group with rows_per_group / M <= max_rows."""
    for m in range(1, rows_per_group + 1):
        if rows_per_group % m == 0 and rows_per_group // m <= max_rows:
            return m
    return rows_per_group


class BatchStream:
    """Global training batches in a fixed order: epochs of a seeded permutation (the last
    incomplete batch of an epoch is dropped), or fresh draws for tasks with unlimited data."""

    def __init__(self, task: Task, batch_size: int, seed: int):
        self.task, self.batch_size = task, batch_size
        self.rng = np.random.default_rng(seed)
        if task.train is not None and batch_size > task.train_size:
            raise ValueError(f"batch_size {batch_size} exceeds the {task.train_size} training "
                             "examples of this workload")
        self.order, self.pos = np.empty(0, np.int64), 0

    def next(self) -> dict:
        if self.task.train is None:
            return self.task.draw_batch(self.rng, self.batch_size)
        if self.pos + self.batch_size > self.order.size:
            self.order, self.pos = self.rng.permutation(self.task.train_size), 0
        idx = self.order[self.pos:self.pos + self.batch_size]
        self.pos += self.batch_size
        return {k: v[idx] for k, v in self.task.train.items()}


@functools.lru_cache(maxsize=16)
def _init_program(init_params, step_config: StepConfig, mesh):
    return jax.jit(lambda k, h: init_states(init_params, step_config, k, h),
                   out_shardings=meshlib.replicated(mesh))


@functools.lru_cache(maxsize=16)
def _copy_program(mesh):
    return jax.jit(lambda s: jax.tree.map(jnp.copy, s), out_shardings=meshlib.replicated(mesh))


@functools.lru_cache(maxsize=16)
def _exact_eval_program(exact_eval, mesh):
    rep = meshlib.replicated(mesh)
    return jax.jit(jax.vmap(lambda s: exact_eval(s.params)), in_shardings=rep, out_shardings=rep)


def _f32(x) -> float:
    """A float32 result as the shortest decimal that reads back to it (smaller trial files)."""
    return float(f"{float(x):.7g}")


def _val_chunks(val: dict, chunk: int, mesh) -> list[dict]:
    """Validation rows padded with mask 0 to whole chunks of a multiple of the mesh size."""
    n = int(next(iter(val.values())).shape[0])
    shards = mesh.devices.size
    chunk = max(shards, min(chunk, n) // shards * shards)
    total = math.ceil(n / chunk) * chunk
    mask = np.zeros(total, np.float32)
    mask[:n] = 1.0
    padded = {k: np.concatenate([v, np.zeros((total - n,) + v.shape[1:], v.dtype)])
              for k, v in val.items()}
    padded["mask"] = mask
    return [meshlib.place_batch({k: v[i:i + chunk] for k, v in padded.items()}, mesh)
            for i in range(0, total, chunk)]


class _Outcomes:
    """Per-trial evaluation curves and fates while a group of trials trains."""

    KEYS = ("step", "metric", "train_loss", "grad_sq_ema", "trace_cov_ema", "b_simple")

    def __init__(self, n: int, goal: float, divergence_factor: float, noise_measured: bool):
        self.curves = {k: [[] for _ in range(n)] for k in self.KEYS}
        self.reached: list[int | None] = [None] * n
        self.failed: list[str | None] = [None] * n
        self.goal, self.divergence_factor = goal, divergence_factor
        self.noise_measured = noise_measured
        self.first_loss = None

    def settled(self, i: int) -> bool:
        return self.reached[i] is not None or self.failed[i] is not None

    def add(self, step: int, metric_T, loss_T, ema_g_T, ema_t_T) -> None:
        """One evaluation: metric, training loss and noise averages of each trial, (T,)."""
        for i in range(len(self.reached)):
            if self.settled(i):
                continue
            b_simple = (_f32(ema_t_T[i] / ema_g_T[i])
                        if self.noise_measured and min(ema_g_T[i], ema_t_T[i]) > 0 else None)
            for key, value in zip(self.KEYS, (step, _f32(metric_T[i]), _f32(loss_T[i]),
                                              _f32(ema_g_T[i]), _f32(ema_t_T[i]), b_simple)):
                self.curves[key][i].append(value)
            loss = loss_T[i]
            bad_loss = not np.isfinite(loss) or abs(loss) > self.divergence_factor * max(
                abs(self.first_loss[i]), 1e-12)
            if bad_loss or not np.isfinite(metric_T[i]):
                self.failed[i] = f"diverged: training loss {loss:.3g} at step {step}"
            elif metric_T[i] <= self.goal:
                self.reached[i] = step

    def status(self, i: int) -> str:
        return ("INFEASIBLE" if self.failed[i] else "COMPLETE" if self.reached[i] is not None
                else "INCOMPLETE")


def run_trials(task: Task, config: RunConfig, trials: list[TrialSpec], devices=None,
               on_eval: Callable[[int], None] | None = None,
               final_params: list | None = None, start: TrainState | None = None,
               final_states: list | None = None, timing: dict | None = None,
               live_limit: Callable[[], int | None] | None = None) -> list[dict]:
    """Trains `trials` of one batch size together; returns one record per trial.

    Args:
      task: the workload's data and functions.
      config: batch size, budget, goal, optimizer, seed, evaluation cadence.
      trials: metaparameters, one per trial (all vmapped into one program).
      devices: devices to shard over (default: every device JAX sees).
      on_eval: called with the current step after every evaluation (progress bars).
      final_params: if a list, each trial's parameters when the run ended (host numpy pytrees,
        in the order of `trials`) are appended to it (checkpoints for calibration).
      start: states to continue from instead of fresh initialisations (a TrainState with a
        leading trial axis of len(trials), as `final_states` gives it): parameters, optimizer
        state (its step count too, so a decaying schedule carries on) and noise averages. It is
        copied, so the caller's arrays stay valid (the train step donates its state).
      final_states: if a list, the TrainState when the run ended (device arrays, leading trial
        axis) is appended to it (branch points: `realnets.sweeps.branching`).
      live_limit: called after every evaluation; when it returns a step at or before the current
        one, the run stops there as it would with that `stop_after` (an earlier group of trials
        of the batch size, finished meanwhile elsewhere, reached the goal there:
        `realnets.cluster`). None: no such limit.
      timing: if a dict, filled with wall seconds (`realnets.planning.throughput`):
        first_step_seconds (the first step, compilation included), train_seconds and
        train_steps (every later step, data placement included, evaluations excluded),
        eval_seconds and evals. Each timed stretch ends by waiting for the last step.

    Returns:
      Records with batch_size, trial_id, status, metaparameters, steps_to_goal (None unless
      COMPLETE), steps_run, the eval curve and the noise-scale averages at each evaluation.
    """
    if not trials:
        return []
    mesh = meshlib.data_mesh(config.batch_size, devices)
    n_dev = mesh.devices.size
    noise_every = 1 if config.noise_every is None else config.noise_every
    groups = groups_for(n_dev, config.batch_size) if noise_every else n_dev
    # a device takes the gradients of its groups_per_device groups one after the other
    groups_per_device = max(1, groups // n_dev)
    micro = microbatches_for(config.batch_size // groups,
                             max(1, config.max_rows_per_device // groups_per_device))
    # the moving averages decay by noise_decay per *step*, whatever the measuring cadence
    step_config = StepConfig(optimizer=config.optimizer, groups=groups, microbatches=micro,
                             noise_decay=config.noise_decay ** max(noise_every, 1),
                             population=task.train_size or 0)
    if task.exact_eval is not None:
        eval_fn = None
    else:
        eval_fn = task.eval_fn
    train, evaluate = compile_steps(task.loss_fn, eval_fn, step_config, mesh)
    # several devices measure every step (free); one device every noise_every-th (0: never)
    measure_every = noise_every if n_dev == 1 else 1
    train_plain = train
    if n_dev == 1 and groups > 1 and noise_every > 1:
        plain_config = dataclasses.replace(step_config, groups=1, microbatches=microbatches_for(
            config.batch_size, config.max_rows_per_device))
        train_plain, _ = compile_steps(task.loss_fn, None, plain_config, mesh)
    if task.exact_eval is not None:
        exact = _exact_eval_program(task.exact_eval, mesh)
        val_chunks = []
    else:
        val_chunks = _val_chunks(task.val, config.eval_batch_size, mesh)

    hps = Metaparameters(
        learning_rate=jnp.asarray([t.learning_rate for t in trials], jnp.float32),
        one_minus_momentum=jnp.asarray([1.0 - (t.momentum or 0.0) for t in trials], jnp.float32),
        final_lr_fraction=jnp.asarray([t.final_lr_fraction for t in trials], jnp.float32),
        # the decay's length: the trial's own, else the budget (not stop_after: a run cut short
        # keeps the schedule of the full run)
        decay_steps=jnp.asarray([config.max_steps if t.decay_steps is None else t.decay_steps
                                 for t in trials], jnp.float32))
    keys = jnp.stack([jax.random.fold_in(jax.random.key(config.seed), t.trial_id) for t in trials])
    rep = meshlib.replicated(mesh)
    if start is None:
        states = _init_program(task.init_params, step_config, mesh)(keys, hps)
    else:
        states = _copy_program(mesh)(start)
    hps = jax.device_put(hps, rep)

    n = len(trials)
    out = _Outcomes(n, config.goal, config.divergence_factor, noise_measured=groups > 1)
    stream = BatchStream(task, config.batch_size, config.seed)
    lockstep = meshlib.needs_lockstep(mesh)
    last_step = 0
    stopped = None
    budget = config.max_steps if config.stop_after is None else min(config.max_steps,
                                                                   config.stop_after)
    clock = {"first_step_seconds": 0.0, "train_seconds": 0.0, "train_steps": 0,
             "eval_seconds": 0.0, "evals": 0}
    for target_step in eval_steps(budget, config.eval_resolution):
        began, steps_before = time.perf_counter(), last_step
        while last_step < target_step:
            batch = meshlib.place_batch(stream.next(), mesh)
            if groups > 1 and last_step % measure_every == 0:
                states, stats = train(states, hps, batch)
            else:
                # a step that measures nothing leaves the noise averages out: fewer buffers to
                # dispatch (~2% of an MLP step at B = 16)
                core, stats = train_plain(states._replace(noise=None), hps, batch)
                states = core._replace(noise=states.noise)
            last_step += 1
            if lockstep:
                stats["loss"].block_until_ready()
            if out.first_loss is None:
                out.first_loss = np.asarray(stats["loss"], np.float64)
                now = time.perf_counter()
                clock["first_step_seconds"] = now - began
                began, steps_before = now, last_step
        if timing is not None:
            stats["loss"].block_until_ready()
            now = time.perf_counter()
            clock["train_seconds"] += now - began
            clock["train_steps"] += last_step - steps_before
            began = now
        if task.exact_eval is not None:
            sums = exact(states)
        else:
            parts = [evaluate(states, chunk) for chunk in val_chunks]
            sums = {k: sum(p[k] for p in parts) for k in parts[0]}
        metric = np.asarray(sums["metric_sum"], np.float64) / np.asarray(sums["count"], np.float64)
        if timing is not None:
            clock["eval_seconds"] += time.perf_counter() - began
            clock["evals"] += 1
        loss = np.asarray(stats["loss"], np.float64)
        ema_g, ema_t = (np.asarray(x, np.float64) for x in (states.noise.grad_sq,
                                                            states.noise.trace_cov))
        out.add(last_step, metric, loss, ema_g, ema_t)
        if on_eval is not None:
            on_eval(last_step)
        if all(out.settled(i) for i in range(n)):
            break
        if config.stop_at_first_goal and any(r is not None for r in out.reached):
            stopped = f"stopped at step {last_step}: another trial reached the goal first"
            break
        if last_step == budget and budget < config.max_steps:
            stopped = f"stopped at step {last_step}: an earlier trial reached the goal there"
        elif live_limit is not None and last_step < budget:
            limit = live_limit()
            if limit is not None and last_step >= limit:
                stopped = f"stopped at step {last_step}: an earlier trial reached the goal there"
                break

    if timing is not None:
        timing.update(clock)
    if final_states is not None:
        final_states.append(states)
    if final_params is not None:
        host = jax.tree.map(np.asarray, states.params)
        final_params.extend(jax.tree.map(lambda x, i=i: x[i], host) for i in range(n))
    curves = out.curves
    records = []
    for i, spec in enumerate(trials):
        status = out.status(i)
        records.append({
            "batch_size": config.batch_size, "trial_id": spec.trial_id, "status": status,
            "learning_rate": spec.learning_rate, "momentum": spec.momentum,
            "final_lr_fraction": spec.final_lr_fraction,
            **({} if spec.decay_steps is None else {"decay_steps": spec.decay_steps}),
            "optimizer": config.optimizer,
            "steps_to_goal": out.reached[i],
            "steps_run": curves["step"][i][-1] if curves["step"][i] else 0,
            "goal": config.goal, "metric": task.metric,
            "reason": out.failed[i] or (stopped if status == "INCOMPLETE" else None),
            "eval": {"step": curves["step"][i], "metric": curves["metric"][i],
                     "train_loss": curves["train_loss"][i]},
            "noise_scale": {"step": curves["step"][i], "grad_sq_ema": curves["grad_sq_ema"][i],
                            "trace_cov_ema": curves["trace_cov_ema"][i],
                            "b_simple": curves["b_simple"][i],
                            "b_small": config.batch_size // groups if groups > 1 else None,
                            "b_big": config.batch_size},
            "seed": config.seed, "devices": n_dev, "processes": jax.process_count(),
            "microbatches": micro, "noise_every": measure_every if groups > 1 else 0})
    return records

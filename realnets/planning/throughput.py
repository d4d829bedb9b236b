"""Measures seconds per training step on the devices present (docs/plan.md, 'Step time').

Each (batch size, device count) runs one trial through the sweep's own trainer
(`realnets.training.trainer.run_trials`) for a few short repeats: the first step of the first
repeat holds the compilation and is reported apart; every later step is timed with evaluations
left out. The step count is chosen so that a repeat lasts about `seconds_per_repeat`. The
repeats are interleaved over the (batch size, devices) pairs and each pair's median is kept.
"""

from __future__ import annotations

import math
from importlib.metadata import version
from typing import Callable

import jax
import numpy as np

from nqm import validation
from realnets.planning.step_time import StepTimePoint, ThroughputRecord, fit_step_time
from realnets.training.trainer import RunConfig, TrialSpec, run_trials
from realnets.workloads.tasks import Task, check_batch_sizes_fit

_NEVER = -1e30        # a goal no trial reaches: every repeat runs its steps
_PROBE_STEPS = 4


def _timed(task: Task, optimizer: str, batch_size: int, devices: list, steps: int,
           max_rows_per_device: int, max_steps: int) -> dict:
    # a small learning rate keeps the trial finite; the rate does not change a step's cost.
    # One budget for every run of a pair, cut at `steps` by stop_after: the budget is part of the
    # compiled step (its schedule's length), so the probe and the repeats share one compilation
    trial = TrialSpec(0, learning_rate=1e-4,
                      momentum=None if optimizer == "sgd" else 0.9)
    run = RunConfig(batch_size=batch_size, max_steps=max_steps + 1, stop_after=steps,
                    goal=_NEVER, optimizer=optimizer, eval_resolution=1.0,
                    max_rows_per_device=max_rows_per_device, stop_at_first_goal=False,
                    noise_every=0)
    timing: dict = {}
    run_trials(task, run, [trial], devices=devices, timing=timing)
    return timing


def _probe(task: Task, optimizer: str, batch_size: int, devices: list, seconds_per_repeat: float,
           max_rows_per_device: int, max_steps: int) -> tuple[float, int]:
    """(compile seconds, steps per repeat) from a short first run."""
    probe = _timed(task, optimizer, batch_size, devices, _PROBE_STEPS + 1, max_rows_per_device,
                   max_steps)
    guess = probe["train_seconds"] / max(probe["train_steps"], 1)
    steps = int(min(max_steps, max(8, math.ceil(seconds_per_repeat / max(guess, 1e-6)))))
    return probe["first_step_seconds"], steps


def _measure(task: Task, optimizer: str, pairs: list[tuple[int, int]], repeats: int,
             seconds_per_repeat: float, max_rows_per_device: int, max_steps: int,
             log: Callable[[str], None] | None) -> list[StepTimePoint]:
    """Every pair probed, then `repeats` rounds that time each pair once, in turn: a machine
    whose speed drifts (other jobs, a shared host) slows every pair alike, not one alone."""
    plan = {}
    for b, n in pairs:
        plan[b, n] = _probe(task, optimizer, b, jax.devices()[:n], seconds_per_repeat,
                            max_rows_per_device, max_steps)
    per_step: dict = {pair: [] for pair in pairs}
    for _ in range(repeats):
        for b, n in pairs:
            t = _timed(task, optimizer, b, jax.devices()[:n], plan[b, n][1] + 1,
                       max_rows_per_device, max_steps)
            per_step[b, n].append(t["train_seconds"] / max(t["train_steps"], 1))
    points = []
    for b, n in pairs:
        times = per_step[b, n]
        p = StepTimePoint(batch_size=b, devices=n, seconds_per_step=float(np.median(times)),
                          spread=(float(min(times)), float(max(times))), steps=plan[b, n][1],
                          repeats=repeats, compile_seconds=float(plan[b, n][0]))
        if log:
            log(f"B = {b:>6} on {n} device(s): {p.seconds_per_step * 1e3:.3f} ms/step "
                f"({p.spread[0] * 1e3:.3f}..{p.spread[1] * 1e3:.3f}, {p.repeats} x {p.steps} steps)")
        points.append(p)
    return points


def measure_point(task: Task, optimizer: str, batch_size: int, devices: int, repeats: int = 3,
                  seconds_per_repeat: float = 1.0, max_rows_per_device: int = 4096,
                  max_steps: int = 2000) -> StepTimePoint:
    """Seconds per step of one trial at `batch_size` over the first `devices` devices."""
    [point] = _measure(task, optimizer, [(batch_size, devices)], repeats, seconds_per_repeat,
                       max_rows_per_device, max_steps, None)
    return point


def parse_device_counts(text: str) -> tuple[int, ...]:
    """'1' or '1,2,4' as device counts (distinct, sorted); ValueError naming 'devices'."""
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    if not parts:
        raise ValueError("devices must list at least one device count, e.g. 1 or 1,2,4")
    try:
        counts = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"devices must be whole numbers >= 1 separated by commas, got "
                         f"{text.strip()!r}") from None
    if min(counts) < 1:
        raise ValueError(f"devices must be whole numbers >= 1, got {min(counts)}")
    return tuple(sorted(set(counts)))


def fitting_batch_sizes(batch_sizes, train_size: int | None) -> tuple[int, ...]:
    """The batch sizes (sorted) that fit the training set (an epoch holds at least one batch):
    what `plan` and the app measure for a sweep; ValueError if none does."""
    sizes = sorted(int(b) for b in batch_sizes)
    fit = tuple(b for b in sizes if train_size is None or b <= train_size)
    if not fit:
        raise ValueError(f"none of the sweep's batch sizes {sizes} fits the {train_size} training "
                         "examples of its workload")
    return fit


def check_request(batch_sizes, device_counts, train_size: int | None) -> list[tuple[int, int]]:
    """The (batch size, devices) pairs to measure: every pair whose batch splits evenly over the
    devices. ValueError (naming the flag) for more devices than JAX sees, a batch larger than
    the training set, or no pair left."""
    batch_sizes = [validation.check_whole("batch-sizes entry", b, 1) for b in batch_sizes]
    device_counts = [validation.check_whole("devices entry", n, 1) for n in device_counts]
    present = jax.device_count()
    if jax.process_count() > 1:
        raise ValueError("throughput measures one process's devices; run it without "
                         "--coordinator (once per kind of host)")
    too_many = [n for n in device_counts if n > present]
    if too_many:
        raise ValueError(f"devices must be at most the {present} device(s) JAX sees here, got "
                         f"{too_many[0]} (simulate CPU devices with "
                         f"XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    check_batch_sizes_fit(train_size, batch_sizes)
    pairs = [(b, n) for n in device_counts for b in batch_sizes if b % n == 0]
    if not pairs:
        raise ValueError("batch-sizes: no batch size splits evenly over any of the device counts")
    return pairs


def measure_throughput(task: Task, workload: str, optimizer: str, batch_sizes, device_counts,
                       repeats: int = 3, seconds_per_repeat: float = 1.0,
                       max_rows_per_device: int = 4096,
                       log: Callable[[str], None] | None = None) -> ThroughputRecord:
    """Measures every valid (batch size, devices) pair and fits the step-time model."""
    pairs = check_request(batch_sizes, device_counts, task.train_size)
    validation.check_whole("repeats", repeats, 1, 100)
    validation.check_in_range("seconds-per-repeat", seconds_per_repeat, 0.01, 600.0)
    points = _measure(task, optimizer, pairs, repeats, seconds_per_repeat, max_rows_per_device,
                      2000, log)
    device = jax.devices()[0]
    return ThroughputRecord(
        workload=workload, optimizer=optimizer, platform=device.platform,
        device_kind=str(getattr(device, "device_kind", "")), process_count=jax.process_count(),
        points=tuple(points), model=fit_step_time(points), max_rows_per_device=max_rows_per_device,
        versions={"jax": jax.__version__, "jaxlib": version("jaxlib")})

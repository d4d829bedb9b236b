"""The goal rule (docs/prediction_rule.md, 'The goal rule'): a goal fixed by a short pilot before
a sweep, and the range a goal may take on each metric.

Pilot: the first `PILOT_TRIALS` trials of the sweep's own quasi-random sequence, at the sweep's
smallest and largest batch size, each for the full budget. `m_best` is the best validation metric
reached at each end; the worse (larger) of the two is kept so that both ends can reach the goal.
`m_start` is the metric at the trainer's first evaluation (after step 1), the median over the
pilot's trials at the smallest batch size. Goal: `m_best + GOAL_FRACTION (m_start - m_best)`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from realnets.sweeps.records import SweepConfig, TrialRecord, read_config
from realnets.training.search import trial_specs
from realnets.training.trainer import RunConfig, run_trials
from realnets.workloads.tasks import check_batch_sizes_fit

PILOT_TRIALS = 8
GOAL_FRACTION = 0.1
_NEVER = -1e30   # the pilot's own goal: no trial stops early


@dataclass(frozen=True)
class GoalChoice:
    """How a goal was chosen by the pilot (recorded in config.json as `goal_choice`)."""

    goal: float
    metric_start: float
    best_small: float
    best_large: float
    batch_sizes: tuple[int, int]
    trials: int
    fraction: float = GOAL_FRACTION

    def to_dict(self) -> dict:
        return {"rule": "pilot (docs/prediction_rule.md, 'The goal rule')", "goal": self.goal,
                "metric_start": self.metric_start, "best_small": self.best_small,
                "best_large": self.best_large, "batch_sizes": list(self.batch_sizes),
                "trials": self.trials, "fraction": self.fraction}


def _best(records: list[dict]) -> float:
    values = [m for r in records for m in r["eval"]["metric"] if m is not None]
    return float(min(values)) if values else math.nan


def goal_from_pilot(small: list[dict], large: list[dict], batch_sizes: tuple[int, int],
                    trials: int) -> GoalChoice:
    """The rule applied to the pilot's trial records (trainer records at the two batch sizes)."""
    start = [r["eval"]["metric"][0] for r in small if r["eval"]["metric"]
             and r["eval"]["metric"][0] is not None]
    best_small, best_large = _best(small), _best(large)
    if not start or math.isnan(best_small) or math.isnan(best_large):
        raise ValueError("the pilot produced no finite metric at one of the batch sizes "
                         f"{batch_sizes}: every pilot trial diverged; narrow --lr-range")
    m_start = float(np.median(start))
    m_best = max(best_small, best_large)
    if not m_best < m_start:
        raise ValueError(f"the pilot did not improve on the starting metric {m_start:.4g} at "
                         f"B = {batch_sizes[1] if best_large >= best_small else batch_sizes[0]} "
                         "within the budget: raise --max-steps or change --lr-range")
    goal = m_best + GOAL_FRACTION * (m_start - m_best)
    return GoalChoice(goal=float(goal), metric_start=m_start, best_small=best_small,
                      best_large=best_large, batch_sizes=batch_sizes, trials=trials)


def run_pilot(task, config: SweepConfig, trials: int = PILOT_TRIALS) -> GoalChoice:
    """Trains the pilot for `config` (its goal is ignored) and applies the goal rule.

    The trials run `config.vmap_trials` to a compiled program, as the sweep's blocks do (all
    together when 0): a workload that is slower vmapped (a CNN on XLA:CPU) is piloted the way it
    is swept. Each trial's record does not depend on the grouping (the trainer's own tests).
    """
    sizes = (min(config.batch_sizes), max(config.batch_sizes))
    specs = trial_specs(config.search, config.optimizer, trials, config.seed)
    chunk = config.vmap_trials or trials
    out = []
    for batch_size in sizes:
        run = RunConfig(batch_size=batch_size, max_steps=config.max_steps, goal=_NEVER,
                        optimizer=config.optimizer, seed=config.seed,
                        eval_resolution=config.eval_resolution,
                        max_rows_per_device=config.max_rows_per_device,
                        stop_at_first_goal=False, noise_every=0)
        out.append([TrialRecord.from_dict(r).to_dict()
                    for start in range(0, len(specs), chunk)
                    for r in run_trials(task, run, specs[start:start + chunk])])
    return goal_from_pilot(out[0], out[1], sizes, trials)


def with_pilot_goal(config: SweepConfig, out: Path, task_for: Callable[[], object],
                    log: Callable[[str], None] | None = None) -> SweepConfig:
    """`config` with its PILOT_GOAL (NaN: `--goal auto`, or an own workload without a goal)
    replaced: by the goal recorded in `out` when that sweep is being resumed (the rest of the
    study must match), else by a new pilot's (`task_for()` builds the task only then)."""
    if not math.isnan(config.goal):
        return config
    out = Path(out)
    if (out / "config.json").exists():
        old = read_config(out / "config.json")
        if old.goal_choice is None:
            raise ValueError(f"--goal auto: {out} holds a sweep whose goal {old.goal:g} was given, "
                             f"not chosen by a pilot; pass --goal {old.goal:g} to resume it")
        return dataclasses.replace(config, goal=old.goal, goal_choice=old.goal_choice)
    if log:
        log(f"--goal auto: pilot of {PILOT_TRIALS} trials at B = {min(config.batch_sizes)} and "
            f"{max(config.batch_sizes)} for {config.max_steps} steps")
    task = task_for()
    check_batch_sizes_fit(task.train_size, config.batch_sizes)
    choice = run_pilot(task, config)
    if log:
        log(f"--goal auto: goal {choice.goal:.4g} (start {choice.metric_start:.4g}, best "
            f"{choice.best_small:.4g} at the smallest and {choice.best_large:.4g} at the largest "
            "batch size)")
    return dataclasses.replace(config, goal=choice.goal, goal_choice=choice.to_dict())

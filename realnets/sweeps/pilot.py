"""The goal rule (docs/prediction_rule.md, 'The goal rule'): a goal fixed by a short pilot before
a sweep, and the range a goal may take on each metric.

Pilot: the first `PILOT_TRIALS` trials of the sweep's own quasi-random sequence, at the sweep's
smallest and largest batch size, each for the full budget. `m_best` is the best validation metric
reached at each end; the worse (larger) of the two is kept so that both ends can reach the goal.
`m_start` is the metric at the trainer's first evaluation (after step 1), the median over the
pilot's trials at the smallest batch size. Goal: `m_best + GOAL_FRACTION (m_start - m_best)`.
The evaluation at which a trial diverged is not counted in any of these (`evaluations`): a sweep's
trial that diverges there has not reached the goal either.

With a floor (`--goal-min-steps N`, off by default: the rule fixed in docs/prediction_rule.md
has none), the fraction is halved, up to FLOOR_HALVINGS times, until the fewest steps any pilot
trial at the smallest batch size takes to the goal is at least N; if none of those goals takes N
steps, the pilot refuses (give --goal). Every such goal stays above `m_best`, so both ends'
pilots reach it.

The pilot's trial records go to `pilot.jsonl` in the sweep directory as each group finishes (its
first line names the study the pilot belongs to), so a pilot killed part-way resumes where it
stopped and the finished pilot stays on record beside `config.json`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jax
import numpy as np

from nqm.curve import to_json
from realnets import store
from realnets.sweeps.records import SweepConfig, TrialRecord, read_config
from realnets.sweeps.robustness import FEW_STEPS
from realnets.training.search import trial_specs
from realnets.sweeps.runner import trial_groups
from realnets.training.trainer import RunConfig, run_trials
from realnets.workloads.tasks import check_batch_sizes_fit

PILOT_TRIALS = 8
GOAL_FRACTION = 0.1
FLOOR_HALVINGS = 4          # with a floor, the fraction goes down to GOAL_FRACTION / 2^4
PILOT_LOG = "pilot.jsonl"
_NEVER = -1e30   # the pilot's own goal: no trial stops early
# What decides a pilot's records (the goal, trial count and vmap grouping of the sweep do not)
_PILOT_KEYS = ("workload", "max_steps", "optimizer", "search", "seed", "eval_resolution",
               "max_rows_per_device", "text_file")


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
    steps_small: int | None = None     # the fewest steps a pilot trial at the smallest batch
                                       # size took to the goal (None: none reached it)
    min_steps: int | None = None       # the floor on steps_small asked for (None: no floor)

    def to_dict(self) -> dict:
        return {"rule": "pilot (docs/prediction_rule.md, 'The goal rule')", "goal": self.goal,
                "metric_start": self.metric_start, "best_small": self.best_small,
                "best_large": self.best_large, "batch_sizes": list(self.batch_sizes),
                "trials": self.trials, "fraction": self.fraction,
                "steps_small": self.steps_small, "min_steps": self.min_steps}


def evaluations(record: dict) -> list[tuple[int, float]]:
    """A pilot trial's (step, metric) evaluations that count: those with a metric, without the
    one at which the trial diverged (the trainer records it, but a sweep's trial that diverges
    there has not reached the goal: `realnets.training.trainer`)."""
    pairs = list(zip(record["eval"]["step"], record["eval"]["metric"]))
    if record.get("status") == "INFEASIBLE" and pairs:
        pairs = pairs[:-1]
    return [(int(s), float(m)) for s, m in pairs if m is not None]


def _best(records: list[dict]) -> float:
    values = [m for r in records for _, m in evaluations(r)]
    return float(min(values)) if values else math.nan


def goal_from_pilot(small: list[dict], large: list[dict], batch_sizes: tuple[int, int],
                    trials: int, min_steps: int | None = None) -> GoalChoice:
    """The rule applied to the pilot's trial records (trainer records at the two batch sizes);
    with `min_steps`, the floor of the module docstring (ValueError when no goal meets it)."""
    # a trial's first evaluation (after step 1), unless it diverged there: the trainer stops
    # recording a trial at its first non-finite metric, so a kept evaluation is never a later one
    start = [pairs[0][1] for pairs in map(evaluations, small) if pairs]
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
    fractions = [GOAL_FRACTION / 2 ** k for k in range(FLOOR_HALVINGS + 1 if min_steps else 1)]
    for fraction in fractions:
        goal = m_best + fraction * (m_start - m_best)
        steps = pilot_steps_to_goal(small, goal)
        if not min_steps or (steps is not None and steps >= min_steps):
            return GoalChoice(goal=float(goal), metric_start=m_start, best_small=best_small,
                              best_large=best_large, batch_sizes=batch_sizes, trials=trials,
                              fraction=fraction, steps_small=steps, min_steps=min_steps)
    raise ValueError(f"goal-min-steps: no goal down to {fractions[-1]:g} of the way from the "
                     f"pilot's best {m_best:.4g} takes {min_steps} steps at B = {batch_sizes[0]} "
                     f"(the fastest pilot trial there took {steps}); give --goal")


def pilot_steps_to_goal(records: list[dict], goal: float) -> int | None:
    """The fewest steps at which any of the pilot's trials (trainer records) first evaluated at
    or below `goal`, the evaluation at which a trial diverged not counted (None: none did)."""
    steps = [next((s for s, m in evaluations(r) if m <= goal), None) for r in records]
    steps = [s for s in steps if s is not None]
    return int(min(steps)) if steps else None


def _pilot_header(config: SweepConfig, sizes: tuple[int, int], trials: int) -> dict:
    study = {k: v for k, v in config.to_dict().items() if k in _PILOT_KEYS}
    return _json_normal({"pilot": {**study, "batch_sizes": list(sizes), "trials": trials}})


def _json_normal(obj):
    """`obj` as it reads back from a JSON file (tuples as lists, ...), for comparisons."""
    return json.loads(to_json(obj))


def _finished_pilot_trials(log: Path, header: dict) -> dict[tuple[int, int], dict]:
    """The records `log` already holds, by (batch size, trial id); starts the log if it has
    none. ValueError if it holds the pilot of another study."""
    store.repair_jsonl(log)
    lines = store.read_jsonl(log)
    if not lines:
        log.parent.mkdir(parents=True, exist_ok=True)
        store.write_json_atomic(log, header, indent=None)
        return {}
    if lines[0] != header:
        raise ValueError(f"--goal auto: {log} holds the pilot of another study "
                         f"({lines[0].get('pilot')}): use a new --out")
    return {(int(r["batch_size"]), int(r["trial_id"])): r for r in lines[1:]}


def run_pilot(task, config: SweepConfig, trials: int = PILOT_TRIALS,
              log: Path | None = None, min_steps: int | None = None) -> GoalChoice:
    """Trains the pilot for `config` (its goal is ignored) and applies the goal rule (with the
    floor `min_steps` when given).

    The trials run `config.vmap_trials` to a compiled program, as the sweep's blocks do (all
    together when 0): a workload that is slower vmapped (a CNN on XLA:CPU) is piloted the way it
    is swept. Each trial's record does not depend on the grouping (the trainer's own tests).
    With `log` (a JSON-lines file; one process only, since every process must run the same
    trials), each group's records are appended as it finishes and those already there are not
    run again.
    """
    sizes = (min(config.batch_sizes), max(config.batch_sizes))
    done = {} if log is None else _finished_pilot_trials(
        Path(log), _pilot_header(config, sizes, trials))
    # grouped as the sweep's blocks at the two ends, its first `trials` trials, skipping those done
    # (a sweep of one batch size pilots it once: both ends are that batch size)
    pilot = dataclasses.replace(config, batch_sizes=tuple(sorted(set(sizes))), trials=trials)
    for batch_size, group in trial_groups(pilot, [TrialRecord.from_dict(r)
                                                  for r in done.values()]):
        run = RunConfig(batch_size=batch_size, max_steps=config.max_steps, goal=_NEVER,
                        optimizer=config.optimizer, seed=config.seed,
                        eval_resolution=config.eval_resolution,
                        max_rows_per_device=config.max_rows_per_device,
                        stop_at_first_goal=False, noise_every=0)
        records = [TrialRecord.from_dict(r).to_dict()
                   for r in run_trials(task, run, list(group))]
        if log is not None:
            store.append_jsonl(Path(log), records)
        done.update({(batch_size, int(r["trial_id"])): r for r in records})
    specs = trial_specs(config.search, config.optimizer, trials, config.seed)
    small, large = ([done[b, s.trial_id] for s in specs] for b in sizes)
    return goal_from_pilot(small, large, sizes, trials, min_steps)


def with_pilot_goal(config: SweepConfig, out: Path, task_for: Callable[[], object],
                    log: Callable[[str], None] | None = None,
                    min_steps: int | None = None) -> SweepConfig:
    """`config` with its PILOT_GOAL (NaN: `--goal auto`, or an own workload without a goal)
    replaced: by the goal recorded in `out` when that sweep is being resumed (the rest of the
    study, and the floor `min_steps`, must match), else by a new pilot's (`task_for()` builds the
    task only then)."""
    if not math.isnan(config.goal):
        if min_steps:
            raise ValueError("goal-min-steps applies only to --goal auto")
        return config
    out = Path(out)
    if (out / "config.json").exists():
        old = read_config(out / "config.json")
        if old.goal_choice is None:
            raise ValueError(f"--goal auto: {out} holds a sweep whose goal {old.goal:g} was given, "
                             f"not chosen by a pilot; pass --goal {old.goal:g} to resume it")
        # a resume without the flag (the app, validate) keeps the recorded goal, floored or not
        if min_steps is not None and old.goal_choice.get("min_steps") != min_steps:
            raise ValueError(f"goal-min-steps: {out} holds a sweep whose pilot had "
                             f"{old.goal_choice.get('min_steps') or 'no'} floor, got "
                             f"{min_steps or 'none'}; resume it with the same flags")
        return dataclasses.replace(config, goal=old.goal, goal_choice=old.goal_choice)
    if log:
        ends = sorted({min(config.batch_sizes), max(config.batch_sizes)})
        log(f"--goal auto: pilot of {PILOT_TRIALS} trials at B = "
            f"{' and '.join(map(str, ends))} for {config.max_steps} steps")
    task = task_for()
    check_batch_sizes_fit(task.train_size, config.batch_sizes)
    # the pilot's log makes it resumable; several processes (one trial's batch over hosts) must
    # run the same trials in step, so they pilot without one
    choice = run_pilot(task, config, log=out / PILOT_LOG if jax.process_count() == 1 else None,
                       min_steps=min_steps)
    if log:
        log(f"--goal auto: goal {choice.goal:.4g} (start {choice.metric_start:.4g}, best "
            f"{choice.best_small:.4g} at the smallest and {choice.best_large:.4g} at the largest "
            "batch size)")
        if choice.steps_small is not None and choice.steps_small < FEW_STEPS:
            log(f"--goal auto: warning: a pilot trial at the smallest batch size reached this goal "
                f"in {choice.steps_small} steps (under {FEW_STEPS}): the curve will have little "
                "resolution; a lower --goal gives one to fit")
    return dataclasses.replace(config, goal=choice.goal, goal_choice=choice.to_dict())

"""The measured side of a validation: the sweep to validate (run first when missing), its calibration
batch size and best trial, that trial rerun alone to its goal, and the calibration sample."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np

from nqm.curve import ScalingCurve
from realnets.calibration import sharded_sample
from realnets.sweeps.curve import best_trial as sweep_best_trial
from realnets.sweeps.pilot import with_pilot_goal
from realnets.sweeps.records import SweepConfig, TrialRecord, load_sweep
from realnets.sweeps.runner import run_sweep
from realnets.training.trainer import RunConfig, TrialSpec, run_trials
from realnets.workloads.tasks import Task


def ensure_sweep(workload, sweep_dir: Path, trials: int, progress: bool = True,
                 log=None) -> tuple[SweepConfig, list[TrialRecord]]:
    """(config, records) of the sweep in `sweep_dir`; when there is none, runs one first with the
    workload's defaults (batch sizes, budget, goal, optimizer, search) and `trials` trials per
    batch size. ValueError when the directory holds another workload or no finished trial."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / "config.json").exists():
        if log:
            log(f"no sweep in {sweep_dir}: running one ({trials} trials per batch size)")
        config = SweepConfig(workload=workload.key, metric=workload.recorded_metric,
                             batch_sizes=workload.batch_sizes,
                             trials=trials, max_steps=workload.max_steps, goal=workload.goal,
                             optimizer=workload.optimizer, search=workload.search,
                             eval_resolution=workload.eval_resolution)
        config = with_pilot_goal(config, sweep_dir, workload.build, log=log)
        run_sweep(config, sweep_dir, progress=progress)
    config, records = load_sweep(sweep_dir)
    if config.workload != workload.key:
        raise ValueError(f"sweep {sweep_dir} is of workload {config.workload!r}, not "
                         f"{workload.name!r}")
    if not records:
        raise ValueError(f"sweep directory {sweep_dir} has no finished trials")
    return config, records


def calibration_batch_size(curve: ScalingCurve, requested: int | None) -> int:
    """`requested` if the sweep reached the goal there, else ValueError; default: the smallest
    batch size that reached it."""
    reached = [p.batch_size for p in curve.points if p.reached]
    if not reached:
        raise ValueError("the sweep reached its goal at no batch size: nothing to calibrate on")
    if requested is None:
        return int(reached[0])
    if int(requested) not in reached:
        raise ValueError(f"batch-size must be one the sweep reached its goal at "
                         f"({', '.join(map(str, reached))}), got {requested}")
    return int(requested)


def best_trial(records: list[TrialRecord], batch_size: int) -> TrialRecord:
    """The trial that set the point at `batch_size` (`realnets.sweeps.curve.best_trial`'s rule)."""
    best = sweep_best_trial([r for r in records if r.batch_size == batch_size])
    if best is None:
        raise ValueError(f"no trial reached the goal at batch size {batch_size}")
    return best


def init_params_of(task: Task, seed: int, trial_id: int):
    """Step-0 parameters of a trial, by the trainer's rule fold_in(key(seed), trial_id)."""
    key = jax.random.fold_in(jax.random.key(seed), trial_id)
    return jax.tree.map(np.asarray, jax.jit(task.init_params)(key))


def retrain(task: Task, sweep_config: SweepConfig, trial: TrialRecord,
            devices=None) -> tuple[TrialRecord, object]:
    """Reruns one sweep trial alone, stopped at its steps to goal; returns (its record, its
    parameters there: a host numpy pytree).

    Same seed (data order), trial id (initialisation), budget (`max_steps`: a linear-decay
    schedule over the budget depends on it), decay length (the trial's `decay_steps`, when the
    sweep searched it), optimizer and evaluation cadence as the sweep. The rerun is one
    trial where the sweep vmapped several, so float rounding can move its goal step a little:
    the record says where it got (its `steps_to_goal`, or INCOMPLETE at the sweep's step).
    """
    run = RunConfig(batch_size=trial.batch_size, max_steps=sweep_config.max_steps,
                    goal=sweep_config.goal, optimizer=sweep_config.optimizer,
                    seed=sweep_config.seed, eval_resolution=sweep_config.eval_resolution,
                    max_rows_per_device=sweep_config.max_rows_per_device,
                    stop_after=trial.steps_to_goal,
                    # the same gradient path (two halves or one batch) as the sweep's trial
                    noise_every=trial.noise_every)
    spec = TrialSpec(trial_id=int(trial.trial_id), learning_rate=trial.learning_rate,
                     momentum=trial.momentum, final_lr_fraction=trial.final_lr_fraction,
                     decay_steps=trial.decay_steps)
    params = []
    (record,) = run_trials(task, run, [spec], devices=devices, final_params=params)
    return TrialRecord.from_dict(record), params[0]


def calibration_sample(task: Task, rows: int, seed: int) -> dict:
    """`rows` training rows drawn without replacement (or fresh draws for unlimited data)."""
    rng = np.random.default_rng(seed)
    if task.train is None:
        return task.draw_batch(rng, rows)
    n = task.train_size
    idx = np.sort(rng.choice(n, size=min(rows, n), replace=False))
    return {k: np.asarray(v)[idx] for k, v in task.train.items()}


def mean_loss(task: Task, params, sample: dict, chunk_rows: int | None = None,
              devices=None) -> float:
    """The task's mean training loss over the sample (float64)."""
    rows = sharded_sample.ShardedSample(sample, chunk_rows=chunk_rows, devices=devices)
    return float(rows.mean(lambda p, b: task.loss_fn(p, b), params))


def reference_checkpoints(task: Task, sweep_config: SweepConfig, records: list[TrialRecord],
                          calibration_run: dict, devices=None) -> tuple[object, object]:
    """(initialisation, goal checkpoint) parameter trees of a validation's reference trial: the
    sweep's best trial at the document's calibration batch size (`calibration_run`), retrained
    to its goal. ValueError when that best trial is no longer the document's (trials added)."""
    trial = best_trial(records, int(calibration_run["batch_size"]))
    if int(trial.trial_id) != int(calibration_run["trial_id"]):
        raise ValueError(f"sweep: the best trial at B = {calibration_run['batch_size']} is "
                         f"{trial.trial_id}, not the validation's {calibration_run['trial_id']}; "
                         "rerun validate without --reuse")
    init = init_params_of(task, sweep_config.seed, int(trial.trial_id))
    _, goal_params = retrain(task, sweep_config, trial, devices)
    return init, goal_params

"""Validation: three predictions of a workload's critical batch size beside the measured one.

For a measured sweep (docs/design.md, 'Real nets') this module
1. analyses the measured curve (`nqm.scaling.analyse_curve`: the fit S_min (1 + B_crit / B));
2. takes the best trial at a calibration batch size (default: the smallest batch size the sweep
   reached, which is in the perfect-scaling regime by construction and gives the longest run,
   so its checkpoints are far apart) and retrains it alone with the sweep's settings (same seed,
   trial id, budget and schedule; stopped at the sweep's steps to goal) to get two checkpoints:
   the initialisation (step 0: `task.init_params(fold_in(key(seed), trial_id))`, the trainer's
   rule) and the parameters at the step it reached the goal;
3. fits an NQM to the network (`realnets.calibration.calibrate`): curvature h_i and noise c_i of the top-k
   Hessian directions, a power-law tail, measured at a checkpoint (default: the goal checkpoint,
   where the noise-dominated end of the run decides how far a bigger batch helps; the
   initialisation is reported too), and the initial second moments E[theta_i^2] = g_i^2 / h_i^2
   from the components g_i of the gradient *at initialisation* along those directions (on a
   fixed quadratic G_0 = H (theta_0 - theta*)). The target is the training loss at which the run
   reached its goal (the mean loss over the calibration sample at the goal checkpoint, minus an
   optional loss floor L*, default 0); for a workload whose metric is the loss itself (the NQM)
   the goal is that loss, and it is used as it is. A second target needs no L*: the fitted
   quadratic's own loss at the goal checkpoint (`quadratic_target`); predictions are made with
   both, the headline being `ValidationConfig.target_rule`. Every prediction's B_crit gets a
   spread from a parametric bootstrap over the fitted numbers (`bootstrap_b_crit`);
4. predicts B_crit three ways:
   - the calibrated NQM's tuned curve (`nqm.tuning.tune_curve`; SGD for sgd sweeps, heavy-ball
     momentum for momentum, nesterov and adam sweeps: Adam has no NQM counterpart in this engine
     with a learning rate on the same scale, so the NQM tunes momentum SGD instead), analysed by
     the same function as the measured curve; beside it, the NQM run with exactly the sweep's
     trial metaparameters and step budget (min over trials per batch size, like the sweep): the
     same search as the measurement, not available for adam;
   - McCandlish et al.'s B_crit ~ B_noise = tr(H Sigma) / (G^T H G), measured by Hessian-vector
     products at the checkpoints of the calibration run (`gradient_stats.hessian_noise_scale`);
   - B_simple = tr(Sigma) / |G|^2, the cheap proxy, as the trainer measured it during the sweep
     (moving averages, pooled over batch sizes: `realnets.sweeps.curve.pooled_b_simple`), and from the
     calibration sample at the checkpoints;
5. measures the local critical batch size along the reference run by branching
   (`realnets.sweeps.branching.run_branching`) with settings fixed by one rule
   (`branch_settings`): a second measurement of B_crit, from one run instead of a sweep; and
   trains the network with the headline NQM's own metaparameters at every batch size
   (`realnets.validation.transfer`): where the prediction misses, the model or the measurement?
6. adds rule 2 of docs/prediction_rule.md (`realnets.validation.noise_free_match`): the target
   matched to the network's own fewest full-batch steps from the sweep's trials at B_ref, beside
   the headline;
7. returns one JSON-ready document (`validate`), written by `files.write_validation` and read
   back by `files.read_validation`, whose `comparison` table the report
   (`realnets.validation.report`) and the app show.

References:
  McCandlish et al. 2018, "An empirical model of large-batch training", eqs. 2.8-2.11 and
    section 4 (B_crit of a target compared with the noise scale at that loss).
  Zhang et al. 2019, "Which algorithmic choices matter at which batch sizes?", section 3.
  Shallue et al. 2018 (the measured protocol).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Sequence

import jax

from nqm.problem import NQMConfig
from realnets.sweeps.branching import BranchSettings, run_branching
from realnets.sweeps.curve import build_curve
from realnets.sweeps.records import IDENTITY, SweepConfig, TrialRecord
from realnets.validation.checkpoint import fit_checkpoint
from realnets.validation.comparison import comparison, measured_summary
from realnets.validation.bootstrap import bootstrap_b_crit
from realnets.validation.noise_free_match import add_noise_free_prediction, can_add
from realnets.validation.predictions import predict
from realnets.validation.quadratic_path import run_quadratic_path
from realnets.validation.rerun import (best_trial, calibration_batch_size, calibration_sample,
                                       init_params_of, mean_loss, retrain)
from realnets.validation.settings import NQM_FAMILY, TARGET_LABELS, ValidationConfig
from realnets.validation.targets import StepMatch, nqm_search_space
from realnets.validation.transfer import run_transfer
from realnets.workloads.tasks import Task


BRANCH_FRACTIONS = (0.1, 0.3, 1.0)
BRANCH_WINDOW_FRACTION = 0.1
BRANCH_TOLERANCE = 0.05


def branch_settings(sweep_config: SweepConfig, trial: TrialRecord, repeats: int,
                    train_size: int | None) -> BranchSettings | str:
    """The branching measurement of the local CBS along the reference run, by one fixed rule
    (docs/validation.md, 'The local critical batch size, measured inside validate'), or the
    reason there is none.

    With B_ref the reference trial's batch size and S_ref its steps to goal in the sweep:
    - branch at steps round(f S_ref) for f in BRANCH_FRACTIONS (0.1, 0.3, 1.0), each at least 1,
      duplicates dropped;
    - multipliers k = 1, 2, 4, ... up to the largest sweep batch size / B_ref, with k B_ref at most
      the training set (`train_size`; None: unlimited data);
    - window W = the smallest multiple of lcm(k) x B_ref (= k_max B_ref: powers of two) with
      W >= BRANCH_WINDOW_FRACTION x S_ref x B_ref examples (a tenth of the reference run's data);
    - tolerance BRANCH_TOLERANCE (5%), `repeats` data orders;
    - the reference trial's learning rate, momentum, optimizer and trial id, the sweep's seed.

    Returns a reason (str) instead when `repeats` is 0, the trial's learning rate decays
    (final_lr_fraction != 1: branching needs a constant rate) or no multiplier above 1 fits.
    """
    if repeats == 0:
        return "not measured (branch-repeats 0)"
    if trial.final_lr_fraction != 1.0:
        return (f"not measured: the reference trial's learning rate decays (final_lr_fraction "
                f"{trial.final_lr_fraction:g}); branching needs a constant rate")
    b_ref, s_ref = int(trial.batch_size), int(trial.steps_to_goal)
    largest = max(sweep_config.batch_sizes)
    if train_size is not None:
        largest = min(largest, int(train_size))
    multipliers = [1]
    while 2 * multipliers[-1] * b_ref <= largest:
        multipliers.append(2 * multipliers[-1])
    if len(multipliers) == 1:
        return (f"not measured: no multiplier k >= 2 with k x {b_ref} within the largest sweep "
                f"batch size and the training set ({largest})")
    steps = sorted({max(1, round(f * s_ref)) for f in BRANCH_FRACTIONS})
    unit = math.lcm(*multipliers) * b_ref
    window = unit * max(1, math.ceil(BRANCH_WINDOW_FRACTION * s_ref * b_ref / unit))
    return BranchSettings(
        batch_size=b_ref, learning_rate=trial.learning_rate, branch_steps=tuple(steps),
        window_examples=window, multipliers=tuple(multipliers),
        optimizer=sweep_config.optimizer, momentum=trial.momentum, tolerance=BRANCH_TOLERANCE,
        repeats=repeats, seed=sweep_config.seed, trial_id=int(trial.trial_id),
        max_rows_per_device=sweep_config.max_rows_per_device, workload=sweep_config.workload)


def branching(task: Task, sweep_config: SweepConfig, trial: TrialRecord, repeats: int,
              devices=None, log=None) -> dict:
    """The branching record of a validation document: `BranchResult.to_dict()` (with its
    `local_cbs`), or {"skipped": reason, "local_cbs": []} when `branch_settings` gives none or
    the reference run diverges before a branch step."""
    settings = branch_settings(sweep_config, trial, repeats, task.train_size)
    if isinstance(settings, str):
        return {"skipped": settings, "local_cbs": []}
    try:
        return run_branching(task, settings, devices, log).to_dict()
    except ValueError as err:
        return {"skipped": f"not measured: {err}", "settings": settings.to_dict(),
                "local_cbs": []}


def validate(task: Task, sweep_config: SweepConfig, records: list[TrialRecord],
             vcfg: ValidationConfig, devices=None, log=None,
             reference: NQMConfig | None = None,
             repeats: Sequence[TrialRecord] = ()) -> dict:
    """Runs the whole validation of one measured sweep; returns the JSON-ready document.

    Args:
      task: the workload's Task (the one the sweep trained).
      sweep_config: the sweep's config.json (`realnets.sweeps.records.load_sweep`).
      records: its trials.jsonl records.
      vcfg: the validation settings.
      devices: devices for the rerun and the measurements (default all).
      log: optional callable(str) for progress lines.
      reference: the NQM the task was built from, if known (`reference_nqm`): its own tuned and
        search-matched curves are added as "reference" (target: the same as the calibrated NQM's).
      repeats: the sweep's reruns of its best trials with other seeds (`read_repeats`): the
        measured B_crit's interval where the trials stopped early.

    Returns:
      dict with workload, settings, measured, calibration_run, checkpoints (per checkpoint: step,
      train loss, the fitted NQM record, B_noise, B_simple, the prediction curves), branching
      (the local CBS along the reference run, `branching`) and local_cbs ([{"step", "cbs"}]),
      transfer (the network run with the headline NQM's metaparameters,
      `realnets.validation.transfer`, and under "quadratic_path" the network against its own
      quadratic at the goal, `realnets.validation.quadratic_path`; when vcfg.transfer),
      full_batch (rule 2's full-batch descents, `noise_free_match.full_batch_steps`; when the
      headline checkpoint has a fitted NQM), comparison (the table, see `comparison`) and seconds
      per phase.
    """
    say = log or (lambda _: None)
    seconds = {}
    curve = build_curve(records, sweep_config, repeats)
    batch_size = calibration_batch_size(curve, vcfg.batch_size)
    trial = best_trial(records, batch_size)
    say(f"rerunning trial {trial.trial_id} at B = {batch_size} to step {trial.steps_to_goal}")
    t0 = time.perf_counter()
    seed = sweep_config.seed
    init = init_params_of(task, seed, int(trial.trial_id))
    rerun, goal_params = retrain(task, sweep_config, trial, devices)
    seconds["rerun"] = time.perf_counter() - t0

    sample = calibration_sample(task, vcfg.sample_rows, vcfg.seed)
    loss_goal = mean_loss(task, goal_params, sample, vcfg.chunk_rows, devices)
    loss_init = mean_loss(task, init, sample, vcfg.chunk_rows, devices)
    if task.metric == "loss":
        target = sweep_config.goal
        target_rule = "the goal itself (the workload's metric is the loss)"
    else:
        target = loss_goal - vcfg.loss_floor
        target_rule = (f"training loss on the calibration sample at the goal checkpoint minus "
                       f"the loss floor L* = {vcfg.loss_floor:g}")
    calibration_run = {
        "batch_size": batch_size, "trial_id": int(trial.trial_id),
        "learning_rate": trial.learning_rate, "momentum": trial.momentum,
        "final_lr_fraction": trial.final_lr_fraction,
        **({} if trial.decay_steps is None else {"decay_steps": trial.decay_steps}),
        "optimizer": sweep_config.optimizer, "seed": seed,
        "sweep_steps_to_goal": trial.steps_to_goal,
        "rerun_status": rerun.status, "rerun_steps_to_goal": rerun.steps_to_goal,
        "rerun_steps_run": rerun.steps_run,
        "rerun_final_metric": rerun.eval.metric[-1] if rerun.eval.metric else None,
        "train_loss_init": loss_init, "train_loss_goal": loss_goal,
        "target": target, "target_rule": target_rule,
        "noise_scale_during_run": {"step": list(rerun.noise_scale.step),
                                   "b_simple": list(rerun.noise_scale.b_simple)},
    }
    study = sweep_config.to_dict()
    out = {"workload": sweep_config.workload, "settings": vcfg.to_dict(),
           "sweep_config": {k: study[k] for k in (*IDENTITY, "batch_sizes", "trials")},
           "measured": measured_summary(curve), "calibration_run": calibration_run,
           "checkpoints": {}}
    say(f"local critical batch size by branching from trial {trial.trial_id}")
    t0 = time.perf_counter()
    branched = branching(task, sweep_config, trial, vcfg.branch_repeats, devices, log)
    seconds["branching"] = time.perf_counter() - t0
    if "skipped" in branched:
        say(f"local critical batch size {branched['skipped']}")
    params_at = {"goal": (goal_params, rerun.steps_run), "init": (init, 0)}
    match = StepMatch(family=NQM_FAMILY[sweep_config.optimizer], batch_size=batch_size,
                      steps=int(trial.steps_to_goal), space=nqm_search_space(sweep_config.search))
    key = jax.random.key(vcfg.seed)
    for i, name in enumerate(vcfg.checkpoints):
        params, step = params_at[name]
        say(f"measuring the {name} checkpoint (step {step})")
        t0 = time.perf_counter()
        configs, record = fit_checkpoint(task, params, init, goal_params, sample, target, vcfg,
                                         jax.random.fold_in(key, i), devices, match)
        record["step"] = step
        record["train_loss"] = loss_goal if name == "goal" else loss_init
        seconds[f"measure_{name}"] = time.perf_counter() - t0
        record["predictions"] = {}
        t0 = time.perf_counter()
        for rule, config in configs.items():
            if config is None:
                continue
            say(f"predicting with the NQM fitted at {name} (d = {config.problem().dim}, "
                f"{TARGET_LABELS[rule]} {config.target:.4g})")
            pred = predict(config, sweep_config, records, curve.batch_sizes, vcfg)
            pred["target"] = config.target
            # the headline rule's spread only: the diagnostics need no interval, and for Adam
            # sweeps every bootstrap curve costs about a minute
            if vcfg.bootstrap and rule == vcfg.target_rule:
                pred["bootstrap"] = bootstrap_b_crit(
                    record["nqm"], config.target, sweep_config, records, curve.batch_sizes, vcfg,
                    match if rule == "step_matched" else None)
            record["predictions"][rule] = pred
        seconds[f"predict_{name}"] = time.perf_counter() - t0
        out["checkpoints"][name] = record
    if reference is not None:
        t0 = time.perf_counter()
        ref = dataclasses.replace(reference, target=target)
        out["reference"] = predict(ref, sweep_config, records, curve.batch_sizes, vcfg)
        out["reference"]["problem"] = ref.to_dict()
        seconds["reference"] = time.perf_counter() - t0
    if can_add(out):
        out = add_noise_free_prediction(out, task, sweep_config, records, sample, vcfg, devices,
                                        log, repeats=list(repeats))
        seconds["noise_free_match"] = out.pop("seconds")["noise_free_match"]
    out["branching"] = branched
    out["local_cbs"] = list(branched["local_cbs"])
    if vcfg.transfer:
        t0 = time.perf_counter()
        out["transfer"] = run_transfer(task, sweep_config, out, sample, devices, log)
        out["transfer"]["quadratic_path"] = run_quadratic_path(
            task, sweep_config, out, init, goal_params, sample, devices, log)
        seconds["transfer"] = time.perf_counter() - t0
    out["seconds"] = seconds
    out["comparison"] = comparison(out)
    return out

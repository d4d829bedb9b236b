"""Rule 2 of docs/prediction_rule.md: the NQM's time scale matched at the noise-free end.

Rule 1 (`targets.step_matched_target`) matches the NQM's steps to the reference run's at B_ref,
where gradient noise dominates, and leaves the NQM's noise-free speed to set S_min. Rule 2 turns
the match around:

1. `full_batch_steps`: S_fb, the fewest steps in which the network itself descends, without
   gradient noise, to the reference run's loss at its goal: each of the sweep's trials at B_ref
   (its metaparameters, its own initialisation `fold_in(key(seed), trial_id)`) runs the sweep's
   optimizer at a constant rate, full batch on the calibration sample, until the sample's mean
   loss is at or below the reference run's there; each stops after min(S_ref, the fewest steps
   found so far) steps or when it diverges (`quadratic_path.descend`'s rule).
2. `noise_free_match`: the target is the lowest expected loss the NQM reaches in S_fb steps
   without noise (at B = N, where the finite-population correction makes the noise zero; at
   B = UNLIMITED_BATCH for a task with unlimited data), tuned in the sweep's search space.
3. `add_noise_free_prediction`: the NQM of every measured checkpoint (its stored fit, rebuilt by
   `bootstrap.fitted_nqm`) predicts S(B) with its noise against that target, the headline
   checkpoint's with the bootstrap interval (each draw with its own target from the same S_fb).

It runs on a stored validation document too (`validate --reuse` on one made before rule 2).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
from jax.flatten_util import ravel_pytree

from realnets.sweeps.curve import build_curve, same_configuration
from realnets.sweeps.records import SweepConfig, TrialRecord, trial_order
from realnets.validation import descent_journal
from realnets.validation.bootstrap import bootstrap_b_crit, fitted_nqm
from realnets.validation.predictions import predict
from realnets.validation.quadratic_path import descend, path_optimizer, sample_loss
from realnets.validation.rerun import init_params_of
from realnets.validation.settings import NQM_FAMILY, RULE_2 as RULE, ValidationConfig
from realnets.validation.targets import StepMatch, nqm_search_space, step_matched_target
from realnets.workloads.tasks import Task

# the noise-free batch size of a task with unlimited data (noise / B is then ~1e-12 of B = 1's)
UNLIMITED_BATCH = 2 ** 40


def full_batch_steps(task: Task, sweep_config: SweepConfig, trials: list[TrialRecord],
                     sample: dict, target: float, step_limit: int, chunk_rows: int | None = None,
                     devices=None, log=None, journal: Path | None = None) -> dict:
    """S_fb: the fewest full-batch steps of any of `trials` to `target` on `sample`.

    Args:
      task: the workload's Task.
      sweep_config: the sweep (its optimizer and seed: each trial's initialisation).
      trials: the sweep's trials at the reference batch size, in the order they are tried.
      sample: the calibration sample ({name: array (rows, ...)}, the rows the NQM was measured
        on).
      target: the sample's mean loss to reach (loss units: the reference run's at its goal).
      step_limit: S_ref, the most steps any descent may take (>= 1).
      chunk_rows, devices: how the sample's loss is computed (`quadratic_path.sample_loss`).
      log: optional callable(str) for progress lines.
      journal: optional JSON-lines file (`descent_journal`): each trial's run is appended to it
        when finished, and runs it already holds for the same workload, target, limit and rows
        are taken instead of descending again (a killed call resumes; the result is the same);
        the descent under way saves its state beside it (`descent_journal.checkpoint`).

    Returns:
      JSON-ready {"steps": S_fb or None (no trial reached the target), "trial_id",
      "learning_rate", "momentum" (the fastest trial's; None with no S_fb), "target",
      "step_limit", "sample_rows", "chunk_rows" (rows per compiled call), "trials": [per
      trial: "trial_id", "learning_rate", "momentum", "status" ('reached', 'not reached',
      'diverged'), "steps_to_target",
      "step_limit" (its own cap)], "seconds"}.
    """
    if step_limit < 1:
        raise ValueError(f"step_limit must be >= 1, got {step_limit}")
    if not trials:
        raise ValueError("trials: no trial at the reference batch size")
    start = time.perf_counter()
    say = log or (lambda _: None)
    rows = int(len(next(iter(sample.values()))))
    header = {"workload": sweep_config.workload, "optimizer": sweep_config.optimizer,
              "seed": sweep_config.seed, "target": float(target), "step_limit": int(step_limit),
              "sample_rows": rows, **descent_journal.chunking(chunk_rows, rows)}
    done = {} if journal is None else descent_journal.open_journal(journal, header)
    if done:
        say(f"full batch: {len(done)} descents already in {journal}")
    network = None
    best, runs = None, []
    for trial in trials:
        cap = step_limit if best is None else min(step_limit, best["steps_to_target"])
        run = done.get(str(trial.trial_id))
        if not descent_journal.reusable(run, trial.trial_id, trial.learning_rate, trial.momentum,
                                        cap):
            began = time.perf_counter()
            init = init_params_of(task, sweep_config.seed, int(trial.trial_id))
            if network is None:     # one compiled loss for every trial (the same parameter tree)
                network = sample_loss(task, init, sample, chunk_rows, devices)
            theta_0 = np.asarray(ravel_pytree(init)[0], np.float64)
            # the sweep's optimizer, the trial's rate and momentum (b1), constant
            descent, _ = descend(network, theta_0, path_optimizer(sweep_config, trial), target,
                                 cap, checkpoint=descent_journal.checkpoint(journal, header, {
                                     "trial_id": trial.trial_id,
                                     "learning_rate": trial.learning_rate,
                                     "momentum": trial.momentum, "step_limit": cap}))
            run = {"trial_id": trial.trial_id, "learning_rate": float(trial.learning_rate),
                   "momentum": None if trial.momentum is None else float(trial.momentum),
                   "status": descent.status, "steps_to_target": descent.steps_to_target,
                   "step_limit": cap}
            if journal is not None:
                descent_journal.append_run(journal, run)
            outcome = _outcome(run["status"], run["steps_to_target"], cap)
            say(f"full batch: trial {trial.trial_id} {outcome} "
                f"({time.perf_counter() - began:.0f} s)")
        runs.append(run)
        if run["status"] == "reached" and (best is None
                                           or run["steps_to_target"] < best["steps_to_target"]):
            best = run
            say(f"full batch: the fastest so far is trial {trial.trial_id}, "
                f"{run['steps_to_target']} steps")
    return {"steps": None if best is None else best["steps_to_target"],
            "trial_id": None if best is None else best["trial_id"],
            "learning_rate": None if best is None else best["learning_rate"],
            "momentum": None if best is None else best["momentum"],
            "target": float(target), "step_limit": int(step_limit),
            "sample_rows": rows,
            "chunk_rows": descent_journal.rows_per_call(chunk_rows, rows),
            "trials": runs, "seconds": time.perf_counter() - start}


def _outcome(status: str, steps: int | None, cap: int) -> str:
    """One descent's result in words, for a progress line."""
    return (f"reached the target in {steps} steps" if status == "reached"
            else f"{status} (cap {cap} steps)")


def noise_free_match(sweep_config: SweepConfig, train_size: int | None, steps: int) -> StepMatch:
    """Rule 2's step match: S_fb steps at the batch size without gradient noise (B = N, or
    UNLIMITED_BATCH with unlimited data), in the sweep's search space."""
    return StepMatch(family=NQM_FAMILY[sweep_config.optimizer],
                     batch_size=UNLIMITED_BATCH if train_size is None else int(train_size),
                     steps=int(steps), space=nqm_search_space(sweep_config.search))


def add_noise_free_prediction(doc: dict, task: Task, sweep_config: SweepConfig,
                              records: list[TrialRecord], sample: dict, vcfg: ValidationConfig,
                              devices=None, log=None, repeats: list[TrialRecord] = ()) -> dict:
    """Rule 2 on a validation document whose checkpoints are measured (`can_add`).

    Args:
      doc: the validation document as a dict (`ValidationDocument.to_dict()` or the pipeline's).
      task, sweep_config, records: the workload's Task and the sweep it was made from.
      sample: the calibration sample ({name: array (rows, ...)}), the rows the NQM was fitted on.
      vcfg: the validation settings (bootstrap draws, chunk rows, the NQM's step budget).
      devices, log: as `full_batch_steps`.
      repeats: the sweep's reruns of its winners (`read_repeats`), for `reference_reruns`.

    Returns `doc` with rule 2 added:
    "full_batch" (`full_batch_steps`, with "reference_reruns" from `repeats`, the sweep's reruns:
    `reference_reruns`) at the top, and in every checkpoint with a fitted NQM the
    target `targets[RULE]`, the match record "noise_free_match" and `predictions[RULE]` (the
    headline checkpoint's with a bootstrap when `vcfg.bootstrap`). A checkpoint whose target
    cannot be set records why under `target_errors[RULE]`. Returns a new dict."""
    say = log or (lambda _: None)
    t0 = time.perf_counter()
    run = doc["calibration_run"]
    b_ref = int(run["batch_size"])
    trials = sorted((r for r in records if r.batch_size == b_ref),
                    key=lambda r: trial_order(r.trial_id))
    say(f"rule 2: the network full batch from each of the {len(trials)} trials at B = {b_ref} "
        f"(up to {run['sweep_steps_to_goal']} steps)")
    fb = full_batch_steps(task, sweep_config, trials, sample, float(run["train_loss_goal"]),
                          int(run["sweep_steps_to_goal"]), vcfg.chunk_rows, devices, log)
    fb["reference_reruns"] = reference_reruns(list(repeats), run)
    out = {**doc, "full_batch": fb, "checkpoints": dict(doc["checkpoints"])}
    batch_sizes = build_curve(records, sweep_config).batch_sizes
    headline = doc["settings"]["checkpoints"][0]
    for name, record in doc["checkpoints"].items():
        if "nqm" not in record:         # nothing fitted there: the record stays as it is
            continue
        record = {**record, "targets": dict(record.get("targets") or {}),
                  "target_errors": dict(record.get("target_errors") or {}),
                  "predictions": dict(record.get("predictions") or {})}
        out["checkpoints"][name] = record
        if fb["steps"] is None:
            record["target_errors"][RULE] = (
                f"no trial reached the reference run's loss {fb['target']:.4g} full batch "
                f"within {fb['step_limit']} steps")
            continue
        if fb["steps"] == 0:
            record["target_errors"][RULE] = ("the initialisation is already at the target: "
                                             "no steps to match")
            continue
        match = noise_free_match(sweep_config, record["nqm"].get("train_size"), fb["steps"])
        fitted = fitted_nqm(record["nqm"], 1.0)
        try:
            target, record["noise_free_match"] = step_matched_target(fitted, match)
        except ValueError as err:
            record["target_errors"][RULE] = str(err)
            continue
        record["targets"][RULE] = target
        config = dataclasses.replace(fitted, target=target)
        start = config.problem().initial_loss()
        if not 0 < target < start:
            record["target_errors"][RULE] = (
                f"target {target:.4g} is not in (0, {start:.4g}), the fitted initial loss")
            continue
        say(f"rule 2: predicting with the NQM fitted at {name}, target {target:.4g}")
        # the rule is the tuned curve; the NQM at the sweep's trials is rule 1's diagnostic
        pred = predict(config, sweep_config, records, batch_sizes, vcfg, search_matched=False)
        pred["target"] = target
        if vcfg.bootstrap and name == headline:
            pred["bootstrap"] = bootstrap_b_crit(record["nqm"], target, sweep_config, records,
                                                 batch_sizes, vcfg, match,
                                                 search_matched=False)
        record["predictions"][RULE] = pred
    out["seconds"] = {**doc.get("seconds", {}), "noise_free_match": time.perf_counter() - t0}
    return out


def reference_reruns(repeats: list[TrialRecord], calibration_run: dict) -> list[int | None]:
    """Steps to goal of the reference trial's reruns under other seeds: the `realnets.sweeps.
    repeats` records with its batch size and metaparameters (`curve.same_configuration`; a
    rerun's trial id numbers its initialisation, not the sweep's trial). None: not at the goal
    within the rerun's cap."""
    reference = reference_record(calibration_run)
    return [r.steps_to_goal for r in repeats if same_configuration(r, reference)]


def reference_record(calibration_run: dict) -> TrialRecord:
    """The reference trial's configuration as a TrialRecord (for `curve.same_configuration`)."""
    return TrialRecord(
        batch_size=int(calibration_run["batch_size"]), trial_id=calibration_run["trial_id"],
        status="COMPLETE", learning_rate=calibration_run["learning_rate"],
        momentum=calibration_run.get("momentum"),
        final_lr_fraction=calibration_run.get("final_lr_fraction", 1.0),
        decay_steps=calibration_run.get("decay_steps"))


def can_add(doc: dict) -> bool:
    """Whether rule 2 can be added to a validation document: an NQM fitted at its headline
    checkpoint (the pipeline and `validate --reuse` both ask this)."""
    headline = doc["settings"]["checkpoints"][0]
    return "nqm" in (doc["checkpoints"].get(headline) or {})

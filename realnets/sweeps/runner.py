"""Runs the measuring protocol of Shallue et al. 2018 over batch sizes, resumable, on disk.

The sweep directory's files are `realnets.sweeps.records`'s: config.json written first,
trials.jsonl appended (and fsynced) as trials finish, curve.json rewritten atomically after every
batch size. Rerunning the same sweep skips every (batch size, trial id) already in trials.jsonl;
a sweep killed at any moment loses at most the trials in flight and leaves no broken file (a cut
final line of trials.jsonl is ignored and repaired). Only process 0 writes; with several hosts
the directory must be on a filesystem that every process reads.

The work is a list of blocks (`realnets.sweeps.blocks`) handed to an executor: `serial_executor`
here, or Ray's (`realnets.cluster`). Whatever the executor, this process writes each batch size's
blocks in their serial order, cut to the serial stopping rule, so the files are the same.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Iterator, Sequence

from nqm.curve import ScalingCurve
from realnets import store, workloads
from realnets.sweeps.blocks import Block, Executor, as_if_stopped_at
from realnets.sweeps.curve import build_curve, curve_document
from realnets.sweeps.records import (IDENTITY, SweepConfig, TrialRecord, load_sweep, read_config,
                                     read_repeats, read_trials)
from realnets.training.mesh import is_writer
from realnets.training.search import TrialSpec, trial_specs
from realnets.training.trainer import RunConfig, run_trials
from realnets.workloads.tasks import check_batch_sizes_fit


def _check_same_study(old: SweepConfig, new: SweepConfig, path: Path) -> None:
    for key in IDENTITY:
        if getattr(old, key) != getattr(new, key):
            raise ValueError(f"out directory {path} holds a sweep with {key} = "
                             f"{old.to_dict()[key]!r}, not {new.to_dict()[key]!r}: use a new "
                             "--out to start another sweep")


def trial_groups(config: SweepConfig, records: Sequence[TrialRecord]
                 ) -> list[tuple[int, tuple[TrialSpec, ...]]]:
    """The groups of trials still to run, (batch size, trials), in the serial order: batch sizes
    as configured, then trial ids, `vmap_trials` trials a group (all of a batch size when 0),
    skipping the trials of `records` (the sweep's blocks; the goal rule's pilot too)."""
    finished = {(r.batch_size, int(r.trial_id)) for r in records}
    specs = trial_specs(config.search, config.optimizer, config.trials, config.seed)
    chunk = config.vmap_trials or config.trials
    groups = []
    for batch_size in config.batch_sizes:
        todo = [s for s in specs if (batch_size, s.trial_id) not in finished]
        groups.extend((batch_size, tuple(todo[start:start + chunk]))
                      for start in range(0, len(todo), chunk))
    return groups


def run_config(config: SweepConfig, batch_size: int) -> RunConfig:
    """How the sweep trains one batch size (no stop_after: that is the driver's to set)."""
    return RunConfig(batch_size=batch_size, max_steps=config.max_steps, goal=config.goal,
                     optimizer=config.optimizer, seed=config.seed,
                     eval_resolution=config.eval_resolution,
                     max_rows_per_device=config.max_rows_per_device,
                     stop_at_first_goal=not config.full_trials,
                     noise_every=config.noise_every)


def plan_blocks(config: SweepConfig, records: Sequence[TrialRecord]) -> list[Block]:
    """The blocks still to run (`trial_groups`), each with its batch size's RunConfig
    (`run_config`)."""
    return [Block(run_config(config, b), trials) for b, trials in trial_groups(config, records)]


def serial_executor(task, progress: bool = False,
                    on_eval: Callable[[int, int], None] | None = None) -> Executor:
    """Runs blocks one after another in this process, each with the serial limit known when it
    starts (which, run in order, is the final one): today's sweep, unchanged."""

    def execute(blocks: Sequence[Block], stop_after) -> Iterator[tuple[int, list[dict]]]:
        for index, block in enumerate(blocks):
            run = dataclasses.replace(block.run, stop_after=stop_after(block))
            bar = _bar(progress, block.batch_size, block.trials, run.max_steps)

            def report_step(step: int, batch_size=block.batch_size, bar=bar) -> None:
                if bar:
                    bar.update_to(step)
                if on_eval is not None:
                    on_eval(batch_size, step)

            try:
                done = run_trials(task, run, list(block.trials), on_eval=report_step)
            finally:
                if bar:
                    bar.close()
            yield index, done

    return execute


def run_sweep(config: SweepConfig, out_dir: Path, progress: bool = True,
              on_trials: Callable[[list[TrialRecord]], None] | None = None,
              on_eval: Callable[[int, int], None] | None = None, task=None,
              executor: Executor | None = None) -> ScalingCurve:
    """Runs (or resumes) a sweep into `out_dir`; returns the measured curve.

    Args:
      config: the sweep.
      out_dir: sweep directory (created if needed).
      progress: show a tqdm bar per group of trials (batch size, trial ids, step).
      on_trials: called with the new records each time trials finish (e.g. the app's chart).
      on_eval: called with (batch size, step) after every evaluation (e.g. a progress bar).
      task: the workload's Task if the caller already built it (the app caches it); else built
        here from the workload.
      executor: runs the blocks (`realnets.sweeps.blocks.Executor`); None: one after another
        in this process (`serial_executor`). Whatever runs them, this process alone writes the
        directory, each block once it returned, cut to the serial rule.
    """
    out_dir = Path(out_dir)
    writer = is_writer()
    if task is None:
        task = workloads.get(config.workload).build(text_file=config.text_file)
    check_batch_sizes_fit(task.train_size, config.batch_sizes)    # before anything is written
    if (out_dir / "config.json").exists():
        _check_same_study(read_config(out_dir / "config.json"), config, out_dir)
    if writer:
        out_dir.mkdir(parents=True, exist_ok=True)
        store.write_json_atomic(out_dir / "config.json", config.to_dict())
        store.repair_jsonl(out_dir / "trials.jsonl")
    records = read_trials(out_dir / "trials.jsonl")
    repeats = read_repeats(out_dir)      # reruns of earlier winners (realnets.sweeps.repeats)

    blocks = plan_blocks(config, records)
    if executor is None:
        executor = serial_executor(task, progress and writer, on_eval)
    by_batch: dict[int, list[int]] = {}     # each batch size's blocks, in the serial order
    for index, block in enumerate(blocks):
        by_batch.setdefault(block.batch_size, []).append(index)

    def stop_after(block: Block) -> int | None:
        """The serial limit: the fewest steps to goal of the batch size's written trials."""
        best = [r.steps_to_goal for r in records
                if r.batch_size == block.batch_size and r.steps_to_goal is not None]
        return min(best) if best and not config.full_trials else None

    finished_blocks: dict[int, list[dict]] = {}
    for index, done in executor(blocks, stop_after):
        finished_blocks[index] = done
        batch_size = blocks[index].batch_size
        queue = by_batch[batch_size]
        # a batch size's blocks are written in their serial order, each cut to the serial rule:
        # the file then is the serial backend's, and a resume sees the prefix the serial one would
        while queue and queue[0] in finished_blocks:
            first = queue.pop(0)
            done = as_if_stopped_at(finished_blocks.pop(first), stop_after(blocks[first]))
            if writer:
                store.append_jsonl(out_dir / "trials.jsonl", done)
            new = [TrialRecord.from_dict(r) for r in done]
            records.extend(new)
            if on_trials is not None:
                on_trials(new)
        if writer and not queue and batch_size != config.batch_sizes[-1]:
            # kept current for readers of a running sweep; the last one is written below
            store.write_json_atomic(out_dir / "curve.json",
                                    curve_document(build_curve(records, config, repeats)).to_dict())
    if any(by_batch.values()):
        raise RuntimeError(f"the executor returned no result for blocks "
                           f"{sorted(i for q in by_batch.values() for i in q)}")
    curve = build_curve(records, config, repeats)
    if writer:
        store.write_json_atomic(out_dir / "curve.json", curve_document(curve).to_dict())
    return curve


def write_curve(out_dir: Path) -> ScalingCurve:
    """Rewrites a sweep directory's curve.json from its trials and reruns (after
    `realnets.sweeps.repeats.run_repeats`, or to bring an older file up to date)."""
    config, records = load_sweep(out_dir)
    curve = build_curve(records, config, read_repeats(out_dir))
    store.write_json_atomic(Path(out_dir) / "curve.json", curve_document(curve).to_dict())
    return curve


def _bar(enabled: bool, batch_size: int, group, total: int):
    if not enabled:
        return None
    from tqdm import tqdm

    ids = f"{group[0].trial_id}-{group[-1].trial_id}" if len(group) > 1 else str(group[0].trial_id)
    bar = tqdm(total=total, desc=f"B={batch_size} trials {ids}", unit="step", leave=False)

    def update_to(step: int) -> None:
        bar.update(step - bar.n)

    bar.update_to = update_to
    return bar

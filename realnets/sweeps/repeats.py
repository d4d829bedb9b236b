"""Each batch size's best trial run again with other seeds: an interval of the measured B_crit
for a sweep whose trials stopped early.

A sweep run without `--full-trials` stops a batch size's trials once one reached the goal, so the
other trials' steps to result are unknown and cannot be resampled
(`realnets.sweeps.curve.b_crit_resampled`). Repeated seeds measure another spread instead: the
configuration that won at each batch size, trained again with other data orders (`seeds`) and
initialisations (trial ids 0 .. inits - 1 under each seed), each run to its own goal or to a cap
of `step_cap` times the sweep's steps there. B_crit is then refitted with one run drawn per batch
size (`realnets.sweeps.curve.b_crit_over_repeats`): the curve the sweep would have measured
under another seed, had the same configurations won. It is the spread of the data order and
initialisation, not of the search.

Two files beside the sweep's own (docs/design.md, 'Formats'):
- `repeats.json`: the `RepeatConfig`;
- `repeats.jsonl`: one `TrialRecord` a line, its `seed` the rerun's seed, appended as each
  (batch size, seed) block finishes, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from nqm import validation
from realnets import store
from realnets.sweeps.curve import best_trial, same_configuration
from realnets.sweeps.records import (MAX_SEED, REPEATS_FILE, SweepConfig, TrialRecord,
                                     load_sweep, located, read_repeats)
from realnets.sweeps.runner import run_config
from realnets.training.trainer import RunConfig, TrialSpec

CONFIG_FILE = "repeats.json"


@dataclass(frozen=True)
class RepeatConfig:
    """Which reruns of each batch size's best trial to make.

    Attributes:
      seeds: data orders (each in [0, 2^63 - 1], none twice, none the sweep's own seed: that
        one, with the winner's trial id, is the sweep's own run).
      inits: initialisations per seed (trial ids 0 .. inits - 1 under it), in [1, 1000].
      step_cap: a rerun stops at step_cap x the sweep's steps to result at its batch size (and
        never past the sweep's budget); one not at the goal by then counts as not reached.
        In [1, 1000].
    """

    seeds: tuple[int, ...]
    inits: int = 1
    step_cap: float = 3.0

    def __post_init__(self):
        if not self.seeds:
            raise ValueError("seeds must list at least one seed >= 0")
        seeds = tuple(validation.check_whole("seeds entry", s, 0, MAX_SEED) for s in self.seeds)
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must not repeat, got {list(seeds)}")
        set_ = functools.partial(object.__setattr__, self)   # normalised values on a frozen record
        set_("seeds", seeds)
        set_("inits", validation.check_whole("inits", self.inits, 1, 1000))
        set_("step_cap", validation.check_in_range("step-cap", self.step_cap, 1.0, 1000.0))

    def to_dict(self) -> dict:
        return {**asdict(self), "seeds": list(self.seeds)}

    @classmethod
    def from_dict(cls, d: dict) -> "RepeatConfig":
        if not isinstance(d, dict) or not isinstance(d.get("seeds"), list):
            raise ValueError(f"a repeats config must be a JSON object with a seeds list, got "
                             f"{d!r:.80}")
        return cls(seeds=tuple(d["seeds"]), inits=d.get("inits", 1),
                   step_cap=d.get("step_cap", 3.0))


@dataclass(frozen=True)
class RepeatBlock:
    """The reruns of one batch size under one seed: `run` applied to `trials` (all the same
    metaparameters, trial ids 0 .. inits - 1)."""

    run: RunConfig
    trials: tuple[TrialSpec, ...]


def plan_repeats(sweep: SweepConfig, records: Sequence[TrialRecord], config: RepeatConfig,
                 done: Sequence[TrialRecord]) -> list[RepeatBlock]:
    """The blocks still to run: for every batch size of the sweep that reached the goal (in the
    sweep's order) and every seed, the inits not yet in `done` for the current winner."""
    if sweep.seed in config.seeds:
        raise ValueError(f"seeds must not include the sweep's own seed {sweep.seed}: its run "
                         "of the winner is the sweep's")
    blocks = []
    for batch_size in sweep.batch_sizes:
        best = best_trial([r for r in records if r.batch_size == batch_size])
        if best is None:
            continue
        # rounded first, as trainer.eval_steps does: 1.1 x 100 is 110, not 111
        cap = min(sweep.max_steps, math.ceil(round(config.step_cap * best.steps_to_goal, 9)))
        for seed in config.seeds:
            have = {int(r.trial_id) for r in done if r.seed == seed and same_configuration(r, best)}
            todo = tuple(TrialSpec(trial_id=t, learning_rate=best.learning_rate,
                                   momentum=best.momentum,
                                   final_lr_fraction=best.final_lr_fraction,
                                   # the schedule of the sweep's run, whatever the cap
                                   decay_steps=best.decay_steps)
                         for t in range(config.inits) if t not in have)
            if todo:
                run = dataclasses.replace(run_config(sweep, batch_size), seed=seed,
                                          stop_at_first_goal=False, stop_after=cap)
                blocks.append(RepeatBlock(run, todo))
    return blocks


def _capped(record: dict, block: RepeatBlock, step_cap: float) -> dict:
    """A rerun's record with the reason the cap stopped it (the trainer's reason speaks of an
    earlier trial, which reruns do not have)."""
    cap = block.run.stop_after
    if record["status"] == "INCOMPLETE" and cap < block.run.max_steps \
            and record.get("steps_run") == cap:
        return {**record, "reason": f"stopped at step {cap}: {step_cap:g} x the sweep's steps "
                                    "to result at this batch size (the repeats' cap)"}
    return record


def check_finished(sweep: SweepConfig, records: Sequence[TrialRecord], where: Path) -> None:
    """Reruns need a finished sweep: a resumed one could change the winners (wasting the reruns)
    and a running one rewrites curve.json without them. ValueError naming the count."""
    have = {(r.batch_size, r.trial_id) for r in records}
    wanted = len(sweep.batch_sizes) * sweep.trials
    if len(have) < wanted:
        raise ValueError(f"sweep directory {where} is unfinished ({len(have)} of {wanted} "
                         "trials): finish it (rerun its sweep command) before rerunning its "
                         "winners")
    if not any(r.steps_to_goal is not None for r in records):
        raise ValueError(f"sweep directory {where} has no trial at the goal: nothing to repeat")


def check_extends(old: RepeatConfig, new: RepeatConfig, where: Path) -> None:
    """A later run may add seeds or inits to those in `where`, not drop any or change the cap:
    repeats.json must describe every rerun the interval is drawn from."""
    if new.step_cap != old.step_cap:
        raise ValueError(f"step-cap must be {old.step_cap:g}, as in {where} (reruns with "
                         f"another cap would not be comparable), got {new.step_cap:g}")
    if not set(old.seeds) <= set(new.seeds):
        raise ValueError(f"seeds must include those already run ({','.join(map(str, old.seeds))}"
                         f", in {where}), got {','.join(map(str, new.seeds))}")
    if new.inits < old.inits:
        raise ValueError(f"inits must be at least {old.inits}, as in {where}, got {new.inits}")


def run_repeats(sweep_dir: Path, config: RepeatConfig, task=None,
                run_trials: Callable | None = None,
                on_block: Callable[[RepeatBlock, list[dict]], None] | None = None
                ) -> list[TrialRecord]:
    """Runs (or resumes) the reruns of a finished sweep's winners, in this one process; returns
    every rerun recorded.

    Args:
      sweep_dir: a sweep directory whose trials are all finished.
      config: the reruns; it must extend any already recorded (`check_extends`): reruns
        already in repeats.jsonl are kept and not repeated.
      task: the workload's Task if already built.
      run_trials: the trainer (`realnets.training.trainer.run_trials`; a stand-in in tests).
      on_block: called with each block and its records once they are written.
    Every check is made before anything is written. Writes repeats.json, then appends each
    block's records to repeats.jsonl; the caller rewrites curve.json
    (`realnets.sweeps.runner.write_curve`). In a multi-host job every process runs the blocks
    and process 0 alone writes (`mesh.is_writer`).
    """
    from realnets import workloads
    from realnets.training.mesh import is_writer

    sweep_dir = Path(sweep_dir)
    sweep, records = load_sweep(sweep_dir)
    check_finished(sweep, records, sweep_dir)
    path = sweep_dir / CONFIG_FILE
    if path.exists():
        old = located(path, RepeatConfig.from_dict, store.read_json(path, "repeats config"))
        check_extends(old, config, path)
    writer = is_writer()
    if writer:
        store.repair_jsonl(sweep_dir / REPEATS_FILE)
    done = read_repeats(sweep_dir)        # a cut last line is left out on every process
    blocks = plan_repeats(sweep, records, config, done)    # refuses the sweep's own seed
    if writer:
        store.write_json_atomic(path, config.to_dict())
    if run_trials is None:
        from realnets.training.trainer import run_trials
    if blocks and task is None:
        task = workloads.get(sweep.workload).build(text_file=sweep.text_file)
    for block in blocks:
        made = [_capped(r, block, config.step_cap)
                for r in run_trials(task, block.run, list(block.trials))]
        if writer:
            store.append_jsonl(sweep_dir / REPEATS_FILE, made)
        done.extend(TrialRecord.from_dict(r) for r in made)
        if on_block is not None:
            on_block(block, made)
    return done

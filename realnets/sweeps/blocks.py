"""A sweep's unit of work, the block, and the serial stopping rule replayed on a finished block.

A block is one group of trials at one batch size, trained together by
`realnets.training.trainer.run_trials` (`--vmap-trials K` trials, or all of a batch size). The
sweep driver (`realnets.sweeps.runner`) hands blocks to an executor, which runs them in turn
(serial) or side by side (`realnets.cluster`), and writes each finished block itself.

The serial rule: without --full-trials, block j of a batch size trains at most to the fewest
steps to goal of the blocks before it (`RunConfig.stop_after`). Blocks run side by side cannot
know that number when they start, so an executor may run a block with a later limit (or none),
and the driver cuts the block's records back with `as_if_stopped_at` before writing them: the
trainer evaluates at the same geometric steps whatever its limit (`trainer.eval_steps`), so the
cut records equal, field for field, those the trainer writes when stopped there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from realnets.training.trainer import RunConfig, TrialSpec

# realnets.training.trainer's reason for a trial cut off by `stop_after` (kept equal to it by
# tests/realnets/sweeps/test_blocks.py, which compares with the trainer's own records)
STOPPED_BY_EARLIER = "stopped at step {step}: an earlier trial reached the goal there"


@dataclass(frozen=True)
class Block:
    """One group of trials of one batch size: `run` (stop_after None) applied to `trials`."""

    run: RunConfig
    trials: tuple[TrialSpec, ...]

    @property
    def batch_size(self) -> int:
        return self.run.batch_size


# An executor runs blocks and yields (index into `blocks`, the trainer's records) as each
# finishes, in any order. `stop_after(block)` is the serial limit known so far (None: none);
# the driver reads it again when it writes the block, so an executor may ask early.
Executor = Callable[[Sequence[Block], Callable[[Block], "int | None"]],
                    Iterable[tuple[int, list[dict]]]]


def _settled_at(record: dict) -> int | None:
    """The step at which a trial's fate was sealed (goal reached or diverged), else None."""
    if record["status"] == "COMPLETE":
        return record["steps_to_goal"]
    if record["status"] == "INFEASIBLE":
        return record["steps_run"]
    return None


def as_if_stopped_at(records: list[dict], stop_after: int | None) -> list[dict]:
    """A block's records as the trainer writes them when run with `stop_after`.

    Args:
      records: one record per trial of a block, as `run_trials` returned them with no limit or a
        limit >= `stop_after` (and stop_at_first_goal as the sweep has it).
      stop_after: the serial limit (a step at which the block evaluated), or None.

    Returns:
      The records unchanged when the block ended at or before `stop_after`; else each trial not
      settled by then cut to its evaluations up to `stop_after`, INCOMPLETE, with steps_to_goal
      None, steps_run `stop_after` and the trainer's reason.
    """
    if stop_after is None or not records:
        return records
    if max(r["steps_run"] for r in records) <= stop_after:
        return records
    out = []
    for r in records:
        settled = _settled_at(r)
        if settled is not None and settled <= stop_after:
            out.append(r)
            continue
        steps = r["eval"]["step"]
        if stop_after not in steps:
            raise ValueError(f"trial {r['trial_id']} at batch size {r['batch_size']} was not "
                             f"evaluated at step {stop_after}: a block can only be cut at one "
                             "of its evaluation steps")
        keep = steps.index(stop_after) + 1
        noise = r["noise_scale"]
        out.append({
            **r, "status": "INCOMPLETE", "steps_to_goal": None, "steps_run": stop_after,
            "reason": STOPPED_BY_EARLIER.format(step=stop_after),
            "eval": {k: v[:keep] for k, v in r["eval"].items()},
            "noise_scale": {k: v[:keep] if isinstance(v, list) else v
                            for k, v in noise.items()}})
    return out

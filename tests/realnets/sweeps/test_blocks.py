"""realnets.sweeps.blocks: a block's records cut to the serial rule equal the trainer's own records
when it is stopped there (the trainer is the independent truth: it really stops)."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from realnets import workloads
from realnets.sweeps.blocks import as_if_stopped_at
from realnets.training.trainer import RunConfig, TrialSpec, eval_steps, run_trials

# On the NQM (h_max = 1) at B = 256 a learning rate of 1e3 diverges at once, 1e-3 never reaches
# loss 0.1 in the budget, and 1.0 reaches it (step 85): one block holds all three fates.
TRIALS = [TrialSpec(0, 1e-3), TrialSpec(1, 1.0), TrialSpec(2, 1e3)]
RUN = RunConfig(batch_size=256, max_steps=400, goal=0.1, eval_resolution=0.1, seed=3)


@functools.lru_cache(maxsize=None)
def _task():
    return workloads.get("nqm").build()


def _run(stop_after=None, trials=tuple(TRIALS)):
    config = dataclasses.replace(RUN, stop_after=stop_after)
    return run_trials(_task(), config, list(trials), devices=_cpu1())


def _cpu1():
    import jax

    return jax.devices("cpu")[:1]


@functools.lru_cache(maxsize=None)
def _free():
    return _run()


def test_free_block_has_the_three_fates():
    statuses = [r["status"] for r in _free()]
    assert statuses == ["INCOMPLETE", "COMPLETE", "INFEASIBLE"]
    reached = _free()[1]["steps_to_goal"]
    assert _free()[2]["steps_run"] < 10 < reached     # diverged long before the goal


def test_cut_equals_the_trainer_stopped_there():
    reached = _free()[1]["steps_to_goal"]
    steps = eval_steps(RUN.max_steps, RUN.eval_resolution)
    # every evaluation step between the divergence and the goal: each one a different cut
    cuts = [s for s in steps if _free()[2]["steps_run"] <= s < reached]
    assert len(cuts) >= 3
    for cut in (cuts[0], cuts[len(cuts) // 2], cuts[-1]):
        stopped = _run(stop_after=cut)
        assert stopped[1]["status"] == "INCOMPLETE" and stopped[1]["steps_run"] == cut
        assert as_if_stopped_at(_free(), cut) == stopped


def test_a_later_limit_cut_back_equals_the_earlier_limit():
    """What a parallel executor does: run with a limit it knew (later), cut to the final one."""
    reached = _free()[1]["steps_to_goal"]
    steps = eval_steps(RUN.max_steps, RUN.eval_resolution)
    early, late = [s for s in steps if 10 < s < reached][:2]
    assert as_if_stopped_at(_run(stop_after=late), early) == _run(stop_after=early)


def test_a_block_that_ended_before_the_limit_is_unchanged():
    reached = _free()[1]["steps_to_goal"]
    assert as_if_stopped_at(_free(), reached) == _free()
    assert as_if_stopped_at(_free(), RUN.max_steps) == _free()
    assert as_if_stopped_at(_free(), None) == _free()
    assert _run(stop_after=reached) == _free()        # the trainer agrees: nothing to cut


def test_a_cut_between_evaluations_is_refused():
    reached = _free()[1]["steps_to_goal"]
    steps = eval_steps(RUN.max_steps, RUN.eval_resolution)
    between = next(s + 1 for s, t in zip(steps, steps[1:]) if t > s + 1 and 10 < s < reached)
    with pytest.raises(ValueError, match=f"not evaluated at step {between}"):
        as_if_stopped_at(_free(), between)


def _run_live(limit_from: int, limit: int):
    """The free block, told of `limit` only once it has passed step `limit_from` (a block that
    finished elsewhere in the meantime)."""
    seen = []

    def live_limit():
        return limit if seen and seen[-1] >= limit_from else None

    return run_trials(_task(), RUN, list(TRIALS), devices=_cpu1(), on_eval=seen.append,
                      live_limit=live_limit)


def test_a_live_limit_stops_the_block_and_cuts_back_to_the_serial_records():
    reached = _free()[1]["steps_to_goal"]
    steps = eval_steps(RUN.max_steps, RUN.eval_resolution)
    limit, later = [s for s in steps if 10 < s < reached][:2]
    # learned in time: the block stops at the limit, exactly as stop_after would have it
    assert _run_live(limit, limit) == _run(stop_after=limit)
    # learned late: it stops at the next evaluation, and the cut gives the serial records
    late = _run_live(later, limit)
    assert late[1]["steps_run"] == later and late[1]["status"] == "INCOMPLETE"
    assert as_if_stopped_at(late, limit) == _run(stop_after=limit)
    # a limit the block never passes changes nothing
    assert _run_live(0, reached) == _free()

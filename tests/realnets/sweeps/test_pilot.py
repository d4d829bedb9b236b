"""The goal rule: a pilot fixes the goal before a sweep (docs/prediction_rule.md).

The pilots run on one CPU device (`one_default_device`, tests/conftest.py): what is tested here
(the goal, the grouping of the trials, the log) does not depend on how a step is sharded.
"""

import json

import pytest

from realnets.cli import main
from realnets.sweeps.pilot import (GOAL_FRACTION, evaluations, goal_from_pilot,
                                   pilot_steps_to_goal)


def _records(curves):
    return [{"eval": {"step": list(range(1, len(c) + 1)), "metric": c}} for c in curves]


def test_rule_keeps_the_worse_end_and_goes_90_percent_of_the_way():
    small = _records([[0.9, 0.5, 0.2], [0.8, 0.3, 0.25], [0.7, None, None]])
    large = _records([[0.9, 0.6, 0.4], [0.85, 0.45, 0.35]])
    choice = goal_from_pilot(small, large, (16, 1024), 3)
    assert choice.metric_start == pytest.approx(0.8)          # median of 0.9, 0.8, 0.7
    assert (choice.best_small, choice.best_large) == (0.2, 0.35)
    assert choice.goal == pytest.approx(0.35 + GOAL_FRACTION * (0.8 - 0.35))
    assert choice.to_dict()["batch_sizes"] == [16, 1024]


def test_the_choice_records_the_fewest_steps_to_its_goal_at_the_smallest_batch_size():
    # goal 0.35 + 0.1 (0.8 - 0.35) = 0.395: the second small-batch trial is there at step 2
    # (0.3), the first at step 3 (0.2), the third never
    small = _records([[0.9, 0.5, 0.2], [0.8, 0.3, 0.25], [0.7, None, None]])
    large = _records([[0.9, 0.6, 0.4], [0.85, 0.45, 0.35]])
    choice = goal_from_pilot(small, large, (16, 1024), 3)
    assert choice.steps_small == 2 and choice.to_dict()["steps_small"] == 2
    assert pilot_steps_to_goal(small, 0.1) is None
    assert pilot_steps_to_goal(_records([[0.5, 0.05]]), 0.5) == 1      # at the goal counts


def test_a_floor_halves_the_fraction_until_the_goal_takes_enough_steps():
    # start 0.9, best 0.2 at both ends; the goals 0.27, 0.235, 0.2175, 0.20875, 0.204375 are
    # first reached at steps 4, 6, 7, 8, 9 by the one small-batch trial
    small = _records([[0.9, 0.3, 0.28, 0.26, 0.24, 0.22, 0.21, 0.205, 0.2]])
    large = _records([[0.9, 0.5, 0.2]])
    plain = goal_from_pilot(small, large, (8, 256), 1)
    assert (plain.fraction, plain.steps_small, plain.min_steps) == (GOAL_FRACTION, 4, None)
    floored = goal_from_pilot(small, large, (8, 256), 1, min_steps=6)
    assert floored.fraction == pytest.approx(GOAL_FRACTION / 2) and floored.steps_small == 6
    assert floored.goal == pytest.approx(0.2 + 0.05 * 0.7)
    assert floored.to_dict()["min_steps"] == 6
    assert goal_from_pilot(small, large, (8, 256), 1, min_steps=9).steps_small == 9
    assert goal_from_pilot(small, large, (8, 256), 1, min_steps=4).fraction == GOAL_FRACTION
    with pytest.raises(ValueError, match="goal-min-steps: no goal down to 0.00625"):
        goal_from_pilot(small, large, (8, 256), 1, min_steps=10)


def test_the_evaluation_at_which_a_trial_diverged_does_not_count():
    # the trainer records the metric at the evaluation where the loss blew up, but a sweep's trial
    # that diverges there has not reached the goal: the pilot must not count it either
    small = _records([[0.9, 0.5, 0.3], [0.8, 0.6, 0.05]])
    small[1]["status"] = "INFEASIBLE"
    large = _records([[0.9, 0.6, 0.4]])
    choice = goal_from_pilot(small, large, (16, 1024), 2)
    assert choice.best_small == pytest.approx(0.3)            # not the diverging 0.05
    assert pilot_steps_to_goal(small, 0.1) is None
    assert pilot_steps_to_goal(small, 0.6) == 2               # its earlier evaluations count
    # a trial that diverged at its first evaluation gives no starting metric
    first = _records([[0.9, 0.5], [5.0]])
    first[1]["status"] = "INFEASIBLE"
    assert goal_from_pilot(first, large, (16, 1024), 2).metric_start == pytest.approx(0.9)
    assert evaluations(first[1]) == [] and evaluations(small[0]) == [(1, 0.9), (2, 0.5), (3, 0.3)]


def test_a_pilot_that_never_improves_or_diverges_is_an_error():
    flat = _records([[0.5, 0.6, 0.7]])
    with pytest.raises(ValueError, match="did not improve"):
        goal_from_pilot(flat, flat, (16, 32), 1)
    diverged = _records([[None, None]])
    with pytest.raises(ValueError, match="diverged"):
        goal_from_pilot(_records([[0.5, 0.4]]), diverged, (16, 32), 1)


def test_goal_auto_runs_the_pilot_records_it_and_resumes(tmp_path, capsys, one_default_device):
    out = tmp_path / "sweep"
    argv = ["sweep", "--workload", "nqm", "--batch-sizes", "16,256", "--trials", "2",
            "--max-steps", "300", "--goal", "auto", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    choice = config["goal_choice"]
    assert config["goal"] == pytest.approx(choice["goal"])
    expected = max(choice["best_small"], choice["best_large"])
    assert choice["goal"] == pytest.approx(expected + 0.1 * (choice["metric_start"] - expected))
    assert choice["batch_sizes"] == [16, 256]
    # the pilot's 8 trials at each end are on record beside the sweep, after its header
    assert len((out / "pilot.jsonl").read_text().splitlines()) == 1 + 2 * 8
    lines = (out / "trials.jsonl").read_text().splitlines()
    # resuming with --goal auto reuses the recorded goal and runs nothing new
    assert main(argv + ["--trials", "2"]) == 0
    assert (out / "trials.jsonl").read_text().splitlines() == lines
    assert json.loads((out / "config.json").read_text())["goal"] == config["goal"]
    # a floor the recorded pilot did not have is refused before anything runs, and so is a floor
    # with a given goal or outside 1 .. max-steps
    capsys.readouterr()
    assert main(argv + ["--goal-min-steps", "5"]) == 2
    assert "resume it with the same flags" in capsys.readouterr().err
    given = ["sweep", "--workload", "nqm", "--batch-sizes", "16,256", "--trials", "2",
             "--max-steps", "300", "--goal", "0.5", "--out", str(tmp_path / "other"),
             "--no-progress"]
    assert main(given + ["--goal-min-steps", "5"]) == 2
    assert "applies only to --goal auto" in capsys.readouterr().err
    assert main(argv + ["--goal-min-steps", "301"]) == 2
    assert "goal-min-steps must be in 1 .. max-steps (300)" in capsys.readouterr().err
    assert (out / "trials.jsonl").read_text().splitlines() == lines


def _recorded_groups(monkeypatch, pilot) -> list:
    """The (batch size, trial ids) of each group the pilot trains, in order, as it trains them."""
    groups, real = [], pilot.run_trials
    monkeypatch.setattr(pilot, "run_trials", lambda task, run, specs, **kw: (
        groups.append((run.batch_size, [s.trial_id for s in specs])) or real(task, run, specs,
                                                                               **kw)))
    return groups


def test_the_pilot_runs_vmap_trials_to_a_program_and_chooses_the_same_goal(monkeypatch,
                                                                           one_default_device):
    """With --vmap-trials k the pilot's 8 trials run k to a compiled program, as the sweep's
    blocks do (a CNN is several times slower vmapped on XLA:CPU), and the goal is the one all
    8 together give: each trial's record does not depend on its group."""
    import dataclasses

    from realnets.sweeps import pilot
    from realnets.sweeps.records import SweepConfig
    from realnets.workloads import catalog
    from realnets.workloads.search_space import TrialSearchSpace

    workload = catalog.get("nqm")
    task = workload.build()
    config = SweepConfig(workload="nqm", batch_sizes=(16, 256), trials=8, max_steps=200,
                         goal=0.05, optimizer="sgd", search=TrialSearchSpace((0.05, 2.0)))
    groups = _recorded_groups(monkeypatch, pilot)
    together = pilot.run_pilot(task, config)
    assert groups == [(16, list(range(8))), (256, list(range(8)))]
    groups.clear()
    by_three = pilot.run_pilot(task, dataclasses.replace(config, vmap_trials=3))
    assert groups == [(b, ids) for b in (16, 256) for ids in ([0, 1, 2], [3, 4, 5], [6, 7])]
    assert by_three.goal == pytest.approx(together.goal, rel=1e-6)
    assert (by_three.best_small, by_three.best_large, by_three.metric_start) == pytest.approx(
        (together.best_small, together.best_large, together.metric_start), rel=1e-6)


def test_a_pilot_killed_part_way_resumes_from_its_log(tmp_path, monkeypatch, one_default_device):
    """The pilot's records go to pilot.jsonl group by group: killed after its first group, it
    runs only the other groups again and chooses the goal an uninterrupted pilot chooses; a log
    of another study's pilot is refused."""
    import dataclasses

    from realnets.sweeps import pilot
    from realnets.sweeps.records import SweepConfig
    from realnets.workloads import catalog
    from realnets.workloads.search_space import TrialSearchSpace

    task = catalog.get("nqm").build()
    config = SweepConfig(workload="nqm", batch_sizes=(16, 256), trials=8, max_steps=200,
                         goal=0.05, optimizer="sgd", search=TrialSearchSpace((0.05, 2.0)),
                         vmap_trials=4)
    whole = pilot.run_pilot(task, config, log=tmp_path / "whole" / pilot.PILOT_LOG)
    lines = (tmp_path / "whole" / pilot.PILOT_LOG).read_text().splitlines()
    assert len(lines) == 1 + 2 * 8 and json.loads(lines[0])["pilot"]["batch_sizes"] == [16, 256]

    real, groups = pilot.run_trials, []

    def killed_after_one_group(task, run, specs, **kw):
        if groups:
            raise KeyboardInterrupt       # the process is killed during its second group
        groups.append((run.batch_size, [s.trial_id for s in specs]))
        return real(task, run, specs, **kw)

    log = tmp_path / "killed" / pilot.PILOT_LOG
    monkeypatch.setattr(pilot, "run_trials", killed_after_one_group)
    with pytest.raises(KeyboardInterrupt):
        pilot.run_pilot(task, config, log=log)
    assert len(log.read_text().splitlines()) == 1 + 4          # the header and the first group
    with log.open("a") as f:
        f.write('{"batch_size": 16, "trial_id"')               # and a line cut short
    groups.clear()
    monkeypatch.setattr(pilot, "run_trials", lambda task, run, specs, **kw: (
        groups.append((run.batch_size, [s.trial_id for s in specs])) or real(task, run, specs,
                                                                               **kw)))
    resumed = pilot.run_pilot(task, config, log=log)
    assert groups == [(16, [4, 5, 6, 7]), (256, [0, 1, 2, 3]), (256, [4, 5, 6, 7])]
    assert resumed.goal == pytest.approx(whole.goal, rel=1e-9)
    keys = [(r["batch_size"], r["trial_id"])
            for r in map(json.loads, log.read_text().splitlines()[1:])]
    assert sorted(keys) == [(b, i) for b in (16, 256) for i in range(8)]
    # finished: a rerun trains nothing
    groups.clear()
    assert pilot.run_pilot(task, config, log=log).goal == resumed.goal and groups == []
    other = dataclasses.replace(config, max_steps=300)
    with pytest.raises(ValueError, match="holds the pilot of another study"):
        pilot.run_pilot(task, other, log=log)


def test_a_sweep_of_one_batch_size_pilots_it_once(monkeypatch, one_default_device):
    """A sweep of one batch size (as for `python -m realnets two-point`) pilots its 8 trials at
    that batch size once; both ends of the rule are that batch size, so its goal is the rule
    applied to those 8 trials, the goal the same trials give as the small end of a two-ended
    pilot where the large end is no worse."""
    import dataclasses

    from realnets.sweeps import pilot
    from realnets.sweeps.records import SweepConfig
    from realnets.workloads import catalog
    from realnets.workloads.search_space import TrialSearchSpace

    task = catalog.get("nqm").build()
    config = SweepConfig(workload="nqm", batch_sizes=(16,), trials=8, max_steps=200,
                         goal=0.05, optimizer="sgd", search=TrialSearchSpace((0.05, 2.0)))
    groups = _recorded_groups(monkeypatch, pilot)
    one = pilot.run_pilot(task, config)
    assert groups == [(16, list(range(8)))]
    assert one.batch_sizes == (16, 16) and one.best_small == one.best_large
    assert one.goal == pytest.approx(one.best_small + GOAL_FRACTION * (one.metric_start
                                                                       - one.best_small))
    both = pilot.run_pilot(task, dataclasses.replace(config, batch_sizes=(16, 256)))
    assert both.best_small == pytest.approx(one.best_small, rel=1e-9)
    assert both.metric_start == pytest.approx(one.metric_start, rel=1e-9)

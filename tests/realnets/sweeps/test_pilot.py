"""The goal rule: a pilot fixes the goal before a sweep (docs/prediction_rule.md)."""

import json

import pytest

from realnets.cli import main
from realnets.sweeps.pilot import GOAL_FRACTION, goal_from_pilot


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


def test_a_pilot_that_never_improves_or_diverges_is_an_error():
    flat = _records([[0.5, 0.6, 0.7]])
    with pytest.raises(ValueError, match="did not improve"):
        goal_from_pilot(flat, flat, (16, 32), 1)
    diverged = _records([[None, None]])
    with pytest.raises(ValueError, match="diverged"):
        goal_from_pilot(_records([[0.5, 0.4]]), diverged, (16, 32), 1)


def test_goal_auto_runs_the_pilot_records_it_and_resumes(tmp_path, capsys):
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
    lines = (out / "trials.jsonl").read_text().splitlines()
    # resuming with --goal auto reuses the recorded goal and runs nothing new
    assert main(argv + ["--trials", "2"]) == 0
    assert (out / "trials.jsonl").read_text().splitlines() == lines
    assert json.loads((out / "config.json").read_text())["goal"] == config["goal"]

"""realnets.validation.tuning_check: a report's tuned NQM curve against the engine's grid search
(docs/prediction_rule.md, session 37)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nqm.lowest_loss import lowest_loss
from nqm.tuning import OptimizerSpec, SearchSpace
from realnets.cli import main
from realnets.validation import tuning_check
from realnets.validation.bootstrap import fitted_nqm
from realnets.validation.reconciliation import headline

REPORTS = Path(__file__).resolve().parents[3] / "reports" / "validation"


def test_the_check_finds_where_the_tuner_stops_above_the_grid_search():
    """diabetes_mlp (momentum, d = 125): at B = 256 the tuned curve takes 8 steps where the grid
    search reaches the target in 6 (and not in 5); every point the check leaves alone is one the
    grid search does not beat by a step."""
    doc = json.loads((REPORTS / "diabetes_mlp" / "validation.json").read_text())
    got = tuning_check.check_report(doc)
    _, _, record, prediction = headline(doc)
    problem = fitted_nqm(record["nqm"], prediction["target"]).problem()
    spec = OptimizerSpec("momentum")
    space = SearchSpace(learning_rate=(1e-3, 3.0), one_minus_momentum=(1e-2, 1.0))
    at = {p["batch_size"]: p for p in got["points"]}
    assert (at[256]["tuned"], at[256]["grid"]) == (8, 6)
    assert lowest_loss(problem, spec, 256, 6, space).loss <= problem.target
    assert lowest_loss(problem, spec, 256, 5, space).loss > problem.target
    assert at[256] in got["short"]
    for p in got["points"]:
        if p not in got["short"]:
            assert lowest_loss(problem, spec, p["batch_size"], p["tuned"] - 1,
                               space).loss > problem.target
    row = tuning_check.table([got]).splitlines()[2]
    assert "256: 8 -> 6" in row and "| 25% |" in row
    # the tuned column's fit is the report's own stored fit of the same points
    assert got["b_crit"]["tuned"] == pytest.approx(prediction["tuned"]["fit"]["b_crit"],
                                                   rel=1e-6)
    assert got["b_crit"]["grid"] != pytest.approx(got["b_crit"]["tuned"], rel=1e-3)


def test_the_command_prints_the_table_and_refuses_bad_input(tmp_path, capsys):
    assert main(["tuning-check", str(REPORTS / "digits_mlp_sgd")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| workload | optimizer | batch sizes checked |")
    assert main(["tuning-check", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a directory" in err[0]
    doc = json.loads((REPORTS / "digits_mlp_sgd" / "validation.json").read_text())
    doc["checkpoints"]["goal"]["predictions"]["step_matched"]["tuned"] = None
    with pytest.raises(ValueError, match="no tuned step-matched headline curve"):
        tuning_check.check_report(doc)

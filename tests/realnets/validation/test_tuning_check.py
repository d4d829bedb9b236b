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


def test_rule_4_is_refitted_with_the_grid_s_steps():
    """With its two_ends.json and miss_split.json, diabetes_mlp's rule 4 with the tuned column is
    the report's own (summary.json's ratio), and with the grid's steps, where S_q(256) falls to
    n_q = 6 (no noise penalty left there), it is refitted from those steps by hand."""
    from nqm.scaling import fit_mccandlish
    from realnets.validation.files import side_records

    directory = REPORTS / "diabetes_mlp"
    doc = json.loads((directory / "validation.json").read_text())
    sides = side_records(directory, doc)
    got = tuning_check.check_report(doc, sides["two_ends"], sides["miss_split"])
    summary = {e["workload"] + e["optimizer"]: e for e in
               json.loads((REPORTS / "summary.json").read_text())}
    entry = summary[doc["workload"] + "momentum"]
    assert entry["rule"] == "rule_4"
    assert got["rule_4"]["tuned"]["ratio"] == pytest.approx(entry["ratio"], rel=1e-9)
    ends, split = sides["two_ends"], sides["miss_split"]
    s_fb, s_ref, n_q = (ends["full_set"]["steps"], ends["reruns"]["percentiles"]["50"],
                        split["n_q"])
    grid = {p["batch_size"]: p["grid"] for p in got["points"]}
    sizes = got["rule_4"]["grid"]["batch_sizes"]
    steps = [s_fb + (s_ref - s_fb) * max(0.0, (grid[b] - n_q) / (grid[ends["b_ref"]] - n_q))
             for b in sizes]
    assert grid[256] == n_q == 6
    assert got["rule_4"]["grid"]["value"] == pytest.approx(
        fit_mccandlish(sizes, steps).b_crit, rel=1e-9)
    assert "| 0.5137 -> " in tuning_check.table([got]).splitlines()[2]


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

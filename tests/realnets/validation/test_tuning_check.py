"""realnets.validation.tuning_check: a report's tuned NQM curve against the engine's grid search
(docs/prediction_rule.md, session 37)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from nqm.lowest_loss import lowest_loss
from nqm.tuning import OptimizerSpec, SearchSpace, tune_curve
from realnets.cli import main
from realnets.validation import tuning_check
from realnets.validation.bootstrap import fitted_nqm
from realnets.validation.reconciliation import headline

REPORTS = Path(__file__).resolve().parents[3] / "reports" / "validation"


def _uncertified(doc: dict) -> tuple[dict, object, OptimizerSpec, SearchSpace]:
    """diabetes_mlp's document with its headline curve tuned again without the certificate
    (`tune_curve(certify=False)`, the tuner the reports used before session 38), the fitted
    problem, the family and the space."""
    _, _, record, prediction = headline(doc)
    config = fitted_nqm(record["nqm"], prediction["target"])
    spec = OptimizerSpec("momentum")
    space = SearchSpace(learning_rate=(1e-3, 3.0), one_minus_momentum=(1e-2, 1.0))
    sizes = [p["batch_size"] for p in prediction["tuned"]["points"]]
    local = {p.batch_size: p.steps for p in tune_curve(config, spec, sizes, space=space).points}
    old = copy.deepcopy(doc)
    for p in headline(old)[3]["tuned"]["points"]:
        p["steps"] = local[p["batch_size"]]
    return old, config.problem(), spec, space


def test_the_check_finds_where_the_tuner_stops_above_the_grid_search():
    """diabetes_mlp (momentum, d = 125): tuned without the certificate, at B = 256 the curve takes
    8 steps where the grid search reaches the target in 6 (and not in 5); every point the check
    leaves alone is one the grid search does not beat by a step. The report's own curve, tuned
    with the certificate, has no such point."""
    doc = json.loads((REPORTS / "diabetes_mlp" / "validation.json").read_text())
    old, problem, spec, space = _uncertified(doc)
    got = tuning_check.check_report(old)
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
    assert got["b_crit"]["grid"] != pytest.approx(got["b_crit"]["tuned"], rel=1e-3)
    certified = tuning_check.check_report(doc)
    assert certified["short"] == []
    assert [p["tuned"] for p in certified["points"]] == [p["grid"] for p in got["points"]]
    # the tuned column's fit is the report's own stored fit of the same points
    _, _, _, prediction = headline(doc)
    assert certified["b_crit"]["tuned"] == pytest.approx(prediction["tuned"]["fit"]["b_crit"],
                                                         rel=1e-6)


def test_rule_4_is_refitted_with_the_grid_s_steps():
    """With its two_ends.json and miss_split.json, diabetes_mlp's rule 4 with the tuned column is
    the report's own (summary.json's ratio); with the uncertified curve's steps replaced by the
    grid's, where S_q(256) falls to n_q = 6 (no noise penalty left there), it is refitted from
    those steps by hand, and it is the certified report's."""
    from nqm.scaling import fit_mccandlish
    from realnets.validation.files import side_records

    directory = REPORTS / "diabetes_mlp"
    doc = json.loads((directory / "validation.json").read_text())
    sides = side_records(directory, doc)
    summary = {e["workload"] + e["optimizer"]: e for e in
               json.loads((REPORTS / "summary.json").read_text())}
    entry = summary[doc["workload"] + "momentum"]
    assert entry["rule"] == "rule_4"
    own = tuning_check.check_report(doc, sides["two_ends"], sides["miss_split"])
    assert own["rule_4"]["tuned"]["ratio"] == pytest.approx(entry["ratio"], rel=1e-9)
    old, _, _, _ = _uncertified(doc)
    got = tuning_check.check_report(old, sides["two_ends"], sides["miss_split"])
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
    assert got["rule_4"]["grid"]["ratio"] == pytest.approx(entry["ratio"], rel=1e-9)
    assert got["rule_4"]["tuned"]["ratio"] < 1.0 < got["rule_4"]["grid"]["ratio"]


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

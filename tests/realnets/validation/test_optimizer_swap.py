"""realnets.validation.optimizer_swap: a report's calibrated NQM tuned as another optimizer.

Swapped back to the report's own family and its sweep's own search space, the NQM rebuilt from
validation.json, its target rematched and its curve retuned must give the committed headline
curve: an independent path through fitted_nqm, step_matched_target and tune_curve to the numbers
the pipeline stored."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from nqm.linear_decay import DecaySearch, reference_final_losses
from nqm.tuning import SearchSpace
from realnets.cli import main as realnets_main
from realnets.validation.bootstrap import fitted_nqm
from realnets.validation.summary import rule_1_of
from realnets.validation.optimizer_swap import (comparison_rows, decay_search, monte_carlo_steps,
                                                own_prediction,
                                                swapped_prediction)

REPORTS = Path(__file__).resolve().parents[3] / "reports" / "validation"


def _doc(name):
    return json.loads((REPORTS / name / "validation.json").read_text())


def _sweep_space(doc):
    search = doc["sweep_config"]["search"]
    return SearchSpace(learning_rate=tuple(search["learning_rate"]),
                       one_minus_momentum=tuple(search["one_minus_momentum"]))


@pytest.mark.parametrize("name,family", [("digits_mlp", "momentum"),
                                         ("digits_mlp_adam", "adam")])
def test_the_own_family_gives_the_committed_headline_back(name, family):
    doc = _doc(name)
    own = own_prediction(doc)
    swapped = swapped_prediction(doc, family, _sweep_space(doc))
    assert swapped.target == pytest.approx(own["match"]["target"], rel=1e-6)
    assert list(swapped.steps) == [p["steps"] for p in own["tuned"]["points"]]
    assert swapped.b_crit == pytest.approx(own["tuned"]["fit"]["b_crit"], rel=1e-6)
    # side by side, both rows carry the report's own (rule 1's) ratio to the measured B_crit
    summary = json.loads((REPORTS / "summary.json").read_text())
    ratio = next(rule_1_of(e)["ratio"] for e in summary
                 if (e["workload"], e["optimizer"]) == (doc["workload"], family))
    assert [r["ratio"] for r in comparison_rows(doc, swapped)] == pytest.approx([ratio, ratio])


def test_a_report_without_a_step_matched_headline_is_refused():
    doc = _doc("digits_mlp")
    doc["settings"]["target_rule"] = "train_loss"
    with pytest.raises(ValueError, match="no step-matched headline"):
        own_prediction(doc)


def test_fitted_nqm_holds_the_stored_numbers():
    fitted = _doc("digits_mlp")["checkpoints"]["goal"]["nqm"]
    config = fitted_nqm(fitted, target=0.1)
    k = fitted["top_k"]
    assert config.dim == int(round(fitted["tail"]["dim"]["value"]))
    assert np.allclose(config.curvature[:k], fitted["top"]["curvature"]["value"])
    assert np.allclose(config.noise_variance[:k], fitted["top"]["noise_variance"]["value"])
    g = np.asarray(fitted["top"]["grad_components"]["value"])
    assert np.allclose(config.init_second_moments[:k], g ** 2 / np.asarray(config.curvature[:k]) ** 2)
    # the tail's noise is its fitted ratio times its curvature
    ratio = fitted["tail"]["noise_ratio"]["value"]
    assert np.allclose(np.asarray(config.noise_variance[k:]), ratio * np.asarray(config.curvature[k:]))


def test_another_family_is_matched_at_the_reference_point():
    """Adam on the momentum report's quadratic: its own target, reached at B_ref in S_ref steps
    (to one step: the curve's segments), and a curve that still falls with B."""
    doc = _doc("digits_mlp")
    own = own_prediction(doc)
    swapped = swapped_prediction(doc, "adam", SearchSpace(learning_rate=(1e-4, 1e-1),
                                                          one_minus_momentum=(0.05, 0.5)))
    assert swapped.family == "adam" and swapped.target != pytest.approx(own["match"]["target"])
    at_ref = swapped.steps[swapped.batch_sizes.index(own["match"]["batch_size"])]
    assert abs(at_ref - own["match"]["steps"]) <= 1
    assert all(a >= b for a, b in zip(swapped.steps, swapped.steps[1:]))
    assert swapped.b_crit is not None and swapped.b_crit > 0


def test_cli_prints_both_rows_and_refuses_bad_input(capsys, tmp_path):
    assert realnets_main(["swap-optimizer", str(REPORTS / "digits_mlp"), "--optimizer", "momentum",
                          "--lr-range", "1e-3,3", "--one-minus-momentum-range", "0.01,1"]) == 0
    out = capsys.readouterr().out
    assert "momentum (the rule's)" in out and "momentum (swapped in)" in out
    for argv, says in (
            (["--optimizer", "adam", "--lr-range", "1e-4,1e-1"], "--one-minus-momentum-range"),
            (["--optimizer", "sgd", "--lr-range", "1e-1,1e-4"], "learning_rate"),
            (["--optimizer", "sgd", "--lr-range", "1e-3,1", "--one-minus-momentum-range",
              "0.1,0.5"], "does not apply"),
            (["--optimizer", "rmsprop", "--lr-range", "1e-3,1"], "optimizer")):
        assert realnets_main(["swap-optimizer", str(REPORTS / "digits_mlp"), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and says in err and "\n" not in err
    assert realnets_main(["swap-optimizer", str(tmp_path / "absent"), "--optimizer", "sgd",
                          "--lr-range", "1e-3,1"]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_the_decay_reaches_the_same_target_in_at_most_the_constant_steps():
    """The decay is tuned from the constant curve at the same target: never more steps (the
    constant optimum is one of its candidates), and each tuned point, rerun by the numpy
    reference recurrence of nqm.linear_decay, reaches the target at its steps."""
    doc = _doc("digits_mlp")
    constant, decayed = swapped_prediction(doc, "momentum", _sweep_space(doc), decay=True)
    assert decayed.schedule == "linear_decay" and decayed.target == constant.target
    assert all(d <= c for d, c in zip(decayed.steps, constant.steps))
    assert decayed.steps[0] < constant.steps[0]          # the decay pays at the smallest batch
    problem = fitted_nqm(own_prediction(doc)["nqm"], target=decayed.target).problem()
    for p in decayed.curve.points:
        assert p.final_lr_fraction in DecaySearch().final_fractions
        loss = reference_final_losses(problem, "momentum", p.steps, p.batch_size,
                                      [p.learning_rate], [p.momentum], [p.final_lr_fraction])
        assert loss[0] <= decayed.target * (1 + 1e-9)
    rows = comparison_rows(doc, constant, decayed)
    assert [r["optimizer"] for r in rows] == ["momentum (the rule's)", "momentum (swapped in)",
                                              "momentum, linear decay"]


def test_the_decay_keeps_b1_inside_the_sweeps_space():
    space = SearchSpace(learning_rate=(1e-4, 1e-1), one_minus_momentum=(0.05, 0.5))
    assert decay_search("adam", space).betas == (0.5, 0.9)
    assert decay_search("momentum", SearchSpace(learning_rate=(1e-3, 3.0),
                                                one_minus_momentum=(0.2, 1.0))).betas \
        == (0.0, 0.3, 0.5, 0.7, 0.8)
    assert decay_search("sgd", SearchSpace(learning_rate=(1e-3, 1.0))).betas_for("sgd") == (0.0,)


def test_cli_decay_rows_json_and_refusal_before_tuning(capsys, monkeypatch):
    args = ["swap-optimizer", str(REPORTS / "digits_mlp"), "--optimizer", "momentum",
            "--lr-range", "1e-3,3", "--one-minus-momentum-range", "0.01,1", "--decay"]
    assert realnets_main(args + ["--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["optimizer"] for r in out["rows"]][-1] == "momentum, linear decay"
    assert out["decay"]["schedule"] == "linear_decay"
    assert [p["steps"] for p in out["decay"]["points"]] == out["rows"][-1]["steps"]
    assert all(0.0 <= p["final_lr_fraction"] <= 1.0 for p in out["decay"]["points"])
    assert realnets_main(args) == 0
    text = capsys.readouterr().out
    assert "decay's final fraction f at B = ...:" in text
    # the decay's tuned rate and momentum, printed as in the JSON (the NQM's choice per B)
    for name, key in (("learning rate a", "learning_rate"), ("momentum b", "momentum")):
        line = next(x for x in text.splitlines() if x.startswith(f"decay's {name} at B = ...: "))
        np.testing.assert_allclose([float(v) for v in line.split(": ")[1].split()],
                                   [p[key] for p in out["decay"]["points"]], rtol=1e-3)
    assert all(p["learning_rate"] <= 3.0 for p in out["decay"]["points"])   # inside --lr-range
    # its length: the NQM's decay spans its own run, the decay row's steps
    line = next(x for x in text.splitlines() if x.startswith("decay's length T (steps)"))
    assert line.split(": ")[1].split() == [str(s) if s else "-" for s in out["rows"][-1]["steps"]]
    # too much step-by-step work: refused on the report's own steps, before any tuning
    import realnets.validation.optimizer_swap as swap

    def no_tuning(*a, **k):
        raise AssertionError("tuned before refusing")
    monkeypatch.setattr(swap, "tune_curve", no_tuning)
    monkeypatch.setattr(swap.linear_decay, "MAX_WORK", 1.0)
    assert realnets_main(args) == 2
    err = capsys.readouterr().err
    assert "decay (estimated on the report's headline steps)" in err and err.count("\n") == 1


def test_a_scaled_start_scales_a_noiseless_momentum_nqm_exactly():
    """Without noise E[L](t) of momentum SGD is linear in the start's second moments, so scaling
    them by S scales the step-matched target by S and leaves every tuned step count alone (the
    noise set to 1e-30, the engine's inputs must be positive)."""
    doc = copy.deepcopy(_doc("digits_mlp"))
    nqm = doc["checkpoints"]["goal"]["nqm"]
    nqm["top"]["noise_variance"]["value"] = [1e-30] * len(nqm["top"]["noise_variance"]["value"])
    nqm["tail"]["noise_ratio"]["value"] = 1e-30
    space = _sweep_space(doc)
    plain = swapped_prediction(doc, "momentum", space)
    scaled = swapped_prediction(doc, "momentum", space, start_scale=0.3)
    assert scaled.target == pytest.approx(0.3 * plain.target, rel=1e-6)
    assert scaled.initial_loss == pytest.approx(0.3 * plain.initial_loss, rel=1e-12)
    assert scaled.steps == plain.steps
    assert scaled.label == "momentum (swapped in, start x 0.3)"
    assert scaled.to_dict()["start_scale"] == 0.3 and plain.start_scale == 1.0


def test_a_scaled_start_on_a_noisy_adam_nqm_is_still_matched_at_the_reference(capsys):
    doc = _doc("digits_mlp_adam")
    own = own_prediction(doc)
    scaled = swapped_prediction(doc, "adam", _sweep_space(doc), start_scale=0.5)
    at_ref = scaled.steps[scaled.batch_sizes.index(own["match"]["batch_size"])]
    assert abs(at_ref - own["match"]["steps"]) <= 1
    assert scaled.initial_loss == pytest.approx(
        0.5 * fitted_nqm(own["nqm"], target=1.0).problem().initial_loss(), rel=1e-12)
    for bad in ("0", "-1", "nan"):
        assert realnets_main(["swap-optimizer", str(REPORTS / "digits_mlp_adam"), "--optimizer",
                              "adam", "--lr-range", "1e-4,1e-1", "--one-minus-momentum-range",
                              "0.05,0.5", "--start-scale", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: --start-scale must be") and "\n" not in err


def test_real_adam_by_monte_carlo_follows_the_mean_field_at_the_tuned_points(capsys):
    """Two independent implementations, the mean-field closed form the tuner used and real Adam
    simulated on the same NQM, agree on steps to the target at the tuned points of digits'
    Adam report (measured with 2000 runs: 41 24 17 11 9 8 8 7 against 43 26 17 11 9 8 8 7)."""
    args = ["swap-optimizer", str(REPORTS / "digits_mlp_adam"), "--optimizer", "adam",
            "--lr-range", "1e-4,1e-1", "--one-minus-momentum-range", "0.05,0.5"]
    assert realnets_main(args + ["--monte-carlo", "400", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    mean_field = [p["steps"] for p in out["swapped"]["points"]]
    real = out["monte_carlo"]["steps"]
    assert out["monte_carlo"]["runs"] == 400 and len(real) == len(mean_field)
    for mf, mc in zip(mean_field, real):
        assert mc is not None and abs(mc - mf) <= 0.1 * mf + 2
    for extra, says in ((["--monte-carlo", "1"], ">= 2"),):
        assert realnets_main(args + extra) == 2
        assert says in capsys.readouterr().err
    assert realnets_main(["swap-optimizer", str(REPORTS / "digits_mlp"), "--optimizer",
                          "momentum", "--lr-range", "1e-3,3", "--one-minus-momentum-range",
                          "0.01,1", "--monte-carlo", "100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--optimizer adam only" in err and "\n" not in err


def test_real_adam_follows_the_mean_field_from_a_scaled_start_too():
    """The Monte Carlo starts where the swapped NQM did: from the scaled start it agrees with the
    mean field's steps (from the fitted start, 2.9 times the loss, it would not)."""
    doc = _doc("mnist_logreg")
    scaled = swapped_prediction(doc, "adam", _sweep_space(doc), start_scale=0.349)
    fitted = fitted_nqm(own_prediction(doc)["nqm"], target=1.0).problem()
    assert scaled.problem.initial_loss() == pytest.approx(0.349 * fitted.initial_loss(), rel=1e-12)
    assert scaled.problem.target == scaled.target
    real = monte_carlo_steps(scaled, runs=400)
    for mf, mc in zip(scaled.steps, real):
        assert mc is not None and abs(mc - mf) <= 0.15 * mf + 3
    with pytest.raises(ValueError, match="swapped Adam curve"):
        monte_carlo_steps(swapped_prediction(doc, "momentum", SearchSpace(
            learning_rate=(1e-3, 3.0), one_minus_momentum=(0.01, 1.0))), runs=400)

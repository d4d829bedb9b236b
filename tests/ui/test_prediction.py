"""ui.prediction: the NQM beside a measured curve, checked against curves whose fit is known by
construction and against the tuned NQM itself."""

import numpy as np
import pytest

from nqm import linear_decay
from nqm.curve import CurvePoint, ScalingCurve
from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, default_space, tune_curve
from ui import prediction
from ui.explorer import DECAY_OF
from realnets.workloads import NQM_WORKLOAD

POW2 = [16, 32, 64, 128, 256, 512, 1024]


def curve_of(s_min, b_crit, batch_sizes=POW2, source="measured"):
    """A curve exactly on S = s_min (1 + b_crit / B) (whole numbers for these arguments)."""
    points = []
    for b in batch_sizes:
        steps = s_min * (1 + b_crit / b)
        assert steps == int(steps)
        points.append(CurvePoint(b, int(steps), learning_rate=0.1))
    return ScalingCurve(tuple(points), source=source)


def test_comparison_ratio_of_known_fits():
    measured = curve_of(1024, 64)
    predicted = curve_of(4096, 256, source="nqm")
    c = prediction.compare(measured, predicted)
    assert c.b_crit_measured == pytest.approx(64, rel=1e-6)
    assert c.b_crit_predicted == pytest.approx(256, rel=1e-6)
    assert c.b_crit_ratio == pytest.approx(4.0, rel=1e-6)
    assert c.scale is None and "nqm_steps_scaled" not in c.table
    assert list(c.summary["b_crit_ratio"]) == pytest.approx([1.0, 4.0], rel=1e-6)
    np.testing.assert_array_equal(c.table["measured_steps"], measured.steps)
    np.testing.assert_array_equal(c.table["nqm_steps"], predicted.steps)
    assert set(c.points["curve"]) == {"measured", "NQM"}
    # the dotted fit line drawn behind each B_crit goes through these exact curves
    np.testing.assert_allclose(c.points["fit"], np.concatenate([measured.steps, predicted.steps]),
                               rtol=1e-6)


def test_scaling_to_the_measured_s_min_moves_only_s_min():
    measured = curve_of(1024, 64)
    predicted = curve_of(4096, 256, source="nqm")
    c = prediction.compare(measured, predicted, scale_to_measured=True, predicted_label="NQM")
    assert c.scale == pytest.approx(0.25, rel=1e-6)
    np.testing.assert_allclose(c.table["nqm_steps_scaled"], predicted.steps * 0.25, rtol=1e-6)
    nqm = c.summary.iloc[1]
    assert nqm["curve"] == "NQM x 0.25 (scaled to measured S_min)"
    assert nqm["s_min"] == pytest.approx(1024, rel=1e-6)       # = the measured S_min
    assert nqm["b_crit"] == pytest.approx(256, rel=1e-6)       # unchanged
    assert c.b_crit_ratio == pytest.approx(4.0, rel=1e-6)
    drawn = c.points[c.points["curve"] == nqm["curve"]]
    np.testing.assert_allclose(drawn["steps"], predicted.steps * 0.25, rtol=1e-6)
    np.testing.assert_allclose(drawn["perfect"],
                               predicted.steps[0] * 0.25 * 16 / drawn["batch_size"], rtol=1e-6)


def test_no_fit_no_ratio_and_no_scaling():
    measured = curve_of(1024, 64)
    lonely = ScalingCurve((CurvePoint(16, 500), CurvePoint(32, None)), source="nqm")
    c = prediction.compare(measured, lonely, scale_to_measured=True)
    assert c.b_crit_predicted is None and c.b_crit_ratio is None and c.scale is None
    assert "at least two batch sizes" in c.note
    # the unreached point stays NaN, never a number
    assert np.isnan(c.table.set_index("batch_size").loc[32, "nqm_steps"])


def test_the_nqm_workload_gets_the_exact_prediction():
    batch_sizes = (4, 16, 64, 256)
    setup = prediction.prediction_setup({"workload": "nqm", "goal": NQM_WORKLOAD.target,
                                      "optimizer": "sgd", "max_steps": 20000},
                                     NQMConfig(dim=300), "momentum")
    assert setup.exact and setup.config == NQM_WORKLOAD and setup.optimizer == OptimizerSpec("sgd")
    predicted = prediction.predict(setup, batch_sizes)
    exact = tune_curve(NQM_WORKLOAD, OptimizerSpec("sgd"), batch_sizes)
    np.testing.assert_array_equal(predicted.steps, exact.steps)
    bound = prediction.lower_bound(setup, batch_sizes)
    assert (bound["steps"].to_numpy() < predicted.steps).all()
    # a sweep of it that searched a linear decay: the exact model with the decay, tuned inside
    # the sweep's rate range, fewer steps at the small batch than the constant rate
    decayed = prediction.prediction_setup(
        {"workload": "nqm", "goal": NQM_WORKLOAD.target, "optimizer": "sgd", "max_steps": 20000,
         "search": {"learning_rate": [0.004, 4.0], "final_lr_fraction": [0.001, 1.0]}},
        NQMConfig(dim=300), "momentum")
    assert decayed.decay_bounds == (0.004, 4.0) and "linear decay" in decayed.label
    curve = prediction.predict(decayed, batch_sizes)
    direct = linear_decay.tune_decay_curve(NQM_WORKLOAD, "sgd", exact,
                                           learning_rate_bounds=(0.004, 4.0))
    np.testing.assert_array_equal(curve.steps, direct.steps)
    assert curve.steps[0] < 0.7 * exact.steps[0]
    assert all(p.learning_rate <= 4.0 for p in curve.points)
    # any other workload: the explorer's problem and optimizer, no bound drawn
    other = prediction.prediction_setup({"workload": "mnist_mlp"}, NQMConfig(dim=300),
                                        "momentum", 0.5)
    assert not other.exact and other.config == NQMConfig(dim=300)
    assert other.optimizer == OptimizerSpec("momentum", 0.5)
    assert prediction.lower_bound(other, batch_sizes) is None
    # the explorer's decays at their constant rate (every sweep ran at one), Adam at p = 0
    for name, power, want in (("momentum_decay", 0.0, OptimizerSpec("momentum")),
                              ("adam_decay", 0.0, OptimizerSpec("adam")),
                              ("adam", 0.5, OptimizerSpec("adam"))):
        setup = prediction.prediction_setup({"workload": "mnist_mlp"}, NQMConfig(dim=300), name,
                                            power)
        assert setup.optimizer == want and setup.label.startswith(f"NQM: {want.name}, d = 300")
        assert setup.decay_bounds is None and setup.explorer_optimizer == want.name


@pytest.mark.parametrize("name", ["momentum_decay", "adam_decay", "adam"])
def test_beside_a_sweep_that_searched_a_decay_the_explorers_curve_is_drawn_as_tuned(name):
    """The explorer's curve beside a network sweep that searched a decay (or whose published
    trials decayed): the constant curve in the family's default space, then for a decay
    `tune_decay_curve` from it within those rates, at p = 0, built here step by step."""
    config, batch_sizes = NQMConfig(dim=20, target=0.2), (4, 32, 256)
    # a high target: Adam's best rate at B = 256 lies above its own bound 1 (4.4 in [1e-8, 10])
    base = DECAY_OF.get(name, name)
    space = default_space(OptimizerSpec(base))
    want = tune_curve(config, OptimizerSpec(base), batch_sizes, prediction.NO_BUDGET, space)
    if name != base:
        want = linear_decay.tune_decay_curve(config.problem(), base, want,
                                             learning_rate_bounds=space.learning_rate)
    searched = {"workload": "digits_mlp", "search": {"learning_rate": [1e-3, 3.0],
                                                     "final_lr_fraction": [0.01, 1.0]}}
    published = {"workload": None, "dataset": "mnist"}          # a batch_science study's config
    for measured_config, decayed_trials in ((searched, False), (published, True)):
        setup = prediction.prediction_setup(measured_config, config, name, 0.5, decayed_trials)
        assert setup.explorer_optimizer == name and setup.decay_bounds is None
        assert ("linear decay" in setup.label) == (name != "adam")
        got = prediction.predict(setup, batch_sizes)
        np.testing.assert_array_equal(got.steps, want.steps)
        assert [(p.learning_rate, p.final_lr_fraction) for p in got.points] == [
            (p.learning_rate, p.final_lr_fraction) for p in want.points]
    # neither searched nor decayed: the constant rate
    assert prediction.prediction_setup(published, config, name, 0.5).explorer_optimizer == base

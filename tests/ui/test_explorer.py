"""ui.explorer: the tables the NQM explorer draws, here Adam's (tuned curve, surge preset) and
the linear decays'."""

import numpy as np
import pytest

from nqm import adam_rotated, linear_decay
from nqm.adam_tuning import AdamSearch, tune_adam_curve
from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, default_space, tune_curve
from ui import explorer


def test_adam_is_tuned_once_in_its_own_bounds_with_its_rate_as_the_effective_rate():
    config = NQMConfig(dim=20, target=0.02)
    result = explorer.explore(config, ("adam", "sgd"), (0.0, 0.5), (4, 256))
    labels = list(result.summary["optimizer"])
    assert labels == ["SGD", "SGD, p = 0.5", "Adam (mean field)"]  # Adam once, at p = 0
    rows = result.points[result.points["optimizer"] == "Adam (mean field)"]
    direct = tune_adam_curve(config, [4, 256], search=AdamSearch(max_steps=10 ** 8))
    np.testing.assert_array_equal(rows["steps"], direct.steps)
    np.testing.assert_allclose(rows["effective_lr"], rows["learning_rate"])


def test_adam_refused_above_its_dimension_limit():
    with pytest.raises(ValueError, match="d <= 300"):
        explorer.explore(NQMConfig(dim=1000), ("adam",), (0.0,), (4, 8))


def test_decays_are_tuned_once_from_their_constant_curve_in_its_bounds():
    """Each decay is tune_decay_curve on its optimizer's constant curve at p = 0 (tuned once,
    whatever the powers), within that optimizer's default rate bounds, and needs no more steps
    than the constant rate at any batch size."""
    config = NQMConfig(dim=12, target=0.02)
    batch = (4, 64, 1024)
    result = explorer.explore(config, ("momentum_decay", "momentum", "adam_decay", "sgd_decay"),
                              (0.5, 0.0), batch)
    assert list(result.summary["optimizer"]) == [
        "momentum, p = 0.5", "momentum", "SGD, linear decay", "momentum, linear decay",
        "Adam (mean field), linear decay"]
    for name in ("sgd", "momentum", "adam"):
        spec = OptimizerSpec(name)
        constant = tune_curve(config, spec, batch, 10 ** 8, default_space(spec))
        direct = linear_decay.tune_decay_curve(
            config, name, constant, learning_rate_bounds=default_space(spec).learning_rate)
        rows = result.points[result.points["optimizer"] == explorer.OPTIMIZER_LABELS[
            name + "_decay"]]
        np.testing.assert_array_equal(rows["steps"], direct.steps)
        np.testing.assert_array_equal(rows["final_lr_fraction"],
                                      [p.final_lr_fraction for p in direct.points])
        assert np.all(rows["steps"].to_numpy() <= constant.steps)
        low, high = default_space(spec).learning_rate
        assert np.all((rows["learning_rate"] >= low) & (rows["learning_rate"] <= high))
    decay = result.points[result.points["optimizer"] == "momentum, linear decay"]
    assert (decay["final_lr_fraction"] < 1).any()     # the decay is used somewhere


def test_decay_refused_before_tuning_when_too_much_work(monkeypatch):
    """The steps' lower bound already exceeds the work cap: one line naming the controls, before
    any tuning (tune_curve would raise)."""
    config = NQMConfig(dim=300, target=1e-4)
    problem = config.problem()
    assert linear_decay.estimated_work(problem, "adam", problem.lower_bound_steps([4])) \
        > linear_decay.MAX_WORK

    def no_tuning(*args, **kwargs):
        raise AssertionError("tuned before refusing")

    monkeypatch.setattr(explorer, "tune_curve", no_tuning)
    with pytest.raises(ValueError, match="linear decay: the step-by-step tuning .* fewer "
                                         "dimensions d"):
        explorer.explore(config, ("momentum", "adam_decay"), (0.0,), (4,))


def test_decay_refused_on_the_constant_curve_s_steps_and_constants_tuned_once(monkeypatch):
    """One constant tuning per optimizer and problem, shared by the constant and the decayed
    curve and by later selections; the second check, on the constant curve's own steps (above
    the lower bound's)."""
    config = NQMConfig(dim=12, target=0.02)
    calls = []
    real = explorer.tune_curve

    def counted(problem, spec, *args, **kwargs):
        calls.append(spec)
        return real(problem, spec, *args, **kwargs)

    monkeypatch.setattr(explorer, "tune_curve", counted)
    explorer.constant_curve.cache_clear()
    explorer.explore(config, ("momentum", "momentum_decay"), (0.0,), (4, 64))
    assert calls == [OptimizerSpec("momentum")]
    # a later selection with the same problem starts from the same constant curve
    explorer.explore(config, ("momentum_decay", "sgd"), (0.0,), (4, 64))
    assert calls == [OptimizerSpec("momentum"), OptimizerSpec("sgd")]
    problem = config.problem()
    constant = tune_curve(config, OptimizerSpec("momentum"), (4, 64))
    work = linear_decay.estimated_work(problem, "momentum", [p.steps for p in constant.points])
    assert work > linear_decay.estimated_work(problem, "momentum",
                                              problem.lower_bound_steps([4, 64]))
    monkeypatch.setattr(linear_decay, "MAX_WORK", 0.5 * work)   # between the two estimates
    for _ in range(2):      # refused again at a redraw without tuning the constant curve again
        with pytest.raises(ValueError, match="momentum, linear decay: .* direction-steps or more"):
            explorer.explore(config, ("momentum_decay",), (0.0,), (4, 64))
    assert len(calls) == 2


def test_surge_table_is_the_greedy_rate_of_both_models():
    """The preset's chart: d = 100, the doc's setting (docs/nqm_adam.md, Fact 2): the diagonal
    rate only rises, the rotated one with independent noise peaks at B = 2 < B_simple = 10.1
    (0.249) and falls to 0.175, and the caption says so in numbers."""
    config = NQMConfig(dim=100)
    batch = tuple(2 ** k for k in range(0, 17))
    table, b_simple, law = explorer.surge(config, batch)
    diag = table[table["model"] == "diagonal H"]["learning_rate"].to_numpy()
    rot = table[table["model"] == "rotated H, independent noise"]["learning_rate"].to_numpy()
    assert np.all(np.diff(diag) > 0)
    problem = config.problem()
    theta = np.random.default_rng(1).standard_normal(100)
    np.testing.assert_allclose(rot, adam_rotated.greedy_learning_rate(
        problem, adam_rotated.random_rotation(100, 0), theta, batch, independent_noise=True))
    assert b_simple == pytest.approx(10.1, abs=0.05)
    assert int(np.argmax(rot)) == 1 and rot[1] == pytest.approx(0.249, abs=5e-4)
    # Li et al.'s law: peak at tr H / Q = 1.44 (docs/nqm_adam.md, session 50), its curve the
    # rotated model's small-signal form, its peak rate within 1% of the model's (0.25, 0.249)
    assert law.peak_batch == pytest.approx(1.44, abs=0.005)
    line = table[table["model"] == explorer.LAW_MODEL]
    assert list(line["batch_size"]) == [1.0, 2.0, 4.0]        # a tenth of 1.44 to 3 times it
    np.testing.assert_allclose(line["learning_rate"], law.rate([1.0, 2.0, 4.0]))
    assert law.peak_rate == pytest.approx(rot.max(), rel=0.01)
    # the preset's range, 4 .. 16384, is taken down to B = 1: the peak at B = 2 is shown
    table4, _, _ = explorer.surge(config, tuple(2 ** k for k in range(2, 15)))
    assert sorted(set(table4["batch_size"]))[:3] == [1.0, 2.0, 4.0]
    caption4 = explorer.surge_caption(table4, b_simple, law)
    assert "a peak of 0.249 at B = 2 (+4%)" in caption4
    # the chart marks B_simple and the law's peak, each labelled; an infinite peak is not drawn
    from ui import charts

    chart = charts.surge_chart(table4, {"B_simple": b_simple, "B_peak (law)": law.peak_batch})
    for layer in chart.layer[1:]:
        assert list(layer.data["marker"]) == ["B_simple", "B_peak (law)"]
    chart = charts.surge_chart(table4, {"B_simple": b_simple, "B_peak (law)": float("inf")})
    assert list(chart.layer[1].data["marker"]) == ["B_simple"]
    caption = explorer.surge_caption(table, b_simple, law)
    assert "+4%" in caption and "-30%" in caption and "B = tr H / Q = 1.44" in caption
    with pytest.raises(ValueError, match="d <= 1000"):
        explorer.surge(NQMConfig(dim=3000), batch)

"""nqm.linear_decay: the trainer's linear decay against the constant-rate engines, an independent
recurrence, Monte Carlo of the real optimizers, and what the tuner must find."""

import numpy as np
import pytest

from nqm import adam, linear_decay, moments
from nqm.adam_tuning import tune_adam_curve
from nqm.curve import CurvePoint, ScalingCurve
from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, tune_curve


@pytest.fixture(scope="module")
def small():
    return NQMConfig(dim=8, target=0.01).problem()


def test_a_constant_rate_is_the_constant_engines(small):
    lr = np.array([0.02, 0.1, 0.3])
    got = linear_decay.final_losses(small, "momentum", 150, 8, lr, 0.9, 1.0)
    want = moments.expected_loss(small, [150], 8, lr, 0.9)[:, 0]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    got = linear_decay.final_losses(small, "adam", 150, 8, 0.02, 0.9, 1.0, beta2=0.99)
    np.testing.assert_allclose(got[0], adam.iterate_losses(small, 150, 8, 0.02, 0.9, 0.99)[-1],
                               rtol=1e-10)


def test_sgd_decay_is_the_scalar_recurrence(small):
    """b = 0: x_{t+1} = (1 - a_t h)^2 x_t + a_t^2 c / B with a_t = a (1 - (1 - f) t / T)."""
    T, B, a, f = 120, 4.0, 0.5, 0.05
    x = small.init_second_moment_D.copy()
    for t in range(T):
        at = a * (1.0 - (1.0 - f) * t / T)
        x = (1.0 - at * small.curvature_D) ** 2 * x + at ** 2 * small.noise_D / B
    want = 0.5 * small.curvature_D @ x
    got = linear_decay.final_losses(small, "momentum", T, B, a, 0.0, f)[0]
    assert got == pytest.approx(want, rel=1e-12)
    # the decay matters: the same run at a constant rate ends elsewhere
    assert linear_decay.final_losses(small, "momentum", T, B, a, 0.0, 1.0)[0] > 1.5 * want


def _monte_carlo(problem, optimizer, T, B, a, b, f, runs, seed, beta2=0.999):
    rng = np.random.default_rng(seed)
    h, c = problem.curvature_D, problem.noise_D
    theta = rng.standard_normal((runs, h.size)) * np.sqrt(problem.init_second_moment_D)
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    for t in range(T):
        at = a * (1.0 - (1.0 - f) * t / T)
        g = h * theta + rng.standard_normal(theta.shape) * np.sqrt(c / B)
        if optimizer == "momentum":
            m = b * m + g
            theta = theta - at * m
        else:
            m = b * m + (1.0 - b) * g
            v = beta2 * v + (1.0 - beta2) * g * g
            k = t + 1
            theta = theta - at * (m / (1.0 - b ** k)) / np.sqrt(v / (1.0 - beta2 ** k))
    loss = 0.5 * (theta ** 2) @ h
    return loss.mean(), loss.std() / np.sqrt(runs)


@pytest.mark.parametrize("optimizer, a, b, f", [("momentum", 0.2, 0.8, 0.1),
                                                ("adam", 0.05, 0.9, 0.05)])
def test_decay_against_monte_carlo_of_the_real_optimizer(small, optimizer, a, b, f):
    T, B = 200, 16.0
    model = linear_decay.final_losses(small, optimizer, T, B, a, b, f)[0]
    mean, se = _monte_carlo(small, optimizer, T, B, a, b, f, runs=4000, seed=3)
    # momentum is exact; Adam's mean field is within a few % of real Adam (docs/nqm_adam.md)
    slack = 0.0 if optimizer == "momentum" else 0.05 * mean
    assert abs(model - mean) <= 4.0 * se + slack, (model, mean, se)
    constant = linear_decay.final_losses(small, optimizer, T, B, a, b, 1.0)[0]
    assert abs(constant - mean) > 4.0 * se + slack     # the check can tell the schedule apart


@pytest.fixture(scope="module")
def momentum_curves():
    cfg = NQMConfig(dim=30, target=0.01)
    constant = tune_curve(cfg, OptimizerSpec("momentum"), [4, 64, 4096])
    return cfg, constant, linear_decay.tune_decay_curve(cfg, "momentum", constant)


def test_decay_pays_at_small_batch_only(momentum_curves):
    """Zhang et al. 2019, section 3.3: schedules help in the noise-dominated regime."""
    cfg, constant, decay = momentum_curves
    small_b, large_b = (d.steps / c.steps for c, d in zip(constant.points, decay.points)
                        if c.batch_size in (4, 4096))
    assert small_b < 0.6
    assert large_b > 0.85
    for c, d in zip(constant.points, decay.points):
        assert d.steps <= c.steps
        assert d.final_lr_fraction is not None and 0.0 <= d.final_lr_fraction <= 1.0


def test_the_tuned_point_reaches_the_target_and_no_candidate_does_much_earlier(momentum_curves):
    cfg, constant, decay = momentum_curves
    problem = cfg.problem()
    search = linear_decay.DecaySearch()
    for c, d in zip(constant.points, decay.points):
        loss = linear_decay.final_losses(problem, "momentum", d.steps, d.batch_size,
                                         d.learning_rate, d.momentum, d.final_lr_fraction)
        assert loss[0] <= cfg.target
        earlier = int(d.steps / (1.0 + 2 * search.precision)) - 1
        if earlier >= 1:
            lr, b, f, _ = linear_decay._candidates("momentum", c, search)
            assert linear_decay.final_losses(problem, "momentum", earlier, d.batch_size,
                                             lr, b, f).min() > cfg.target


def test_adam_with_decay_scales_further_than_momentum_with_decay():
    """With the trainer's schedule, mean-field Adam's B_crit exceeds momentum's
    (benchmarks/adam_decay.py, docs/nqm_adam.md); at a constant rate it does not."""
    cfg = NQMConfig(dim=8, target=0.01)
    batch = [4, 32, 256, 2048]
    fits = {}
    for name, constant in (("momentum", tune_curve(cfg, OptimizerSpec("momentum"), batch)),
                           ("adam", tune_adam_curve(cfg, batch))):
        fits[name, "constant"] = analyse_curve(constant).fit.b_crit
        decay = linear_decay.tune_decay_curve(cfg, name, constant)
        fits[name, "decay"] = analyse_curve(decay).fit.b_crit
    assert fits["adam", "decay"] > 2.0 * fits["momentum", "decay"], fits
    assert fits["adam", "constant"] < fits["momentum", "constant"], fits


def test_curve_point_keeps_its_final_fraction():
    p = CurvePoint(64, 10, 0.1, 0.9, final_lr_fraction=0.01)
    assert CurvePoint.from_dict(p.to_dict()) == p
    assert "final_lr_fraction" not in CurvePoint(64, 10, 0.1, 0.9).to_dict()


@pytest.mark.parametrize("kwargs, name", [
    (dict(optimizer="sgd"), "optimizer"),
    (dict(horizon=0), "horizon"),
    (dict(final_fraction=1.5), "final_fraction"),
    (dict(learning_rate=-0.1), "learning_rate"),
    (dict(beta=1.0), "beta"),
    (dict(batch_size=0), "batch_size"),
])
def test_bad_input_is_one_line_naming_the_parameter(small, kwargs, name):
    args = dict(optimizer="momentum", horizon=10, batch_size=4, learning_rate=0.1, beta=0.9,
                final_fraction=0.1) | kwargs
    with pytest.raises(ValueError, match=name) as err:
        linear_decay.final_losses(small, **args)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kwargs, name", [(dict(final_fractions=(2.0,)), "final_fractions"),
                                          (dict(rate_factors=(0.0, 1.0)), "rate_factors"),
                                          (dict(betas=(1.0,)), "betas"),
                                          (dict(precision=0.0), "precision")])
def test_bad_search_is_one_line(kwargs, name):
    with pytest.raises(ValueError, match=name):
        linear_decay.DecaySearch(**kwargs)


def test_tune_decay_curve_refuses_what_it_cannot_use(small):
    with pytest.raises(ValueError, match="constant"):
        linear_decay.tune_decay_curve(small, "adam", [CurvePoint(4, 10, 0.1, 0.9)])
    curve = ScalingCurve((CurvePoint(4, None),))
    assert linear_decay.tune_decay_curve(small, "adam", curve).points[0].steps is None

"""nqm.linear_decay: a linear decay of the rate over the run against the constant-rate engines,
independent recurrences, Monte Carlo of the real optimizers, and what the tuner must find."""

import numpy as np
import pytest

from nqm import adam, linear_decay, moments, recurrence
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


@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_compiled_loops_are_the_numpy_step_functions(optimizer):
    """nqm.decay_kernels marches the same recurrences as adam.one_step and MeanFieldAdam.advance
    (reference_final_losses): same losses row by row, including rows that diverge (inf in
    both; mean-field Adam's normalised step rises far above the start instead), b = 0, f = 0
    and f = 1, at a batch size with a finite training set."""
    problem = NQMConfig(dim=40, target=0.01, train_size=4096).problem()
    rng = np.random.default_rng(5)
    n = 24
    scale = 1.0 if optimizer == "momentum" else 0.05
    lr = scale * 10 ** rng.uniform(-3, 2.5, n)       # the top of the range diverges
    beta = rng.choice([0.0, 0.5, 0.9, 0.99], n)
    final = rng.choice([1.0, 0.3, 0.0], n)
    for batch, beta2 in ((16, 0.999), (1024, 0.0)):
        args = (problem, optimizer, 90, batch, lr, beta, final, beta2)
        want = linear_decay.reference_final_losses(*args)
        got = linear_decay.final_losses(*args)
        unstable = np.isinf(want) if optimizer == "momentum" else want > 10 * problem.initial_loss()
        assert unstable.any() and np.isfinite(want).sum() >= n // 2
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        ok = np.isfinite(want) & ~unstable
        np.testing.assert_allclose(got[ok], want[ok], rtol=1e-12)
        # where the loss runs away, a last-bit difference (the CPU's fused multiply-adds in the
        # compiled loop) grows with it
        rising = np.isfinite(want) & unstable
        np.testing.assert_allclose(got[rising], want[rising], rtol=1e-6)


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


def test_momentum_decay_is_the_general_recurrence(small):
    """nqm.recurrence iterates the 3x3 moments with any per-step rate: b = 0.8, f = 0.2."""
    T, B, a, f = 90, 8.0, 0.15, 0.2
    rates = a * (1.0 - (1.0 - f) * np.arange(T) / T)
    want = recurrence.iterate_losses(small, T, B, rates, momentum=0.8)[-1]
    got = linear_decay.final_losses(small, "momentum", T, B, a, 0.8, f)[0]
    assert got == pytest.approx(want, rel=1e-10)


def test_adam_decay_without_averages_is_the_per_node_recurrence(small):
    """b1 = b2 = 0: V is E[g^2] of the step, no bias correction, so each Gauss-Hermite start
    node z_k of each direction follows x' = (1 - eta h)^2 x + eta^2 s with
    eta = a_t / sqrt(h^2 x + s), s = c / B; the loss weighs the nodes by w_k."""
    T, B, a, f = 80, 16.0, 0.05, 0.1
    z, w = adam.init_quadrature(adam.INIT_NODES)
    h, s2 = small.curvature_D, small.noise_D / B
    x = z[:, None] ** 2 * small.init_second_moment_D[None, :]
    for t in range(T):
        eta = a * (1.0 - (1.0 - f) * t / T) / np.sqrt(h * h * x + s2)
        x = (1.0 - eta * h) ** 2 * x + eta * eta * s2
    want = float(w @ (x @ (0.5 * h)))
    got = linear_decay.final_losses(small, "adam", T, B, a, 0.0, f, beta2=0.0)[0]
    assert got == pytest.approx(want, rel=1e-10)


def test_the_trainer_s_held_decay_is_the_general_recurrence(small):
    """The trainer's schedule (linear to a f over T steps, then held at a f) through nqm.recurrence's
    3x3 moments; at T it is the decay that ends there (final_losses), and the first step at or
    below the target is its steps to target."""
    B, a, b, f, T, n = 8.0, 0.15, 0.8, 0.2, 40, 120
    rates = a * (1.0 - (1.0 - f) * np.minimum(np.arange(n), T) / T)
    np.testing.assert_array_equal(linear_decay.held_schedule(a, f, T, n), rates)
    want = recurrence.iterate_losses(small, n, B, rates, momentum=b)     # steps 0 .. n
    got = linear_decay.held_decay_losses(small, "momentum", B, a, b, f, T, n)
    assert got.shape == want.shape == (n + 1,)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert got[T] == pytest.approx(linear_decay.final_losses(small, "momentum", T, B, a, b, f)[0],
                                   rel=1e-10)
    # a decay over T steps then held is not the decay to the same f over the whole run
    assert got[n] < 0.9 * linear_decay.final_losses(small, "momentum", n, B, a, b, f)[0]
    target = float(np.quantile(got, 0.3))
    problem = NQMConfig(dim=8, target=target).problem()
    steps = linear_decay.held_decay_steps(problem, "momentum", B, a, b, f, T, n)
    assert steps == int(np.flatnonzero(got <= target)[0]) and got[steps - 1] > target
    assert linear_decay.held_decay_steps(problem, "momentum", B, a, b, f, T, 3) is None


def test_the_trainer_s_held_decay_for_adam_is_the_per_node_recurrence(small):
    """Adam with b1 = b2 = 0 (see the test above for the recurrence), with the held schedule."""
    B, a, f, T, n = 16.0, 0.05, 0.1, 30, 70
    z, w = adam.init_quadrature(adam.INIT_NODES)
    h, s2 = small.curvature_D, small.noise_D / B
    x = z[:, None] ** 2 * small.init_second_moment_D[None, :]
    want = []
    for t in range(n):
        eta = a * (1.0 - (1.0 - f) * min(t, T) / T) / np.sqrt(h * h * x + s2)
        x = (1.0 - eta * h) ** 2 * x + eta * eta * s2
        want.append(float(w @ (x @ (0.5 * h))))
    got = linear_decay.held_decay_losses(small, "adam", B, a, 0.0, f, T, n, beta2=0.0)
    np.testing.assert_allclose(got[1:], want, rtol=1e-10)
    # with its averages (b1 0.9, b2 0.99): at T it is the compiled loop's decay that ends there
    held = linear_decay.held_decay_losses(small, "adam", B, a, 0.9, f, T, n, beta2=0.99)
    assert held[T] == pytest.approx(linear_decay.final_losses(small, "adam", T, B, a, 0.9, f,
                                                              beta2=0.99)[0], rel=1e-10)


@pytest.mark.parametrize("kwargs, name", [({"decay_steps": 0}, "decay_steps"),
                                          ({"final_fraction": 1.5}, "final_fraction"),
                                          ({"steps": 2.5}, "steps"),
                                          ({"learning_rate": [0.1, 0.2]}, "learning_rate")])
def test_the_held_decay_refuses_bad_input_in_one_line(small, kwargs, name):
    args = {"problem": small, "optimizer": "momentum", "batch_size": 4.0, "learning_rate": 0.1,
            "beta": 0.5, "final_fraction": 0.1, "decay_steps": 10, "steps": 20, **kwargs}
    with pytest.raises(ValueError, match=f"^{name}"):
        linear_decay.held_decay_losses(**args)


def test_held_decay_steps_names_its_own_budget(small):
    with pytest.raises(ValueError, match="^max_steps must be a whole number"):
        linear_decay.held_decay_steps(small, "momentum", 4.0, 0.1, 0.5, 0.1, 10, 0)


def test_the_held_schedule_refuses_bad_input_in_one_line():
    for args, name in (((0.0, 0.5, 3, 5), "learning_rate"), ((0.1, -0.1, 3, 5), "final_fraction"),
                       ((0.1, 0.5, 0, 5), "decay_steps"), ((0.1, 0.5, 3, 0), "steps")):
        with pytest.raises(ValueError, match=f"^{name}"):
            linear_decay.held_schedule(*args)


def test_monte_carlo_of_momentum_is_its_exact_moments(small):
    """The library's Monte Carlo against the exact recurrence (its check for the Adam test)."""
    args = (small, "momentum", 60, 16.0, 0.2, 0.8)
    mean, se = linear_decay.simulate_final_losses(*args, 0.3, runs=4000, seed=3)
    exact = linear_decay.final_losses(*args, [0.3, 0.0, 1.0, 0.5])
    assert abs(exact[0] - mean) <= 4.0 * se
    assert np.all(np.abs(exact[1:] - mean) > 8.0 * se)     # it can tell the final fraction apart


def test_adam_decay_against_monte_carlo_of_real_adam(small):
    """Mean field against real Adam (b1 0.9, b2 0.999) where the final fraction matters: within
    4 standard errors + 2% (the mean field's error there, docs/nqm_adam.md), and f = 0, 1 or 0.4
    would each be outside that window."""
    args = (small, "adam", 150, 16.0, 0.03, 0.9)
    mean, se = linear_decay.simulate_final_losses(*args, 0.2, runs=4000, seed=3)
    model = linear_decay.final_losses(*args, [0.2, 0.0, 1.0, 0.4])
    window = 4.0 * se + 0.02 * mean
    assert abs(model[0] - mean) <= window, (model, mean, se)
    assert np.all(np.abs(model[1:] - mean) > window)


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


def test_sgd_is_momentum_without_momentum(small):
    """SGD's decay: the momentum loop with b = 0, tuned from the constant SGD curve with b = 0
    only; the decay pays at the small batch as for momentum."""
    lr, f = np.array([0.05, 0.2, 0.6]), np.array([1.0, 0.1, 0.0])
    exact = linear_decay.final_losses(small, "sgd", 40, 4, lr, 0.0, f)
    np.testing.assert_allclose(exact, linear_decay.reference_final_losses(
        small, "sgd", 40, 4, lr, 0.0, f), rtol=1e-12)
    # Monte Carlo of real SGD with the same schedule, within 4 standard errors
    mean, se = linear_decay.simulate_final_losses(small, "sgd", 40, 4, 0.2, 0.0, 0.1, runs=4000)
    assert abs(mean - exact[1]) < 4 * se
    cfg = NQMConfig(dim=30, target=0.01)
    constant = tune_curve(cfg, OptimizerSpec("sgd"), [4, 4096])
    decay = linear_decay.tune_decay_curve(cfg, "sgd", constant)
    assert all(p.momentum == 0.0 for p in decay.points)
    assert decay.points[0].steps < 0.6 * constant.points[0].steps
    with pytest.raises(ValueError, match="constant was tuned with optimizer 'sgd'"):
        linear_decay.tune_decay_curve(cfg, "momentum", constant)


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
    """With a linear decay (rates unbounded), mean-field Adam's B_crit exceeds momentum's
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
    (dict(optimizer="rmsprop"), "optimizer"),
    (dict(optimizer="sgd"), "beta must be 0 for optimizer sgd"),
    (dict(horizon=0), "horizon"),
    (dict(final_fraction=1.5), "final_fraction"),
    (dict(learning_rate=-0.1), "learning_rate"),
    (dict(beta=1.0), "beta"),
    (dict(batch_size=0), "batch_size"),
    (dict(optimizer="adam", beta2=[0.9, 0.99]), "beta2"),     # one b2 for all rows
    (dict(optimizer="adam", beta2=1.0), "beta2"),
])
def test_bad_input_is_one_line_naming_the_parameter(small, kwargs, name):
    args = dict(optimizer="momentum", horizon=10, batch_size=4, learning_rate=0.1, beta=0.9,
                final_fraction=0.1) | kwargs
    for run in (linear_decay.final_losses, linear_decay.reference_final_losses):
        with pytest.raises(ValueError, match=name) as err:
            run(small, **args)
        assert "\n" not in str(err.value)


def test_no_rows_give_no_losses(small):
    for optimizer in ("momentum", "adam"):
        assert linear_decay.final_losses(small, optimizer, 5, 4, [], 0.9, 1.0).shape == (0,)


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


def test_candidates_keep_momentum_s_effective_rate():
    point = CurvePoint(64, 100, 0.05, 0.9)
    lr, b, f, factor = linear_decay._candidates("momentum", point, linear_decay.DecaySearch())
    np.testing.assert_allclose(lr / (1.0 - b), factor * 0.05 / 0.1)
    assert ((factor == 1.0) & (b == 0.9) & (f == 1.0)).sum() == 1    # the constant optimum
    lr, b, f, factor = linear_decay._candidates("adam", point, linear_decay.DecaySearch())
    np.testing.assert_allclose(lr, factor * 0.05)


def test_short_constant_steps_double_then_bisect_and_edges_are_named(small):
    """A constant point whose steps cannot reach the target: the horizon doubles (or the point
    is unreached when no doubling is allowed); rates held at the point's own by tight bounds and
    the smallest final fraction chosen are named as edges."""
    point = CurvePoint(4, 1, 0.03, 0.9)
    found = linear_decay.tune_decay_point(small, "momentum", point,
                                          linear_decay.DecaySearch(max_doublings=12))
    assert found.steps is not None and found.steps > 1
    loss = linear_decay.final_losses(small, "momentum", found.steps, 4, found.learning_rate,
                                     found.momentum, found.final_lr_fraction)
    assert loss[0] <= small.target
    none = linear_decay.tune_decay_point(small, "momentum", point,
                                         linear_decay.DecaySearch(max_doublings=0))
    assert none.steps is None
    constant = tune_curve(NQMConfig(dim=8, target=0.01), OptimizerSpec("momentum"), [4]).points[0]
    a = constant.learning_rate
    b = constant.momentum
    edged = linear_decay.tune_decay_point(small, "momentum", constant,
                                          linear_decay.DecaySearch(final_fractions=(1.0, 0.3),
                                                                   betas=(b,)),
                                          learning_rate_bounds=(a / 1.01, 2.02 * a))
    assert edged.learning_rate == pytest.approx(2.0 * a) and edged.final_lr_fraction == 0.3
    assert edged.edge == ("learning_rate", "final_lr_fraction")
    assert edged.steps < constant.steps


def test_what_the_tuner_refuses(small):
    cfg = NQMConfig(dim=8, target=0.01)
    momentum = tune_curve(cfg, OptimizerSpec("momentum"), [4])
    with pytest.raises(ValueError, match="optimizer"):
        linear_decay.tune_decay_curve(cfg, "adam", momentum)
    with pytest.raises(ValueError, match="target"):
        linear_decay.tune_decay_curve(NQMConfig(dim=8, target=0.1), "momentum", momentum)
    with pytest.raises(ValueError, match="point steps"):
        linear_decay.tune_decay_point(small, "momentum", CurvePoint(4, 0, 0.1, 0.9))
    with pytest.raises(ValueError, match="point must be"):
        linear_decay.tune_decay_point(small, "momentum", {"batch_size": 4})
    with pytest.raises(ValueError, match="optimizer"):
        linear_decay.estimated_work(small, "ema", [10])
    with pytest.raises(ValueError, match="steps"):
        linear_decay.estimated_work(small, "adam", [-5])

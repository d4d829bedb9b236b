"""Gradient noise scale on the NQM: hand-derived values, the default problem, the trajectory, and
Monte-Carlo checks of what B_simple and B_noise mean (McCandlish et al. 2018, section 2.2)."""

import math

import numpy as np
import pytest

from nqm.moments import expected_loss
from nqm.noise_scale import initial_noise_scale, noise_scale_at, noise_scale_trajectory
from nqm.problem import NQMConfig, Problem, preconditioned
from nqm.recurrence import step_matrices


def _problem(h, c, x0=None):
    h = np.asarray(h, dtype=np.float64)
    x0 = np.ones_like(h) if x0 is None else np.asarray(x0, dtype=np.float64)
    return Problem(curvature_D=h, noise_D=np.asarray(c, dtype=np.float64),
                   init_second_moment_D=x0, target=0.01)


# h = (2, 1/2, 1), c = (1, 3, 2); theta chosen so |G|^2 = 1 and hence B_simple = tr(C) = 6.
H3 = (2.0, 0.5, 1.0)
C3 = (1.0, 3.0, 2.0)
THETA3 = np.array([0.25, 1.0, math.sqrt(0.5)])


def test_hand_derived_two_dimensions():
    problem = _problem([2.0, 0.5], [1.0, 3.0])
    # B_simple = (1 + 3) / (4 * 1 + 1/4 * 4) = 4/5; B_noise = (2 + 3/2) / (8 * 1 + 1/8 * 4) = 7/17.
    b_simple, b_noise = noise_scale_at(problem, [1.0, 4.0])
    assert isinstance(b_simple, float) and isinstance(b_noise, float)
    assert b_simple == pytest.approx(0.8, rel=1e-15)
    assert b_noise == pytest.approx(7.0 / 17.0, rel=1e-15)


def test_hand_derived_three_dimensions_and_rows():
    problem = _problem(H3, C3)
    # |G|^2 = 4/16 + 1/4 + 1/2 = 1; G^T H G = 8/16 + 1/8 + 1/2 = 9/8; tr(HC) = 2 + 3/2 + 2 = 11/2.
    b_simple, b_noise = noise_scale_at(problem, THETA3 ** 2)
    assert b_simple == pytest.approx(6.0, rel=1e-15)
    assert b_noise == pytest.approx((11.0 / 2.0) / (9.0 / 8.0), rel=1e-15)
    # (n, d) input: one value per row; a row at theta = 0 has no signal, so infinite noise scale.
    rows = np.stack([THETA3 ** 2, 4.0 * THETA3 ** 2, np.zeros(3)])
    b_simple_n, b_noise_n = noise_scale_at(problem, rows)
    assert b_simple_n.shape == b_noise_n.shape == (3,)
    np.testing.assert_allclose(b_simple_n[:2], [6.0, 1.5], rtol=1e-15)
    np.testing.assert_allclose(b_noise_n[:2], [44.0 / 9.0, 11.0 / 9.0], rtol=1e-15)
    assert np.isinf(b_simple_n[2]) and np.isinf(b_noise_n[2])


def test_default_problem_at_start():
    problem = NQMConfig().problem()
    assert problem.dim == 10_000
    inv = [1.0 / i for i in range(1, 10_001)]
    s1 = math.fsum(inv)
    s2 = math.fsum(x * x for x in inv)
    s3 = math.fsum(x * x * x for x in inv)
    b_simple, b_noise = initial_noise_scale(problem)
    assert b_simple == pytest.approx(s1 / s2, rel=1e-12)  # ~ 5.99
    assert b_noise == pytest.approx(s2 / s3, rel=1e-12)   # ~ 1.37
    assert 5.9 < b_simple < 6.0 and 1.36 < b_noise < 1.38


def test_sgd_trajectory_grows_as_loss_falls():
    """On the default problem E theta_i^2 falls towards a stationary value below 1 in every
    direction, so both noise scales rise monotonically while the loss falls, to a known limit."""
    problem = NQMConfig().problem()
    lr, batch = 1.0, 16
    steps = np.arange(0, 3001, 25)
    b_simple, b_noise = noise_scale_trajectory(problem, steps, batch, lr)
    loss = expected_loss(problem, steps, batch, lr)[0]
    assert b_simple.shape == b_noise.shape == (1, steps.size)
    falling = np.diff(loss) < -1e-9 * loss[1:]
    assert falling.all()  # the whole range: the slowest direction still contracts at t = 3000
    assert np.all(np.diff(b_simple[0]) > 0)
    assert np.all(np.diff(b_noise[0]) > 0)
    assert b_simple[0, -1] > 10 * b_simple[0, 0]
    # Stationary limit: E theta_i^2 -> a c_i / (B h_i (2 - a h_i)), so
    # E|G|^2 -> (a / B) sum h_i c_i / (2 - a h_i), G^T H G -> (a / B) sum h_i^2 c_i / (2 - a h_i).
    h, c = problem.curvature_D, problem.noise_D
    b_simple_inf, b_noise_inf = noise_scale_trajectory(problem, [10**6], batch, lr)
    assert b_simple_inf[0, 0] == pytest.approx(
        np.sum(c) / (lr / batch * np.sum(h * c / (2 - lr * h))), rel=1e-10)
    assert b_noise_inf[0, 0] == pytest.approx(
        np.sum(h * c) / (lr / batch * np.sum(h * h * c / (2 - lr * h))), rel=1e-10)


@pytest.mark.parametrize("momentum, ema_decay, precond_power", [
    (0.0, 0.0, 0.0), (0.7, 0.0, 0.0), (0.0, 0.9, 0.0), (0.7, 0.0, 0.5), (0.0, 0.9, 1.0)])
def test_trajectory_matches_iterated_theta_moment(momentum, ema_decay, precond_power):
    """The closed-form trajectory uses E theta^2 (not the velocity or the average): compare with
    the (theta, v, avg) recurrence iterated step by step."""
    problem = NQMConfig(dim=20, init_second_moment=2.0).problem()
    lr, batch, steps = 0.3, 8, 60
    b_simple, b_noise = noise_scale_trajectory(problem, np.arange(steps + 1), batch, lr,
                                               momentum, ema_decay, precond_power)
    h_eff, c_eff = preconditioned(problem.curvature_D, problem.noise_D, precond_power)
    F, f = step_matrices(h_eff, lr, momentum, ema_decay)
    S = np.zeros((problem.dim, 3, 3))
    S[:, 0, 0] = S[:, 0, 2] = S[:, 2, 0] = S[:, 2, 2] = problem.init_second_moment_D
    theta_sq = [S[:, 0, 0].copy()]
    for _ in range(steps):
        S = np.einsum("dij,djk,dlk->dil", F, S, F) + (c_eff / batch)[:, None, None] * (
            f[:, :, None] * f[:, None, :])
        theta_sq.append(S[:, 0, 0].copy())
    ref_simple, ref_noise = noise_scale_at(problem, np.array(theta_sq))
    np.testing.assert_allclose(b_simple[0], ref_simple, rtol=1e-9)
    np.testing.assert_allclose(b_noise[0], ref_noise, rtol=1e-9)


def test_trajectory_rows_and_unstable_rows():
    problem = NQMConfig(dim=50).problem()
    # Row 2 has a h_1 = 2.5 > 2: SGD diverges, so no noise scale.
    b_simple, b_noise = noise_scale_trajectory(problem, [0, 10, 100], [4, 64, 4],
                                               [0.5, 0.5, 2.5])
    assert b_simple.shape == b_noise.shape == (3, 3)
    start = initial_noise_scale(problem)
    np.testing.assert_allclose(b_simple[:2, 0], start[0], rtol=1e-14)
    np.testing.assert_allclose(b_noise[:2, 0], start[1], rtol=1e-14)
    assert np.all(np.isnan(b_simple[2])) and np.all(np.isnan(b_noise[2]))
    # The noise scale is set by E theta^2, which a larger batch drives lower: larger B_simple.
    assert b_simple[1, 2] > b_simple[0, 2]


def test_monte_carlo_signal_and_noise_of_a_batch_gradient():
    """E|g_B|^2 = |G|^2 + tr(C) / B for the mean g_B of B per-example gradients G + xi,
    xi ~ N(0, C); at B = B_simple the noise part equals the signal part (here |G|^2 = 1 and
    B_simple = 6)."""
    problem = _problem(H3, C3)
    h, c = problem.curvature_D, problem.noise_D
    grad = h * THETA3
    b_simple, _ = noise_scale_at(problem, THETA3 ** 2)
    assert b_simple == pytest.approx(6.0)
    rng = np.random.default_rng(0)
    samples = 40_000
    for batch in (1, 2, 6, 16):
        per_example = grad + rng.standard_normal((samples, batch, 3)) * np.sqrt(c)
        sq_norm = np.sum(per_example.mean(axis=1) ** 2, axis=1)
        expected = np.dot(grad, grad) + np.sum(c) / batch
        stderr = sq_norm.std(ddof=1) / math.sqrt(samples)
        assert abs(sq_norm.mean() - expected) < 4 * stderr, (batch, sq_norm.mean(), expected)
        assert stderr < 0.02 * expected
        if batch == 6:
            assert expected == pytest.approx(2.0 * np.dot(grad, grad))  # noise = signal

    # docs/design.md, 'Noise scale': the two-batch-size estimator, with the small batch (b = 1) a
    # part of the big one (B = 16) as in a data-parallel step; numerator and denominator averaged first.
    per_example = grad + rng.standard_normal((samples, 16, 3)) * np.sqrt(c)
    small = np.sum(per_example[:, 0] ** 2, axis=1)
    big = np.sum(per_example.mean(axis=1) ** 2, axis=1)
    grad_sq_norm = np.mean((16 * big - small) / 15)
    trace_cov = np.mean((small - big) / (1 - 1 / 16))
    # Tolerances are ~4 standard deviations of each estimate at this sample size (measured over
    # 20 seeds: 0.46%, 0.49% and 0.83%).
    assert grad_sq_norm == pytest.approx(1.0, rel=0.02)
    assert trace_cov == pytest.approx(6.0, rel=0.02)
    assert trace_cov / grad_sq_norm == pytest.approx(b_simple, rel=0.035)


def test_monte_carlo_optimal_step_at_b_noise_gains_half():
    """At batch size B_noise the best SGD step gains half what a noiseless step gains:
    with eps(B) = |G|^2 / (G^T H G + tr(HC) / B), E[L(theta) - L(theta - eps g_B)] is
    |G|^4 / (2 (G^T H G + tr(HC) / B)) = dL_max / (1 + B_noise / B)."""
    problem = _problem(H3, C3)
    h, c = problem.curvature_D, problem.noise_D
    grad = h * THETA3
    _, b_noise = noise_scale_at(problem, THETA3 ** 2)
    g2, ghg = np.dot(grad, grad), np.dot(grad, h * grad)
    gain_max = g2 * g2 / (2 * ghg)
    rng = np.random.default_rng(1)
    samples = 200_000

    def loss(theta):
        return 0.5 * theta ** 2 @ h

    for batch, expected_fraction in ((b_noise, 0.5), (4 * b_noise, 0.8)):
        step = g2 / (ghg + np.dot(h, c) / batch)
        g = grad + rng.standard_normal((samples, 3)) * np.sqrt(c / batch)
        gain = loss(THETA3) - loss(THETA3 - step * g)
        stderr = gain.std(ddof=1) / math.sqrt(samples)
        assert abs(gain.mean() - expected_fraction * gain_max) < 4 * stderr
        assert stderr < 0.02 * gain_max


@pytest.mark.parametrize("second_moment, message", [
    (np.ones(4), r"second_moment must have shape \(d,\) or \(n, d\) with d = 3, got shape \(4,\)"),
    (np.ones((2, 2, 3)), r"got shape \(2, 2, 3\)"),
    (np.array([1.0, -0.5, 1.0]), "second_moment must be >= 0 everywhere, got -0.5"),
    (np.array([1.0, np.nan, 1.0]), "second_moment must be finite everywhere"),
    ("abc", "second_moment must be an array of numbers"),
])
def test_bad_second_moment(second_moment, message):
    with pytest.raises(ValueError, match=message):
        noise_scale_at(_problem(H3, C3), second_moment)


@pytest.mark.parametrize("steps", [[-1, 2], [0.5], [[1, 2]], ["a"]])
def test_bad_steps(steps):
    with pytest.raises(ValueError, match="steps must be whole numbers >= 0"):
        noise_scale_trajectory(_problem(H3, C3), steps, 4, 0.1)


def test_bad_metaparameters_are_reported_by_the_engine():
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\), got 1"):
        noise_scale_trajectory(_problem(H3, C3), [0, 1], 4, 0.1, momentum=1.0)


def test_mixing_momentum_rows_and_averaging_rows_is_refused():
    with pytest.raises(ValueError, match="cannot both be > 0"):
        noise_scale_trajectory(_problem(H3, C3), [0, 1], 4, 0.1, momentum=[0.5, 0.0],
                               ema_decay=[0.0, 0.9])
    with pytest.raises(ValueError, match="cannot both be > 0"):
        noise_scale_trajectory(_problem(H3, C3), [0, 1], 4, 0.1, momentum=0.5, ema_decay=0.9)

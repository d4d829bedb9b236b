"""nqm.adam, nqm.adam_rotated, nqm.adam_tuning: mean-field Adam against its step-by-step recurrence,
against Monte Carlo of real Adam, and what the model says about the two published facts
(docs/nqm_adam.md)."""

import numpy as np
import pytest

from nqm import adam, adam_rotated
from nqm.adam_tuning import AdamSearch, tune_adam_curve
from nqm.problem import NQMConfig, Problem
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, default_space, tune_curve

CHECK = [1, 10, 50, 100, 300, 1000, 2000]


@pytest.fixture(scope="module")
def problem():
    return NQMConfig(dim=16).problem()


@pytest.mark.parametrize("batch, lr, b1, b2", [(4, 0.01, 0.9, 0.999), (4, 0.05, 0.9, 0.99),
                                               (64, 0.02, 0.9, 0.0), (16, 0.01, 0.0, 0.999)])
def test_segments_match_the_step_by_step_mean_field(problem, batch, lr, b1, b2):
    ref = adam.iterate_losses(problem, 2000, batch, lr, b1, b2)[CHECK]
    errors = [np.max(np.abs(adam.expected_loss(problem, CHECK, batch, lr, b1, b2, growth=g)[0]
                            / ref - 1.0)) for g in (0.2, 0.05)]
    assert errors[1] < 2e-3           # the default growth: measured 2e-5 .. 1.5e-3
    assert errors[1] < errors[0]      # shorter segments are more accurate


def _segment_cases(k=40, d=30, max_n=3000, seed=0):
    """Stable rows over every branch of the Lucas sequence: b1 = 0, complex and real roots,
    negative tau (eta h > 1 + b), critical damping eta h = (1 - sqrt b)^2 exactly, n = 0 (with
    b1 = 0 and with b1 > 0); n drawn log-uniformly so most rows keep a transient."""
    rng = np.random.default_rng(seed)
    h = 10 ** rng.uniform(-3, 1, d)
    b = rng.choice([0.0, 0.5, 0.9, 0.99], (k, 1))
    b[:3] = [[0.81], [0.0], [0.5]]
    eta = rng.uniform(0.0, 1.0, (k, d)) * 2 * (1 + b) * 0.999 / h
    eta[0] = (1 - np.sqrt(b[0])) ** 2 / h                         # critical damping
    lo, hi = (1 + np.sqrt(b[3])) ** 2, 2 * (1 + b[3])              # real roots, tau < 0, stable
    eta[3] = (lo + np.linspace(0.05, 0.95, d) * (hi - lo)) / h
    sig = 10 ** rng.uniform(-4, 0, (k, d))
    s11, s22 = 10 ** rng.uniform(-3, 1, (k, d)), 10 ** rng.uniform(-3, 1, (k, d))
    s12 = 0.1 * rng.standard_normal((k, d))
    n = np.floor(10 ** rng.uniform(0, np.log10(max_n), (k, 1))).astype(np.int64)
    n[1:3] = 0                                                   # b1 = 0 and b1 = 0.5
    n[3] = 3
    return s11, s12, s22, eta, h, b, sig, n


def _real_negative_tau(args):
    """Elements with real roots and tau < 0: eta h >= (1 + sqrt b)^2 (and below the stability
    edge 2 (1 + b) in the cases)."""
    eta, h, b = args[3], args[4], args[5]
    return eta * h >= (1 + np.sqrt(b)) ** 2


def test_compiled_segment_equals_the_numpy_closed_form():
    args = _segment_cases()
    eta, h, b, n = args[3], args[4], args[5], args[7]
    assert (b == 0).any() and _real_negative_tau(args)[3].all()   # the cases reach every branch
    assert adam.stable(eta, h, b).all()
    assert ((b == 0) & (n == 0)).any() and (n < 50).mean() > 0.3
    for got, want in zip(adam.closed_form(*args), adam.closed_form_reference(*args)):
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    # h given per row, (k, d), is the same as (d,)
    per_row = args[:4] + (np.broadcast_to(h, eta.shape),) + args[5:]
    for got, want in zip(adam.closed_form(*per_row), adam.closed_form(*args)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="sigma2"):
        adam.closed_form(*args[:6], args[6][:2], n)


def test_compiled_segment_equals_repeated_single_steps():
    s11, s12, s22, eta, h, b, sig, n = _segment_cases(k=12, d=8, max_n=60, seed=1)
    assert _real_negative_tau((s11, s12, s22, eta, h, b))[3].any() and (n[1:3] == 0).all()
    got = adam.closed_form(s11, s12, s22, eta, h, b, sig, n)
    for r in range(12):
        state = (s11[r], s12[r], s22[r])
        for _ in range(int(n[r, 0])):
            state = adam.one_step(*state, eta[r], h, b[r], sig[r])
        for g, w in zip(got, state):
            np.testing.assert_allclose(g[r], w, rtol=1e-6, atol=1e-12)   # rounding over 60 steps: 4e-8


@pytest.mark.parametrize("dim", [40, 160])
def test_compiled_advance_equals_the_numpy_advance(dim):
    """MeanFieldAdam.advance (`nqm.adam_kernels.advance_rows`) against `advance_reference`, the
    numpy form it replaced: the same bits in every state array, step size and step count along
    a march over a changing subset of rows, with rows that take segments, rows that fall back
    to one exact step (a frozen step size unstable at large rates), b1 = 0, b2 = 0, epsilon > 0
    and a batch size equal to the finite training set (no noise). At dim 40 (160 mean-field
    directions) every call runs its rows serially, at dim 160 on all cores (`PARALLEL_MIN_WORK`
    rows x directions): both paths give the reference's bits."""
    from nqm import adam_kernels

    problem = NQMConfig(dim=dim, target=0.01, train_size=4096).problem()
    rng = np.random.default_rng(3)
    n = 32
    args = (problem, rng.choice([4.0, 64.0, 4096.0], n), 10 ** rng.uniform(-4, 0.5, n),
            rng.choice([0.0, 0.5, 0.9, 0.99], n), rng.choice([0.0, 0.99, 0.999], n),
            rng.choice([0.0, 1e-8], n))
    new, ref = adam.MeanFieldAdam(*args), adam.MeanFieldAdam(*args)
    fallbacks = segments = parallel = 0
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(150):
            idx = np.flatnonzero(rng.random(n) < 0.8)
            parallel += (idx.size >= adam_kernels.PARALLEL_MIN_ROWS
                         and idx.size * new.h_D.size >= adam_kernels.PARALLEL_MIN_WORK)
            lengths = new.segment_lengths(idx, np.full(idx.size, 5000), 0.1)
            got, want = new.advance(idx, lengths), ref.advance_reference(idx, lengths)
            for g, w in zip((got[0], got[1], *got[2]), (want[0], want[1], *want[2])):
                np.testing.assert_array_equal(g, w)
            for name in ("s11", "s12", "s22", "V", "t_N"):
                np.testing.assert_array_equal(getattr(new, name), getattr(ref, name))
            fallbacks += int(np.sum((lengths > 1) & (got[0] == 1)))
            segments += int(np.sum(got[0] > 1))
    assert fallbacks > 0 and segments > 0
    assert parallel == (0 if dim == 40 else 150)
    assert np.isfinite(new.loss()).all() and new.t_N.min() > 100
    with pytest.raises(ValueError, match="distinct"):   # a repeated row would race
        new.advance(np.array([0, 1, 0]), np.full(3, 10))


def test_tuned_curve_is_the_same_with_the_numpy_advance(problem):
    """The tuner and its certificate (`tune_curve(certify=True)`, as the validation runs it) choose
    the same steps, rates and b1 with the compiled advance as with the numpy one."""
    from unittest import mock

    spec = OptimizerSpec("adam", beta1=(0.5, 0.9))
    space = default_space(spec)
    config = NQMConfig(dim=16, target=0.05)
    got = tune_curve(config, spec, [4, 64, 1024], space=space, certify=True)
    with mock.patch.object(adam.MeanFieldAdam, "advance", adam.MeanFieldAdam.advance_reference):
        want = tune_curve(config, spec, [4, 64, 1024], space=space, certify=True)
    assert [(p.steps, p.learning_rate, p.momentum) for p in got.points] \
        == [(p.steps, p.learning_rate, p.momentum) for p in want.points]
    assert all(p.steps > 1 for p in got.points)


def test_steps_to_target_is_the_first_crossing_of_the_recurrence():
    problem = NQMConfig(dim=16, target=0.05).problem()
    lrs = np.array([0.003, 0.01, 0.03])
    got = adam.steps_to_target(problem, 8, lrs, 0.9, 0.999, max_steps=5000)
    for a, s in zip(lrs, got):
        ref = adam.iterate_losses(problem, 5000, 8, a, 0.9, 0.999)
        first = int(np.flatnonzero(ref <= problem.target)[0])
        assert abs(s - first) <= max(2, 0.01 * first)


@pytest.fixture(scope="module")
def real_adam(problem):
    return adam.simulate_losses(problem, 300, 4, 0.01, 0.9, 0.999, runs=400, seed=3)


def test_mean_field_conditioned_on_the_start_matches_real_adam(problem, real_adam):
    steps = [10, 50, 100, 300]
    model = adam.expected_loss(problem, steps, 4, 0.01, 0.9, 0.999)[0]
    z = (model - real_adam.mean_T[steps]) / real_adam.stderr_T[steps]
    assert np.all(np.abs(z) < 4), z


def test_plain_mean_field_over_the_start_does_not(problem, real_adam):
    # init_nodes=1 replaces each run's own |theta_0| by the ensemble's: the check has power.
    steps = [50, 100, 300]
    model = adam.expected_loss(problem, steps, 4, 0.01, 0.9, 0.999, init_nodes=1)[0]
    z = (model - real_adam.mean_T[steps]) / real_adam.stderr_T[steps]
    assert np.min(z) < -5


def test_sign_like_adam_is_outside_the_mean_field(problem):
    # b1 = b2 = 0: real Adam is sign descent, the mean field g / rms(g); they part at late steps.
    real = adam.simulate_losses(problem, 400, 4, 0.01, 0.0, 0.0, runs=200, seed=4)
    model = adam.expected_loss(problem, [400], 4, 0.01, 0.0, 0.0)[0, 0]
    assert abs(model / real.mean_T[400] - 1.0) > 0.3


def test_rotation_identity_is_the_diagonal_model(problem):
    rot = adam_rotated.iterate_losses(problem, np.eye(16), 200, 4, 0.02, 0.9, 0.99)[0]
    diag = adam.iterate_losses(problem, 200, 4, 0.02, 0.9, 0.99, init_nodes=1)
    np.testing.assert_allclose(rot, diag, rtol=1e-12)


def test_real_adam_without_a_rotation_is_real_adam_in_the_identity_rotation(problem):
    """The unrotated Monte Carlo skips the d x d products; with the same seed it draws the same
    numbers and takes the same steps as with R = I."""
    plain = adam.simulate_losses(problem, 60, 4, 0.02, 0.9, 0.99, runs=50, seed=7)
    eye = adam.simulate_losses(problem, 60, 4, 0.02, 0.9, 0.99, runs=50, seed=7,
                               rotation_DD=np.eye(problem.dim))
    np.testing.assert_array_equal(plain.mean_T, eye.mean_T)


def test_rotated_mean_field_against_real_adam():
    # No conditioning on the start here (init_nodes=1 equivalent): the stationary phase agrees,
    # the transient is off like the diagonal model's init_nodes=1.
    problem = NQMConfig(dim=8).problem()
    R = adam_rotated.random_rotation(8, 0)
    model = adam_rotated.iterate_losses(problem, R, 1500, 4, 0.02, 0.9, 0.99)[0]
    real = adam.simulate_losses(problem, 1500, 4, 0.02, 0.9, 0.99, runs=300, seed=5,
                                rotation_DD=R)
    assert abs(model[1500] / real.mean_T[1500] - 1.0) < 0.1
    assert model[100] < 0.8 * real.mean_T[100]


def test_fact_zhang_adam_small_batch_like_sqrt_preconditioning():
    """What mean-field Adam does against momentum (docs/nqm_adam.md, 'Fact 1'): at small B it
    needs about as few steps as momentum with P = H^-1/2 and far fewer than plain momentum, but
    its perfect-scaling range (cbs20) is shorter than momentum's: the published fact is not
    reproduced by this model."""
    cfg = NQMConfig(dim=20, target=0.02)
    batch = [1, 4, 16, 64, 256, 1024]
    a = tune_adam_curve(cfg, batch, beta1=(0.0, 0.9),
                        search=AdamSearch(grid_per_decade=3, refinements=1, max_steps=10 ** 5))
    m = tune_curve(cfg, OptimizerSpec("momentum"), batch)
    m_half = tune_curve(cfg, OptimizerSpec("momentum", precond_power=0.5), batch)
    assert a.steps[0] < 0.7 * m.steps[0]
    assert abs(a.steps[0] / m_half.steps[0] - 1.0) < 0.35
    assert analyse_curve(a).cbs20 < analyse_curve(m).cbs20


def test_fact_li_surge_needs_a_rotation_and_independent_noise():
    """Greedy one-step rate (docs/nqm_adam.md, 'Fact 2'): diagonal NQM rises and plateaus;
    rotated Hessian with noise independent per Adam coordinate rises, peaks below B_simple and
    falls; rotated with the noise rotated along (C = R diag(c) R^T) does not fall."""
    d = 100
    problem = NQMConfig(dim=d).problem()
    theta = np.random.default_rng(1).standard_normal(d)
    batch = 2.0 ** np.arange(0, 15)
    R = adam_rotated.random_rotation(d, 0)
    diag = adam_rotated.greedy_learning_rate(problem, np.eye(d), theta, batch)
    assert np.all(np.diff(diag) > 0)
    surge = adam_rotated.greedy_learning_rate(problem, R, theta, batch, independent_noise=True)
    peak = int(np.argmax(surge))
    H = (R * problem.curvature_D) @ R.T
    mu = H @ (R @ theta)
    b_simple = problem.noise_D.sum() / (mu @ mu)
    assert 0 < peak < batch.size - 1 and batch[peak] < b_simple
    assert surge[-1] < 0.8 * surge[peak]
    along = adam_rotated.greedy_learning_rate(problem, R, theta, batch)
    assert np.all(np.diff(along) > 0)


def _uniform_snr_problem(kappa=5.0, d=12, seed=3):
    """An NQM turned by R whose gradient mu (Adam's coordinates) has signs along the top
    eigenvector and C_ii = kappa mu_i^2 with independent noise: every beta_i is B / (B + kappa)."""
    R = adam_rotated.random_rotation(d, seed)
    h = NQMConfig(dim=d).problem().curvature_D
    rng = np.random.default_rng(0)
    mu = np.sign(R[:, 0]) * (1.0 + 0.1 * rng.random(d))
    noise = np.linalg.solve(R * R, kappa * mu ** 2)          # diag(R diag(c) R^T) = kappa mu^2
    assert np.all(noise > 0)                                 # the construction holds
    problem = Problem(curvature_D=h, noise_D=noise, init_second_moment_D=np.ones(d), target=0.01)
    theta = (R.T @ mu) / h                                   # mu = R diag(h) theta
    return problem, R, theta, mu


def test_greedy_rate_with_one_signal_to_noise_ratio_is_li_et_al_law_in_beta():
    """docs/nqm_adam.md, session 50: with C_ii = kappa mu_i^2 the greedy rate is
    sum|mu| sqrt(beta) / (A + D beta), beta = B / (B + kappa), A = tr H, D = s^T H s - tr H; it
    peaks at B = kappa / (D / A - 1) with the shape a_max / (1/2 (sqrt(x) + 1 / sqrt(x)))."""
    kappa = 5.0
    problem, R, theta, mu = _uniform_snr_problem(kappa)
    H = (R * problem.curvature_D) @ R.T
    s = np.sign(mu)
    A, D = np.trace(H), s @ H @ s - np.trace(H)
    assert D > A                                             # signs along the top direction
    batch = np.geomspace(1.0, 1e4, 400)
    greedy = adam_rotated.greedy_learning_rate(problem, R, theta, batch, independent_noise=True)
    beta = batch / (batch + kappa)
    closed = np.abs(mu).sum() * np.sqrt(beta) / (A + D * beta)
    np.testing.assert_allclose(greedy, closed, rtol=1e-10)
    peak, a_max = kappa / (D / A - 1.0), np.abs(mu).sum() / (2.0 * np.sqrt(A * D))
    at = adam_rotated.greedy_learning_rate(problem, R, theta, peak * np.array([0.999, 1, 1.001]),
                                           independent_noise=True)
    assert at[1] == pytest.approx(a_max, rel=1e-10) and at[1] > max(at[0], at[2])
    x = beta / (A / D)
    np.testing.assert_allclose(greedy, a_max / (0.5 * (np.sqrt(x) + 1.0 / np.sqrt(x))),
                               rtol=1e-10)
    # theta halved: mu halves, C does not, so kappa and the peak grow 4 times
    half = adam_rotated.greedy_learning_rate(problem, R, theta / 2, batch, independent_noise=True)
    assert batch[np.argmax(half)] / batch[np.argmax(greedy)] == pytest.approx(4.0, rel=0.05)


def _strong_off_diagonal_problem(peak=30.0, d=40, weight=40.0):
    """In Adam's coordinates H = diag(1/i) + (weight / d) s s^T (s random signs), constant noise
    c, theta along s: the off-diagonal mass dominates, so at the law's peak every
    beta_i ~ B w_i^2 is about 0.03 (the small-signal regime); c sets the peak at `peak`."""
    s = np.sign(np.random.default_rng(0).standard_normal(d))
    H = np.diag(1.0 / np.arange(1, d + 1)) + (weight / d) * np.outer(s, s)
    curvature, R = np.linalg.eigh(H)
    theta = R.T @ s

    def problem(c):
        return Problem(curvature_D=curvature, noise_D=np.full(d, c),
                       init_second_moment_D=np.ones(d), target=0.01)

    c = peak / adam_rotated.surge_law(problem(1.0), R, theta).peak_batch
    return problem(c), R, theta


def test_surge_law_is_the_small_signal_limit_of_the_greedy_rate():
    """docs/nqm_adam.md, session 50. Where the signal is small at its peak (B_peak w_i^2 ~ 0.03)
    the law's peak and curve are the greedy rate's: the peak to 3%, its height to 1e-5, the
    curve on [B_peak / 10, 3 B_peak] to 2% (a Q off by 2x misses by 44% or more); at the
    explorer's start (d = 100) the signal is not small at the peak and the law is rougher."""
    problem, R, theta = _strong_off_diagonal_problem()
    law = adam_rotated.surge_law(problem, R, theta)
    assert law.peak_batch == pytest.approx(30.0) and law.peak_batch / law.small_signal_limit < 0.05
    batch = np.geomspace(1.0, 3000.0, 2000)
    greedy = adam_rotated.greedy_learning_rate(problem, R, theta, batch, independent_noise=True)
    assert batch[np.argmax(greedy)] == pytest.approx(law.peak_batch, rel=0.03)
    assert greedy.max() == pytest.approx(law.peak_rate, rel=1e-5)
    near = (batch > 3.0) & (batch < 90.0)
    np.testing.assert_allclose(law.rate(batch[near]), greedy[near], rtol=0.02)
    # the limit at fixed B, any structure: the noise 1e6 times larger, B = 1..16
    d = 100
    base = NQMConfig(dim=d).problem()
    theta = np.random.default_rng(1).standard_normal(d)
    R = adam_rotated.random_rotation(d, 0)
    small = np.array([1.0, 4.0, 16.0])
    law = adam_rotated.surge_law(base, R, theta)
    assert law.peak_batch / law.small_signal_limit > 0.5   # B w^2 = 0.68 (beta 0.4): not small
    loud = Problem(curvature_D=base.curvature_D, noise_D=base.noise_D * 1e6,
                   init_second_moment_D=base.init_second_moment_D, target=base.target)
    loud_law = adam_rotated.surge_law(loud, R, theta)
    assert loud_law.peak_batch == pytest.approx(1e6 * law.peak_batch, rel=1e-9)
    loud_exact = adam_rotated.greedy_learning_rate(loud, R, theta, small, independent_noise=True)
    np.testing.assert_allclose(loud_law.rate(small), loud_exact, rtol=1e-5)
    # a diagonal H: Q is exactly 0 whatever theta, no peak, the rate sqrt(B) signal / tr H
    for seed in range(5):
        t = np.random.default_rng(seed).standard_normal(d)
        diagonal = adam_rotated.surge_law(loud, np.eye(d), t)
        assert diagonal.q == 0.0 and diagonal.peak_batch == np.inf
        np.testing.assert_allclose(
            diagonal.rate(small),
            adam_rotated.greedy_learning_rate(loud, np.eye(d), t, small, independent_noise=True),
            rtol=1e-4)


def test_surge_law_and_the_first_step_rate_refuse_bad_input():
    problem = NQMConfig(dim=8).problem()
    R = adam_rotated.random_rotation(8, 0)
    for call, name in ((lambda: adam_rotated.surge_law(problem, R, np.zeros(8)), "theta"),
                       (lambda: adam_rotated.surge_law(problem, R, np.ones(3)), "theta"),
                       (lambda: adam_rotated.surge_law(problem, np.ones((8, 8)), np.ones(8)),
                        "rotation"),
                       (lambda: adam_rotated.surge_law(NQMConfig(dim=8, train_size=100).problem(),
                                                       R, np.ones(8)), "train_size"),
                       (lambda: adam_rotated.surge_law(problem, R, np.ones(8)).rate([0.0]),
                        "batch_sizes"),
                       (lambda: adam_rotated.first_step_learning_rate(problem, R, [0.5]),
                        "batch_sizes"),
                       (lambda: adam_rotated.first_step_learning_rate(problem, R, [4.0], "no"),
                        "independent_noise"),
                       (lambda: adam_rotated.greedy_learning_rate(problem, R, np.ones(8), [4.0],
                                                                  independent_noise=1),
                        "independent_noise"),
                       (lambda: adam_rotated.steps_to_target(problem, R, 4.0, 0.01,
                                                             independent_noise="yes"),
                        "independent_noise")):
        with pytest.raises(ValueError, match=name):
            call()


def test_independent_noise_in_the_multi_step_model_is_the_one_step_rate_first():
    """The multi-step rotated model's first step with independent noise: its expected loss drop
    from a deterministic start is the greedy model's quadratic in the rate."""
    d = 12
    problem, R, theta, _ = _uniform_snr_problem(d=d)
    model = adam_rotated.RotatedMeanFieldAdam(problem, R, 8.0, 0.05, 0.0, 0.0,
                                              independent_noise=True)
    x = R @ theta
    model.S[:, :d, :d] = np.outer(x, x)              # the point theta: S_xx = x x^T, b1 = b2 = 0
    H = model.H
    before = 0.5 * x @ H @ x
    model.step()
    mu = H @ x
    C = np.diag(np.einsum("ij,j,ij->i", R, problem.noise_D, R)) / 8.0
    p = 1.0 / np.sqrt(mu ** 2 + np.diag(C))
    expected = before - 0.05 * (mu * p) @ mu + 0.5 * 0.05 ** 2 * np.sum(
        H * (p[:, None] * (np.outer(mu, mu) + C) * p[None, :]))
    assert model.loss()[0] == pytest.approx(expected, rel=1e-12)
    a_star = adam_rotated.greedy_learning_rate(problem, R, theta, [8.0], independent_noise=True)[0]
    assert (mu * p) @ mu / np.sum(H * (p[:, None] * (np.outer(mu, mu) + C) * p[None, :])) \
        == pytest.approx(a_star, rel=1e-12)


@pytest.mark.parametrize("independent", [True, False])
def test_first_step_rate_minimises_the_multi_step_models_loss_after_one_step(independent):
    """E[L] after one step of `RotatedMeanFieldAdam` from its ensemble is a parabola in the rate
    (bias corrections cancel at step 1); its vertex, from three rates, is
    `first_step_learning_rate`'s a*."""
    problem = NQMConfig(dim=10, noise_scale=30.0).problem()
    R = adam_rotated.random_rotation(10, 2)
    batch = np.array([1.0, 16.0, 256.0])
    a_star = adam_rotated.first_step_learning_rate(problem, R, batch, independent)
    rates = np.array([0.1, 0.2, 0.4])
    model = adam_rotated.RotatedMeanFieldAdam(problem, R, np.repeat(batch, 3), np.tile(rates, 3),
                                              0.9, 0.999, independent_noise=independent)
    model.step()
    loss = model.loss().reshape(3, 3)
    for i in range(3):
        c2, c1, _ = np.polyfit(rates, loss[i], 2)
        assert -c1 / (2 * c2) == pytest.approx(a_star[i], rel=1e-9)
    assert a_star[1] != pytest.approx(a_star[0], rel=0.05)       # B matters


@pytest.mark.parametrize("kwargs, name", [
    (dict(learning_rate=0.0), "learning_rate"), (dict(beta1=1.0), "beta1"),
    (dict(beta2=-0.1), "beta2"), (dict(epsilon=-1.0), "epsilon"), (dict(batch_size=0.5), "batch_size"),
    (dict(growth=0.0), "growth"), (dict(init_nodes=0), "init_nodes")])
def test_bad_input_names_the_parameter(problem, kwargs, name):
    args = dict(batch_size=4, learning_rate=0.01)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        adam.expected_loss(problem, [10], **args)


def test_bad_rotation_and_search_raise(problem):
    with pytest.raises(ValueError, match="rotation"):
        adam_rotated.iterate_losses(problem, np.ones((16, 16)), 5, 4, 0.01)
    with pytest.raises(ValueError, match="learning_rate"):
        AdamSearch(learning_rate=(1.0, 0.1))
    with pytest.raises(ValueError, match="beta1"):
        tune_adam_curve(NQMConfig(dim=4), [4], beta1=(0.9, 1.5))


def test_signal_share_at_the_start_and_its_limits(problem):
    """h = c = 1/i, E theta_0^2 = 1: at node z_k direction i is signal-dominated iff
    h_i^2 z_k^2 > h_i / B, i.e. z_k^2 B > i; its share of E[L] weighs w_k h_i z_k^2."""
    z, w = adam.init_quadrature(adam.INIT_NODES)
    i = np.arange(1, problem.dim + 1)
    for batch in (1.0, 4.0, 64.0):
        part = w[:, None] * z[:, None] ** 2 / i[None, :]
        want = part[z[:, None] ** 2 * batch > i[None, :]].sum() / part.sum()
        model = adam.MeanFieldAdam(problem, batch, 0.01)
        assert model.signal_share()[0] == pytest.approx(want, rel=1e-12)
        assert 0.0 < want < 1.0 or batch == 64.0
    assert adam.MeanFieldAdam(problem, 1e12, 0.01).signal_share()[0] == 1.0
    # noise-dominated once the start is small: E theta_0^2 = 1e-6 at B = 64
    tiny = NQMConfig(dim=16, init_second_moment=1e-6).problem()
    assert adam.MeanFieldAdam(tiny, 64, 0.01).signal_share()[0] == 0.0


def test_real_adam_takes_one_rate_per_step(problem):
    """A constant schedule is the scalar rate, run for run; a wrong length is one line."""
    scalar = adam.simulate_losses(problem, 20, 4, 0.02, runs=50, seed=2)
    per_step = adam.simulate_losses(problem, 20, 4, np.full(20, 0.02), runs=50, seed=2)
    np.testing.assert_array_equal(scalar.mean_T, per_step.mean_T)
    halved = adam.simulate_losses(problem, 20, 4, np.r_[np.full(10, 0.02), np.full(10, 0.01)],
                                  runs=50, seed=2)
    np.testing.assert_array_equal(halved.mean_T[:11], scalar.mean_T[:11])
    assert not np.array_equal(halved.mean_T[11:], scalar.mean_T[11:])
    with pytest.raises(ValueError, match="learning_rates") as err:
        adam.simulate_losses(problem, 20, 4, np.full(3, 0.02))
    assert "\n" not in str(err.value)


def test_progress_counts_every_pass_and_changes_nothing():
    cfg = NQMConfig(dim=20, target=0.02)
    search = AdamSearch(grid_per_decade=2, refinements=2, max_steps=10 ** 4)
    calls = []
    with_progress = tune_adam_curve(cfg, [4, 64], beta1=(0.0, 0.9), search=search,
                                    progress=lambda done, total: calls.append((done, total)))
    # per b1: the scan (1e-5 .. 1 at 2 per decade: 11 rates) and two refinement rounds of 6
    per_b1 = [11, 17, 23]
    assert calls == [(k, 46) for k in per_b1 + [23 + k for k in per_b1]]
    assert with_progress == tune_adam_curve(cfg, [4, 64], beta1=(0.0, 0.9), search=search)
    # through tune_curve too; the other families ignore it
    calls.clear()
    spec = OptimizerSpec("adam", beta1=(0.9,))
    tune_curve(cfg, spec, [4], 10 ** 4, default_space(spec),
               progress=lambda done, total: calls.append(total))
    assert calls and set(calls) == {21 + 6 * AdamSearch().refinements}     # 1e-5 .. 1
    tune_curve(cfg, OptimizerSpec("sgd"), [4], progress=lambda *a: calls.append("sgd"))
    assert "sgd" not in calls

"""nqm.moments: the closed-form E[L](t) against iterating the one-step recurrence, and the formulas
of docs/design.md, 'The NQM' (momentum steady state, the preconditioning rule, stability)."""

import numpy as np
import pytest

from nqm import moments, recurrence
from nqm.problem import NQMConfig

T_LONG = 3000
# Every step early (where momentum oscillates fastest relative to t), then every 11th step: the
# closed form has no accumulated error, so a stride loses nothing but time.
CHECKED = np.unique(np.concatenate([np.arange(256), np.arange(256, T_LONG, 11), [T_LONG]]))


@pytest.fixture(scope="module")
def problem():
    """d = 50, h_i = 1/i, c = h: directions from well to poorly conditioned within 3000 steps."""
    return NQMConfig(dim=50, target=0.01).problem()


def custom_problem(curvature, noise=None, init=1.0):
    return NQMConfig(curvature=tuple(curvature),
                     noise_variance=None if noise is None else tuple(noise),
                     init_second_moment=init).problem()


def closed_form(problem, steps, batch_size, learning_rate, **kw):
    return moments.expected_loss(problem, steps, batch_size, learning_rate, **kw)[0]


def iterated_states(problem, steps, batch_size, lr, momentum=0.0, ema_decay=0.0):
    """(theta, v, avg) covariances (d, 3, 3) at t = 0..steps, from recurrence.step_matrices."""
    F, f = recurrence.step_matrices(problem.curvature_D, lr, momentum, ema_decay)
    sigma2 = problem.noise_D / batch_size
    S = np.zeros((problem.dim, 3, 3))
    x0 = problem.init_second_moment_D
    S[:, 0, 0] = S[:, 0, 2] = S[:, 2, 0] = S[:, 2, 2] = x0
    out = [S]
    for _ in range(steps):
        S = np.einsum("dij,djk,dlk->dil", F, S, F) + sigma2[:, None, None] * f[:, :, None] * f[:, None, :]
        out.append(S)
    return np.array(out)


def design_momentum_stationary_loss(h, c, batch_size, a, b):
    """docs/design.md, 'The NQM':
    sum_i 1/2 h_i a c_i (1 + b) / (B h_i (1 - b) (2 (1 + b) - a h_i))."""
    return float(np.sum(0.5 * h * a * c * (1 + b) / (batch_size * h * (1 - b) * (2 * (1 + b) - a * h))))


# ------------------------------------------------------------ (1) closed form == recurrence

SETTINGS = {
    "sgd": dict(batch_size=4, learning_rate=0.5),
    "sgd_r_zero": dict(batch_size=4, learning_rate=1.0),       # 1 - a h_1 = 0 exactly
    "sgd_edge": dict(batch_size=16, learning_rate=1.95),       # 1 - a h_1 close to -1
    "momentum": dict(batch_size=8, learning_rate=0.1, momentum=0.9),
    "momentum_edge": dict(batch_size=8, learning_rate=3.7, momentum=0.9),
    "momentum_small_b": dict(batch_size=2, learning_rate=0.3, momentum=0.2),
    "ema": dict(batch_size=8, learning_rate=0.5, ema_decay=0.99),
    "ema_fast": dict(batch_size=1, learning_rate=1.5, ema_decay=0.7),
    "precond": dict(batch_size=8, learning_rate=0.5, precond_power=0.5),
    "precond_k_fac": dict(batch_size=8, learning_rate=0.3, precond_power=1.0),
    "momentum_precond": dict(batch_size=8, learning_rate=0.1, momentum=0.9, precond_power=0.5),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_closed_form_equals_recurrence_every_step(problem, name):
    kw = dict(SETTINGS[name])
    batch, lr = kw.pop("batch_size"), kw.pop("learning_rate")
    got = closed_form(problem, CHECKED, batch, lr, **kw)
    ref = recurrence.iterate_losses(problem, T_LONG, batch, lr, **kw)[CHECKED]
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=0)
    # The comparison is not vacuous: the loss moves far from where it started.
    assert abs(ref[-1] / ref[0] - 1) > 0.3




@pytest.mark.parametrize("b, batch_size", [
    (0.81, 1), (0.9, 100), (0.99, 1), (0.99, 100),
    (0.9999, 1), (0.9999, 100),
])
def test_closed_form_near_critical_damping(b, batch_size):
    """Every direction within 1e-4 of critical damping a h = (1 - sqrt b)^2 (and one exactly on it)."""
    a = 0.5
    h_crit = (1.0 - np.sqrt(b)) ** 2 / a
    rel = np.array([-1e-4, -1e-6, -1e-8, -1e-10, -1e-12, 0.0, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4])
    prob = custom_problem(h_crit * (1.0 + rel))
    got = closed_form(prob, CHECKED, batch_size, a, momentum=b)
    ref = recurrence.iterate_losses(prob, T_LONG, batch_size, a, momentum=b)[CHECKED]
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=0)


@pytest.mark.parametrize("name", ["momentum", "momentum_edge", "ema", "ema_fast"])
def test_state_equals_iterated_second_moments(problem, name):
    """`Dynamics.state` (which chains schedule segments) equals the iterated 3x3 covariance."""
    kw = dict(SETTINGS[name])
    batch, lr = kw.pop("batch_size"), kw.pop("learning_rate")
    dyn = moments.dynamics(problem, batch, lr, **kw)
    ref = iterated_states(problem, 400, batch, lr, kw.get("momentum", 0.0), kw.get("ema_decay", 0.0))
    second = 2 if "ema_decay" in kw else 1     # state basis: (theta, v) or (theta, avg)
    for t in (0, 1, 2, 7, 50, 400):
        s11, s12, s22 = (x[0] for x in dyn.state(np.array([t])))
        scale = np.abs(ref[t]).max(axis=(1, 2))
        np.testing.assert_allclose(s11, ref[t][:, 0, 0], rtol=1e-10, atol=0)
        np.testing.assert_allclose(s12, ref[t][:, 0, second], rtol=0, atol=1e-11 * scale.max())
        np.testing.assert_allclose(s22, ref[t][:, second, second], rtol=1e-10, atol=1e-14)


# ------------------------------------------------------------ (2) momentum steady state

STEADY = [  # (batch_size, learning_rate, momentum) on h in [0.05, 1]
    (1, 0.5, 0.9), (4, 1.0, 0.5), (32, 3.7, 0.9), (2, 2.97, 0.5), (8, 0.05, 0.3),
]


@pytest.fixture(scope="module")
def steady_problem():
    h = np.geomspace(0.05, 1.0, 20)
    c = np.linspace(0.2, 3.0, 20)
    return custom_problem(h, c)


@pytest.mark.parametrize("batch_size, lr, b", STEADY)
def test_momentum_stationary_loss_matches_design_formula(steady_problem, batch_size, lr, b):
    prob = steady_problem
    h, c = prob.curvature_D, prob.noise_D
    want = design_momentum_stationary_loss(h, c, batch_size, lr, b)
    dyn = moments.dynamics(prob, batch_size, lr, momentum=b)
    assert dyn.stable_N[0]
    assert dyn.stationary_loss_N[0] == pytest.approx(want, rel=1e-12)
    assert closed_form(prob, [10 ** 7], batch_size, lr, momentum=b)[0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("batch_size, lr, b", STEADY[:3])
def test_momentum_iterated_recurrence_settles_at_design_formula(steady_problem, batch_size, lr, b):
    prob = steady_problem
    want = design_momentum_stationary_loss(prob.curvature_D, prob.noise_D, batch_size, lr, b)
    losses = recurrence.iterate_losses(prob, 1500, batch_size, lr, momentum=b)
    assert losses[-1] == pytest.approx(want, rel=1e-10)
    assert losses[0] != pytest.approx(want, rel=0.1)


def test_momentum_stationary_is_fixed_point_of_one_step(steady_problem):
    """Solve S = F S F^T + sigma^2 f f^T per direction (4x4 linear system on the (theta, v) block)."""
    prob = steady_problem
    batch_size, lr, b = 4, 1.0, 0.5
    F3, f3 = recurrence.step_matrices(prob.curvature_D, lr, b, 0.0)
    theta_var = []
    for i in range(prob.dim):
        F, f = F3[i, :2, :2], f3[i, :2]
        vec_s = np.linalg.solve(np.eye(4) - np.kron(F, F), prob.noise_D[i] / batch_size * np.kron(f, f))
        theta_var.append(vec_s[0])
    want = float(0.5 * prob.curvature_D @ np.array(theta_var))
    dyn = moments.dynamics(prob, batch_size, lr, momentum=b)
    assert dyn.stationary_loss_N[0] == pytest.approx(want, rel=1e-11)


# ------------------------------------------------------------ (3) preconditioning rule


@pytest.mark.parametrize("power", [0.25, 0.5, 1.0])
def test_preconditioned_sgd_equals_hand_recurrence(power):
    """theta <- theta - a h^-p (h theta + eps): E theta^2 contracts by (1 - a h^(1-p))^2 and gains
    a^2 c h^(-2p) / B; the loss weight stays 1/2 h."""
    prob = custom_problem(np.geomspace(1e-3, 1.0, 30), np.geomspace(1.0, 0.01, 30))
    h, c = prob.curvature_D, prob.noise_D
    a, batch_size, steps = 0.4, 8, 2000
    x = prob.init_second_moment_D.copy()
    want = [0.5 * h @ x]
    for _ in range(steps):
        x = (1 - a * h ** (1 - power)) ** 2 * x + a ** 2 * c * h ** (-2 * power) / batch_size
        want.append(0.5 * h @ x)
    got = closed_form(prob, np.arange(steps + 1), batch_size, a, precond_power=power)
    np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_preconditioned_state_equals_plain_run_on_transformed_problem(momentum):
    """Per-direction second moments of (h, c, p) equal those of plain (h^(1-p), c h^(-2p)); the
    losses differ because the loss keeps the weight 1/2 h."""
    power, a, batch_size = 0.5, 0.3, 4
    h = np.geomspace(1e-3, 1.0, 30)
    c = np.geomspace(2.0, 0.05, 30)
    prob = custom_problem(h, c)
    plain = custom_problem(h ** (1 - power), c * h ** (-2 * power))
    pre = moments.dynamics(prob, batch_size, a, momentum=momentum, precond_power=power)
    ref = moments.dynamics(plain, batch_size, a, momentum=momentum)
    for t in (0, 1, 10, 300, 5000):
        for mine, theirs in zip(pre.state(np.array([t])), ref.state(np.array([t]))):
            np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-300)
        s11 = ref.state(np.array([t]))[0][0]
        assert pre.loss(np.array([t]))[0] == pytest.approx(0.5 * h @ s11, rel=1e-12)
    assert pre.loss(np.array([300]))[0] != pytest.approx(ref.loss(np.array([300]))[0], rel=1e-3)


# ------------------------------------------------------------ (4) instability gives inf


UNSTABLE = [
    dict(learning_rate=2.0),                      # a h_max = 2 exactly: |1 - a h| = 1
    dict(learning_rate=2.5),
    dict(learning_rate=3.8, momentum=0.9),        # a h_max = 2 (1 + b) exactly
    dict(learning_rate=5.0, momentum=0.9),
    dict(learning_rate=2.0, ema_decay=0.9),
    dict(learning_rate=2.5, ema_decay=0.99),
    dict(learning_rate=2.5, precond_power=0.5),   # h_max = 1 is unchanged by H^-p
]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # nqm warns on inf - inf; values checked
@pytest.mark.parametrize("kw", UNSTABLE)
def test_unstable_learning_rate_gives_inf_never_nan(problem, kw):
    steps = [1, 2, 10, 1000, 10 ** 6]
    loss = moments.expected_loss(problem, steps, 4, **kw)
    assert np.all(np.isposinf(loss)), loss
    kw = dict(kw)
    dyn = moments.dynamics(problem, 4, kw.pop("learning_rate"), **kw)
    assert not dyn.stable_N[0]
    assert np.isposinf(dyn.stationary_loss_N[0])
    total, noise = dyn.loss_parts(np.array([50]))
    assert np.isposinf(total[0]) and not np.isnan(noise[0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("kw", [UNSTABLE[1], UNSTABLE[3], UNSTABLE[5]])
def test_signal_noise_of_unstable_row_is_not_nan(problem, kw):
    kw = dict(kw)
    dyn = moments.dynamics(problem, 1, kw.pop("learning_rate"), **kw)
    signal, noise = dyn.signal_noise(np.array([50]))
    assert not np.isnan(signal[0]) and not np.isnan(noise[0])
    assert np.isposinf(signal[0] + noise[0] / 4)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_stable_and_unstable_rows_together(problem):
    lrs = np.array([0.5, 2.0, 1.99, 3.0])
    loss = moments.expected_loss(problem, [0, 100], 4, lrs)
    assert np.all(np.isfinite(loss[[0, 2]])) and np.all(np.isposinf(loss[[1, 3]]))
    ref = recurrence.iterate_losses(problem, 100, 4, 1.99)
    assert loss[2, 1] == pytest.approx(ref[100], rel=1e-10)


# ------------------------------------------------------------ (5) noise part


@pytest.mark.parametrize("kw", [dict(learning_rate=0.8), dict(learning_rate=0.05, momentum=0.95),
                                dict(learning_rate=3.5, momentum=0.9),
                                dict(learning_rate=1.2, ema_decay=0.95),
                                dict(learning_rate=0.2, momentum=0.5, precond_power=0.5)])
def test_noise_part_is_loss_from_zero_start_and_non_decreasing(problem, kw):
    kw = dict(kw)
    lr = kw.pop("learning_rate")
    batch_size, steps = 16, np.arange(0, 801)
    dyn = moments.dynamics(problem, np.full(steps.size, batch_size), np.full(steps.size, lr), **{
        k: np.full(steps.size, v) if k != "precond_power" else v for k, v in kw.items()})
    total, noise = dyn.loss_parts(steps)
    np.testing.assert_allclose(total, closed_form(problem, steps, batch_size, lr, **kw), rtol=1e-12)
    zero_start = NQMConfig(dim=50, init_second_moment=0.0).problem()
    from_zero = recurrence.iterate_losses(zero_start, steps[-1], batch_size, lr, **kw)
    np.testing.assert_allclose(noise, from_zero, rtol=1e-9, atol=1e-15 * from_zero.max())
    assert abs(noise[0]) <= 1e-13 * noise.max()
    assert np.all(np.diff(noise) >= -1e-12 * noise.max())
    assert noise[-1] > 0.5 * dyn.stationary_loss_N[0]


# ------------------------------------------------------------ (6) signal + noise / B


@pytest.mark.parametrize("kw", [dict(learning_rate=0.7), dict(learning_rate=0.2, momentum=0.8),
                                dict(learning_rate=1.0, ema_decay=0.9),
                                dict(learning_rate=0.3, precond_power=0.5)])
@pytest.mark.parametrize("batch_size", [1, 7, 1024])
def test_signal_noise_at_unit_batch_scales_to_any_batch(problem, kw, batch_size):
    kw = dict(kw)
    lr = kw.pop("learning_rate")
    steps = np.array([0, 1, 5, 30, 200, 3000])
    n = steps.size
    rows = {k: (np.full(n, v) if k != "precond_power" else v) for k, v in kw.items()}
    signal, noise = moments.dynamics(problem, np.ones(n), np.full(n, lr), **rows).signal_noise(steps)
    want = closed_form(problem, steps, batch_size, lr, **kw)
    np.testing.assert_allclose(signal + noise / batch_size, want, rtol=1e-11)
    assert np.all(signal >= -1e-15) and np.all(noise >= -1e-15)


# ------------------------------------------------------------ (7) bad input


@pytest.mark.parametrize("kw, name", [
    (dict(momentum=1.0), "momentum"), (dict(momentum=-0.1), "momentum"),
    (dict(momentum=np.nan), "momentum"), (dict(ema_decay=1.0), "ema_decay"),
    (dict(learning_rate=0.0), "learning_rate"), (dict(learning_rate=np.nan), "learning_rate"),
    (dict(learning_rate=-1.0), "learning_rate"), (dict(learning_rate=np.inf), "learning_rate"),
    (dict(batch_size=0), "batch_size"), (dict(batch_size=-4), "batch_size"),
    (dict(batch_size=[4, 0, 8]), "batch_size"),
])
def test_bad_metaparameters_raise_naming_parameter(problem, kw, name):
    args = dict(batch_size=4, learning_rate=0.1)
    args.update(kw)
    with pytest.raises(ValueError, match=name):
        moments.dynamics(problem, **args)
    with pytest.raises(ValueError, match=name):
        moments.expected_loss(problem, [0, 10], **args)


def test_momentum_and_ema_together_raise(problem):
    with pytest.raises(ValueError, match="momentum") as err:
        moments.dynamics(problem, 4, 0.1, momentum=0.9, ema_decay=0.9)
    assert "ema_decay" in str(err.value)
    moments.dynamics(problem, 4, 0.1, momentum=0.0, ema_decay=0.0)    # zero in both is plain SGD


def test_momentum_row_next_to_ema_row_is_not_silently_dropped():
    """One family per Dynamics: a momentum row next to an averaging row must not silently become
    plain SGD (HEAD 43ec2ad did that: 0.2254 instead of 0.2524 at t = 100)."""
    prob = NQMConfig(dim=30).problem()
    try:
        loss = moments.expected_loss(prob, [100], 4, 0.1, momentum=[0.9, 0.0], ema_decay=[0.0, 0.9])
    except ValueError as err:                     # refusing the mix is an acceptable fix
        assert "momentum" in str(err) and "ema_decay" in str(err)
        return
    assert loss[0, 0] == pytest.approx(recurrence.iterate_losses(prob, 100, 4, 0.1, momentum=0.9)[-1], rel=1e-9)
    assert loss[1, 0] == pytest.approx(recurrence.iterate_losses(prob, 100, 4, 0.1, ema_decay=0.9)[-1], rel=1e-9)


@pytest.mark.parametrize("steps", [[-1], [1.5], [[1, 2]]])
def test_bad_steps_raise(problem, steps):
    with pytest.raises(ValueError, match="steps"):
        moments.expected_loss(problem, steps, 4, 0.1)


@pytest.mark.parametrize("preset, expected", [(None, "1000"), ("50", "50")])
def test_kernels_shorten_openmp_spinning_unless_the_user_chose(preset, expected):
    # A fresh interpreter: libgomp reads GOMP_SPINCOUNT once, so nqm.kernels must set it before
    # numba loads it, and must keep a value the user set (see the comment in nqm/kernels.py).
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if preset is not None:
        env["GOMP_SPINCOUNT"] = preset
    code = "import os, nqm.kernels; print(os.environ['GOMP_SPINCOUNT'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == expected


def _kernel_args(dyn, t_n):
    s11, s12, s22 = dyn.start
    return (dyn._family, dyn.h_D, dyn.c_D, dyn.weight_D, s11, s12, s22, dyn.start_index_N,
            dyn.lr_N, dyn.param_N, dyn.inv_batch_N, np.asarray(t_n, dtype=np.int64))


# Rows through every branch of the kernels: averaging with r = 1 - a h above, equal to and below
# g (a = 1, g = 0.9 meets r = g at h_10 = 0.1), and negative (a h > 1); momentum under- and overdamped, near critical damping, with tau < 0.
BRANCH_ROWS = {
    "ema": dict(learning_rate=[0.5, 1.0, 1.5, 0.02, 0.3], ema_decay=[0.99, 0.9, 0.7, 0.9999, 0.5]),
    "momentum": dict(learning_rate=[0.1, 3.7, 0.5, 1e-3, 0.05],
                     momentum=[0.9, 0.9, 0.2, 0.999, 0.99]),
}


@pytest.mark.parametrize("name", list(BRANCH_ROWS))
@pytest.mark.parametrize("steps", [1, 7, 250, 40_000])
def test_kernel_loss_equals_numpy_state_on_every_branch(name, steps):
    """The compiled loss against `Dynamics.state` (numpy, `nqm.powers`: written apart from the
    kernels' formulas) on a problem whose directions put rows in every branch; at 40,000 steps
    the stiff directions have long settled and the soft ones still move."""
    prob = NQMConfig(dim=400, target=0.01).problem()
    rows = BRANCH_ROWS[name]
    n = len(rows["learning_rate"])
    dyn = moments.dynamics(prob, np.full(n, 8.0), **{k: np.asarray(v) for k, v in rows.items()})
    assert dyn.stable_N.all()
    got = dyn.loss(np.full(n, steps))
    state = dyn.state(np.full(n, steps))
    ref = state[dyn._loss_index] @ dyn.weight_D
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=0)


@pytest.mark.parametrize("name", list(BRANCH_ROWS))
def test_serial_and_parallel_kernels_give_the_same_bits(name):
    """A row's loss must not depend on which path (or how many other rows) evaluated it: the
    searches compare losses from calls of different sizes."""
    from nqm import kernels

    prob = NQMConfig(dim=3000, target=0.01).problem()
    rows = BRANCH_ROWS[name]
    n = len(rows["learning_rate"])
    dyn = moments.dynamics(prob, np.full(n, 8.0), **{k: np.asarray(v) for k, v in rows.items()})
    t_n = np.array([1, 7, 250, 40_000, 123_457])
    serial = kernels._rows_serial(*_kernel_args(dyn, t_n))
    parallel = kernels._rows_parallel(*_kernel_args(dyn, t_n))
    for s, p in zip(serial, parallel):
        np.testing.assert_array_equal(s, p)
    one_by_one = [dyn.loss(t_n[i:i + 1], np.array([i]))[0] for i in range(n)]
    np.testing.assert_array_equal(dyn.loss(t_n), one_by_one)

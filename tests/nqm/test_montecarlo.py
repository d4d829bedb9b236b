"""The Monte-Carlo mean of the actual iterates agrees with the closed forms, within its error bars.

Each comparison is a z-score z = (closed - mc) / stderr at ~10 checkpoints from the start through
the transient to the stationary phase. With several thousand runs the relative standard error is
about 1%, so "|z| < 4 everywhere" pins the closed form to a few percent, and the fraction of
|z| > 2 (about 5% for an exact closed form) must stay small. `test_the_check_has_power` shows a
wrong closed form (batch size off by 2x) fails the same check by a wide margin.
"""

import numpy as np
import pytest

from nqm import montecarlo
from nqm.moments import expected_loss
from nqm.montecarlo import simulate_losses
from nqm.problem import NQMConfig, Problem
from nqm.recurrence import iterate_losses

STEPS = 300
RUNS = 4000
BATCH = 4
CHECKPOINTS = np.array([0, 1, 3, 8, 20, 45, 80, 130, 200, 300])
FAMILIES = {
    "sgd": dict(learning_rate=0.5),
    # a = 0.1, b = 0.8: directions with h > 0.11 underdamped, the rest overdamped.
    "momentum": dict(learning_rate=0.1, momentum=0.8),
    # a = 1.5, b = 0.3: negative trace 1 - a h + b for h = 1 (oscillates with period 2).
    "momentum_negative_trace": dict(learning_rate=1.5, momentum=0.3),
    "ema": dict(learning_rate=0.5, ema_decay=0.9),
    "precond": dict(learning_rate=0.5, precond_power=0.5),
}


@pytest.fixture(scope="module")
def problem():
    # h_i = c_i = 1/i, d = 16: the smallest curvature needs ~100 steps at a = 0.5, so 300 steps
    # cover the transient and the stationary phase.
    return NQMConfig(dim=16).problem()


def _z_scores(closed, result):
    mean = result.mean_T[CHECKPOINTS]
    err = result.stderr_T[CHECKPOINTS]
    # The check is only as strong as the error bars are small: ~1% of the loss.
    assert np.all(err < 0.02 * mean)
    return (closed - mean) / err


@pytest.fixture(scope="module")
def family_runs(problem):
    """name -> Monte-Carlo result of that optimizer family (one seed each)."""
    out = {}
    for seed, (name, kw) in enumerate(FAMILIES.items()):
        out[name] = simulate_losses(problem, STEPS, BATCH, kw["learning_rate"],
                                    momentum=kw.get("momentum", 0.0),
                                    ema_decay=kw.get("ema_decay", 0.0),
                                    precond_power=kw.get("precond_power", 0.0),
                                    runs=RUNS, seed=seed)
    return out


@pytest.fixture(scope="module")
def family_z(problem, family_runs):
    out = {}
    for name, kw in FAMILIES.items():
        closed = expected_loss(problem, CHECKPOINTS, BATCH, kw["learning_rate"],
                               kw.get("momentum", 0.0), kw.get("ema_decay", 0.0),
                               kw.get("precond_power", 0.0))[0]
        out[name] = _z_scores(closed, family_runs[name])
    return out


@pytest.mark.parametrize("name", list(FAMILIES))
def test_closed_form_within_error_bars(family_z, name):
    z = family_z[name]
    assert np.all(np.abs(z) < 4.0), f"{name}: z = {np.round(z, 2)}"
    assert np.mean(np.abs(z) > 2.0) <= 0.3, f"{name}: z = {np.round(z, 2)}"


def test_pooled_fraction_outside_two_stderr(family_z):
    z = np.concatenate(list(family_z.values()))
    assert np.mean(np.abs(z) > 2.0) <= 0.15


def test_the_check_has_power(problem, family_runs):
    """The closed form at batch size 2B is far outside the error bars of runs at B."""
    mc = family_runs["sgd"]
    wrong = expected_loss(problem, CHECKPOINTS, 2 * BATCH, 0.5)[0]
    z = _z_scores(wrong, mc)
    assert np.all(np.abs(z[-3:]) > 10.0)  # stationary phase: noise part halved


@pytest.mark.parametrize("momentum, ema_decay, seed", [(0.0, 0.0, 11), (0.5, 0.0, 12),
                                                       (0.5, 0.8, 13)])
def test_schedule_matches_recurrence(problem, momentum, ema_decay, seed):
    """Piecewise-constant schedule (and momentum with averaging at once) vs the recurrence."""
    lrs = np.repeat([0.8, 0.2, 0.05], 100)
    mc = simulate_losses(problem, STEPS, BATCH, lrs, momentum=momentum, ema_decay=ema_decay,
                         runs=RUNS, seed=seed)
    closed = iterate_losses(problem, STEPS, BATCH, lrs, momentum, ema_decay)[CHECKPOINTS]
    z = _z_scores(closed, mc)
    assert np.all(np.abs(z) < 4.0), np.round(z, 2)
    assert np.mean(np.abs(z) > 2.0) <= 0.3, np.round(z, 2)
    # The drops in step size show in the mean: the stationary loss falls with a.
    assert mc.mean_T[300] < 0.5 * mc.mean_T[100]


def test_start_is_initial_loss():
    problem = Problem(curvature_D=np.array([2.0, 0.5]), noise_D=np.array([1.0, 1.0]),
                      init_second_moment_D=np.array([3.0, 0.0]), target=0.1)
    mc = simulate_losses(problem, 0, 1, 0.1, runs=20000, seed=3)
    assert mc.mean_T.shape == (1,)
    # L_0 = theta_1^2 with theta_1 ~ N(0, 3): mean 3, variance 2 * 9.
    assert abs(mc.mean_T[0] - 3.0) < 4 * mc.stderr_T[0]
    assert abs(mc.stderr_T[0] - np.sqrt(18.0 / 20000)) < 0.05 * mc.stderr_T[0]


def test_same_seed_same_result_and_seeds_differ(problem):
    a = simulate_losses(problem, 50, BATCH, 0.5, momentum=0.5, runs=200, seed=7)
    b = simulate_losses(problem, 50, BATCH, 0.5, momentum=0.5, runs=200, seed=7)
    c = simulate_losses(problem, 50, BATCH, 0.5, momentum=0.5, runs=200, seed=8)
    assert np.array_equal(a.mean_T, b.mean_T) and np.array_equal(a.stderr_T, b.stderr_T)
    assert (a.runs, a.seed) == (200, 7)
    assert not np.any(a.mean_T == c.mean_T)
    assert a.mean_T.shape == a.stderr_T.shape == (51,)


def test_chunked_runs_merge_exactly():
    """Chan's merge of chunk statistics equals the statistics of the concatenation."""
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((4, n)) * 3 + 5 for n in (7, 1, 12)]
    count, mean, m2 = 0, np.zeros(4), np.zeros(4)
    for x in parts:
        mb = x.mean(axis=1)
        count, mean, m2 = montecarlo._merge(count, mean, m2, x.shape[1], mb,
                                            np.sum((x - mb[:, None]) ** 2, axis=1))
    full = np.concatenate(parts, axis=1)
    np.testing.assert_allclose(mean, full.mean(axis=1), rtol=1e-13)
    np.testing.assert_allclose(m2 / (count - 1), full.var(axis=1, ddof=1), rtol=1e-12)


def test_many_chunks_still_match(problem, monkeypatch):
    monkeypatch.setattr(montecarlo, "CHUNK_ENTRIES", 16 * 300)  # 300 runs a chunk, 7 chunks
    mc = simulate_losses(problem, 60, BATCH, 0.5, runs=2000, seed=5)
    closed = expected_loss(problem, [0, 5, 20, 60], BATCH, 0.5)[0]
    z = (closed - mc.mean_T[[0, 5, 20, 60]]) / mc.stderr_T[[0, 5, 20, 60]]
    assert np.all(np.abs(z) < 4.0), np.round(z, 2)


@pytest.mark.parametrize("kwargs, message", [
    (dict(steps=-1), "steps must be a whole number >= 0, got -1"),
    (dict(steps=2.5), "steps must be a whole number >= 0, got 2.5"),
    (dict(runs=1), "runs must be a whole number >= 2, got 1"),
    (dict(seed=-3), "seed must be a whole number >= 0, got -3"),
    (dict(batch_size=0.5), r"batch_size must be in \[1, inf\), got 0.5"),
    (dict(learning_rates=0.0), r"learning_rates must be in \(0, inf\), got 0"),
    (dict(learning_rates=[0.1, -0.1, 0.1]),
     r"learning_rates must be in \(0, inf\), got -0.1 at step 1"),
    (dict(learning_rates=[0.1, 0.1]),
     r"learning_rates must be a scalar or have shape \(steps,\) = \(3,\)"),
    (dict(momentum=1.0), r"momentum must be in \[0, 1\), got 1"),
    (dict(ema_decay=-0.1), r"ema_decay must be in \[0, 1\), got -0.1"),
    (dict(precond_power=1.5), r"precond_power must be in \[0, 1\], got 1.5"),
])
def test_bad_input_names_parameter_value_and_range(problem, kwargs, message):
    args = dict(problem=problem, steps=3, batch_size=4, learning_rates=0.1, runs=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        simulate_losses(**args)


def test_problem_must_be_a_problem():
    with pytest.raises(ValueError, match="problem must be an nqm.problem.Problem"):
        simulate_losses(NQMConfig(dim=4), 3, 4, 0.1)

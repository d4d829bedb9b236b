"""nqm.crossing: the ladder + bisection search against checking every step of the trajectory."""

import warnings

import numpy as np
import pytest

from nqm import crossing, moments
from nqm.crossing import NOT_REACHED
from nqm.problem import NQMConfig



@pytest.fixture(autouse=True)
def quiet_unstable_rows():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def full_trajectory_crossings(problem, target, max_steps, batch_size, lr, **kw):
    """The reference: E[L] at every step 0..max_steps, first index <= target, per row."""
    losses = moments.expected_loss(problem, np.arange(max_steps + 1), batch_size, lr, **kw)
    return np.array([crossing.exhaustive_first_crossing(row, target) for row in losses])


def random_setting(seed, family, rows=30):
    """A random problem (d, spectrum exponent), N random metaparameter rows and a target between
    1/300 and 1/3 of the initial loss, so some rows reach it early, some late, some never."""
    rng = np.random.default_rng(seed)
    dim = int(rng.integers(20, 80))
    exponent = rng.uniform(0.5, 1.5)
    initial = NQMConfig(dim=dim, spectrum_exponent=exponent).problem().initial_loss()
    target = initial * 10 ** rng.uniform(-2.5, -0.5)
    problem = NQMConfig(dim=dim, spectrum_exponent=exponent, target=target).problem()
    batch = 2.0 ** rng.integers(0, 12, rows)
    lr = 10 ** rng.uniform(-2.5, 0.4, rows)      # includes unstable rows (a h_max >= 2)
    kw = {}
    if family == "ema":
        kw = dict(ema_decay=1 - 10 ** rng.uniform(-2.5, 0, rows))
    elif family == "precond":
        kw = dict(precond_power=0.5)
    elif family == "momentum_light":
        kw = dict(momentum=rng.uniform(0, 0.5, rows))
    elif family == "momentum_heavy":
        b = np.where(rng.random(rows) < 0.6, 1 - 10 ** rng.uniform(-3, 0, rows), 0.0)
        kw = dict(momentum=b)
        lr = 10 ** rng.uniform(-3, 0, rows) * (1 + b)
    return problem, target, batch, lr, kw


@pytest.mark.parametrize("family, seed, max_steps", [
    ("sgd", 0, 2000), ("sgd", 1, 2000), ("sgd", 2, 2000), ("sgd", 3, 2000),
    ("precond", 4, 2000), ("precond", 5, 2000),
    ("ema", 6, 800), ("ema", 7, 800),
    ("momentum_light", 8, 2000), ("momentum_light", 9, 2000),
    ("momentum_heavy", 1, 2000),
])
def test_steps_to_target_equals_exhaustive(family, seed, max_steps):
    problem, target, batch, lr, kw = random_setting(seed, family)
    dyn = moments.dynamics(problem, batch, lr, **kw)
    got = crossing.steps_to_target(dyn, target, max_steps)
    want = full_trajectory_crossings(problem, target, max_steps, batch, lr, **kw)
    # The setting exercises both branches: reached past the dense part, and never.
    assert np.any(want > 64) and np.any(want == NOT_REACHED)
    np.testing.assert_array_equal(got, want)


def test_oscillating_momentum_gives_first_crossing():
    """One direction, b = 0.9 strongly underdamped: E theta^2 ~ 0.9^t cos^2(w t) dips to ~0 at
    t = 2, goes back up, and only later stays below the target."""
    problem = NQMConfig(curvature=(1.0,), target=0.05).problem()
    target, batch, lr, b = 0.05, 1e6, 0.5, 0.9
    losses = moments.expected_loss(problem, np.arange(301), batch, lr, momentum=b)[0]
    first = crossing.exhaustive_first_crossing(losses, target)
    above_later = np.flatnonzero(losses[first:] > target) + first
    assert 0 < first < 10 and above_later.size > 0           # dips early, comes back above
    settled = above_later[-1] + 1
    assert settled > 20 and np.all(losses[settled:] <= target)  # ... and settles later
    dyn = moments.dynamics(problem, batch, lr, momentum=b)
    assert crossing.steps_to_target(dyn, target, 300)[0] == first == 2


def test_oscillating_momentum_dip_after_dense_region_is_found():
    """A slow direction holds the loss above the target until ~step 240; an oscillating one then
    makes the loss dip below between rungs 232 and 253 (at 244, 248), back above until ~358."""
    problem = NQMConfig(curvature=(1.0, 0.001), init_second_moments=(1.0, 1000.0)).problem()
    target, batch, lr, b = 7e-4, 1e6, 0.5, 0.98
    losses = moments.expected_loss(problem, np.arange(1001), batch, lr, momentum=b)[0]
    first = crossing.exhaustive_first_crossing(losses, target)
    assert first == 244 and losses[245] > target and losses[358] > target
    assert np.all(losses[400:] <= target)
    dyn = moments.dynamics(problem, batch, lr, momentum=b)
    assert crossing.steps_to_target(dyn, target, 1000)[0] == first


def test_unreachable_unstable_and_budget():
    problem = NQMConfig(dim=50).problem()
    target = 0.05
    lr = np.array([0.5, 0.5, 2.5, 5.0, 0.5, 0.5])
    batch = np.array([1, 1024, 1024, 1024, 1024, 1024])
    b = np.array([0.0, 0.0, 0.0, 0.9, 0.0, 0.0])
    dyn = moments.dynamics(problem, batch, lr, momentum=b)
    # Row 0: stationary loss above target; rows 2, 3: unstable (a h_max >= 2, >= 2 (1 + b)).
    assert dyn.stationary_loss_N[0] > target and not dyn.stable_N[2] and not dyn.stable_N[3]
    want = full_trajectory_crossings(problem, target, 3000, batch, lr, momentum=b)
    reach = want[1]
    assert reach > 64 and want[0] == want[2] == want[3] == NOT_REACHED
    np.testing.assert_array_equal(crossing.steps_to_target(dyn, target, 3000), want)
    # A huge budget still stops (noise part above target: no later step can reach it).
    assert crossing.steps_to_target(dyn.take(np.array([0])), target, 10 ** 9)[0] == NOT_REACHED
    # The budget: reached exactly at max_steps, not one step earlier.
    one = dyn.take(np.array([1]))
    assert crossing.steps_to_target(one, target, reach)[0] == reach
    assert crossing.steps_to_target(one, target, reach - 1)[0] == NOT_REACHED


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_target_above_initial_loss_is_step_zero(momentum):
    problem = NQMConfig(dim=30).problem()
    dyn = moments.dynamics(problem, [4, 4], [0.1, 0.5], momentum=momentum)
    target = problem.initial_loss() * (1 + 1e-12)
    assert list(crossing.steps_to_target(dyn, target, 100)) == [0, 0]
    assert list(crossing.steps_to_target(dyn, 2 * target, 100)) == [0, 0]


def test_target_equal_to_initial_loss_is_step_zero_with_momentum():
    problem = NQMConfig(dim=30).problem()
    dyn = moments.dynamics(problem, 4, 0.1, momentum=0.9)
    assert dyn.loss(np.array([0]))[0] == problem.initial_loss()
    assert crossing.steps_to_target(dyn, problem.initial_loss(), 100)[0] == 0


@pytest.mark.parametrize("family", ["sgd", "momentum_heavy", "ema"])
def test_best_crossing_per_batch_equals_row_minimum(family):
    """One scan at B = 1 (signal + noise / B) against steps_to_target at each B, row by row."""
    rng = np.random.default_rng(3)
    problem = NQMConfig(dim=60, target=0.02).problem()
    rows = 30
    lr = np.geomspace(1e-3, 2.5, rows)            # the top rates are unstable
    kw = {}
    if family == "momentum_heavy":
        kw = dict(momentum=1 - 10 ** rng.uniform(-3, -0.5, rows))
        lr = lr * (1 + kw["momentum"])
    elif family == "ema":
        kw = dict(ema_decay=1 - 10 ** rng.uniform(-2.5, 0, rows))
    batch_sizes = 2 ** np.arange(0, 14, 1 if family == "sgd" else 3)
    max_steps = 3000
    unit = moments.dynamics(problem, np.ones(rows), lr, **kw)
    steps, best = crossing.best_crossing_per_batch(unit.signal_noise, rows, batch_sizes,
                                                   problem.target, max_steps, active=unit.stable_N)
    for j, batch in enumerate(batch_sizes):
        per_row = crossing.steps_to_target(moments.dynamics(problem, np.full(rows, batch), lr, **kw),
                                           problem.target, max_steps)
        reached = per_row[per_row >= 0]
        if reached.size == 0:
            assert steps[j] == NOT_REACHED and best[j] == -1
        else:
            assert steps[j] == reached.min()
            assert per_row[best[j]] == steps[j]
    assert np.sum(steps == NOT_REACHED) >= 1 and np.sum(steps > 64) >= 1
    assert np.all(np.diff(steps[steps >= 0]) <= 0)   # more examples per step never hurt here


@pytest.mark.parametrize("max_steps", [0, 1, 10, 63, 64, 65, 66, 100, 1000, 12345, 10 ** 6])
def test_ladder_shape(max_steps):
    rungs = crossing.ladder(max_steps)
    dense = min(crossing.DENSE_STEPS, max_steps)
    np.testing.assert_array_equal(rungs[:dense + 1], np.arange(dense + 1))
    assert rungs[-1] == max_steps
    assert np.all(np.diff(rungs) > 0)
    # Beyond the dense part, consecutive rungs are at most 2^(1/8) apart (plus rounding).
    tail = rungs[dense:]
    if tail.size > 1:
        assert np.all(tail[1:] <= np.ceil(tail[:-1] * 2 ** (1 / crossing.LADDER_PER_OCTAVE)) + 1)
    if max_steps > 1000:
        assert rungs.size < 64 + 8 * np.log2(max_steps / 64) + 3


@pytest.mark.parametrize("dense, per_octave", [
    (16, 4), (100, 8),
    (4, 8),
])
def test_ladder_other_densities_increasing(dense, per_octave):
    rungs = crossing.ladder(5000, dense=dense, per_octave=per_octave)
    np.testing.assert_array_equal(rungs[:dense + 1], np.arange(dense + 1))
    assert rungs[-1] == 5000
    assert np.all(np.diff(rungs) > 0), rungs[:12]


def test_exhaustive_first_crossing():
    losses = np.array([5.0, 3.0, 0.9, 2.0, 0.5, 0.1])
    assert crossing.exhaustive_first_crossing(losses, 1.0) == 2
    assert crossing.exhaustive_first_crossing(losses, 5.0) == 0
    assert crossing.exhaustive_first_crossing(losses, 0.05) == NOT_REACHED
    assert crossing.exhaustive_first_crossing(np.full(4, np.inf), 1.0) == NOT_REACHED


def test_best_crossing_per_batch_without_bisection_returns_the_winning_rung():
    """bisect=False: steps is the first rung at which some row reaches the target (the exact
    minimum is at most that, and above the rung before it), and the chosen row reaches it there."""
    problem = NQMConfig(dim=60, target=0.02).problem()
    rows = 30
    lr = np.geomspace(1e-3, 2.5, rows)
    batch_sizes = 2 ** np.arange(0, 14)
    rungs = crossing.ladder(3000, dense=8, per_octave=1)
    unit = moments.dynamics(problem, np.ones(rows), lr)
    exact, _ = crossing.best_crossing_per_batch(unit.signal_noise, rows, batch_sizes,
                                                problem.target, 3000, active=unit.stable_N,
                                                rungs=rungs)
    steps, best = crossing.best_crossing_per_batch(unit.signal_noise, rows, batch_sizes,
                                                   problem.target, 3000, active=unit.stable_N,
                                                   rungs=rungs, bisect=False)
    assert np.any(steps > exact)                  # the test is not vacuous
    assert np.sum(exact >= 0) >= 10
    for j, batch in enumerate(batch_sizes):
        if exact[j] < 0:
            assert steps[j] == NOT_REACHED and best[j] == -1
            continue
        k = np.searchsorted(rungs, exact[j])      # the first rung at or above the exact minimum
        assert steps[j] == rungs[k]
        dyn = moments.dynamics(problem, np.full(rows, batch), lr)
        losses = dyn.loss(np.full(rows, steps[j]))
        assert losses[best[j]] <= problem.target
        assert losses[best[j]] == losses[unit.stable_N & (losses <= problem.target)].min()


@pytest.mark.parametrize("family", ["momentum", "ema"])
def test_certified_steps_equals_every_step_check(family):
    """certified_steps from a loose known step (beyond dense_limit, so the recurrence checks the
    first DENSE_STEPS steps and the ladder the rest) against checking every step."""
    problem = NQMConfig(dim=60, target=0.1).problem()
    rows = 12
    lr = np.geomspace(0.05, 1.5, rows)
    kw = ({"momentum": np.linspace(0.0, 0.9, rows)} if family == "momentum"
          else {"ema_decay": np.linspace(0.0, 0.95, rows)})
    dyn = moments.dynamics(problem, np.full(rows, 64.0), lr, **kw)
    reference = np.array([crossing.exhaustive_first_crossing(dyn.trajectory(r, 5000),
                                                             problem.target)
                          for r in range(rows)])
    assert np.sum(reference >= 0) >= 10
    assert np.any((reference >= 0) & (reference < crossing.DENSE_STEPS))
    assert np.any(reference > crossing.DENSE_STEPS)
    # loose upper bounds, all above dense_limit (NOT_REACHED where no step reaches)
    known = np.where(reference >= 0, 3 * reference + 150, crossing.NOT_REACHED)
    got = crossing.certified_steps(dyn, problem.target, known, dense_limit=100)
    np.testing.assert_array_equal(got, reference)


@pytest.mark.parametrize("family", ["sgd", "momentum", "ema"])
def test_jumped_recurrence_matches_the_closed_form_at_every_rung(family):
    """Dynamics.jump_trajectory (F^k and Q_k by doubling) against the closed form at the rungs of
    octave_jumps, out to 10^6 steps (where the slow directions have not settled and the fast
    ones' F^k has decayed to zero); an unstable row is inf throughout."""
    problem = NQMConfig(dim=200, target=0.01).problem()
    lr = np.array([0.02, 0.3, 1.2, 50.0])
    kw = ({"momentum": np.array([0.5, 0.9, 0.3, 0.0])} if family == "momentum" else
          {"ema_decay": np.array([0.9, 0.99, 0.5, 0.0])} if family == "ema" else {})
    dyn = moments.dynamics(problem, np.array([1.0, 16.0, 1024.0, 4.0]), lr, **kw)
    jumps = crossing.octave_jumps(10 ** 6)
    rungs = np.concatenate([[0], np.cumsum(2 ** jumps)])
    assert rungs[-1] < 10 ** 6 and rungs[-1] > 0.9 * 10 ** 6
    gaps = np.diff(rungs)[crossing.DENSE_STEPS:] / rungs[crossing.DENSE_STEPS:-1]
    assert gaps.max() <= 1.0 / crossing.CERTIFY_PER_OCTAVE + 1e-12
    for row in range(3):
        assert dyn.stable_N[row]
        got = dyn.jump_trajectory(row, jumps)
        want = dyn.loss(rungs, np.full(rungs.size, row))
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    assert not dyn.stable_N[3]
    assert np.all(np.isinf(dyn.jump_trajectory(3, jumps)))


def test_octave_jumps_stay_below_the_known_step():
    for steps in [1, 2, 3, 63, 64, 65, 66, 129, 2049, 10 ** 5 + 7]:
        rungs = np.cumsum(2 ** crossing.octave_jumps(steps))
        assert np.all(rungs < steps)
        assert np.all(np.diff(rungs) > 0)
        # every step up to DENSE_STEPS, and the last rung within one jump of the known step
        np.testing.assert_array_equal(rungs[:crossing.DENSE_STEPS],
                                      np.arange(1, min(steps - 1, crossing.DENSE_STEPS) + 1))
        if steps > crossing.DENSE_STEPS + 1:
            assert steps - rungs[-1] <= max(1, rungs[-1] // crossing.CERTIFY_PER_OCTAVE)

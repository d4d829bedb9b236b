"""The finite-population correction of the NQM's noise (batches drawn without replacement from N
examples), held against sampling from a real finite population and against known limits."""

import numpy as np
import pytest

from nqm.crossing import best_crossing_per_batch
from nqm.moments import dynamics
from nqm.montecarlo import simulate_losses
from nqm.problem import NQMConfig, noise_factor
from nqm.recurrence import iterate_losses
from nqm.tuning import OptimizerSpec, tune_curve


@pytest.mark.parametrize("batch", [1, 3, 10, 19, 20])
def test_noise_factor_matches_sampling_without_replacement(batch):
    """The variance of a batch mean of B of N fixed per-example gradients, drawn without
    replacement, over many draws, against c f(B) with c the population variance (divisor N)."""
    rng = np.random.default_rng(0)
    n, dim, draws = 20, 6, 40_000
    population = rng.standard_normal((n, dim)) * np.arange(1, dim + 1)
    c = population.var(axis=0)                       # divisor N: one uniformly drawn example
    idx = np.argsort(rng.random((draws, n)), axis=1)[:, :batch]
    means = population[idx].mean(axis=1)             # (draws, dim)
    measured = ((means - population.mean(axis=0)) ** 2).mean(axis=0)
    expected = c * noise_factor(batch, n)
    if batch == n:
        np.testing.assert_allclose(measured, 0.0, atol=1e-20)
    else:
        # 40,000 draws: the variance estimate's relative error is ~sqrt(2 / 40,000) = 0.7%
        np.testing.assert_allclose(measured, expected, rtol=0.03)
        # and the uncorrected 1 / B would be visibly wrong where B is a sizeable fraction of N
        if batch >= 10:
            assert np.all(np.abs(measured - c / batch) > 0.05 * c / batch)


def test_noise_factor_limits_and_input():
    assert noise_factor(7) == pytest.approx(1 / 7)
    assert noise_factor(1, 1000) == pytest.approx(1.0)
    assert noise_factor(1000, 1000) == 0.0
    assert noise_factor(10, 10 ** 9) == pytest.approx(0.1, rel=1e-7)
    with pytest.raises(ValueError, match="batch_size"):
        noise_factor(11, 10)
    for bad in (1, 2.5, 0, -3):
        with pytest.raises(ValueError, match="train_size"):
            NQMConfig(dim=4, train_size=bad).problem()


def _small(train_size=None, **kw):
    return NQMConfig(dim=30, target=0.05, train_size=train_size, **kw).problem()


@pytest.mark.parametrize("momentum,ema", [(0.0, 0.0), (0.8, 0.0), (0.0, 0.9)])
def test_closed_form_with_correction_matches_the_recurrence(momentum, ema):
    problem = _small(train_size=64)
    steps = np.array([0, 1, 7, 50, 400])
    for batch in (4.0, 48.0, 64.0):
        dyn = dynamics(problem, batch, 0.3, momentum, ema)
        ref = iterate_losses(problem, int(steps[-1]), batch, 0.3, momentum, ema)[steps]
        np.testing.assert_allclose([dyn.loss(np.array([t]))[0] for t in steps], ref, rtol=1e-9)


def test_monte_carlo_with_correction_agrees_with_closed_form():
    problem = _small(train_size=40)
    batch, steps, lr = 30.0, 60, 0.5
    mc = simulate_losses(problem, steps, batch, lr, runs=4000, seed=1)
    exact = dynamics(problem, batch, lr).loss(np.array([steps]))[0]
    uncorrected = dynamics(_small(), batch, lr).loss(np.array([steps]))[0]
    assert abs(mc.mean_T[-1] - exact) < 4 * mc.stderr_T[-1]
    # the run is noise-dominated, so the correction (a factor 4 on the noise) is visible
    assert abs(mc.mean_T[-1] - uncorrected) > 10 * mc.stderr_T[-1]


def test_full_batch_is_noiseless():
    """At B = N the noise vanishes: the stationary loss is 0 and the loss is gradient descent's."""
    problem = _small(train_size=50)
    dyn = dynamics(problem, 50.0, 0.4, 0.5)
    assert np.all(dyn.stationary_loss_N == 0.0)
    noiseless = NQMConfig(dim=30, target=0.05, noise_scale=1e-300).problem()
    t = np.array([200])
    np.testing.assert_allclose(dyn.loss(t), dynamics(noiseless, 1.0, 0.4, 0.5).loss(t), rtol=1e-12)


def test_ladder_scan_uses_the_correction():
    """`best_crossing_per_batch` scales the unit-batch noise by f(B): the same answer as tuning
    each batch size's own system directly."""
    problem = _small(train_size=256)
    grid = np.geomspace(0.01, 1.9, 25)
    batches = np.array([4.0, 64.0, 200.0, 256.0])
    unit = dynamics(problem, 1.0, grid)
    steps, _ = best_crossing_per_batch(unit.signal_noise, grid.size, batches, problem.target,
                                       10 ** 5, train_size=problem.train_size)
    t = np.arange(3000)
    for j, b in enumerate(batches):
        dyn = dynamics(problem, b, grid)
        per_row = []
        for r in range(grid.size):
            losses = dyn.loss(t, np.full(t.size, r))        # E[L] at every step t = 0 .. 2999
            hit = np.flatnonzero(losses <= problem.target)
            per_row.append(hit[0] if hit.size else np.inf)
        assert steps[j] == min(per_row)


@pytest.mark.parametrize("name", ["sgd", "momentum"])
def test_tuned_curve_reaches_the_full_batch_limit_at_n(name):
    """With N = 512 the tuned steps at B = N equal the noiseless limit (B -> infinity without the
    correction), and they are fewer than the uncorrected steps at the same B. (B = N and the
    limit are tuned alone: momentum's search is local and, in a curve, starts from the batch
    sizes before it, which differ between the two.)"""
    spec = OptimizerSpec(name)
    with_n = NQMConfig(dim=200, target=0.02, train_size=512)
    without = NQMConfig(dim=200, target=0.02)
    assert (tune_curve(with_n, spec, [512]).points[0].steps
            == tune_curve(without, spec, [2 ** 40]).points[0].steps)
    corrected = {p.batch_size: p.steps for p in tune_curve(with_n, spec, [16, 256, 512]).points}
    plain = {p.batch_size: p.steps for p in tune_curve(without, spec, [16, 256, 512]).points}
    assert corrected[256] < plain[256]
    assert corrected[16] <= plain[16]


def test_batch_larger_than_the_training_set_is_refused():
    with pytest.raises(ValueError, match="batch_size"):
        dynamics(_small(train_size=10), 11.0, 0.1)
    with pytest.raises(ValueError, match="batch_size"):
        tune_curve(NQMConfig(dim=10, train_size=100), OptimizerSpec("sgd"), [64, 128])

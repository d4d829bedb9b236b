"""Tuned piecewise-constant schedules (nqm.schedule_tuning and tune_curve's 'schedule' family)."""

import numpy as np
import pytest

from nqm.problem import NQMConfig
from nqm.schedule_tuning import _ScheduleLoss, best_schedule, piece_lengths
from nqm.schedules import schedule_losses
from nqm.tuning import OptimizerSpec, tune_curve

SMALL = NQMConfig(dim=200, target=0.02)


@pytest.mark.parametrize("total, pieces", [(10, 10), (11, 10), (1003, 7), (5, 1)])
def test_piece_lengths_are_near_equal_and_sum_to_total(total, pieces):
    lengths = piece_lengths(total, pieces)
    assert lengths.sum() == total and lengths.size == pieces
    assert lengths.max() - lengths.min() <= 1 and lengths.min() >= 1


@pytest.mark.parametrize("precond_power", [0.0, 0.5])
def test_schedule_loss_and_gradient(precond_power):
    problem = SMALL.problem()
    fn = _ScheduleLoss(problem, 16, precond_power)
    log_lrs = np.log([0.9, 0.4, 0.1, 0.02])
    lengths = piece_lengths(1500, 4)
    loss, grad = fn(log_lrs, lengths)
    # the loss equals the composed closed form at the schedule's end ...
    ref = schedule_losses(problem, [1500], 16, np.exp(log_lrs), lengths,
                          precond_power=precond_power)[0]
    assert loss == pytest.approx(ref, rel=1e-12)
    # ... and the gradient equals central differences
    eps = 1e-6
    fd = [(fn(log_lrs + eps * e, lengths)[0] - fn(log_lrs - eps * e, lengths)[0]) / (2 * eps)
          for e in np.eye(4)]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-12)


def test_best_schedule_beats_the_best_constant_rate():
    problem = SMALL.problem()
    bounds = (np.log(1e-6), np.log(2.0 * (1 - 1e-9)))
    z, loss = best_schedule(problem, 4, 2000, 10, np.full(10, np.log(0.05)), bounds)
    constant = min(schedule_losses(problem, [2000], 4, [a], [2000])[0]
                   for a in np.geomspace(1e-3, 1.9, 200))
    assert loss < constant
    assert np.all(np.diff(z) <= 1e-6)  # the optimal schedule decays


@pytest.fixture(scope="module")
def curves():
    batch = [4, 16, 64, 256, 1024, 4096]
    return (tune_curve(SMALL, OptimizerSpec("sgd"), batch),
            tune_curve(SMALL, OptimizerSpec("schedule"), batch))


def test_schedules_pay_only_in_the_noise_dominated_regime(curves):
    sgd, sched = curves
    s_sgd, s_sched = sgd.steps, sched.steps
    assert np.all(s_sched <= s_sgd)
    assert s_sched[0] < 0.5 * s_sgd[0]           # small batch: a large gain
    assert s_sched[-1] > 0.9 * s_sgd[-1]         # large batch: almost none


def test_schedule_points_reach_the_target_at_their_steps(curves):
    _, sched = curves
    problem = SMALL.problem()
    for p in sched.points:
        lengths = piece_lengths(p.steps, len(p.schedule))
        end = schedule_losses(problem, [p.steps], p.batch_size, p.schedule, lengths)[0]
        assert end <= problem.target
        assert p.learning_rate == p.schedule[0] and max(p.schedule) < 2.0

"""nqm.schedules: constant segments chained through `Dynamics.state` equal the per-step recurrence."""

import numpy as np
import pytest

from nqm import moments, recurrence, schedules
from nqm.problem import NQMConfig

SEGMENTS = np.array([150, 400, 250])


@pytest.fixture(scope="module")
def problem():
    return NQMConfig(dim=40, target=0.01).problem()


def per_step_rates(learning_rates, segment_steps):
    return np.repeat(np.asarray(learning_rates, float), segment_steps)


CASES = {
    "sgd_decay": dict(learning_rates=[1.5, 0.3, 0.05]),
    "sgd_warmup_then_decay": dict(learning_rates=[0.2, 1.9, 0.01]),
    "momentum": dict(learning_rates=[0.3, 0.05, 0.005], momentum=0.9),
    "momentum_edge": dict(learning_rates=[3.7, 1.0, 0.1], momentum=0.9),
    "ema": dict(learning_rates=[1.0, 0.3, 0.1], ema_decay=0.95),
    "precond": dict(learning_rates=[0.8, 0.2, 0.04], precond_power=0.5),
    "momentum_precond": dict(learning_rates=[0.2, 0.05, 0.01], momentum=0.8, precond_power=0.5),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("batch_size", [2, 64])
def test_three_segments_equal_recurrence_every_step(problem, name, batch_size):
    kw = dict(CASES[name])
    lrs = kw.pop("learning_rates")
    total = int(SEGMENTS.sum())
    steps = np.arange(total + 1)
    got = schedules.schedule_losses(problem, steps, batch_size, lrs, SEGMENTS, **kw)
    ref = recurrence.iterate_losses(problem, total, batch_size, per_step_rates(lrs, SEGMENTS), **kw)
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=0)
    # Not the constant-rate curve: the later segments change the loss.
    const = moments.expected_loss(problem, [total], batch_size, lrs[0], **kw)[0, 0]
    assert abs(ref[-1] / const - 1) > 0.05


def test_equal_segments_equal_constant_closed_form(problem):
    steps = np.arange(0, int(SEGMENTS.sum()) + 1, 7)
    for kw in (dict(), dict(momentum=0.9), dict(ema_decay=0.9), dict(precond_power=0.5)):
        lr = 0.3
        got = schedules.schedule_losses(problem, steps, 8, [lr, lr, lr], SEGMENTS, **kw)
        want = moments.expected_loss(problem, steps, 8, lr, **kw)[0]
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=0)


def test_segment_boundaries_and_single_segment(problem):
    """Losses at the boundaries come from the right segment; one segment is the constant case."""
    lrs = [1.0, 0.1, 0.01]
    boundaries = np.concatenate([[0], np.cumsum(SEGMENTS)])
    probe = np.unique(np.concatenate([boundaries, boundaries[1:] - 1, boundaries[:-1] + 1]))
    got = schedules.schedule_losses(problem, probe, 4, lrs, SEGMENTS, momentum=0.5)
    ref = recurrence.iterate_losses(problem, int(SEGMENTS.sum()), 4, per_step_rates(lrs, SEGMENTS),
                                    momentum=0.5)
    np.testing.assert_allclose(got, ref[probe], rtol=1e-10)
    one = schedules.schedule_losses(problem, [0, 10, 500], 4, [0.7], [500])
    np.testing.assert_allclose(one, moments.expected_loss(problem, [0, 10, 500], 4, 0.7)[0], rtol=1e-12)


def test_unstable_segment_gives_inf(problem):
    losses = schedules.schedule_losses(problem, [0, 10, 200, 800], 4, [0.5, 2.5, 0.1], SEGMENTS)
    assert np.all(np.isposinf(losses))


@pytest.mark.parametrize("lrs, segs, name", [
    ([0.1, 0.2], [10, 10, 10], "learning_rates"),
    ([0.1, 0.2], [10, 0], "segment_steps"),
    ([0.1], [], "segment_steps"),
    ([0.1, 0.2], [10, 2.5], "segment_steps"),
])
def test_bad_schedule_raises(problem, lrs, segs, name):
    with pytest.raises(ValueError, match=name):
        schedules.schedule_losses(problem, [0], 4, lrs, segs)


def test_steps_outside_schedule_raise(problem):
    with pytest.raises(ValueError, match="steps"):
        schedules.schedule_losses(problem, [0, 801], 4, [0.1, 0.2, 0.3], SEGMENTS)

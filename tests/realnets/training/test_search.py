"""realnets.training.search: a space without a decay-length range draws exactly the trials it drew
before the range existed; with one, each trial gets a whole number of decay steps in it."""

import math

import numpy as np
import pytest

from realnets.training.search import trial_specs
from realnets.workloads.search_space import TrialSearchSpace

# The first three trials for seed 7, saved from trial_specs before decay_steps existed.
BEFORE = {
    "momentum": ([0.0025643028828847836, 0.25643028828847847, 0.02564302882884783],
                 [0.3630649350377242, 0.9936306493503773, 0.9363064935037724],
                 [0.48197443712742516, 0.0019187747944391365, 0.00763878004343534]),
    "sgd": ([0.0025643028828847836, 0.25643028828847847, 0.02564302882884783],
            [None, None, None],
            [0.3872795109897792, 0.028534998345287863, 0.1051238327176918]),
}


@pytest.mark.parametrize("optimizer, final", [("momentum", (1e-3, 1.0)), ("sgd", (1e-2, 0.5))])
def test_space_without_decay_range_draws_the_trials_it_drew_before(optimizer, final):
    specs = trial_specs(TrialSearchSpace(final_lr_fraction=final), optimizer, 3, seed=7)
    lrs, momenta, finals = BEFORE[optimizer]
    # to rounding: the draws' last bits move with the CPU's vector instructions
    assert [s.learning_rate for s in specs] == pytest.approx(lrs, rel=1e-12)
    assert [s.momentum for s in specs] == pytest.approx(momenta, rel=1e-12)
    assert [s.final_lr_fraction for s in specs] == pytest.approx(finals, rel=1e-12)
    assert [s.decay_steps for s in specs] == [None] * 3
    # without a final-fraction range: the same learning rates and momenta, a constant rate
    constant = trial_specs(TrialSearchSpace(), optimizer, 3, seed=7)
    assert [s.final_lr_fraction for s in constant] == [1.0] * 3
    assert [s.learning_rate for s in constant] == pytest.approx(lrs, rel=1e-12)
    assert [s.momentum for s in constant] == pytest.approx(momenta, rel=1e-12)


def test_decay_range_gives_whole_steps_spread_over_the_range_on_a_log_scale():
    space = TrialSearchSpace(final_lr_fraction=(0.01, 1.0), decay_steps=(10.0, 1000.0))
    specs = trial_specs(space, "momentum", 64, seed=3)
    steps = np.array([s.decay_steps for s in specs])
    assert all(isinstance(s.decay_steps, int) for s in specs)
    assert steps.min() >= 10 and steps.max() <= 1000
    # log-uniform: a quarter of the trials in each quarter of [log 10, log 1000] (+-3 of 16)
    quarter = np.floor((np.log(steps) - math.log(10)) / (math.log(100) / 4)).clip(0, 3)
    counts = np.bincount(quarter.astype(int), minlength=4)
    assert np.all(np.abs(counts - 16) <= 3), counts
    # the same sequence point for the same trial id, whatever the count
    assert [s.decay_steps for s in trial_specs(space, "momentum", 5, seed=3)] == list(steps[:5])


@pytest.mark.parametrize("bounds, allowed", [((2.5, 3.5), {3}), ((1.0, 1.0), {1}),
                                             ((1.0, 2.4), {1, 2})])
def test_decay_steps_stay_within_the_whole_steps_of_the_range(bounds, allowed):
    specs = trial_specs(TrialSearchSpace(final_lr_fraction=(0.1, 0.5), decay_steps=bounds), "sgd",
                        32, seed=0)
    assert {s.decay_steps for s in specs} <= allowed


@pytest.mark.parametrize("bounds, message", [
    ((0.5, 10), "decay-steps-range must be LO,HI with 1 <= LO <= HI <= 1e+09, got 0.5,10"),
    ((20, 10), "decay-steps-range must be LO,HI with 1 <= LO <= HI <= 1e+09, got 20,10"),
    ((1.2, 1.8), "decay-steps-range must hold a whole number of steps, got 1.2,1.8"),
    ("ab", "decay-steps-range must be LO,HI"),
])
def test_bad_decay_range_is_one_line_naming_the_flag(bounds, message):
    with pytest.raises(ValueError) as err:
        TrialSearchSpace(final_lr_fraction=(0.1, 0.5), decay_steps=bounds)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_decay_length_without_a_final_fraction_is_refused():
    with pytest.raises(ValueError, match="decay-steps-range needs a final-lr-fraction-range"):
        TrialSearchSpace(decay_steps=(2, 10))

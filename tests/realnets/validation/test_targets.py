"""realnets.validation.targets: the NQM optimizer and step-matched target of an adam sweep."""

import pytest

from nqm.lowest_loss import lowest_loss
from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, SearchSpace
from realnets.validation.settings import NQM_FAMILY
from realnets.validation.targets import (StepMatch, nqm_optimizer, nqm_search_space,
                                         step_matched_target)
from realnets.workloads.search_space import TrialSearchSpace


def test_adam_sweeps_are_predicted_by_mean_field_adam_in_the_sweep_s_b1_range():
    assert NQM_FAMILY["adam"] == "adam"
    space = nqm_search_space(TrialSearchSpace((1e-3, 2e-2), (5e-2, 0.5)))   # text_transformer's
    assert nqm_optimizer("adam", space) == OptimizerSpec("adam", beta1=(0.5, 0.9))
    # no listed b1 inside 1 - b1 in (0.02, 0.05): the range's ends
    narrow = SearchSpace(one_minus_momentum=(0.02, 0.05))
    assert nqm_optimizer("adam", narrow).beta1 == pytest.approx((0.95, 0.98))
    assert nqm_optimizer("momentum", space) == OptimizerSpec("momentum")


def test_adam_step_matched_target_is_its_lowest_loss():
    config = NQMConfig(dim=30, target=0.05)
    space = SearchSpace(learning_rate=(1e-3, 0.1), one_minus_momentum=(0.05, 0.5))
    match = StepMatch(family="adam", batch_size=16, steps=80, space=space)
    target, record = step_matched_target(config, match)
    expected = lowest_loss(config.problem(), OptimizerSpec("adam", beta1=(0.5, 0.9)), 16, 80, space)
    assert target == pytest.approx(expected.loss, rel=1e-12)
    assert record["momentum"] in (0.5, 0.9) and 1e-3 <= record["learning_rate"] <= 0.1

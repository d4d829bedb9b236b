"""The headline rule's NQM target and search space (docs/prediction_rule.md, rules 4 and 5).

- The NQM is tuned inside the sweep's own search space (`nqm_search_space`): the calibrated NQM
  lives in the network's parameter coordinates (rotated to the Hessian's eigenbasis), so a
  learning rate means the same there.
- The step-matched target (`step_matched_target`): the lowest expected loss the tuned NQM reaches
  in the reference run's steps to result S_ref at its batch size B_ref. The tuned NQM then needs
  S_ref steps at B_ref, as the tuned network did; no estimate of the network's minimum loss L* is
  needed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nqm import validation
from nqm.adam_tuning import BETA1
from nqm.lowest_loss import lowest_loss
from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, SearchSpace
from realnets.workloads.search_space import TrialSearchSpace


def nqm_search_space(search: TrialSearchSpace) -> SearchSpace:
    """The NQM tuner's bounds from a sweep's: its learning-rate and 1 - momentum ranges (the
    learning-rate decay, `final_lr_fraction`, is not carried over: the calibration tunes a
    constant rate, as the shipped sweeps use; `nqm.linear_decay` models a decay)."""
    return SearchSpace(learning_rate=tuple(search.learning_rate),
                       one_minus_momentum=tuple(search.one_minus_momentum))


def nqm_optimizer(family: str, space: SearchSpace) -> OptimizerSpec:
    """The NQM optimizer tuned for `family` in `space`. Adam's b1 is chosen from the tuner's list
    (`nqm.adam_tuning.BETA1`) inside the sweep's 1 - b1 range, or from the range's two ends when
    none is inside: each b1 costs one more scan of learning rates (~30 s at d = 1500 over 7 batch
    sizes on a busy 2-core machine, docs/nqm_adam.md)."""
    if family != "adam":
        return OptimizerSpec(family)
    lo, hi = 1.0 - space.one_minus_momentum[1], 1.0 - space.one_minus_momentum[0]
    return OptimizerSpec("adam", beta1=betas_inside(BETA1, space)
                         or tuple(sorted({lo, min(hi, 0.999)})))


def betas_inside(betas, space: SearchSpace) -> tuple[float, ...]:
    """The momenta (b or b1) of `betas` inside 1 - `space.one_minus_momentum` (may be empty)."""
    lo, hi = 1.0 - space.one_minus_momentum[1], 1.0 - space.one_minus_momentum[0]
    return tuple(b for b in betas if lo - 1e-12 <= b <= hi + 1e-12)


@dataclass(frozen=True)
class StepMatch:
    """The reference run the target is matched to.

    Attributes:
      family: the NQM optimizer family ('sgd', 'momentum', 'adam').
      batch_size: B_ref, the reference run's batch size.
      steps: S_ref, its steps to result (>= 1).
      space: the NQM's search space (`nqm_search_space` of the sweep's).
    """

    family: str
    batch_size: int
    steps: int
    space: SearchSpace

    def __post_init__(self):
        validation.check_whole("batch_size", self.batch_size, 1)
        validation.check_whole("steps", self.steps, 1)

    @classmethod
    def from_record(cls, record: dict, space: SearchSpace) -> "StepMatch":
        """The match a checkpoint record stored under "step_match" (`to_dict`'s form), in
        `space` (the sweep's `nqm_search_space`, which the stored ranges are part of)."""
        return cls(family=record["family"], batch_size=int(record["batch_size"]),
                   steps=int(record["steps"]), space=space)

    def to_dict(self) -> dict:
        return {"family": self.family, "batch_size": self.batch_size, "steps": self.steps,
                "space": {"learning_rate": list(self.space.learning_rate),
                          "one_minus_momentum": list(self.space.one_minus_momentum)}}


def step_matched_target(config: NQMConfig, match: StepMatch) -> tuple[float, dict]:
    """The target the NQM (its arrays; its own target is ignored) reaches in `match.steps` steps at
    `match.batch_size` when tuned in `match.space`.

    Returns:
      (target, record): the record holds the minimising metaparameters and the match.
    """
    problem = dataclasses.replace(config, target=1.0).problem()
    best = lowest_loss(problem, nqm_optimizer(match.family, match.space), match.batch_size,
                       match.steps, match.space)
    return best.loss, {"target": best.loss, "learning_rate": best.learning_rate,
                       "momentum": best.momentum, **match.to_dict()}

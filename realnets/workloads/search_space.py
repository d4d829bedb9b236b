"""The ranges a workload's metaparameter search covers (log scales; Shallue et al. 2018, appendix D).

Named TrialSearchSpace to tell it from `nqm.tuning.SearchSpace`, the NQM tuner's grid ranges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nqm.validation import check_range_pair


MAX_DECAY_STEPS = 1e9


def check_decay_steps(value) -> tuple[float, float]:
    """`value` as a (lo, hi) decay-length range in steps with 1 <= lo <= hi <= MAX_DECAY_STEPS
    that holds a whole number of steps (one-line ValueError naming decay-steps-range)."""
    allowed = f"decay-steps-range must be LO,HI with 1 <= LO <= HI <= {MAX_DECAY_STEPS:g}"
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{allowed}, got {value!r:.80}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 1.0 <= lo <= hi <= MAX_DECAY_STEPS):
        raise ValueError(f"{allowed}, got {lo:g},{hi:g}")
    if math.ceil(lo) > math.floor(hi):
        raise ValueError(f"decay-steps-range must hold a whole number of steps, got {lo:g},{hi:g}")
    return lo, hi


@dataclass(frozen=True)
class TrialSearchSpace:
    """Closed ranges searched on a log scale by a sweep's quasi-random trials.

    Attributes:
      learning_rate: (lo, hi) of the initial learning rate.
      one_minus_momentum: (lo, hi) of 1 - momentum (used by momentum, nesterov, adam's 1 - beta1).
      final_lr_fraction: (lo, hi) of the linear decay's final fraction, or None for a constant
        learning rate.
      decay_steps: (lo, hi) of the linear decay's length in steps (1 <= lo; a trial's value is
        rounded to whole steps), or None: the decay spans the step budget. Only with a
        final_lr_fraction range (refused otherwise: there would be nothing to decay). The sweep checks
        hi <= its max_steps (`realnets.sweeps.records.SweepConfig`).
    """

    learning_rate: tuple[float, float] = (1e-3, 10.0)
    one_minus_momentum: tuple[float, float] = (1e-3, 1.0)
    final_lr_fraction: tuple[float, float] | None = None
    decay_steps: tuple[float, float] | None = None

    def __post_init__(self):
        object.__setattr__(self, "learning_rate",
                           check_range_pair("lr-range", self.learning_rate, 0.0, 1e6))
        object.__setattr__(self, "one_minus_momentum",
                           check_range_pair("one-minus-momentum-range", self.one_minus_momentum,
                                            0.0, 1.0))
        if self.final_lr_fraction is not None:
            object.__setattr__(self, "final_lr_fraction",
                               check_range_pair("final-lr-fraction-range", self.final_lr_fraction,
                                                0.0, 1.0))
        if self.decay_steps is not None:
            object.__setattr__(self, "decay_steps", check_decay_steps(self.decay_steps))
            if self.final_lr_fraction is None:
                raise ValueError("decay-steps-range needs a final-lr-fraction-range (LO,HI within "
                                 "(0, 1]): without one the rate is constant")

    def to_dict(self) -> dict:
        out = {"learning_rate": list(self.learning_rate),
               "one_minus_momentum": list(self.one_minus_momentum),
               "final_lr_fraction": None if self.final_lr_fraction is None
               else list(self.final_lr_fraction)}
        if self.decay_steps is not None:     # config.json files without it stay as they were
            out["decay_steps"] = list(self.decay_steps)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "TrialSearchSpace":
        """Reads `to_dict`'s form; a missing range takes the default (ValueError if not a dict)."""
        if not isinstance(d, dict):
            raise ValueError(f"search must be a JSON object of ranges, got {d!r:.80}")
        defaults = cls()
        return cls(learning_rate=d.get("learning_rate", defaults.learning_rate),
                   one_minus_momentum=d.get("one_minus_momentum", defaults.one_minus_momentum),
                   final_lr_fraction=d.get("final_lr_fraction"),
                   decay_steps=d.get("decay_steps"))

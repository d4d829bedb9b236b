"""The ranges a workload's metaparameter search covers (log scales; Shallue et al. 2018, appendix D).

Named TrialSearchSpace to tell it from `nqm.tuning.SearchSpace`, the NQM tuner's grid ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

from nqm.validation import check_range_pair


@dataclass(frozen=True)
class TrialSearchSpace:
    """Closed ranges searched on a log scale by a sweep's quasi-random trials.

    Attributes:
      learning_rate: (lo, hi) of the initial learning rate.
      one_minus_momentum: (lo, hi) of 1 - momentum (used by momentum, nesterov, adam's 1 - beta1).
      final_lr_fraction: (lo, hi) of the linear decay's final fraction, or None for a constant
        learning rate.
    """

    learning_rate: tuple[float, float] = (1e-3, 10.0)
    one_minus_momentum: tuple[float, float] = (1e-3, 1.0)
    final_lr_fraction: tuple[float, float] | None = None

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

    def to_dict(self) -> dict:
        return {"learning_rate": list(self.learning_rate),
                "one_minus_momentum": list(self.one_minus_momentum),
                "final_lr_fraction": None if self.final_lr_fraction is None
                else list(self.final_lr_fraction)}

    @classmethod
    def from_dict(cls, d: dict) -> "TrialSearchSpace":
        """Reads `to_dict`'s form; a missing range takes the default (ValueError if not a dict)."""
        if not isinstance(d, dict):
            raise ValueError(f"search must be a JSON object of ranges, got {d!r:.80}")
        defaults = cls()
        return cls(learning_rate=d.get("learning_rate", defaults.learning_rate),
                   one_minus_momentum=d.get("one_minus_momentum", defaults.one_minus_momentum),
                   final_lr_fraction=d.get("final_lr_fraction"))

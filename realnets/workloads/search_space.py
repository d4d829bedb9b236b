"""The ranges a workload's metaparameter search covers (log scales; Shallue et al. 2018, appendix D)."""

from __future__ import annotations

import math
from dataclasses import dataclass


def _check_range(name: str, value, lo_allowed: float, hi_allowed: float) -> tuple[float, float]:
    lo, hi = (float(v) for v in value)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo_allowed < lo <= hi <= hi_allowed):
        raise ValueError(f"{name} must be LO,HI with {lo_allowed:g} < LO <= HI <= {hi_allowed:g}, "
                         f"got {lo:g},{hi:g}")
    return lo, hi


@dataclass(frozen=True)
class SearchSpace:
    """Closed ranges searched on a log scale.

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
                           _check_range("lr-range", self.learning_rate, 0.0, 1e6))
        object.__setattr__(self, "one_minus_momentum",
                           _check_range("one-minus-momentum-range", self.one_minus_momentum, 0.0, 1.0))
        if self.final_lr_fraction is not None:
            object.__setattr__(self, "final_lr_fraction",
                               _check_range("final-lr-fraction-range", self.final_lr_fraction, 0.0, 1.0))

    def to_dict(self) -> dict:
        return {"learning_rate": list(self.learning_rate),
                "one_minus_momentum": list(self.one_minus_momentum),
                "final_lr_fraction": None if self.final_lr_fraction is None
                else list(self.final_lr_fraction)}

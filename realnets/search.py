"""Quasi-random metaparameter search (Shallue et al. 2018, section 3.3 and appendix D).

Trials draw from a scrambled Halton sequence over log learning rate and, for optimizers with
momentum, log(1 - momentum) ("reverse log"); optionally log of the final fraction of a linear
learning-rate decay. Trial i is the i-th point of the sequence for a given seed, so every
batch size sees the same trial ids, and a resumed sweep regenerates exactly the same trials.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import qmc

from realnets.trainer import TrialSpec

MOMENTUM_OPTIMIZERS = ("momentum", "nesterov", "adam")


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


def trial_specs(space: SearchSpace, optimizer: str, count: int, seed: int) -> list[TrialSpec]:
    """The first `count` trials of the sequence for `seed` (trial ids 0 .. count - 1)."""
    if count < 1:
        raise ValueError(f"trials must be >= 1, got {count}")
    names = ["learning_rate"]
    if optimizer in MOMENTUM_OPTIMIZERS:
        names.append("one_minus_momentum")
    if space.final_lr_fraction is not None:
        names.append("final_lr_fraction")
    unit = qmc.Halton(d=len(names), scramble=True, seed=seed).random(count)
    values = {}
    for j, name in enumerate(names):
        lo, hi = np.log(getattr(space, name))
        values[name] = np.exp(lo + (hi - lo) * unit[:, j])
    specs = []
    for i in range(count):
        omm = values.get("one_minus_momentum")
        specs.append(TrialSpec(
            trial_id=i, learning_rate=float(values["learning_rate"][i]),
            momentum=None if omm is None else float(min(1.0 - omm[i], 1.0 - 1e-12)),
            final_lr_fraction=float(values["final_lr_fraction"][i])
            if "final_lr_fraction" in values else 1.0))
    return specs

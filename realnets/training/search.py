"""Quasi-random metaparameter search (Shallue et al. 2018, section 3.3 and appendix D).

Trials draw from a scrambled Halton sequence over log learning rate and, for optimizers with
momentum, log(1 - momentum) ("reverse log"); optionally log of the final fraction of a linear
learning-rate decay, then log of its length in steps (rounded to whole steps). A dimension is
added only when its range is searched, in that order, so a space without the decay length
draws exactly the trials it drew before the option existed. Trial i is the i-th point of the
sequence for a given seed, so every batch size sees the same trial ids, and a resumed sweep
regenerates exactly the same trials.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import qmc

from nqm.validation import check_whole
from realnets.training.trainer import TrialSpec
from realnets.workloads.search_space import TrialSearchSpace

MOMENTUM_OPTIMIZERS = ("momentum", "nesterov", "adam")


def _whole_steps(value: float, bounds: tuple[float, float]) -> int:
    """A decay length drawn in [lo, hi] as whole steps: rounded, kept within the whole steps of
    the range (a fractional lo or hi never rounds out of it) and >= 1."""
    lo, hi = bounds
    return int(max(1, math.ceil(lo), min(math.floor(hi), round(float(value)))))


def trial_specs(space: TrialSearchSpace, optimizer: str, count: int, seed: int) -> list[TrialSpec]:
    """The first `count` trials of the sequence for `seed` (trial ids 0 .. count - 1)."""
    count = check_whole("trials", count, 1)
    names = ["learning_rate"]
    if optimizer in MOMENTUM_OPTIMIZERS:
        names.append("one_minus_momentum")
    if space.final_lr_fraction is not None:
        names.append("final_lr_fraction")
    if space.decay_steps is not None:
        names.append("decay_steps")
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
            if "final_lr_fraction" in values else 1.0,
            decay_steps=_whole_steps(values["decay_steps"][i], space.decay_steps)
            if "decay_steps" in values else None))
    return specs

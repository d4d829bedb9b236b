"""The optimizer families the NQM tunes, their search bounds, and the search coordinates.

`OptimizerSpec` names a family (SGD, heavy-ball momentum, SGD with iterate averaging, piecewise
schedules, mean-field Adam) with its preconditioner; `SearchSpace` bounds its metaparameters;
`metaparameters` / `coordinates` map between them and the coordinates the searches move in
(`nqm.tuning`, `nqm.lowest_loss`):

SGD z = log a; momentum z = (log(a / (1 - b)), log(1 - b)), so the first axis is the effective
learning rate; averaging z = (log(u / (1 - u)), log(1 - g)) with u = a h_max / 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nqm import adam_tuning, validation

FAMILIES = ("sgd", "momentum", "ema", "schedule", "adam")


@dataclass(frozen=True)
class OptimizerSpec:
    """An optimizer family to tune: 'sgd', 'momentum' (heavy ball), 'ema' (SGD + averaging) or
    'schedule' (SGD with `pieces` equal pieces of tuned step sizes), each with preconditioner
    H^-precond_power; or 'adam' (mean-field Adam, `nqm.adam`: its own diagonal preconditioner,
    so precond_power must be 0), tuned over the learning rate and b1 in `beta1`, with b2 fixed
    at `beta2` (`nqm.adam_tuning`; beta1 and beta2 are ignored by the other families)."""

    name: str = "sgd"
    precond_power: float = 0.0
    pieces: int = 10
    beta1: tuple[float, ...] = adam_tuning.BETA1
    beta2: float = adam_tuning.BETA2

    def __post_init__(self):
        if self.name not in FAMILIES:
            raise ValueError(f"optimizer must be one of {', '.join(FAMILIES)}, got {self.name!r}")
        validation.check_in_range("precond_power", self.precond_power, 0.0, 1.0)
        validation.check_whole("pieces", self.pieces, 1, 100)
        if self.name == "adam" and self.precond_power != 0.0:
            raise ValueError("precond_power must be 0 for adam (its preconditioner is its own), "
                             f"got {self.precond_power:g}")
        try:
            beta1 = tuple(float(b) for b in np.atleast_1d(np.asarray(self.beta1, dtype=float)))
        except (TypeError, ValueError):
            raise ValueError(f"beta1 must be a list of numbers in [0, 1), got {self.beta1!r:.80}"
                             ) from None
        if not beta1:
            raise ValueError("beta1 must hold at least one value in [0, 1)")
        validation.check_all_in_range("beta1", beta1, 0.0, 1.0, closed_high=False)
        validation.check_in_range("beta2", self.beta2, 0.0, 1.0, closed_high=False)
        object.__setattr__(self, "beta1", beta1)    # normalised: a hashable tuple of floats
        object.__setattr__(self, "beta2", float(self.beta2))

    @property
    def dims(self) -> int:
        return 1 if self.name in ("sgd", "schedule") else 2


@dataclass(frozen=True)
class SearchSpace:
    """Bounds of the search (closed intervals): learning rate, 1 - momentum, 1 - average decay.

    The learning rate is also capped by stability (a h_max < 2 (1 + b)) whatever these say.
    For adam only the learning rate applies (Adam's rate, `nqm.adam_tuning.AdamSearch`); the
    default bounds are SGD's: `default_space(spec)` gives each family's own.
    """

    learning_rate: tuple[float, float] = (1e-8, 10.0)
    one_minus_momentum: tuple[float, float] = (1e-5, 1.0)
    one_minus_ema_decay: tuple[float, float] = (1e-5, 1.0)
    grid_per_decade: int = 6

    def __post_init__(self):
        for name, (lo, hi), upper in (("learning_rate", self.learning_rate, np.inf),
                                      ("one_minus_momentum", self.one_minus_momentum, 1.0),
                                      ("one_minus_ema_decay", self.one_minus_ema_decay, 1.0)):
            validation.check_positive(f"{name} lower bound", lo)
            validation.check_positive(f"{name} upper bound", hi)
            if lo > hi or hi > upper:
                raise ValueError(f"{name} bounds must satisfy 0 < low <= high <= {upper:g}, "
                                 f"got ({lo:g}, {hi:g})")
        validation.check_whole("grid_per_decade", self.grid_per_decade, 1, 100)


def default_space(spec: OptimizerSpec) -> SearchSpace:
    """The default search bounds of a family: SearchSpace() but, for adam, Adam's learning-rate
    bounds (`AdamSearch().learning_rate`; SGD's go up to 10, a step of ~10 per coordinate)."""
    if spec.name == "adam":
        return SearchSpace(learning_rate=adam_tuning.AdamSearch().learning_rate)
    return SearchSpace()


def adam_search(space: SearchSpace, max_steps: int) -> adam_tuning.AdamSearch:
    """The Adam tuner's search for `space`: its learning-rate bounds and the step budget (the
    scan density and refinements are AdamSearch's own)."""
    return adam_tuning.AdamSearch(learning_rate=space.learning_rate, max_steps=max_steps)


def metaparameters(spec: OptimizerSpec, z, h_max: float):
    """(learning_rate, momentum, ema_decay), each (n,), from search coordinates z (n, dims);
    h_max: the largest effective curvature (averaging's learning-rate coordinate uses it)."""
    z = np.asarray(z, dtype=float).reshape(-1, spec.dims)
    zeros = np.zeros(z.shape[0])
    if spec.name == "sgd":
        return np.exp(z[:, 0]), zeros, zeros
    rest = -np.expm1(z[:, 1])  # 1 - exp(z1) without cancellation
    if spec.name == "momentum":
        return np.exp(z[:, 0] + z[:, 1]), rest, zeros
    # a = (2 / h_max) sigmoid(z0)
    return 2.0 / h_max * np.exp(-np.logaddexp(0.0, -z[:, 0])), zeros, rest


def coordinates(spec: OptimizerSpec, h_max: float, learning_rate, momentum=0.0,
                ema_decay=0.0) -> np.ndarray:
    """Inverse of `metaparameters`: z (n, dims)."""
    a = np.atleast_1d(np.asarray(learning_rate, dtype=float))
    if spec.name == "sgd":
        return np.log(a)[:, None]
    if spec.name == "momentum":
        om = 1.0 - np.broadcast_to(np.asarray(momentum, float), a.shape)
        return np.stack([np.log(a / om), np.log(om)], axis=1)
    og = 1.0 - np.broadcast_to(np.asarray(ema_decay, float), a.shape)
    u = a * h_max / 2.0
    with np.errstate(divide="ignore"):
        logit = np.log(u) - np.log1p(-u)   # +inf at (or past) the stability limit
    return np.stack([logit, np.log(og)], axis=1)

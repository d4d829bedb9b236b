"""The ScalingCurve: steps to a target at each batch size, made by the NQM or measured on a net.

Both sides of batchscope produce this one type and `nqm.scaling` analyses it, so a prediction
and a measurement can always be drawn on the same axes. Its JSON form is the `points` and
`config` part of docs/design.md, 'Formats'; non-finite numbers are written as null.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nqm import validation


def _clean(value):
    """JSON-safe copy: numpy scalars to Python, non-finite floats to None."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_clean(v) for v in value.tolist()]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


def to_json(obj: Any, **kwargs) -> str:
    """json.dumps after `_clean` (no NaN or Infinity tokens in the output)."""
    return json.dumps(_clean(obj), allow_nan=False, **kwargs)


@dataclass(frozen=True)
class CurvePoint:
    """One batch size of a curve.

    Attributes:
      batch_size: examples per step.
      steps: steps to reach the target, or None if no setting reached it within the budget.
      learning_rate, momentum, ema_decay: the metaparameters that achieved `steps` (None if
        unreached or not used).
      edge: names of metaparameters whose best value sits on the edge of the searched range.
      schedule: step sizes of the equal pieces of a piecewise-constant schedule (else empty).
      final_lr_fraction: f of a linear decay from learning_rate to f learning_rate over the
        run (`nqm.linear_decay`), or None (a constant rate or another schedule).
      trials: optional records of every trial behind this point (measured curves).
      repeats: optional records of the best trial's configuration run again with other seeds
        (measured curves, `realnets.sweeps.repeats`), each with its seed and steps_to_goal.
    """

    batch_size: int
    steps: int | None
    learning_rate: float | None = None
    momentum: float | None = None
    ema_decay: float | None = None
    edge: tuple[str, ...] = ()
    schedule: tuple[float, ...] = ()
    final_lr_fraction: float | None = None
    trials: tuple[dict, ...] = field(default=(), repr=False, compare=False)
    repeats: tuple[dict, ...] = field(default=(), repr=False, compare=False)

    @property
    def reached(self) -> bool:
        return self.steps is not None

    def to_dict(self) -> dict:
        out = {"batch_size": int(self.batch_size),
               "steps": None if self.steps is None else int(self.steps),
               "learning_rate": self.learning_rate, "momentum": self.momentum,
               "reached": self.reached}
        if self.ema_decay is not None:
            out["ema_decay"] = self.ema_decay
        if self.edge:
            out["edge"] = list(self.edge)
        if self.schedule:
            out["schedule"] = list(self.schedule)
        if self.final_lr_fraction is not None:
            out["final_lr_fraction"] = self.final_lr_fraction
        if self.trials:
            out["trials"] = list(self.trials)
        if self.repeats:
            out["repeats"] = list(self.repeats)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "CurvePoint":
        """Reads a point written by `to_dict`; raises ValueError naming any bad field."""
        if not isinstance(d, dict):
            raise ValueError(f"a curve point must be a JSON object with a batch_size, got {d!r:.80}")
        batch_size = validation.check_whole("curve point batch_size", d.get("batch_size"), 1)
        steps = d.get("steps")
        if steps is not None:
            steps = validation.check_whole("curve point steps", steps, 0)
        return cls(batch_size=batch_size, steps=steps, learning_rate=d.get("learning_rate"),
                   momentum=d.get("momentum"), ema_decay=d.get("ema_decay"),
                   edge=tuple(d.get("edge", ())), schedule=tuple(d.get("schedule", ())),
                   final_lr_fraction=d.get("final_lr_fraction"),
                   trials=tuple(d.get("trials", ())), repeats=tuple(d.get("repeats", ())))


@dataclass(frozen=True)
class ScalingCurve:
    """Steps to target against batch size.

    Attributes:
      points: one per batch size, sorted by batch size.
      source: 'nqm' (exact prediction), 'measured' (a sweep) or 'batch_science' (imported).
      config: provenance: the problem, optimizer, target or goal, budget, seeds.
    """

    points: tuple[CurvePoint, ...]
    source: str = "nqm"
    config: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        pts = tuple(sorted(self.points, key=lambda p: p.batch_size))
        object.__setattr__(self, "points", pts)

    @property
    def batch_sizes(self) -> np.ndarray:
        """int64 (n,)."""
        return np.array([p.batch_size for p in self.points], dtype=np.int64)

    @property
    def steps(self) -> np.ndarray:
        """float64 (n,), NaN where the target was not reached."""
        return np.array([np.nan if p.steps is None else p.steps for p in self.points], dtype=float)

    def to_dict(self) -> dict:
        return {"source": self.source, "config": self.config,
                "points": [p.to_dict() for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict) -> "ScalingCurve":
        if not isinstance(d, dict) or not isinstance(d.get("points"), list):
            raise ValueError("a curve must be a JSON object with a 'points' list")
        if not isinstance(d.get("config", {}) or {}, dict):
            raise ValueError(f"a curve's config must be a JSON object, got {d.get('config')!r:.80}")
        return cls(points=tuple(CurvePoint.from_dict(p) for p in d["points"]),
                   source=str(d.get("source", "nqm")), config=dict(d.get("config") or {}))

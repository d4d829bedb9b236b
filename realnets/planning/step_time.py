"""Seconds per training step against batch size and device count: the measured points, a small
model fitted to them, and the throughput file that holds both (docs/plan.md, 'Step time').

Model (data parallelism, one training run):

    t(B, n) = fixed + per_example * B / n + allreduce * (n - 1) / n

`fixed`: seconds per step whatever the batch (dispatch, the optimizer update, placing the batch);
`per_example`: compute per example, divided over the n devices that share the batch;
`allreduce`: a ring all-reduce of the gradients, whose time per step grows as (n - 1) / n. The
three coefficients are fitted by non-negative least squares on relative errors, so a 1 ms step
weighs as much as a 1 s one; the fit states its RMS and largest relative error.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from nqm import validation

FORMULA = "t(B, n) = fixed + per_example * B / n + allreduce * (n - 1) / n"
EXCLUDES = ("compilation (the first step, reported as compile_seconds) and evaluations; "
            "one trial, no gradient-noise measurement, data placement included")


@dataclass(frozen=True)
class StepTimePoint:
    """One measured (batch size, devices) pair.

    Attributes:
      batch_size: examples per step (global); devices: devices sharing it.
      seconds_per_step: median over repeats (s); spread: (min, max) over repeats (s).
      steps: timed steps per repeat; repeats: how many.
      compile_seconds: the first step of the first repeat (compilation included).
    """

    batch_size: int
    devices: int
    seconds_per_step: float
    spread: tuple[float, float]
    steps: int
    repeats: int
    compile_seconds: float

    def to_dict(self) -> dict:
        return {**asdict(self), "spread": list(self.spread)}

    @classmethod
    def from_dict(cls, d: dict) -> "StepTimePoint":
        try:
            point = cls(batch_size=int(d["batch_size"]), devices=int(d["devices"]),
                        seconds_per_step=float(d["seconds_per_step"]),
                        spread=tuple(float(x) for x in d["spread"]), steps=int(d["steps"]),
                        repeats=int(d["repeats"]), compile_seconds=float(d["compile_seconds"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"a throughput point needs batch_size, devices, seconds_per_step, "
                             f"spread, steps, repeats, compile_seconds ({err})") from None
        validation.check_whole("batch_size", point.batch_size, 1)
        validation.check_whole("devices", point.devices, 1)
        validation.check_positive("seconds_per_step", point.seconds_per_step)
        return point


@dataclass(frozen=True)
class StepTimeModel:
    """The fitted model (see the module docstring); coefficients in seconds.

    rms_relative_error, max_relative_error: of the fit over the points it was fitted to.
    batch_range, device_range: (min, max) of what was measured; outside is extrapolation.
    """

    fixed: float
    per_example: float
    allreduce: float
    rms_relative_error: float
    max_relative_error: float
    batch_range: tuple[int, int]
    device_range: tuple[int, int]
    formula: str = FORMULA

    def seconds_per_step(self, batch_size, devices):
        """Model seconds per step; arrays broadcast."""
        b = np.asarray(batch_size, np.float64)
        n = np.asarray(devices, np.float64)
        return self.fixed + self.per_example * b / n + self.allreduce * (n - 1.0) / n

    def extrapolated(self, batch_size: int, devices: int) -> bool:
        return not (self.batch_range[0] <= batch_size <= self.batch_range[1]
                    and self.device_range[0] <= devices <= self.device_range[1])

    def to_dict(self) -> dict:
        return {**asdict(self), "batch_range": list(self.batch_range),
                "device_range": list(self.device_range)}

    @classmethod
    def from_dict(cls, d: dict) -> "StepTimeModel":
        try:
            return cls(fixed=float(d["fixed"]), per_example=float(d["per_example"]),
                       allreduce=float(d["allreduce"]),
                       rms_relative_error=float(d["rms_relative_error"]),
                       max_relative_error=float(d["max_relative_error"]),
                       batch_range=tuple(int(x) for x in d["batch_range"]),
                       device_range=tuple(int(x) for x in d["device_range"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"a step-time model needs fixed, per_example, allreduce, "
                             f"rms_relative_error, max_relative_error, batch_range, "
                             f"device_range ({err})") from None


def fit_step_time(points: list[StepTimePoint]) -> StepTimeModel:
    """Non-negative least squares of the model on relative errors (ValueError without points).

    With one device count the all-reduce term is not identifiable and is fitted as 0; with one
    batch size per device count neither is `per_example` apart from `fixed` (both are still
    fitted, non-negative, and the error says how well they reproduce the points)."""
    if not points:
        raise ValueError("no throughput points to fit")
    b = np.array([p.batch_size for p in points], np.float64)
    n = np.array([p.devices for p in points], np.float64)
    t = np.array([p.seconds_per_step for p in points], np.float64)
    design = np.stack([np.ones_like(b), b / n, (n - 1.0) / n], axis=1) / t[:, None]
    coef, _ = nnls(design, np.ones_like(t))
    model = StepTimeModel(fixed=float(coef[0]), per_example=float(coef[1]),
                          allreduce=float(coef[2]), rms_relative_error=math.nan,
                          max_relative_error=math.nan,
                          batch_range=(int(b.min()), int(b.max())),
                          device_range=(int(n.min()), int(n.max())))
    rel = model.seconds_per_step(b, n) / t - 1.0
    return StepTimeModel(**{**asdict(model), "rms_relative_error": float(np.sqrt(np.mean(rel ** 2))),
                            "max_relative_error": float(np.max(np.abs(rel)))})


@dataclass(frozen=True)
class ThroughputRecord:
    """A throughput file (`python -m realnets throughput --format json`, written by --out).

    Attributes:
      workload: the workload measured (name or own source); optimizer: its optimizer.
      platform, device_kind, process_count: where (jax's view of the devices).
      points: the measured points; model: the fit to them.
      max_rows_per_device: the trainer's setting (gradient accumulation above it).
      excludes: what a step's time leaves out.
      versions: jax and jaxlib versions.
    """

    workload: str
    optimizer: str
    platform: str
    device_kind: str
    process_count: int
    points: tuple[StepTimePoint, ...]
    model: StepTimeModel
    max_rows_per_device: int = 4096
    excludes: str = EXCLUDES
    versions: dict = field(default_factory=dict)

    def seconds_per_step(self, batch_size: int, devices: int) -> tuple[float, str]:
        """(seconds, source): the measured median where this pair was measured, else the model
        ('model', or 'model (extrapolated)' outside the measured ranges)."""
        for p in self.points:
            if p.batch_size == batch_size and p.devices == devices:
                return p.seconds_per_step, "measured"
        source = "model (extrapolated)" if self.model.extrapolated(batch_size, devices) else "model"
        return float(self.model.seconds_per_step(batch_size, devices)), source

    def device_counts(self) -> list[int]:
        return sorted({p.devices for p in self.points})

    def to_dict(self) -> dict:
        return {**{k: getattr(self, k) for k in ("workload", "optimizer", "platform",
                                                   "device_kind", "process_count")},
                "points": [p.to_dict() for p in self.points], "model": self.model.to_dict(),
                "max_rows_per_device": self.max_rows_per_device, "excludes": self.excludes,
                "versions": dict(self.versions)}

    @classmethod
    def from_dict(cls, d: dict) -> "ThroughputRecord":
        if not isinstance(d, dict) or not isinstance(d.get("points"), list) or not d["points"]:
            raise ValueError("a throughput file must be a JSON object with a non-empty 'points' "
                             "list (python -m realnets throughput --format json)")
        points = tuple(StepTimePoint.from_dict(p) for p in d["points"])
        model = (StepTimeModel.from_dict(d["model"]) if isinstance(d.get("model"), dict)
                 else fit_step_time(list(points)))
        return cls(workload=str(d.get("workload", "")), optimizer=str(d.get("optimizer", "")),
                   platform=str(d.get("platform", "")), device_kind=str(d.get("device_kind", "")),
                   process_count=int(d.get("process_count", 1)), points=points, model=model,
                   max_rows_per_device=int(d.get("max_rows_per_device", 4096)),
                   excludes=str(d.get("excludes", EXCLUDES)),
                   versions=dict(d.get("versions") or {}))


def parse_throughput(data: bytes | str, name: str) -> ThroughputRecord:
    """A throughput file's contents (`python -m realnets throughput --out FILE`) as its record;
    `name` (the file's path or name) is only for the message of a ValueError."""
    try:
        raw = json.loads(data)
    except json.JSONDecodeError as err:
        raise ValueError(f"throughput: {name} is not JSON ({err.msg} at line {err.lineno})") \
            from None
    except UnicodeDecodeError:
        raise ValueError(f"throughput: {name} is not a text file") from None
    try:
        return ThroughputRecord.from_dict(raw)
    except ValueError as err:
        raise ValueError(f"throughput: {name}: {err}") from None


def read_throughput(path: Path) -> ThroughputRecord:
    """The throughput file at `path` (see `parse_throughput`)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"throughput: {path} is a directory; give the JSON file "
                         "(python -m realnets throughput --out FILE)")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"throughput: cannot read {path} ({err.strerror})") from None
    return parse_throughput(data, str(path))

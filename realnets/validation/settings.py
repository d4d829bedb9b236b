"""How a sweep is validated: the settings, the checkpoints, the target rules and which NQM optimizer
stands for each sweep optimizer."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

CHECKPOINTS = ("goal", "init")
TARGET_RULES = ("train_loss", "quadratic")
TARGET_LABELS = {"train_loss": "target = training loss at the goal",
                 "quadratic": "target = the quadratic's loss at the goal"}
NQM_FAMILY = {"sgd": "sgd", "momentum": "momentum", "nesterov": "momentum", "adam": "momentum"}


@dataclass(frozen=True)
class ValidationConfig:
    """How a sweep is validated (see the module docstring).

    Attributes:
      batch_size: calibration batch size (one of the sweep's, reached); None: the smallest reached.
      checkpoints: where curvature and noise are measured, 'goal' and/or 'init'; the first one is
        the headline prediction.
      top_k: measured Hessian eigen-directions.
      lanczos_steps: Lanczos steps for them (None: max(2 k, k + 20)).
      slq_steps, slq_probes: stochastic Lanczos quadrature for the tail.
      floor_ratio: the tail stops at curvature floor_ratio * h_1 (at most h_k / 2): directions
        flatter than that are left out of the NQM (their share of tr(H) and tr(Sigma) is reported).
      sample_rows: training rows of the calibration sample (Hessian, gradient statistics, target).
      noise_rows: per-example gradients in tr(H Sigma) (one HVP each).
      chunk_rows: rows per compiled call over the sample (None: all at once).
      loss_floor: L*, subtracted from the training loss at the goal for the NQM's target (the NQM
        measures loss above its minimum).
      seed: calibration sample and Lanczos/SLQ probes.
      nqm_max_steps: step budget of the tuned NQM curve (generous: its B_crit should not depend on
        the sweep's budget; the search-matched curve uses the sweep's budget).
      bootstrap: NQMs redrawn from the fitted numbers' uncertainties to give each predicted B_crit
        its spread (`bootstrap_b_crit`); 0 for none.
      target_rule: the headline NQM target, one of TARGET_RULES (both are always computed):
        'train_loss', the training loss at the goal minus `loss_floor` (the issue's rule); or
        'quadratic', the fitted quadratic's own loss at the goal checkpoint,
        0.5 sum_i g_goal,i^2 / h_i (see `quadratic_target`), which needs no L*.
    """

    batch_size: int | None = None
    checkpoints: tuple[str, ...] = CHECKPOINTS
    top_k: int = 20
    lanczos_steps: int | None = None
    slq_steps: int = 40
    slq_probes: int = 8
    floor_ratio: float = 1e-2
    sample_rows: int = 1024
    noise_rows: int = 128
    chunk_rows: int | None = None
    loss_floor: float = 0.0
    seed: int = 0
    nqm_max_steps: int = 10 ** 8
    bootstrap: int = 8
    target_rule: str = "train_loss"

    def __post_init__(self):
        def whole(name, value, lo):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < lo:
                raise ValueError(f"{name} must be a whole number >= {lo}, got {value!r}")

        if self.batch_size is not None:
            whole("batch-size", self.batch_size, 1)
        if not self.checkpoints or any(c not in CHECKPOINTS for c in self.checkpoints) or len(
                set(self.checkpoints)) != len(self.checkpoints):
            raise ValueError(f"checkpoints must be distinct names among {', '.join(CHECKPOINTS)}, "
                             f"got {','.join(self.checkpoints)!r}")
        whole("top-k", self.top_k, 1)
        if self.lanczos_steps is not None:
            whole("lanczos-steps", self.lanczos_steps, self.top_k)
        whole("slq-steps", self.slq_steps, 2)
        whole("slq-probes", self.slq_probes, 1)
        if not (math.isfinite(self.floor_ratio) and 0.0 < self.floor_ratio < 1.0):
            raise ValueError(f"floor-ratio must be in (0, 1), got {self.floor_ratio}")
        whole("sample-rows", self.sample_rows, 2)
        whole("noise-rows", self.noise_rows, 2)
        if self.noise_rows > self.sample_rows:
            raise ValueError(f"noise-rows must be <= sample-rows ({self.sample_rows}), got "
                             f"{self.noise_rows}")
        if self.chunk_rows is not None:
            whole("chunk-rows", self.chunk_rows, 1)
        if not (math.isfinite(self.loss_floor) and self.loss_floor >= 0.0):
            raise ValueError(f"loss-floor must be a finite number >= 0, got {self.loss_floor}")
        whole("nqm-max-steps", self.nqm_max_steps, 1)
        whole("bootstrap", self.bootstrap, 0)
        if self.target_rule not in TARGET_RULES:
            raise ValueError(f"target-rule must be one of {', '.join(TARGET_RULES)}, got "
                             f"{self.target_rule!r}")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["checkpoints"] = list(self.checkpoints)
        return out

"""How a sweep is validated: the settings, the checkpoints, the target rules and which NQM optimizer
stands for each sweep optimizer."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import asdict, dataclass

from nqm import validation

CHECKPOINTS = ("goal", "init")
# rule 2 of docs/prediction_rule.md (`realnets.validation.noise_free_match`)
RULE_2 = "noise_free_matched"
TARGET_RULES = ("step_matched", "train_loss", "quadratic", RULE_2)
TARGET_LABELS = {"step_matched": "target matched to the reference run's steps",
                 "train_loss": "target = training loss at the goal",
                 "quadratic": "target = the quadratic's loss at the goal",
                 RULE_2: "rule 2: target matched to the network's full-batch steps"}
# adam: the NQM's mean-field Adam (`nqm.adam`; b1 from the sweep's range, `targets.nqm_optimizer`)
NQM_FAMILY = {"sgd": "sgd", "momentum": "momentum", "nesterov": "momentum", "adam": "adam"}


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
      chunk_rows: rows per compiled call over the sample (None: all at once) and over the whole
        set in full-batch descents (None: `two_ends.WHOLE_SET_CHUNK_ROWS`).
      loss_floor: L*, subtracted from the training loss at the goal for the NQM's target (the NQM
        measures loss above its minimum).
      seed: calibration sample and Lanczos/SLQ probes.
      nqm_max_steps: step budget of the tuned NQM curve (generous: its B_crit should not depend on
        the sweep's budget; the search-matched curve uses the sweep's budget).
      bootstrap: NQMs redrawn from the fitted numbers' uncertainties to give the headline
        rule's predicted B_crit its spread (`bootstrap_b_crit`); 0 for none.
      target_rule: the headline NQM target, one of TARGET_RULES (all are computed wherever their
        inputs are: rule 2 needs a fitted NQM at the headline checkpoint and a trial that reaches
        the target full batch, and is run without the NQM at the sweep's trials):
        'step_matched', the rule fixed in docs/prediction_rule.md: the lowest loss the NQM, tuned
        in the sweep's search space, reaches in the reference run's steps at its batch size
        (`realnets.validation.targets`); the diagnostics 'train_loss', the training loss at the
        goal minus `loss_floor`, and 'quadratic', the fitted quadratic's own loss at the goal
        checkpoint, 0.5 sum_i g_goal,i^2 / h_i (see `quadratic_target`).
      branch_repeats: data orders of the local critical batch size measured by branching from the
        reference run (settings by the rule of `realnets.validation.pipeline.branch_settings`);
        0 skips it.
      transfer: train the network once per batch size with the headline NQM's tuned
        metaparameters (`realnets.validation.transfer`): does the network follow the NQM?
      certify: tune every NQM curve with the grid search's certificate
        (`nqm.tuning.tune_curve(certify=True)`; docs/prediction_rule.md, session 38; mean-field
        Adam's curves too since session 39).
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
    target_rule: str = "step_matched"
    branch_repeats: int = 3
    transfer: bool = True
    certify: bool = True

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)   # normalised values on a frozen record
        whole = validation.check_whole
        if self.batch_size is not None:
            set_("batch_size", whole("batch-size", self.batch_size, 1))
        if not self.checkpoints or any(c not in CHECKPOINTS for c in self.checkpoints) or len(
                set(self.checkpoints)) != len(self.checkpoints):
            raise ValueError(f"checkpoints must be distinct names among {', '.join(CHECKPOINTS)}, "
                             f"got {','.join(self.checkpoints)!r}")
        set_("checkpoints", tuple(self.checkpoints))
        set_("top_k", whole("top-k", self.top_k, 1))
        if self.lanczos_steps is not None:
            set_("lanczos_steps", whole("lanczos-steps (at least top-k)", self.lanczos_steps,
                                        self.top_k))
        set_("slq_steps", whole("slq-steps", self.slq_steps, 2))
        set_("slq_probes", whole("slq-probes", self.slq_probes, 1))
        set_("floor_ratio", validation.check_in_range("floor-ratio", self.floor_ratio, 0.0, 1.0,
                                                      closed_low=False, closed_high=False))
        set_("sample_rows", whole("sample-rows", self.sample_rows, 2))
        set_("noise_rows", whole("noise-rows (at most sample-rows)", self.noise_rows, 2,
                                 self.sample_rows))
        if self.chunk_rows is not None:
            set_("chunk_rows", whole("chunk-rows", self.chunk_rows, 1))
        set_("loss_floor", validation.check_in_range("loss-floor", self.loss_floor, 0.0,
                                                     float("inf"), closed_high=False))
        set_("seed", whole("seed", self.seed, 0))
        set_("nqm_max_steps", whole("nqm-max-steps", self.nqm_max_steps, 1))
        set_("bootstrap", whole("bootstrap", self.bootstrap, 0))
        validation.check_choice("target-rule", self.target_rule, TARGET_RULES)
        set_("branch_repeats", whole("branch-repeats", self.branch_repeats, 0, 1000))
        if not isinstance(self.transfer, bool):
            raise ValueError(f"transfer must be true or false, got {self.transfer!r}")
        if not isinstance(self.certify, bool):
            raise ValueError(f"certify must be true or false, got {self.certify!r}")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["checkpoints"] = list(self.checkpoints)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "ValidationConfig":
        """A validation document's `settings`; fields it lacks take their defaults, except
        `branch_repeats`, `transfer` and `certify`: a document written before branching (the
        transfer, the certificate) existed ran none (0, False, False)."""
        if not isinstance(d, dict):
            raise ValueError(f"settings must be a JSON object, got {d!r:.80}")
        known = {f.name for f in dataclasses.fields(cls)}
        given = {"branch_repeats": 0, "transfer": False, "certify": False,
                 **{k: v for k, v in d.items() if k in known}}
        if "checkpoints" in given:
            if not isinstance(given["checkpoints"], list):
                raise ValueError(f"checkpoints must be a list, got {given['checkpoints']!r:.80}")
            given["checkpoints"] = tuple(given["checkpoints"])
        return cls(**given)

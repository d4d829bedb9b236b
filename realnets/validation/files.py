"""validation.json as a typed record: written atomically, read back with its parts checked; the
records other commands add beside it (two_ends.json, miss_split.json), kept only while they
belong to it (`side_records`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from realnets import store
from realnets.sweeps.records import IDENTITY
from realnets.validation.settings import ValidationConfig

VALIDATION_FILE = "validation.json"
# written beside it by `python -m realnets two-ends` and `python -m realnets miss-split`
TWO_ENDS_FILE = "two_ends.json"
MISS_SPLIT_FILE = "miss_split.json"
# beside a sweep, not a report (`python -m realnets two-point`)
TWO_POINT_FILE = "two_point.json"
# beside either while `two-ends` or `two-point` runs: the whole-set descents finished so far
# (`descent_journal`), of the trials and of the other initialisations, each deleted once its
# record is written
DESCENT_JOURNAL = "full_batch_descents.jsonl"
INITS_JOURNAL = "full_batch_inits_descents.jsonl"


@dataclass(frozen=True)
class Provenance:
    """How a validation document was made: the command, the sweep directory and the wall time
    (s); `retuned` and `retune_seconds`: the command that tuned its NQM side again on its stored
    measurements (`validate --retune`, `realnets.validation.retune`) and its wall time;
    `remeasured`: the command that rebuilt its measured side from the sweep resumed with more
    trials (`python -m realnets remeasure`). None where an older document does not say (or was
    not retuned or remeasured)."""

    command: str | None = None
    sweep: str | None = None
    wall_seconds: float | None = None
    retuned: str | None = None
    retune_seconds: float | None = None
    remeasured: str | None = None

    def to_dict(self) -> dict:
        out = {"command": self.command, "sweep": self.sweep, "wall_seconds": self.wall_seconds}
        if self.retuned is not None:
            out.update(retuned=self.retuned, retune_seconds=self.retune_seconds)
        if self.remeasured is not None:
            out["remeasured"] = self.remeasured
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Provenance":
        if not isinstance(d, dict):
            raise ValueError(f"provenance must be a JSON object, got {d!r:.80}")
        return cls(**{k: d[k] for k in ("command", "sweep", "wall_seconds", "retuned",
                                        "retune_seconds", "remeasured") if k in d})


@dataclass(frozen=True)
class ValidationDocument:
    """validation.json (`realnets.validation.pipeline.validate` makes it): typed at the top, its
    nested parts JSON objects as the pipeline writes them.

    Attributes:
      workload: the workload validated.
      settings: the validation settings.
      sweep_config: the sweep's identity (`realnets.sweeps.records.IDENTITY`), batch sizes and
        trials per batch size.
      measured: the measured curve without its trials, its fit, regimes and noise scale
        (`realnets.validation.comparison.measured_summary`).
      calibration_run: the best trial rerun to its goal, and the NQM's target.
      checkpoints: per checkpoint name, the fitted NQM, B_noise, B_simple and predictions.
      comparison: the table of every B_crit estimate (`realnets.validation.comparison`).
      seconds: wall time per phase.
      reference: the workload's own NQM's predictions (the `nqm` workload), else None.
      branching: the local critical batch size by branching from the reference run
        (`realnets.sweeps.branching.BranchResult.to_dict()`, or {"skipped": reason, "local_cbs":
        []}); None in documents made before validate measured it.
      local_cbs: [{"step", "cbs"}] along the reference run (`branching`'s); None likewise.
      transfer: the network trained with the headline NQM's metaparameters at every batch size
        (`realnets.validation.transfer.run_transfer`); None when not run.
      full_batch: rule 2's full-batch descents of the sweep's trials at the reference batch
        size (`realnets.validation.noise_free_match.full_batch_steps`); None in documents made
        before rule 2.
      provenance: the command that made it, else None.
      predicted_from_trials: K when the predictions were made from the sweep's first K trials per
        batch size and the measured side from all `sweep_config["trials"]` (a sweep resumed
        after its validation, `realnets.validation.remeasure`); None: from all of them.
    """

    workload: str
    settings: ValidationConfig
    measured: dict
    checkpoints: dict
    comparison: list
    sweep_config: dict = field(default_factory=dict)
    calibration_run: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    reference: dict | None = None
    branching: dict | None = None
    local_cbs: list | None = None
    transfer: dict | None = None
    full_batch: dict | None = None
    provenance: Provenance | None = None
    predicted_from_trials: int | None = None

    def to_dict(self) -> dict:
        """The file's form, in the pipeline's key order (reference, branching, local_cbs,
        transfer, full_batch and provenance only when there are some)."""
        out = {"workload": self.workload, "settings": self.settings.to_dict(),
               "sweep_config": self.sweep_config, "measured": self.measured,
               "calibration_run": self.calibration_run, "checkpoints": self.checkpoints}
        if self.reference is not None:
            out["reference"] = self.reference
        if self.branching is not None:
            out["branching"] = self.branching
        if self.local_cbs is not None:
            out["local_cbs"] = self.local_cbs
        if self.transfer is not None:
            out["transfer"] = self.transfer
        if self.full_batch is not None:
            out["full_batch"] = self.full_batch
        out["seconds"] = self.seconds
        out["comparison"] = self.comparison
        if self.provenance is not None:
            out["provenance"] = self.provenance.to_dict()
        if self.predicted_from_trials is not None:
            out["predicted_from_trials"] = self.predicted_from_trials
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "ValidationDocument":
        """A validation document; parts it lacks take their defaults (ValueError naming a
        required part that is missing, or a part of the wrong kind)."""
        given = {}
        for f in dataclasses.fields(cls):
            value = d.get(f.name)
            if value is None:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise ValueError(f"{f.name} is missing")
                continue
            kind = (str if f.name == "workload" else list if f.name in ("comparison", "local_cbs")
                    else int if f.name == "predicted_from_trials" else dict)
            if not isinstance(value, kind) or (kind is int and (isinstance(value, bool)
                                                                or value < 1)):
                what = {str: "text", int: "integer >= 1"}.get(kind, kind.__name__)
                raise ValueError(f"{f.name} must be a JSON {what}, got {value!r:.80}")
            given[f.name] = value
        given["settings"] = ValidationConfig.from_dict(given["settings"])
        if "provenance" in given:
            given["provenance"] = Provenance.from_dict(given["provenance"])
        return cls(**given)


def made_from(sweep_config: dict, config: dict) -> bool:
    """Whether a validation document's `sweep_config` names the same study as a sweep's config
    (`realnets.sweeps.records.IDENTITY` and the trials per batch size), both as JSON objects."""
    return all(sweep_config.get(k) == config.get(k) for k in (*IDENTITY, "trials"))


def write_validation(out_dir: Path, doc: ValidationDocument) -> Path:
    """DIR/validation.json, atomically; returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / VALIDATION_FILE
    store.write_json_atomic(path, doc.to_dict())
    return path


def read_validation(out_dir: Path) -> ValidationDocument:
    """The document of DIR/validation.json (ValueError naming the path if missing, corrupt or
    without one of its parts)."""
    path = Path(out_dir) / VALIDATION_FILE
    raw = store.read_json(path, "validation")
    try:
        return ValidationDocument.from_dict(raw)
    except ValueError as err:
        raise ValueError(f"validation: {path}: {err}") from None


def _headline_b_crit(doc: dict) -> float | None:
    checkpoint = doc["settings"]["checkpoints"][0]
    rule = doc["settings"].get("target_rule", "train_loss")
    pred = (((doc["checkpoints"].get(checkpoint) or {}).get("predictions") or {}).get(rule)
            or {})
    return (pred.get("tuned") or {}).get("fit", {}).get("b_crit")


def side_records(out_dir: Path, doc: dict) -> dict:
    """{"two_ends": record or None, "miss_split": record or None}: DIR's two_ends.json and
    miss_split.json, each only when it was made from this validation document (`doc`, as
    `ValidationDocument.to_dict()`): the same workload and optimizer, reference batch size and
    steps, measured B_crit and headline prediction; the split also from the kept two_ends
    record (its B_ref, S_fb^N and reruns' percentiles) and with one draw per bootstrap NQM of the
    document's settings. A record of an earlier validation in the directory, or one that does not
    read or lacks a part the summary, report or app uses, is left out (None)."""
    out_dir = Path(out_dir)
    run = doc["calibration_run"]
    measured = doc["measured"]["fit"]["b_crit"]
    predicted = _headline_b_crit(doc)
    optimizer = doc["sweep_config"].get("optimizer")

    def same(x, y):      # to the last bits a rerun on another CPU may change
        if x is None or y is None:
            return x is y
        return math.isclose(float(x), float(y), rel_tol=1e-9)

    def read(name):
        try:
            record = store.read_json(out_dir / name, name) if (out_dir / name).is_file() else None
        except ValueError:
            return None
        if not isinstance(record, dict) or record.get("workload") != doc["workload"] \
                or record.get("optimizer") != optimizer:
            return None
        return record

    def ends_belong(ends):
        return (ends["b_ref"] == run["batch_size"] and ends["s_ref"] == run["sweep_steps_to_goal"]
                and same(ends["compared"]["measured"]["b_crit"], measured)
                and same(ends["compared"]["rule_1"], predicted)
                and {"16", "50", "84"} <= set(ends["two_point"])
                and {"16", "50", "84"} <= set(ends["reruns"]["percentiles"])
                and "steps" in ends["full_set"] and isinstance(ends.get("rule_3"), dict))

    def split_belongs(split, ends):
        from realnets.validation.miss_split import FACTORS

        return (same(split["measured"], measured) and same(split["predicted"], predicted)
                and split["b_ref"] == ends["b_ref"]
                and split["s_fb"] == ends["full_set"]["steps"]
                and split["s_tilde"] == ends["reruns"]["percentiles"]
                and len(split["draws"]) == doc["settings"].get("bootstrap")
                and all(k in split["factors"] and {"16", "84"} <= set(split["intervals"][k])
                        for k in FACTORS) and "largest" in split)

    def kept(record, belongs, *args):
        if record is None:
            return None
        try:
            return record if belongs(record, *args) else None
        except (KeyError, TypeError, ValueError, AttributeError):
            return None             # a part missing or of the wrong kind: not this document's

    ends = kept(read(TWO_ENDS_FILE), ends_belong)
    split = kept(read(MISS_SPLIT_FILE), split_belongs, ends) if ends is not None else None
    return {"two_ends": ends, "miss_split": split}

"""A validation document's NQM side tuned again on its stored measurements (docs/prediction_rule.md,
session 38: the validation's tuner certified).

Everything the NQM's tuner decides is recomputed with the settings given (`ValidationConfig`,
its `certify` among them): at every checkpoint with a fitted NQM, each target rule's prediction
(`predictions.predict`, the search-matched curve too except for rule 2, as the pipeline runs
them) and, where the document had one, its bootstrap (`bootstrap.bootstrap_b_crit`, with the
rule's own step match); the control's reference NQM; the comparison table. The measurements
are kept as stored: the fitted NQMs and their targets, the sweep, the calibration run, B_noise,
B_simple, branching and rule 2's full-batch descents. What trains the network with the tuned
metaparameters (the transfer, the quadratic path) and the records beside the report
(two_ends.json's rule 3, miss_split.json) are tuner-dependent too; `python -m realnets validate
... --retune` runs them again after this (`retune_two_ends` for the first's NQM part).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable

from nqm.problem import NQMConfig
from realnets.sweeps.records import SweepConfig, TrialRecord
from realnets.validation.bootstrap import bootstrap_b_crit, fitted_nqm
from realnets.validation.comparison import comparison
from realnets.validation.noise_free_match import noise_free_match
from realnets.validation.predictions import predict
from realnets.validation.settings import RULE_2, ValidationConfig
from realnets.validation.targets import StepMatch, nqm_search_space


def _match(rule: str, record: dict, doc: dict, sweep_config: SweepConfig) -> StepMatch | None:
    """The step match a rule's bootstrap redraws its target with (None: the target is fixed)."""
    if rule == "step_matched":
        return StepMatch.from_record(record["step_match"], nqm_search_space(sweep_config.search))
    if rule == RULE_2:
        return noise_free_match(sweep_config, record["nqm"].get("train_size"),
                                int(doc["full_batch"]["steps"]))
    return None


def check_settings(stored: ValidationConfig, vcfg: ValidationConfig) -> None:
    """ValueError unless `vcfg` equals the stored document's settings but for `certify` and
    `transfer` (the others change the measurements, which a retune keeps)."""
    if dataclasses.replace(stored, certify=vcfg.certify, transfer=vcfg.transfer) != vcfg:
        differ = [f.name for f in dataclasses.fields(vcfg)
                  if f.name not in ("certify", "transfer")
                  and getattr(stored, f.name) != getattr(vcfg, f.name)]
        raise ValueError(f"retune: {', '.join(differ)} differ from the stored document's "
                         "settings; repeat the report's own flags (its command, in its "
                         "validation.json's provenance), or rerun validate without --retune "
                         "to measure again")


def retune(doc: dict, sweep_config: SweepConfig, records: list[TrialRecord], batch_sizes,
           vcfg: ValidationConfig, reference: NQMConfig | None = None,
           log: Callable[[str], None] | None = None) -> dict:
    """`doc` (a validation document as a dict) with its NQM predictions tuned again under `vcfg`.

    Args:
      doc: the stored document (`ValidationDocument.to_dict()`); not modified.
      sweep_config, records: the sweep it was made from.
      batch_sizes: the measured curve's batch sizes (`build_curve(...).batch_sizes`).
      vcfg: the settings to tune with; they must equal the document's but for `certify` and
        `transfer` (ValueError otherwise: other settings change the measurements).
      reference: the NQM the workload was built from (the control), or None.
      log: progress lines.

    Returns a new document dict with "settings" = vcfg and every prediction, bootstrap, the
    reference prediction and the comparison recomputed (without `vcfg.transfer`, no transfer:
    a stored one trained the network with the old metaparameters)."""
    say = log or (lambda _: None)
    check_settings(ValidationConfig.from_dict(doc["settings"]), vcfg)
    out = copy.deepcopy(doc)
    out["settings"] = vcfg.to_dict()
    if not vcfg.transfer:
        out.pop("transfer", None)        # trained with the old metaparameters: stale
    for name, record in out["checkpoints"].items():
        if "nqm" not in record:
            continue
        for rule, pred in record.get("predictions", {}).items():
            target = pred["target"]
            say(f"retune: the NQM fitted at {name}, {rule} (target {target:.4g})")
            config = fitted_nqm(record["nqm"], target)
            search_matched = rule != RULE_2
            new = predict(config, sweep_config, records, batch_sizes, vcfg,
                          search_matched=search_matched)
            new["target"] = target
            if "bootstrap" in pred:
                new["bootstrap"] = bootstrap_b_crit(
                    record["nqm"], target, sweep_config, records, batch_sizes, vcfg,
                    _match(rule, record, out, sweep_config), search_matched=search_matched)
            record["predictions"][rule] = new
    if out.get("reference") is not None and reference is not None:
        ref = dataclasses.replace(reference, target=out["calibration_run"]["target"])
        out["reference"] = {**predict(ref, sweep_config, records, batch_sizes, vcfg),
                            "problem": ref.to_dict()}
    out["comparison"] = comparison(out)
    return out

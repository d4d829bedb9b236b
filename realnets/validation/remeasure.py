"""A validation's measured side from its sweep resumed with more trials, the predictions kept as
they were made (docs/prediction_rule.md, session 45).

A validation made from a sweep of K trials per batch size predicts from what those K trials give:
the reference trial, its reruns, both ends, the search space. When the sweep is later resumed to
more trials, `remeasured` rebuilds the measured curve, its fit, interval and checks from all of
them and records `predicted_from_trials: K`. From then on every command that reads the sweep for
a prediction reads its first K trials only (`prediction_sweep`), so the predictions are still
what a user with K trials would have had, held against a better measurement.
`miss_split.with_measured`, `two_ends.compared` and `with_measured_two_point` carry the new
measured B_crit into the records kept beside (miss_split.json, two_ends.json, two_point.json).

All functions here are pure: documents and records in, documents out; nothing is trained.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Sequence

from realnets.sweeps.curve import best_trial, build_curve
from realnets.sweeps.records import IDENTITY, SweepConfig, TrialRecord, first_records
from realnets.validation.comparison import comparison, measured_summary


def predicted_from(doc: dict) -> int:
    """Trials per batch size a validation document's predictions were made from."""
    return int(doc.get("predicted_from_trials") or doc["sweep_config"]["trials"])


def first_sweep(config: SweepConfig, records: Sequence[TrialRecord], k: int
                ) -> tuple[SweepConfig, list[TrialRecord]]:
    """(config, records) of the sweep as it stood at `k` trials per batch size: its first k
    (`first_records`), config.trials k; unchanged when k is not below config.trials."""
    if k >= config.trials:
        return config, list(records)
    return dataclasses.replace(config, trials=k), first_records(records, k)


def prediction_sweep(doc: dict, config: SweepConfig, records: Sequence[TrialRecord]
                     ) -> tuple[SweepConfig, list[TrialRecord]]:
    """(config, records) of a sweep as the document's predictions saw it: `first_sweep` at
    `predicted_from(doc)` trials per batch size."""
    return first_sweep(config, records, predicted_from(doc))


def check_made_from(doc: dict, config: SweepConfig, records: Sequence[TrialRecord],
                    repeats: Sequence[TrialRecord] = ()) -> int:
    """K, the trials per batch size the document's predictions were made from, after checking
    that `config`/`records` are that sweep, resumed: the same study (`IDENTITY`), at least K
    trials at each of its batch sizes, every batch size run to `config.trials`, and the first K
    giving the reference trial the document names (and, before a first remeasure, exactly its
    measured curve). ValueError, one line, naming what differs."""
    sc, given = doc["sweep_config"], config.to_dict()
    other = [k for k in IDENTITY if sc.get(k) != given.get(k)]
    if other:
        raise ValueError(f"sweep: not the study this validation was made from ({', '.join(other)} "
                         "differ)")
    if sorted(sc.get("batch_sizes") or []) != sorted(config.batch_sizes):
        raise ValueError(f"sweep: batch sizes {sorted(config.batch_sizes)}, the validation's "
                         f"{sorted(sc.get('batch_sizes') or [])}")
    k = predicted_from(doc)
    counts = Counter(r.batch_size for r in records)
    short = {b: counts.get(b, 0) for b in config.batch_sizes if counts.get(b, 0) < config.trials}
    if config.trials < k or short:
        raise ValueError(f"sweep: trials must be run to the sweep's {config.trials} per batch "
                         f"size, at least the {k} the predictions were made from (batch size: "
                         f"trials run {short or dict(counts)})")
    pconfig, first = prediction_sweep(doc, config, records)
    run = doc["calibration_run"]
    best = best_trial([r for r in first if r.batch_size == run["batch_size"]])
    if best is None or best.steps_to_goal != run["sweep_steps_to_goal"] or \
            str(best.trial_id) != str(run["trial_id"]):
        raise ValueError(f"sweep: its first {k} trials at B = {run['batch_size']} do not give the "
                         f"reference trial {run['trial_id']} at {run['sweep_steps_to_goal']} "
                         "steps that the predictions were made from")
    if doc.get("predicted_from_trials") is None:
        made = measured_summary(build_curve(first, pconfig, repeats))["points"]
        if made != doc["measured"]["points"]:
            raise ValueError(f"sweep: its first {k} trials per batch size do not give the "
                             "measured curve this validation was made from")
    return k


def remeasured(doc: dict, config: SweepConfig, records: Sequence[TrialRecord],
               repeats: Sequence[TrialRecord] = ()) -> dict:
    """The document (`ValidationDocument.to_dict()`) with its measured side from all of the
    sweep's trials (`measured_summary`: points, fit, interval, robustness, pooled B_simple),
    `sweep_config["trials"]` the sweep's, `predicted_from_trials` the K its predictions were made
    from (None when that is all of them) and the comparison table again; everything else as it
    was. ValueError (`check_made_from`) when the sweep is not the one it was made from."""
    k = check_made_from(doc, config, records, repeats)
    out = {**doc, "sweep_config": {**doc["sweep_config"], "trials": config.trials},
           "measured": measured_summary(build_curve(records, config, repeats))}
    out.pop("predicted_from_trials", None)
    if k < config.trials:
        out["predicted_from_trials"] = k
    out["comparison"] = comparison(out)
    return out


def with_measured_two_point(record: dict, config: SweepConfig, records: Sequence[TrialRecord],
                            measured: float | None, trials: int) -> dict:
    """A two_point.json record (`realnets.validation.two_point`) held against the sweep's
    measured B_crit now (`measured`, examples, from all its trials): "measured" and "ratio" set
    again, and "trials" the trials per batch size its estimate was made from (the record's own
    "trials" when it has one, else `trials`). ValueError when its reference trial is not the
    best of the sweep's first that-many trials at its B_ref (its goal, trial and steps)."""
    k = int(record.get("trials") or trials)
    best = best_trial([r for r in first_records(records, k) if r.batch_size == record["b_ref"]])
    if record.get("goal") != config.goal or best is None or \
            str(best.trial_id) != str(record["trial_id"]) or best.steps_to_goal != record["s_ref"]:
        raise ValueError(f"two-point: the record's reference trial {record['trial_id']} at "
                         f"B = {record['b_ref']} is not the best of the sweep's first {k} trials "
                         "there")
    value = record.get("value")
    return {**record, "trials": k, "measured": measured,
            "ratio": None if value is None or not measured else value / measured}

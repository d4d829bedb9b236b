"""One workload's reconciliation: every measurement of its critical batch size beside the NQM's
prediction and the two baselines, in one table, and the curves and marks of its one chart.

Pure functions of a validation document (`ValidationDocument.to_dict()`); the headline is the
document's own (its first checkpoint and `settings.target_rule`, as in `summary.summary_entry`).
Pieces a document lacks (an older file without the resampled interval, the robustness checks or
the branching) become rows that say so, not errors.

Rows (`reconciliation`), every batch size per example:
  measured B_crit (fit)          value, 16-84% over resampled trials (lo, hi) or why none; the
                                 note gives the bound when the curve has no bend in its range
  leave one batch size out       lo, hi: the smallest and largest refitted B_crit; the note has the
                                 largest factor off the fit and the fit's RMS log residual
  a search of 4K trials          for a sweep of K = 8, 16 or 32 trials run to their end: lo, hi
                                 where a 4K-trial search would likely (68%) put B_crit
                                 (`robustness.search_range`)
  reruns under other seeds       where the sweep's winners were rerun (`realnets.sweeps.repeats`):
                                 value the B_crit of the reruns' median curve, lo, hi its 16-84%
                                 range over the reruns' seeds drawn again (the note gives the
                                 range over one run drawn per batch size)
  local CBS at step s            one row per branch point (value k B_ref; `lower_bound` when the
                                 largest multiplier kept up), or one row saying why none
  B_simple, B_noise              at the headline checkpoint, with standard errors over examples
  NQM prediction                 the tuned curve's B_crit under the headline rule, 16-84% over
                                 the bootstrap NQMs; the bound as for the measured row
  NQM prediction, rule 2         the same under rule 2 (docs/prediction_rule.md), where the
                                 document has it and it is not the headline
  two-point estimate             B_ref (S_ref / S_fb - 1) (`two_point`), where the document has
                                 rule 2: 16-84% over the reference trial's reruns
  two-point estimate, both ends  B_ref (S~_ref / S_fb^N - 1), where the directory holds a
                                 two_ends.json made from the document (`sides`): the reruns'
                                 median and 16-84%, full batch on the whole training set
  NQM prediction, rule 4         the network's two ends joined by the NQM's bend
                                 (`two_point_curve.bend`, docs/prediction_rule.md, session 36),
                                 where the directory also holds a miss_split.json
Each row: estimate, step, value, se, lo, hi, ratio (value / measured B_crit), ratio_lo, ratio_hi
(lo and hi over it), lower_bound, note.
"""

from __future__ import annotations

import math

import numpy as np

from realnets.sweeps.report import runs_drawn
from realnets.sweeps.report import search_record
from realnets.sweeps.robustness import SEARCH_FACTORS, search_interval
from realnets.validation.comparison import (points_bound, ratio_se, unbounded_note,
                                           value_and_error)
from realnets.validation.settings import RULE_2, TARGET_LABELS

MEASURED = "measured B_crit (fit)"
LEAVE_ONE_OUT = "measured B_crit, leave one batch size out"
RERUNS = "measured B_crit, winners rerun under other seeds"
LOCAL_CBS = "local CBS"
B_SIMPLE = "B_simple = tr(Sigma) / ‖G‖²"
B_NOISE = "B_noise = tr(H Sigma) / (G^T H G)"
NQM = "NQM prediction (tuned B_crit)"
NQM_RULE_2 = "NQM prediction, rule 2 (noise-free match)"
TWO_POINT = "two-point estimate B_ref (S_ref / S_fb - 1)"
TWO_ENDS = "two-point estimate, both ends measured: B_ref (S~_ref / S_fb^N - 1)"
TWO_ENDS_MED = "two-point estimate of record, B_2pt'(med) = B_ref (S~_ref / S_med - 1)"
NQM_RULE_4 = "NQM prediction, rule 4 (the NQM's bend between the network's two ends)"
COLUMNS = ("estimate", "step", "value", "se", "lo", "hi", "ratio", "ratio_lo", "ratio_hi",
           "lower_bound", "note")
# the reruns' percentiles an interval is drawn from (16-84%) and a typical run (the median)
PERCENTILES = (16, 50, 84)


def headline(doc: dict) -> tuple[str, str, dict, dict]:
    """(checkpoint, target rule, the checkpoint's record, the rule's prediction) of the headline;
    missing parts are {}."""
    checkpoint = doc["settings"]["checkpoints"][0]
    rule = doc["settings"].get("target_rule", "train_loss")
    record = doc["checkpoints"].get(checkpoint) or {}
    return checkpoint, rule, record, (record.get("predictions") or {}).get(rule) or {}


def _row(estimate: str, measured: float | None, value=None, se=None, lo=None, hi=None,
         note: str = "", step: int | None = None, lower_bound: bool = False) -> dict:
    def over(x):
        return x / measured if x is not None and measured else None

    return {"estimate": estimate, "step": step, "value": value, "se": se, "lo": lo, "hi": hi,
            "ratio": over(value), "ratio_lo": over(lo), "ratio_hi": over(hi),
            "lower_bound": lower_bound, "note": note}


def measured_interval(measured: dict) -> tuple[float | None, float | None, str]:
    """(p16, p84, note) of the measured B_crit over resampled trials, or (None, None, why not)."""
    interval = measured.get("interval")
    if interval is None:
        return None, None, "no interval: not in this document (made before it was computed)"
    if interval.get("available") is False:
        return None, None, ("no interval: trials stopped early (needs a --full-trials sweep, or "
                            "reruns of the best trials: python -m realnets repeat)")
    if interval.get("p16") is None or interval.get("p84") is None:
        return None, None, (f"no interval: fewer than half of the {interval.get('resamples')} "
                            "resamples of the trials could be fitted")
    if interval.get("method") == "repeats":
        return interval["p16"], interval["p84"], (
            f"16-84% over {interval.get('resamples')} draws of one run per batch size among "
            "the best trial and its reruns with other seeds (data order and initialisation)")
    return interval["p16"], interval["p84"], (f"16-84% over {interval.get('resamples')} "
                                              "resamples of each batch size's trials")


def _reruns_rows(measured: dict, b_crit: float | None) -> list[dict]:
    """The reruns' row, when the sweep's winners were rerun (else none)."""
    r = measured.get("repeats")
    if not r:
        return []
    if not r.get("available"):
        return [_row(RERUNS, b_crit, note=f"no interval: {r.get('note', 'too few fitted')}")]
    seeds = r.get("rerun_median_resampled") or {}
    over_seeds = (f"16-84% over {seeds['resamples']} draws of the reruns' seeds with "
                  "replacement (a seed's initialisations together)" if seeds.get("p16") is not None
                  else "no interval over the seeds ("
                       + (seeds.get("note") or "fewer than half of the draws fitted, or made "
                          "before it was computed") + ")")
    one_run = (f"{r['p16']:.4g}-{r['p84']:.4g} over {r['resamples']} draws"
               if r.get("p16") is not None else "fewer than half of the draws fitted")
    return [_row(RERUNS, b_crit, value=r.get("rerun_median_b_crit"), lo=seeds.get("p16"),
                 hi=seeds.get("p84"),
                 note=f"value: B_crit of the reruns' median steps per batch size (the winners' "
                      f"own seed set aside); {over_seeds}; one run drawn per batch size among "
                      f"{runs_drawn(r)} (the winner and its reruns): {one_run}")]


def search_of(doc: dict) -> tuple[float, float] | None:
    """(lo, hi) where a 4x larger search would likely put a validation document's measured
    B_crit (`robustness.search_interval`): for a sweep whose interval resamples its trials
    (they ran to their end) with the search factor's trial count; else None."""
    measured, trials = doc["measured"], (doc.get("sweep_config") or {}).get("trials")
    resampled = (measured.get("interval") or {}).get("method") == "trials"
    # B_crit from the first K trials goes up to the fewest at any batch size: 32 means every
    # batch size has its 32 (an interrupted sweep would stop at 16)
    counts = [c["trials"] for c in (measured.get("robustness") or {}).get("trial_count") or []]
    if not (resampled and trials) or (counts and max(counts) != int(trials)):
        return None
    return search_interval(measured["fit"]["b_crit"], int(trials))


def search_label(to_trials: int) -> str:
    """The row name of where a search of `to_trials` per batch size would likely put B_crit."""
    return f"measured B_crit, a search of {to_trials} trials"


def _search_rows(doc: dict, b_crit: float | None) -> list[dict]:
    """The row of `search_of` (none where it is None)."""
    span = search_of(doc)
    if span is None:
        return []
    f = SEARCH_FACTORS[int(doc["sweep_config"]["trials"])]
    return [_row(search_label(f["to_trials"]), b_crit, lo=span[0], hi=span[1],
                 note=f"where a search of {f['to_trials']} trials per batch size would likely "
                      f"({f['level']:.0%}) put B_crit: x{f['factor']:.3f} either side of the "
                      f"{f['trials']}-trial fit ({f['to_trials']} trials moved it less than that "
                      f"on {search_record(f['trials'])}; docs/trainer.md, 'How many trials')")]


def _leave_one_out_row(measured: dict, b_crit: float | None) -> dict:
    robust = measured.get("robustness")
    if not robust:
        return _row(LEAVE_ONE_OUT, b_crit,
                    note="not in this document (made before it was computed)")
    loo = robust.get("leave_one_out") or {}
    values = [r["b_crit"] for r in loo.get("without") or [] if r.get("b_crit") is not None]
    rms = robust.get("rms_log_residual")
    parts = [f"B_crit refitted without each of {len(loo.get('without') or [])} batch sizes "
             f"({len(values)} could be fitted)"]
    if loo.get("max_ratio") is not None:
        parts.append(f"largest factor off the fit {loo['max_ratio']:.3g}")
    parts.append("fit's RMS log residual " + ("-" if rms is None else f"{rms:.3g}"))
    return _row(LEAVE_ONE_OUT, b_crit, lo=min(values) if values else None,
                hi=max(values) if values else None, note="; ".join(parts))


def _local_cbs_rows(doc: dict, b_crit: float | None) -> list[dict]:
    branching = doc.get("branching")
    if branching is None:
        return [_row(LOCAL_CBS, b_crit, note="not measured (document made before validate "
                                             "measured it)")]
    if "skipped" in branching:
        return [_row(LOCAL_CBS, b_crit, note=branching["skipped"])]
    s = branching["settings"]
    s_ref = (doc.get("calibration_run") or {}).get("sweep_steps_to_goal")
    rows = []
    for p in branching["points"]:
        where = f" ({p['step'] / s_ref:.2g} S_ref)" if s_ref else ""
        if p["cbs"] is None:
            note = "the k = 1 branch diverged"
        else:
            note = (f"largest k B_ref (B_ref {s['batch_size']}, k up to {s['multipliers'][-1]}) "
                    f"whose {branching['loss_kind']} after {s['window_examples']} examples stayed "
                    f"within {s['tolerance']:g} of k = 1's, {s['repeats']} repeat(s)")
            if p["cbs_is_lower_bound"]:
                note = "lower bound: the largest multiplier kept up; " + note
        rows.append(_row(f"{LOCAL_CBS} at step {p['step']}{where}", b_crit, value=p["cbs"],
                         step=p["step"], lower_bound=bool(p["cbs_is_lower_bound"]), note=note))
    return rows


def _baseline_note(how: str, at: str, measured: bool, unbounded: str) -> str:
    """The note of a B_simple or B_noise row: how it was measured and its error, or why it has
    no number (`comparison.unbounded_note`), or that it was not measured."""
    if not (measured or unbounded):
        return f"not measured {at}"
    return (f"{how} on the calibration sample {at}; "
            + (unbounded or "± standard error over examples"))


def reconciliation(doc: dict, sides: dict | None = None) -> list[dict]:
    """The table of one workload (see the module docstring for its rows and columns); `sides`:
    the records made from the document beside it (`files.side_records`), or None."""
    measured = doc["measured"]
    b_crit = measured["fit"]["b_crit"]
    lo, hi, why = measured_interval(measured)
    cbs20 = (measured.get("regimes") or {}).get("cbs20")
    bound = points_bound(measured.get("points"))
    rows = [_row(MEASURED, b_crit, value=b_crit, lo=lo, hi=hi,
                 note=f"S(B) = S_min (1 + B_crit / B) fitted to the sweep; {why}"
                      + ("" if cbs20 is None else f"; cbs20 {cbs20}")
                      + (f"; {bound.describe()}" if bound else "")),
            _leave_one_out_row(measured, b_crit)]
    rows += _search_rows(doc, b_crit)
    rows += _reruns_rows(measured, b_crit)
    rows += _local_cbs_rows(doc, b_crit)
    checkpoint, rule, record, pred = headline(doc)
    at = f"at the {checkpoint} checkpoint" + (f" (step {record['step']})" if "step" in record
                                              else "")
    grad = record.get("gradient") or {}
    value, _ = value_and_error(grad.get("b_simple"))
    rows.append(_row(B_SIMPLE, b_crit, value=value, se=ratio_se(value, grad),
                     note=_baseline_note("per-example gradients", at, bool(grad),
                                         unbounded_note("B_simple", "|G|^2",
                                                        grad.get("grad_sq_norm")))))
    noise = record.get("b_noise") or {}
    value, se = value_and_error(noise.get("b_noise"))
    rows.append(_row(B_NOISE, b_crit, value=value, se=se,
                     note=_baseline_note("Hessian-vector products", at, value is not None,
                                         unbounded_note("B_noise", "G^T H G",
                                                        noise.get("grad_h_grad")))))
    rows.append(_prediction_row(NQM, b_crit, rule, record, pred, at))
    if rule != RULE_2 and doc.get("full_batch") is not None:
        rows.append(_prediction_row(NQM_RULE_2, b_crit, RULE_2, record,
                                    (record.get("predictions") or {}).get(RULE_2) or {}, at,
                                    _full_batch_text(doc["full_batch"])))
    if doc.get("full_batch") is not None:
        two = two_point(doc)
        rows.append(_row(TWO_POINT, b_crit, value=two["value"], lo=two["lo"], hi=two["hi"],
                         note=f"S_ref {two['s_ref']} at B_ref, S_fb {two['s_fb']} full batch "
                              f"(no NQM; docs/prediction_rule.md); {two['note']}"))
    ends = (sides or {}).get("two_ends")
    if ends is not None:
        if ends.get("full_batch_inits"):
            rows.append(_median_end_row(ends, b_crit))
        rows.append(_two_ends_row(ends, b_crit))
    split = (sides or {}).get("miss_split")
    if ends is not None and split is not None:
        rows.append(_rule_4_row(ends, doc, split, b_crit))
    return rows


def _rule_4_row(ends: dict, doc: dict, split: dict, b_crit) -> dict:
    """The row of rule 4 (`two_point_curve.bend`) from the two_ends and miss_split records."""
    from realnets.validation.two_point_curve import bend   # it reads this module's headline

    b = bend(ends, doc, split)
    if b["value"] is None:
        return _row(NQM_RULE_4, b_crit, note=f"none: {b['why']}")
    return _row(NQM_RULE_4, b_crit, value=b["value"], lo=b["lo"], hi=b["hi"],
                note=f"S_fb^N {ends['full_set']['steps']} + (S~_ref - S_fb^N) x the headline "
                     f"NQM's noise penalty (S_q(B) - n_q) / (S_q(B_ref) - n_q), n_q "
                     f"{split['n_q']}; {b['over_b_2pt']:.3g} x B_2pt'; 16-84% with the reruns' "
                     "16th and 84th percentiles")


def _median_end_row(ends: dict, b_crit) -> dict:
    """The row of B_2pt'(med), the two-point estimate of record since session 42: the two_ends
    record's reruns at B_ref over the median full-batch end of its `full_batch_inits`."""
    from realnets.validation.full_batch_inits import median_end, why_no_value

    inits, pct = ends["full_batch_inits"], ends["reruns"]["percentiles"]
    median = inits["percentiles"]["50"]
    by = median_end(ends["b_ref"], pct, median)
    if by["50"] is None:
        where = why_no_value(len(inits["seeds"]), median, pct["50"]) + ": no estimate"
    else:
        where = (f"S_med {median:.4g}, the median full-batch steps of the fastest configuration "
                 f"from {len(inits['seeds'])} other initialisations ({inits['over_s_fb']:.3g} x "
                 f"S_fb^N {ends['full_set']['steps']})")
    return _row(TWO_ENDS_MED, b_crit, value=by["50"], lo=by["16"], hi=by["84"],
                note=f"{where}; S~_ref and its 16-84% as in the next row (docs/prediction_rule.md, "
                     "sessions 41-42)")


def _two_ends_row(ends: dict, b_crit) -> dict:
    """The row of a two_ends record's B_2pt' (docs/prediction_rule.md, session 32)."""
    fb, reruns = ends["full_set"], ends["reruns"]
    two = ends["two_point"]
    pct = reruns["percentiles"]
    return _row(TWO_ENDS, b_crit, value=two["50"], lo=two["16"], hi=two["84"],
                note=f"S~_ref {pct['50']:.4g}, the median of the reference trial's "
                     f"{reruns['count']} reruns ({reruns['not_at_goal']} not at the goal), at "
                     f"B_ref {ends['b_ref']}; S_fb^N {fb['steps']} full batch on "
                     + ("its exact loss (unlimited data" if fb.get("population") else
                        f"the whole training set ({fb['sample_rows']} rows")
                     + "; no NQM; docs/prediction_rule.md, "
                     "session 32); 16-84% with the reruns' 16th and 84th percentiles"
                if pct["50"] is not None else "the reruns' median is not finite")


PERCENTILES = (16, 50, 84)


def rerun_percentiles(reruns: list[int | None]) -> dict:
    """{"16", "50", "84"}: percentiles of the reruns' steps to goal by linear interpolation
    between order statistics (numpy's default), a rerun not at the goal counting as the slowest
    (+inf): a percentile that interpolates into one is infinite and given as None, one that falls
    on a finite rerun is that rerun's steps. All None without reruns."""
    if not reruns:
        return {str(q): None for q in PERCENTILES}
    steps = np.sort(np.array([np.inf if x is None else float(x) for x in reruns]))
    out = {}
    for q in PERCENTILES:
        position = (len(steps) - 1) * q / 100.0
        lo, frac = int(math.floor(position)), position - math.floor(position)
        # written out so that a position on a finite rerun next to an infinite one is finite
        value = (steps[lo] if frac == 0 else math.inf if math.isinf(steps[lo + 1])
                 else steps[lo] + frac * (steps[lo + 1] - steps[lo]))
        out[str(q)] = float(value) if np.isfinite(value) else None
    return out


def two_point_estimate(b_ref: int, s_fb: int | None, steps: float | None) -> float | None:
    """B_ref (steps / s_fb - 1) (examples per step), the McCandlish form through (B_ref, steps)
    with S_min = s_fb; None when either is missing or steps <= s_fb (no bend above B_ref)."""
    if s_fb is None or steps is None or s_fb <= 0 or steps <= s_fb:
        return None
    return float(b_ref) * (steps / s_fb - 1.0)


def two_point(doc: dict) -> dict:
    """The two-point estimate of docs/prediction_rule.md (session 31, later), a pure function of
    a validation document with rule 2: B_2pt = B_ref (S_ref / S_fb - 1) (examples per step), the
    McCandlish form through the reference point with S_min = S_fb, no NQM; "lo", "hi" the same
    with S_ref replaced by the 16th and 84th percentiles of the reference trial's reruns' steps
    (`rerun_percentiles`; None where a percentile is not finite or not above S_fb, or without
    reruns); "value" None, with "note" saying why, when S_fb is missing or not below S_ref."""
    fb = doc.get("full_batch") or {}
    run = doc["calibration_run"]
    b_ref, s_ref, s_fb = int(run["batch_size"]), run["sweep_steps_to_goal"], fb.get("steps")
    out = {"value": None, "lo": None, "hi": None, "s_ref": s_ref, "s_fb": s_fb, "note": ""}
    if s_fb is None or s_fb <= 0:
        out["note"] = "no full-batch steps (rule 2 found none)"
        return out
    if s_fb >= s_ref:
        out["note"] = f"S_fb {s_fb} is not below S_ref {s_ref}: no bend above B_ref"
        return out
    out["value"] = two_point_estimate(b_ref, s_fb, s_ref)
    reruns = fb.get("reference_reruns")
    if reruns is None:
        out["note"] = "no interval: the reference trial's reruns are not in this document"
    elif reruns:
        pct = rerun_percentiles(reruns)
        out["lo"] = two_point_estimate(b_ref, s_fb, pct["16"])
        out["hi"] = two_point_estimate(b_ref, s_fb, pct["84"])
        out["note"] = (f"16-84% over the {len(reruns)} reruns of the reference trial "
                       f"({sum(x is None for x in reruns)} not at the goal)")
    else:
        out["note"] = "no interval: the reference trial was not rerun under other seeds"
    return out


def _full_batch_text(fb: dict) -> str:
    """What rule 2 matched: the network's fewest full-batch steps ("" when there are none: the
    checkpoint's target error says why)."""
    if fb.get("steps") is None:
        return ""
    return (f"matched to the network's {fb['steps']} full-batch steps (trial {fb['trial_id']} of "
            f"{len(fb['trials'])}, {fb['sample_rows']} rows)")


def _prediction_row(estimate: str, b_crit, rule: str, record: dict, pred: dict, at: str,
                    extra: str = "") -> dict:
    """The row of one target rule's tuned prediction with its bootstrap interval, or why none."""
    tuned = pred.get("tuned")
    label = TARGET_LABELS.get(rule, rule)
    extra = f"; {extra}" if extra else ""
    if not tuned:
        why = ((record.get("target_errors") or {}).get(rule) or record.get("error")
               or "no prediction in this document")
        return _row(estimate, b_crit, note=f"{label} {at}: {why}{extra}")
    if tuned["fit"].get("b_crit") is None and not any(p.get("reached")
                                                      for p in tuned.get("points") or []):
        return _row(estimate, b_crit, note=f"{label} {pred['target']:.4g} {at}: the tuned NQM "
                                           "reaches it at none of the sweep's batch sizes (no "
                                           f"B_crit in their range){extra}")
    boot = (pred.get("bootstrap") or {}).get("tuned")
    spread = (f"16-84% over {len(boot['draws'])} bootstrap NQMs" if boot
              else "no bootstrap interval")
    bound = points_bound(tuned.get("points"))
    return _row(estimate, b_crit, value=tuned["fit"]["b_crit"],
                lo=boot["p16"] if boot else None, hi=boot["p84"] if boot else None,
                note=f"calibrated NQM {at}, {pred.get('family', '-')} tuned per batch "
                     f"size, {label} {pred['target']:.4g}; {spread}"
                     + (f"; {bound.describe()}" if bound else "") + extra)


def _points(label: str, summary: dict) -> list[dict]:
    return [{"curve": label, "batch_size": float(p["batch_size"]), "steps": float(p["steps"])}
            for p in summary["points"] if p["steps"] is not None]


def curve_labels(doc: dict) -> tuple[str, str]:
    """(measured, predicted) curve labels of the chart."""
    checkpoint, rule, _, _ = headline(doc)
    return (f"measured ({doc['workload']})",
            f"NQM predicted ({checkpoint}, {TARGET_LABELS.get(rule, rule)})")


TRANSFER_LABEL = "network at the NQM's metaparameters"


def reconciliation_curves(doc: dict) -> list[dict]:
    """Measured S(B), the headline NQM's predicted S(B) and, where the document has the transfer
    (`realnets.validation.transfer`), the network's steps with the NQM's metaparameters, in
    absolute steps: rows curve, batch_size, steps (reached batch sizes only; a curve absent
    without any)."""
    measured_label, predicted_label = curve_labels(doc)
    rows = _points(measured_label, doc["measured"])
    tuned = headline(doc)[3].get("tuned")
    if tuned:
        rows += _points(predicted_label, tuned)
    transfer = doc.get("transfer") or {}
    rows += [{"curve": TRANSFER_LABEL, "batch_size": float(p["batch_size"]),
              "steps": float(p["steps_to_goal"])}
             for p in transfer.get("points", []) if p["steps_to_goal"] is not None]
    return rows


def reconciliation_marks(doc: dict) -> list[dict]:
    """Batch sizes to mark on the chart's horizontal axis: rows estimate, curve (the curve the
    mark belongs to: measured or predicted B_crit; None for the others), batch_size, lo, hi (an
    interval, else None). Only positive values."""
    measured_label, predicted_label = curve_labels(doc)
    marks = []
    for row in reconciliation(doc):
        # rule 2 has no curve on the chart: its mark would stand alone
        if row["value"] is None or not row["value"] > 0 or row["estimate"] in (NQM_RULE_2,
                                                                              TWO_POINT):
            continue
        name, curve = row["estimate"], None
        if name == MEASURED:
            name, curve = "measured B_crit", measured_label
        elif name == NQM:
            name, curve = "NQM B_crit", predicted_label
        elif name.startswith(LOCAL_CBS):
            name = f"local CBS, step {row['step']}" + (" (lower bound)" if row["lower_bound"]
                                                       else "")
        else:
            name = name.split(" =")[0]
        marks.append({"estimate": name, "curve": curve, "batch_size": float(row["value"]),
                      "lo": row["lo"], "hi": row["hi"]})
    return marks

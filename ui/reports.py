"""Validation reports (`python -m realnets validate`) beside a measured curve: finding the
report made from the same study as a sweep, its reconciliation and its comparison table (pure
library code, no streamlit)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from realnets import store
from realnets.validation import two_point
from realnets.validation.files import TWO_POINT_FILE, VALIDATION_FILE, made_from, read_validation
from realnets.validation.reconciliation import COLUMNS, reconciliation
from realnets.validation.report import (MISS_SPLIT_HEADER, RECONCILIATION_HEADER,
                                       miss_split_cells, path_cells, reconciliation_cells,
                                       transfer_cells)


def validation_for(config: dict, root: Path) -> Path | None:
    """The directory under `root` of the validation report made from a sweep of the same study as
    this config (`realnets.sweeps.records.IDENTITY` and the trials per batch size), or None: a
    report of another study of the same workload would compare the wrong curve.

    Every report directory is a candidate, `root/WORKLOAD` first: a report is found by what it
    was made from, not by its name (an own workload's report, or one of a workload swept with
    another optimizer, `root/WORKLOAD_OPTIMIZER`). A report that does not read is skipped."""
    workload = config.get("workload")
    root = Path(root)
    if not workload or not root.is_dir():
        return None
    named = root / str(workload)
    candidates = sorted((d for d in root.iterdir() if (d / VALIDATION_FILE).is_file()),
                        key=lambda d: (d != named, d.name))
    for path in candidates:
        try:
            recorded = read_validation(path).sweep_config
        except ValueError:
            continue
        if made_from(recorded, config):
            return path
    return None


def load_validation(out_dir: Path) -> pd.DataFrame:
    """The comparison table of a validation directory, one row per estimate (for the app):
    workload, quantity, checkpoint, value, uncertainty, ratio, note."""
    rows = read_validation(out_dir).comparison
    table = pd.DataFrame(rows, columns=["workload", "quantity", "checkpoint", "value",
                                        "uncertainty", "ratio", "note"])
    for col in ("value", "uncertainty", "ratio"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype(float)
    return table


def reconciliation_table(doc: dict, sides: dict | None = None) -> pd.DataFrame:
    """The reconciliation of a validation document (`realnets.validation.reconciliation`; `sides`:
    the records made from it beside it, `files.side_records`), one row per estimate: estimate,
    step, value, se, lo, hi, ratio, ratio_lo, ratio_hi, lower_bound, note (numbers as floats, NaN
    where unknown)."""
    table = pd.DataFrame(reconciliation(doc, sides), columns=list(COLUMNS))
    for col in ("step", "value", "se", "lo", "hi", "ratio", "ratio_lo", "ratio_hi"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype(float)
    return table


def reconciliation_display(doc: dict, sides: dict | None = None) -> pd.DataFrame:
    """The reconciliation as report.md shows it (text cells: 'B ± se', 'lo .. hi', ratios)."""
    return pd.DataFrame(reconciliation_cells(doc, sides), columns=RECONCILIATION_HEADER)


def miss_split_display(sides: dict | None) -> pd.DataFrame | None:
    """The headline's miss split into four factors as report.md shows it (text cells), or None
    without a miss_split record made from the document."""
    split = (sides or {}).get("miss_split")
    if split is None:
        return None
    return pd.DataFrame(miss_split_cells(split), columns=MISS_SPLIT_HEADER)


def transfer_display(doc: dict) -> pd.DataFrame | None:
    """The network run with the NQM's metaparameters as report.md shows it (text cells), or None
    when the document has no transfer."""
    if not doc.get("transfer"):
        return None
    header, rows = transfer_cells(doc)
    return pd.DataFrame(rows, columns=header)


def path_display(doc: dict) -> pd.DataFrame | None:
    """The network against its own quadratic at the goal as report.md shows it (text cells), or
    None when the document has no such measurement or no batch size to take apart."""
    path = (doc.get("transfer") or {}).get("quadratic_path")
    if not path or not path["points"]:
        return None
    header, rows = path_cells(path)
    return pd.DataFrame(rows, columns=header)


def track_record_note(summary: Path, predictor: str, value: float | None,
                      workload: str | None = None, lo: float | None = None,
                      hi: float | None = None) -> str | None:
    """One Markdown line: the error bar the validated workloads' track record puts on a
    prediction (`realnets.validation.track_record.record_factor` at 68%, the summary's entries of
    `workload` left out when it has any), set against the prediction's own 16-84% interval
    `lo` .. `hi` when given; None without a summary or a value."""
    from realnets.validation.summary import read_summary
    from realnets.validation.track_record import error_bar

    if value is None or not Path(summary).is_file():
        return None
    try:
        bar = error_bar(read_summary(Path(summary)), predictor, value, workload)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return f"No track record: {Path(summary).name} does not read ({err})."
    factor, n = bar.factor, bar.entries
    if n == 0:
        return None
    whose = f"the {n} other validated entries" if bar.held_out else f"the {n} validated entries"
    if not factor < float("inf"):
        return (f"Track record ({whose}, `python -m realnets track-record`): too few to bound "
                f"{predictor}'s error at 68%.")
    def g(x):
        return f"{x:.3g}"

    low, high = bar.lo, bar.hi
    if lo is None or hi is None:
        own = "; its own 16-84% interval counts one source of error only"
    elif low <= lo and hi <= high:
        own = (f", wider than its 16-84% interval ({g(lo)} .. {g(hi)}), which counts one "
               "source of error only")
    else:
        own = (f", beside its 16-84% interval ({g(lo)} .. {g(hi)}), which counts one source of "
               "error only")
    return (f"Error bar from the track record of {predictor} ({whose}, `python -m realnets "
            f"track-record`): {g(low)} .. {g(high)} (x{factor:.3g}, 68%){own}.")


def rule_4_track_note(doc: dict, sides: dict | None, summary: Path) -> str | None:
    """`track_record_note` for a validation report's rule-4 prediction (None without one)."""
    from realnets.validation.summary import summary_entry

    rule_4 = summary_entry(doc, sides or {}).get("rule_4") or {}
    return track_record_note(summary, "rule 4", rule_4.get("b_crit"), doc.get("workload"),
                             rule_4.get("lo"), rule_4.get("hi"))


def two_point_summary(sweep_dir: Path, steps_at: dict[int, float], goal: float,
                      summary: Path | None = None, workload: str | None = None) -> str | None:
    """One Markdown line on the sweep's two-point estimate (`python -m realnets two-point`, its
    SWEEP_DIR/two_point.json), or None without one.

    Args:
      sweep_dir: the sweep directory.
      steps_at: the sweep's steps to goal per batch size as shown now ({B: steps}).
      goal: the sweep's goal.
      summary, workload: a validation summary.json and the sweep's workload: where the file
        exists, the track record's error bar on the estimate shown (B_2pt'(med), else B_2pt')
        follows (`track_record_note`), held out from the workload's own entries when it has
        any, unless the record's own condition S_fb^N >= 5 fails, which the line then says.
    A record made before the sweep changed (another goal, or other steps at its B_ref) or one
    that does not read is named as such instead of shown."""
    path = Path(sweep_dir) / TWO_POINT_FILE
    if not path.is_file():
        return None
    try:
        record = store.read_json(path, "two-point record")
        b_ref, value = int(record["b_ref"]), record["value"]
        choice = two_point.chosen(record)
        cond, lo, hi = record["condition"], record["lo"], record["hi"]
        why = two_point.stale(record, goal, steps_at)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        return f"{TWO_POINT_FILE} does not read ({err}): rerun `python -m realnets two-point`."
    if why:
        return why + "."
    if value is None:
        return (f"Two-point estimate (`python -m realnets two-point`): none at B_ref = {b_ref} "
                f"({cond['why']}).")

    # the track record's bar is withheld where the record's own condition fails: its entries
    # are mostly ones where it held (docs/own_workload.md)
    has_record = summary is not None and Path(summary).is_file()
    withheld = has_record and not cond["holds"]
    g = two_point.number
    head = (f"Two-point estimate of B_crit (`python -m realnets two-point`, no NQM, from "
            f"B_ref = {b_ref})")
    note = (None if not has_record or withheld else track_record_note(
        summary, choice.predictor, choice.value, workload, choice.lo, choice.hi))
    tail = ("" if note is None else f" {note}") + (
        f" No error bar from the track record: its entries are mostly ones where S_fb^N >= "
        f"{two_point.TRUST_MIN_STEPS}, and here that condition does not hold." if withheld
        else "")
    if choice.why is not None:      # the estimate of record missing: B_2pt' alone
        missing = ("B_2pt'(med), the estimate of record, is not in this record (made with "
                   "`--best-end-only` or before session 42): rerun `python -m realnets "
                   "two-point`" if not record.get("b_2pt_med") else
                   f"B_2pt'(med), the estimate of record, has no value here ({choice.why})")
        return (f"{head}, with the best full-batch end: B_2pt' = **{g(value)}** examples per "
                f"step (16-84%: {g(lo)} .. {g(hi)}); {two_point.verdict(cond)}. {missing}."
                + tail)
    return (f"{head}, with the median full-batch end over {choice.inits} initialisations: "
            f"B_2pt'(med) = **{g(choice.value)}** examples per step (16-84%: "
            f"{g(choice.lo)} .. {g(choice.hi)}), the estimate of record "
            f"(docs/prediction_rule.md, session 41); with the best end B_2pt' = {g(value)} "
            f"({g(lo)} .. {g(hi)}), a diagnostic; {two_point.verdict(cond)}." + tail)


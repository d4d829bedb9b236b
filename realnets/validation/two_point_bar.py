"""The error bar the validated workloads' track record puts on a two-point record's estimate
of record (`python -m realnets two-point` prints it; docs/own_workload.md).

The bar is the 68% split-conformal factor of `track_record.record_factor` over a summary's
entries, without the record's own workload. It is withheld where the record's own condition
S_fb^N >= `two_point.TRUST_MIN_STEPS` fails: the record's entries are mostly ones where it
held, and one full-batch step moves such an estimate by a fifth or more.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from realnets.validation.track_record import ErrorBar, bar_line, workloads_of
from realnets.validation.track_record import error_bar as track_error_bar
from realnets.validation.two_point import TRUST_MIN_STEPS, chosen


@dataclass(frozen=True)
class TwoPointBar(ErrorBar):
    """`track_record.ErrorBar` on a two-point record's estimate, with the record's own S_fb^N
    condition (`condition_holds`) and how many of the `entries` met it."""

    condition_holds: bool
    entries_condition_held: int


def error_bar(record: dict, entries: list[dict]) -> TwoPointBar | None:
    """The track record's error bar on the estimate `two_point.chosen` picks from `record` (a
    two_point.json), over `entries` (a summary's); None where the record has no value."""
    c = chosen(record)
    if c.value is None:
        return None
    bar = track_error_bar(entries, c.predictor, c.value, record["workload"])
    others = [e for e in workloads_of(entries) if e["workload"] != record["workload"]]
    met = sum(((e.get("two_ends") or {}).get("s_fb") or 0) >= TRUST_MIN_STEPS for e in others)
    return TwoPointBar(**dataclasses.asdict(bar),
                       condition_holds=bool(record["condition"]["holds"]),
                       entries_condition_held=met)


def error_bar_line(bar: TwoPointBar | None, summary: str) -> str:
    """`error_bar` in words for the terminal (`summary`: where the record was read)."""
    if bar is None:
        return f"no error bar from the track record ({summary}): no estimate"
    whose = (f"{bar.entries} other validated entries" if bar.held_out
             else f"{bar.entries} validated entries")
    if not bar.condition_holds:
        return (f"no error bar from the track record of {bar.predictor} ({whose}, {summary}): "
                f"its entries are mostly ones where S_fb^N >= {TRUST_MIN_STEPS} "
                f"({bar.entries_condition_held} of {bar.entries}), and here that condition "
                "does not hold")
    return bar_line(bar, summary, "the 16-84% above counts the reruns' spread only")

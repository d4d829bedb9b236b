"""The README's headline counts over a validation summary (`python -m realnets headline`).

Read from the entries of reports/validation/summary.json; runs nothing. For each estimate of
B_crit (rule 4, rule 1, B_simple, B_2pt'(med), B_2pt'): how many real workloads it puts within
2x of the measured B_crit (0.5 <= predicted / measured <= 2) among those where it gives a number,
the same among the workloads held out for it, and the comparisons the README gives beside them.

Conventions (docs/validation.md, "The README's headline"):
- real workloads: every entry but the `nqm` control; a workload validated at two goals
  (`ONCE`: the tabular example) is counted once per estimate, at its first goal where the
  estimate has a number there, else at the other;
- held out for an estimate: a real entry not in its `SEEN` list, the shipped entries whose
  numbers for it were known when it was fixed (docs/prediction_rule.md names each in its dated
  sections); the three the first rules were designed on (mnist_mlp and mnist1d_mlp with
  momentum, the text model) are seen for every estimate. A workload validated later, a user's
  own included, is held out for every estimate;
- closeness: |ln(predicted / measured)|, a missing number infinitely far.

`against_reruns` puts the B_crit of each entry's reruns' median curve in place of its sweep's
(a diagnostic of the bar's comparisons, docs/prediction_rule.md, session 48).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from realnets.validation.track_record import CONTROL, PREDICTORS, score, workloads_of
from realnets.validation.two_point import TRUST_MIN_STEPS

TABULAR = "examples/breast_cancer.py:make_workload"
# (workload, optimizer, goal to 4 significant digits) of the counted entry, then the other
ONCE = (((TABULAR, "momentum", 0.07105), (TABULAR, "momentum", 0.0443)),)

# the order of the headline table; B_noise stays in the track record only
ESTIMATES = ("rule 4", "rule 1", "B_simple", "B_2pt'(med)", "B_2pt'")

_SEEN_RULE_1 = (("mnist_mlp", "momentum"), ("mnist1d_mlp", "momentum"),
                ("text_transformer", "adam"))
# validated with both ends before B_2pt' was restated (session 32)
_SEEN_B_2PT = (("digits_cnn", "adam"), ("digits_cnn", "momentum"), ("digits_cnn", "sgd"),
               ("digits_mlp", "adam"), ("digits_mlp", "momentum"), ("digits_mlp", "sgd"),
               ("examples/own_workload.py:make_workload", "momentum"),
               ("mnist1d_mlp", "momentum"), ("mnist_logreg", "adam"),
               ("mnist_logreg", "momentum"), ("mnist_logreg", "sgd"), ("mnist_mlp", "adam"),
               ("mnist_mlp", "momentum"))
# ... and those validated before rule 4 was fixed (session 36)
_SEEN_RULE_4 = _SEEN_B_2PT + (
    (TABULAR, "momentum", 0.0443), (TABULAR, "momentum", 0.07105),
    ("examples/diabetes.py:make_workload", "momentum"),
    ("examples/own_workload.py:make_workload", "adam"),
    ("examples/own_workload.py:make_workload", "sgd"),
    ("examples/teacher_student.py:make_workload", "adam"),
    ("examples/teacher_student.py:make_workload", "momentum"),
    ("mnist1d_mlp", "adam"), ("mnist1d_mlp", "sgd"), ("mnist_mlp", "sgd"))
# ... and those validated before B_2pt'(med) was found (session 41)
_SEEN_B_2PT_MED = _SEEN_RULE_4 + (
    ("examples/digits_gru.py:make_workload", "momentum"),
    ("examples/teacher_student.py:make_noisy_workload", "adam"),
    ("examples/teacher_student.py:make_noisy_workload", "momentum"),
    ("examples/teacher_student.py:make_noisy_workload", "sgd"),
    ("examples/teacher_student.py:make_workload", "sgd"))

# the workloads the first rules were designed on: seen for every estimate, whenever their
# number for it came (the text model's two ends in session 47, as stated before the run)
_DESIGNED_ON = _SEEN_RULE_1

# estimate -> the shipped entries it was not held out on; None: a baseline, no rule to hold out
SEEN: dict[str, tuple | None] = {"rule 4": _SEEN_RULE_4 + _DESIGNED_ON, "rule 1": _SEEN_RULE_1,
                                 "B_simple": None, "B_2pt'(med)": _SEEN_B_2PT_MED + _DESIGNED_ON,
                                 "B_2pt'": _SEEN_B_2PT + _DESIGNED_ON}


def against_reruns(entries: list[dict]) -> list[dict]:
    """The entries with their measured B_crit (and its 16-84% range) that of their winners' rerun
    median curve (`reruns`: "b_crit", "lo", "hi"), without their miss split (made against the
    sweep's); an entry without one is left out."""
    return [{**e, "measured": {"b_crit": e["reruns"]["b_crit"], "lo": e["reruns"].get("lo"),
                               "hi": e["reruns"].get("hi")}, "miss_split": None}
            for e in entries if (e.get("reruns") or {}).get("b_crit")]


def key(entry: dict) -> tuple:
    """(workload, optimizer), with the goal to 4 significant digits for a workload of `ONCE`."""
    k = (entry["workload"], entry["optimizer"])
    if any(k == first[:2] for first, _ in ONCE):
        return k + (float(f"{float(entry['goal']):.4g}"),)
    return k


def ratio(entry: dict, estimate: str) -> float | None:
    """predicted / measured B_crit of `estimate` on `entry`; None where it gives no positive
    number."""
    value = PREDICTORS[estimate](entry).value
    if value is None or not value > 0 or not math.isfinite(value):
        return None
    return value / entry["measured"]["b_crit"]


def within_2x(entry: dict, estimate: str) -> bool:
    """0.5 <= predicted / measured <= 2, as the track record counts it (its score <= ln 2)."""
    return score(PREDICTORS[estimate](entry), entry["measured"]["b_crit"]) <= math.log(2.0)


def counted(entries: list[dict], estimate: str) -> list[dict]:
    """The real entries `estimate` is counted over: each workload of `ONCE` once, at its first
    goal where `estimate` has a number there, else at the other."""
    real = workloads_of(entries)
    by_key = {key(e): e for e in real}
    dropped = set()
    for first, other in ONCE:
        if first in by_key and other in by_key:
            dropped.add(other if ratio(by_key[first], estimate) is not None else first)
    return [e for e in real if key(e) not in dropped]


def held_out(entry: dict, estimate: str) -> bool:
    seen = SEEN[estimate]
    return seen is not None and key(entry) not in seen


@dataclass(frozen=True)
class Count:
    """`within` of `of` entries; `of` counts those with a number only."""
    within: int
    of: int

    def __str__(self) -> str:
        return f"{self.within} of {self.of}"


@dataclass(frozen=True)
class Line:
    """One estimate's headline: within 2x over the entries with a number (`all`), over those
    held out for it (`held_out`; None for a baseline), and the entries without a number."""
    estimate: str
    all: Count
    held_out: Count | None
    no_number: tuple[str, ...]


def _within(entries: list[dict], estimate: str) -> Count:
    return Count(sum(within_2x(e, estimate) for e in entries),
                 sum(ratio(e, estimate) is not None for e in entries))


def line(entries: list[dict], estimate: str) -> Line:
    es = counted(entries, estimate)
    held = ([e for e in es if held_out(e, estimate)] if SEEN[estimate] is not None else None)
    return Line(estimate, _within(es, estimate),
                None if held is None else _within(held, estimate),
                tuple(f"{e['workload']} ({e['optimizer']})" for e in es
                      if ratio(e, estimate) is None))


def closer(entries: list[dict], a: str, b: str, strictly: bool) -> Count:
    """On how many of the entries `a` is counted over, where `a` has a number, `a` is at least
    as close to the measured B_crit as `b` (strictly closer with `strictly`)."""
    es = [e for e in counted(entries, a) if ratio(e, a) is not None]
    s = [(score(PREDICTORS[a](e), e["measured"]["b_crit"]),
          score(PREDICTORS[b](e), e["measured"]["b_crit"])) for e in es]
    return Count(sum(x < y if strictly else x <= y for x, y in s), len(s))


def where_condition(entries: list[dict], estimate: str) -> Count:
    """`estimate` within 2x over its counted entries with a number and S_fb^N >=
    `two_point.TRUST_MIN_STEPS` (the two-point estimates' condition)."""
    es = [e for e in counted(entries, estimate) if ratio(e, estimate) is not None
          and ((e.get("two_ends") or {}).get("s_fb") or 0) >= TRUST_MIN_STEPS]
    return _within(es, estimate)


def largest_factors(entries: list[dict]) -> tuple[dict[str, int], int, int]:
    """Over rule 1's misses (its counted entries outside 2x): how many have each largest factor
    of their miss split (`miss_split.json`'s `largest`), how many have a split, and how many
    misses there are."""
    misses = [e for e in counted(entries, "rule 1") if not within_2x(e, "rule 1")]
    split = [e["miss_split"]["largest"] for e in misses
             if (e.get("miss_split") or {}).get("largest")]
    return ({f: split.count(f) for f in sorted(set(split), key=lambda f: (-split.count(f), f))},
            len(split), len(misses))


def controls(entries: list[dict]) -> dict[str, float | None]:
    """rule 4's and rule 1's predicted / measured on the control, where it is in `entries`."""
    c = [e for e in entries if e["workload"] == CONTROL]
    if not c:
        return {}
    return {name: ratio(c[0], name) for name in ("rule 4", "rule 1")}


def headline(entries: list[dict]) -> dict:
    """Every count of the README's headline, JSON-ready."""
    lines = {name: line(entries, name) for name in ESTIMATES}
    factors, with_split, misses = largest_factors(entries)
    return {
        "lines": {n: {"within_2x": [x.all.within, x.all.of],
                      "held_out": None if x.held_out is None
                      else [x.held_out.within, x.held_out.of],
                      "no_number": list(x.no_number)} for n, x in lines.items()},
        "rule_4_at_least_as_close_as_b_simple": list(_pair(closer(entries, "rule 4",
                                                                   "B_simple", False))),
        # what the NQM's bend adds to the two measured ends it is given
        "rule_4_closer_than_b_2pt": list(_pair(closer(entries, "rule 4", "B_2pt'", True))),
        "b_simple_strictly_closer_than_rule_1": list(_pair(closer(entries, "B_simple",
                                                                   "rule 1", True))),
        "where_s_fb_at_least": TRUST_MIN_STEPS,
        "b_2pt_med_where_condition": list(_pair(where_condition(entries, "B_2pt'(med)"))),
        "b_2pt_where_condition": list(_pair(where_condition(entries, "B_2pt'"))),
        "rule_1_misses": {"largest_factor": factors, "with_split": with_split,
                          "misses": misses},
        "control": controls(entries),
    }


def _pair(c: Count) -> tuple[int, int]:
    return c.within, c.of


def table(h: dict) -> str:
    """`headline` as the README's Markdown table."""
    def of(pair):
        return "-" if pair is None else f"{pair[0]} of {pair[1]}"

    def number(x):
        return "-" if x is None else f"{x:.3g}"

    lines, control = h["lines"], h["control"]
    factors = ", ".join(f"{f} {n}" for f, n in h["rule_1_misses"]["largest_factor"].items())
    split = (f"largest factor of its misses' split: {factors} "
             f"(of {h['rule_1_misses']['with_split']} split, {h['rule_1_misses']['misses']} "
             "misses)" if h["rule_1_misses"]["with_split"]
             else f"{h['rule_1_misses']['misses']} misses, none split")
    beside = {
        "rule 4": f"at least as close as B_simple on "
                  f"{of(h['rule_4_at_least_as_close_as_b_simple'])}; closer than B_2pt' (its "
                  f"two ends without the NQM) on {of(h['rule_4_closer_than_b_2pt'])}",
        "rule 1": f"B_simple strictly closer on {of(h['b_simple_strictly_closer_than_rule_1'])}"
                  f"; {split}",
        "B_simple": "the baseline, tr(Sigma) / \\|G\\|^2",
        "B_2pt'(med)": f"{of(h['b_2pt_med_where_condition'])} where S_fb^N >= "
                       f"{h['where_s_fb_at_least']}",
        "B_2pt'": f"{of(h['b_2pt_where_condition'])} where S_fb^N >= {h['where_s_fb_at_least']}",
    }
    rows = ["| estimate | within 2x of the measured B_crit | held out | control (nqm) "
            "| beside it |", "|---|---|---|---|---|"]
    for name, x in lines.items():
        # the counts are over the entries with a number; those without one are named
        missing = x["no_number"]
        rows.append(f"| {name} | {of(x['within_2x'])} | {of(x['held_out'])} | "
                    f"{number(control.get(name)) if name in control else '-'} | "
                    f"{beside[name]}"
                    + (f"; no number on {', '.join(missing)}" if missing else "") + " |")
    return "\n".join(rows)

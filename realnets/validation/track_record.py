"""The predictions' track record over the validated workloads: do their error bars hold, and
what error bar does the record call for (docs/validation.md, "Do the error bars hold?").

Read from the entries of reports/validation/summary.json (`realnets.validation.summary`); runs
nothing. For each predictor (rule 4, rule 1, B_2pt', B_simple, B_noise, and the candidate
B_2pt'(med) of docs/prediction_rule.md, session 41):

- coverage of the interval as shipped: the measured B_crit inside the predictor's 16-84%
  interval (B_simple, B_noise: value +- one standard error), and the two intervals overlapping;
- the split-conformal factor F at level 1 - alpha (Vovk et al. 2005; Lei et al. 2018): with
  scores s_i = |ln(predicted_i / measured_i)| over n workloads, F = exp(s_(k)), the k-th
  smallest, k = ceil((n + 1)(1 - alpha)), infinite when k > n; [prediction / F, prediction x F]
  then covers a new exchangeable workload's measured B_crit with probability >= 1 - alpha;
- that factor held out by network: for each workload name, F from the other names' workloads
  only, and the count of the name's workloads it covers (and how many of those by an infinite
  F, which covers anything with a number).

A workload where a predictor gives no number scores +inf (a miss that no factor covers); the
factor among the workloads where it gives one is printed beside (added after the first reading:
docs/prediction_rule.md, session 40).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from realnets.validation.summary import rule_1_of

CONTROL = "nqm"
LEVELS = (0.68, 0.90)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One predictor's number on one workload: value and 16-84% interval (None when the
    predictor gives none), B_crit in examples per step; `computed` False where the predictor's
    diagnostic was not run on the workload (its record has none), as against run without a
    number."""
    value: float | None
    lo: float | None = None
    hi: float | None = None
    computed: bool = True


def _from_range(x: dict | None) -> Prediction:
    if not x or x.get("b_crit") is None:
        return Prediction(None)
    return Prediction(x["b_crit"], x.get("lo"), x.get("hi"))


def _from_rerun_range(x: dict | None) -> Prediction:
    """A range over the reruns' 16th and 84th percentiles (rule 4, B_2pt', B_2pt'(med)): a
    missing end is an unbounded one (that percentile had no bend above the full-batch end, so
    the estimate is <= 0, or did not reach the goal, so it is infinite)."""
    p = _from_range(x)
    if p.value is None:
        return p
    return Prediction(p.value, 0.0 if p.lo is None else p.lo,
                      math.inf if p.hi is None else p.hi)


def _median_end(e: dict) -> Prediction:
    ends = e.get("two_ends")
    if ends and ends.get("b_2pt_med") is None:      # both ends measured, the diagnostic not run
        return Prediction(None, computed=False)
    return _from_rerun_range((ends or {}).get("b_2pt_med"))


def _from_se(x: dict | None) -> Prediction:
    if not x or x.get("value") is None:
        return Prediction(None)
    se = x.get("se")
    return Prediction(x["value"], None if se is None else x["value"] - se,
                      None if se is None else x["value"] + se)


# predictor name -> its prediction on a summary entry
PREDICTORS: dict[str, Callable[[dict], Prediction]] = {
    "rule 4": lambda e: _from_rerun_range(e.get("rule_4")),
    "rule 1": lambda e: _from_range(rule_1_of(e)),
    "B_2pt'": lambda e: _from_rerun_range((e.get("two_ends") or {}).get("b_2pt")),
    "B_2pt'(med)": _median_end,
    "B_simple": lambda e: _from_se(e.get("b_simple")),
    "B_noise": lambda e: _from_se(e.get("b_noise")),
}


def conformal_score(scores: Sequence[float], level: float) -> float:
    """The k-th smallest of the scores |ln(predicted / measured)| (+inf allowed), k =
    ceil((n + 1) level); +inf when k > n or n = 0."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    s = np.sort(np.asarray(scores, dtype=float))
    k = math.ceil(round((len(s) + 1) * level, 9))     # 75 x 0.68 is 51.00000000000001
    return math.inf if k > len(s) else float(s[k - 1])


def conformal_factor(scores: Sequence[float], level: float) -> float:
    """Split conformal factor F = exp(`conformal_score`): [prediction / F, prediction x F]."""
    return float(np.exp(conformal_score(scores, level)))


def score(prediction: Prediction, measured: float) -> float:
    """|ln(predicted / measured)|; +inf where the predictor gives no positive number."""
    if prediction.value is None or not prediction.value > 0 or not math.isfinite(prediction.value):
        return math.inf
    return abs(math.log(prediction.value / measured))


def held_out_coverage(scores: Sequence[float], groups: Sequence[str],
                      level: float) -> tuple[int, int]:
    """How many workloads the conformal factor covers when it is computed without every
    workload of their own group, sum over groups g of #{i in g : s_i <= ln F(scores not in g)},
    and how many of those a group's infinite F covers (an unbounded interval: no evidence)."""
    s, g = np.asarray(scores, dtype=float), np.asarray(groups)
    covered = unbounded = 0
    for name in np.unique(g):
        mine = s[g == name]
        bound = conformal_score(s[g != name], level)   # compared as scores: ties hold exactly
        hit = int(np.sum(np.isfinite(mine) & (mine <= bound)))
        covered += hit
        unbounded += hit if bound == math.inf else 0
    return covered, unbounded


@dataclasses.dataclass(frozen=True)
class TrackRecord:
    """One predictor's record over `n` workloads (`missing` of them without a number)."""
    predictor: str
    n: int
    missing: int
    not_computed: int            # of the missing, those whose diagnostic was not run
    median_ratio: float          # median of predicted / measured over those with a number
    within_2x: int
    inside: int                  # measured B_crit inside the shipped interval
    overlap: int                 # shipped interval and measured interval overlap
    with_interval: int           # how many have a shipped interval
    factors: dict[float, float]  # level -> conformal factor over all n
    held_out: dict[float, int]   # level -> workloads covered, factor held out by workload name
    unbounded: dict[float, int]  # level -> of those, covered by an infinite held-out factor
    given: dict[float, float]    # level -> conformal factor over the workloads with a number
    # over the workloads with a number and a measured search range (`summary`'s measured.search):
    # within 2x of every value in it, of some of it (not all), of none
    with_search: int = 0
    search_all: int = 0
    search_part: int = 0

    def to_dict(self) -> dict:
        """As plain JSON: levels as strings ("0.68"), an infinite factor or an undefined
        median as null."""
        def finite(x):
            return x if math.isfinite(x) else None

        return {**dataclasses.asdict(self), "median_ratio": finite(self.median_ratio),
                "factors": {f"{k:g}": finite(v) for k, v in self.factors.items()},
                "held_out": {f"{k:g}": v for k, v in self.held_out.items()},
                "unbounded": {f"{k:g}": v for k, v in self.unbounded.items()},
                "given": {f"{k:g}": finite(v) for k, v in self.given.items()}}


def workloads_of(entries: list[dict]) -> list[dict]:
    """The entries the record is taken over: every real workload (not the control) with a
    positive measured B_crit. ValueError, naming the entry, where an entry's measured B_crit
    or a predictor's field is malformed (a summary edited by hand or by another tool)."""
    for i, e in enumerate(entries):
        _check_entry(i, e)
    return [e for e in entries if e["workload"] != CONTROL
            and (e["measured"].get("b_crit") or 0) > 0]


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _check_entry(i: int, e: dict) -> None:
    where = f"summary entry {i} ({e.get('workload')!r})"
    measured = e.get("measured")
    if not isinstance(measured, dict):
        raise ValueError(f"{where}: measured must be an object with b_crit, got {measured!r}")
    for field in ("b_crit", "lo", "hi"):
        x = measured.get(field)
        if x is not None and not _is_number(x):
            raise ValueError(f"{where}: measured.{field} must be a finite number or null, "
                             f"got {x!r}")
    search = measured.get("search")
    if search is not None and not (isinstance(search, dict) and _is_number(search.get("lo"))
                                   and _is_number(search.get("hi"))
                                   and 0 < search["lo"] <= search["hi"]):
        raise ValueError(f"{where}: measured.search must be null or {{lo, hi}} with "
                         f"0 < lo <= hi, got {search!r}")
    for name, of in PREDICTORS.items():
        try:
            p = of(e)
        except (AttributeError, TypeError, KeyError):
            raise ValueError(f"{where}: the {name} field is missing or not an object") from None
        for field, x in (("value", p.value), ("lo", p.lo), ("hi", p.hi)):
            if x is not None and not _is_number(x) and not (field == "hi" and x == math.inf):
                raise ValueError(f"{where}: {name}'s {field} must be a finite number or null, "
                                 f"got {x!r}")


def track_record(entries: list[dict], levels: Sequence[float] = LEVELS) -> list[TrackRecord]:
    """Each predictor's `TrackRecord` over `workloads_of(entries)`, grouped for the held-out
    count by workload name (its optimizers and goals together)."""
    chosen = workloads_of(entries)
    if not chosen:
        raise ValueError("the summary has no real workload with a measured B_crit")
    groups = [e["workload"] for e in chosen]
    out = []
    for name, of in PREDICTORS.items():
        preds = [of(e) for e in chosen]
        measured = [e["measured"] for e in chosen]
        scores = [score(p, m["b_crit"]) for p, m in zip(preds, measured)]
        ratios = [p.value / m["b_crit"] for p, m in zip(preds, measured)
                  if p.value is not None and p.value > 0]
        shipped = [(p, m) for p, m in zip(preds, measured)
                   if p.value is not None and p.value > 0 and p.lo is not None
                   and p.hi is not None]
        held = {lv: held_out_coverage(scores, groups, lv) for lv in levels}
        across = [search_reach(p.value, m["search"]) for p, m in zip(preds, measured)
                  if p.value is not None and p.value > 0 and m.get("search")]
        out.append(TrackRecord(
            predictor=name, n=len(chosen), missing=len(chosen) - len(ratios),
            not_computed=sum(not p.computed for p in preds),
            median_ratio=float(np.median(ratios)) if ratios else math.nan,
            within_2x=sum(s <= math.log(2.0) for s in scores),
            inside=sum(p.lo <= m["b_crit"] <= p.hi for p, m in shipped),
            overlap=sum(m.get("lo") is not None and m.get("hi") is not None
                        and p.lo <= m["hi"] and m["lo"] <= p.hi for p, m in shipped),
            with_interval=len(shipped),
            factors={lv: conformal_factor(scores, lv) for lv in levels},
            held_out={lv: held[lv][0] for lv in levels},
            unbounded={lv: held[lv][1] for lv in levels},
            given={lv: conformal_factor([s for s in scores if math.isfinite(s)], lv)
                   for lv in levels},
            with_search=len(across), search_all=across.count("all"),
            search_part=across.count("part")))
    return out


def search_reach(value: float, search: dict) -> str:
    """Whether `value` is within 2x of every value in the measured search range `search`
    ({"lo", "hi"}, examples): 'all'; of some of it: 'part'; of none: 'none'."""
    lo, hi = search["lo"], search["hi"]
    if value / lo <= 2.0 and value / hi >= 0.5:
        return "all"
    return "part" if value / hi <= 2.0 and value / lo >= 0.5 else "none"


def record_factor(entries: list[dict], predictor: str, level: float = LEVELS[0],
                  without: str | None = None) -> tuple[float, int]:
    """The conformal factor of one predictor's record (over `workloads_of(entries)`, leaving
    out every entry of the workload named `without`: a shipped workload's own error bar is the
    one held out from it), and the number of entries it was taken over."""
    if predictor not in PREDICTORS:
        raise ValueError(f"predictor must be one of {', '.join(PREDICTORS)}, got {predictor!r}")
    chosen = [e for e in workloads_of(entries) if e["workload"] != without]
    scores = [score(PREDICTORS[predictor](e), e["measured"]["b_crit"]) for e in chosen]
    return conformal_factor(scores, level), len(chosen)


@dataclasses.dataclass(frozen=True)
class ErrorBar:
    """The error bar a track record puts on one prediction: `predictor` (a key of PREDICTORS)
    and its `value`, the 68% `factor` (inf with too few entries) and `lo` = value / factor ..
    `hi` = value x factor (the value's units); `entries`: how many of the summary's entries
    the factor was taken over, `held_out`: whether the prediction's own workload was among
    them and left out."""

    predictor: str
    value: float
    factor: float
    lo: float
    hi: float
    entries: int
    held_out: bool


def error_bar(entries: list[dict], predictor: str, value: float,
              workload: str | None = None) -> ErrorBar:
    """`record_factor` at 68% around `value`, without the entries of `workload` (a shipped
    workload's own error bar is the one held out from it)."""
    factor, n = record_factor(entries, predictor, without=workload)
    held = workload is not None and any(e.get("workload") == workload for e in entries)
    return ErrorBar(predictor, value, factor, value / factor, value * factor, n, held)


def bar_line(bar: ErrorBar, summary, caveat: str) -> str:
    """`bar` in words for the terminal, read from `summary`; `caveat` says what the
    prediction's own interval counts (the record's bar is wider)."""
    whose = (f"{bar.entries} other validated entries" if bar.held_out
             else f"{bar.entries} validated entries")
    if not bar.factor < math.inf:
        return (f"error bar from the track record of {bar.predictor} ({whose}, {summary}): "
                "too few entries with a number to bound it at 68%")
    return (f"error bar from the track record of {bar.predictor} ({whose}, {summary}; "
            f"python -m realnets track-record): {bar.lo:.4g} .. {bar.hi:.4g} "
            f"(x{bar.factor:.3g}, 68%); {caveat}")


def _num(x: float) -> str:
    return "inf" if x == math.inf else "-" if math.isnan(x) else f"{x:.3g}"


def track_record_table(records: list[TrackRecord]) -> str:
    """The records as the Markdown table of the docs."""
    levels = list(records[0].factors)
    head = ("| predictor | workloads (no number) | median predicted / measured | within 2x "
            "| measured inside the shipped 16-84% | intervals overlap | "
            + " | ".join(f"{lv:.0%} factor F | covered, F held out by network" for lv in levels)
            + " | F among those with a number (" + ", ".join(f"{lv:.0%}" for lv in levels)
            + ") |")
    head += " within 2x of the whole measured search range (of part of it) |"
    lines = [head, "|---" * (8 + 2 * len(levels)) + "|"]
    for r in records:
        cells = " | ".join(f"x{_num(r.factors[lv])} | {r.held_out[lv]} of {r.n}"
                           + (f" ({r.unbounded[lv]} by F = inf)" if r.unbounded[lv] else "")
                           for lv in levels)
        missing = f"{r.missing}" + (f"; {r.not_computed} not computed" if r.not_computed else "")
        lines.append(f"| {r.predictor} | {r.n} ({missing}) | {_num(r.median_ratio)} | "
                     f"{r.within_2x} of {r.n} | {r.inside} of {r.with_interval} | "
                     f"{r.overlap} of {r.with_interval} | {cells} | "
                     + ", ".join(f"x{_num(r.given[lv])}" for lv in levels)
                     + f" | {r.search_all} of {r.with_search} ({r.search_part}) |")
    return "\n".join(lines)

"""How close the NQM's tuner comes to the engine's grid search, on a report's headline curve
(docs/prediction_rule.md, session 37).

The tuned curve S_q(B) (`nqm.tuning.tune_curve`: a local search per batch size) is held against
the engine's grid search for the lowest loss in T steps (`nqm.lowest_loss`: a grid over the
space, then Nelder-Mead): from each tuned step count, walk down while the grid search still
reaches the target one step sooner (`nqm.lowest_loss.steps_below`). A point whose grid count
is lower was not tuned to the optimum (the grid search is not exhaustive either: a point it
does not improve is not certified). At B_ref the step-matched target is the grid search's own
lowest loss in S_ref steps, so there it lands at S_ref by construction (within
`nqm.lowest_loss.AT_TARGET`'s rounding) and a tuner one step later sits at a tie with the
target.

Rule 4 (the rule of record) uses the same S_q(B) between the network's two measured ends; where
a report has its two_ends.json and miss_split.json, `check_report` refits rule 4's B_crit with
the grid's steps in place of the tuned ones (`two_point_curve.bend`): the change a certified
tuner (`nqm.tuning.tune_curve(certify=True)`, which walks down with the same grid search) would
make to the rule of record.

`check_report` does one validation document; `python -m realnets tuning-check DIR ...` prints
`table` (nothing is written).
"""

from __future__ import annotations

import copy
import time

import numpy as np

from nqm.lowest_loss import steps_below
from nqm.scaling import fit_mccandlish
from realnets.validation.bootstrap import fitted_nqm
from realnets.validation.reconciliation import headline
from realnets.validation.settings import NQM_FAMILY
from realnets.validation.two_point_curve import bend
from realnets.validation.targets import nqm_optimizer, nqm_search_space
from realnets.workloads.search_space import TrialSearchSpace


def check_report(doc: dict, two_ends: dict | None = None, split: dict | None = None) -> dict:
    """The headline tuned curve of one validation document against the grid search.

    Args:
      doc: a validation.json as a dict.
      two_ends, split: the report's two_ends.json and miss_split.json (None: no rule 4).

    Returns {"workload", "optimizer", "points": [{"batch_size", "tuned" (S_q, steps), "grid"
    (steps_below's count)} per reached point], "short" (the points with grid < tuned),
    "b_crit": {"tuned", "grid"} (the McCandlish fit of each column over those points, examples
    per step), "rule_4": {"tuned", "grid"} (`two_point_curve.bend` with each column, its
    "value" and "ratio" to the measured B_crit; None without both records), "seconds"}.
    ValueError for a document without a tuned headline curve."""
    t0 = time.perf_counter()
    _, rule, record, prediction = headline(doc)
    if rule != "step_matched" or not prediction.get("tuned") or "nqm" not in record:
        raise ValueError(f"report of {doc['workload']!r}: no tuned step-matched headline curve "
                         "to check")
    sweep = doc["sweep_config"]
    space = nqm_search_space(TrialSearchSpace.from_dict(sweep["search"]))
    spec = nqm_optimizer(NQM_FAMILY[sweep["optimizer"]], space)
    problem = fitted_nqm(record["nqm"], prediction["target"]).problem()
    points = [{"batch_size": int(p["batch_size"]), "tuned": int(p["steps"]),
               "grid": steps_below(problem, spec, float(p["batch_size"]), int(p["steps"]),
                                     space)}
              for p in prediction["tuned"]["points"] if p.get("steps") is not None]
    sizes = np.array([p["batch_size"] for p in points], float)

    def b_crit(column):
        if len(points) < 2:
            return None
        return float(fit_mccandlish(sizes, np.array([p[column] for p in points], float)).b_crit)

    rule_4 = None
    if two_ends is not None and split is not None:
        gridded = copy.deepcopy(doc)
        grid_steps = {p["batch_size"]: p["grid"] for p in points}
        for p in headline(gridded)[3]["tuned"]["points"]:
            if p.get("steps") is not None:
                p["steps"] = grid_steps[int(p["batch_size"])]
        rule_4 = {"tuned": bend(two_ends, doc, split), "grid": bend(two_ends, gridded, split)}
    return {"workload": doc["workload"], "optimizer": sweep["optimizer"], "points": points,
            "short": [p for p in points if p["grid"] < p["tuned"]],
            "b_crit": {"tuned": b_crit("tuned"), "grid": b_crit("grid")}, "rule_4": rule_4,
            "seconds": time.perf_counter() - t0}


def table(records: list[dict], labels: list[str] | None = None) -> str:
    """Markdown: per report, the batch sizes checked, those where the tuner fell short (B: tuned
    -> grid steps), the largest relative shortfall, the fitted B_crit of both columns, and rule
    4's B_crit over the measured one with each column ('-': no rule 4)."""
    def g(x):
        return "-" if x is None else f"{x:.4g}"

    def ratio(rec, column):
        r4 = rec.get("rule_4")
        return "-" if r4 is None else g(r4[column]["ratio"])

    lines = ["| workload | optimizer | batch sizes checked | tuned above the grid search "
             "(B: tuned -> grid) | largest shortfall | fitted B_crit, tuned -> grid | "
             "rule 4 / measured, tuned -> grid |",
             "|---" * 7 + "|"]
    for rec, label in zip(records, labels or [r["workload"] for r in records]):
        short = "; ".join(f"{p['batch_size']}: {p['tuned']} -> {p['grid']}"
                          for p in rec["short"]) or "none"
        worst = max((1 - p["grid"] / p["tuned"] for p in rec["short"]), default=0.0)
        lines.append(f"| {label} | {rec['optimizer']} | {len(rec['points'])} | {short} | "
                     f"{100 * worst:.0f}% | {g(rec['b_crit']['tuned'])} -> "
                     f"{g(rec['b_crit']['grid'])} | {ratio(rec, 'tuned')} -> "
                     f"{ratio(rec, 'grid')} |")
    return "\n".join(lines)

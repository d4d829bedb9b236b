"""The two-point estimate's whole curve in absolute steps, against the measured ones
(docs/prediction_rule.md, session 36).

B_2pt' fixes the McCandlish form through its two measured ends, so it implies steps at every
batch size:

    S_2pt(B) = S_fb^N (1 + B_2pt' / B) = S_fb^N + (S~_ref - S_fb^N) B_ref / B     (steps)

with S~_ref the reruns' median at B_ref (its 16th and 84th percentiles give the band); the
median-end curve ("two_point_med", B_2pt'(med)'s: docs/prediction_rule.md, session 42) has the
median full-batch end over initialisations in place of S_fb^N. `steps` is
that curve (the McCandlish form of `realnets.planning.plan.TwoPointCurve`, which `plan
--steps-from two-point` uses); `check` compares it, and rule 1's tuned NQM curve,
with a report's measured steps: the reruns' median at each batch size (what one run of the
winning configuration typically needs) and the sweep's best of its trials, as the factor
`max(S_pred / S, S / S_pred)` (>= 1) at every batch size that reached the goal.

`bend` is the diagnostic of docs/prediction_rule.md (session 36, later): the two measured ends
with rule 1's NQM's bend between them,

    S_4(B) = S_fb^N + (S~_ref - S_fb^N) (S_q(B) - n_q) / (S_q(B_ref) - n_q),

(S_q the tuned NQM's steps, n_q its steps without noise, from the report's miss_split.json),
whose B_crit is B_2pt' exactly where the NQM's noise penalty falls as 1/B.
"""

from __future__ import annotations

import math

from nqm.scaling import fit_mccandlish
from realnets.planning.plan import TwoPointCurve
from realnets.validation.reconciliation import headline

CURVES = ("two_point", "two_point_med", "rule_1")
AGAINST = ("reruns", "sweep")


def steps(b_ref: float, s_fb: float, s_ref: float, batch_sizes) -> list[float]:
    """S_2pt(B) at each batch size (steps): the hyperbola through (B_ref, s_ref) whose limit at an
    unlimited batch is s_fb. Requires s_ref > s_fb > 0 (ValueError otherwise)."""
    if not (s_fb > 0 and s_ref > s_fb):
        raise ValueError(f"two-point curve: needs S~_ref > S_fb^N > 0, got S~_ref = {s_ref}, "
                         f"S_fb^N = {s_fb}")
    fit = TwoPointCurve(int(b_ref), float(s_fb), float(s_ref), None, None, 0).fit(s_ref)
    return [float(x) for x in fit.predict(list(batch_sizes))]


def ends(record: dict) -> tuple[int, int | None, dict]:
    """(B_ref, S_fb^N or None, the reruns' percentiles {"16", "50", "84"}) of a two_ends.json or
    two_point.json record (both hold `two_ends.both_ends`'s fields)."""
    return (int(record["b_ref"]), record["full_set"]["steps"],
            record["reruns"]["percentiles"])


def factor(predicted: float | None, measured: float | None) -> float | None:
    """max(p / m, m / p), None where either is unknown or not positive."""
    if predicted is None or measured is None or predicted <= 0 or measured <= 0:
        return None
    return max(predicted / measured, measured / predicted)


def _worst(rows: list[dict], curve: str, against: str) -> dict:
    pairs = [(r[f"{curve}_vs_{against}"], r["batch_size"]) for r in rows
             if r[f"{curve}_vs_{against}"] is not None]
    if not pairs:
        return {"factor": None, "batch_size": None, "within_2x": None, "compared": 0}
    worst = max(pairs)
    return {"factor": worst[0], "batch_size": worst[1], "within_2x": worst[0] <= 2.0,
            "compared": len(pairs)}


def check(two_ends: dict, doc: dict, split: dict | None = None) -> dict:
    """The comparison for one report: `two_ends` its two_ends.json, `doc` its validation.json as a
    dict. Returns {"workload", "optimizer", "b_ref", "s_fb", "s_fb_median" (the median end over
    initialisations, None without `full_batch_inits`), "rows": [{"batch_size", "sweep",
    "reruns", "two_point", "two_point_lo", "two_point_hi", "two_point_med", "rule_1",
    "<curve>_vs_<against>",
    "in_band"}], "worst": {"<curve>_vs_<against>": {"factor", "batch_size", "within_2x",
    "compared"}}, "in_band": [inside, compared], "note", "bend": `bend(two_ends, doc, split)`}.
    Steps are None where not reached
    (a batch size the sweep or its reruns did not take to the goal is not compared); without
    S_fb^N, or with S~_ref not above it, the two-point curve is None throughout (said in
    "note")."""
    b_ref, s_fb, pct = ends(two_ends)
    measured = doc["measured"]
    batch_sizes = [int(p["batch_size"]) for p in measured["points"]]
    sweep = [p["steps"] for p in measured["points"]]
    repeats = measured.get("repeats") or {}
    reruns = repeats.get("rerun_median_steps") or [None] * len(batch_sizes)
    reruns = [None if s is None or not math.isfinite(s) else s for s in reruns]
    _, _, _, prediction = headline(doc)
    nqm = {int(p["batch_size"]): p["steps"] for p in
           ((prediction.get("tuned") or {}).get("points") or []) if p.get("reached", True)}

    s_med = ((two_ends.get("full_batch_inits") or {}).get("percentiles") or {}).get("50")

    def curve(q, floor=s_fb):
        s = pct.get(q)
        if floor is None or s is None or not math.isfinite(s) or s <= floor:
            return [None] * len(batch_sizes)
        return steps(b_ref, floor, s, batch_sizes)

    mid, lo, hi = curve("50"), curve("16"), curve("84")
    med = curve("50", s_med)
    rows = []
    for i, b in enumerate(batch_sizes):
        row = {"batch_size": b, "sweep": sweep[i], "reruns": reruns[i], "two_point": mid[i],
               "two_point_lo": lo[i], "two_point_hi": hi[i], "two_point_med": med[i],
               "rule_1": nqm.get(b)}
        for c in CURVES:
            for a in AGAINST:
                row[f"{c}_vs_{a}"] = factor(row[c], row[a])
        row["in_band"] = (None if None in (lo[i], hi[i], reruns[i])
                          else lo[i] <= reruns[i] <= hi[i])
        rows.append(row)
    band = [r["in_band"] for r in rows if r["in_band"] is not None]
    note = ("" if mid[0] is not None else
            "no two-point curve: S_fb^N not measured, or S~_ref not above it")
    return {"workload": two_ends.get("workload", doc.get("workload")),
            "optimizer": two_ends.get("optimizer"), "b_ref": b_ref, "s_fb": s_fb,
            "s_fb_median": s_med, "rows": rows,
            "worst": {f"{c}_vs_{a}": _worst(rows, c, a) for c in CURVES for a in AGAINST},
            "in_band": [sum(band), len(band)], "note": note, "bend": bend(two_ends, doc, split)}


def bend(two_ends: dict, doc: dict, split: dict | None) -> dict:
    """S_4's B_crit (module docstring) for one report: {"value", "lo", "hi" (S~_ref at the
    reruns' median, 16th and 84th percentiles; examples per step), "b_2pt" (B_2pt' at the
    median), "over_b_2pt", "measured", "ratio" (value / measured), "batch_sizes" (those
    fitted), "why" (None, or why there is no value)}. `split` is the report's miss_split.json
    (its n_q), None without one."""
    b_ref, s_fb, pct = ends(two_ends)
    measured = doc["measured"]
    m = (measured.get("fit") or {}).get("b_crit")
    out = {"value": None, "lo": None, "hi": None,
           "b_2pt": (two_ends.get("two_point") or {}).get("50"),
           "over_b_2pt": None, "measured": m, "ratio": None, "batch_sizes": [], "why": None}
    _, _, _, prediction = headline(doc)
    s_q = {int(p["batch_size"]): p["steps"] for p in
           ((prediction.get("tuned") or {}).get("points") or [])
           if p.get("reached", True) and p["steps"] is not None}
    n_q = None if split is None else split.get("n_q")
    if n_q is None or s_fb is None:
        out["why"] = "no miss_split.json with n_q, or no S_fb^N"
        return out
    if s_q.get(b_ref) is None or s_q[b_ref] <= n_q:
        out["why"] = "S_q(B_ref) <= n_q, or not reached: the NQM has no noise penalty at B_ref"
        return out
    sizes = [int(p["batch_size"]) for p in measured["points"]
             if p["steps"] is not None and int(p["batch_size"]) in s_q]
    out["batch_sizes"] = sizes

    def b_crit(q):
        s_ref = pct.get(q)
        if s_ref is None or not math.isfinite(s_ref) or s_ref <= s_fb or len(sizes) < 2:
            return None
        # the penalty is not negative: n_q <= S_q(B) holds by construction for SGD and momentum
        # (miss_split.nqm_ends), not for mean-field Adam, whose preconditioner sees the noise
        shape = [max(0.0, (s_q[b] - n_q) / (s_q[b_ref] - n_q)) for b in sizes]
        steps = [s_fb + (s_ref - s_fb) * g for g in shape]
        return fit_mccandlish(sizes, steps).b_crit

    out.update(value=b_crit("50"), lo=b_crit("16"), hi=b_crit("84"))
    if out["value"] is None:
        out["why"] = "S~_ref not above S_fb^N, or fewer than two batch sizes"
    else:
        if out["b_2pt"]:
            out["over_b_2pt"] = out["value"] / out["b_2pt"]
        if m:
            out["ratio"] = out["value"] / m
    return out


def table(records: list[dict], labels: list[str]) -> str:
    """Markdown: per report, the largest factor of each curve against the reruns' median and the
    sweep's steps (at which batch size), and how many reruns' medians lie in the band."""
    def cell(w):
        return "-" if w["factor"] is None else f"{w['factor']:.3g} (B = {w['batch_size']})"

    lines = ["| workload | optimizer | B_ref | S_fb^N | two-point vs reruns' median "
             "(worst, at) | two-point vs sweep | rule 1 vs reruns' median | rule 1 vs sweep "
             "| reruns' median in the 16-84% band |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, r in zip(labels, records):
        w = r["worst"]
        lines.append(f"| {label} | {r['optimizer']} | {r['b_ref']} | {r['s_fb']} | "
                     f"{cell(w['two_point_vs_reruns'])} | {cell(w['two_point_vs_sweep'])} | "
                     f"{cell(w['rule_1_vs_reruns'])} | {cell(w['rule_1_vs_sweep'])} | "
                     f"{r['in_band'][0]} of {r['in_band'][1]} |")
    lines += ["", "The curve with the median full-batch end over initialisations (B_2pt'(med)'s; "
              "docs/prediction_rule.md, session 42):", "",
              "| workload | optimizer | S_fb^N | median end | best-end curve vs reruns' median "
              "(worst, at) | median-end curve vs reruns' median | median-end curve vs sweep |",
              "|---|---|---|---|---|---|---|"]
    for label, r in zip(labels, records):
        w = r["worst"]
        lines.append(f"| {label} | {r['optimizer']} | {r['s_fb']} | {_g(r['s_fb_median'])} | "
                     f"{cell(w['two_point_vs_reruns'])} | "
                     f"{cell(w['two_point_med_vs_reruns'])} | "
                     f"{cell(w['two_point_med_vs_sweep'])} |")
    within = {c: [w["within_2x"] for w in (r["worst"][f"{c}_vs_reruns"] for r in records
                                           if r["workload"] != "nqm")]
              for c in ("two_point", "two_point_med")}
    lines += ["", "Within 2x of the reruns' median at every batch size compared, real workloads: "
              f"best-end curve {sum(x is True for x in within['two_point'])} of "
              f"{sum(x is not None for x in within['two_point'])}, median-end curve "
              f"{sum(x is True for x in within['two_point_med'])} of "
              f"{sum(x is not None for x in within['two_point_med'])}."]
    lines += ["", "The two ends with the NQM's bend (S_4; docs/prediction_rule.md, session 36, "
              "later):", "",
              "| workload | optimizer | S_4's B_crit (16-84%) | / measured | B_2pt' | "
              "S_4 / B_2pt' |", "|---|---|---|---|---|---|"]
    for label, r in zip(labels, records):
        b = r["bend"]
        if b["value"] is None:
            lines.append(f"| {label} | {r['optimizer']} | - ({b['why']}) | - | "
                         f"{_g(b['b_2pt'])} | - |")
            continue
        lines.append(f"| {label} | {r['optimizer']} | {_g(b['value'])} ({_g(b['lo'])} .. "
                     f"{_g(b['hi'])}) | {_g(b['ratio'])} | {_g(b['b_2pt'])} | "
                     f"{_g(b['over_b_2pt'])} |")
    return "\n".join(lines)


def _g(x: float | None) -> str:
    return "?" if x is None else f"{x:.3g}"

"""Charts of a validation document: the reconciliation (measured against predicted S(B) with every
B_crit estimate marked), steps to goal of every NQM variant with the noise scales, and the fitted
spectrum at each checkpoint (Altair), and their export beside report.md."""

from __future__ import annotations

from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from nqm.scaling import Fit
from realnets.calibration.power_tail import tail_curvature
from realnets.validation.comparison import target_rules
from realnets.validation.reconciliation import reconciliation_curves, reconciliation_marks
from realnets.validation.report import (PATH_CHART, RECONCILIATION_CHART, SPECTRUM_CHART,
                                        STEPS_CHART)
from realnets.validation.settings import TARGET_LABELS
from ui.charts import LOG2, LOG10, chart_bytes, series_colours, steps_chart

# Marks further than this factor outside the curves' batch sizes are left off the chart (the
# table has them): one far-off noise scale would squeeze both curves into a corner.
MARK_RANGE = 16.0
# Colours of the other marks (B_simple, B_noise, local CBS): dark2 without its orange, which is
# the predicted curve's.
MARK_COLOURS = ["#7570b3", "#1b9e77", "#e7298a", "#66a61e", "#a6761d", "#666666", "#e6ab02"]
from ui.measured import perfect_scaling


def _curve_rows(label: str, summary: dict) -> list[dict]:
    fit = summary["fit"]
    f = Fit(fit["s_min"], fit["b_crit"], fit["r2"], 0)
    points = summary["points"]
    batch = np.array([p["batch_size"] for p in points], float)
    steps = np.array([np.nan if p["steps"] is None else float(p["steps"]) for p in points])
    perfect = perfect_scaling(batch, steps)
    fitted = f.predict(batch)
    return [{"curve": label, "batch_size": p["batch_size"], "steps": steps[i],
             "learning_rate": p.get("learning_rate"), "momentum": p.get("momentum"),
             "regime": "", "perfect": perfect[i], "fit": float(fitted[i])}
            for i, p in enumerate(points)]


def curves_tables(doc: dict, checkpoint: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(points, summary) for `ui.charts.steps_chart`: the measured curve and the calibrated
    NQM's curves at `checkpoint` (default: the headline, the first one), plus the reference NQM
    when the document has one."""
    checkpoint = checkpoint or doc["settings"]["checkpoints"][0]
    series = [(f"measured ({doc['workload']})", doc["measured"])]
    preds = (doc["checkpoints"].get(checkpoint) or {}).get("predictions") or {}
    for rule in target_rules(doc):
        pred = preds.get(rule) or {}
        tag = f"{checkpoint}, {TARGET_LABELS[rule]}"
        if pred.get("tuned"):
            series.append((f"calibrated NQM, tuned {pred['family']} ({tag})", pred["tuned"]))
        if pred.get("search_matched"):
            series.append((f"calibrated NQM, the sweep's trials ({tag})", pred["search_matched"]))
    ref = doc.get("reference") or {}
    if ref.get("tuned"):
        series.append(("the workload's own NQM, tuned", ref["tuned"]))
    points, summary = [], []
    for label, s in series:
        points += _curve_rows(label, s)
        summary.append({"curve": label, "b_crit": s["fit"]["b_crit"],
                        "cbs20": s["regimes"]["cbs20"], "maximal_from": s["regimes"]["maximal_from"]})
    points = pd.DataFrame(points)
    for col in ("learning_rate", "momentum"):
        points[col] = pd.to_numeric(points[col], errors="coerce").astype(float)
    summary = pd.DataFrame(summary)
    for col in ("b_crit", "cbs20", "maximal_from"):
        summary[col] = pd.to_numeric(summary[col], errors="coerce").astype(float)
    return points, summary


def noise_marks(doc: dict, checkpoint: str | None = None) -> pd.DataFrame:
    """Vertical marks: B_noise and B_simple at the checkpoint and the sweep's pooled B_simple."""
    checkpoint = checkpoint or doc["settings"]["checkpoints"][0]
    rows = []
    for r in doc["comparison"]:
        if r["value"] is None or not r["quantity"].startswith("B_"):
            continue
        if r["checkpoint"] not in (None, checkpoint):
            continue
        label = r["quantity"].split(" =")[0] + (f" ({r['checkpoint']})" if r["checkpoint"] else "")
        rows.append({"batch_size": float(r["value"]), "estimate": label})
    return pd.DataFrame(rows, columns=["batch_size", "estimate"])


def steps_figure(doc: dict, checkpoint: str | None = None):
    """Steps to goal vs batch size, measured beside the calibrated NQM (log-log), with each
    curve's B_crit (fit), cbs20 and maximal-parallelism rules, and the noise scales (grey)."""
    points, summary = curves_tables(doc, checkpoint)
    chart = steps_chart(points, None, summary, series="curve")
    marks = noise_marks(doc, checkpoint)
    lo, hi = points["batch_size"].min() / 4, points["batch_size"].max() * 4
    marks = marks[(marks["batch_size"] >= lo) & (marks["batch_size"] <= hi)]
    if len(marks):
        rules = alt.Chart(marks).mark_rule(color="grey", strokeWidth=2, opacity=0.7).encode(
            x=alt.X("batch_size:Q", scale=LOG2),
            tooltip=["estimate", "batch_size"])
        labels = alt.Chart(marks).mark_text(angle=270, align="left", dx=4, dy=-4, fontSize=10,
                                            color="dimgrey").encode(
            x=alt.X("batch_size:Q", scale=LOG2),
            y=alt.value(4), text="estimate:N")
        chart = alt.layer(chart, rules, labels)
    return chart.properties(title=f"{doc['workload']}: steps to goal, measured and predicted "
                                  "(grey: noise scales)")


def reconciliation_tables(doc: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curves, marks) of the reconciliation chart (`realnets.validation.reconciliation`), the
    marks limited to MARK_RANGE around the curves' batch sizes, those of no curve at one batch
    size merged into one (their names joined by '; ')."""
    curves = pd.DataFrame(reconciliation_curves(doc), columns=["curve", "batch_size", "steps"])
    marks = pd.DataFrame(reconciliation_marks(doc),
                         columns=["estimate", "curve", "batch_size", "lo", "hi"])
    for col in ("batch_size", "lo", "hi"):
        marks[col] = pd.to_numeric(marks[col], errors="coerce").astype(float)
    if len(curves):
        lo, hi = curves["batch_size"].min() / MARK_RANGE, curves["batch_size"].max() * MARK_RANGE
        marks = marks[(marks["batch_size"] >= lo) & (marks["batch_size"] <= hi)]
        marks = marks.assign(lo=marks["lo"].clip(lower=lo), hi=marks["hi"].clip(upper=hi))
    # marks at the same batch size without a curve (often two branch points' local CBS) share
    # one rule and one legend entry
    own, others = marks[marks["curve"].notna()], marks[marks["curve"].isna()]
    others = others.groupby("batch_size", as_index=False, sort=False).agg(
        estimate=("estimate", "; ".join), curve=("curve", "first"), lo=("lo", "first"),
        hi=("hi", "first"))
    return curves, pd.concat([own, others[marks.columns]], ignore_index=True)


def reconciliation_figure(doc: dict):
    """Predicted S(B) (the headline NQM's tuned curve) against the measured one in absolute steps,
    log-log; rules at the measured B_crit and the NQM's (in their curves' colours, with their
    16-84% bands), and at B_simple, B_noise and each local CBS (one colour each)."""
    curves, marks = reconciliation_tables(doc)
    labels = list(dict.fromkeys(curves["curve"]))
    colours = series_colours(labels)
    x = alt.X("batch_size:Q", scale=LOG2, title="batch size B")
    colour = alt.Color("curve:N", title="curve", scale=colours,
                       legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=800))
    layers = [alt.Chart(curves).mark_line(point=True).encode(
        x=x, y=alt.Y("steps:Q", scale=LOG10, title="steps to goal"), color=colour,
        tooltip=["curve", "batch_size", "steps"])]
    own = marks[marks["curve"].notna()]
    band = own.dropna(subset=["lo", "hi"])
    if len(band):
        layers.append(alt.Chart(band).mark_rect(opacity=0.12).encode(
            x=alt.X("lo:Q", scale=LOG2), x2="hi:Q",
            color=alt.Color("curve:N", scale=colours, legend=None),
            tooltip=["estimate", "lo", "hi"]))
    if len(own):
        layers.append(alt.Chart(own).mark_rule(strokeWidth=2, strokeDash=[6, 3]).encode(
            x=alt.X("batch_size:Q", scale=LOG2),
            color=alt.Color("curve:N", scale=colours, legend=None),
            tooltip=["estimate", "batch_size", "lo", "hi"]))
    chart = alt.layer(*layers)
    others = marks[marks["curve"].isna()]
    if len(others):
        rules = alt.Chart(others).mark_rule(strokeWidth=2, opacity=0.8).encode(
            x=alt.X("batch_size:Q", scale=LOG2),
            color=alt.Color("estimate:N", title="estimate",
                            scale=alt.Scale(domain=list(dict.fromkeys(others["estimate"])),
                                            range=MARK_COLOURS),
                            legend=alt.Legend(orient="bottom", direction="vertical",
                                              labelLimit=800)),
            tooltip=["estimate", "batch_size"])
        chart = alt.layer(chart, rules).resolve_scale(color="independent")
    return chart.properties(height=380, title=f"{doc['workload']}: predicted and measured steps "
                                              "to goal, and every estimate of B_crit")


def spectrum_table(record: dict) -> pd.DataFrame:
    """Per direction: index i, curvature h_i (top-k, the tail's power law, the SLQ points) and
    noise c_i (top-k, the tail's c = ratio * h)."""
    nqm = record["nqm"]
    top = nqm["top"]
    h = top["curvature"]["value"]
    h_err = top["curvature"]["uncertainty"] or [None] * len(h)
    c = top["noise_variance"]["value"]
    c_err = top["noise_variance"]["uncertainty"] or [None] * len(c)
    rows = []
    for i, (hv, he, cv, ce) in enumerate(zip(h, h_err, c, c_err), start=1):
        rows.append({"index": i, "value": hv, "lo": hv - (he or 0), "hi": hv + (he or 0),
                     "series": "curvature h_i (Lanczos, ± residual)"})
        rows.append({"index": i, "value": cv, "lo": cv - 2 * (ce or 0), "hi": cv + 2 * (ce or 0),
                     "series": "noise c_i (± 2 s.e.)"})
    tail = nqm.get("tail")
    if tail:
        k, h_k, a = tail["anchor_index"], tail["anchor_curvature"], tail["exponent"]["value"]
        d = tail["dim"]["value"]
        rho = tail["noise_ratio"]["value"]
        for i in np.unique(np.geomspace(k, max(d, k + 1), 40).astype(int)):
            hv = float(tail_curvature(i, k, h_k, a))
            rows.append({"index": int(i), "value": hv, "lo": hv, "hi": hv,
                         "series": f"tail h_i = h_k (i/k)^-{a:.3g}"})
            rows.append({"index": int(i), "value": rho * hv, "lo": rho * hv, "hi": rho * hv,
                         "series": f"tail c_i = {rho:.3g} h_i"})
        pts = tail["points"]
        for t, idx in zip(pts["curvature"], pts["index"]):
            rows.append({"index": idx, "value": t, "lo": t, "hi": t,
                         "series": "SLQ counting function (N(t) + 1/2, t)"})
    return pd.DataFrame(rows)


def spectrum_figure(record: dict, title: str):
    """Curvature and noise per direction, log-log: measured top-k with error bars, the fitted
    tail, and the SLQ points it was fitted to."""
    data = spectrum_table(record)
    data = data[(data["value"] > 0)]
    data = data.assign(lo=data["lo"].clip(lower=data["value"] * 1e-3))
    x = alt.X("index:Q", scale=LOG10, title="direction i (by curvature)")
    color = alt.Color("series:N", title="", legend=alt.Legend(orient="bottom", direction="vertical",
                                                             labelLimit=600))
    measured = data[~data["series"].str.startswith(("tail", "SLQ"))]
    lines = data[data["series"].str.startswith("tail")]
    slq = data[data["series"].str.startswith("SLQ")]
    layers = [alt.Chart(measured).mark_point(filled=True, size=30).encode(
                  x=x, y=alt.Y("value:Q", scale=LOG10, title="curvature h (loss/param²) | noise c"),
                  color=color, tooltip=["series", "index", "value"]),
              alt.Chart(measured).mark_rule().encode(x=x, y="lo:Q", y2="hi:Q", color=color)]
    if len(lines):
        layers.append(alt.Chart(lines).mark_line(strokeDash=[5, 3]).encode(
            x=x, y="value:Q", color=color))
    if len(slq):
        layers.append(alt.Chart(slq).mark_point(shape="cross", size=25).encode(
            x=x, y="value:Q", color=color, tooltip=["series", "index", "value"]))
    return alt.layer(*layers).properties(height=360, title=title)


def path_table(path: dict) -> pd.DataFrame:
    """The quadratic path's descents as rows {B, run ('network' | 'its quadratic'), step, loss}
    (the kept losses; a non-finite loss left out)."""
    rows = []
    for p in path["points"]:
        for key, run in (("network", "network"), ("quadratic", "its quadratic")):
            rows += [{"B": p["batch_size"], "run": run, "step": t, "loss": loss}
                     for t, loss in enumerate(p[key]["losses"]) if loss is not None]
    return pd.DataFrame(rows, columns=["B", "run", "step", "loss"])


def path_figure(doc: dict):
    """Loss against step of the network (solid) and its quadratic at the goal (dashed), one
    colour per batch size whose NQM metaparameters they use, with the target as a rule;
    the loss axis clipped to [min(0, lowest), the network's first loss x 1.5] so that a
    spike does not flatten the rest."""
    path = doc["transfer"]["quadratic_path"]
    data = path_table(path)
    top = 1.5 * float(path["loss_init"])
    data = data.assign(measured=data["loss"], loss=data["loss"].clip(upper=top))
    y = alt.Y("loss:Q", title="training loss on the calibration sample",
              scale=alt.Scale(domain=[min(0.0, float(data["loss"].min())), top]))
    lines = alt.Chart(data).mark_line(point=alt.OverlayMarkDef(size=12)).encode(
        x=alt.X("step:Q", title="step (full batch)"), y=y,
        color=alt.Color("B:O", title="NQM's metaparameters at B",
                        scale=alt.Scale(scheme="tableau10"),
                        legend=alt.Legend(symbolType="stroke")),
        strokeDash=alt.StrokeDash("run:N", sort=["network", "its quadratic"], legend=None),
        tooltip=["B", "run", "step", alt.Tooltip("measured:Q", title="loss")])
    rule = alt.Chart(pd.DataFrame({"loss": [path["target"]]})).mark_rule(
        color="#666666").encode(y="loss:Q")
    return alt.layer(lines, rule).properties(
        height=320, title=alt.Title(
            f"{doc['workload']}: the network (solid) and its quadratic at the goal (dashed)",
            subtitle="from the same start, full batch; grey rule: the target; losses above "
                     "1.5x the first drawn at that height"))


def export(chart, out_dir: Path, stem: str) -> dict:
    """Writes stem.png and stem.svg; returns {"png": name, "svg": name}."""
    names = {}
    for fmt in ("png", "svg"):
        name = f"{stem}.{fmt}"
        (Path(out_dir) / name).write_bytes(chart_bytes(chart, fmt, scale=1.0))
        names[fmt] = name
    return names


def export_charts(out_dir: Path, doc: dict) -> dict:
    """The report's charts (reconciliation, steps, the spectrum at each fitted checkpoint, and the
    quadratic path where it took a batch size apart) as PNG + SVG into
    `out_dir`; returns {stem: {"png": name, "svg": name}} for `report.write_report`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    charts = {RECONCILIATION_CHART: export(reconciliation_figure(doc), out_dir,
                                           RECONCILIATION_CHART),
              STEPS_CHART: export(steps_figure(doc), out_dir, STEPS_CHART)}
    for name in doc["settings"]["checkpoints"]:
        record = doc["checkpoints"].get(name)
        if record and record.get("nqm"):
            stem = SPECTRUM_CHART.format(name)
            charts[stem] = export(spectrum_figure(
                record, f"{doc['workload']}: Hessian spectrum and gradient noise at {name}"),
                out_dir, stem)
    if ((doc.get("transfer") or {}).get("quadratic_path") or {}).get("points"):
        charts[PATH_CHART] = export(path_figure(doc), out_dir, PATH_CHART)
    return charts

"""Altair charts of the app's tables: the explorer's (`ui.explorer`: steps vs batch size, tuned
rates, noise scale) and the measured curves' (`ui.measured`, `ui.prediction`: the same steps
chart with an NQM prediction beside it, the trials behind each point, the measured noise scale).
Functions of DataFrames only; nothing here computes the model. Series are coloured by
`series_colours`; `on_page` sizes a chart for the app's page and `chart_bytes` turns any of them
into a PNG or SVG file (vl-convert, no browser)."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from ui.measured import decayed

LOG2 = alt.Scale(type="log", base=2)
LOG10 = alt.Scale(type="log")

# Streamlit draws a chart that names no autosize with autosize "fit": legend, title and labels are
# squeezed into the chart's height together with the plot, which left the calibrated-NQM chart
# (a five-line legend, a title, rotated labels) a plot area 0 px high and every curve on one flat
# line. "fit-x" fits only the width to the page: the plot keeps its height and the chart grows
# around it, as in the exported files (vl-convert's default, "pad").
PAGE_AUTOSIZE = {"type": "fit-x", "contains": "padding"}


def on_page(chart: alt.TopLevelMixin | dict) -> alt.TopLevelMixin | dict:
    """`chart` (an Altair chart or its Vega-Lite spec) as the app draws it at the page's width
    (`PAGE_AUTOSIZE`); only a top-level chart takes it, so apply it where the chart is drawn."""
    if isinstance(chart, dict):
        return {**chart, "autosize": PAGE_AUTOSIZE}
    return chart.properties(autosize=alt.AutoSizeParams(**PAGE_AUTOSIZE))


def series_colours(values) -> alt.Scale:
    """One colour per series, of clearly different hues (d3's category10: blue, orange, green,
    red, purple, ...), given in the order the series first appear in `values`: the measured
    curve, which comes first, is blue and the NQM's are not. Explicit, so that Streamlit's theme
    (whose first two colours are two blues) does not choose them."""
    return alt.Scale(scheme="category10", domain=list(dict.fromkeys(values)))


def steps_chart(points: pd.DataFrame, lower_bound: pd.DataFrame | None,
                summary: pd.DataFrame, series: str = "optimizer") -> alt.LayerChart:
    """Steps to target vs batch size (log-log), one line per `series` value (an optimizer, or a
    measured / predicted curve), with each line's perfect-scaling line (dashed), its fit
    S_min (1 + B_crit / B) (dotted, when `points` has a `fit` column), the median steps of the
    winners' reruns under other seeds (hollow diamonds, where `points` has a `reruns_median`
    column with values), the estimator lower bound (grey; skipped when None) and rules at B_crit
    (fit), cbs20 and the start of maximal data parallelism (from `summary`, one row per
    series)."""
    reached = points[np.isfinite(points["steps"])]
    # Curve labels are long (they say what was scaled): put that legend below the chart.
    legend = (alt.Undefined if series == "optimizer"
              else alt.Legend(orient="bottom", direction="vertical", labelLimit=800))
    colours = series_colours(list(points[series]) + list(summary[series]))
    base = alt.Chart(reached).encode(
        x=alt.X("batch_size:Q", scale=LOG2, title="batch size B"),
        color=alt.Color(f"{series}:N", title=series, legend=legend, scale=colours))
    tooltip = [series, "batch_size", "steps", "learning_rate", "momentum", "regime"]
    if "final_lr_fraction" in reached and reached["final_lr_fraction"].notna().any():
        # a linear decay's final rate as a fraction of its first (empty for constant rates)
        tooltip.append(alt.Tooltip("final_lr_fraction:Q", title="final rate fraction f"))
    lines = base.mark_line(point=True).encode(
        y=alt.Y("steps:Q", scale=LOG10, title="steps to target"), tooltip=tooltip)
    perfect = base.mark_line(strokeDash=[4, 4], opacity=0.5).encode(y="perfect:Q")
    layers = [lines, perfect]
    if "fit" in points:
        layers.append(base.mark_line(strokeDash=[1, 3], opacity=0.8).encode(
            y="fit:Q", tooltip=[series, "batch_size", alt.Tooltip("fit:Q", title="fit")]))
    if "reruns_median" in points and np.isfinite(points["reruns_median"]).any():
        reruns = points[np.isfinite(points["reruns_median"])]
        layers.append(alt.Chart(reruns).mark_point(shape="diamond", filled=False, size=70).encode(
            x=alt.X("batch_size:Q", scale=LOG2), y=alt.Y("reruns_median:Q", scale=LOG10),
            color=alt.Color(f"{series}:N", scale=colours),
            tooltip=[series, "batch_size", alt.Tooltip(
                "reruns_median:Q", title="median steps of the winner's reruns")]))
    if lower_bound is not None:
        layers.append(alt.Chart(lower_bound).mark_line(color="grey", strokeDash=[2, 2]).encode(
            x=alt.X("batch_size:Q", scale=LOG2), y=alt.Y("steps:Q", scale=LOG10),
            tooltip=[alt.Tooltip("steps:Q", title="lower bound")]))
    marks = []
    for _, row in summary.iterrows():
        for key, name in (("b_crit", "B_crit (fit)"), ("cbs20", "cbs20"),
                          ("maximal_from", "maximal from")):
            value = row[key]
            if value is not None and np.isfinite(value):
                marks.append({series: row[series], "batch_size": float(value), "marker": name})
    if marks:
        rules = alt.Chart(pd.DataFrame(marks)).mark_rule(opacity=0.6).encode(
            x=alt.X("batch_size:Q", scale=LOG2), color=alt.Color(f"{series}:N", scale=colours),
            strokeDash=alt.StrokeDash("marker:N", title="marker"),
            tooltip=[series, "marker", "batch_size"])
        layers.append(rules)
    return alt.layer(*layers).properties(height=380)


def rate_chart(points: pd.DataFrame) -> alt.Chart:
    """Tuned learning rate (solid) and effective rate a / (1 - b) (dashed) vs batch size."""
    reached = points[np.isfinite(points["steps"])]
    long = pd.concat([
        reached.assign(kind="learning rate a", value=reached["learning_rate"]),
        reached.assign(kind="effective a / (1 - b)", value=reached["effective_lr"]),
    ])
    return alt.Chart(long).mark_line(point=True).encode(
        x=alt.X("batch_size:Q", scale=LOG2, title="batch size B"),
        y=alt.Y("value:Q", scale=LOG10, title="tuned rate"),
        color=alt.Color("optimizer:N", scale=series_colours(points["optimizer"])),
        strokeDash=alt.StrokeDash("kind:N", title=""),
        tooltip=["optimizer", "batch_size", "kind", "value"]).properties(height=260)


def noise_chart(trajectory: pd.DataFrame) -> alt.Chart:
    """B_simple and B_noise along a trajectory (log step axis)."""
    long = trajectory.melt(id_vars=["step", "loss"], value_vars=["b_simple", "b_noise"],
                           var_name="estimate", value_name="noise scale")
    long = long[long["step"] > 0]
    return alt.Chart(long).mark_line().encode(
        x=alt.X("step:Q", scale=LOG10, title="step"),
        y=alt.Y("noise scale:Q", scale=LOG10, title="gradient noise scale"),
        color=alt.Color("estimate:N", scale=series_colours(long["estimate"])),
        tooltip=["step", "estimate", "noise scale", "loss"]
    ).properties(height=260)


STATUS_COLORS = alt.Scale(domain=["reached", "not reached", "infeasible"],
                          range=["#2ca02c", "#9e9e9e", "#d62728"])


def trials_chart(trials: pd.DataFrame, columns: int = 3) -> alt.FacetChart:
    """The search behind each measured point: every trial over learning rate x (1 - momentum)
    (log-log), coloured by status, the best trial (the one that set the point) as a large
    diamond; one panel per batch size. A trial's linear decay (final fraction, length) is in its
    tooltip when the sweep searched one."""
    data = trials.assign(best_trial=np.where(trials["best"], "best trial", "trial"))
    tooltip = ["batch_size", "trial_id", "status", "learning_rate", "momentum"]
    if decayed(data):
        # a sweep that searched a linear decay: each trial's own (constant-rate sweeps: none)
        tooltip.append(alt.Tooltip("final_lr_fraction:Q", title="final rate fraction f"))
        if "decay_steps" in data and data["decay_steps"].notna().any():
            tooltip.append(alt.Tooltip("decay_steps:Q", title="decay length (steps)"))
    tooltip += ["steps_to_goal", "steps_run"]
    return alt.Chart(data).mark_point(filled=True, opacity=0.8).encode(
        x=alt.X("learning_rate:Q", scale=LOG10, title="learning rate"),
        y=alt.Y("one_minus_momentum:Q", scale=LOG10, title="1 - momentum"),
        color=alt.Color("status:N", scale=STATUS_COLORS, title="status"),
        shape=alt.Shape("best_trial:N", scale=alt.Scale(domain=["trial", "best trial"],
                                                        range=["circle", "diamond"]), title=""),
        size=alt.Size("best_trial:N", scale=alt.Scale(domain=["trial", "best trial"],
                                                      range=[30, 160]), legend=None),
        tooltip=tooltip,
    ).properties(width=200, height=160).facet(
        facet=alt.Facet("batch_size:O", title="batch size"), columns=columns)


def noise_series_chart(noise: pd.DataFrame, b_crit: float | None = None) -> alt.LayerChart:
    """Measured B_simple along training (log-log), one line per batch size (its best trial),
    with a rule at the measured B_crit (fit) when given: McCandlish et al. 2018 predict
    B_crit ~ B_noise, of which B_simple is the cheap estimate."""
    lines = alt.Chart(noise).mark_line().encode(
        x=alt.X("step:Q", scale=LOG10, title="step"),
        y=alt.Y("b_simple:Q", scale=LOG10, title="B_simple (measured)"),
        color=alt.Color("batch_size:O", title="batch size"),
        tooltip=["batch_size", "trial_id", "step", "b_simple"])
    layers = [lines]
    if b_crit is not None and np.isfinite(b_crit):
        rule = pd.DataFrame({"b_simple": [float(b_crit)], "marker": ["B_crit (fit)"]})
        layers.append(alt.Chart(rule).mark_rule(strokeDash=[6, 3], color="black").encode(
            y="b_simple:Q", tooltip=["marker", "b_simple"]))
    return alt.layer(*layers).properties(height=260)


EXPORT_MIME = {"png": "image/png", "svg": "image/svg+xml"}


def chart_bytes(chart: alt.TopLevelMixin | dict, fmt: str, scale: float = 2.0,
                width: int = 640) -> bytes:
    """A chart as a PNG or SVG file, rendered by vl-convert (Vega in a bundled JS engine).

    Args:
      chart: an Altair chart, or its Vega-Lite spec (`chart.to_dict()`).
      fmt: "png" or "svg".
      scale: PNG pixels per chart pixel (2: sharp on high-DPI screens and in slides).
      width: chart width for a single or layered chart that sets none (the app stretches its
        charts to the page; Vega-Lite's default alone is narrow). Faceted and fixed-width
        charts keep theirs.

    Returns:
      The file's bytes (SVG as UTF-8 text).
    """
    if fmt not in EXPORT_MIME:
        raise ValueError(f"cannot export a chart as {fmt!r}: the formats are "
                         f"{', '.join(repr(f) for f in EXPORT_MIME)}")
    import vl_convert as vlc   # here, not at the top: only an export pays its import

    spec = dict(chart if isinstance(chart, dict) else chart.to_dict())
    if "width" not in spec and "facet" not in spec:
        spec["width"] = width
    # Compile with the Vega-Lite version this Altair writes (v6.4.1 -> "v6_4"), not vl-convert's
    # newest, so the file matches the chart in the app.
    vl_version = "_".join(alt.SCHEMA_VERSION.split(".")[:2])
    if fmt == "png":
        return vlc.vegalite_to_png(spec, vl_version=vl_version, scale=scale)
    return vlc.vegalite_to_svg(spec, vl_version=vl_version).encode("utf-8")


def surge_chart(table: pd.DataFrame, markers: dict[str, float]) -> alt.LayerChart:
    """Adam's greedy one-step learning rate vs batch size (log-log), one line per model, with a
    dashed rule, labelled at its top, at each finite marker inside the table's batch range, e.g.
    {"B_simple": 10.1, "B_peak (law)": 1.44} (`ui.explorer.surge`)."""
    lines = alt.Chart(table).mark_line(point=True).encode(
        x=alt.X("batch_size:Q", scale=LOG2, title="batch size B"),
        y=alt.Y("learning_rate:Q", scale=LOG10, title="one-step optimal rate a*"),
        color=alt.Color("model:N", title="model", scale=series_colours(table["model"])),
        tooltip=["model", "batch_size", alt.Tooltip("learning_rate:Q", format=".4g")])
    lo, hi = table["batch_size"].min(), table["batch_size"].max()
    shown = {k: v for k, v in markers.items() if np.isfinite(v) and lo <= v <= hi}
    marks = alt.Chart(pd.DataFrame({"batch_size": list(shown.values()),
                                    "marker": list(shown.keys())}))
    rule = marks.mark_rule(color="grey", strokeDash=[4, 4]).encode(
        x=alt.X("batch_size:Q", scale=LOG2),
        tooltip=["marker", alt.Tooltip("batch_size:Q", format=".3g")])
    label = marks.mark_text(align="left", dx=3, baseline="top", color="grey").encode(
        x=alt.X("batch_size:Q", scale=LOG2), y=alt.value(4), text="marker:N")
    return alt.layer(lines, rule, label).properties(height=260)

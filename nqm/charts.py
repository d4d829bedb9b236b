"""Altair charts of the explorer's tables (`nqm.explorer`): steps vs batch size, tuned rates,
noise scale. Functions of DataFrames only; nothing here computes the model."""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

LOG2 = alt.Scale(type="log", base=2)
LOG10 = alt.Scale(type="log")


def steps_chart(points: pd.DataFrame, lower_bound: pd.DataFrame,
                summary: pd.DataFrame) -> alt.LayerChart:
    """Steps to target vs batch size (log-log), one line per optimizer, with each optimizer's
    perfect-scaling line (dashed), the estimator lower bound (grey) and rules at B_crit (fit),
    cbs20 and the start of maximal data parallelism."""
    reached = points[np.isfinite(points["steps"])]
    base = alt.Chart(reached).encode(
        x=alt.X("batch_size:Q", scale=LOG2, title="batch size B"),
        color=alt.Color("optimizer:N", title="optimizer"))
    lines = base.mark_line(point=True).encode(
        y=alt.Y("steps:Q", scale=LOG10, title="steps to target"),
        tooltip=["optimizer", "batch_size", "steps", "learning_rate", "momentum", "regime"])
    perfect = base.mark_line(strokeDash=[4, 4], opacity=0.5).encode(y="perfect:Q")
    bound = alt.Chart(lower_bound).mark_line(color="grey", strokeDash=[2, 2]).encode(
        x=alt.X("batch_size:Q", scale=LOG2), y=alt.Y("steps:Q", scale=LOG10),
        tooltip=[alt.Tooltip("steps:Q", title="lower bound")])
    marks = []
    for _, row in summary.iterrows():
        for key, title in (("b_crit", "B_crit (fit)"), ("cbs20", "cbs20"),
                           ("maximal_from", "maximal from")):
            value = row[key]
            if value is not None and np.isfinite(value):
                marks.append({"optimizer": row["optimizer"], "batch_size": float(value),
                              "marker": title})
    layers = [lines, perfect, bound]
    if marks:
        rules = alt.Chart(pd.DataFrame(marks)).mark_rule(opacity=0.6).encode(
            x=alt.X("batch_size:Q", scale=LOG2), color="optimizer:N",
            strokeDash=alt.StrokeDash("marker:N", title="marker"),
            tooltip=["optimizer", "marker", "batch_size"])
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
        color="optimizer:N", strokeDash=alt.StrokeDash("kind:N", title=""),
        tooltip=["optimizer", "batch_size", "kind", "value"]).properties(height=260)


def noise_chart(trajectory: pd.DataFrame) -> alt.Chart:
    """B_simple and B_noise along a trajectory (log step axis)."""
    long = trajectory.melt(id_vars=["step", "loss"], value_vars=["b_simple", "b_noise"],
                           var_name="estimate", value_name="noise scale")
    long = long[long["step"] > 0]
    return alt.Chart(long).mark_line().encode(
        x=alt.X("step:Q", scale=LOG10, title="step"),
        y=alt.Y("noise scale:Q", scale=LOG10, title="gradient noise scale"),
        color="estimate:N", tooltip=["step", "estimate", "noise scale", "loss"]
    ).properties(height=260)

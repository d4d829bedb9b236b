"""The plan as the app draws it (`realnets.planning.plan.Plan`, docs/plan.md): a table of every
(batch size, devices) option and a chart of time to result against cost, the Pareto front and
the recommendation marked. Functions of a Plan only; nothing here plans."""

from __future__ import annotations

import altair as alt
import pandas as pd

from realnets.planning.plan import Plan

# Log axes fitted to the options (not widened to whole decades, which left the points in a
# corner), with room for the marks at the edges.
LOG10 = alt.Scale(type="log", nice=False, padding=24)

# The three kinds of mark, in the legend's order, and their colours: the options grey (drawn
# faintly), the front blue, the recommendation a red that stands out from both.
KINDS = ("option", "Pareto front", "recommended")
KIND_COLOURS = alt.Scale(domain=list(KINDS), range=["#9e9e9e", "#1f77b4", "#d62728"])

COLUMNS = ("label", "batch_size", "devices", "steps", "steps_lo", "steps_hi",
           "seconds_per_step", "time_to_result_s", "device_hours", "cost", "source",
           "step_time_source", "front", "recommended")


def option_label(batch_size: int, devices: int) -> str:
    """How an option is named on the chart: 'B=512 x4' (batch size 512 on 4 devices)."""
    return f"B={batch_size} x{devices}"


def cost_field(plan: Plan) -> tuple[str, str]:
    """(column, axis title) of the chart's cost axis: the cost with a price, else device-hours."""
    if plan.price_per_device_hour is None:
        return "device_hours", "device-hours"
    return "cost", f"cost (at {plan.price_per_device_hour:g} per device-hour)"


def plan_table(plan: Plan) -> pd.DataFrame:
    """One row per option of the plan, sorted by batch size then devices.

    Columns: label ('B=512 x4'), batch_size, devices, steps (to result), steps_lo and steps_hi
    (the two-point curve at the reruns' 16th and 84th percentiles; NaN from a sweep),
    seconds_per_step (s),
    time_to_result_s (s), device_hours, cost (NaN without a price), source (of the steps:
    'measured', 'fit', 'fit (extrapolated)', 'two-point'), step_time_source ('measured', 'model', 'model
    (extrapolated)'), front (on the Pareto front of time against cost), recommended (the plan's
    recommendation; exactly one row).
    """
    front = {(p.batch_size, p.devices) for p in plan.front}
    pick = (plan.recommendation.batch_size, plan.recommendation.devices)
    rows = [{**p.to_dict(), "label": option_label(p.batch_size, p.devices),
             "front": (p.batch_size, p.devices) in front,
             "recommended": (p.batch_size, p.devices) == pick}
            for p in sorted(plan.points, key=lambda p: (p.batch_size, p.devices))]
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    for column in ("cost", "steps_lo", "steps_hi"):
        table[column] = pd.to_numeric(table[column], errors="coerce").astype(float)
    return table


def plan_chart(plan: Plan, height: int = 380) -> alt.LayerChart:
    """Time to result (x, log) against cost (y, log; device-hours without a price).

    Layers: every option as a faint grey point; the Pareto front as a blue line through its
    points, each labelled 'B=... x...'; the recommendation as a large red diamond labelled
    'recommended: B=... x...'. Every mark's tooltip holds all the option's fields. The data hold
    no NaN: the cost without a price, and the two-point band of a plan from a sweep (or an
    infinite one), are left out.
    """
    table = plan_table(plan)
    y_field, y_title = cost_field(plan)
    table = table.drop(columns=[c for c in ("cost", "steps_lo", "steps_hi")
                                if table[c].isna().any()])
    tooltip = [alt.Tooltip(c, format=".4g") if table[c].dtype.kind == "f" else c
               for c in table.columns]
    x = alt.X("time_to_result_s:Q", scale=LOG10, title="time to result (s)")
    y = alt.Y(f"{y_field}:Q", scale=LOG10, title=y_title)
    colour = alt.Color("kind:N", scale=KIND_COLOURS, title="")

    front = table[table["front"]].sort_values("time_to_result_s").assign(kind="Pareto front")
    pick = table[table["recommended"]].assign(
        kind="recommended", pick_label=lambda t: "recommended: " + t["label"])
    options = alt.Chart(table).mark_circle(size=50, opacity=0.35).encode(
        x=x, y=y, color=alt.value(KIND_COLOURS.range[0]), tooltip=tooltip)
    # the line in one colour (a colour field would split it), its points carrying the legend
    front_line = alt.Chart(front).mark_line(strokeWidth=2).encode(
        x=x, y=y, order="time_to_result_s:Q", color=alt.value(KIND_COLOURS.range[1]))
    front_points = alt.Chart(front).mark_circle(size=70, opacity=1.0).encode(
        x=x, y=y, color=colour, tooltip=tooltip)
    front_labels = alt.Chart(front).mark_text(align="left", dx=7, dy=-9, fontSize=11).encode(
        x=x, y=y, text="label:N", color=alt.value(KIND_COLOURS.range[1]))
    pick_mark = alt.Chart(pick).mark_point(shape="diamond", size=260, filled=True,
                                           opacity=1.0, stroke="black", strokeWidth=1).encode(
        x=x, y=y, color=colour, tooltip=tooltip)
    pick_label = alt.Chart(pick).mark_text(align="left", dx=10, dy=12, fontSize=12,
                                           fontWeight="bold").encode(
        x=x, y=y, text="pick_label:N", color=alt.value(KIND_COLOURS.range[2]))
    return alt.layer(options, front_line, front_points, front_labels, pick_mark,
                     pick_label).properties(height=height)

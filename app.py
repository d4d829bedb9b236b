"""batchscope app: `streamlit run app.py`.

Four sections, as tabs of which only the open one runs (so the explorer redraws as fast as it
did alone):
- **NQM explorer**: how far a bigger batch speeds up training on the exact noisy quadratic
  model, with each optimizer's steps-to-target curve, its critical batch size and regimes.
- **Measured curves**: a sweep measured on a real network (shipped under `sweeps/`, run from
  this app under `results/`, or any sweep or batch_science directory) beside the NQM: led by
  the reconciliation of its validation report when one ships (every measurement of B_crit, the
  baselines and the NQM's prediction), the measured curve, the trials behind each point, the
  measured gradient noise scale.
- **Run a sweep**: a sweep from a form (a shipped workload or an own one), with progress and the
  curve filling in as trials finish.
- **Plan**: a sweep's steps to result times the step time on the user's devices (measured here or
  read from a throughput file): time to result against cost for every batch size and device
  count, the Pareto front and a recommendation.

All logic lives in libraries: `ui.explorer`, `ui.measured`, `ui.prediction`, `ui.run_form`,
`ui.plan_page` and `ui.reports` compute, `ui.charts` and `ui.plan_chart` draw,
`realnets.sweeps.runner` runs sweeps and `realnets.planning` plans; this file only reads the
controls, calls them and draws.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from ui import charts, explorer, warmup
from ui.places import Places
from nqm.problem import NOISE_MODELS, NQMConfig

st.set_page_config(page_title="batchscope", layout="wide")

# Shipped sweeps and reports below this checkout, or below $BATCHSCOPE_HOME.
PLACES = Places.from_environment(Path(__file__).resolve().parent)
SECTIONS = ("NQM explorer", "Measured curves", "Run a sweep", "Plan")
SOURCES = ("sweeps/ or results/", "a sweep directory", "a batch_science directory")
PLAN_SOURCES = SOURCES[:2]
STEPS_FROM = ("the sweep's curve", "its two-point estimate")
STEP_TIME_SOURCES = ("measure it here", "a throughput file", "upload a throughput file")
# The Plan tab's first sweep: the smallest shipped one, whose step time measures in seconds.
DEFAULT_PLAN_SWEEP = "sweeps/digits_mlp"

# `realnets` is imported inside the measured sections only: it loads jax (~3 s), which the
# explorer does not need.


def exploration(key: tuple):
    """The exploration of `key` = (config, optimizers, precond_powers, batch_sizes), from the
    warm-up's process-wide cache (`ui.warmup.EXPLORATIONS`): at once if it was computed ahead
    of time, else tuned here under a spinner (or waited for, if the warm-up is computing it)."""
    hit = warmup.EXPLORATIONS.get(key)
    if hit is not None:
        return hit
    with st.spinner("Tuning the NQM..."):
        return warmup.EXPLORATIONS.get_or_compute(key)


def apply_preset():
    """Sets the controls of the chosen preset (runs before the widgets are drawn again)."""
    controls, _ = explorer.PRESETS[st.session_state["preset"]]
    for key, value in controls.items():
        st.session_state[key] = value
    st.session_state["shown_preset"] = st.session_state["preset"]


@st.cache_data
def cached_chart_specs(config: NQMConfig, optimizers: tuple, precond_powers: tuple,
                       batch_sizes: tuple):
    """The Vega-Lite specs of the two curve charts, built (and validated) once per setting."""
    result = exploration((config, optimizers, precond_powers, batch_sizes))
    return (charts.steps_chart(result.points, result.lower_bound, result.summary).to_dict(),
            charts.rate_chart(result.points).to_dict())


@st.cache_data
def cached_surge(config: NQMConfig, batch_sizes: tuple):
    return explorer.surge(config, batch_sizes)


@st.cache_data
def cached_noise(config: NQMConfig, batch_size: int, lr: float, momentum: float,
                 precond_power: float, steps: int):
    return explorer.noise_scale_along(config, batch_size, lr, momentum, precond_power, steps)


@st.cache_data(show_spinner="Reading the sweep...")
def cached_sweep(signature: tuple, name: str | None = None):
    """A sweep directory, keyed on its files' sizes and times: a sweep still being written is
    read again as soon as it gains a trial. `name` labels its curve (default: the directory's)."""
    from ui import measured
    return measured.load_sweep_dir(signature[0], name=name)


@st.cache_data(show_spinner="Reading the batch_science data...")
def cached_batch_science(path: str, goal: float, metric: str):
    from ui import measured
    return measured.load_batch_science_dir(path, goal, metric)


@st.cache_data(show_spinner="Tuning the NQM at the measured batch sizes...")
def cached_prediction(setup, batch_sizes: tuple):
    from ui import prediction
    return prediction.predict(setup, batch_sizes)


def fmt(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.4g}"


def export_buttons(chart, name: str, key: str) -> None:
    """PNG and SVG downloads of a chart (an Altair chart or its spec), as `name`.png / .svg.

    Deferred: the data is a callable that Streamlit runs only when the button is clicked, so a
    redraw does not pay vl-convert's 0.1-0.6 s a chart; `on_click="ignore"`: no rerun either."""
    for fmt_ in charts.EXPORT_MIME:
        st.download_button(f"Download the chart ({fmt_.upper()})",
                           functools.partial(charts.chart_bytes, chart, fmt_),
                           file_name=f"{name}.{fmt_}", mime=charts.EXPORT_MIME[fmt_],
                           key=f"{key}_{fmt_}", on_click="ignore")


def show_chart(chart, name: str, key: str) -> None:
    """The chart across the page, with its PNG and SVG downloads below it."""
    st.altair_chart(charts.on_page(chart), width="stretch")
    with st.container(horizontal=True):
        export_buttons(chart, name, key)


# ----------------------------------------------------------------------------------------------
# The NQM explorer


def show_explorer(config: NQMConfig, optimizers: list, powers: list, batch_sizes: tuple):
    key = (config, tuple(optimizers), tuple(float(p) for p in powers), batch_sizes)
    try:
        result = exploration(key)  # the same key as the chart specs below
    except ValueError as err:
        st.session_state["error"] = str(err)
        st.error(f"Cannot compute this setting: {err}")
        return

    st.session_state.pop("error", None)
    st.session_state["points"] = result.points
    st.session_state["summary"] = result.summary

    if "shown_preset" in st.session_state:
        name = st.session_state["shown_preset"]
        st.info(f"**{name}.** {explorer.PRESETS[name][1]}")
        if name == explorer.SURGE_PRESET:
            show_surge(config, batch_sizes)
    st.subheader("Steps to reach the target, tuned at each batch size")
    steps_spec, rate_spec = cached_chart_specs(*key)
    st.vega_lite_chart(spec=charts.on_page(steps_spec), width="stretch")
    st.caption("Solid: tuned steps. Dashed: perfect scaling from the smallest batch. Grey: the "
               "estimator bound sum(c/h) / (2 target B), which no method beats. Vertical rules: "
               "B_crit of the fit S = S_min (1 + B_crit / B), cbs20 (last B within 20% of "
               "perfect scaling), and the first B within 10% of the fewest steps (maximal data "
               "parallelism).")
    st.dataframe(result.summary, hide_index=True)
    with st.container(horizontal=True):
        st.download_button("Download the curves (CSV)", explorer.curves_csv(result.points),
                           file_name="nqm_curves.csv", mime="text/csv", key="download_csv")
        export_buttons(steps_spec, "nqm_steps_to_target", "export_steps")

    left, right = st.columns(2)
    with left:
        st.subheader("Tuned learning rate")
        st.vega_lite_chart(spec=charts.on_page(rate_spec), width="stretch")
        with st.container(horizontal=True):
            export_buttons(rate_spec, "nqm_tuned_rate", "export_rate")
    with right:
        st.subheader("Gradient noise scale along a run")
        first = result.points[result.points["optimizer"] == result.points["optimizer"].iloc[0]]
        reached = first[first["steps"].notna()]
        if reached.empty:
            st.info("No batch size reached the target.")
        else:
            choice = st.select_slider("batch size of the run", options=list(reached["batch_size"]),
                                      value=int(reached["batch_size"].iloc[0]), key="noise_batch")
            row = reached[reached["batch_size"] == choice].iloc[0]
            if optimizers[0] in ("sgd", "momentum"):
                momentum = 0.0 if pd.isna(row["momentum"]) else float(row["momentum"])
                traj = cached_noise(config, int(choice), float(row["learning_rate"]), momentum,
                                    float(powers[0]), int(row["steps"]))
                noise_chart = charts.noise_chart(traj)
                show_chart(noise_chart, f"nqm_noise_scale_B{int(choice)}", "export_noise")
                st.caption("B_simple = tr(C) / |G|^2 and B_noise = tr(HC) / G^T H G along the "
                           "expected trajectory of the tuned run: the noise scale grows as the "
                           "loss falls (McCandlish et al. 2018).")
            else:
                st.info("Shown for SGD and momentum runs.")

    with st.expander("The model and the equations"):
        st.markdown(
            "Loss `L = 1/2 sum_i h_i theta_i^2`; a stochastic gradient at batch size B is "
            "`H theta + eps`, `eps ~ N(0, C/B)`. SGD moves each direction's second moment as "
            "`E theta^2 <- (1 - a h)^2 E theta^2 + a^2 c / B`; momentum and averaging add a "
            "second state per direction. All curves are exact expectations (no sampling): steps "
            "to target is the first step with E[L] <= target, tuned over the metaparameters at "
            "every batch size (Zhang et al. 2019).")

    # After the draw: the settings one notch away, computed in the background for the next move
    # (not Adam's nor the decays': tens of seconds each even at d = 100)
    if (not {"adam", *explorer.DECAY_OF} & set(optimizers)
            and warmup.worth_warming(*key)):
        warmup.EXPLORATIONS.schedule(warmup.neighbours(*key, CONTROL_GRID))


def show_surge(config: NQMConfig, batch_sizes: tuple):
    """The surge preset's chart: Adam's greedy one-step rate against B (`explorer.surge`)."""
    try:
        table, b_simple, law = cached_surge(config, batch_sizes)
    except ValueError as err:
        st.info(f"The surge chart is not drawn: {err}")
        return
    st.session_state["surge"] = table
    st.subheader("Adam's one-step optimal learning rate")
    chart = charts.surge_chart(table, {"B_simple": b_simple, "B_peak (law)": law.peak_batch})
    st.altair_chart(charts.on_page(chart), width="stretch")
    st.caption(explorer.surge_caption(table, b_simple, law))
    with st.container(horizontal=True):
        export_buttons(chart, "nqm_adam_surge", "export_surge")


# ----------------------------------------------------------------------------------------------
# Measured curves


def listed_sweep(key: str, default: str):
    """The directory of the sweep chosen from sweeps/ and results/, or None (with a hint)."""
    from ui import measured
    sweeps = measured.list_sweeps(PLACES.sweeps, PLACES.results)
    if not sweeps:
        st.info("No sweeps under sweeps/ or results/ yet: run one in the 'Run a sweep' tab.")
        return None
    names = list(sweeps)
    name = st.selectbox("sweep", names, key=key,
                        index=names.index(default) if default in names else 0,
                        format_func=lambda n: measured.sweep_label(n, sweeps[n]),
                        help="sweeps/: measured for batchscope and shipped with it; "
                             "results/: sweeps run from this app")
    return sweeps[name]


def typed_sweep(key: str):
    """The sweep directory typed into the box `key`, or None (with a hint)."""
    text = st.text_input("sweep directory", key=key,
                         placeholder="results/my_sweep, or an absolute path",
                         help="config.json + trials.jsonl, as `python -m realnets sweep` "
                              "writes them; a relative path starts at the repository root")
    if not text.strip():
        st.info("Type the path of a sweep directory.")
        return None
    return PLACES.resolve(text)


def pick_measured():
    """The measured curve the controls name, or None (with an error or a hint beside them)."""
    from ui import measured
    source = st.radio("show", SOURCES, horizontal=True, key="measured_source")
    st.session_state["measured_dir"] = None
    if source == SOURCES[0]:
        path = listed_sweep("measured_sweep", measured.DEFAULT_SWEEP)
    elif source == SOURCES[1]:
        path = typed_sweep("measured_path")
    else:
        where, goal_col, metric_col = st.columns([3, 1, 2])
        text = where.text_input("batch_science directory", key="bs_path",
                                placeholder="batch_science_data/mnist/simple_cnn_base",
                                help="the published archive of Shallue et al. 2018, or any "
                                     "directory of it above the batch-size level")
        goal = goal_col.number_input("goal", value=0.01, format="%.4g", key="bs_goal",
                                     help="metric value to reach (metric <= goal)")
        metric = metric_col.text_input("metric", key="bs_metric",
                                       placeholder="val/classification_error")
        if not text.strip():
            st.info("Type the path of a batch_science directory and the goal.")
            return None
        try:
            curves = cached_batch_science(str(PLACES.resolve(text)), float(goal), metric)
        except ValueError as err:
            st.error(f"Cannot load this batch_science directory: {err}")
            return None
        if len(curves) == 1:
            return curves[0]
        names = [c.name for c in curves]
        chosen = st.selectbox("workload", names, key="bs_workload")
        return curves[names.index(chosen)]
    st.session_state["measured_dir"] = path
    return load_picked_sweep(path)


def load_picked_sweep(path):
    """The sweep directory a picker chose, loaded (cached), or None: nothing chosen, or an error
    beside the controls."""
    from ui import measured
    if path is None:
        return None
    try:
        return cached_sweep(measured.signature(path), sweep_name(Path(path)))
    except ValueError as err:
        st.error(f"Cannot load this sweep: {err}")
        return None


def sweep_name(path: Path) -> str:
    """A sweep's name in labels: its path under sweeps/ or results/ (an arm of a study of several
    sweeps keeps its study's name: digits_mlp_nqm_decay/b8_decay), else its directory's name."""
    for root in (PLACES.sweeps, PLACES.results):
        try:
            return Path(path).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
    return Path(path).name


def describe(config: dict) -> str:
    from realnets.sweeps.report import format_goal

    if "workload" in config:
        return (f"workload **{config.get('workload')}**, goal {format_goal(config.get('goal'))}, "
                f"optimizer {config.get('optimizer')}, {config.get('trials')} trials per batch "
                f"size, budget {config.get('max_steps')} steps")
    return (f"batch_science **{config.get('dataset')}/{config.get('model')}/"
            f"{config.get('optimizer')}**: {config.get('metric')} <= {config.get('goal')}")


def show_measured(nqm_config: NQMConfig, optimizers: list, powers: list):
    from realnets.sweeps.report import (curve_warnings, search_caution, search_check_line,
                                        search_line)
    from ui import prediction
    from ui.measured import decayed, resampled_columns
    st.subheader("Steps to result measured on a network, beside the NQM")
    measured = pick_measured()
    if measured is None:
        return
    st.session_state["measured_points"] = measured.points
    st.session_state["measured_trials"] = measured.trials
    st.markdown(describe(measured.config))
    if measured.points.empty:
        st.info(f"{measured.name} has no finished trials yet.")
        return
    warnings = curve_warnings(measured.document)
    st.session_state["curve_warnings"] = warnings
    for line in warnings:
        st.warning(line)
    show_two_point(measured)
    where, doc = validation_of(measured)
    show_reconciliation(measured, where, doc)

    setup = prediction.prediction_setup(measured.config, nqm_config,
                                        optimizers[0] if optimizers else "sgd",
                                        float(powers[0]) if powers else 0.0,
                                        decayed(measured.trials))
    scale = False
    if not setup.exact:
        scale = st.checkbox("scale to measured S_min", value=True, key="scale_nqm",
                            help="multiply the NQM's steps so that both fits share S_min: only "
                                 "the shapes (and B_crit) are compared; the NQM is the problem "
                                 "and first optimizer set in the sidebar")
    batch_sizes = tuple(int(b) for b in measured.curve.batch_sizes)
    comparison, bound = None, None
    try:
        predicted = cached_prediction(setup, batch_sizes)
        comparison = prediction.compare(measured.curve, predicted, scale,
                                        measured.points["curve"].iloc[0], setup.label,
                                        resampled_columns(measured.document),
                                        measured.points["reruns_median"].to_numpy())
        bound = prediction.lower_bound(setup, batch_sizes)
    except ValueError as err:
        st.error(f"No NQM prediction for the sidebar's setting: {err}")
    st.session_state["comparison"] = None if comparison is None else comparison.summary

    points = measured.points if comparison is None else comparison.points
    summary = measured.summary if comparison is None else comparison.summary
    steps_chart = charts.steps_chart(points, bound, summary, series="curve")
    st.altair_chart(charts.on_page(steps_chart), width="stretch")
    stem = file_stem(measured)
    st.caption(
        "Solid: steps to result (the fewest steps of any trial at that batch size) and the NQM "
        "prediction at the same batch sizes"
        + (" (exact: this NQM trained by SGD is the `nqm` workload; grey: its estimator bound)"
           if setup.exact else ", the sidebar's problem and first optimizer") +
        ". Dashed: perfect scaling from the smallest batch. Dotted: the fit "
        "S = S_min (1 + B_crit / B) behind each B_crit. Vertical rules: B_crit, cbs20 (last B "
        "within 20% of perfect scaling) and the first B within 10% of the fewest steps "
        "(maximal data parallelism), one colour per curve."
        + (" Hollow diamonds: the median steps of each batch size's winning configuration rerun "
           "under other seeds (`python -m realnets repeat`)."
           if np.isfinite(measured.points["reruns_median"]).any() else ""))
    if comparison is not None:
        if comparison.note:
            st.warning(comparison.note)
        left, middle, right = st.columns(3)
        left.metric("B_crit measured (fit)", fmt(comparison.b_crit_measured))
        middle.metric("B_crit NQM (fit)", fmt(comparison.b_crit_predicted))
        right.metric("ratio NQM / measured", fmt(comparison.b_crit_ratio))
        st.dataframe(comparison.summary, hide_index=True)
        st.dataframe(comparison.table, hide_index=True)
    else:
        st.dataframe(measured.summary, hide_index=True)
    robust = measured.document.robustness or {}
    search, check = robust.get("search"), robust.get("search_check")
    resampled = resampled_columns(measured.document).get("b_crit_interval") == "resampled trials"
    if resampled or search or check:
        st.caption(("Measured B_crit: " + search_caution() + "." if resampled else "")
                   + (f" In the summary, b_crit_search_lo .. _hi: {search_line(search)}."
                      if search else "")
                   + (f" Here {search_check_line(check)}." if check else ""))
    with st.container(horizontal=True):
        if comparison is not None:
            st.download_button("Download both curves (CSV)", comparison.points.to_csv(index=False),
                               file_name=f"{stem}_vs_nqm.csv",
                               mime="text/csv", key="download_measured_csv", on_click="ignore")
        export_buttons(steps_chart, f"{stem}_vs_nqm", "export_measured_steps")

    show_validation(measured, where, doc)

    st.subheader("The trials behind each point")
    trials_chart = charts.trials_chart(measured.trials)
    st.altair_chart(trials_chart, width="content")
    st.caption("Each trial of the quasi-random search, by learning rate and 1 - momentum (plain "
               "SGD sits at 1 - momentum = 1). Green: reached the goal; grey: did not (within "
               "its budget, or stopped once another trial reached the goal first); red: "
               "diverged. The diamond set the point; a diamond at the edge of the searched "
               "range means the search space was too small there.")
    st.dataframe(measured.points.drop(columns=["curve", "perfect"]), hide_index=True)
    with st.container(horizontal=True):
        st.download_button("Download the trials (CSV)", measured.trials.to_csv(index=False),
                           file_name=f"{stem}_trials.csv",
                           mime="text/csv", key="download_trials_csv", on_click="ignore")
        export_buttons(trials_chart, f"{stem}_trials", "export_trials")

    st.subheader("Gradient noise scale along training")
    if measured.noise.empty:
        st.info("These data hold no noise-scale estimates (sweeps record them; the published "
                "batch_science archive does not).")
    else:
        noise_chart = charts.noise_series_chart(measured.noise,
                                                measured.summary["b_crit"].iloc[0])
        show_chart(noise_chart, f"{stem}_noise_scale", "export_measured_noise")
        st.caption("B_simple = tr(Sigma) / |G|^2 of each batch size's best trial, from gradient "
                   "norms at two batch sizes (moving averages; McCandlish et al. 2018, app. A). "
                   "It grows as the loss falls. Dashed: the measured B_crit (fit), which "
                   "McCandlish et al. predict to be about the noise scale. A batch size whose "
                   "best trial has no estimate yet is missing.")


def show_two_point(measured) -> None:
    """The sweep's two-point estimate (SWEEP_DIR/two_point.json, `python -m realnets
    two-point`) in one line, when the directory holds one."""
    from realnets.validation.summary import SUMMARY_FILE
    from ui import reports
    st.session_state["two_point"] = None
    if st.session_state.get("measured_dir") is None:
        return
    steps_at = {int(b): float(s) for b, s in zip(measured.curve.batch_sizes, measured.curve.steps)}
    line = reports.two_point_summary(st.session_state["measured_dir"], steps_at,
                                     measured.config.get("goal"),
                                     PLACES.validation / SUMMARY_FILE,
                                     measured.config.get("workload"))
    st.session_state["two_point"] = line
    if line is not None:
        st.info(line)


def file_stem(measured) -> str:
    """The start of every file name exported for `measured` (no '/' of its name)."""
    return measured.name.replace("/", "_")


def validation_of(measured) -> tuple:
    """(directory, document as a dict) of this sweep's validation report when one ships
    (`python -m realnets validate`, reports/validation/<workload>/), else (None, None); an
    unreadable one is shown as an error."""
    from ui import reports
    from realnets.validation import files
    where = reports.validation_for(measured.config, PLACES.validation)
    if where is None:
        return None, None
    try:
        return where, files.read_validation(where).to_dict()
    except ValueError as err:
        st.error(f"Cannot read the validation report in {where}: {err}")
        return None, None


def show_reconciliation(measured, where, doc) -> None:
    """The reconciliation of this sweep's validation report: every measurement of B_crit (the
    fit and its interval, leave-one-out, the local CBS), the baselines B_simple and B_noise, and
    the NQM's prediction, with the predicted S(B) against the measured one."""
    from realnets.validation.files import side_records
    from realnets.validation.report import TRANSFER_NOTE
    from realnets.validation.summary import SUMMARY_FILE
    from realnets.validation.transfer import DEPARTS_FACTOR
    from ui import reports
    from ui import validation_charts
    st.session_state["reconciliation"] = None
    st.session_state["track_record"] = None
    st.session_state["miss_split"] = None
    st.session_state["transfer"] = None
    st.session_state["quadratic_path"] = None
    if doc is None:
        return
    st.subheader("Critical batch size: measured and predicted")
    st.caption(f"From `{where.relative_to(PLACES.root)}/report.md` (made by `python -m realnets "
               "validate`). Headline NQM: the rule of docs/prediction_rule.md. Ratio: estimate / "
               "measured B_crit; range: 16-84% (measured over resampled trials or reruns of "
               "the best trials with other seeds, NQM over "
               "bootstrap NQMs), or the leave-one-batch-size-out spread. B_simple and B_noise "
               "are the baselines: the NQM adds something where it is at least as close.")
    sides = side_records(where, doc)
    st.session_state["reconciliation"] = reports.reconciliation_table(doc, sides)
    st.dataframe(reports.reconciliation_display(doc, sides), hide_index=True)
    note = reports.rule_4_track_note(doc, sides, PLACES.validation / SUMMARY_FILE)
    st.session_state["track_record"] = note
    if note is not None:
        st.caption(note)
    try:
        figure = validation_charts.reconciliation_figure(doc)
    except (KeyError, ValueError) as err:
        st.info(f"No reconciliation chart for this report: {err}")
        return
    show_chart(figure, f"{file_stem(measured)}_reconciliation", "export_reconciliation")
    st.caption("Steps to goal in absolute steps, log-log: measured (the sweep), predicted (the "
               "headline NQM, tuned per batch size) and, where the report has it, the network "
               "trained with the NQM's metaparameters. Dashed rules: each curve's B_crit (fit), "
               "its band the 16-84% range; the other rules: B_simple, B_noise and the local CBS "
               "at each branch step. Marks far outside the batch sizes are in the table only.")
    split = reports.miss_split_display(sides)
    st.session_state["miss_split"] = split
    if split is not None:
        s = sides["miss_split"]
        ratio = "-" if s["ratio"] is None else f"{s['ratio']:.3g}"
        st.markdown(f"**Where the headline's miss sits.** Predicted / measured B_crit = "
                    f"{ratio}, the product of four measured factors; the largest: "
                    f"**{s['largest'] or '-'}** (docs/validation.md, 'Where the headline's miss "
                    "sits').")
        st.dataframe(split, hide_index=True)
        st.caption(f"The tuned NQM needs n_q = {s['n_q']} steps without noise to its target "
                   f"where the network needs S_fb^N = {s['s_fb']} full batch on its whole "
                   "training set (`python -m realnets two-ends`, `python -m realnets "
                   "miss-split`).")
    transfer = reports.transfer_display(doc)
    st.session_state["transfer"] = transfer
    if transfer is not None:
        st.markdown("**Does the network follow the NQM?** The network trained once per batch "
                    "size with the headline NQM's metaparameters (docs/validation.md).")
        st.dataframe(transfer, hide_index=True)
        st.caption(f"{TRANSFER_NOTE} Reading: {doc['transfer']['reading']}.")
    path = reports.path_display(doc)
    st.session_state["quadratic_path"] = path
    if path is not None:
        st.markdown("**Is the loss quadratic along the way?** Where the NQM is "
                    f"{DEPARTS_FACTOR:g}x or more faster than measured: the network and the "
                    "Taylor quadratic of its loss at the goal, full batch from the same start "
                    "with the NQM's metaparameters (docs/validation.md).")
        st.dataframe(path, hide_index=True)
        show_chart(validation_charts.path_figure(doc), f"{file_stem(measured)}_quadratic_path",
                   "export_quadratic_path")
        st.caption("fit = quadratic / NQM, path = network / quadratic, noise = transfer / "
                   f"network. Reading: {doc['transfer']['quadratic_path']['reading']}")


def show_validation(measured, where, doc) -> None:
    """Every variant of the calibrated NQM's prediction of B_crit for this sweep (diagnostics
    beside the reconciliation), when its validation report ships."""
    from ui import reports
    from ui import validation_charts
    st.session_state["validation"] = None
    if doc is None:
        return
    st.subheader("The NQM calibrated on this network: every variant (diagnostics)")
    try:
        table = reports.load_validation(where)
    except ValueError as err:
        st.error(f"Cannot read the validation report in {where}: {err}")
        return
    st.caption(f"From `{where.relative_to(PLACES.root)}/report.md` (made by `python -m "
               "realnets validate`): curvature (Lanczos on Hessian-vector products), gradient "
               "noise along the top eigenvectors and the start, measured on the network at a "
               "checkpoint of the sweep's best trial, turned into an NQM whose tuned curve "
               "predicts B_crit; beside it McCandlish's B_noise and B_simple. Ratio: prediction / "
               "measured B_crit.")
    try:
        figure = validation_charts.steps_figure(doc)
    except (KeyError, ValueError) as err:
        st.info(f"No chart for this report: {err}")
    else:
        show_chart(figure, f"{file_stem(measured)}_calibrated_nqm", "export_validation")
    st.session_state["validation"] = table
    st.dataframe(table.drop(columns=["workload"]), hide_index=True)


# ----------------------------------------------------------------------------------------------
# Run a sweep


@st.cache_resource(show_spinner=False)
def cached_task(workload: str, text_file: str | None = None):
    """A workload's data and functions, built once per process (its compiled programs are
    cached by the trainer as long as the task object lives)."""
    from realnets import workloads
    return workloads.get(workload).build(text_file=text_file)


def show_run():
    from ui import run_form
    from ui.measured import load_sweep_dir
    from realnets import workloads
    from realnets.sweeps.pilot import with_pilot_goal
    from realnets.sweeps.runner import run_sweep

    st.subheader("Run a sweep")
    st.markdown("Trains every trial of the quasi-random search at every batch size (Shallue et "
                "al. 2018) on this machine. Finished trials are written to the out directory "
                "as they finish, so closing the tab loses none; submitting the same sweep again "
                "resumes it. Changing any control while it runs stops it after the trials in "
                "flight.")
    names = list(workloads.WORKLOADS)
    with st.form("run_sweep"):
        workload = st.selectbox("workload", names, index=names.index("digits_mlp"),
                                key="run_workload",
                                help="goal, optimizer and search space: the workload's "
                                     "(`python -m realnets workloads`)")
        own = st.text_input("or own workload (FILE.py:FUNCTION)", "", key="run_own_workload",
                            placeholder="examples/own_workload.py:make_workload",
                            help="your own model and data (docs/own_workload.md); when filled, "
                                 "used instead of the workload above. A relative file starts at "
                                 "the repository root. Without a goal of its own, the goal is "
                                 "chosen by a pilot of 8 trials at the smallest and largest batch "
                                 "size (the pilot rule, as `--goal auto`)")
        batch_text = st.text_input("batch sizes", "8:256", key="run_batch_sizes",
                                   help="16,32,64, or 8:256 for the powers of two from 8 to 256")
        trials = st.number_input("trials per batch size", 1, 1000, 8, key="run_trials")
        full_trials = st.checkbox(
            "run every trial to its end (B_crit's 16-84% range)", value=True,
            key="run_full_trials",
            help="as `--full-trials`: slower, since a batch size's trials do not stop once one "
                 "reached the goal, but only then can B_crit's range over resampled trials and "
                 "its values from the first 16, 32, 64, 128 trials be given (docs/trainer.md)")
        max_steps = st.number_input("step budget per trial (0: the workload's)", 0, 10 ** 7, 0,
                                    key="run_max_steps")
        final_col, decay_col = st.columns(2)
        final_text = final_col.text_input(
            "linear decay: final fraction range", "", key="run_final_lr_fraction",
            placeholder="blank: constant rate",
            help="LO,HI within (0, 1], searched on a log scale per trial: the rate falls "
                 "linearly to this fraction of itself and stays there (docs/trainer.md); "
                 "as `--final-lr-fraction-range`")
        decay_text = decay_col.text_input(
            "decay length range (steps)", "", key="run_decay_steps",
            placeholder="blank: the step budget",
            help="LO,HI with 1 <= LO <= HI <= the step budget, searched on a log scale per "
                 "trial (needs a final fraction range); as `--decay-steps-range`")
        out_text = st.text_input("out directory", "", key="run_out",
                                 placeholder="results/<workload>",
                                 help="blank: results/<workload> (git-ignored); a relative path "
                                      "starts at the repository root")
        submitted = st.form_submit_button("Run the sweep", key="run_submit", type="primary")
    if not submitted:
        return
    try:
        key = run_form.workload_key(workload, own, PLACES)
        config = run_form.sweep_config(key, batch_text, int(trials), int(max_steps),
                                       final_lr_fraction=final_text, decay_steps=decay_text,
                                       full_trials=full_trials)
        out_dir = run_form.out_dir_for(out_text, key, PLACES)
        if math.isnan(config.goal):    # a workload without a goal of its own: the pilot rule
            line = st.empty()
            with st.spinner(f"Choosing the goal by the pilot rule: 8 trials at B = "
                            f"{min(config.batch_sizes)} and {max(config.batch_sizes)}..."):
                config = with_pilot_goal(config, out_dir, lambda: cached_task(config.workload),
                                         log=line.caption)
            line.empty()
            st.info(f"Goal {config.goal:.4g} on the validation metric, chosen by the pilot rule "
                    "(docs/prediction_rule.md); recorded in the sweep's config.json.")
    except ValueError as err:
        st.error(f"Cannot run this sweep: {err}")
        return

    bar = st.progress(0.0, text=f"starting {out_dir} (loading data, compiling)...")
    chart = st.empty()

    def show_progress(_new_records=None):
        """Draws the curve so far; returns its chart (None before the first point)."""
        # Each call reads the directory back: what is drawn is what is safely on disk.
        m = load_sweep_dir(out_dir)
        done, total = run_form.finished_trials(m, config)
        bar.progress(done / total, text=f"{done} of {total} trials finished, in {out_dir}")
        drawn = None
        if not m.points.empty:
            drawn = charts.steps_chart(m.points, None, m.summary, series="curve")
            chart.altair_chart(charts.on_page(drawn), width="stretch")
        st.session_state["run_progress"] = (done, total)
        return drawn

    try:
        if out_dir.is_dir() and (out_dir / "config.json").is_file():
            show_progress()
        done_before = st.session_state.get("run_progress", (0, 1))

        def show_step(batch_size: int, step: int) -> None:
            done, total = st.session_state.get("run_progress", done_before)
            bar.progress(done / total, text=f"{done} of {total} trials finished; B = "
                                            f"{batch_size}: step {step} of {config.max_steps}")

        curve = run_sweep(config, out_dir, progress=False, on_trials=show_progress,
                          on_eval=show_step, task=cached_task(config.workload))
    except ValueError as err:
        st.error(f"Cannot run this sweep: {err}")
        return
    final_chart = show_progress()
    if final_chart is not None:   # only once it is done: the chart above is redrawn until then
        with st.container(horizontal=True):
            export_buttons(final_chart, f"{out_dir.name}_sweep", "export_run_steps")
    reached = sum(p.reached for p in curve.points)
    st.success(f"Done: {reached} of {len(curve.points)} batch sizes reached the goal. The sweep "
               f"is in {out_dir}; open it in 'Measured curves'.")


# ----------------------------------------------------------------------------------------------
# Plan


def pick_plan_sweep():
    """(the sweep the Plan tab plans, a loaded `ui.measured.Measured`, and its directory), or
    (None, None) with an error or a hint beside the controls."""
    source = st.radio("sweep from", PLAN_SOURCES, horizontal=True, key="plan_source")
    path = (listed_sweep("plan_sweep", DEFAULT_PLAN_SWEEP) if source == PLAN_SOURCES[0]
            else typed_sweep("plan_path"))
    sweep = load_picked_sweep(path)
    return (None, None) if sweep is None else (sweep, path)


def pick_steps_from(path):
    """The sweep's two_point.json when the controls plan from it, else None: the choice is shown
    only for a directory that holds one (`python -m realnets two-point`)."""
    from ui import plan_page
    try:
        record = plan_page.two_point_record(path)
    except ValueError as err:
        st.warning(f"Its two-point record is not used: {err}")
        return None
    if record is None:
        return None
    choice = st.radio("steps from", STEPS_FROM, horizontal=True, key="plan_steps_from",
                      help="the sweep's measured curve and its fit, or the curve through the two "
                           "ends of its two-point estimate (docs/plan.md)")
    return record if choice == STEPS_FROM[1] else None


def pick_step_time(sweep, task, two_point=None):
    """The step time the controls name (a ThroughputRecord), or None (with an error or a hint):
    read from a file, uploaded, or measured here (kept in the session, per workload, optimizer,
    batch sizes and device counts, so it is measured once; with a `two_point` record at the
    batch sizes its plan covers)."""
    import jax

    from realnets.planning import step_time
    from realnets.planning.throughput import parse_device_counts
    from ui import plan_page
    source = st.radio("step time", STEP_TIME_SOURCES, horizontal=True, key="plan_step_time",
                      help="seconds per training step against batch size and device count "
                           "(`python -m realnets throughput`, docs/plan.md)")
    try:
        if source == STEP_TIME_SOURCES[1]:
            text = st.text_input("throughput file", key="plan_throughput_path",
                                 placeholder="tp.json, from python -m realnets throughput --out "
                                             "tp.json", help="a relative path starts at the "
                                                             "repository root")
            if not text.strip():
                st.info("Type the path of a throughput file (`python -m realnets throughput "
                        "--workload W --out FILE`), or measure the step time here.")
                return None
            return step_time.read_throughput(PLACES.resolve(text))
        if source == STEP_TIME_SOURCES[2]:
            upload = st.file_uploader("throughput file (JSON)", type=["json"],
                                      key="plan_throughput_upload")
            if upload is None:
                st.info("Upload a throughput file (`python -m realnets throughput --out FILE`).")
                return None
            return step_time.parse_throughput(upload.getvalue(), upload.name)
        present = jax.device_count()
        counts = parse_device_counts(st.text_input(
            "device counts", "1", key="plan_devices",
            help=f"comma-separated, e.g. 1,2,4; JAX sees {present} {jax.devices()[0].platform} "
                 "device(s) here"))
        sizes = plan_page.batch_sizes_to_measure(sweep, task.train_size, two_point)
    except ValueError as err:
        st.error(f"Cannot use this step time: {err}")
        return None
    key = (plan_page.sweep_workload(sweep), str(sweep.config.get("optimizer")), sizes, counts)
    measured = st.session_state.setdefault("plan_measured", {})
    if st.button("Measure step time here", key="plan_measure", type="primary"):
        line = st.empty()
        with st.spinner(f"Measuring the step time at B = {', '.join(map(str, sizes))} on "
                        f"{', '.join(map(str, counts))} device(s)..."):
            try:
                measured[key] = plan_page.measure_here(sweep, task, counts, log=line.caption,
                                                       two_point=two_point)
            except ValueError as err:
                st.error(f"Cannot measure the step time: {err}")
                return None
        line.empty()
    record = measured.get(key)
    if record is None:
        st.info(f"Measures seconds per step of {key[0]} ({key[1]}) at the batch sizes "
                f"{', '.join(map(str, sizes))} on {', '.join(map(str, counts))} device(s), "
                f"{plan_page.MEASURE_SECONDS_PER_REPEAT:g} s x 3 repeats each, compilation "
                "excluded.")
        return None
    st.download_button("Download the step time (JSON)", to_json(record.to_dict()),
                       file_name=f"{file_stem(sweep)}_throughput.json",
                       mime="application/json", key="download_throughput", on_click="ignore")
    return record


def to_json(document: dict) -> str:
    import json
    return json.dumps(document, indent=1)


def show_plan():
    from ui import plan_chart, plan_page

    st.subheader("Plan: which batch size, on how many devices")
    st.markdown("Steps to result from a sweep (measured; between and beyond the measured batch "
                "sizes, its fit S = S_min (1 + B_crit / B)) times seconds per step on your "
                "devices: time to result and device-hours (or cost) of every batch size and "
                "device count, the options no other beats on both (the Pareto front), and a "
                "recommendation (docs/plan.md; the same as `python -m realnets plan`).")
    sweep, path = pick_plan_sweep()
    if sweep is None:
        return
    st.markdown(describe(sweep.config))
    two_point = pick_steps_from(path)
    try:
        task = cached_task(plan_page.sweep_workload(sweep), sweep.config.get("text_file"))
    except ValueError as err:
        st.error(f"Cannot plan this sweep: {err}")
        return
    throughput = pick_step_time(sweep, task, two_point)
    if throughput is None:
        return
    st.caption(plan_page.describe_throughput(throughput))
    price_col, deadline_col, budget_col = st.columns(3)
    price = price_col.number_input("price per device-hour (optional)", value=None, format="%.4g",
                                   key="plan_price", placeholder="none: cost in device-hours")
    deadline = deadline_col.number_input("deadline, seconds (optional)", value=None,
                                         format="%.4g", key="plan_deadline",
                                         placeholder="none",
                                         help="recommend the cheapest option that meets it")
    budget = budget_col.number_input("budget (optional)", value=None, format="%.4g",
                                     key="plan_budget", placeholder="none",
                                     help="in the price's currency, or device-hours without a "
                                          "price: recommend the fastest option within it")
    try:
        plan = plan_page.plan_of(sweep, throughput, price, deadline, budget,
                                 train_size=task.train_size, two_point=two_point)
    except ValueError as err:
        st.error(f"Cannot plan: {err}")
        return
    st.session_state["plan"] = plan
    show_chart(plan_chart.plan_chart(plan), f"{file_stem(sweep)}_plan", "export_plan")
    st.caption("Each point is one batch size on one device count (grey); the blue line joins "
               "the Pareto front, labelled B=batch size x devices; the red diamond is the "
               "recommendation. Log axes; hover a point for its steps, step time and where each "
               f"came from. Time to result excludes {plan.excludes}.")
    st.success(f"**Recommendation:** {plan.recommendation.reason}")
    if plan.steps_note:
        st.caption(plan.steps_note[0].upper() + plan.steps_note[1:] + ".")
    table = plan_chart.plan_table(plan)
    st.dataframe(table, hide_index=True)
    with st.container(horizontal=True):
        st.download_button("Download the plan (CSV)", table.to_csv(index=False),
                           file_name=f"{file_stem(sweep)}_plan.csv", mime="text/csv",
                           key="download_plan_csv", on_click="ignore")
        st.download_button("Download the plan (JSON)", to_json(plan.to_dict()),
                           file_name=f"{file_stem(sweep)}_plan.json", mime="application/json",
                           key="download_plan_json", on_click="ignore")


# ----------------------------------------------------------------------------------------------
# Page

st.title("batchscope: how far does a bigger batch speed up training?")

# The sliders' values, which the warm-up's neighbours step through one notch at a time
CONTROL_GRID = warmup.ControlGrid(dims=(100, 300, 1000, 3000, 10000), spectrum=(0.5, 2.0, 0.1),
                                  noise_exponent=(0.0, 2.0, 0.1),
                                  batch_sizes=tuple(2 ** k for k in range(0, 23)))

with st.sidebar:
    st.header("Classic findings")
    preset = st.selectbox("preset", list(explorer.PRESETS), key="preset")
    st.button("show this finding", on_click=apply_preset, key="apply_preset")
    st.header("Problem")
    dim = st.select_slider("dimensions d", options=list(CONTROL_GRID.dims), value=10000,
                           key="dim")
    spectrum = warmup.snap(st.slider("spectrum exponent a (h_i = i^-a)",
                                     *CONTROL_GRID.spectrum[:2], 1.0, CONTROL_GRID.spectrum[2],
                                     key="spectrum"))
    noise = st.selectbox("gradient noise c_i", NOISE_MODELS, index=0, key="noise",
                         help="curvature: c = h; power: c_i = i^-b; constant: c_i = 1")
    noise_exp = warmup.snap(st.slider("noise exponent b (power noise)",
                                      *CONTROL_GRID.noise_exponent[:2], 1.0,
                                      CONTROL_GRID.noise_exponent[2], key="noise_exp",
                                      disabled=noise != "power"))
    target = st.number_input("target loss", value=0.01, format="%.4g", key="target")
    st.header("Optimizers")
    optimizers = st.multiselect("tune and compare", list(explorer.OPTIMIZER_LABELS),
                                default=["sgd"], key="optimizers",
                                format_func=lambda k: explorer.OPTIMIZER_LABELS[k],
                                help="momentum and EMA take ~3 s to tune at d = 10000 "
                                     "(docs/performance.md); mean-field Adam is offered up to "
                                     f"d = {explorer.ADAM_MAX_DIM} (tens of seconds, "
                                     "docs/nqm_adam.md); a linear decay of the rate over the "
                                     "run is tuned step by step from the constant curve, "
                                     "without preconditioning")
    powers = st.multiselect("preconditioning powers p (H^-p)", [0.0, 0.25, 0.5, 0.75, 1.0],
                            default=[0.0], key="powers",
                            help="0: SGD-like; 0.5: Adam-like; 1: K-FAC-like")
    low, high = st.select_slider("batch sizes (powers of two)",
                                 options=list(CONTROL_GRID.batch_sizes), value=(4, 2 ** 21),
                                 key="batch_range")
    st.caption("Measured curves are compared with this problem and the first optimizer "
               "(the `nqm` workload with its own exact NQM).")

batch_sizes = tuple(b for b in CONTROL_GRID.batch_sizes if low <= b <= high)
config = NQMConfig(dim=dim, spectrum_exponent=spectrum, noise=noise, noise_exponent=noise_exp,
                   target=target)

explorer_tab, measured_tab, run_tab, plan_tab = st.tabs(SECTIONS, key="section",
                                                       on_change="rerun")
if explorer_tab.open:
    with explorer_tab:
        show_explorer(config, optimizers, powers, batch_sizes)
if measured_tab.open:
    with measured_tab:
        show_measured(config, optimizers, powers)
if run_tab.open:
    with run_tab:
        show_run()
if plan_tab.open:
    with plan_tab:
        show_plan()

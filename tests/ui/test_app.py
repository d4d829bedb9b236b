"""The Streamlit app (app.py) driven headless by streamlit.testing.v1.AppTest: the NQM explorer,
the measured curves beside the NQM, and the run-a-sweep form."""

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit import dataframe_util
from streamlit.testing.v1 import AppTest

from ui.explorer import curves_csv

REPO = Path(__file__).resolve().parents[2]
APP = str(REPO / "app.py")


def run_app(**controls):
    """The app after setting the given keyed controls (dim first, so later runs are cheap)."""
    at = AppTest.from_file(APP, default_timeout=180).run()
    for key in ("dim", *[k for k in controls if k != "dim"]):
        if key not in controls:
            continue
        widget = at.select_slider(key=key) if key in ("dim", "batch_range") else None
        if widget is None:
            widget = {"target": at.number_input, "optimizers": at.multiselect,
                      "powers": at.multiselect, "spectrum": at.slider}[key](key=key)
        widget.set_value(controls[key]).run()
    return at


@pytest.fixture(scope="module")
def default_app():
    return AppTest.from_file(APP, default_timeout=180).run()


def test_default_problem_runs_and_shows_the_sgd_curve(default_app):
    at = default_app
    assert not at.exception
    summary = at.session_state["summary"]
    assert list(summary["optimizer"]) == ["SGD"]
    assert summary["cbs20"].iloc[0] == 256 and summary["maximal_from"].iloc[0] == 16384
    points = at.session_state["points"]
    assert points["batch_size"].min() == 4 and points["batch_size"].max() == 2 ** 21
    assert points["steps"].iloc[0] == pytest.approx(1.5075e6, rel=1e-3)


def test_momentum_drops_below_sgd_at_large_batch():
    at = run_app(dim=300, optimizers=["sgd", "momentum"], batch_range=(4, 4096))
    assert not at.exception
    points = at.session_state["points"]
    sgd = points[points["optimizer"] == "SGD"].set_index("batch_size")["steps"]
    mom = points[points["optimizer"] == "momentum"].set_index("batch_size")["steps"]
    assert np.all(mom <= sgd)
    assert mom.loc[4096] < 0.5 * sgd.loc[4096]


def test_preconditioning_control_changes_the_curve():
    before = run_app(dim=300, batch_range=(4, 4096)).session_state["points"]
    after = run_app(dim=300, batch_range=(4, 4096), powers=[0.5]).session_state["points"]
    assert after["optimizer"].iloc[0] == "SGD, p = 0.5"
    assert after["steps"].iloc[-1] < 0.5 * before["steps"].iloc[-1]


def test_target_above_the_initial_loss_shows_a_message_not_a_traceback():
    at = run_app(dim=300, target=10.0)
    assert not at.exception
    assert any("target 10 must be below the initial loss" in e.value for e in at.error)


def test_preset_sets_its_controls_and_explains():
    at = run_app(dim=300, batch_range=(4, 4096))
    at.selectbox(key="preset").set_value("The preconditioning ladder").run()
    at.button(key="apply_preset").click().run()
    assert not at.exception
    assert at.multiselect(key="powers").value == [0.0, 0.5, 1.0]
    assert at.multiselect(key="optimizers").value == ["sgd"]
    summary = at.session_state["summary"]
    assert list(summary["optimizer"]) == ["SGD", "SGD, p = 0.5", "SGD, p = 1"]
    # each step up the ladder extends perfect scaling
    assert list(summary["cbs20"]) == sorted(summary["cbs20"]) and summary["cbs20"].iloc[2] > summary["cbs20"].iloc[0]
    assert any("ladder" in i.value for i in at.info)


def test_adam_surge_preset_draws_the_one_step_rate_and_the_tuned_adam_curve():
    at = run_app(dim=300, batch_range=(4, 4096))
    at.selectbox(key="preset").set_value("Adam's surge (Li et al. 2024)").run()
    at.button(key="apply_preset").click().run()
    assert not at.exception
    assert at.select_slider(key="dim").value == 100
    assert at.multiselect(key="optimizers").value == ["adam"]
    assert list(at.session_state["summary"]["optimizer"]) == ["Adam (mean field)"]
    surge = at.session_state["surge"]
    assert set(surge["model"]) == {"diagonal H", "rotated H, independent noise",
                                   "Li et al.'s law (small signal)"}
    assert surge["batch_size"].min() == 1 and surge["batch_size"].max() == 16384   # down to 1
    assert any("does not show it" in c.value for c in at.caption)
    assert any("Li et al." in i.value for i in at.info)


def test_a_linear_decay_is_tuned_from_its_constant_curve_and_shows_its_final_fraction():
    at = run_app(dim=100, batch_range=(256, 1024), optimizers=["momentum", "momentum_decay"])
    assert not at.exception
    assert list(at.session_state["summary"]["optimizer"]) == ["momentum",
                                                             "momentum, linear decay"]
    points = at.session_state["points"]
    const = points[points["optimizer"] == "momentum"].set_index("batch_size")
    decay = points[points["optimizer"] == "momentum, linear decay"].set_index("batch_size")
    assert np.all(decay["steps"] <= const["steps"])
    assert decay["final_lr_fraction"].between(0, 1).all()
    assert const["final_lr_fraction"].isna().all()
    # the steps chart's tooltip shows it
    spec = at.get("vega_lite_chart")[0].proto.spec
    assert "final rate fraction f" in spec


def test_csv_download_holds_the_curve():
    at = run_app(dim=300, batch_range=(4, 64))
    points = at.session_state["points"]
    assert list(points["batch_size"]) == [4, 8, 16, 32, 64]
    button = at.get("download_button")[0]
    assert button.proto.label == "Download the curves (CSV)" and button.proto.url.endswith(".csv")
    # what the button serves reads back as the same curve
    back = pd.read_csv(io.StringIO(curves_csv(points)))
    assert list(back["batch_size"]) == [4, 8, 16, 32, 64]
    np.testing.assert_allclose(back["steps"], points["steps"])
    np.testing.assert_allclose(back["learning_rate"], points["learning_rate"])


def test_a_slider_notch_after_the_warm_up_redraws_without_tuning():
    from ui import explorer, warmup
    from nqm.problem import NQMConfig

    warm = warmup.EXPLORATIONS
    at = run_app(dim=100, batch_range=(4, 64))
    assert warm.wait_idle(timeout=120)   # the neighbours are computed
    tuned = warm.computed_on_demand
    at.slider(key="spectrum").set_value(1.1).run()
    assert not at.exception
    assert warm.computed_on_demand == tuned    # served from the warm-up, not tuned
    live = explorer.explore(NQMConfig(dim=100, spectrum_exponent=1.1), ("sgd",), (0.0,),
                            (4, 8, 16, 32, 64))
    pd.testing.assert_frame_equal(at.session_state["points"], live.points)
    # one notch of the batch range, from there, too; a far value is tuned on the spot
    assert warm.wait_idle(timeout=120)
    at.select_slider(key="batch_range").set_value((4, 128)).run()
    assert warm.computed_on_demand == tuned
    assert list(at.session_state["points"]["batch_size"]) == [4, 8, 16, 32, 64, 128]
    assert warm.wait_idle(timeout=120)
    at.slider(key="spectrum").set_value(1.7).run()
    assert not at.exception and warm.computed_on_demand == tuned + 1


# ------------------------------------------------------------------------------------------------
# Measured curves and Run a sweep

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "batch_science"


def section_app(section, **state):
    """The app opened on `section`, with the given session state (dim 300: a quick NQM)."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["section"] = section
    for key, value in {"dim": 300, **state}.items():
        at.session_state[key] = value
    return at.run()


def chart_frames(at, index=0):
    """The data sets of the index-th Vega-Lite chart, as DataFrames."""
    chart = at.get("vega_lite_chart")[index]
    return [dataframe_util.convert_arrow_bytes_to_pandas_df(d.data.data)
            for d in chart.proto.datasets]


def errors(at):
    return [e.value for e in at.error]


@pytest.fixture(scope="module")
def measured_app():
    return section_app("Measured curves")


def test_an_arm_of_a_study_is_listed_and_named_with_its_study():
    at = section_app("Measured curves")
    at.selectbox(key="measured_sweep").set_value("sweeps/digits_mlp_nqm_decay/b8_decay").run()
    assert not at.exception and not errors(at)
    points = at.session_state["measured_points"]
    assert set(points["curve"]) == {"measured: digits_mlp_nqm_decay/b8_decay"}
    # the list labels each sweep by `measured.sweep_label` (an unfinished one marked: tested in
    # test_measured.py); mnist_cnn_64 has all its 64 trials per batch size, so it is unmarked
    options = at.selectbox(key="measured_sweep").options
    assert "sweeps/mnist_cnn_64" in options
    assert not any(o.startswith("sweeps/mnist_cnn_64 (unfinished") for o in options)


def test_a_weak_curve_is_flagged_above_its_chart():
    """The report's warnings (too few steps, a goal a few steps away, steps that are luck) stand
    above the curve in the app: on the shipped diabetes sweep the goal 2 steps away at B = 256
    and the luck at B >= 32, on mnist_mlp none."""
    at = section_app("Measured curves")
    at.selectbox(key="measured_sweep").set_value("sweeps/diabetes_mlp").run()
    assert not at.exception and not errors(at)
    shown = at.session_state["curve_warnings"]
    assert len(shown) == 2 and shown[0].startswith("near goal: S(B) = 2 at B = 256")
    assert shown[1].startswith("luck: at B = 32, 64, 128, 256")
    assert all(w in [x.value for x in at.warning] for w in shown)
    at.selectbox(key="measured_sweep").set_value("sweeps/mnist_mlp").run()
    assert at.session_state["curve_warnings"] == []


def test_measured_section_shows_the_shipped_mnist_mlp_sweep(measured_app):
    at = measured_app
    assert not at.exception and not errors(at)
    assert at.selectbox(key="measured_sweep").value == "sweeps/mnist_mlp"
    # the goal the pilot rule chose (0.12126378800000001 in config.json), to 6 digits
    assert any("goal 0.121264, optimizer momentum, 32 trials per batch size" in m.value
               for m in at.markdown)
    points = at.session_state["measured_points"]
    assert list(points["batch_size"]) == [2 ** k for k in range(4, 13)]
    # the steps chart (after the reconciliation's and the quadratic path's) holds the 9 measured
    # batch sizes and the NQM at the same ones
    curves = next(f for f in chart_frames(at, 2) if "steps" in f)
    measured = curves[curves["curve"] == "measured: mnist_mlp"]
    assert list(measured["batch_size"]) == [2 ** k for k in range(4, 13)]
    assert list(measured["steps"]) == list(points["steps"])
    nqm = curves[curves["curve"] != "measured: mnist_mlp"]
    assert nqm["curve"].iloc[0].endswith("(scaled to measured S_min)")
    assert list(nqm["batch_size"]) == [2 ** k for k in range(4, 13)]
    # markers: B_crit (fit), cbs20 and maximal from, for both curves
    rules = next(f for f in chart_frames(at, 2) if "marker" in f)
    assert sorted(rules["marker"]) == sorted(["B_crit (fit)", "cbs20", "maximal from"] * 2)
    # the reconciliation, the quadratic path and the calibrated NQM's report
    # (reports/validation/mnist_mlp), trials scatter and noise-scale charts are drawn too
    assert len(at.get("vega_lite_chart")) == 6
    trials = at.session_state["measured_trials"]
    assert len(trials) == 9 * 32
    assert set(trials["status"]) == {"reached", "not reached", "infeasible"}
    # the resampled-trials range is said to miss the larger search, as `report` says
    from realnets.sweeps.report import search_caution
    assert any(search_caution() in c.value and "put B_crit in 56.18 .. 103.9" in c.value
               for c in at.caption)


def test_a_sweep_with_128_trials_says_whether_its_first_32_range_held():
    at = section_app("Measured curves")
    at.selectbox(key="measured_sweep").set_value("sweeps/digits_mlp").run()
    assert not at.exception and not errors(at)
    assert any("29.5 .. 54.56, misses B_crit from the first 128, 59.65" in c.value
               for c in at.caption)


def test_no_search_caution_where_the_interval_is_over_reruns():
    """The text model's trials stopped early: its interval is over reruns, not resampled trials."""
    at = section_app("Measured curves")
    at.selectbox(key="measured_sweep").set_value("sweeps/text_transformer").run()
    assert not at.exception and not errors(at)
    assert not any("does not count what a larger search" in c.value for c in at.caption)


def test_the_shipped_validation_report_shows_beside_its_sweep(measured_app):
    # reports/validation/mnist_mlp was made from sweeps/mnist_mlp: its table of B_crit
    # predictions is shown, each ratio = prediction / the measured B_crit of the same sweep
    table = measured_app.session_state["validation"]
    assert table is not None
    measured = table[table["quantity"] == "measured B_crit (fit)"]["value"].iloc[0]
    summary = measured_app.session_state["comparison"]    # the app's own fit of the sweep
    assert measured == pytest.approx(summary.iloc[0]["b_crit"], rel=1e-6)
    rows = table.dropna(subset=["value", "ratio"])
    assert len(rows) >= 4
    assert np.allclose(rows["ratio"], rows["value"] / measured, rtol=1e-9)
    assert {"B_noise = tr(H Sigma) / (G^T H G)", "B_simple (sweep, moving averages)"} <= set(
        table["quantity"])


def test_the_reconciliation_leads_the_tab_for_a_sweep_with_a_report(measured_app):
    # reports/validation/mnist_mlp was made from the shipped sweep, whose trials all ran to their
    # end: the measured row carries the document's 16-84% interval over resampled trials (the
    # app's own resampling of the sweep gives the same); the numbers are those of the document,
    # each ratio over the measured B_crit of the same sweep
    from realnets.validation import files
    from realnets.validation.settings import TARGET_LABELS

    at = measured_app
    doc = files.read_validation(Path(__file__).resolve().parents[2] / "reports" / "validation"
                                / "mnist_mlp")
    table = at.session_state["reconciliation"]
    assert table is not None
    measured = table.iloc[0]
    assert measured["estimate"] == "measured B_crit (fit)"
    assert measured["value"] == pytest.approx(at.session_state["comparison"].iloc[0]["b_crit"],
                                              rel=1e-6)
    interval = doc.measured["interval"]
    assert interval["available"] and "resample" in measured["note"]
    assert (measured["lo"], measured["hi"]) == pytest.approx((interval["p16"], interval["p84"]))
    comparison = at.session_state["comparison"].iloc[0]
    assert (measured["lo"], measured["hi"]) == pytest.approx(
        (comparison["b_crit_resampled_p16"], comparison["b_crit_resampled_p84"]), rel=1e-6)
    cbs = table[table["estimate"].str.startswith("local CBS")]
    assert len(cbs) == len(doc.local_cbs or [None])
    # below the table, the error bar of rule 4's track record, without mnist_mlp's own entries
    note = at.session_state["track_record"]
    others = sum(e["workload"] not in ("nqm", "mnist_mlp") for e in json.loads(
        (Path(__file__).resolve().parents[2] / "reports" / "validation" / "summary.json").read_text()))
    assert note.startswith(f"Error bar from the track record of rule 4 (the {others} other validated")
    assert any(c.value == note for c in at.caption)
    assert list(cbs["value"].fillna(-1)) == [r["cbs"] if r["cbs"] else -1
                                             for r in doc.local_cbs or [{"cbs": None}]]
    rows = table.dropna(subset=["value"])
    assert np.allclose(rows["ratio"], rows["value"] / measured["value"], rtol=1e-9)
    nqm = table[table["estimate"] == "NQM prediction (tuned B_crit)"].iloc[0]
    validation = at.session_state["validation"]
    headline = "NQM tuned B_crit [" + TARGET_LABELS[doc.settings.target_rule] + "]"
    assert nqm["value"] == pytest.approx(validation[(validation["quantity"] == headline)
                                                    & (validation["checkpoint"] == "goal")][
        "value"].iloc[0])
    # the two-point estimate with both ends measured, and the headline's miss split, from the
    # records beside the document (two_ends.json, miss_split.json)
    reports_dir = Path(__file__).resolve().parents[2] / "reports" / "validation" / "mnist_mlp"
    ends = json.loads((reports_dir / "two_ends.json").read_text())
    row = table[table["estimate"].str.startswith("two-point estimate, both ends")].iloc[0]
    assert (row["value"], row["lo"], row["hi"]) == pytest.approx(
        (ends["two_point"]["50"], ends["two_point"]["16"], ends["two_point"]["84"]))
    split = json.loads((reports_dir / "miss_split.json").read_text())
    shown = at.session_state["miss_split"]
    assert list(shown["factor"]) == ["shape_nqm", "noise_free", "reference", "shape_net"]
    assert list(shown["value"]) == [f"{split['factors'][k]:.3g}" for k in shown["factor"]]
    # its chart comes first: the measured and predicted curves in absolute steps, and the
    # network run with the NQM's metaparameters (where it reached the goal)
    curves = next(f for f in chart_frames(at, 0) if "curve" in f and "steps" in f)
    measured_curve = curves[curves["curve"] == "measured (mnist_mlp)"]
    assert list(measured_curve["steps"]) == list(at.session_state["measured_points"]["steps"])
    assert curves["curve"].nunique() == 3
    transfer = curves[curves["curve"] == "network at the NQM's metaparameters"]
    assert list(transfer["steps"]) == [p["steps_to_goal"] for p in doc.transfer["points"]
                                       if p["steps_to_goal"] is not None]
    # and its table, one row per batch size, the verdicts of the document
    table = at.session_state["transfer"]
    assert list(table["B"]) == [p["batch_size"] for p in doc.transfer["points"]]
    assert list(table["verdict"]) == [p["verdict"] for p in doc.transfer["points"]]
    # and the network against its own quadratic, where the NQM is faster than measured
    path = at.session_state["quadratic_path"]
    points = doc.transfer["quadratic_path"]["points"]
    assert list(path["B"]) == [p["batch_size"] for p in points]
    assert list(path["NQM's steps"]) == [p["nqm_steps"] for p in points]
    assert list(path["its quadratic, full batch"]) == [str(p["quadratic"]["steps_to_target"])
                                                       for p in points]
    # and its chart: both descents at every batch size taken apart, every kept loss
    descents = next(f for i in range(len(at.get("vega_lite_chart")))
                    for f in chart_frames(at, i) if "run" in f and "loss" in f)
    assert sorted(set(descents["B"])) == [p["batch_size"] for p in points]
    net = descents[(descents["B"] == points[0]["batch_size"]) & (descents["run"] == "network")]
    assert len(net) == len(points[0]["network"]["losses"])


def test_side_by_side_table_has_the_b_crit_ratio(measured_app):
    at = measured_app
    summary = at.session_state["comparison"]
    measured, nqm = summary.iloc[0], summary.iloc[1]
    # the fit of sweeps/mnist_mlp as README.md reports it (the ratio's arithmetic is tested in
    # test_prediction.test_comparison_ratio_of_known_fits)
    assert measured["b_crit"] == pytest.approx(76.40, abs=0.01)
    assert nqm["s_min"] == pytest.approx(measured["s_min"], rel=1e-6)   # scaled to it
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["ratio NQM / measured"]) == pytest.approx(nqm["b_crit_ratio"], rel=1e-3)
    # unscaled: the NQM keeps its own S_min, and B_crit (so the ratio) does not change
    at.checkbox(key="scale_nqm").uncheck().run()
    assert not at.exception
    unscaled = at.session_state["comparison"].iloc[1]
    assert "scaled" not in unscaled["curve"]
    assert unscaled["b_crit_ratio"] == pytest.approx(nqm["b_crit_ratio"], rel=1e-6)
    assert unscaled["s_min"] != pytest.approx(measured["s_min"], rel=1e-2)


def test_a_bad_sweep_directory_shows_an_error_not_an_exception(tmp_path):
    # the loader's ValueError (each bad-directory case: test_measured) becomes st.error beside
    # the path box, with no traceback
    path = tmp_path / "missing"
    at = section_app("Measured curves", measured_source="a sweep directory",
                     measured_path=str(path))
    assert not at.exception
    assert at.text_input(key="measured_path").value == str(path)
    assert errors(at) == [f"Cannot load this sweep: sweep directory {path} does not exist"]
    assert "measured_points" not in at.session_state


def test_a_sweep_with_a_two_point_record_shows_its_estimate(tmp_path):
    """A sweep directory holding the two_point.json of `python -m realnets two-point` (here the
    record that command wrote for the shipped breast-cancer sweep, its condition failing) shows
    the estimate and the verdict in one line above the curve, without the track record's error
    bar, which was earned where the condition held; with the condition holding and B_2pt'(med)
    in the record, that leads with its own bar; a sweep without a record shows none."""
    import shutil

    path = tmp_path / "bc"
    shutil.copytree(REPO / "sweeps" / "breast_cancer_mlp", path)
    record = {"workload": "examples/breast_cancer.py:make_workload", "b_ref": 8, "s_ref": 2,
              "goal": 0.071052629, "value": 20.0, "lo": 8.0, "hi": None,
              "condition": {"min_full_batch_steps": 5, "holds": False,
                            "why": "S_fb^N = 1: one step moves the estimate by a fifth or "
                                   "more"}}
    (path / "two_point.json").write_text(json.dumps(record))
    at = section_app("Measured curves", measured_source="a sweep directory",
                     measured_path=str(path))
    assert not at.exception
    line = at.session_state["two_point"]
    assert "**20**" in line and "8 .. ?" in line and "does not hold" in line
    assert "track record of" not in line
    assert "No error bar from the track record: its entries are mostly ones where S_fb^N >= " \
        "5, and here that condition does not hold." in line
    assert any(i.value == line for i in at.info)
    # with B_2pt'(med), the estimate of record since session 42: it leads, with its own record
    med = {**record, "b_2pt_med": {"value": 12.0, "lo": 6.0, "hi": 30.0},
           "condition": {"min_full_batch_steps": 5, "holds": True, "why": "S_fb^N = 6"},
           "full_batch_inits": {"seeds": [1, 2, 3],
                                "percentiles": {"16": 6.0, "50": 7.0, "84": 9.0}}}
    (path / "two_point.json").write_text(json.dumps(med))
    at = section_app("Measured curves", measured_source="a sweep directory",
                     measured_path=str(path))
    line = at.session_state["two_point"]
    assert "B_2pt'(med) = **12**" in line and "B_2pt' = 20 (8 .. ?), a diagnostic" in line
    others = sum(e["workload"] not in ("nqm", record["workload"]) for e in json.loads(
        (REPO / "reports" / "validation" / "summary.json").read_text()))
    assert f"track record of B_2pt'(med) (the {others} other validated entries" in line
    (path / "two_point.json").unlink()
    at = section_app("Measured curves", measured_source="a sweep directory",
                     measured_path=str(path))
    assert at.session_state["two_point"] is None


def test_a_batch_science_directory_loads_with_its_goal():
    at = section_app("Measured curves", measured_source="a batch_science directory",
                     bs_path=str(FIXTURE), bs_goal=0.02)
    assert not at.exception and not errors(at)
    assert list(at.session_state["measured_points"]["batch_size"]) == [64, 128, 256, 512]
    assert any("no noise-scale estimates" in i.value for i in at.info)
    # a metric the data do not have: the message (with the available columns), not a traceback
    at.text_input(key="bs_metric").input("val/nope").run()
    assert not at.exception
    assert any("metric 'val/nope' is not a measurements.csv column" in e for e in errors(at))


def test_run_a_sweep_form_writes_trials_and_shows_progress(tmp_path):
    out = tmp_path / "digits"
    at = section_app("Run a sweep")
    assert not at.exception
    at.selectbox(key="run_workload").set_value("digits_mlp")
    at.text_input(key="run_batch_sizes").input("8,16")
    at.number_input(key="run_trials").set_value(2)
    at.number_input(key="run_max_steps").set_value(30)
    at.text_input(key="run_final_lr_fraction").input("0.1,1")
    at.text_input(key="run_decay_steps").input("2,20")
    at.text_input(key="run_out").input(str(out))
    at.button(key="run_submit").click().run(timeout=240)
    assert not at.exception and not errors(at)
    lines = (out / "trials.jsonl").read_text().splitlines()
    assert sorted((json.loads(l)["batch_size"], json.loads(l)["trial_id"]) for l in lines) == [
        (8, 0), (8, 1), (16, 0), (16, 1)]
    # the decay's ranges reached the sweep and every trial
    config = json.loads((out / "config.json").read_text())
    assert config["full_trials"] is True           # the form's default: an interval of B_crit
    assert config["search"]["final_lr_fraction"] == [0.1, 1.0]
    assert config["search"]["decay_steps"] == [2.0, 20.0]
    assert all(2 <= json.loads(l)["decay_steps"] <= 20 for l in lines)
    assert at.session_state["run_progress"] == (4, 4)
    assert at.get("progress") and any("Done" in s.value for s in at.success)
    # bad input in the form: an error beside it, nothing run
    at.text_input(key="run_batch_sizes").input(" ")
    at.button(key="run_submit").click().run()
    assert not at.exception
    assert any("at least one batch size" in e for e in errors(at))
    # a decay longer than the budget: refused in one line, nothing run
    at.text_input(key="run_batch_sizes").input("8")
    at.text_input(key="run_decay_steps").input("2,50")
    at.button(key="run_submit").click().run()
    assert not at.exception
    assert any("decay-steps-range must end at or below max-steps (30)" in e for e in errors(at))


def test_run_a_sweep_form_takes_an_own_workload_and_its_pilot_goal(tmp_path):
    # tests/fixtures/two_clouds.py gives no goal: the form chooses it by the pilot rule (8 trials
    # at the smallest and largest batch size), records it in config.json, then runs the sweep
    own = f"{REPO / 'tests' / 'fixtures' / 'two_clouds.py'}:make_workload"
    out = tmp_path / "own"
    at = section_app("Run a sweep")
    at.text_input(key="run_own_workload").input(own)
    at.text_input(key="run_batch_sizes").input("8,64")
    at.number_input(key="run_trials").set_value(2)
    at.checkbox(key="run_full_trials").uncheck()
    at.text_input(key="run_out").input(str(out))
    at.button(key="run_submit").click().run(timeout=300)
    assert not at.exception and not errors(at)
    config = json.loads((out / "config.json").read_text())
    assert config["full_trials"] is False
    assert config["workload"] == own and config["max_steps"] == 60   # the workload's budget
    choice = config["goal_choice"]
    assert choice["batch_sizes"] == [8, 64] and config["goal"] == choice["goal"]
    assert any("chosen by the pilot rule" in i.value and f"{config['goal']:.4g}" in i.value
               for i in at.info)
    assert len((out / "trials.jsonl").read_text().splitlines()) == 2 * 2
    assert any("Done" in s.value for s in at.success)
    # a file without the function: one line beside the form, nothing run
    at.text_input(key="run_own_workload").input("examples/own_workload.py:nope")
    at.text_input(key="run_out").input(str(tmp_path / "never"))
    at.button(key="run_submit").click().run()
    assert not at.exception
    (error,) = errors(at)
    assert error.startswith("Cannot run this sweep: workload: ")
    assert error.endswith("own_workload.py has no function 'nope'")
    assert not (tmp_path / "never").exists()
    # and the Plan tab plans that sweep (its directory typed) on a step time for its workload
    reached = [json.loads(l) for l in (out / "trials.jsonl").read_text().splitlines()]
    assert any(r["status"] == "COMPLETE" for r in reached)
    path = tmp_path / "tp.json"
    path.write_text(json.dumps(hand_throughput(own, "momentum").to_dict()))
    at.session_state["section"] = "Plan"
    at.session_state["plan_source"] = "a sweep directory"
    at.session_state["plan_path"] = str(out)
    at.session_state["plan_step_time"] = "a throughput file"
    at.session_state["plan_throughput_path"] = str(path)
    at.run()
    assert not at.exception and not errors(at)
    plan = at.session_state["plan"]
    assert plan.workload == own and {p.batch_size for p in plan.points} >= {8, 64}


# ------------------------------------------------------------------------------------------------
# Plan

DIGITS = REPO / "sweeps" / "digits_mlp"


def hand_throughput(workload="digits_mlp", optimizer="momentum"):
    """A throughput record built by hand (no measuring): step times of the model with a fixed
    cost, compute per example and an all-reduce, on 1, 2, 4 and 8 devices."""
    from realnets.planning.step_time import StepTimePoint, ThroughputRecord, fit_step_time

    pts = tuple(StepTimePoint(b, n, 1e-4 + 2e-5 * b / n + 1e-4 * (n - 1) / n, (1e-4, 1e-2), 100,
                              3, 0.5)
                for b in (8, 64, 512) for n in (1, 2, 4, 8))
    return ThroughputRecord(workload, optimizer, "cpu", "cpu", 1, pts, fit_step_time(list(pts)))


def plan_app(tmp_path, record=None, **state):
    """The Plan tab on sweeps/digits_mlp with the step time read from a file in tmp_path."""
    path = tmp_path / "tp.json"
    path.write_text(json.dumps((record or hand_throughput()).to_dict()))
    return section_app("Plan", plan_step_time="a throughput file",
                       plan_throughput_path=str(path), **state)


def test_plan_tab_plans_a_shipped_sweep_from_a_throughput_file(tmp_path, deferred_downloads):
    from realnets.planning.plan import make_plan
    from ui import measured

    at = plan_app(tmp_path, plan_price=2.0)
    assert not at.exception and not errors(at)
    assert at.selectbox(key="plan_sweep").value == "sweeps/digits_mlp"
    plan = at.session_state["plan"]
    sweep = measured.load_sweep_dir(DIGITS)
    assert plan == make_plan(sweep.curve, hand_throughput(), 2.0,
                             train_size=1618)
    assert {p.devices for p in plan.points} == {1, 2, 4, 8}
    assert [s.value for s in at.success] == [f"**Recommendation:** {plan.recommendation.reason}"]
    # the chart: every option, the front labelled, the recommendation marked
    frames = chart_frames(at)
    assert max(len(f) for f in frames) == len(plan.points)
    labels = next(f for f in frames if "pick_label" in f)
    rec = plan.recommendation
    assert list(labels["pick_label"]) == [f"recommended: B={rec.batch_size} x{rec.devices}"]
    # the table, and the exports as for every chart
    table = at.dataframe[0].value
    assert len(table) == len(plan.points) and table["recommended"].sum() == 1
    assert sorted(deferred_downloads) == ["digits_mlp_plan.png", "digits_mlp_plan.svg"]
    assert "time to result (s)" in svg_texts(deferred_downloads["digits_mlp_plan.svg"][0]())
    # a deadline moves the recommendation to the cheapest option that meets it
    deadline = sorted(p.time_to_result_s for p in plan.points)[len(plan.points) // 4]
    at.number_input(key="plan_deadline").set_value(deadline).run()
    assert not at.exception and not errors(at)
    assert "meets the deadline" in at.session_state["plan"].recommendation.reason


def test_plan_tab_plans_from_a_sweeps_two_point_record(tmp_path):
    """A sweep directory holding a two_point.json offers 'steps from'; its two-point estimate
    gives the plan of `make_plan(..., two_point_record=...)`, the condition's verdict beneath it
    and the band in the table; a stale record is answered in one line. A directory without
    one shows no choice."""
    import shutil

    from realnets.planning.plan import make_plan
    from realnets.validation.two_point import plan_curve
    from ui import measured

    sweep_dir = tmp_path / "dm"
    shutil.copytree(DIGITS, sweep_dir)
    sweep = measured.load_sweep_dir(sweep_dir)
    s8 = int(dict(zip(sweep.curve.batch_sizes, sweep.curve.steps))[8])
    record = {"workload": "digits_mlp", "optimizer": "momentum",
              "goal": sweep.config["goal"], "b_ref": 8, "s_ref": s8,
              "full_set": {"steps": 7, "sample_rows": 1618},
              "reruns": {"percentiles": {"16": 44.0, "50": 60.0, "84": 83.0}},
              "value": 8 * (60 / 7 - 1), "lo": None, "hi": None,
              "condition": {"min_full_batch_steps": 5, "holds": True, "why": "S_fb^N = 7"}}
    (sweep_dir / "two_point.json").write_text(json.dumps(record))
    at = plan_app(tmp_path, plan_source="a sweep directory", plan_path=str(sweep_dir),
                  plan_steps_from="its two-point estimate")
    assert not at.exception and not errors(at)
    plan = at.session_state["plan"]
    assert plan == make_plan(sweep.curve, hand_throughput(), train_size=1618,
                             two_point=plan_curve(record, sweep.curve))
    assert plan.steps_from == "two-point"
    assert any("the condition S_fb^N >= 5 holds" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert (table["steps_lo"] < table["steps"]).all() and (table["steps"] < table["steps_hi"]).all()
    at.radio(key="plan_steps_from").set_value("the sweep's curve").run()
    assert at.session_state["plan"].steps_from == "sweep"
    (sweep_dir / "two_point.json").write_text(json.dumps({**record, "s_ref": s8 + 1}))
    at.radio(key="plan_steps_from").set_value("its two-point estimate").run()
    assert not at.exception
    assert len(errors(at)) == 1 and "before this sweep changed" in errors(at)[0]
    at = plan_app(tmp_path)                              # sweeps/digits_mlp: no record
    assert not at.exception
    assert "plan_steps_from" not in [r.key for r in at.radio]


def test_plan_tab_answers_bad_input_with_one_line(tmp_path):
    at = plan_app(tmp_path, plan_deadline=10.0, plan_budget=1.0)
    assert not at.exception
    assert errors(at) == ["Cannot plan: give at most one of the deadline and the budget"]
    missing = tmp_path / "missing.json"
    at.text_input(key="plan_throughput_path").input(str(missing)).run()
    assert not at.exception
    assert errors(at) == [f"Cannot use this step time: throughput: cannot read {missing} (No such "
                          "file or directory)"]
    (tmp_path / "bad.json").write_text("{points: 1")
    at.text_input(key="plan_throughput_path").input(str(tmp_path / "bad.json")).run()
    assert not at.exception
    assert len(errors(at)) == 1 and "is not JSON" in errors(at)[0]
    # another workload's step time
    other = plan_app(tmp_path, hand_throughput(workload="mnist_mlp"))
    assert not other.exception
    assert errors(other) == ["Cannot plan: throughput: measured for workload 'mnist_mlp', but the "
                             "sweep's is 'digits_mlp'"]


def test_plan_tab_refuses_a_sweep_that_reached_nothing(tmp_path):
    # sweeps/digits_mlp with only its trials that did not reach the goal
    sweep = tmp_path / "unreached"
    sweep.mkdir()
    (sweep / "config.json").write_text((DIGITS / "config.json").read_text())
    lines = [l for l in (DIGITS / "trials.jsonl").read_text().splitlines()
             if json.loads(l)["status"] != "COMPLETE"]
    (sweep / "trials.jsonl").write_text("\n".join(lines) + "\n")
    at = plan_app(tmp_path, plan_source="a sweep directory", plan_path=str(sweep))
    assert not at.exception
    assert errors(at) == ["Cannot plan: sweep: no batch size reached the goal, so there are no "
                          "steps to plan with"]
    assert "plan" not in at.session_state


def test_plan_tab_measures_the_step_time_here_once(monkeypatch, tmp_path):
    from ui import plan_page

    monkeypatch.setattr(plan_page, "MEASURE_SECONDS_PER_REPEAT", 0.02)
    calls = []
    measure = plan_page.measure_here
    monkeypatch.setattr(plan_page, "measure_here",
                        lambda *args, **kwargs: calls.append(args[2]) or measure(*args, **kwargs))
    # sweeps/digits_mlp at three of its eight batch sizes: each batch size measured compiles its
    # own train step, and three show as well that the sweep's batch sizes are the ones measured
    sweep = tmp_path / "three"
    sweep.mkdir()
    config = json.loads((DIGITS / "config.json").read_text())
    config["batch_sizes"] = [8, 64, 512]
    (sweep / "config.json").write_text(json.dumps(config))
    lines = [l for l in (DIGITS / "trials.jsonl").read_text().splitlines()
             if json.loads(l)["batch_size"] in config["batch_sizes"]]
    (sweep / "trials.jsonl").write_text("\n".join(lines) + "\n")
    at = section_app("Plan", plan_source="a sweep directory", plan_path=str(sweep))
    assert not at.exception and not errors(at) and "plan" not in at.session_state
    assert any("at the batch sizes 8, 64, 512 on 1 device" in i.value for i in at.info)
    at.button(key="plan_measure").click().run(timeout=300)
    assert not at.exception and not errors(at)
    assert calls == [(1,)]
    plan = at.session_state["plan"]
    (record,) = at.session_state["plan_measured"].values()
    assert [(p.batch_size, p.devices) for p in record.points] == [(8, 1), (64, 1), (512, 1)]
    # the plan takes the measured step times where there are some (its other batch sizes, up to
    # the training set, take the model fitted to them)
    measured_here = {p.batch_size: p.seconds_per_step for p in record.points}
    assert {p.batch_size: p.seconds_per_step for p in plan.points
            if p.step_time_source == "measured"} == measured_here
    # kept in the session: a new price plans again without measuring again
    at.number_input(key="plan_price").set_value(3.0).run()
    assert not at.exception and calls == [(1,)]
    assert at.session_state["plan"].price_per_device_hour == 3.0
    # more devices than JAX sees: one line, nothing measured
    at.text_input(key="plan_devices").input("1,999").run()
    at.button(key="plan_measure").click().run()
    assert not at.exception and calls == [(1,), (1, 999)]
    assert len(errors(at)) == 1 and "devices must be at most" in errors(at)[0]


# ------------------------------------------------------------------------------------------------
# PNG and SVG exports of the charts (ui.charts.chart_bytes behind deferred download buttons)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height of a PNG, after decoding every pixel (a truncated file raises)."""
    from PIL import Image

    assert data.startswith(PNG_SIGNATURE)
    image = Image.open(io.BytesIO(data))
    image.load()
    return image.size


def svg_texts(data: bytes) -> list[str]:
    """The text of every element of an SVG file, which must parse as XML with an <svg> root."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(data)
    assert root.tag == f"{SVG_NS}svg"
    return [t.strip() for t in root.itertext() if t.strip()]


@pytest.fixture(scope="module")
def small_steps_chart():
    from ui import charts, explorer
    from nqm.problem import NQMConfig

    result = explorer.explore(NQMConfig(dim=300), ("sgd",), (0.0,), (4, 8, 16, 32, 64))
    return charts.steps_chart(result.points, result.lower_bound, result.summary)


def test_chart_bytes_png_is_a_picture_of_the_chart(small_steps_chart):
    from ui.charts import chart_bytes

    width, height = png_size(chart_bytes(small_steps_chart, "png"))
    # 640 px wide plot + axis + legend, 380 px tall, at scale 2
    assert width > 2 * 640 and height > 2 * 380
    small_w, small_h = png_size(chart_bytes(small_steps_chart, "png", scale=1))
    assert small_w == pytest.approx(width / 2, abs=2)
    assert small_h == pytest.approx(height / 2, abs=2)


def test_chart_bytes_svg_carries_the_axis_titles(small_steps_chart):
    from ui.charts import chart_bytes

    texts = svg_texts(chart_bytes(small_steps_chart, "svg"))
    assert "batch size B" in texts and "steps to target" in texts
    assert "SGD" in texts  # the legend
    # the same from the spec dict the app caches
    assert "batch size B" in svg_texts(chart_bytes(small_steps_chart.to_dict(), "svg"))


@pytest.mark.parametrize("fmt", ["pdf", "PNG", "jpg", ""])
def test_chart_bytes_rejects_other_formats(small_steps_chart, fmt):
    from ui.charts import chart_bytes

    with pytest.raises(ValueError, match="formats are 'png', 'svg'"):
        chart_bytes(small_steps_chart, fmt)


@pytest.fixture
def deferred_downloads(monkeypatch):
    """The callables the app registers for its deferred downloads, by file name: what a click
    on the button serves (AppTest's runtime never runs them)."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    registered = {}
    original = MediaFileManager.add_deferred

    def capture(self, data_callable, mimetype, coordinates, file_name=None, **kwargs):
        registered[file_name] = (data_callable, mimetype)
        return original(self, data_callable, mimetype, coordinates, file_name, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", capture)
    return registered


def export_buttons(at):
    return [b for b in at.get("download_button") if b.proto.label.startswith("Download the chart")]


def test_every_explorer_chart_exports_png_and_svg(deferred_downloads):
    at = run_app(dim=300, batch_range=(4, 64))
    assert not at.exception
    buttons = export_buttons(at)
    # two buttons per chart, converted only on a click, and no rerun on a click
    assert len(buttons) == 2 * len(at.get("vega_lite_chart")) == 6
    assert all(b.proto.HasField("deferred_file_id") and b.proto.ignore_rerun for b in buttons)
    assert [b.proto.label for b in buttons] == ["Download the chart (PNG)",
                                                "Download the chart (SVG)"] * 3
    # the CSV download sits first, beside the steps chart's exports
    assert at.get("download_button")[0].proto.label == "Download the curves (CSV)"
    assert sorted(deferred_downloads) == sorted(
        f"{name}.{fmt}" for name in ("nqm_steps_to_target", "nqm_tuned_rate",
                                     "nqm_noise_scale_B4") for fmt in ("png", "svg"))
    titles = {"nqm_steps_to_target": "steps to target", "nqm_tuned_rate": "tuned rate",
              "nqm_noise_scale_B4": "gradient noise scale"}
    for name, title in titles.items():
        png, mime = deferred_downloads[f"{name}.png"]
        assert mime == "image/png"
        width, height = png_size(png())
        assert width > 800 and height > 400
        svg, mime = deferred_downloads[f"{name}.svg"]
        assert mime == "image/svg+xml"
        texts = svg_texts(svg())
        assert title in texts
        assert ("step" if name.startswith("nqm_noise") else "batch size B") in texts   # x axis


def test_every_measured_chart_exports_png_and_svg(deferred_downloads):
    at = section_app("Measured curves")
    assert not at.exception and not errors(at)
    buttons = export_buttons(at)
    assert len(buttons) == 2 * len(at.get("vega_lite_chart")) == 12
    assert all(b.proto.ignore_rerun for b in at.get("download_button"))
    names = sorted(deferred_downloads)
    assert names == sorted(f"mnist_mlp_{kind}.{fmt}" for kind in
                           ("reconciliation", "quadratic_path", "vs_nqm", "calibrated_nqm",
                            "trials", "noise_scale")
                           for fmt in ("png", "svg"))
    # the faceted trials chart keeps its panel size: one panel per batch size, 3 across
    width, height = png_size(deferred_downloads["mnist_mlp_trials.png"][0]())
    assert width > 2 * 3 * 200 and height > 2 * 3 * 160
    assert "1 - momentum" in svg_texts(deferred_downloads["mnist_mlp_trials.svg"][0]())
    assert "B_simple (measured)" in svg_texts(
        deferred_downloads["mnist_mlp_noise_scale.svg"][0]())
    assert "measured (mnist_mlp)" in svg_texts(
        deferred_downloads["mnist_mlp_reconciliation.svg"][0]())

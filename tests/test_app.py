"""The Streamlit app (app.py) driven headless by streamlit.testing.v1.AppTest."""

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from nqm.explorer import curves_csv

APP = str(Path(__file__).resolve().parents[1] / "app.py")


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

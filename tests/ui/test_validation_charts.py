"""ui.validation_charts' reconciliation chart: its curves and marks from a small document (marks at
one batch size merged, far-off ones left to the table, bands clipped to the shown range), and a
spec that colours the measured curve apart and draws every layer."""

from __future__ import annotations

from ui import validation_charts as vc


def _curve(b_crit, steps):
    return {"points": [{"batch_size": b, "steps": s} for b, s in zip((4, 8, 16, 32), steps)],
            "fit": {"s_min": 10.0, "b_crit": b_crit, "r2": 1.0}}


def _doc(b_simple=20.0):
    measured = _curve(16.0, [400, 220, 130, 90])
    measured["interval"] = {"available": True, "resamples": 100, "p16": 12.0, "p84": 3000.0}
    goal = {"step": 50, "gradient": {"b_simple": b_simple},
            "b_noise": {"b_noise": {"value": 24.0, "uncertainty": 2.0}},
            "predictions": {"step_matched": {"family": "sgd", "target": 0.1,
                                             "tuned": _curve(20.0, [380, 200, 120, None])}}}
    points = [{"step": s, "cbs": c, "cbs_is_lower_bound": False} for s, c in ((5, 16), (15, 16),
                                                                               (50, 8))]
    return {"workload": "toy", "settings": {"checkpoints": ["goal"], "target_rule": "step_matched"},
            "measured": measured, "calibration_run": {"sweep_steps_to_goal": 50},
            "checkpoints": {"goal": goal},
            "branching": {"settings": {"batch_size": 4, "multipliers": [1, 2, 4],
                                       "window_examples": 64, "tolerance": 0.05, "repeats": 1},
                          "loss_kind": "training loss", "points": points}}


def test_reconciliation_tables():
    curves, marks = vc.reconciliation_tables(_doc())
    assert len(curves[curves["curve"] == "measured (toy)"]) == 4
    assert len(curves) == 7                                      # the predicted curve's None out
    by = dict(zip(marks["estimate"], marks["batch_size"]))
    # the two branch points with local CBS 16 share one rule
    assert by == {"measured B_crit": 16.0, "NQM B_crit": 20.0,
                  "local CBS, step 5; local CBS, step 15": 16.0, "local CBS, step 50": 8.0,
                  "B_simple": 20.0, "B_noise": 24.0}
    measured = marks[marks["estimate"] == "measured B_crit"].iloc[0]
    # the band is clipped to 16 x the largest batch size (32 x 16 = 512)
    assert (measured["lo"], measured["hi"]) == (12.0, 512.0)
    # a noise scale 10^4 times the batch sizes is left to the table
    _, marks = vc.reconciliation_tables(_doc(b_simple=3.2e5))
    assert "B_simple" not in set(marks["estimate"])


def test_reconciliation_figure_spec():
    spec = vc.reconciliation_figure(_doc()).to_dict()
    assert spec["resolve"]["scale"]["color"] == "independent"
    inner = spec["layer"][0]["layer"]
    assert [layer["mark"]["type"] for layer in inner] == ["line", "rect", "rule"]
    domain = inner[0]["encoding"]["color"]["scale"]["domain"]
    assert domain[0] == "measured (toy)" and domain[1].startswith("NQM predicted")
    assert inner[0]["encoding"]["y"]["scale"]["type"] == "log"
    assert spec["layer"][1]["mark"]["type"] == "rule"
    assert spec["height"] == 380


def test_reconciliation_figure_exports(tmp_path):
    names = vc.export(vc.reconciliation_figure(_doc()), tmp_path, "r")
    assert (tmp_path / names["png"]).stat().st_size > 1000
    text = (tmp_path / names["svg"]).read_text()
    assert text.startswith("<svg") and "every estimate of B_crit" in text


def _path_doc():
    def side(losses):
        return {"status": "reached", "steps_to_target": len(losses) - 1, "losses": losses}

    points = [{"batch_size": 8, "network": side([2.0, 9.0, None, 1.0, 0.5]),
               "quadratic": side([1.5, 0.8, -0.2])},
              {"batch_size": 16, "network": side([2.0, 0.4]), "quadratic": side([1.5, 0.3])}]
    return {"workload": "toy", "transfer": {"quadratic_path": {
        "target": 0.5, "loss_init": 2.0, "points": points}}}


def test_path_table_has_every_kept_loss_and_drops_what_is_not_finite():
    table = vc.path_table(_path_doc()["transfer"]["quadratic_path"])
    assert len(table) == 4 + 3 + 2 + 2
    net8 = table[(table["B"] == 8) & (table["run"] == "network")]
    assert list(net8["step"]) == [0, 1, 3, 4] and list(net8["loss"]) == [2.0, 9.0, 1.0, 0.5]


def test_path_figure_clips_spikes_and_draws_the_target():
    spec = vc.path_figure(_path_doc()).to_dict()
    lines, rule = spec["layer"]
    # y from min(0, lowest) = -0.2 to 1.5 x the network's first loss; the spike of 9 clipped there
    assert lines["encoding"]["y"]["scale"]["domain"] == [-0.2, 3.0]
    values = spec["datasets"][lines["data"]["name"]]
    assert max(v["loss"] for v in values) == 3.0
    assert spec["datasets"][rule["data"]["name"]] == [{"loss": 0.5}]
    assert lines["encoding"]["strokeDash"]["field"] == "run"

"""realnets.validation.transfer: the NQM's tuned metaparameters run on the network. On a quadratic
task the network is the NQM itself, so it follows the exact NQM's tuned curve (a single run's
first crossing within a factor of the expected steps); a learning rate past the stability edge
diverges and one far too small does not reach the goal, each a result with its verdict; the
settings and the reading follow the fixed rule."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from nqm.problem import NQMConfig
from nqm.tuning import OptimizerSpec, tune_curve
from realnets.sweeps.records import SweepConfig
from realnets.validation.transfer import (BUDGET_FACTOR, edge_ratio, headline_points,
                                          reading, run_transfer, s_min_split, transfer_settings)
from realnets.workloads import tasks
from realnets.workloads.search_space import TrialSearchSpace

SMALL = NQMConfig(dim=100, spectrum_exponent=1.0, target=0.2)


def _sweep(batch_sizes, optimizer="sgd", max_steps=3000):
    return SweepConfig(workload="nqm", batch_sizes=batch_sizes, trials=4, max_steps=max_steps,
                       goal=SMALL.target, optimizer=optimizer,
                       search=TrialSearchSpace((0.01, 2.0)), seed=3)


def _doc(points, measured, h_1=None, optimizer="sgd"):
    """A validation document with what the transfer reads (top curvature per checkpoint: h_1)."""
    h_1 = h_1 or {"goal": 1.0}
    return {"settings": {"checkpoints": ["goal"], "target_rule": "step_matched", "seed": 0,
                         "chunk_rows": None},
            "checkpoints": {name: {"nqm": {"top": {"curvature": {"value": [h]}}},
                                   "predictions": {"step_matched": {"tuned": {
                                       "points": points}}}} for name, h in h_1.items()},
            "calibration_run": {"trial_id": 5, "optimizer": optimizer},
            "measured": {"points": measured}}


def test_settings_follow_the_fixed_rule():
    points = [{"batch_size": 4, "steps": 100, "learning_rate": 0.1, "momentum": 0.9,
               "reached": True},
              {"batch_size": 8, "steps": 60, "learning_rate": 0.2, "momentum": 0.8,
               "reached": True},
              {"batch_size": 16, "steps": None, "learning_rate": 0.3, "momentum": 0.8,
               "reached": False}]
    measured = [{"batch_size": 4, "steps": 90}, {"batch_size": 8, "steps": 900},
                {"batch_size": 16, "steps": 50}]
    runs = transfer_settings(points, measured, _sweep((4, 8, 16), "momentum", max_steps=3000))
    assert [r.batch_size for r in runs] == [4, 8]                  # the NQM's unreached B: none
    assert runs[0].stop_after == BUDGET_FACTOR * 100               # 4 x max(100, 90)
    assert runs[1].stop_after == 3000                              # 4 x 900 capped by the budget
    assert (runs[0].momentum, runs[1].measured_steps) == (0.9, 900)
    # SGD sweeps run without momentum whatever the point says
    assert transfer_settings(points, measured, _sweep((4, 8)))[0].momentum is None
    assert headline_points(_doc(points, measured)) == points


def test_the_reading_names_where_the_network_does_and_does_not_follow():
    def point(b, nqm, measured, got, verdict, lr=0.1):
        return {"batch_size": b, "nqm_steps": nqm, "measured_steps": measured,
                "steps_to_goal": got, "verdict": verdict, "learning_rate": lr, "momentum": 0.5}

    doc = _doc([], [], h_1={"goal": 1.0, "init": 10.0}, optimizer="momentum")
    text = reading({"points": [point(16, 500, 500, 480, "follows"),
                               point(64, 100, 300, 110, "follows"),
                               point(128, 50, 90, 80, "follows"),
                               point(256, 30, 120, None, "diverged", lr=0.4)]}, doc)
    assert ("fewer steps than measured (or the sweep never reached the goal) at "
            "B = 64, 128, 256") in text
    # within twice the NQM's steps, but no faster than the sweep: the NQM's speed is not there
    assert ("does not beat the sweep at B = 128 (80 steps; NQM 50, measured 90), "
            "256 (diverged)") in text
    assert "1.2x at B = 64 (110 steps; NQM 100, measured 300): there the sweep's search" in text
    # 0.4 x 10 = 4 > 2 (1 + 0.5) = 3 at init's curvature, 0.4 < 3 at the goal's
    assert ("at B = 256 the NQM's step is past the stability edge of the top curvature "
            "measured at the init checkpoint (h_1 10 against 1 at goal)") in text
    assert "at the goal checkpoint" not in text
    # the run's own curvature at its end: 0.4 x 6.5 / 3 = 0.87 >= 0.8 of the edge at B = 128
    at_edge = {**point(128, 50, 90, 80, "follows", lr=0.4), "h1_end": 6.5}
    below = {**point(256, 30, 120, 100, "slower", lr=0.4), "h1_end": 5.0}   # 0.67
    text = reading({"points": [at_edge, below]}, doc)
    assert ("at B = 128 the run's own top curvature at its last step puts the NQM's step at "
            "0.87 of its stability edge") in text
    assert "B = 128, 256 the run's own" not in text
    text = reading({"points": [point(16, 500, 520, 510, "follows"),
                               point(64, 300, 100, 320, "follows")]}, doc)
    assert "the measured steps at B = 64 (the network descends faster" in text
    assert "within 1.5x" not in text
    assert "within 1.5x of the measured ones at every batch size" in reading(
        {"points": [point(16, 500, 520, 510, "follows")]}, doc)
    assert reading({"points": []}, doc).startswith("no run")
    # a batch size the sweep never reached: the NQM is faster there, and a run that reaches the
    # goal beats the sweep; one that does not, does not
    text = reading({"points": [point(512, 12, None, 40, "slower"),
                               point(1024, 10, None, None, "not reached")]}, doc)
    assert "(or the sweep never reached the goal) at B = 512, 1024" in text
    assert "does not beat the sweep at B = 1024 (not reached)" in text
    assert "1.2x at B = 512 (40 steps; NQM 12, measured not reached)" in text
    assert "every batch size" not in text


@pytest.mark.parametrize("optimizer, nesterov", [("sgd", False), ("momentum", False),
                                                 ("nesterov", True)])
def test_the_stability_edge_is_optaxs(optimizer, nesterov):
    import optax

    h, b = 3.0, 0.0 if optimizer == "sgd" else 0.8
    for ratio, diverges in ((0.97, False), (1.03, True)):
        # the learning rate whose edge ratio is `ratio`, run by optax on h theta^2 / 2
        a = ratio / edge_ratio(1.0, b, h, optimizer)
        assert edge_ratio(a, b, h, optimizer) == pytest.approx(ratio)
        opt = optax.sgd(a, momentum=b or None, nesterov=nesterov)
        theta = np.float64(1.0)
        state = opt.init(theta)
        for _ in range(3000):
            update, state = opt.update(h * theta, state)
            theta = theta + update
        assert (not abs(theta) < 1.0) == diverges, (optimizer, ratio, theta)   # nan: diverged
    assert edge_ratio(0.1, 0.9, 3.0, "adam") is None


def test_on_a_quadratic_the_network_follows_the_exact_nqm_and_bad_rates_are_results():
    task = tasks.quadratic_task(SMALL.problem())
    batch_sizes = (4, 32)
    tuned = tune_curve(SMALL, OptimizerSpec("sgd"), batch_sizes)
    points = [{"batch_size": p.batch_size, "steps": p.steps, "learning_rate": p.learning_rate,
               "momentum": None, "reached": True} for p in tuned.points]
    h_max = float(np.max(SMALL.problem().curvature_D))
    points += [
        # far past the stability edge 2 / h_max: diverges
        {"batch_size": 64, "steps": 20, "learning_rate": 20.0 / h_max, "momentum": None,
         "reached": True},
        # 300 times too small a rate: not at the goal within 4 x 80 steps
        {"batch_size": 128, "steps": 20, "learning_rate": points[1]["learning_rate"] / 300,
         "momentum": None, "reached": True}]
    measured = [{"batch_size": b, "steps": s} for b, s in ((4, None), (32, None), (64, 80),
                                                          (128, 80))]
    sample = task.draw_batch(np.random.default_rng(0), 256)
    out = run_transfer(task, _sweep((4, 32, 64, 128)), _doc(points, measured, {"goal": h_max}),
                       sample, devices=jax.devices("cpu")[:1])
    by = {p["batch_size"]: p for p in out["points"]}
    assert out["trial_id"] == 5
    for b in batch_sizes:
        # the network is the NQM: one run's first crossing of the goal, near the expected one
        assert by[b]["verdict"] == "follows"
        assert 0.5 <= by[b]["steps_to_goal"] / by[b]["nqm_steps"] <= 1.5, by[b]
    # the quadratic's Hessian is diag(h) wherever the run ended: its h_1 is the top curvature
    for b in (4, 32, 128):
        assert by[b]["h1_end"] == pytest.approx(h_max, rel=1e-4), b
        assert by[b]["h1_end_residual"] < 1e-3 * h_max
    assert by[64]["verdict"] == "diverged" and by[64]["status"] == "INFEASIBLE"
    assert by[64]["h1_end"] is None                     # nothing to measure on a diverged run
    assert by[128]["verdict"] == "not reached"
    assert by[128]["steps_run"] == BUDGET_FACTOR * 80
    assert "does not beat the sweep at B = 64 (diverged), 128 (not reached)" in out["reading"]


@pytest.mark.parametrize("bad", [1, "yes", None])
def test_the_transfer_setting_is_a_boolean(bad):
    from realnets.validation.settings import ValidationConfig

    with pytest.raises(ValueError, match="transfer must be true or false"):
        ValidationConfig(transfer=bad)


def test_the_s_min_split_is_the_fits_through_the_reference_point():
    doc = _doc([], [])
    doc["measured"]["fit"] = {"s_min": 20.0, "b_crit": 80.0}
    doc["checkpoints"]["goal"]["predictions"]["step_matched"]["tuned"]["fit"] = {
        "s_min": 4.0, "b_crit": 600.0}
    doc["calibration_run"].update(batch_size=16, sweep_steps_to_goal=120)
    split = s_min_split(doc)
    assert split["ratio"] == 5.0
    # S(B) = S_min (1 + B_crit / B) through (16, 120): B_crit = 16 (120 / S_min - 1)
    assert (split["b_crit_measured"], split["b_crit_predicted"]) == (80.0, 464.0)
    del doc["measured"]["fit"]
    assert s_min_split(doc) is None

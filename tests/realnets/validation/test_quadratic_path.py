"""realnets.validation.quadratic_path: the network against its own quadratic at the goal. A
full-batch descent on a 1-D quadratic takes the closed-form number of steps (and diverges past
the stability edge); the Taylor quadratic is the hand-computed expansion of a quartic; on a
quadratic task the network and its quadratic descend alike (path 1); on a quartic whose
curvature at the start is past the step's edge the network diverges while its quadratic at the
goal converges, and the reading says the loss is not quadratic along the way."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nqm.problem import NQMConfig
from realnets.calibration import hessian_products
from realnets.sweeps.records import SweepConfig
from realnets.validation.quadratic_path import (BUDGET_FACTOR, PATH_FACTOR, PathRun, descend,
                                                path_optimizer, path_reading, path_settings,
                                                run_quadratic_path, taylor_quadratic)
from realnets.validation.report import path_markdown
from realnets.workloads import tasks
from realnets.workloads.search_space import TrialSearchSpace

CPU = jax.devices("cpu")[:1]


def _sweep(optimizer="sgd", max_steps=3000):
    return SweepConfig(workload="nqm", batch_sizes=(4, 8, 16), trials=4, max_steps=max_steps,
                       goal=0.1, optimizer=optimizer, search=TrialSearchSpace((0.01, 2.0)),
                       seed=3)


def _doc(points, measured, loss_goal=1.0, transfer=None):
    doc = {"settings": {"checkpoints": ["goal"], "target_rule": "step_matched",
                        "chunk_rows": None, "seed": 0},
           "checkpoints": {"goal": {"predictions": {"step_matched": {"tuned": {
               "points": points}}}}},
           "calibration_run": {"train_loss_goal": loss_goal},
           "measured": {"points": measured}}
    if transfer is not None:
        doc["transfer"] = {"points": transfer}
    return doc


def _point(b, steps, lr, momentum=None):
    return {"batch_size": b, "steps": steps, "learning_rate": lr, "momentum": momentum,
            "reached": steps is not None}


def test_settings_take_the_batch_sizes_where_the_nqm_is_faster():
    points = [_point(4, 100, 0.1, 0.9), _point(8, 20, 0.2, 0.8), _point(16, 10, 0.3, 0.7),
              _point(32, None, 0.4, 0.7)]
    measured = [{"batch_size": 4, "steps": 140}, {"batch_size": 8, "steps": 30},
                {"batch_size": 16, "steps": None}, {"batch_size": 32, "steps": 9}]
    doc = _doc(points, measured, transfer=[{"batch_size": 8, "steps_to_goal": 41}])
    runs = path_settings(doc, _sweep("momentum", max_steps=1000))
    # 140 < 1.5 x 100: not taken; 30 >= 1.5 x 20 and a B the sweep never reached: taken; the
    # NQM's own unreached B: not
    assert [r.batch_size for r in runs] == [8, 16]
    assert (runs[0].transfer_steps, runs[1].transfer_steps) == (41, None)
    assert runs[0].step_limit == BUDGET_FACTOR * 30 and runs[1].step_limit == BUDGET_FACTOR * 10
    assert runs[0].momentum == 0.8
    assert path_settings(doc, _sweep("sgd", max_steps=50))[0].step_limit == 50   # the budget
    assert path_settings(doc, _sweep("sgd"))[0].momentum is None


@pytest.mark.parametrize("lr,status", [(0.3, "reached"), (2.5, "diverged"), (1e-4, "not reached")])
def test_a_descent_on_a_1d_quadratic_takes_the_closed_form_steps(lr, status):
    h, theta0, target = 2.0, 3.0, 1e-3

    def value_and_grad(theta):
        return 0.5 * h * float(theta @ theta), h * theta

    got, rise = descend(value_and_grad, np.array([theta0]), optax.sgd(lr), target,
                        step_limit=60)
    assert got.status == status
    if status == "diverged":          # the loss rises from the start: 9 -> 16 x 9
        assert rise.step == 0 and rise.rise == pytest.approx(15 * 9.0)
        assert rise.theta_P[0] == theta0
    else:
        assert rise is None
    loss0 = 0.5 * h * theta0 ** 2
    # L_t = L_0 (1 - a h)^(2t): the first t with L_t <= target
    factor = (1.0 - lr * h) ** 2
    if status == "reached":
        assert got.steps_to_target == math.ceil(math.log(target / loss0) / math.log(factor))
        np.testing.assert_allclose(got.losses, loss0 * factor ** np.arange(len(got.losses)),
                                   rtol=1e-5)
    elif status == "diverged":       # factor 16 per step: past 1e6 x L_0 at step 5
        assert got.steps_to_target is None and len(got.losses) == 6
    else:
        assert len(got.losses) == 61 and got.steps_to_target is None


def _quartic_task(dim):
    """Loss mean_j sum_i (theta_i^4 / 4 + x_ji theta_i): not quadratic, its Taylor expansion at
    theta_g known by hand (gradient theta^3 + mean x, Hessian diag(3 theta^2))."""
    def loss_fn(params, rows):
        theta = params["theta"]
        return jnp.mean(jnp.sum(0.25 * theta ** 4 + rows["x"] * theta, axis=-1))

    return tasks.Task(init_params=lambda key: {"theta": jnp.ones(dim)}, loss_fn=loss_fn,
                      metric="loss")


def test_the_taylor_quadratic_is_the_second_order_expansion():
    rng = np.random.default_rng(0)
    task = _quartic_task(3)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    theta_g = np.array([0.5, -1.0, 2.0], np.float32)
    hessian = hessian_products.hvp(task.loss_fn, {"theta": theta_g}, {"x": x}, devices=CPU)
    at_g = float(np.sum(0.25 * theta_g.astype(float) ** 4 + x.mean(0) * theta_g))
    q = taylor_quadratic(hessian, at_g)
    theta = rng.normal(size=3)
    d = theta - theta_g
    grad_g = theta_g.astype(float) ** 3 + x.mean(0)
    h = 3.0 * theta_g.astype(float) ** 2
    value, grad = q(theta)
    assert value == pytest.approx(at_g + grad_g @ d + 0.5 * np.sum(h * d * d), rel=1e-5)
    np.testing.assert_allclose(grad, grad_g + h * d, rtol=1e-5)


def test_on_a_quadratic_task_the_network_descends_as_its_own_quadratic():
    problem = NQMConfig(dim=20, spectrum_exponent=1.0, target=0.2).problem()
    task = tasks.quadratic_task(problem)
    sample = task.draw_batch(np.random.default_rng(1), 64)
    init = {"theta": np.asarray(task.init_params(jax.random.key(0))["theta"])}
    goal = {"theta": 0.1 * init["theta"]}
    loss_goal = float(task.loss_fn(goal, sample))
    doc = _doc([_point(4, 5, 0.5, 0.5)], [{"batch_size": 4, "steps": 50}], loss_goal,
               transfer=[{"batch_size": 4, "steps_to_goal": 40}])
    out = run_quadratic_path(task, _sweep("momentum"), doc, init, goal, sample, devices=CPU)
    (p,) = out["points"]
    assert out["loss_init"] == pytest.approx(out["quadratic_init"], rel=1e-5)
    assert p["network"]["status"] == p["quadratic"]["status"] == "reached"
    assert p["network"]["steps_to_target"] == p["quadratic"]["steps_to_target"]
    np.testing.assert_allclose(p["network"]["losses"], p["quadratic"]["losses"], rtol=1e-4)
    assert p["path"] == 1.0
    assert out["loss_goal"] == pytest.approx(loss_goal, rel=1e-6)
    assert "descends within 2x of its own quadratic" in out["reading"]
    # the report's table: one row, the steps of both descents
    text = "\n".join(path_markdown({"transfer": {"quadratic_path": out}}))
    steps = p["network"]["steps_to_target"]
    assert f"| 4 | 5 | 50 | 40 | {steps} | {steps} |" in text


@pytest.mark.parametrize("optimizer,momentum,edge", [("sgd", None, 2.0),
                                                     ("momentum", 0.5, 3.0)])
def test_on_a_quartic_past_the_edge_at_the_start_the_network_diverges_and_its_quadratic_does_not(
        optimizer, momentum, edge):
    task = _quartic_task(1)
    sample = {"x": np.zeros((4, 1), np.float32)}
    init, goal = {"theta": np.array([2.0], np.float32)}, {"theta": np.array([0.5], np.float32)}
    # curvature 3 theta^2: 12 at the start, 0.75 at the goal; the edge of a h: 2 for SGD,
    # 2 (1 + b) = 3 for heavy ball with b = 0.5
    doc = _doc([_point(4, 3, 1.0, momentum)], [{"batch_size": 4, "steps": 30}], 0.25 * 0.5 ** 4)
    out = run_quadratic_path(task, _sweep(optimizer), doc, init, goal, sample, devices=CPU)
    (p,) = out["points"]
    assert p["network"]["status"] == "diverged" and p["quadratic"]["status"] == "reached"
    assert p["path"] is None
    # the first step (the same for both: v_0 = g) takes theta from 2 to -6: the loss goes from
    # 4 to 324 at step 0, where h_1 = 12
    rise = p["first_rise"]
    assert rise["step"] == 0 and rise["rise"] == pytest.approx(0.25 * 6 ** 4 - 4.0)
    assert rise["h1"] == pytest.approx(12.0, rel=1e-4)
    assert rise["edge_ratio"] == pytest.approx(12.0 / edge, rel=1e-4)
    assert ("past the stability edge of the top curvature there (a h_1 / edge) at B = 4 "
            f"({12 / edge:.3g} at step 0)") in out["reading"]
    assert ("not quadratic between the initialisation and the goal" in out["reading"]
            and "B = 4 (network diverged, quadratic" in out["reading"])
    row = [line for line in path_markdown({"transfer": {"quadratic_path": out}})
           if line.startswith("| 4 |")][0]
    assert row.startswith("| 4 | 3 | 30 | - | - (diverged) |")
    assert f"| 0, 12, {12 / edge:.3g} |" in row


def test_batch_sizes_with_the_same_step_share_their_descents():
    task = _quartic_task(1)
    sample = {"x": np.zeros((4, 1), np.float32)}
    init, goal = {"theta": np.array([1.0], np.float32)}, {"theta": np.array([0.5], np.float32)}
    doc = _doc([_point(4, 3, 0.1), _point(8, 3, 0.1)],
               [{"batch_size": 4, "steps": 30}, {"batch_size": 8, "steps": 30}],
               0.25 * 0.5 ** 4)
    out = run_quadratic_path(task, _sweep("sgd"), doc, init, goal, sample, devices=CPU)
    first, second = out["points"]
    assert second["network"] == first["network"] and second["quadratic"] == first["quadratic"]
    assert first["network"]["status"] == "reached" and first["first_rise"] is None
    # L = theta^4 / 4 by GD from 1 with a = 0.1 (theta <- theta - a theta^3), to theta <= 0.5
    theta, steps = 1.0, 0
    while theta > 0.5:
        theta, steps = theta - 0.1 * theta ** 3, steps + 1
    assert first["network"]["steps_to_target"] == steps
    row = [line for line in path_markdown({"transfer": {"quadratic_path": out}})
           if line.startswith("| 8 |")][0]
    assert "| 0 of " in row and row.count("| - |") >= 1     # never went up: no curvature


def test_the_reading_follows_the_path_factor():
    def point(b, net, quad, losses=(2.0, 1.0)):
        def side(s):
            return ({"status": "reached", "steps_to_target": s} if isinstance(s, int)
                    else {"status": s, "steps_to_target": None})
        return {"batch_size": b, "network": {**side(net), "losses": list(losses)},
                "quadratic": side(quad)}

    n = int(PATH_FACTOR * 10)
    text = path_reading({"points": [point(8, n, 10), point(16, n - 1, 10),
                                    point(32, "not reached", 4, (2.0, 5.0, None, 1.0, 3.0)),
                                    point(64, 9, "diverged")]})
    assert f"B = 8 (network {n}, quadratic 10), 32 (network not reached, quadratic 4)" in text
    # the non-finite loss left out: 2, 5, 1, 3 rises twice in 3 steps, to 2.5x its start
    assert "goes up along the way at B = 32 (at 2 of 3 steps, up to 2.5x its start)" in text
    with_edge = {"points": [{**point(8, "not reached", 4, (2.0, 3.0)),
                             "first_rise": {"step": 0, "edge_ratio": 1.5}},
                            {**point(16, "not reached", 4, (2.0, 3.0)),
                             "first_rise": {"step": 3, "edge_ratio": 0.5}},
                            {**point(32, "not reached", 4, (2.0, 3.0)),     # Adam: no edge
                             "first_rise": {"step": 1, "edge_ratio": None}},
                            {**point(64, "not reached", 4, (2.0, 3.0)),     # rose after the
                             "first_rise": {"step": 500, "edge_ratio": 2.0}}]}  # kept losses
    edges = path_reading(with_edge)
    assert "goes up along the way at B = 8 (" in edges and ", 64 (at 1 of 1 steps" in edges
    assert "past the stability edge of the top curvature there (a h_1 / edge) at B = 8 (1.5 at " \
        "step 0), 64 (2 at step 500)" in edges
    assert "At B = 16 (0.5 at step 3) the step is within that edge" in edges
    assert "32 (" not in edges.split("Where it first went up")[1]
    assert "At B = 8 it falls at every step, only slower" in text
    assert f"At B = 16 (network {n - 1}, quadratic 10) the network descends within" in text
    assert "At B = 64 (network 9, quadratic diverged) the quadratic itself does not" in text
    assert "no batch size to take apart" in path_reading({"points": []})


@pytest.mark.parametrize("optimizer", ["momentum", "nesterov"])
def test_the_optimizer_is_the_sweeps_with_the_nqms_momentum(optimizer):
    # heavy ball on L = h theta^2 / 2, by hand: v <- b v + g, theta <- theta - a v (Nesterov:
    # theta <- theta - a (g + b v)), with the NQM's momentum b, not 1 - b
    a, b, h = 0.1, 0.9, 2.0
    run = PathRun(batch_size=4, learning_rate=a, momentum=b, nqm_steps=3, measured_steps=9,
                  transfer_steps=None, step_limit=36)
    got, _ = descend(lambda t: (0.5 * h * float(t @ t), h * t), np.array([1.0]),
                     path_optimizer(_sweep(optimizer), run), target=-1.0, step_limit=6)
    theta, v, want = 1.0, 0.0, []
    for _ in range(7):
        want.append(0.5 * h * theta ** 2)
        g = h * theta
        v = b * v + g
        theta -= a * (g + b * v if optimizer == "nesterov" else v)
    np.testing.assert_allclose(got.losses, want, rtol=1e-5)
    assert got.status == "not reached" and len(got.losses) == 7


def test_without_a_batch_size_to_take_apart_nothing_is_measured():
    doc = _doc([_point(4, 10, 0.1)], [{"batch_size": 4, "steps": 12}], 0.5)
    out = run_quadratic_path(None, _sweep(), doc, None, None, None)
    assert out.pop("seconds") >= 0
    assert out == {"target": 0.5, "points": [],
                   "reading": path_reading({"points": []})}
    text = "\n".join(path_markdown({"transfer": {"quadratic_path": out}}))
    assert "no batch size to take apart" in text and "|" not in text


def test_a_stop_goal_ends_the_descent_at_its_first_step_before_the_loss_target():
    # gradient descent on L = theta^2 / 2 from 1 at rate 0.25: theta_t = 0.75^t, by hand
    fn = lambda t: (0.5 * float(t @ t), t)      # noqa: E731
    seen = []

    def stop(theta):
        seen.append(float(theta[0]))
        return theta[0] < 0.1                   # 0.75^8 = 0.100, 0.75^9 = 0.075

    got, _ = descend(fn, np.array([1.0]), optax.sgd(0.25), target=1e-4, step_limit=50, stop=stop)
    assert (got.status, got.steps_to_target) == ("reached", 9)
    np.testing.assert_allclose(seen, 0.75 ** np.arange(10), rtol=1e-6)
    # the loss target first (0.5 x 0.75^(2t) <= 0.02 from t = 6): the stop goal is not needed
    got, _ = descend(fn, np.array([1.0]), optax.sgd(0.25), target=0.02, step_limit=50, stop=stop)
    assert got.steps_to_target == 6
    # never met within the limit: not reached
    got, _ = descend(fn, np.array([1.0]), optax.sgd(0.25), target=-1.0, step_limit=5,
                     stop=lambda t: False)
    assert got.status == "not reached"

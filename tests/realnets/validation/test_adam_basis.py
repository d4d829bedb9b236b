"""realnets.validation.adam_basis: Adam per weight against Adam per eigenvector. The rotated
transformation with the identity is Adam itself; with an orthonormal U it is Adam run on the
rotated problem (an independent loop in those coordinates), which differs from Adam per weight,
while SGD is the same in both bases. The formed Hessian is jax.hessian's. On a quadratic task with
a non-diagonal Hessian the network is its own quadratic (the same steps per basis) and the
per-eigenvector descent is Adam on the diagonal problem; on a loss whose Hessian is diagonal in the
weights the two bases give the same steps (coordinates 1). The reading follows its factor."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from realnets.calibration import hessian_products
from realnets.cli import main as realnets_main
from realnets.sweeps.records import SweepConfig
from realnets.validation import adam_basis
from realnets.validation.adam_basis import (EXPLAINS_FACTOR, MAX_DENSE_PARAMS, TOP_D,
                                            basis_reading, dense_hessian, refusal, rotated,
                                            run_adam_basis, spectrum_record)
from realnets.validation.quadratic_path import BUDGET_FACTOR, descend, path_settings
from realnets.workloads import tasks
from realnets.workloads.search_space import TrialSearchSpace

CPU = jax.devices("cpu")[:1]
ROOT = Path(__file__).resolve().parents[3]


def _orthonormal(p, seed=0):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(p, p)))
    return q


def _run(transform, grads, params):
    """The updates of `transform` for a fixed sequence of gradients, (steps, P)."""
    state = transform.init(params)
    out = []
    for g in grads:
        u, state = transform.update(jnp.asarray(g, jnp.float32), state, params)
        out.append(np.asarray(u))
    return np.array(out)


def test_rotated_with_the_identity_is_the_inner_transformation():
    grads = np.random.default_rng(1).normal(size=(6, 5)).astype(np.float32)
    params = jnp.zeros(5, jnp.float32)
    adam = optax.adam(0.05, b1=0.7)
    np.testing.assert_allclose(_run(rotated(adam, np.eye(5)), grads, params),
                               _run(adam, grads, params), rtol=1e-6, atol=1e-8)


def test_rotated_adam_is_adam_on_the_rotated_problem_and_differs_from_adam_per_weight():
    p = 4
    u_PP = _orthonormal(p)
    h = np.array([4.0, 1.0, 0.25, 0.05])
    a_PP = u_PP @ np.diag(h) @ u_PP.T
    theta0 = np.array([1.0, -2.0, 0.5, 3.0])
    lr, steps = 0.1, 12

    def trajectory(transform, theta):      # theta_t on 1/2 theta^T A theta, float32 steps
        state = transform.init(jnp.asarray(theta, jnp.float32))
        out = [theta]
        for _ in range(steps):
            u, state = transform.update(jnp.asarray(a_PP @ theta, jnp.float32), state)
            theta = theta + np.asarray(u, np.float64)
            out.append(theta)
        return np.array(out)

    eigen = trajectory(rotated(optax.adam(lr), u_PP), theta0)
    # independently: Adam per coordinate on the diagonal problem phi = U^T theta
    phi, state, by_hand = u_PP.T @ theta0, None, [theta0]
    adam = optax.adam(lr)
    state = adam.init(jnp.asarray(phi, jnp.float32))
    for _ in range(steps):
        u, state = adam.update(jnp.asarray(h * phi, jnp.float32), state)
        phi = phi + np.asarray(u, np.float64)
        by_hand.append(u_PP @ phi)
    np.testing.assert_allclose(eigen, np.array(by_hand), atol=2e-5)
    per_weight = trajectory(optax.adam(lr), theta0)
    assert np.max(np.abs(per_weight - eigen)) > 0.05            # Adam depends on the basis
    sgd = trajectory(optax.sgd(lr), theta0)                        # SGD does not
    np.testing.assert_allclose(trajectory(rotated(optax.sgd(lr), u_PP), theta0), sgd, atol=1e-5)


def _quadratic_task(a_PP):
    """Loss mean_j 1/2 (theta - x_j)^T A (theta - x_j): Hessian A everywhere."""
    a = jnp.asarray(a_PP, jnp.float32)

    def loss_fn(params, rows):
        d = params["theta"] - rows["x"]
        return jnp.mean(0.5 * jnp.einsum("ni,ij,nj->n", d, a, d))

    p = a_PP.shape[0]
    return tasks.Task(init_params=lambda key: {"theta": jnp.ones(p)}, loss_fn=loss_fn,
                      metric="loss")


def test_the_formed_hessian_is_jax_hessian():
    rng = np.random.default_rng(2)
    w = rng.normal(size=(3, 2)).astype(np.float32)
    x = rng.normal(size=(16, 3)).astype(np.float32)
    y = rng.integers(0, 2, size=16)

    def loss_fn(params, rows):                 # softmax regression, not quadratic
        logits = rows["x"] @ params["w"]
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, rows["y"]))

    params = {"w": w}
    h_PP = dense_hessian(hessian_products.hvp(loss_fn, params, {"x": x, "y": y}, devices=CPU))
    want = jax.hessian(lambda v: loss_fn({"w": v.reshape(3, 2)}, {"x": x, "y": y}))(
        jnp.asarray(w.ravel()))
    np.testing.assert_allclose(h_PP, np.asarray(want), atol=1e-6)
    np.testing.assert_array_equal(h_PP, h_PP.T)


def _sweep(optimizer="adam", max_steps=3000):
    return SweepConfig(workload="nqm", batch_sizes=(4, 8, 16), trials=4, max_steps=max_steps,
                       goal=0.1, optimizer=optimizer, search=TrialSearchSpace((0.01, 2.0)),
                       seed=3)


def _doc(points, measured, loss_goal, num_params=4, optimizer="adam", family="adam",
         checkpoint="goal"):
    return {"workload": "nqm", "sweep_config": {"optimizer": optimizer},
            "settings": {"checkpoints": [checkpoint], "target_rule": "step_matched",
                         "chunk_rows": None, "seed": 0},
            "checkpoints": {checkpoint: {"num_params": num_params,
                                         "nqm": {"dim": 3, "tail": {"floor": 0.2}},
                                         "predictions": {"step_matched": {
                                             "family": family, "tuned": {"points": points}}}}},
            "calibration_run": {"train_loss_goal": loss_goal},
            "measured": {"points": measured}}


def _point(b, steps, lr, b1):
    return {"batch_size": b, "steps": steps, "learning_rate": lr, "momentum": b1,
            "reached": steps is not None}


def test_settings_take_every_reached_batch_size_and_the_refusals_name_the_limit():
    doc = _doc([_point(4, 10, 0.1, 0.9), _point(8, None, 0.1, 0.9), _point(16, 6, 0.2, 0.5)],
               [{"batch_size": 4, "steps": 12}, {"batch_size": 8, "steps": 12},
                {"batch_size": 16, "steps": None}], 1.0)
    runs = path_settings(doc, _sweep(max_steps=100), every=True)
    # every reached batch size; the quadratic path's own choice leaves out B = 4, where the NQM
    # is not 1.5x faster than measured
    assert [r.batch_size for r in runs] == [4, 16]
    assert path_settings(doc, _sweep(max_steps=100)) == [runs[1]]
    assert runs[0].step_limit == BUDGET_FACTOR * 12 and runs[1].step_limit == BUDGET_FACTOR * 6
    assert path_settings(doc, _sweep(max_steps=30), every=True)[0].step_limit == 30
    assert runs[1].momentum == 0.5 and runs[1].measured_steps is None
    assert refusal(doc) is None
    assert "Adam sweeps" in refusal(_doc([], [], 1.0, optimizer="momentum"))
    assert "headline NQM to be the Adam one" in refusal(_doc([], [], 1.0, family="momentum"))
    assert "at the goal checkpoint" in refusal(_doc([], [], 1.0, checkpoint="init"))
    big = _doc([], [], 1.0, num_params=MAX_DENSE_PARAMS + 1)
    assert f"at most {MAX_DENSE_PARAMS:,} parameters" in refusal(big)
    with pytest.raises(ValueError, match="at most"):
        run_adam_basis(None, _sweep(), big, None, None, {})


def test_rotated_over_part_of_a_basis_moves_only_its_span():
    u_PK = _orthonormal(5, seed=4)[:, :2]
    g = np.random.default_rng(5).normal(size=5)
    (step,) = _run(rotated(optax.sgd(0.3), u_PK), [g], np.zeros(5, np.float32))
    np.testing.assert_allclose(step, -0.3 * u_PK @ (u_PK.T @ g), rtol=1e-6)


def test_the_spectrum_counts_negative_curvature_beyond_rounding():
    h = np.array([-0.5, -1e-9, 0.0, 0.3, 2.0])
    got = spectrum_record(h, {"dim": 2, "tail": {"floor": 0.25}})
    assert got == {"top": 2.0, "bottom": -0.5, "above_floor": 2, "negative": 1, "nqm_dim": 2}


def test_on_a_quadratic_task_the_network_is_its_quadratic_and_eigenvector_adam_is_diagonal_adam(
        monkeypatch):
    p = 4
    u_PP = _orthonormal(p, seed=3)
    h = np.array([3.0, 1.0, 0.3, 0.1])
    a_PP = u_PP @ np.diag(h) @ u_PP.T
    task = _quadratic_task(a_PP)
    sample = {"x": np.zeros((8, p), np.float32)}
    init = {"theta": np.array([1.0, -1.0, 2.0, 0.5], np.float32)}
    goal = {"theta": np.array([0.1, 0.0, -0.1, 0.05], np.float32)}
    target = 0.02
    # the same rate, b1 and step limit (4 x 30) at both batch sizes
    doc = _doc([_point(4, 30, 0.05, 0.9), _point(8, 30, 0.05, 0.9)],
               [{"batch_size": 4, "steps": 30}, {"batch_size": 8, "steps": 10}], target)
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return descend(*args, **kwargs)

    monkeypatch.setattr(adam_basis, "descend", counted)
    out = run_adam_basis(task, _sweep(), doc, init, goal, sample, devices=CPU)
    assert len(calls) == 5            # four and the top d, once: B = 8 shares B = 4's
    assert out["num_params"] == p and out["spectrum"]["top"] == pytest.approx(3.0, rel=1e-5)
    assert out["spectrum"]["above_floor"] == 3 and out["spectrum"]["nqm_dim"] == 3
    first, second = out["points"]
    assert second["network"] == first["network"] and second["quadratic"] == first["quadratic"]
    for basis in ("per_weight", "per_eigenvector"):
        net, quad = first["network"][basis], first["quadratic"][basis]
        assert net["status"] == quad["status"] == "reached"
        assert net["steps_to_target"] == quad["steps_to_target"]
    # per eigenvector: Adam on phi = U^T theta with loss 1/2 sum h_i phi_i^2
    theta0 = init["theta"].astype(np.float64)
    got, _ = descend(lambda phi: (0.5 * float(h @ phi ** 2), h * phi), u_PP.T @ theta0,
                     optax.adam(0.05, b1=0.9), target, first["step_limit"])
    assert first["quadratic"]["per_eigenvector"]["steps_to_target"] == got.steps_to_target
    per_weight, _ = descend(lambda t: (0.5 * float(t @ a_PP @ t), a_PP @ t), theta0,
                            optax.adam(0.05, b1=0.9), target, first["step_limit"])
    assert first["quadratic"]["per_weight"]["steps_to_target"] == per_weight.steps_to_target
    assert first["coordinates"] == pytest.approx(got.steps_to_target / per_weight.steps_to_target)
    # the NQM's d = 3 top directions only: the smallest (h = 0.1) stays at its start
    phi0 = u_PP.T @ theta0
    top = [1, 2, 3]          # eigh sorts ascending: the top three are the last
    order = np.argsort(h)
    h_sorted, phi_sorted = h[order], phi0[order]
    frozen = 0.5 * h_sorted[0] * phi_sorted[0] ** 2
    trunc, _ = descend(lambda f: (frozen + 0.5 * float(h_sorted[top] @ f ** 2), h_sorted[top] * f),
                       phi_sorted[top], optax.adam(0.05, b1=0.9), target, first["step_limit"])
    assert first["quadratic"][TOP_D]["status"] == trunc.status
    assert first["quadratic"][TOP_D]["steps_to_target"] == trunc.steps_to_target
    np.testing.assert_allclose(first["quadratic"][TOP_D]["losses"], trunc.losses, rtol=1e-4)
    assert TOP_D not in first["network"]
    # the lowest loss with the top three moving: the frozen direction's share (the goal is 0)
    assert out["top_d_floor"] == pytest.approx(frozen, rel=1e-4)
    assert first["nqm_over_eigenvector"] == pytest.approx(30 / got.steps_to_target)
    # only B = 8 is slow (30 >= 1.5 x 10): the reading speaks of it alone
    assert "B = 8 (" in out["reading"] and "B = 4 (" not in out["reading"]
    assert f"is {frozen:.4g} against the target 0.02: above it" in out["reading"]


def test_where_the_hessian_is_diagonal_in_the_weights_both_bases_take_the_same_steps():
    h = np.array([2.0, 0.5, 0.1])
    task = _quadratic_task(np.diag(h))
    sample = {"x": np.zeros((4, 3), np.float32)}
    init = {"theta": np.array([1.0, -2.0, 3.0], np.float32)}
    goal = {"theta": np.zeros(3, np.float32)}
    doc = _doc([_point(4, 40, 0.1, 0.8)], [{"batch_size": 4, "steps": 10}], 0.05, num_params=3)
    (point,) = run_adam_basis(task, _sweep(), doc, init, goal, sample, devices=CPU)["points"]
    assert point["quadratic"]["per_weight"]["status"] == "reached"
    assert point["coordinates"] == 1.0 and point["coordinates_network"] == 1.0
    np.testing.assert_allclose(point["quadratic"]["per_eigenvector"]["losses"],
                               point["quadratic"]["per_weight"]["losses"], rtol=1e-5)


def _reading_point(b, nqm, measured, weight, eigen):
    def side(s):
        return {"status": "reached" if isinstance(s, int) else s,
                "steps_to_target": s if isinstance(s, int) else None, "losses": ()}
    return {"batch_size": b, "nqm_steps": nqm, "measured_steps": measured,
            "quadratic": {"per_weight": side(weight), "per_eigenvector": side(eigen)}}


def test_the_reading_follows_the_factor():
    at_factor = int(EXPLAINS_FACTOR * 4)
    record = {"points": [
        _reading_point(4, 10, 10, 4, 40),                     # NQM not slow: not read
        _reading_point(8, 30, 10, 4, at_factor),              # eigen 1.5x weight: explained
        _reading_point(16, 30, 10, 4, at_factor - 1),         # below the factor: not
        _reading_point(32, 30, 10, 4, "not reached"),         # eigen never gets there: explained
        _reading_point(64, 30, 10, "not reached", 3)]}        # nothing to compare
    text = basis_reading(record)
    explained = text.split("the coordinates explain")[0]
    assert "B = 8 (" in explained and "32 (quadratic per eigenvector not reached" in explained
    assert "B = 4 (" not in text
    assert "B = 16 (quadratic per eigenvector 5, per weight 4; NQM 30) Adam per eigenvector " \
           "needs fewer than" in text
    assert "At B = 64 (" in text and "nothing to compare" in text
    assert "no miss" in basis_reading({"points": [_reading_point(4, 10, 10, 4, 40)]})
    assert "top directions moving" not in text           # no truncated descent recorded
    # the truncated descent against every direction, by the same factor
    cut = [_reading_point(8, 30, 10, 4, 2), _reading_point(16, 30, 10, 4, 2)]
    cut[0]["quadratic"][TOP_D] = {"status": "reached", "steps_to_target": 2}
    cut[1]["quadratic"][TOP_D] = {"status": "not reached", "steps_to_target": None}
    text = basis_reading({"points": cut})
    assert ("(or does not reach the target) at B = 16 (top d not reached, every direction 2)"
            in text)
    assert "fewer than 1.5x the steps of every direction at B = 8 (top d 2" in text


def test_cli_refuses_in_one_line_before_training_and_writes_its_record(capsys, tmp_path,
                                                                      monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("trained before refusing")

    monkeypatch.setattr("realnets.validation.rerun.reference_checkpoints", no_work)
    # refused from the report alone, before its sweep is read (here: a directory that is not one)
    for report, says in (("digits_mlp", "Adam sweeps; digits_mlp's sweep trained momentum"),
                         ("mnist_mlp_adam", "at most 12,000 parameters; mnist_mlp has 118,282")):
        assert realnets_main(["adam-basis", str(ROOT / "reports" / "validation" / report),
                              "--sweep", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and says in err and "\n" not in err
    for sweep, says in ((tmp_path / "absent", "is not a directory"),
                        (ROOT / "sweeps" / "mnist_logreg", "digits_mlp_adam's report was made from")):
        assert realnets_main(["adam-basis", str(ROOT / "reports" / "validation" /
                                                "digits_mlp_adam"), "--sweep", str(sweep)]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and "pass --sweep" in err and "\n" not in err
    assert realnets_main(["adam-basis", str(tmp_path / "absent")]) == 2
    assert "not a directory" in capsys.readouterr().err
    # the happy path with the measurement replaced: the table and the file hold its record
    report = tmp_path / "digits_mlp_adam"
    shutil.copytree(ROOT / "reports" / "validation" / "digits_mlp_adam", report)
    seen = {}

    def fake(task, config, doc, init, goal, sample, log=None):
        seen["rows"] = len(sample["x"])
        side = {"per_weight": {"status": "reached", "steps_to_target": 4},
                "per_eigenvector": {"status": "not reached", "steps_to_target": None}}
        return {"workload": doc["workload"], "num_params": 4810, "target": 0.5,
                "top_d_floor": 0.72,
                "spectrum": {"top": 4.0, "bottom": -0.2, "above_floor": 137, "negative": 3,
                             "nqm_dim": 114},
                "points": [{"batch_size": 64, "learning_rate": 0.0965, "momentum": 0.5,
                            "nqm_steps": 11, "measured_steps": 7, "network": side,
                            "quadratic": side, "coordinates": None,
                            "nqm_over_eigenvector": None}],
                "reading": "the reading", "seconds": {}}

    monkeypatch.setattr("realnets.validation.adam_basis.run_adam_basis", fake)
    monkeypatch.setattr("realnets.validation.rerun.reference_checkpoints",
                        lambda *a, **k: (None, None))
    assert realnets_main(["adam-basis", str(report), "--sweep",
                          str(ROOT / "sweeps" / "digits_mlp_adam"), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "4810 parameters, Hessian eigenvalues -0.2 .. 4 (3 negative)" in out
    assert "lowest loss with the top d only 0.72" in out
    row = next(line for line in out.splitlines() if line.split()[:1] == ["64"])
    assert row.split() == ["64", "0.0965", "0.5", "11", "7", "4", "not", "reached", "-", "4",
                           "not", "reached", "-", "-", "-"]
    record = json.loads((report / "adam_basis.json").read_text())
    assert record["reading"] == "the reading" and record["command"].startswith(
        "python -m realnets adam-basis")
    assert seen["rows"] == 1024                    # the report's calibration sample


def test_the_report_shows_the_record_its_directory_holds(tmp_path):
    from realnets.validation.report import ADAM_BASIS_FILE, write_report
    source = ROOT / "reports" / "validation" / "mnist_logreg"
    doc = json.loads((source / "validation.json").read_text())
    record = json.loads((source / ADAM_BASIS_FILE).read_text())
    without = write_report(tmp_path, doc).read_text()
    assert "## Adam's basis" not in without
    shutil.copy(source / ADAM_BASIS_FILE, tmp_path / ADAM_BASIS_FILE)
    text = write_report(tmp_path, doc).read_text()
    assert "## Adam's basis and the NQM's directions" in text and record["reading"] in text
    last = record["points"][-1]
    q, n = last["quadratic"], last["network"]
    row = (f"| {last['batch_size']} | {last['nqm_steps']} | {last['measured_steps']} | "
           f"{q['per_weight']['steps_to_target']} | {q['per_eigenvector']['steps_to_target']} | "
           f"{q[TOP_D]['steps_to_target']} | {n['per_weight']['steps_to_target']} | "
           f"{n['per_eigenvector']['steps_to_target']} |")
    assert row in text
    # a record left from another validation in the same directory is not shown
    doc["calibration_run"]["train_loss_goal"] *= 1.5
    assert "## Adam's basis" not in write_report(tmp_path, doc).read_text()

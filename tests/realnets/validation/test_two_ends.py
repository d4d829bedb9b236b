"""realnets.validation.two_ends: the restated two-point estimate and rule 3 of
docs/prediction_rule.md (session 32). Percentiles against numpy's with a rerun not at the goal
counted as the slowest; the doubling-and-bisection search against a brute-force scan; the noise
penalty's noise-free end against the closed form; rule 3 on an NQM that is its own network recovers
the depth it was given and that depth's B_crit; a whole run on a quadratic task."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, SearchSpace, tune_curve
from realnets.sweeps.records import SweepConfig, TrialRecord
from realnets.validation import two_ends
from realnets.validation.files import TWO_ENDS_FILE
from realnets.validation.reconciliation import rerun_percentiles, two_point_estimate
from realnets.validation.settings import ValidationConfig
from realnets.workloads import tasks
from realnets.workloads.search_space import TrialSearchSpace

CPU = jax.devices("cpu")[:1]
H = np.array([2.0, 0.5, 0.1])
C = np.array([1.0, 0.5, 0.2])


def _sweep(optimizer="sgd", batch_sizes=(4, 8, 16, 32, 64)):
    return SweepConfig(workload="nqm", batch_sizes=batch_sizes, trials=4, max_steps=500, goal=0.1,
                       optimizer=optimizer, search=TrialSearchSpace((0.01, 2.0)), seed=5)


def test_rerun_percentiles_count_a_rerun_not_at_the_goal_as_the_slowest():
    finite = [40, 52, 31, 45, 38, 60, 33]
    got = rerun_percentiles(finite)
    for q in ("16", "50", "84"):
        assert got[q] == pytest.approx(np.percentile(finite, float(q)))
    # two of five not at the goal: the 16th is finite, the median sits on the third (45), the
    # 84th interpolates into a rerun that never got there
    got = rerun_percentiles([40, None, 31, 45, None])
    assert got["16"] == pytest.approx(np.percentile([31, 40, 45, 1e12, 1e12], 16))
    assert got["50"] == 45.0 and got["84"] is None
    assert rerun_percentiles([]) == {"16": None, "50": None, "84": None}
    # the descents' cap: S_ref or the 84th percentile, or the slowest rerun at the goal
    p84 = rerun_percentiles(finite)["84"]
    assert two_ends.descent_cap(40, finite, p84) == max(40, int(np.ceil(np.percentile(finite, 84))))
    assert two_ends.descent_cap(40, [40, None, 31, 45, None], None) == 45
    assert two_ends.descent_cap(40, [30, 35], 34.2) == 40
    assert two_ends.descent_cap(40, [50, 55], 54.2) == 55


def test_two_point_estimate_is_mccandlish_through_the_two_ends():
    # S(B) = S_min (1 + B_crit / B) through (B_ref, S) with S_min = S_fb
    s_min, b_crit, b_ref = 12.0, 300.0, 32
    s = s_min * (1 + b_crit / b_ref)
    assert two_point_estimate(b_ref, s_min, s) == pytest.approx(b_crit)
    assert two_point_estimate(b_ref, 12, 12.0) is None      # no bend above B_ref
    assert two_point_estimate(b_ref, None, 40.0) is None
    assert two_point_estimate(b_ref, 12, None) is None


@pytest.mark.parametrize("rho", [0.5, 1.0, 1.7, 3.0, 7.9, 8.0, 40.0])
def test_pinned_target_is_the_smallest_n_whose_penalty_reaches_rho(rho):
    # a nondecreasing penalty with plateaus; brute force gives the answer
    ratios = {n: 1.0 + 0.35 * (n // 3) ** 1.3 for n in range(1, 65)}
    calls = []

    def penalty(n):
        calls.append(n)
        return {"n": n, "ratio": ratios[n]}

    got, seen = two_ends.pinned_target(penalty, rho, n_max=64)
    brute = next((n for n in range(1, 65) if ratios[n] >= rho), None)
    assert got == brute
    assert [r["n"] for r in seen] == calls
    assert len(set(calls)) <= 2 * 7 + 1           # doubling then bisection, not a scan


def _config(train_size=None):
    return NQMConfig(curvature=tuple(H), noise_variance=tuple(C),
                     init_second_moments=(3.0, 2.0, 5.0), target=1.0, train_size=train_size)


def test_the_noise_penalty_is_one_without_noise_and_grows_with_depth():
    config, sweep = _config(train_size=4096), _sweep()
    shallow = two_ends.noise_penalty(config, sweep, 4, 2, 10 ** 6)
    deep = two_ends.noise_penalty(config, sweep, 4, 20, 10 ** 6)
    # the depth is the closed-form lowest noise-free loss in n steps (rates up to 2 / h_1 = 1)
    rates = np.linspace(0.01, 1.0, 200_001)
    for record in (shallow, deep):
        n = record["n"]
        losses = 0.5 * ((H * np.array([3.0, 2.0, 5.0]))[None, :]
                        * (1 - rates[:, None] * H[None, :]) ** (2 * n)).sum(axis=1)
        assert record["target"] == pytest.approx(losses.min(), rel=1e-6)
        assert record["steps_noise_free"] == n
    assert 1.0 <= shallow["ratio"] < deep["ratio"]


def test_rule_3_on_an_nqm_that_is_its_own_network_recovers_its_depth_and_b_crit():
    """Take a depth T0 = T(n0), measure the 'network' (the NQM itself) at both ends there, and
    pin: the rule finds n0 again, so its prediction is the NQM's own S(B) to T0."""
    config, sweep = _config(train_size=None), _sweep()
    n0, b_ref = 25, 4
    truth = two_ends.noise_penalty(config, sweep, b_ref, n0, 10 ** 6)
    penalty = lambda n: two_ends.noise_penalty(config, sweep, b_ref, n, 10 ** 6)   # noqa: E731
    n, _ = two_ends.pinned_target(penalty, truth["ratio"], n_max=10 ** 4)
    assert n <= n0 and penalty(n)["ratio"] >= truth["ratio"]
    assert penalty(n - 1)["ratio"] < truth["ratio"]
    assert penalty(n)["target"] == pytest.approx(truth["target"], rel=0.1)
    own = analyse_curve(tune_curve(dataclasses.replace(config, target=truth["target"]),
                                   OptimizerSpec("sgd"), sweep.batch_sizes, 10 ** 6,
                                   SearchSpace(learning_rate=(0.01, 2.0)))).fit.b_crit
    pinned = analyse_curve(tune_curve(dataclasses.replace(config, target=penalty(n)["target"]),
                                      OptimizerSpec("sgd"), sweep.batch_sizes, 10 ** 6,
                                      SearchSpace(learning_rate=(0.01, 2.0)))).fit.b_crit
    assert pinned == pytest.approx(own, rel=0.15)


def test_run_two_ends_on_a_quadratic_task(monkeypatch):
    """The whole record on the quadratic task: S_fb^N from the whole-set descents (of its exact
    loss: the task has unlimited data and a known expectation, session 36), B_2pt' from the
    reruns' percentiles, rule 3 per percentile with its n* the smallest n evaluated to reach
    rho."""
    config = NQMConfig(curvature=tuple(H), noise_variance=tuple(C),
                       init_second_moments=(4.0,) * 3, target=0.1)
    task = tasks.quadratic_task(config.problem())
    sweep = _sweep(batch_sizes=(4, 8, 16, 32))
    monkeypatch.setattr(two_ends, "UNLIMITED_ROWS", 4096)
    monkeypatch.setattr(two_ends, "fitted_nqm", lambda fitted, target: dataclasses.replace(
        _config(), init_second_moments=(4.0,) * 3))
    records = [TrialRecord(batch_size=b, trial_id=i, status="COMPLETE", learning_rate=lr,
                           steps_to_goal=s)
               for b, i, lr, s in ((4, 1, 0.9, 40), (4, 0, 0.3, 90), (8, 0, 0.9, 25),
                                   (16, 0, 0.9, 18), (32, 0, 0.9, 16))]
    repeats = [TrialRecord(batch_size=4, trial_id=k, status="COMPLETE", learning_rate=0.9,
                           steps_to_goal=s) for k, s in enumerate((36, 44, 52, 40, 48))]
    doc = {"workload": "nqm", "settings": ValidationConfig(checkpoints=("goal",)).to_dict(),
           "calibration_run": {"batch_size": 4, "trial_id": 1, "learning_rate": 0.9,
                               "momentum": None, "final_lr_fraction": 1.0,
                               "sweep_steps_to_goal": 40},
           "checkpoints": {"goal": {"nqm": {}}}, "full_batch": {"steps": 9}}
    goal = {"theta": np.array([0.05, 0.1, 0.2], np.float32)}
    out = two_ends.run_two_ends(task, sweep, records, doc, goal, repeats, devices=CPU)
    pct = out["reruns"]["percentiles"]
    assert pct == {"16": pytest.approx(np.percentile([36, 40, 44, 48, 52], 16)), "50": 44.0,
                   "84": pytest.approx(np.percentile([36, 40, 44, 48, 52], 84))}
    fb = out["full_set"]
    assert fb["population"] and fb["sample_rows"] == 1
    assert fb["step_limit"] == max(40, int(np.ceil(pct["84"])))
    # independently: the exact loss is 1/2 theta^T H theta (no sampled noise term); the target is
    # the goal parameters' loss, and the fast trial (rate 0.9) gets there by plain float64
    # gradient descent from its own initialisation
    lin = np.zeros(3)
    theta = np.asarray(goal["theta"], np.float64)
    assert fb["target"] == pytest.approx(0.5 * H @ theta ** 2 + lin @ theta, rel=1e-5)
    from realnets.validation.rerun import init_params_of
    theta = np.asarray(init_params_of(task, sweep.seed, 1)["theta"], np.float64)
    for steps in range(200):
        if 0.5 * H @ theta ** 2 + lin @ theta <= fb["target"]:
            break
        theta = theta - 0.9 * (H * theta + lin)
    assert fb["trial_id"] == 1 and fb["steps"] == steps and 0 < steps < 40
    s_fb = fb["steps"]
    for q in ("16", "50", "84"):
        assert out["two_point"][q] == pytest.approx(4 * (pct[q] / s_fb - 1))
        by = out["rule_3"]["by"][q]
        assert by["rho"] == pytest.approx(pct[q] / s_fb)
        reached = [r["n"] for r in out["rule_3"]["evaluated"] if r["ratio"] >= by["rho"]]
        below = [r["n"] for r in out["rule_3"]["evaluated"] if r["ratio"] < by["rho"]]
        assert by["n"] == min(reached) and by["n"] - 1 in below + [0]
        assert by["b_crit"] is not None and by["b_crit"] > 0
    # a deeper pin (more noise penalty) is a larger B_crit
    assert out["rule_3"]["by"]["16"]["b_crit"] <= out["rule_3"]["by"]["84"]["b_crit"]
    assert out["s_fb_sample"] == 9 and out["reruns"] == {
        "count": 5, "not_at_goal": 0, "percentiles": pct}


def _record():
    return {"workload": "w", "optimizer": "sgd", "s_ref": 40,
            "reruns": {"count": 5, "not_at_goal": 0,
                       "percentiles": {"16": 38.0, "50": 44.0, "84": 50.0}},
            "full_set": {"steps": 11, "sample_rows": 1618}, "s_fb_sample": 9,
            "two_point": {"16": 4 * (38 / 11 - 1), "50": 4 * (44 / 11 - 1), "84": 4 * (50 / 11 - 1)},
            "rule_3": {"by": {"16": {"b_crit": 9.0}, "50": {"b_crit": 12.0},
                              "84": {"rho": None, "note": "no bend"}}},
            "compared": {"measured": {"b_crit": 10.0, "lo": 8.0, "hi": 13.0},
                         "reruns_curve": {"b_crit": 15.0, "lo": None, "hi": None},
                         "b_simple": 30.0, "rule_1": 2.5}}


def test_a_row_holds_each_estimate_against_the_measured_and_the_reruns_curve():
    r = two_ends.row(_record())
    assert r["ratio"]["two_point"] == pytest.approx(1.2)          # 4 (44 / 11 - 1) / 10
    assert r["ratio"]["two_point_vs_curve"] == pytest.approx(12 / 15)
    assert r["ratio"]["rule_3"] == pytest.approx(1.2) and r["rule_3"]["84"] is None
    assert r["ratio"]["b_simple"] == 3.0 and r["ratio"]["rule_1"] == 0.25
    text = two_ends.table([_record()])
    assert "| w | sgd | 40 | 44 (38 .. 50) | 9 / 11 (1618) | 10 (8-13) | 15 | 12 (9.82 .. 14.2) | " \
        "1.2 |" in text and "| 12 (9 .. inf) | 1.2 | 3 | 0.25 |" in text
    assert two_ends.table([_record()], ["w (goal 0.3)"]).splitlines()[2].startswith(
        "| w (goal 0.3) | sgd | 40 |")


def test_the_command_tabulates_stored_records_and_refuses_bad_input(tmp_path, capsys):
    import json

    from realnets.cli import main

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / TWO_ENDS_FILE).write_text(json.dumps(_record()))
    (tmp_path / "b").mkdir()
    assert main(["two-ends", str(tmp_path / "a"), str(tmp_path / "b"), "--stored"]) == 0
    out = capsys.readouterr().out
    assert "| w | sgd | 40 |" in out and out.count("| w |") == 1
    assert out.strip().endswith(f"no two_ends.json in: {tmp_path / 'b'}")
    # one study swept to two goals: each stored row names its sweep's goal
    import shutil
    from pathlib import Path

    report = Path(__file__).resolve().parents[3] / "reports" / "validation" / "digits_mlp_adam"
    for name, goal in (("g1", None), ("g2", 0.2)):
        (tmp_path / name).mkdir()
        for f in ("validation.json", TWO_ENDS_FILE):
            shutil.copy(report / f, tmp_path / name / f)
        if goal is not None:
            doc = json.loads((tmp_path / name / "validation.json").read_text())
            doc["sweep_config"]["goal"] = goal
            (tmp_path / name / "validation.json").write_text(json.dumps(doc))
    first = json.loads((report / "validation.json").read_text())["sweep_config"]["goal"]
    assert main(["two-ends", str(tmp_path / "g1"), str(tmp_path / "g2"), "--stored"]) == 0
    rows = [r.split(" | ")[0] for r in capsys.readouterr().out.splitlines()
            if r.startswith("| digits_mlp")]
    assert rows == [f"| digits_mlp (goal {first:.4g})", "| digits_mlp (goal 0.2)"]
    assert main(["two-ends", str(tmp_path / "a"), str(tmp_path / "a"), "--sweep", "x"]) == 2
    assert "--sweep with one DIR" in capsys.readouterr().err.replace("sweep: give ", "--")
    assert main(["two-ends", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a directory" in err


def test_rule_3_is_skipped_with_a_reason(monkeypatch):
    doc = {"settings": ValidationConfig().to_dict(), "checkpoints": {"goal": {"nqm": {}}}}
    monkeypatch.setattr(two_ends, "fitted_nqm", lambda fitted, target: _config(train_size=64))
    pct = {"16": 30.0, "50": 40.0, "84": None}
    args = (_sweep(), [], ValidationConfig(), 4)
    assert "already at the target" in two_ends._rule_3(doc, *args, 0, pct, print)["skipped"]
    assert "reached the target" in two_ends._rule_3(doc, *args, None, pct, print)["skipped"]
    assert "whole training set" in two_ends._rule_3(doc, _sweep(), [], ValidationConfig(), 64,
                                                    10, pct, print)["skipped"]
    assert "no NQM fitted at the goal" in two_ends._rule_3(
        {**doc, "checkpoints": {"init": {"nqm": {}}}}, *args, 10, pct, print)["skipped"]


def test_the_goal_metrics_reading_by_its_fixed_thresholds():
    read = two_ends.goal_metric_reading
    assert read(40, 45, 50) == "no gap"              # 50 <= 1.3 x 40
    assert read(50, 62, 71) == "explains"            # 62 x 1.3 >= 71
    assert read(74, None, 176) == "explains"         # not at the goal within the cap
    assert read(50, 60, 200) == "does not"           # 60 < 1.3 x 50
    assert read(50, 100, 200) == "partly"


def test_the_validation_metric_is_the_error_rate_over_every_validation_row():
    import flax.linen as nn

    rng = np.random.default_rng(0)
    x, xv = rng.normal(size=(64, 5)).astype(np.float32), rng.normal(size=(37, 5)).astype(np.float32)
    y, yv = rng.integers(0, 3, 64).astype(np.int32), rng.integers(0, 3, 37).astype(np.int32)
    task = tasks.classification_task(nn.Dense(3), x, y, xv, yv)
    params = task.init_params(jax.random.key(1))
    from jax.flatten_util import ravel_pytree
    flat, unravel = ravel_pytree(params)
    kernel, bias = np.asarray(params["params"]["kernel"]), np.asarray(params["params"]["bias"])
    wrong = np.mean(np.argmax(xv @ kernel + bias, axis=1) != yv)
    assert two_ends.validation_metric(task, unravel)(np.asarray(flat)) == pytest.approx(wrong)


def test_the_command_refuses_a_sweep_the_report_was_not_made_from(capsys):
    from pathlib import Path

    from realnets.cli import main

    root = Path(__file__).resolve().parents[3]
    assert main(["two-ends", str(root / "reports" / "validation" / "digits_mlp"), "--sweep",
                 str(root / "sweeps" / "mnist_logreg"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "digits_mlp's report was made from (pass --sweep)" in err and err.count("\n") == 1


def test_the_goal_metric_descent_is_gradient_descent_watched_on_the_validation_rows():
    """A linear softmax classifier: plain float64 gradient descent on the whole training set,
    written out, with its validation error at every step; the first step at the goal is the
    descent's, and its error at S_fb^N steps the record's."""
    import flax.linen as nn

    from realnets.validation.rerun import init_params_of

    rng = np.random.default_rng(3)
    centres = rng.normal(scale=2.0, size=(3, 5))
    y, yv = rng.integers(0, 3, 96).astype(np.int32), rng.integers(0, 3, 50).astype(np.int32)
    x = (centres[y] + rng.normal(size=(96, 5))).astype(np.float32)
    xv = (centres[yv] + rng.normal(size=(50, 5))).astype(np.float32)
    task = tasks.classification_task(nn.Dense(3), x, y, xv, yv)
    sweep = dataclasses.replace(_sweep(), goal=0.2)
    lr = 0.05
    params = init_params_of(task, sweep.seed, 2)["params"]
    w, b = np.asarray(params["kernel"], np.float64), np.asarray(params["bias"], np.float64)
    errors = []
    for _ in range(300):
        errors.append(np.mean(np.argmax(xv @ w + b, axis=1) != yv))
        logits = x @ w + b
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(96), y] -= 1.0
        w, b = w - lr * x.T @ p / 96, b - lr * p.mean(axis=0)
    first = int(np.argmax(np.array(errors) <= 0.2))
    assert errors[first] <= 0.2 and first > 5 and errors[0] > 0.2
    record = {"b_ref": 4, "full_set": {"steps": 3, "trial_id": 2, "learning_rate": lr,
                                       "momentum": None, "step_limit": 300}}
    got = two_ends.goal_metric_descent(task, sweep, record, devices=CPU)
    assert got["steps_to_goal"] == first and got["goal"] == 0.2
    assert got["metric_start"] == pytest.approx(errors[0])
    assert got["metric_at_s_fb"] == pytest.approx(errors[3])
    # not within a shorter cap: None
    short = {**record, "full_set": {**record["full_set"], "step_limit": first - 1}}
    assert two_ends.goal_metric_descent(task, sweep, short, devices=CPU)["steps_to_goal"] is None


def test_the_whole_set_of_unlimited_data_is_the_exact_loss_where_it_is_known(monkeypatch):
    """The quadratic task (unlimited data, known expectation): its whole set is one row whose
    mean loss is 1/2 theta^T H theta exactly; without population rows a task with unlimited data
    gets UNLIMITED_ROWS fresh draws, whose loss differs by the sampled noise term."""
    from realnets.validation.rerun import mean_loss
    config = NQMConfig(curvature=tuple(H), noise_variance=tuple(C),
                       init_second_moments=(4.0,) * 3, target=0.1)
    task = tasks.quadratic_task(config.problem())
    theta = np.array([0.7, -1.3, 2.1], np.float32)
    exact = 0.5 * H @ theta.astype(np.float64) ** 2
    rows = two_ends.whole_set(task, 0)
    assert mean_loss(task, {"theta": theta}, rows, devices=CPU) == pytest.approx(exact, rel=1e-6)
    monkeypatch.setattr(two_ends, "UNLIMITED_ROWS", 64)
    sampled = two_ends.whole_set(dataclasses.replace(task, population=None), 0)
    assert len(sampled["z"]) == 64
    lin = np.sqrt(C) * sampled["z"].astype(np.float64).mean(axis=0)
    assert mean_loss(task, {"theta": theta}, sampled, devices=CPU) == pytest.approx(
        exact + lin @ theta, rel=1e-5)


def test_the_commands_chunk_rows_computes_the_same_descents_in_chunks(tabular_report,
                                                                      chunks_seen, capsys):
    """`two-ends DIR --chunk-rows 100` on a copy of the shipped breast_cancer_mlp report: its 455
    training rows in five compiled calls (the last of 55), the same whole-set descents and
    initialisations' steps as the stored record made all at once; 0 is refused in one line."""
    import json

    from realnets.cli import main

    d = tabular_report
    stored = json.loads((d / TWO_ENDS_FILE).read_text())
    assert main(["two-ends", str(d), "--chunk-rows", "100", "--no-progress"]) == 0
    got = json.loads((d / TWO_ENDS_FILE).read_text())
    assert got["full_set"]["trials"] == stored["full_set"]["trials"]
    assert got["full_set"]["target"] == pytest.approx(stored["full_set"]["target"], rel=1e-6)
    whole = [c for c in chunks_seen if sum(c) == 455]
    assert whole and all(c == [100, 100, 100, 100, 55] for c in whole)
    capsys.readouterr()
    chunks_seen.clear()
    assert main(["two-ends", str(d), "--full-batch-inits", ",".join(map(str, range(1, 17))),
                 "--chunk-rows", "100", "--no-progress"]) == 0
    inits = json.loads((d / TWO_ENDS_FILE).read_text())["full_batch_inits"]
    assert inits["steps"] == stored["full_batch_inits"]["steps"]
    whole = [c for c in chunks_seen if sum(c) == 455]
    assert whole and all(c == [100, 100, 100, 100, 55] for c in whole)
    assert main(["two-ends", str(d), "--chunk-rows", "0"]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: chunk-rows must be a whole number >= 1, got 0"


def test_whole_set_descents_are_chunked_by_default_and_all_at_once_on_request(
        tabular_report, chunks_seen, monkeypatch):
    """Without --chunk-rows (and none in the report) the whole set goes in chunks of
    WHOLE_SET_CHUNK_ROWS (here 200 for the 455 rows: 200, 200, 55), for the trials' descents and
    the 16 initialisations', with the stored record's steps; --chunk-rows at least the set's
    rows puts it in one call; the records name the rows per call."""
    import json

    from realnets.cli import main

    monkeypatch.setattr(two_ends, "WHOLE_SET_CHUNK_ROWS", 200)
    d = tabular_report
    stored = json.loads((d / TWO_ENDS_FILE).read_text())
    assert json.loads((d / "validation.json").read_text())["settings"]["chunk_rows"] is None
    assert main(["two-ends", str(d), "--no-progress"]) == 0
    got = json.loads((d / TWO_ENDS_FILE).read_text())
    assert got["full_set"]["trials"] == stored["full_set"]["trials"]
    assert got["full_set"]["chunk_rows"] == 200 and "chunk_rows" not in stored["full_set"]
    whole = [c for c in chunks_seen if sum(c) == 455]
    assert whole and all(c == [200, 200, 55] for c in whole)
    chunks_seen.clear()
    assert main(["two-ends", str(d), "--full-batch-inits", ",".join(map(str, range(1, 17))),
                 "--no-progress"]) == 0
    inits = json.loads((d / TWO_ENDS_FILE).read_text())["full_batch_inits"]
    assert inits["steps"] == stored["full_batch_inits"]["steps"] and inits["chunk_rows"] == 200
    whole = [c for c in chunks_seen if sum(c) == 455]
    assert whole and all(c == [200, 200, 55] for c in whole)
    chunks_seen.clear()
    assert main(["two-ends", str(d), "--chunk-rows", "1000", "--no-progress"]) == 0
    full_set = json.loads((d / TWO_ENDS_FILE).read_text())["full_set"]
    assert full_set["trials"] == stored["full_set"]["trials"] and full_set["chunk_rows"] == 455
    whole = [c for c in chunks_seen if sum(c) == 455]
    assert whole and all(c == [455] for c in whole)

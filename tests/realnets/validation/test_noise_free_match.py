"""realnets.validation.noise_free_match: rule 2 of docs/prediction_rule.md. The network's
full-batch steps on a quadratic task are those of gradient descent on the sample's quadratic,
computed here independently in float64 (a diverging and a too-slow trial included, and each
trial capped at the fewest steps found before it); the noise-free target is the closed-form
minimum over learning rates of the NQM's deterministic loss; on a stored document the rule adds
its record, target and prediction to every checkpoint, and says why when no trial reaches the
target."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from nqm.problem import NQMConfig
from realnets.sweeps.records import SweepConfig, TrialRecord
from realnets.validation.noise_free_match import (RULE, UNLIMITED_BATCH, full_batch_steps,
                                                  noise_free_match, reference_reruns)
from realnets.validation.rerun import init_params_of
from realnets.validation.targets import step_matched_target
from realnets.workloads import tasks
from realnets.workloads.search_space import TrialSearchSpace

CPU = jax.devices("cpu")[:1]
H = np.array([2.0, 0.5, 0.1])
C = np.array([1.0, 0.5, 0.2])


def _task():
    config = NQMConfig(curvature=tuple(H), noise_variance=tuple(C), init_second_moments=(4.0,) * 3,
                       target=0.1)
    return tasks.quadratic_task(config.problem())


def _sweep(optimizer="sgd"):
    return SweepConfig(workload="nqm", batch_sizes=(4, 8), trials=4, max_steps=500, goal=0.1,
                       optimizer=optimizer, search=TrialSearchSpace((0.01, 2.0)), seed=5)


def _trial(trial_id, lr):
    return TrialRecord(batch_size=4, trial_id=trial_id, status="COMPLETE", learning_rate=lr)


def _gd_losses(theta0, zbar, lr, steps):
    """Float64 gradient descent on the sample's loss 1/2 theta^T H theta + (sqrt(c) zbar).theta."""
    lin = np.sqrt(C) * zbar
    theta, out = theta0.astype(np.float64), []
    for _ in range(steps + 1):
        out.append(0.5 * H @ theta ** 2 + lin @ theta)
        theta = theta - lr * (H * theta + lin)
    return np.array(out)


def test_full_batch_steps_are_gradient_descent_on_the_samples_quadratic():
    task, sweep = _task(), _sweep()
    sample = task.draw_batch(np.random.default_rng(0), 256)
    zbar = sample["z"].astype(np.float64).mean(axis=0)
    # trial 0: slow; 1: fast; 2: past the stability edge 2 / h_1 = 1 (diverges); 3: tiny
    trials = [_trial(0, 0.3), _trial(1, 0.9), _trial(2, 1.9), _trial(3, 1e-4)]
    theta0 = {t.trial_id: np.asarray(init_params_of(task, sweep.seed, t.trial_id)["theta"])
              for t in trials}
    fast = _gd_losses(theta0[1], zbar, 0.9, 200)
    slow = _gd_losses(theta0[0], zbar, 0.3, 200)
    # a target half-way between two of the fast run's losses: no rounding can move its step
    target = 0.5 * (fast[12] + fast[13])
    assert fast[12] > target >= fast[13]
    got = full_batch_steps(task, sweep, trials, sample, target, step_limit=150, devices=CPU)
    runs = {r["trial_id"]: r for r in got["trials"]}
    s_slow = int(np.argmax(slow <= target))
    assert slow[s_slow] <= target and s_slow > 13
    # the first trial has the whole limit; the others the fewest steps found before them
    assert runs[0]["status"] == "reached" and runs[0]["steps_to_target"] == s_slow
    assert runs[0]["step_limit"] == 150 and runs[1]["step_limit"] == s_slow
    assert runs[1]["status"] == "reached" and runs[1]["steps_to_target"] == 13
    assert runs[2]["status"] == "diverged" and runs[2]["step_limit"] == 13
    assert runs[3]["status"] == "not reached"
    assert (got["steps"], got["trial_id"], got["learning_rate"]) == (13, 1, pytest.approx(0.9))
    assert got["sample_rows"] == 256 and got["target"] == target
    # nothing reaches a target below the sample's minimum: no S_fb
    floor = float(-0.5 * np.sum(C * zbar ** 2 / H))
    none = full_batch_steps(task, sweep, trials[:2], sample, floor - 1.0, step_limit=40,
                            devices=CPU)
    assert none["steps"] is None and {r["status"] for r in none["trials"]} == {"not reached"}
    with pytest.raises(ValueError, match="step_limit"):
        full_batch_steps(task, sweep, trials, sample, target, step_limit=0, devices=CPU)
    with pytest.raises(ValueError, match="no trial"):
        full_batch_steps(task, sweep, [], sample, target, step_limit=5, devices=CPU)


@pytest.mark.parametrize("train_size", [100, None])
def test_the_noise_free_target_is_the_closed_form_minimum_over_learning_rates(train_size):
    moments = np.array([3.0, 2.0, 5.0])
    config = NQMConfig(curvature=tuple(H), noise_variance=tuple(C),
                       init_second_moments=tuple(moments), target=1.0, train_size=train_size)
    match = noise_free_match(_sweep(), train_size, steps=7)
    assert match.batch_size == (UNLIMITED_BATCH if train_size is None else train_size)
    assert (match.family, match.steps) == ("sgd", 7)
    target, record = step_matched_target(config, match)
    # no noise: E[L](T) = 1/2 sum_i h_i m_i (1 - a h_i)^(2T), minimised over a in the space
    # (the upper end is stability's, 2 / h_1 = 1)
    rates = np.linspace(0.01, 1.0, 200_001)
    losses = 0.5 * ((H * moments)[None, :] * (1 - rates[:, None] * H[None, :]) ** 14).sum(axis=1)
    assert target == pytest.approx(losses.min(), rel=1e-6)
    assert record["learning_rate"] == pytest.approx(rates[losses.argmin()], rel=1e-3)


def test_a_stored_document_gains_rule_2_in_every_checkpoint(monkeypatch):
    from realnets.validation import noise_free_match as nf
    from realnets.validation.settings import ValidationConfig

    fitted = {"train_size": 100}
    doc = {"settings": {"checkpoints": ["goal", "init"]},
           "calibration_run": {"batch_size": 4, "trial_id": 1, "learning_rate": 0.2,
                               "momentum": None, "final_lr_fraction": 1.0,
                               "sweep_steps_to_goal": 30,
                               "train_loss_goal": 0.2},
           "checkpoints": {"goal": {"nqm": fitted, "targets": {"step_matched": 0.1}},
                           "init": {"nqm": fitted}, "other": {"error": "no fit"}},
           "seconds": {"rerun": 1.0}}
    problem = NQMConfig(curvature=tuple(H), noise_variance=tuple(C),
                        init_second_moments=(3.0, 2.0, 5.0), target=1.0, train_size=100)
    seen = {}
    monkeypatch.setattr(nf, "full_batch_steps",
                        lambda task, sweep, trials, sample, target, limit, *a: seen.update(
                            trials=[t.trial_id for t in trials], target=target, limit=limit)
                        or {"steps": 6, "trials": [], "target": target, "step_limit": limit})
    monkeypatch.setattr(nf, "fitted_nqm", lambda f, target: problem.__class__(
        **{**problem.__dict__, "target": target}))
    monkeypatch.setattr(nf, "predict", lambda config, *a, **k: {"tuned": {"target": config.target},
                                                                "search_matched": k})
    monkeypatch.setattr(nf, "bootstrap_b_crit", lambda *a, **k: {"boot": a[-1].steps, **k})
    monkeypatch.setattr(nf, "build_curve", lambda records, config: type(
        "C", (), {"batch_sizes": (4, 8)})())
    records = [_trial(i, 0.1 * (i + 1)) for i in (2, 0, 1)] + [
        TrialRecord(batch_size=8, trial_id=0, status="COMPLETE", learning_rate=0.5)]
    repeats = [TrialRecord(batch_size=4, trial_id=i, status="COMPLETE", learning_rate=0.2,
                           steps_to_goal=s) for i, s in enumerate((28, None))]
    out = nf.add_noise_free_prediction(doc, None, _sweep(), records, {}, ValidationConfig(),
                                       repeats=repeats)
    # the trials at B_ref, in id order; the reference run's loss and steps
    assert seen == {"trials": [0, 1, 2], "target": 0.2, "limit": 30}
    assert out["full_batch"]["reference_reruns"] == [28, None]
    # the noise-free match at B = N = 100 in S_fb = 6 steps, in closed form: the lowest
    # 1/2 sum_i h_i m_i (1 - a h_i)^12 over the space's rates up to stability's 2 / h_1 = 1
    rates = np.linspace(0.01, 1.0, 200_001)
    expected = (0.5 * ((H * np.array([3.0, 2.0, 5.0]))[None, :]
                       * (1 - rates[:, None] * H[None, :]) ** 12).sum(axis=1)).min()
    for name in ("goal", "init"):
        record = out["checkpoints"][name]
        assert record["targets"][RULE] == pytest.approx(expected, rel=1e-6)
        assert record["predictions"][RULE]["tuned"]["target"] == record["targets"][RULE]
        # the rule is the tuned curve: the NQM at the sweep's trials is not run for it
        assert record["predictions"][RULE]["search_matched"] == {"search_matched": False}
    # the headline checkpoint only is bootstrapped, each draw matched to the same S_fb
    assert out["checkpoints"]["goal"]["predictions"][RULE]["bootstrap"] == {
        "boot": 6, "search_matched": False}
    assert "bootstrap" not in out["checkpoints"]["init"]["predictions"][RULE]
    assert out["checkpoints"]["goal"]["targets"]["step_matched"] == 0.1   # the others kept
    assert RULE not in out["checkpoints"]["other"].get("predictions", {})
    assert out["full_batch"]["steps"] == 6 and "noise_free_match" in out["seconds"]
    assert doc["checkpoints"]["goal"]["targets"] == {"step_matched": 0.1}    # not mutated
    # no trial at the target: every fitted checkpoint says why, and nothing is predicted
    monkeypatch.setattr(nf, "full_batch_steps", lambda *a: {
        "steps": None, "trials": [], "target": 0.2, "step_limit": 30})
    out = nf.add_noise_free_prediction(doc, None, _sweep(), records, {}, ValidationConfig())
    for name in ("goal", "init"):
        assert "no trial reached" in out["checkpoints"][name]["target_errors"][RULE]
        assert RULE not in out["checkpoints"][name]["predictions"]


def test_reference_reruns_are_the_reference_trials_at_its_batch_size():
    def rerun(b, lr, steps, init=0):
        return TrialRecord(batch_size=b, trial_id=init, status="COMPLETE", learning_rate=lr,
                           momentum=0.9, steps_to_goal=steps)

    # a rerun's trial id numbers its initialisation: the configuration says whose rerun it is
    repeats = [rerun(16, 0.1, 40), rerun(16, 0.1, None, init=1), rerun(16, 0.3, 10),
               rerun(32, 0.1, 20), rerun(16, 0.1, 52)]
    run = {"batch_size": 16, "trial_id": 7, "learning_rate": 0.1, "momentum": 0.9,
           "final_lr_fraction": 1.0}
    assert reference_reruns(repeats, run) == [40, None, 52]
    assert reference_reruns([], run) == []


def test_a_killed_run_resumes_its_descents_from_the_journal(tmp_path, monkeypatch):
    """A call killed after two of four trials left their runs in the journal (and half a line,
    cut by the kill): the next call descends only from the other two and returns what one
    uninterrupted call does. A journal made for another target is not reused."""
    from realnets.validation import noise_free_match as nfm

    task, sweep = _task(), _sweep()
    sample = task.draw_batch(np.random.default_rng(0), 256)
    trials = [_trial(0, 0.3), _trial(1, 0.9), _trial(2, 1.9), _trial(3, 1e-4)]
    target = 0.0
    whole = full_batch_steps(task, sweep, trials, sample, target, step_limit=150, devices=CPU)
    assert whole["steps"] is not None and whole["trials"][1]["step_limit"] < 150
    journal = tmp_path / "full_batch_descents.jsonl"
    full_batch_steps(task, sweep, trials[:2], sample, target, step_limit=150, devices=CPU,
                     journal=journal)
    with journal.open("a") as f:
        f.write('{"trial_id": 2, "learning_r')              # killed in the middle of a write
    calls = []
    real = nfm.descend

    def counted(*args, **kwargs):
        calls.append(args[3:5])
        return real(*args, **kwargs)

    monkeypatch.setattr(nfm, "descend", counted)
    resumed = full_batch_steps(task, sweep, trials, sample, target, step_limit=150,
                               devices=CPU, journal=journal)
    assert len(calls) == 2
    assert {k: v for k, v in resumed.items() if k != "seconds"} == {
        k: v for k, v in whole.items() if k != "seconds"}
    assert len(journal.read_text().splitlines()) == 5     # the header and four runs
    calls.clear()
    full_batch_steps(task, sweep, trials, sample, target + 0.01, step_limit=150, devices=CPU,
                     journal=journal)
    assert len(calls) == 4


def test_a_run_killed_inside_a_descent_resumes_that_descent_from_its_saved_state(
        tmp_path, killable_loss):
    """Killed part-way through trial 0's descent (the first, capped at the step limit): the
    next call starts that descent at its last save, not at step 0, and returns what one
    uninterrupted call does; no partial file is left."""
    from realnets.validation import noise_free_match as nfm

    task, sweep = _task(), _sweep()
    sample = task.draw_batch(np.random.default_rng(0), 256)
    trials = [_trial(0, 0.3), _trial(1, 0.9)]
    whole = full_batch_steps(task, sweep, trials, sample, 0.0, step_limit=150, devices=CPU)
    slow = whole["trials"][0]["steps_to_target"]
    assert slow is not None and slow > 20
    journal = tmp_path / "full_batch_descents.jsonl"
    killable_loss.install(nfm, kill_at=17)
    with pytest.raises(killable_loss.Killed):
        full_batch_steps(task, sweep, trials, sample, 0.0, step_limit=150, devices=CPU,
                         journal=journal)
    partial = journal.with_suffix(".partial.npz")
    assert partial.is_file()
    killable_loss.calls.clear()
    killable_loss.install(nfm)
    lines = []
    resumed = full_batch_steps(task, sweep, trials, sample, 0.0, step_limit=150, devices=CPU,
                               journal=journal, log=lines.append)
    assert {k: v for k, v in resumed.items() if k != "seconds"} == {
        k: v for k, v in whole.items() if k != "seconds"}
    fast = whole["trials"][1]["steps_to_target"]
    # a progress line per descent with its outcome
    assert f"full batch: trial 0 reached the target in {slow} steps" in "\n".join(lines)
    assert f"full batch: trial 1 reached the target in {fast} steps" in "\n".join(lines)
    # trial 0 from its save at step 15 (every 5 steps; killed at 17), then all of trial 1
    assert len(killable_loss.calls) == (slow + 1 - 15) + (fast + 1)
    assert not partial.exists()


def test_a_journalled_run_is_reused_only_for_the_same_descent():
    from realnets.validation.descent_journal import reusable

    run = {"trial_id": 3, "learning_rate": 0.5, "momentum": None, "status": "reached",
           "steps_to_target": 7, "step_limit": 20}
    assert reusable(run, 3, 0.5, None, 20)
    assert not reusable(run, 3, 0.5, None, 19)           # another cap: trials before it differ
    assert not reusable(run, 4, 0.5, None, 20)
    assert not reusable(run, 3, 0.25, None, 20)
    assert not reusable(run, 3, 0.5, 0.9, 20)
    assert not reusable(None, 3, 0.5, None, 20)

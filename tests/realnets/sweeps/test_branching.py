"""realnets.sweeps.branching: the branch outcome on the NQM against the exact engine, the branches'
examples and updates against an independent reimplementation, divergence as a result, the CBS
rule, the record's round trip, and refused inputs (library and CLI)."""

from __future__ import annotations

import functools
import json

import jax
import numpy as np
import pytest

from nqm import moments
from realnets import cli, workloads
from realnets.sweeps import branching
from realnets.sweeps.branching import Branch, BranchResult, BranchSettings
from realnets.training.trainer import BatchStream, RunConfig, TrialSpec, run_trials
from realnets.workloads import tasks

# SGD on the NQM workload (h_max = 1, stability limit 2 / h_max = 2): k = 32 takes the rate
# 0.1 x 32 = 3.2 past it. Branched at steps 20 (loss ~22, far from the noise floor: bigger
# steps lose nothing) and 300 (loss ~1.4: the window reaches the noise floor, where the bigger
# rates' floor is higher). Exact ratios L_k / L_1 (`_exact_losses`, at the measured states):
# step 20: 1, 0.997, 0.991, 0.980, 0.977, inf; step 300: 1, 1.004, 1.011, 1.030, 1.111, inf.
SETTINGS = BranchSettings(batch_size=16, learning_rate=0.1, branch_steps=(20, 300),
                          window_examples=8192, multipliers=(1, 2, 4, 8, 16, 32), tolerance=0.06,
                          repeats=6, workload="nqm")
EXPECTED_CBS = {20: 16 * 16, 300: 8 * 16}


def _cpu(n):
    return jax.devices("cpu")[:n]


@functools.lru_cache(maxsize=None)
def _nqm():
    problem = workloads.NQM_WORKLOAD.problem()
    return problem, tasks.quadratic_task(problem)


@functools.lru_cache(maxsize=None)
def _measured() -> tuple[BranchResult, list]:
    problem, task = _nqm()
    result = branching.run_branching(task, SETTINGS, devices=_cpu(1))
    return result, branching.reference_states(task, SETTINGS, devices=_cpu(1))


def _theta(state) -> np.ndarray:
    return np.asarray(state.params["theta"][0], np.float64)


def _exact_losses(problem, theta, settings) -> np.ndarray:
    """E[L] after the window for each multiplier, SGD from the point theta (exact engine)."""
    ks = np.asarray(settings.multipliers)
    s11 = theta ** 2
    rates = np.array([settings.branch_learning_rate(k) for k in ks])
    dyn = moments.dynamics(problem, ks * settings.batch_size, rates,
                           start=(s11, np.zeros_like(s11), np.zeros_like(s11)))
    return dyn.loss(settings.window_examples // (ks * settings.batch_size))


def test_branch_losses_and_local_cbs_match_the_exact_engine():
    problem, _ = _nqm()
    result, refs = _measured()
    tol = SETTINGS.tolerance
    for point, ref in zip(result.points, refs):
        exact = _exact_losses(problem, _theta(ref), SETTINGS)
        ratio = exact / exact[0]
        finite = np.isfinite(ratio)
        # the scenario is not borderline: no exact ratio within 0.015 of the threshold
        assert np.all(np.abs(ratio[finite] - (1 + tol)) > 0.015)
        exact_branches = [Branch(k, k * 16, 0.1 * k, 1, (), float(e) if np.isfinite(e) else None,
                                 None, not np.isfinite(e),
                                 branching.keeps_up(float(e), float(exact[0]), tol))
                          for k, e in zip(SETTINGS.multipliers, exact)]
        assert branching.local_cbs(exact_branches, 16) == (EXPECTED_CBS[point.step], False)
        assert point.cbs == EXPECTED_CBS[point.step] and not point.cbs_is_lower_bound
        base = point.branches[0]
        assert base.multiplier == 1 and base.keeps_up and not base.diverged
        # one run's loss is spread by ~6% over the d = 1000 directions; 6 repeats: ~2.5%
        assert base.loss == pytest.approx(exact[0], rel=0.1)
        for b, r in zip(point.branches, ratio):
            if np.isfinite(r):
                # paired: the ratio is far less noisy than either loss (least so at k = 16,
                # where the top directions' noise decorrelates from k = 1's)
                assert not b.diverged and b.loss / base.loss == pytest.approx(r, abs=0.03)
                assert b.keeps_up == (r <= 1 + tol)
        top = point.branches[-1]
        assert top.multiplier == 32 and top.learning_rate == pytest.approx(3.2)
        assert np.isinf(exact[-1])
        assert top.diverged and not top.keeps_up and top.loss is None


def test_branch_points_are_states_of_the_one_reference_run():
    problem, task = _nqm()
    result, refs = _measured()
    final = []
    config = RunConfig(batch_size=16, max_steps=300, goal=-1.0, eval_resolution=1.0,
                       noise_every=0)
    run_trials(task, config, [TrialSpec(0, 0.1)], devices=_cpu(1), final_params=final)
    np.testing.assert_allclose(_theta(refs[1]), final[0]["theta"], rtol=1e-6, atol=1e-7)
    for point, ref in zip(result.points, refs):
        theta = _theta(ref)
        assert point.loss_at_branch == pytest.approx(
            0.5 * np.sum(problem.curvature_D * theta ** 2), rel=1e-5)
    assert result.points[0].loss_at_branch > result.points[1].loss_at_branch


@pytest.mark.parametrize("k", [1, 4])
def test_a_branch_is_plain_sgd_on_the_same_examples_as_k_1(k):
    # Independent reimplementation in float64: theta <- theta - a k (H theta + sqrt(c) mean z)
    # over batches that are k consecutive batches of the k = 1 branch's stream of repeat 0.
    problem, task = _nqm()
    result, refs = _measured()
    theta = _theta(refs[1])
    h, sqrt_c = problem.curvature_D, np.sqrt(problem.noise_D)
    stream = BatchStream(task, 16, branching.repeat_seed(SETTINGS.seed, 0))
    for _ in range(SETTINGS.window_examples // (16 * k)):
        z = np.concatenate([stream.next()["z"] for _ in range(k)]).astype(np.float64)
        theta = theta - 0.1 * k * (h * theta + sqrt_c * z.mean(axis=0))
    expected = 0.5 * np.sum(h * theta ** 2)
    branch = result.points[1].branches[SETTINGS.multipliers.index(k)]
    assert branch.losses[0] == pytest.approx(expected, rel=2e-3)


def test_local_cbs_is_the_last_multiplier_of_the_unbroken_run_from_1():
    def branches(kept):
        return [Branch(k, 8 * k, 0.1, 1, (1.0,), 1.0, None, False, ok)
                for k, ok in zip((1, 2, 4, 8), kept)]

    assert branching.local_cbs(branches([True, True, False, False]), 8) == (16, False)
    # a noisy pass beyond a failure does not count
    assert branching.local_cbs(branches([True, False, True, False]), 8) == (8, False)
    assert branching.local_cbs(branches([True, True, True, True]), 8) == (64, True)
    assert branching.local_cbs(branches([False, False, False, False]), 8) == (None, False)
    assert branching.keeps_up(1.05, 1.0, 0.05) and not branching.keeps_up(1.0501, 1.0, 0.05)
    assert not branching.keeps_up(None, 1.0, 0.05)
    assert not branching.keeps_up(float("nan"), 1.0, 0.05)


def test_learning_rate_rules():
    assert branching.scaled_learning_rate(0.01, 4, "sqrt") == pytest.approx(0.02)
    assert branching.scaled_learning_rate(0.01, 4, "linear") == pytest.approx(0.04)
    adam = BranchSettings(batch_size=8, learning_rate=1e-3, branch_steps=(5,),
                          window_examples=64, optimizer="adam", momentum=0.9)
    assert adam.lr_rule == "sqrt" and adam.branch_learning_rate(8) == pytest.approx(
        1e-3 * np.sqrt(8))
    assert BranchSettings(batch_size=8, learning_rate=0.1, branch_steps=(5,), window_examples=64,
                          optimizer="momentum", momentum=0.9).lr_rule == "linear"
    assert BranchSettings(batch_size=8, learning_rate=0.1, branch_steps=(5,), window_examples=64,
                          optimizer="adam", momentum=0.9, lr_rule="linear").lr_rule == "linear"


def test_record_round_trips_through_json_with_the_summary_shape():
    result, _ = _measured()
    d = json.loads(json.dumps(result.to_dict()))
    assert d["local_cbs"] == [{"step": 20, "cbs": 256}, {"step": 300, "cbs": 128}]
    assert d["points"][0]["branches"][-1]["loss"] is None
    back = BranchResult.from_dict(d)
    assert back == result
    with pytest.raises(ValueError, match="settings"):
        BranchResult.from_dict({k: v for k, v in d.items() if k != "settings"})
    with pytest.raises(ValueError, match="keeps_up"):
        bad = json.loads(json.dumps(d))
        del bad["points"][0]["branches"][0]["keeps_up"]
        BranchResult.from_dict(bad)
    with pytest.raises(ValueError, match="window-examples"):
        bad = json.loads(json.dumps(d))
        bad["settings"]["window_examples"] = 100
        BranchResult.from_dict(bad)


BASE = dict(batch_size=16, learning_rate=0.1, branch_steps=(10,), window_examples=128,
            multipliers=(1, 2, 4))


@pytest.mark.parametrize("change, name", [
    (dict(batch_size=0), "batch-size"),
    (dict(learning_rate=0.0), "learning-rate"),
    (dict(learning_rate=float("inf")), "learning-rate"),
    (dict(branch_steps=()), "branch-steps"),
    (dict(branch_steps=(10, 10)), "branch-steps"),
    (dict(branch_steps=(0,)), "branch-steps"),
    (dict(multipliers=(1, 2.5)), "multipliers"),
    (dict(multipliers=(0, 2)), "multipliers"),
    (dict(window_examples=96), "window-examples"),
    (dict(window_examples=0), "window-examples"),
    (dict(tolerance=-0.01), "tolerance"),
    (dict(repeats=0), "repeats"),
    (dict(lr_rule="cubic"), "lr-rule"),
    (dict(optimizer="rmsprop"), "optimizer"),
    (dict(momentum=0.9), "momentum"),
    (dict(optimizer="momentum"), "momentum"),
    (dict(optimizer="adam", momentum=1.0), "momentum"),
    (dict(seed=-1), "seed"),
    (dict(seed=2 ** 63), "seed"),                # past what jax.random.key accepts
    (dict(eval_rows=0), "eval-rows"),
])
def test_bad_settings_are_refused_naming_the_parameter(change, name):
    with pytest.raises(ValueError, match=name):
        BranchSettings(**{**BASE, **change})


def test_multiplier_1_is_always_there_and_lists_are_sorted():
    s = BranchSettings(**{**BASE, "multipliers": (4, 2), "branch_steps": (30, 10)})
    assert s.multipliers == (1, 2, 4) and s.branch_steps == (10, 30)


def test_branches_larger_than_the_training_set_are_refused_before_any_training():
    task = workloads.get("digits_mlp").build()       # 1,618 training examples
    settings = BranchSettings(batch_size=512, learning_rate=0.1, branch_steps=(1,),
                              window_examples=4096, multipliers=(1, 4), optimizer="momentum",
                              momentum=0.9)
    with pytest.raises(ValueError, match="multipliers: .* 1618 training examples"):
        branching.run_branching(task, settings, devices=_cpu(1),
                                log=lambda m: pytest.fail(f"work started: {m}"))


def test_a_diverging_reference_run_names_the_learning_rate():
    _, task = _nqm()
    settings = BranchSettings(batch_size=16, learning_rate=3.0, branch_steps=(40,),
                              window_examples=32, multipliers=(1, 2))
    with pytest.raises(ValueError, match="learning-rate 3: the reference run diverged"):
        branching.run_branching(task, settings, devices=_cpu(1))


def test_cli_branch_writes_the_record_and_refuses_bad_flags(tmp_path, capsys, one_default_device):
    # on one CPU device (`one_default_device`), as the engine tests above: the record and the
    # errors do not depend on how a step is sharded
    out = tmp_path / "branch.json"
    argv = ["branch", "--workload", "nqm", "--batch-size", "16", "--learning-rate", "0.1",
            "--branch-steps", "5", "--multipliers", "1,2", "--window-examples", "64",
            "--repeats", "1", "--tolerance", "0.05", "--no-progress", "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "local CBS" in printed and "written:" in printed
    result = BranchResult.from_dict(json.loads(out.read_text()))
    assert result.settings.workload == "nqm" and [p.step for p in result.points] == [5]
    assert result.local_cbs()[0]["step"] == 5
    for flag, value, name in (("--tolerance", "-1", "tolerance"),
                              ("--multipliers", "1,x", "multipliers"),
                              ("--out", str(tmp_path / "no" / "b.json"), "out"),
                              ("--workload", "nope", "workload")):
        bad = argv[:]
        bad[bad.index(flag) + 1] = value
        assert cli.main(bad) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {name}") and err.count("\n") == 1

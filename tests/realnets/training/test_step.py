"""realnets.training.step: the sharded step equals the single-device step, accumulation changes nothing,
the 8-device program is really data parallel, vmapped trials are independent, and every optimizer
takes the step its formula says.

Every compiled call on a multi-device CPU mesh is followed by a block: several collective-bearing
steps in flight can deadlock the CPU all-reduce (`realnets.training.mesh.needs_lockstep`).
"""

from __future__ import annotations

import functools
import re

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from realnets.training import mesh as meshlib
from realnets.workloads import models, tasks
from realnets.training import step
from realnets.training.step import Metaparameters, StepConfig

BATCH = 32          # 4 rows per device on 8 devices
STEPS = 5
FEATURES, CLASSES = 8, 10

# Two trials that differ in every metaparameter (learning rate, momentum, decay).
HPS = Metaparameters(learning_rate=np.array([0.1, 0.3], np.float32),
                     one_minus_momentum=np.array([0.1, 0.5], np.float32),
                     final_lr_fraction=np.array([1.0, 0.2], np.float32),
                     decay_steps=np.array([STEPS, STEPS], np.float32))


def _mlp_task():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS * BATCH, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, STEPS * BATCH).astype(np.int32)
    return tasks.classification_task(models.MLP(hidden=(16,)), x, y, x, y)


TASK = _mlp_task()
BATCHES = [{"x": TASK.train["x"][i * BATCH:(i + 1) * BATCH],
            "y": TASK.train["y"][i * BATCH:(i + 1) * BATCH]} for i in range(STEPS)]


def _keys(trial_ids):
    return jnp.stack([jax.random.fold_in(jax.random.key(0), i) for i in trial_ids])


def _take(tree, idx):
    """Trials `idx` of a tree whose leaves have a leading trial axis."""
    return jax.tree.map(lambda leaf: np.asarray(leaf)[np.asarray(idx)], tree)


@functools.lru_cache(maxsize=None)
def _mlp_states():
    """Initial states of the 2 MLP trials, as host arrays (shared by every run below).

    Initialised once: a vmapped flax init is among the slowest programs to compile here. The
    per-trial parameters go through `step.init_states` as its per-trial `keys` argument with an
    identity `init_params`, so the optimizer state is built exactly as the trainer builds it.
    """
    init = jax.jit(TASK.init_params)
    params = [jax.tree.map(np.asarray, init(key)) for key in _keys((0, 1))]
    params_T = jax.tree.map(lambda *p: np.stack(p), *params)
    states = step.init_states(lambda p: p, StepConfig(optimizer="momentum"), params_T, HPS)
    return jax.tree.map(np.asarray, states)


def _train(loss_fn, config, mesh, batches, states, hps, train=None):
    """Runs `batches` through the compiled train step from host `states`; returns (train step,
    final params as numpy, per-step stats as numpy)."""
    if train is None:
        train, _ = step.compile_steps(loss_fn, None, config, mesh)
    rep = meshlib.replicated(mesh)
    states, hps = jax.device_put(states, rep), jax.device_put(hps, rep)
    stats = []
    for batch in batches:
        states, s = train(states, hps, meshlib.place_batch(batch, mesh))
        jax.block_until_ready(states)      # one collective-bearing step in flight at a time
        stats.append(jax.tree.map(np.asarray, s))
    return train, jax.tree.map(np.asarray, states.params), stats


@functools.lru_cache(maxsize=None)
def _run_mlp(num_devices: int, groups: int, microbatches: int = 1):
    """The MLP task's 2 trials for STEPS steps on the first `num_devices` CPU devices."""
    devices = jax.devices("cpu")[:num_devices]
    assert len(devices) == num_devices, "tests/conftest.py should give 8 CPU devices"
    mesh = meshlib.data_mesh(BATCH, devices)
    config = StepConfig(optimizer="momentum", groups=groups, microbatches=microbatches)
    return _train(TASK.loss_fn, config, mesh, BATCHES, _mlp_states(), HPS)


def _assert_trees_close(actual, expected, rtol, atol=0.0):
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


# (a) ---------------------------------------------------------------------------------------

def test_groups_for_one_group_per_device():
    assert step.groups_for(8, BATCH) == 8
    assert step.groups_for(4, 12) == 4
    for batch_size in (2, 6, 12, 32, 4096):     # one device: several groups that divide B
        groups = step.groups_for(1, batch_size)
        assert groups >= 2 and batch_size % groups == 0
    assert step.groups_for(1, 7) == 1           # odd B on one device: no split, no noise scale


def test_eight_device_step_equals_single_device_step(eight_devices):
    # 1 device: G = 2 groups of 16 rows; 8 devices: G = 8 groups of 4 rows, one per device
    # (`step.groups_for`). The batch gradient is the mean over groups either way, so only the
    # order of float sums differs.
    _, params_1, stats_1 = _run_mlp(1, groups=2)
    _, params_8, stats_8 = _run_mlp(8, groups=step.groups_for(8, BATCH))
    _assert_trees_close(params_8, params_1, rtol=1e-5, atol=1e-7)
    for s1, s8 in zip(stats_1, stats_8):
        np.testing.assert_allclose(s8["loss"], s1["loss"], rtol=1e-5)
        np.testing.assert_allclose(s8["grad_sq_big"], s1["grad_sq_big"], rtol=1e-4)
    # The runs did move: the comparison is not between two copies of the initial parameters.
    init = _mlp_states().params
    moved = max(np.max(np.abs(p - q)) for p, q in zip(jax.tree.leaves(params_1),
                                                       jax.tree.leaves(init)))
    assert moved > 1e-3


# (b) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("num_devices,microbatches", [(1, 4), (8, 2)])
def test_gradient_accumulation_is_the_same_step(eight_devices, num_devices, microbatches):
    # 1 device: each group of 16 rows in 4 chunks of 4; 8 devices: each device's 4 rows in 2 chunks.
    groups = 2 if num_devices == 1 else num_devices
    _, params_m, stats_m = _run_mlp(num_devices, groups, microbatches)
    _, params_1, stats_1 = _run_mlp(num_devices, groups, 1)
    _assert_trees_close(params_m, params_1, rtol=1e-5, atol=1e-7)
    for sm, s1 in zip(stats_m, stats_1):
        for key in ("loss", "grad_sq_small", "grad_sq_big"):
            np.testing.assert_allclose(sm[key], s1[key], rtol=1e-4)


# (c) ---------------------------------------------------------------------------------------

def test_eight_device_program_is_data_parallel(eight_devices):
    mesh = meshlib.data_mesh(BATCH, eight_devices)
    train, _, _ = _run_mlp(8, groups=8)
    rep = meshlib.replicated(mesh)
    states, hps = jax.device_put(_mlp_states(), rep), jax.device_put(HPS, rep)
    batch = meshlib.place_batch(BATCHES[0], mesh)
    assert batch["x"].sharding.shard_shape(batch["x"].shape) == (BATCH // 8, FEATURES)

    compiled = train.lower(states, hps, batch).compile()
    hlo = compiled.as_text()
    entry = hlo[hlo.index("\nENTRY"):]
    entry = entry[:entry.index("\n}")]
    # The batch enters each device as its own B / 8 rows, split along the 8 devices...
    x_param = re.search(r"= f32\[(\d+),(\d+)\]\S* parameter\(\d+\), sharding=\{devices=\[8,1\]",
                        entry)
    assert x_param is not None, "no batch parameter sharded 8 ways in the entry computation"
    assert (int(x_param.group(1)), int(x_param.group(2))) == (BATCH // 8, FEATURES)
    # ...its per-device rows are never gathered back...
    assert "all-gather" not in hlo
    # ...and the per-device gradients are summed by an all-reduce: one that carries the first
    # layer's kernel gradients of both trials, shape (T, in, hidden) = (2, 8, 16).
    reduces = [line for line in hlo.splitlines() if " all-reduce(" in line]
    assert reduces, "the compiled 8-device step has no all-reduce"
    assert any("f32[2,8,16]" in line for line in reduces)
    # Parameters stay replicated.
    state_shardings = jax.tree.leaves(compiled.input_shardings[0][0])
    assert all(s.is_fully_replicated for s in state_shardings)


# (d) ---------------------------------------------------------------------------------------

def test_vmapped_trials_are_independent(one_device):
    mesh = meshlib.data_mesh(BATCH, one_device)
    config = StepConfig(optimizer="momentum", groups=2)
    _, params_ab, stats_ab = _run_mlp(1, groups=2)
    train = None                                       # one T = 1 program serves both trials
    for i in (0, 1):
        train, params_i, stats_i = _train(TASK.loss_fn, config, mesh, BATCHES,
                                          _take(_mlp_states(), [i]), _take(HPS, [i]), train)
        _assert_trees_close(params_i, jax.tree.map(lambda p: p[i:i + 1], params_ab), rtol=1e-6,
                            atol=1e-8)
        np.testing.assert_allclose(stats_i[-1]["loss"], stats_ab[-1]["loss"][i:i + 1], rtol=1e-6)


def _cnn_task():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, 8, 8)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
    return tasks.classification_task(models.SimpleCNN(features=(4,), kernel=3, dense=8), x, y, x, y)


@pytest.mark.parametrize("groups", [1, 2])
def test_one_trial_cnn_step_is_the_vmapped_step_unbatched(groups):
    # T = 1 takes its gradients outside the trial vmap (max-pool's gradient with a size-1 trial
    # axis is slow on XLA:CPU): the same step as a trial of a T = 2 program, and no trial axis
    # on the activations (the pools' reduce_window operands are 4-D).
    cnn = _cnn_task()
    config = StepConfig(optimizer="momentum", groups=groups)
    train = jax.jit(step.make_train_step(cnn.loss_fn, config))
    params = [cnn.init_params(key) for key in _keys((0, 1))]
    params_T = jax.tree.map(lambda *p: jnp.stack(p), *params)
    states_ab = step.init_states(lambda p: p, config, params_T, HPS)
    batch = cnn.train
    states_1, states_2 = _take(states_ab, [1]), states_ab
    for _ in range(2):
        states_1, stats_1 = train(states_1, _take(HPS, [1]), batch)
        states_2, stats_2 = train(states_2, HPS, batch)
    _assert_trees_close(states_1, _take(states_2, [1]), rtol=1e-5, atol=1e-7)
    for key, value in stats_1.items():
        np.testing.assert_allclose(value, np.asarray(stats_2[key])[1:], rtol=1e-5)
    assert sorted(stats_1) == (["loss"] if groups == 1 else
                               ["b_simple", "grad_sq_big", "grad_sq_small", "loss"])

    def pool_ranks(jaxpr):
        ranks = []
        for eqn in jaxpr.eqns:
            if eqn.primitive.name.startswith(("reduce_window", "select_and")):
                ranks.append(eqn.invars[0].aval.ndim)
        for sub in jax.extend.core.subjaxprs(jaxpr):
            ranks += pool_ranks(sub)
        return ranks

    ranks_1 = pool_ranks(jax.make_jaxpr(step.make_train_step(cnn.loss_fn, config))(
        states_1, _take(HPS, [1]), batch).jaxpr)
    ranks_2 = pool_ranks(jax.make_jaxpr(step.make_train_step(cnn.loss_fn, config))(
        states_2, HPS, batch).jaxpr)
    assert ranks_1 and set(ranks_1) == {4}
    assert ranks_2 and set(ranks_2) == {5}


# (e) ---------------------------------------------------------------------------------------

THETA0 = np.array([1.0, -2.0, 0.5], np.float32)
QUAD_ROWS = np.array([[0.1, 0.2, -0.3], [0.4, -0.1, 0.0], [-0.2, 0.3, 0.6], [0.5, 0.0, 0.1]],
                     np.float32)


def _quad_loss(params, batch):
    """Mean over rows of 1/2 |theta - x_j|^2: gradient theta - mean_j x_j."""
    return jnp.mean(0.5 * jnp.sum((params["theta"][None] - batch["x"]) ** 2, axis=-1))


def _quad_run(optimizer, hps, steps, mesh):
    """theta after each of `steps` steps of the T trials of `hps` in one program: (steps, T, 3)."""
    config = StepConfig(optimizer=optimizer, groups=2)
    train, _ = step.compile_steps(_quad_loss, None, config, mesh)
    trials = hps.learning_rate.shape[0]
    rep = meshlib.replicated(mesh)
    states = jax.jit(lambda k, h: step.init_states(lambda key: {"theta": jnp.asarray(THETA0)},
                                                   config, k, h),
                     out_shardings=rep)(_keys(tuple(range(trials))), hps)
    hps = jax.device_put(hps, rep)
    thetas = []
    for _ in range(steps):
        states, _ = train(states, hps, meshlib.place_batch({"x": QUAD_ROWS}, mesh))
        thetas.append(np.asarray(states.params["theta"], np.float64))
    return np.stack(thetas)


def _quad_steps(optimizer, lr, one_minus_momentum=1.0, final=1.0, decay_steps=1000, steps=2,
                mesh=None):
    hps = Metaparameters(np.array([lr], np.float32), np.array([one_minus_momentum], np.float32),
                         np.array([final], np.float32), np.array([decay_steps], np.float32))
    return list(_quad_run(optimizer, hps, steps, mesh)[:, 0])


def _expected(optimizer, lr, beta=0.0, lrs=None, steps=2):
    """The update rules by hand, in float64 (optax: heavy ball v <- b v + g; nesterov uses
    g + b v_new; adam with b2 = 0.999, eps = 1e-8, bias-corrected)."""
    xbar = QUAD_ROWS.astype(np.float64).mean(axis=0)
    theta, v, m, s = THETA0.astype(np.float64), 0.0, 0.0, 0.0
    out = []
    for t in range(steps):
        a = lr if lrs is None else lrs[t]
        g = theta - xbar
        if optimizer == "sgd":
            theta = theta - a * g
        elif optimizer == "momentum":
            v = beta * v + g
            theta = theta - a * v
        elif optimizer == "nesterov":
            v = beta * v + g
            theta = theta - a * (g + beta * v)
        else:
            m = beta * m + (1 - beta) * g
            s = 0.999 * s + 0.001 * g * g
            m_hat, s_hat = m / (1 - beta ** (t + 1)), s / (1 - 0.999 ** (t + 1))
            theta = theta - a * m_hat / (np.sqrt(s_hat) + 1e-8)
        out.append(theta)
    return out


@pytest.mark.parametrize("optimizer", step.OPTIMIZERS)
def test_every_optimizer_takes_its_textbook_step(one_device, optimizer):
    mesh = meshlib.data_mesh(QUAD_ROWS.shape[0], one_device)
    lr, beta = 0.1, 0.9
    got = _quad_steps(optimizer, lr, one_minus_momentum=1.0 - beta, mesh=mesh)
    want = _expected(optimizer, lr, beta=0.0 if optimizer == "sgd" else beta)
    for g, w in zip(got, want):
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_sgd_step_is_theta_minus_lr_times_gradient(one_device):
    mesh = meshlib.data_mesh(QUAD_ROWS.shape[0], one_device)
    lr = 0.25
    (theta1,) = _quad_steps("sgd", lr, steps=1, mesh=mesh)
    grad = THETA0.astype(np.float64) - QUAD_ROWS.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(theta1, THETA0 - lr * grad, rtol=1e-6, atol=1e-7)


def test_linear_decay_reaches_final_fraction(one_device):
    # decay_steps 2, final fraction 0.5: rates a, a (1 - 0.5 * 1/2), then a/2 from step 2 on.
    mesh = meshlib.data_mesh(QUAD_ROWS.shape[0], one_device)
    lr = 0.2
    got = _quad_steps("sgd", lr, final=0.5, decay_steps=2, steps=3, mesh=mesh)
    want = _expected("sgd", lr, lrs=[lr, 0.75 * lr, 0.5 * lr], steps=3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)


def _sgd_rates(thetas):
    """The rate of each SGD step from theta before and after it: a_t = (theta_t - theta_t+1) /
    (theta_t - xbar) (the gradient of the quadratic), averaged over coordinates. thetas:
    (steps, T, 3) after each step; returns (steps, T)."""
    xbar = QUAD_ROWS.astype(np.float64).mean(axis=0)
    before = np.concatenate([np.broadcast_to(THETA0.astype(np.float64), (1,) + thetas.shape[1:]),
                             thetas[:-1]])
    return np.mean((before - thetas) / (before - xbar), axis=-1)


def test_trials_with_different_decay_lengths_share_one_program(one_device):
    # Trial 0: a = 0.2, f = 0.5 over T = 2 steps; trial 1: a = 0.1, f = 0.1 over T = 5. After t
    # updates the rate is a (1 - (1 - f) min(t / T, 1)):
    #   trial 0: 0.2, 0.15, 0.1, 0.1, 0.1, 0.1, 0.1
    #   trial 1: 0.1, 0.082, 0.064, 0.046, 0.028, 0.01, 0.01
    mesh = meshlib.data_mesh(QUAD_ROWS.shape[0], one_device)
    steps = 7
    lrs, finals, horizons = [0.2, 0.1], [0.5, 0.1], [2, 5]
    hps = Metaparameters(np.array(lrs, np.float32), np.ones(2, np.float32),
                         np.array(finals, np.float32), np.array(horizons, np.float32))
    together = _quad_run("sgd", hps, steps, mesh)
    by_hand = np.array([[a * (1 - (1 - f) * min(t / T, 1))
                         for a, f, T in zip(lrs, finals, horizons)] for t in range(steps)])
    np.testing.assert_allclose(by_hand[:, 0], [0.2, 0.15, 0.1, 0.1, 0.1, 0.1, 0.1], rtol=1e-12)
    np.testing.assert_allclose(by_hand[:, 1], [0.1, 0.082, 0.064, 0.046, 0.028, 0.01, 0.01],
                               rtol=1e-12)
    np.testing.assert_allclose(_sgd_rates(together), by_hand, rtol=1e-4)
    for i in (0, 1):
        alone = _quad_run("sgd", _take(hps, [i]), steps, mesh)
        np.testing.assert_array_equal(alone[:, 0], together[:, i])


# (f) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [("optimizer", "rmsprop"), ("groups", 0),
                                         ("microbatches", 0), ("noise_decay", 1.0),
                                         ("noise_decay", -0.1)])
def test_bad_step_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        StepConfig(**{field: value})

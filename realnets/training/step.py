"""The pure train and eval steps, vmapped over trials and jit-compiled on the data mesh.

One compiled program runs one step of T trials of one batch size: the trials share the batch
(same data order) and differ in their metaparameters, which are traced arrays of shape (T,), so
a new learning rate never recompiles. Inside a trial the batch of B examples is cut into G
groups of b = B / G rows, one group per device (on one device, the two halves); the gradient of
each group is taken in turn (`_group_gradients`) and the full-batch gradient is their mean. Because the
groups follow the device layout, GSPMD computes each group's gradient on its own device and the
mean is the all-reduce. The per-group and the mean gradient give the noise scale for free
(`realnets.training.gradient_noise`). No `shard_map`: the whole step is ordinary jit code.

Gradient accumulation: with M microbatches each group's rows are cut into M chunks scanned in
sequence and their gradients averaged, which is exactly the same step (the loss is a mean over
examples and the models have no batch statistics; batch norm would make it differ).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.sharding import PartitionSpec

from realnets.training import mesh as meshlib
from realnets.training.gradient_noise import NoiseEMA, unbiased_terms

OPTIMIZERS = ("sgd", "momentum", "nesterov", "adam")


class TrainState(NamedTuple):
    """One trial's state (under vmap: every leaf gets a leading trial axis T)."""

    params: Any
    opt_state: Any
    noise: NoiseEMA


class Metaparameters(NamedTuple):
    """Per-trial metaparameters, float32 arrays of shape (T,) (a scalar inside the vmap).

    learning_rate: initial step size; one_minus_momentum: 1 - b (momentum, nesterov; adam's
    1 - beta1; ignored by sgd); final_lr_fraction: the linear decay ends at this fraction of the
    initial rate (1: constant); decay_steps: steps the decay takes (>= 1; the rate stays at the
    final fraction after them), so trials with different decay lengths share one program.
    """

    learning_rate: jnp.ndarray
    one_minus_momentum: jnp.ndarray
    final_lr_fraction: jnp.ndarray
    decay_steps: jnp.ndarray


@dataclass(frozen=True)
class StepConfig:
    """What fixes the compiled program.

    Attributes:
      optimizer: one of OPTIMIZERS.
      groups: G, gradient groups per step (the devices used; 2 on one device; 1 disables
        the noise scale).
      microbatches: M, gradient-accumulation chunks per group.
      noise_decay: decay of the noise-scale moving averages.
      population: training examples batches are drawn from without replacement (0: unlimited
        data); sets the finite-population correction of the noise-scale estimate.
    """

    optimizer: str = "sgd"
    groups: int = 2
    microbatches: int = 1
    noise_decay: float = 0.99
    population: int = 0

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        for name in ("groups", "microbatches"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 <= self.noise_decay < 1.0:
            raise ValueError(f"noise_decay must be in [0, 1), got {self.noise_decay}")


ONE_DEVICE_GROUPS = 2


def groups_for(num_devices: int, batch_size: int) -> int:
    """G: one gradient group per device; on one device the two halves of the batch (1 for odd
    B: no estimate). More groups on one device would lower the estimate's variance but cost
    a gradient each (on this machine 8 groups made a small MLP's step 3-9x slower)."""
    if num_devices >= 2:
        return num_devices
    return math.gcd(batch_size, ONE_DEVICE_GROUPS)


def make_optimizer(config: StepConfig, hp: Metaparameters) -> optax.GradientTransformation:
    """The optax transformation of one trial, with a linear decay of the learning rate: after
    t updates the rate is lr (1 - (1 - f) min(t / T, 1)) with lr, f and T = decay_steps the
    trial's `hp` (scalars inside the vmap).

    Heavy-ball momentum is optax's trace: v <- b v + g, theta <- theta - a v (as in the NQM).
    """
    final = hp.final_lr_fraction

    def schedule(count):
        frac = jnp.minimum(count / hp.decay_steps, 1.0)
        return hp.learning_rate * (1.0 - (1.0 - final) * frac)

    beta = 1.0 - hp.one_minus_momentum
    if config.optimizer == "sgd":
        return optax.sgd(schedule)
    if config.optimizer == "momentum":
        return optax.sgd(schedule, momentum=beta)
    if config.optimizer == "nesterov":
        return optax.sgd(schedule, momentum=beta, nesterov=True)
    return optax.adam(schedule, b1=beta)


def init_states(init_params: Callable, config: StepConfig, keys, hps: Metaparameters) -> TrainState:
    """States of T trials: keys (T, 2) uint32 or typed keys, hps with (T,) leaves."""

    def one(key, hp):
        params = init_params(key)
        return TrainState(params, make_optimizer(config, hp).init(params), NoiseEMA.zeros())

    return jax.vmap(one)(keys, hps)


def _split(tree, groups: int, microbatches: int):
    """Leaves (B, ...) -> (M, G, B / (G M), ...): group-major, so group g is rows of device g."""

    def cut(x):
        rows = x.shape[0] // (groups * microbatches)
        x = x.reshape(groups, microbatches, rows, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1)

    return jax.tree.map(cut, tree)


def _group_gradients(value_and_grad, params, batch, groups: int, microbatches: int):
    """Mean loss and gradient of each of `groups` row groups of `batch` (leaves (n, ...)).

    Returns:
      A tuple of `groups` pairs (loss, grads), accumulated over microbatches. The groups stay
      separate arrays, never stacked: a stack is a copy of every gradient, and the mean and the
      norms of separate arrays fuse into one pass over them (stacking made the measuring step of
      a small MLP read and write 3x the bytes of a plain step, 2x without it).
    """
    if groups == 1 and microbatches == 1:
        return (value_and_grad(params, batch),)
    chunks = _split(batch, groups, microbatches)

    def group_grads(params, chunk):
        # Unrolled over the few local groups: neither vmap (jax 0.10 has no batching rule for
        # a conv net's weight gradient under shard_map) nor lax.map (convolutions inside a
        # loop run ~6x slower on XLA:CPU) serves.
        return tuple(value_and_grad(params, jax.tree.map(lambda x: x[g], chunk))
                     for g in range(groups))
    if microbatches == 1:
        return group_grads(params, jax.tree.map(lambda x: x[0], chunks))

    def accumulate(carry, chunk):
        return jax.tree.map(jnp.add, carry, group_grads(params, chunk)), None

    zero = tuple((jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, params))
                 for _ in range(groups))
    total, _ = jax.lax.scan(accumulate, zero, chunks)
    return jax.tree.map(lambda x: x / microbatches, total)


def _mean(xs):
    """Mean of a tuple of equally shaped arrays (one: itself, with no op at all)."""
    return xs[0] if len(xs) == 1 else sum(xs[1:], xs[0]) * (1.0 / len(xs))


def _sum_sq(tree):
    return sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree))


def make_train_step(loss_fn: Callable, config: StepConfig, mesh=None):
    """A pure step of T trials: (states, hps, batch) -> (states, stats).

    Args:
      loss_fn: (params, batch) -> mean loss over the batch's rows (float32 scalar).
      config: the StepConfig.
      mesh: the data mesh of n devices, or None for a plain (unsharded) function. With a mesh
        the step is a `shard_map`: each device takes the gradients of its G / n groups of its own
        rows, and `pmean` over `data` (the all-reduce) gives the full-batch gradient.

    Returns:
      step(states, hps, batch); stats holds per-trial (T,) arrays: `loss` (mean training loss of
      the batch, before the update) and, with G > 1 groups only, `grad_sq_small` |G_b|^2
      averaged over groups, `grad_sq_big` |G_B|^2 and `b_simple` from the moving averages after
      this step.
    """
    n = 1 if mesh is None else mesh.devices.size
    if config.groups % n:
        raise ValueError(f"groups ({config.groups}) must be a multiple of the {n} devices")
    G, local_G, M = config.groups, config.groups // n, config.microbatches
    value_and_grad = jax.value_and_grad(loss_fn)

    def across_devices(x):
        return x if n == 1 else jax.lax.pmean(x, meshlib.DATA_AXIS)

    def gradients(params, batch):
        # check_vma=False below: the gradient of this device's loss is its own rows' gradient
        # (with check_vma=True, grad would add the psum of replicated parameters' cotangents
        # itself and the pmean after it would make it n times too large).
        return _group_gradients(value_and_grad, params, batch, local_G, M)

    def update(state: TrainState, hp: Metaparameters, groups, batch_size: int):
        losses, grads_G = zip(*groups)
        grads = jax.tree.map(lambda *g: across_devices(_mean(g)), *grads_G)
        loss = across_devices(_mean(losses))
        noise = state.noise
        if G > 1:
            small_sq = across_devices(_mean([_sum_sq(g) for g in grads_G]))
            big_sq = _sum_sq(grads)
            grad_sq, trace_cov = unbiased_terms(small_sq, big_sq, batch_size / G, batch_size,
                                                config.population)
            noise = noise.update(grad_sq, trace_cov, config.noise_decay)

        optimizer = make_optimizer(config, hp)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        stats = {"loss": loss}
        if G > 1:     # fewer outputs make a small step's dispatch cheaper
            stats.update(grad_sq_small=small_sq, grad_sq_big=big_sq, b_simple=noise.b_simple())
        return TrainState(params, opt_state, noise), stats

    def one_trial(state: TrainState, hp: Metaparameters, batch, batch_size: int):
        return update(state, hp, gradients(state.params, batch), batch_size)

    def trials(states: TrainState, hps: Metaparameters, batch):
        batch_size = jax.tree.leaves(batch)[0].shape[0] * n       # the global batch
        if jax.tree.leaves(hps)[0].shape[0] != 1:
            return jax.vmap(functools.partial(one_trial, batch_size=batch_size),
                            in_axes=(0, 0, None))(states, hps, batch)
        # One trial: its gradients are taken outside the vmap, on the unbatched parameters.
        # Under vmap the activations carry the size-1 trial axis, and the batching rule of
        # reduce_window (max-pool) adds a window dimension for it: XLA:CPU's select-and-scatter
        # expansion of the pool's gradient then materialises an index array for that axis too
        # (an extra s32 broadcast, reduce-window output and scatter index per pool), the dense
        # kernels' gradients come out transposed, and a CNN step (mnist_cnn, B = 64) took ~15%
        # longer than the same step unbatched. Only the gradient is unbatched: the state keeps
        # its trial axis through the update, so the donated buffers still alias the outputs
        # (squeezing the whole state made XLA copy every donated buffer of an MLP).
        params = jax.tree.map(lambda p: p[0], states.params)
        groups = jax.tree.map(lambda x: x[None], gradients(params, batch))
        return jax.vmap(functools.partial(update, batch_size=batch_size))(states, hps, groups)

    if mesh is None or n == 1:
        # pmean over one device is the identity, and a 1-device shard_map still costs ~9% of
        # an MLP step on XLA:CPU (B = 256); jit's in/out shardings place everything alike.
        return trials
    rep, data = PartitionSpec(), PartitionSpec(meshlib.DATA_AXIS)
    return jax.shard_map(trials, mesh=mesh, in_specs=(rep, rep, data), out_specs=(rep, rep),
                         check_vma=False)


def make_eval_step(eval_fn: Callable):
    """(states, batch) -> per-trial sums: eval_fn(params, batch) -> dict of scalars, vmapped."""
    return jax.vmap(lambda state, batch: eval_fn(state.params, batch), in_axes=(0, None))


@functools.lru_cache(maxsize=64)
def compile_steps(loss_fn: Callable, eval_fn: Callable | None, config: StepConfig, mesh):
    """The jitted train step (state donated, batch sharded along `data`, everything else
    replicated) and eval step on `mesh`; cached, so the trials of one batch size that run in
    several groups, and a resumed sweep, reuse the compiled programs."""
    rep = meshlib.replicated(mesh)
    data = meshlib.batch_sharding(mesh)
    train = jax.jit(make_train_step(loss_fn, config, mesh), in_shardings=(rep, rep, data),
                    out_shardings=(rep, rep), donate_argnums=0)
    evaluate = None
    if eval_fn is not None:
        evaluate = jax.jit(make_eval_step(eval_fn), in_shardings=(rep, data), out_shardings=rep)
    return train, evaluate

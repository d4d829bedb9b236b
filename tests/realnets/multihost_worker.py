"""One process of the multi-host test (tests/test_multihost.py); a script, not a test module.

    python tests/multihost_worker.py COORDINATOR NUM_PROCESSES PROCESS_ID OUT_DIR

Every process runs the same program: 2 trials (one vmapped program) of a small MLP on
scikit-learn's digits, `STEPS` steps of `realnets.training.step.compile_steps`'s train step fed by
`realnets.training.mesh.place_batch`, in a plain loop so that the final parameters can be read (the
records of `realnets.training.trainer.run_trials` do not hold them; the CLI sweep test covers that
function on two processes). With NUM_PROCESSES 1 the coordinator is ignored and no distributed
runtime is started: that is the single-process reference the test compares against.

Then every process measures what calibrates the NQM at trial 0's final parameters
(`realnets.calibration.gradient_stats.gradient_statistics` and a Hessian-vector product, their
rows sharded over every device of every process but for each chunk's row left over, which every
process computes on its own device). Each process writes `OUT_DIR/process{I}.json` (its loss curve,
sums of its own copy of the final parameters and the calibration numbers, seed included); process 0 also writes `OUT_DIR/params.npz` (the
final parameters, one array per leaf, no pickle). Set XLA_FLAGS and JAX_PLATFORMS in the
environment before starting it: jax reads them at import.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

# Runs as `python tests/multihost_worker.py` from anywhere: make the repository importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from realnets.training import mesh as meshlib  # noqa: E402
SEED = 0
BATCH_SIZE = 16       # a multiple of the 4 global devices of the test (2 processes x 2)
STEPS = 12
TRIALS = ((0, 0.3, 0.9), (1, 0.05, 0.5))   # (trial id, learning rate, momentum)
# chunks of 33 rows asked: 33 rounded down to 32 over the 4 global devices, twice, and 2 rows
# left over, which every process computes on its own first device (`ShardedSample`)
CALIBRATION_ROWS = 66


def build_task():
    from realnets.workloads import datasets, models
    from realnets.workloads.tasks import classification_task

    s = datasets.load_digits()
    return classification_task(models.MLP(hidden=(16,)), s.train_x, s.train_y, s.val_x, s.val_y)


def train_loop(task, specs):
    """STEPS steps of the compiled train step of `specs`; (final params, losses (STEPS, T))."""
    import jax

    from realnets.training.step import Metaparameters, StepConfig, compile_steps, groups_for, init_states
    from realnets.training.trainer import BatchStream

    mesh = meshlib.data_mesh(BATCH_SIZE)
    config = StepConfig(optimizer="momentum",
                        groups=groups_for(mesh.devices.size, BATCH_SIZE))
    train, _ = compile_steps(task.loss_fn, None, config, mesh)
    rep = meshlib.replicated(mesh)
    hps = Metaparameters(
        learning_rate=np.asarray([s.learning_rate for s in specs], np.float32),
        one_minus_momentum=np.asarray([1.0 - s.momentum for s in specs], np.float32),
        final_lr_fraction=np.asarray([s.final_lr_fraction for s in specs], np.float32),
        decay_steps=np.full(len(specs), STEPS, np.float32))
    # Host (numpy) inputs: every process passes the same values, jit replicates them.
    keys = np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(jax.random.key(SEED),
                                                                        s.trial_id)))
                     for s in specs])
    states = jax.jit(lambda k, h: init_states(task.init_params, config,
                                              jax.random.wrap_key_data(k), h),
                     out_shardings=rep)(keys, hps)
    hps = jax.device_put(hps, rep)
    stream = BatchStream(task, BATCH_SIZE, SEED)
    losses = []
    for _ in range(STEPS):
        states, stats = train(states, hps, meshlib.place_batch(stream.next(), mesh))
        # Replicated output: this process's own copy holds the whole value.
        losses.append(np.asarray(stats["loss"].addressable_data(0), np.float64))
    params = {jax.tree_util.keystr(path): np.asarray(leaf.addressable_data(0))
              for path, leaf in jax.tree_util.tree_leaves_with_path(states.params)}
    first_trial = jax.tree.map(lambda leaf: np.asarray(leaf.addressable_data(0))[0], states.params)
    for name, leaf in jax.tree_util.tree_leaves_with_path(states.params):
        # Every local device must hold the same replica (the value is replicated, not sharded).
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        if any(not np.array_equal(shards[0], s) for s in shards[1:]):
            raise AssertionError(f"local replicas of {jax.tree_util.keystr(name)} differ")
    return params, np.stack(losses), first_trial


def calibration(task, params) -> dict:
    """The calibration measurements at trial 0's final parameters on CALIBRATION_ROWS training
    rows, in chunks of 33 asked (two of 32 over every device of every process, 2 rows on each
    process's own device): per-example gradient statistics along two fixed unit vectors and one Hessian-vector
    product."""
    from jax.flatten_util import ravel_pytree

    from realnets.calibration import gradient_stats, hessian_products
    sample = {k: np.asarray(v)[:CALIBRATION_ROWS] for k, v in task.train.items()}
    dim = ravel_pytree(params)[0].shape[0]
    directions = np.random.default_rng(SEED).standard_normal((2, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    stats = gradient_stats.gradient_statistics(task.loss_fn, params, sample, directions,
                                          chunk_rows=CALIBRATION_ROWS // 2)
    hessian = hessian_products.hvp(task.loss_fn, params, sample, chunk_rows=CALIBRATION_ROWS // 2)
    return {"trace_cov": stats.trace_cov, "grad_sq_norm": stats.grad_sq_norm,
            "noise_projections": stats.noise_projections_K.tolist(),
            "grad_components": stats.grad_components_K.tolist(),
            "hvp": np.asarray(hessian(directions[0]), np.float64).tolist()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("coordinator", help="HOST:PORT of process 0 (ignored for 1 process)")
    parser.add_argument("num_processes", type=int)
    parser.add_argument("process_id", type=int)
    parser.add_argument("out", help="output directory")
    args = parser.parse_args(argv)
    if args.num_processes > 1:
        meshlib.initialize_distributed(args.coordinator, args.num_processes, args.process_id,
                                       timeout_seconds=60)
    import jax

    from realnets.training.trainer import TrialSpec

    specs = [TrialSpec(trial_id=i, learning_rate=lr, momentum=m) for i, lr, m in TRIALS]
    task = build_task()
    params, losses, first_trial = train_loop(task, specs)
    calibrated = calibration(task, first_trial)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    index = jax.process_index()
    summary = {
        "seed": SEED, "batch_size": BATCH_SIZE, "steps": STEPS, "trials": TRIALS,
        "process_index": index, "process_count": jax.process_count(),
        "device_count": jax.device_count(), "local_device_count": jax.local_device_count(),
        "losses": losses.tolist(),
        "param_sums": {k: float(np.sum(v, dtype=np.float64)) for k, v in params.items()},
        "calibration": calibrated,
    }
    (out / f"process{index}.json").write_text(json.dumps(summary, indent=1))
    if index == 0:
        np.savez(out / "params.npz", **params)
    return 0


if __name__ == "__main__":
    sys.exit(main())

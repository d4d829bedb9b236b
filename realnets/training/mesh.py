"""Devices, the 1-D `data` mesh, and how a global batch is placed on it.

Data parallelism here is plain GSPMD: the train step is one `jax.jit` program whose batch input
is sharded along the mesh axis `data` and whose parameters are replicated; XLA inserts the
all-reduce. The same code runs on 1 CPU, simulated CPU devices, a GPU/TPU host, and several hosts
joined by `jax.distributed.initialize` (every process runs the same program on the same global
batch description; each feeds only the rows its own devices hold).

Batch-size rule (documented in the README): a batch of B examples is spread over the largest
number of devices n that divides both B and the device count (n = gcd(B, device count)), using
the first n devices. So B = 16 on 8 devices uses all 8; B = 4 uses 4; B = 6 uses 2. With several
processes the batch must use every device (each process must take part in every step), so B must
be a multiple of the global device count; anything else is a ValueError naming the batch size.
"""

from __future__ import annotations

import math

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"


def initialize_distributed(coordinator_address: str, num_processes: int, process_id: int,
                           timeout_seconds: int = 300) -> None:
    """Joins this process to a multi-host run (call before anything touches a device).

    On CPU hosts the cross-process collectives need an implementation; gloo ships with jaxlib.
    """
    if num_processes < 1 or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, {num_processes}), got {process_id} "
                         f"(num_processes {num_processes})")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id,
                               initialization_timeout=timeout_seconds)


def devices_for_batch(batch_size: int, devices=None) -> list:
    """The devices a batch of `batch_size` examples is sharded over (see the module docstring)."""
    devices = list(jax.devices() if devices is None else devices)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if jax.process_count() > 1:
        if batch_size % len(devices):
            raise ValueError(
                f"batch_size {batch_size} must be a multiple of the {len(devices)} devices of a "
                f"{jax.process_count()}-process run")
        return devices
    return devices[:math.gcd(batch_size, len(devices))]


def is_writer() -> bool:
    """Whether this process writes a command's files: process 0 of a multi-host job (the others
    compute the same and read them), the only process otherwise."""
    return jax.process_index() == 0


def wait_for_writer(name: str) -> None:
    """A barrier across the processes of a multi-host job (nothing with one process): after
    process 0 wrote a file that every process reads next."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def data_mesh(batch_size: int, devices=None) -> Mesh:
    """A 1-D mesh with axis `data` over `devices_for_batch(batch_size)` (auto-sharded axis)."""
    used = devices_for_batch(batch_size, devices)
    return Mesh(np.array(used), (DATA_AXIS,), axis_types=(AxisType.Auto,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading (example) axis split along `data`."""
    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def place_batch(batch: dict, mesh: Mesh) -> dict:
    """Global host batch (every process holds the same numpy arrays, leading axis B) -> global
    jax arrays sharded along `data`; each process hands over only the rows its devices hold."""
    if mesh.devices.size == 1 and jax.process_count() == 1:
        # the same placement; a plain device is ~2x cheaper to put to than a NamedSharding
        return jax.device_put(batch, mesh.devices.flat[0])
    sharding = batch_sharding(mesh)
    if jax.process_count() == 1:
        return jax.device_put(batch, sharding)       # one call for the whole dict: cheaper
    out = {}
    for name, rows in batch.items():
        rows = np.asarray(rows)
        spans = [idx[0] for idx in sharding.addressable_devices_indices_map(rows.shape).values()]
        lo = min(s.start or 0 for s in spans)
        hi = max(rows.shape[0] if s.stop is None else s.stop for s in spans)
        out[name] = jax.make_array_from_process_local_data(sharding, rows[lo:hi], rows.shape)
    return out


def needs_lockstep(mesh: Mesh) -> bool:
    """True on CPU meshes of 2+ devices: there several collective-bearing steps in flight can
    deadlock the all-reduce (seen with jax 0.10), so the trainer waits for each step."""
    return mesh.devices.size > 1 and mesh.devices.flat[0].platform == "cpu"

"""A host sample cut into chunks, each sharded along the `data` mesh like the train step, and
functions mapped over it (means and per-row outputs, gathered across processes).
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax.sharding import Mesh

from realnets.training import mesh as meshlib


def row_count(batch: dict) -> int:
    """Rows of a dict of arrays that share their leading axis (ValueError if they disagree)."""
    if not batch:
        raise ValueError("sample must be a non-empty dict of arrays")
    sizes = {name: int(np.shape(rows)[0]) for name, rows in batch.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"sample arrays must share their number of rows, got {sizes}")
    n = next(iter(sizes.values()))
    if n < 1:
        raise ValueError("sample must have at least one row, got 0")
    return n


class ShardedSample:
    """A host sample (dict of arrays with n rows) cut into chunks of at most `chunk_rows` rows.

    Each chunk is placed once on its own data mesh (`realnets.training.mesh.data_mesh(rows)`:
    the rows are split over gcd(rows, device count) devices, as in training). With several
    processes a sharded chunk must use every device, so chunks are a multiple of the global
    device count (`_spans`), sharded over every device, and the rows left over at the end, which
    every process computes whole on its own first device (the same inputs, so the same result on
    each). `mean` runs a function that returns a mean over a chunk's rows and
    averages the chunks with weights rows / n; `rows` runs a per-row function and concatenates
    its outputs (gathered, so that every process gets the whole result). Calls are made one at
    a time and brought to the host before the next (multi-device CPU meshes deadlock with
    several collectives in flight: `realnets.training.mesh.needs_lockstep`).
    """

    def __init__(self, batch: dict, *, chunk_rows: int | None = None, devices=None):
        n = row_count(batch)
        chunk_rows = n if chunk_rows is None else int(chunk_rows)
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.num_rows = n
        self._programs = {}
        self.chunks = []            # (rows in chunk, mesh, batch placed on the mesh)
        for lo, hi, local in _spans(n, chunk_rows, devices):
            host = {name: np.asarray(rows)[lo:hi] for name, rows in batch.items()}
            if local:
                mesh = Mesh(np.array(_own_device(devices)), (meshlib.DATA_AXIS,))
                self.chunks.append((hi - lo, mesh, jax.device_put(host, mesh.devices.flat[0])))
            else:
                mesh = meshlib.data_mesh(hi - lo, devices)
                self.chunks.append((hi - lo, mesh, meshlib.place_batch(host, mesh)))

    def _program(self, fn: Callable, num_replicated: int, per_row: bool, rows: int, mesh):
        """fn jitted for chunks of `rows` rows: replicated arguments first, the rows sharded along
        `data`; the output replicated (a reduction over rows) or sharded (per-row)."""
        cache = self._programs.setdefault((id(fn), per_row), (fn, {}))[1]   # keeps fn alive
        if rows not in cache:
            rep, data = meshlib.replicated(mesh), meshlib.batch_sharding(mesh)
            # With several processes a per-row output sharded over their devices is not this
            # process's to read: gather it (replicated) inside the program instead.
            out = data if per_row and jax.process_count() == 1 else rep
            cache[rows] = jax.jit(fn, in_shardings=(rep,) * num_replicated + (data,),
                                  out_shardings=out)
        return cache[rows]

    def mean(self, fn: Callable, *replicated) -> np.ndarray:
        """sum_c (n_c / n) fn(*replicated, chunk_c), float64 (fn: a mean over its chunk's rows)."""
        total = 0.0
        for rows, mesh, placed in self.chunks:
            program = self._program(fn, len(replicated), False, rows, mesh)
            out = np.asarray(program(*_for(mesh, replicated), placed), np.float64)
            total = total + (rows / self.num_rows) * out
        return total

    def rows(self, fn: Callable, *replicated):
        """fn(*replicated, chunk) per chunk (outputs with a leading row axis), concatenated on the
        host as float64 numpy (a pytree of arrays if fn returns one)."""
        outs = []
        for rows, mesh, placed in self.chunks:
            program = self._program(fn, len(replicated), True, rows, mesh)
            out = program(*_for(mesh, replicated), placed)
            outs.append(jax.tree.map(lambda x: np.asarray(x, np.float64), out))
        return jax.tree.map(lambda *xs: np.concatenate(xs, axis=0), *outs)


def _spans(n: int, chunk_rows: int, devices=None) -> list[tuple[int, int, bool]]:
    """The sample's chunks as (first row, end row, computed on this process's own device).

    One process: chunks of `chunk_rows` rows. Several: chunks of `chunk_rows` rounded down to a
    multiple of the global device count, but at least one row per device (so no device holds
    more rows than `chunk_rows`), each sharded over every device; only the rows left over at the
    end, fewer than the device count, are computed whole on each process's own device."""
    count = 1 if jax.process_count() == 1 else len(jax.devices() if devices is None else devices)
    step = max(count, chunk_rows // count * count)
    spans = []
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        cut = lo + (hi - lo) // count * count
        spans += [(a, b, local) for a, b, local in ((lo, cut, False), (cut, hi, True)) if b > a]
    return spans


def _own_device(devices=None) -> list:
    """[this process's first device among `devices` (default: every device)]."""
    pool = jax.devices() if devices is None else devices
    own = [d for d in pool if d.process_index == jax.process_index()]
    return own[:1] or jax.local_devices()[:1]


def _for(mesh: Mesh, replicated: tuple) -> tuple:
    """The replicated arguments as a program on `mesh` takes them: on a process's own device
    (several processes) the host copy of arrays replicated over every process's devices."""
    if mesh.is_multi_process or jax.process_count() == 1:
        return replicated

    def local(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if not x.sharding.is_fully_replicated:
                raise ValueError("a replicated argument is sharded over several processes")
            return np.asarray(x.addressable_data(0))
        return x

    return jax.tree.map(local, replicated)

"""Blocks of a sweep as Ray tasks: connecting to a cluster, the task a worker runs, and the
executor the sweep driver (`realnets.sweeps.runner.run_sweep`) consumes.

A worker builds the workload's task from the sweep's config (workload key, text file) itself and
keeps it for the life of its process; it returns the trainer's records and writes nothing. Ray
reruns a block whose worker died (`resources.MAX_RETRIES`); the driver writes a block only once
it returned, so nothing is lost or written twice. Blocks are submitted in the serial order, no
more at a time than the cluster holds, each with the serial limit known when it is submitted
(`realnets.sweeps.blocks`). Blocks already running learn of an earlier block of their batch size
that reached the goal meanwhile through a small actor (`Limits`), polled at most every
`POLL_SECONDS`, and stop at that step (never earlier; only earlier blocks count, so the records
cut back by the driver are the serial ones). Without it they would train on to their own goal.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import socket
import time
from typing import Iterator, Sequence

from realnets import workloads
from realnets.cluster.resources import blocks_at_once, task_options
from realnets.sweeps.blocks import Block, Executor
from realnets.sweeps.records import SweepConfig
from realnets.training.trainer import run_trials

CONNECT_TIMEOUT_SECONDS = 10.0
POLL_SECONDS = 0.5
NEEDS_RAY = "--backend ray needs Ray: pip install -e '.[cluster]' (ray==2.60.0)"


@functools.lru_cache(maxsize=4)
def _task(workload: str, text_file: str | None):
    return workloads.get(workload).build(text_file=text_file)


class Limits:
    """The fewest steps to goal of each finished block, by batch size and the block's position
    among its batch size's blocks (a Ray actor in the driver's cluster)."""

    def __init__(self):
        self.best: dict[tuple[int, int], int] = {}

    def finished(self, batch_size: int, position: int, steps: int | None) -> None:
        if steps is not None:
            self.best[batch_size, position] = steps

    def limit(self, batch_size: int, position: int) -> int | None:
        """The serial limit of block `position`: the fewest steps of the blocks before it."""
        before = [s for (b, p), s in self.best.items() if b == batch_size and p < position]
        return min(before) if before else None


def _poller(limits, batch_size: int, position: int):
    """A live limit for `run_trials` that asks `limits` at most every POLL_SECONDS."""
    import ray

    known = {"at": -POLL_SECONDS, "limit": None}

    def live_limit() -> int | None:
        now = time.monotonic()
        if now - known["at"] >= POLL_SECONDS:
            known["at"] = now
            known["limit"] = ray.get(limits.limit.remote(batch_size, position))
        return known["limit"]

    return live_limit


def run_block(workload: str, text_file: str | None, run, trials, limits=None,
              position: int = 0) -> list[dict]:
    """A block on a worker: the trainer's records for `trials` under RunConfig `run`, on every
    device the worker sees (those Ray gave it); with `limits` (a `Limits` actor) it stops once
    an earlier block of its batch size reached the goal at or before its current step."""
    live = None if limits is None else _poller(limits, run.batch_size, position)
    return run_trials(_task(workload, text_file), run, list(trials), live_limit=live)


def _host_port(address: str) -> tuple[str, int]:
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"ray-address must be HOST:PORT (the head's GCS port, as `ray start "
                         f"--head --port` printed it), ray://HOST:PORT or auto, got {address!r}")
    return host.strip("[]"), int(port)


def connect(address: str | None, timeout: float = CONNECT_TIMEOUT_SECONDS) -> None:
    """Connects this process to Ray: a new local instance (address None), the cluster this
    machine belongs to ('auto'), or the head at HOST:PORT / ray://HOST:PORT.

    Raises ValueError (one line) when Ray is not installed or the address does not answer
    within `timeout` seconds: Ray itself would wait for minutes.
    """
    try:
        import ray
    except ImportError:
        raise ValueError(NEEDS_RAY) from None
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address is None:
        ray.init(address="local", include_dashboard=False, **quiet)
        return
    if address != "auto":
        host, port = _host_port(address)
        try:
            socket.create_connection((host, port), timeout=timeout).close()
        except OSError as err:
            raise ValueError(f"ray-address {address} does not answer ({err.strerror or err}, "
                             f"waited up to {timeout:g} s): is `ray start --head --port {port}` "
                             "running there?") from None
    try:
        ray.init(address=address, **quiet)
    except ConnectionError as err:
        raise ValueError(f"ray-address {address}: {str(err).splitlines()[0]}") from None


def disconnect() -> None:
    """Leaves Ray (stops the local instance `connect(None)` started; a cluster keeps running)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def ray_executor(config: SweepConfig, resources: dict[str, float],
                 progress: bool = False) -> Executor:
    """An executor running each block as a Ray task asking for `resources` (after `connect`).

    Raises ValueError before anything runs when a block asks for more than the cluster has.
    """
    import ray

    remote = ray.remote(run_block).options(**task_options(resources))
    at_once = blocks_at_once(ray.cluster_resources(), resources)

    def execute(blocks: Sequence[Block], stop_after) -> Iterator[tuple[int, list[dict]]]:
        pending: dict = {}                      # ObjectRef -> block index
        upcoming = iter(enumerate(blocks))
        position, seen = {}, {}                 # block index -> its place within its batch size
        for index, block in enumerate(blocks):
            position[index] = seen[block.batch_size] = seen.get(block.batch_size, -1) + 1
        # full trials run to their end in the serial backend too: nothing to stop
        limits = (None if config.full_trials else
                  ray.remote(num_cpus=0)(Limits).remote())
        bar = _bar(progress, len(blocks), at_once)
        try:
            while True:
                for index, block in upcoming:
                    run = dataclasses.replace(block.run, stop_after=stop_after(block))
                    ref = remote.remote(config.workload, config.text_file, run, block.trials,
                                        limits, position[index])
                    pending[ref] = index
                    if len(pending) >= at_once:
                        break
                if not pending:
                    return
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                index = pending.pop(ref)
                try:
                    done = ray.get(ref)
                except ray.exceptions.RayError as err:
                    block = blocks[index]
                    raise RuntimeError(
                        f"block {index} (batch size {block.batch_size}, trials "
                        f"{[t.trial_id for t in block.trials]}) failed on the cluster: "
                        f"{str(err).splitlines()[0]}") from err
                if limits is not None:
                    steps = [r["steps_to_goal"] for r in done if r["steps_to_goal"] is not None]
                    limits.finished.remote(blocks[index].batch_size, position[index],
                                           min(steps) if steps else None)
                if bar:
                    bar.update(1)
                yield index, done
        finally:
            for ref in pending:                 # a driver that stops takes its blocks with it
                ray.cancel(ref, force=True)
            if limits is not None:
                ray.kill(limits)
            if bar:
                bar.close()

    return execute


def _bar(enabled: bool, total: int, at_once: int):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"blocks on Ray ({at_once} at a time)", unit="block",
                leave=False)

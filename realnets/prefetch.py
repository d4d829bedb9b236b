"""Batches made ahead of use by a background thread.

The trainer's host work per step (slicing the next batch, copying it to the devices) would
otherwise sit between two dispatches of a short step; numpy copies and `jax.device_put` release
the GIL, so a producer thread overlaps them with the step in flight. The order of the items is
the order `produce` makes them: one producer, one FIFO queue.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class Prefetcher:
    """`next()` returns what `produce()` returned, made up to `depth` calls ahead.

    Use as a context manager (or call `close()`): the thread stops and is joined; an exception
    raised by `produce` is re-raised by the `next()` that would have returned its item.
    """

    def __init__(self, produce: Callable[[], Any], depth: int = 2):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(produce,), daemon=True,
                                        name="batch-prefetch")
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, produce: Callable[[], Any]) -> None:
        try:
            while self._put(produce()):
                pass
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            self._put(_Failure(error))

    def next(self):
        item = self._queue.get()
        if isinstance(item, _Failure):
            raise item.error
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        while not self._queue.empty():       # drop made-ahead batches (device buffers)
            self._queue.get_nowait()

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""The explorer's explorations computed ahead of time: a process-wide LRU cache and one
background thread that fills it with the settings a user is likely to pick next.

Why: one tuning of the default problem takes about a second, so a slider moved to a new value
would show a spinner. After each draw the app schedules the neighbours of what it drew (each
slider one notch either way, most likely first); when the user moves a slider one notch, the
answer is already here, computed by the same function with the same arguments, so it is the
same numbers a live tuning gives (the `seconds` column of the summary aside, which times it).

- `WarmCache(compute)`: values of `compute(*key)` keyed by its (hashable) argument tuple.
  `get` answers from the cache only; `get_or_compute` also waits for the job computing that key
  in the background, or computes it in the caller's thread. `schedule(keys)` replaces the
  pending queue (the job running finishes; stale ones are dropped); errors of a background job
  are counted and swallowed (a neighbour may well be a bad setting); `wait_idle` waits until
  the queue is empty. The worker is a daemon thread, started on the first `schedule`.
- `ControlGrid` and `neighbours`: where one notch of each explorer control leads.
- `worth_warming`: a rough cost estimate, so that slow settings (averaging at d = 10^4,
  3.5 s; several optimizers at once) do not keep a core busy for long.
- `EXPLORATIONS`: the process-wide cache of `ui.explorer.explore`, shared by every session of
  the app (a schedule from any session replaces the queue).

The tuning kernels hold the GIL while they run (numba, no `nogil`), so a busy worker slows the
script thread's own Python a little; it is idle as soon as the neighbours are done.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from ui import explorer
from nqm.problem import NQMConfig

V = TypeVar("V")
Key = tuple[Hashable, ...]

MAX_ENTRIES = 256
# Seconds to tune each optimizer at d = 10^4 over 20 batch sizes in a warm process on a 2-core
# machine (docs/performance.md, `python benchmarks/bench_nqm.py`; schedule: `python -m nqm compare`):
# the unit of `estimated_seconds`.
SECONDS_AT_DEFAULT = {"sgd": 0.06, "momentum": 0.85, "ema": 0.72, "schedule": 9.7}
WARM_BUDGET_SECONDS = 3.0  # warm a setting's neighbours only if one costs at most this
_MISSING = object()


class WarmCache(Generic[V]):
    """An LRU cache of `compute(*key)` with one background worker that fills it ahead of time.

    Args:
      compute: the function whose results are cached; called with the key's items as
        positional arguments. Its results are shared between callers: do not mutate them.
      max_entries: the LRU bound; the least recently used entry goes first.
    """

    def __init__(self, compute: Callable[..., V], max_entries: int = MAX_ENTRIES,
                 name: str = "warmup"):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._compute = compute
        self._max_entries = max_entries
        self._name = name
        self._entries: OrderedDict[Key, V] = OrderedDict()
        self._pending: deque[Key] = deque()
        self._running: Key | None = None
        self._running_done = threading.Event()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # new work, or a job finished
        self._thread: threading.Thread | None = None
        # counters (read them for tests and benchmarks)
        self.hits = 0
        self.computed = 0          # calls of `compute` that returned, in any thread
        self.computed_on_demand = 0  # of which in a caller's thread (`get_or_compute` misses)
        self.background_errors = 0
        self.last_error: BaseException | None = None

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: Key) -> bool:
        with self._lock:
            return key in self._entries

    def get(self, key: Key, default=None):
        """The cached value of `key` (now the most recently used), or `default`: never computes."""
        with self._lock:
            if key not in self._entries:
                return default
            self._entries.move_to_end(key)
            self.hits += 1
            return self._entries[key]

    def get_or_compute(self, key: Key) -> V:
        """The cached value; else the background job's if it is computing `key` right now (it is
        waited for); else `compute(*key)` in this thread, cached. Errors of `compute` propagate."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
            running = self._running == key
            done = self._running_done
            if key in self._pending:
                self._pending.remove(key)   # computed here instead
        if running:
            done.wait()
            value = self.get(key, _MISSING)
            if value is not _MISSING:
                return value
            # the background job failed: compute here, so that the caller sees the error
        value = self._compute(*key)
        with self._lock:
            self.computed += 1
            self.computed_on_demand += 1
            self._store(key, value)
        return value

    def schedule(self, keys: Iterable[Key]) -> None:
        """Replaces the pending queue by `keys` (first first), leaving out those cached or
        running; the job running now finishes. Starts the worker on first use."""
        with self._lock:
            queue: deque[Key] = deque()
            for key in keys:
                if key not in self._entries and key != self._running and key not in queue:
                    queue.append(key)
            self._pending = queue
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def pending(self) -> list[Key]:
        """The keys still to compute, next first."""
        with self._lock:
            return list(self._pending)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Waits until no job is pending or running; False if `timeout` seconds passed first."""
        with self._lock:
            return self._changed.wait_for(lambda: not self._pending and self._running is None,
                                          timeout)

    def clear(self) -> None:
        """Forgets every cached value and the pending queue (the job running finishes)."""
        with self._lock:
            self._entries.clear()
            self._pending.clear()

    def _store(self, key: Key, value: V) -> None:
        # under self._lock
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def _work(self) -> None:
        while True:
            with self._lock:
                self._changed.wait_for(lambda: bool(self._pending))
                key = self._pending.popleft()
                if key in self._entries:
                    continue
                self._running = key
                self._running_done = done = threading.Event()
            value = _MISSING
            try:
                value = self._compute(*key)
            except Exception as err:  # a bad neighbour (say, an unreachable target): skip it
                with self._lock:
                    self.background_errors += 1
                    self.last_error = err
            finally:
                # whatever happened, a caller waiting on this key must wake up and find it free
                with self._lock:
                    if value is not _MISSING:
                        self.computed += 1
                        self._store(key, value)
                    self._running = None
                    self._changed.notify_all()
                done.set()


# ----------------------------------------------------------------------------------------------
# The explorer's neighbourhood


@dataclass(frozen=True)
class ControlGrid:
    """The values the explorer's controls can take, so that a neighbour is one notch away.

    Attributes:
      dims: the options of the dimension slider, ascending.
      spectrum: (min, max, step) of the spectrum-exponent slider.
      noise_exponent: (min, max, step) of the noise-exponent slider (used when noise = 'power').
      batch_sizes: the options of the batch-range slider, ascending; the explorer tunes every
        option between the two ends.
    """

    dims: tuple[int, ...]
    spectrum: tuple[float, float, float]
    noise_exponent: tuple[float, float, float]
    batch_sizes: tuple[int, ...]


def snap(value: float) -> float:
    """A slider value rounded to 9 decimals, so that a float step's rounding error (1.1 + 0.1
    is 1.2000000000000002) cannot make a slider's value and a neighbour two cache keys."""
    return round(float(value), 9)


def _steps(value: float, grid: tuple[float, float, float], notches: Iterable[int]) -> list[float]:
    low, high, step = grid
    out = []
    for k in notches:
        moved = snap(value + k * step)
        if low - step / 2 <= moved <= high + step / 2:
            out.append(moved)
    return out


def neighbours(config: NQMConfig, optimizers: tuple[str, ...], precond_powers: tuple[float, ...],
               batch_sizes: tuple[int, ...], grid: ControlGrid) -> list[Key]:
    """The explorations (as `explore`'s argument tuples) one control move away, most likely first.

    Order: the spectrum exponent one notch (+, -), the noise exponent one notch (noise =
    'power' only), the batch range's ends one notch (narrower first: cheaper), the dimension one
    notch (smaller first), then the spectrum exponent two notches. Optimizers and powers stay.
    """
    def key(cfg: NQMConfig = config, batch: tuple[int, ...] = batch_sizes) -> Key:
        return (cfg, optimizers, precond_powers, batch)

    keys: list[Key] = [key(replace(config, spectrum_exponent=a))
                       for a in _steps(config.spectrum_exponent, grid.spectrum, (1, -1))]
    if config.noise == "power":
        keys += [key(replace(config, noise_exponent=b))
                 for b in _steps(config.noise_exponent, grid.noise_exponent, (1, -1))]
    options = list(grid.batch_sizes)
    if batch_sizes and batch_sizes[0] in options and batch_sizes[-1] in options:
        low, high = options.index(batch_sizes[0]), options.index(batch_sizes[-1])
        for new_low, new_high in ((low + 1, high), (low, high - 1), (low - 1, high),
                                  (low, high + 1)):
            if 0 <= new_low <= new_high < len(options):
                keys.append(key(batch=tuple(options[new_low:new_high + 1])))
    if config.dim in grid.dims:
        i = grid.dims.index(config.dim)
        keys += [key(replace(config, dim=grid.dims[j])) for j in (i - 1, i + 1)
                 if 0 <= j < len(grid.dims)]
    keys += [key(replace(config, spectrum_exponent=a))
             for a in _steps(config.spectrum_exponent, grid.spectrum, (2, -2))]
    return keys


def estimated_seconds(config: NQMConfig, optimizers: Iterable[str],
                      precond_powers: Iterable[float], batch_sizes: tuple[int, ...]) -> float:
    """A rough time for one exploration on a 2-core machine: linear in d and in the number of
    batch sizes, from the per-optimizer times of the default problem (SECONDS_AT_DEFAULT)."""
    per_curve = sum(SECONDS_AT_DEFAULT.get(name, max(SECONDS_AT_DEFAULT.values()))
                    for name in optimizers)
    return (per_curve * len(tuple(precond_powers)) * config.dim / 10_000
            * len(batch_sizes) / 20)


def worth_warming(config: NQMConfig, optimizers: Iterable[str], precond_powers: Iterable[float],
                  batch_sizes: tuple[int, ...], budget: float = WARM_BUDGET_SECONDS) -> bool:
    """Whether one neighbour is cheap enough to compute ahead of time (SGD-like settings at
    d <= 10^4 are; momentum, averaging and schedules at d = 10^4 are not)."""
    return estimated_seconds(config, optimizers, precond_powers, batch_sizes) <= budget


EXPLORATIONS: WarmCache[explorer.Exploration] = WarmCache(explorer.explore,
                                                          name="nqm-explorer-warmup")
"""The process-wide cache of `ui.explorer.explore`, keyed by (config, optimizers,
precond_powers, batch_sizes)."""

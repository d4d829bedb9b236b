"""glibc's malloc told to keep and reuse the large buffers XLA:CPU frees after every call.

XLA:CPU takes each execution's temporary buffer from malloc and frees it when the call returns.
These buffers are large: the text_transformer's evaluation of 2 trials needs 100 MB, its train
step at B = 64 69 MB (`compiled.memory_analysis()`), and more trials or bigger batches need more.
glibc serves any block above 32 MB (and above 64 MB on the worker threads' arenas) with a fresh
`mmap` and returns it with `munmap` at `free`, so the kernel zero-fills every 4 kB page again at
the next call: a small text sweep took 9.3 million page faults and spent 0.4 s of system time per
second of user time in them (`perf record -e page-faults`: the faults are XLA's kernels writing
their freshly mapped outputs), not in threads fighting over a core (one XLA thread changed
nothing). One arena, no `mmap` for large blocks and no trimming keep those pages in the process
and reuse them: 0.2 million faults, system time 0.33 -> 0.03-0.06 of user time, and the train
step at B = 128 1.4-1.6x faster, B = 16 1.2x (`python benchmarks/bench_cpu_time.py`, 2 cores).

The cost: the process keeps its peak heap until it exits (a sweep's peak is its largest program,
which it reached anyway; max RSS 0.86 -> 0.94 GB in that benchmark), and XLA's threads share
one arena: up to 10x the voluntary context switches and, on an idle machine, ~10% more user time
(searching one larger heap), still less user + system time in all. Hence only the command line
(`python -m realnets`) sets it, first thing, and only where jax will run on the CPU;
REALNETS_MALLOC=default keeps glibc's defaults.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import pkgutil
from typing import Mapping

SWITCH = "REALNETS_MALLOC"   # "default": leave glibc's allocator as it is
# mallopt(3) parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
SETTINGS = ((M_ARENA_MAX, 1),               # the worker threads' arenas cannot hold > 64 MB
            (M_MMAP_MAX, 0),                # no block is served by a fresh mmap
            (M_TRIM_THRESHOLD, 2 ** 31 - 1))  # freed memory stays (mallopt takes an int)
# the user's own allocator settings, which win
USER_VARIABLES = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_MMAP_THRESHOLD_",
                  "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "LD_PRELOAD")


def accelerator_plugin_installed() -> bool:
    """True if jax may find a GPU/TPU here: a PJRT plugin (the `jax_plugins` entry points or
    namespace package jax scans at start-up) or libtpu is installed."""
    if importlib.metadata.entry_points(group="jax_plugins"):
        return True
    spec = importlib.util.find_spec("jax_plugins")
    if spec is not None and any(pkgutil.iter_modules(spec.submodule_search_locations or [])):
        return True
    return importlib.util.find_spec("libtpu") is not None


def skip_reason(environ: Mapping[str, str], accelerator_installed: bool) -> str | None:
    """Why the allocator is left as it is, or None where it is tuned (a CPU run whose user
    set no allocator option of their own).

    Args:
      environ: the process environment.
      accelerator_installed: `accelerator_plugin_installed()`.
    """
    if environ.get(SWITCH, "").strip().lower() == "default":
        return f"{SWITCH}=default"
    user = [name for name in USER_VARIABLES if environ.get(name)]
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        user.append("GLIBC_TUNABLES")
    if user:
        return "set by the user: " + ", ".join(user)
    platforms = (environ.get("JAX_PLATFORMS") or environ.get("JAX_PLATFORM_NAME") or "").strip()
    if platforms:
        first = platforms.split(",")[0].strip().lower()
        return None if first == "cpu" else f"jax runs on {first}, not on the CPU"
    if accelerator_installed:
        return "a jax accelerator plugin is installed (set JAX_PLATFORMS=cpu for a CPU run)"
    return None


def tune_for_cpu(environ: Mapping[str, str] | None = None) -> str | None:
    """Sets `SETTINGS` with mallopt(3) where `skip_reason` allows it and the C library is glibc.

    Call it before jax or numpy start any thread (a thread already attached to its own arena
    keeps it). Returns None when tuned, else why not.
    """
    environ = os.environ if environ is None else environ
    reason = skip_reason(environ, accelerator_plugin_installed())
    if reason is not None:
        return reason
    try:
        os.confstr("CS_GNU_LIBC_VERSION")
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError, ValueError):
        return "not glibc"
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    refused = [param for param, value in SETTINGS if mallopt(param, value) != 1]
    return f"mallopt refused parameters {refused}" if refused else None

"""Session-wide test setup: 8 simulated CPU devices, and a deadline on CPU collectives.

Both are XLA flags, read once when the CPU backend is created, so they are set here, before any
test module imports jax. Tests take the fixtures `one_device` / `eight_devices` (lists
of devices for `devices=`), or `one_default_device` (code that uses every device by default
sees one). `pytest_configure` makes compiling cheaper in this process (a compilation cache of
the session's own, XLA's quick code generation).
"""

from __future__ import annotations

import os
import sys

import pytest

SIMULATED_DEVICES = 8


def _append_xla_flags(*flags: str) -> None:
    """Adds flags to XLA_FLAGS, keeping whatever the caller's environment already set."""
    current = os.environ.get("XLA_FLAGS", "").split()
    names = {f.split("=", 1)[0] for f in current}
    extra = [f for f in flags if f.split("=", 1)[0] not in names]   # the caller's value wins
    os.environ["XLA_FLAGS"] = " ".join(current + extra)


if "jax" in sys.modules:   # a plugin imported jax first: the flags may come too late
    import warnings

    warnings.warn("jax was imported before tests/conftest.py; if its CPU backend already exists, "
                  "XLA_FLAGS set here are ignored", RuntimeWarning, stacklevel=1)

_append_xla_flags(
    f"--xla_force_host_platform_device_count={SIMULATED_DEVICES}",
    # A deadline on XLA:CPU's in-process collective rendezvous (the all-reduce between simulated
    # devices). Several collective-bearing steps in flight can deadlock that all-reduce on CPU
    # (jax 0.10; `realnets.training.mesh.needs_lockstep`), and without a deadline the test session then
    # hangs forever. With it, a thread that waits more than 30 s for its peers aborts the process
    # with "Termination timeout for `all reduce ...` exceeded" (a FATAL log and SIGABRT, not a
    # Python exception: the session dies loudly instead of hanging). A healthy step here waits
    # milliseconds. Flag names checked against jaxlib 0.10.2 (openxla/xla PR #32115 made them
    # configurable); `--xla_cpu_collective_timeout_seconds` is a different knob (cross-process
    # gloo/mpi collectives) and does not bound this rendezvous.
    "--xla_cpu_collective_call_warn_stuck_timeout_seconds=10",
    "--xla_cpu_collective_call_terminate_timeout_seconds=30",
)

_COMPILATION_CACHE: list[str] = []


def pytest_configure(config) -> None:
    """Cheaper compiling in this process: a compilation cache of the session's own, and XLA's
    quick code generation. Both are set here, in this process only (not through the
    environment: the subprocesses the tests start, CLIs, Ray workers, the browser test's app,
    compile as a user's process does), before anything is compiled.

    Compiling dominates many tests on a 2-core machine (about 220 s of the suite's in-process
    time with the defaults).

    - The cache, in a fresh temporary directory removed at the session's end (nothing carries
      over from one session to the next): the trainer, the pilot and the validation pipeline
      build their jitted steps afresh on every call, so the same step of the same workload at
      the same batch size is compiled by test after test. jax's persistent cache is keyed by
      the program itself (its StableHLO, devices and compile options), so a hit is the
      executable that compiling it again would give.
    - `jax_disable_most_optimizations` (XLA backend optimisation level 0, no expensive LLVM
      passes), jax's switch for when optimising costs more than running the less optimised
      program: the programs here are tiny and run for a few steps, and it halves the compile
      time. It changes neither the program (the same HLO, sharding and collectives) nor what a
      test asserts; tests/realnets/test_multihost.py's subprocesses have compiled at level 0
      all along.
    """
    import tempfile

    import jax

    path = tempfile.mkdtemp(prefix="batchscope-test-jax-cache-")
    _COMPILATION_CACHE.append(path)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.config.update("jax_disable_most_optimizations", True)


def pytest_unconfigure(config) -> None:
    import shutil

    for path in _COMPILATION_CACHE:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def one_default_device(monkeypatch) -> None:
    """Code that takes every device when given none (`devices=None`:
    `realnets.training.mesh.devices_for_batch`) sees only the first CPU device, as it does on a
    machine with one CPU device (what the CLIs and the app run on here outside the tests).

    For tests of what a command computes, not of how it is sharded: on the session's 8 simulated
    devices each step of a multi-device mesh waits for the last one (`mesh.needs_lockstep`), which
    makes a long run several times slower on 2 cores. The sharded runs are tested against one
    device in tests/realnets/training (test_step.py, test_trainer.py) and
    tests/realnets/calibration/test_lanczos_slq.py.
    """
    import jax

    real = jax.devices
    monkeypatch.setattr(jax, "devices", lambda backend=None: real(backend)[:1])


@pytest.fixture(scope="session")
def one_device() -> list:
    """The first CPU device, as a list (for `devices=`)."""
    import jax

    return jax.devices("cpu")[:1]


@pytest.fixture(scope="session")
def eight_devices() -> list:
    """The 8 simulated CPU devices; fails (not skips) when the flag above did not take effect."""
    import jax

    devices = jax.devices("cpu")
    if len(devices) < SIMULATED_DEVICES:
        pytest.fail(f"expected {SIMULATED_DEVICES} CPU devices, got {len(devices)}: the CPU backend "
                    "was created before tests/conftest.py set XLA_FLAGS")
    return devices[:SIMULATED_DEVICES]

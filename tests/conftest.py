"""Session-wide test setup: 8 simulated CPU devices, and a deadline on CPU collectives.

Both are XLA flags, read once when the CPU backend is created, so they are set here, before any
test module imports jax. Tests take the fixtures `one_device` / `eight_devices` (lists
of devices for `devices=`).
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

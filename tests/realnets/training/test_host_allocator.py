"""The command line's allocator setting: where it applies, and that it makes glibc reuse a large
freed block (counted in page faults, not timed)."""

import os
import subprocess
import sys
import textwrap

import pytest

from realnets.training import host_allocator
from realnets.training.host_allocator import SWITCH, USER_VARIABLES, skip_reason


def test_a_cpu_run_is_tuned():
    assert skip_reason({}, accelerator_installed=False) is None
    assert skip_reason({"JAX_PLATFORMS": "cpu"}, accelerator_installed=True) is None
    assert skip_reason({"JAX_PLATFORMS": "cpu,cuda"}, accelerator_installed=True) is None
    # a tunable of another kind is not an allocator choice
    assert skip_reason({"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F"}, False) is None


@pytest.mark.parametrize("environ", [{"JAX_PLATFORMS": "cuda"}, {"JAX_PLATFORMS": "tpu,cpu"},
                                     {"JAX_PLATFORM_NAME": "gpu"}])
def test_an_accelerator_run_is_left_alone(environ):
    reason = skip_reason(environ, accelerator_installed=False)
    assert reason is not None and "not on the CPU" in reason


def test_an_installed_accelerator_plugin_leaves_it_alone_unless_cpu_is_asked_for():
    assert "plugin" in skip_reason({}, accelerator_installed=True)


@pytest.mark.parametrize("name", USER_VARIABLES)
def test_the_users_own_allocator_settings_win(name):
    assert name in skip_reason({name: "1"}, accelerator_installed=False)


def test_glibc_malloc_tunables_and_the_switch_win():
    assert "GLIBC_TUNABLES" in skip_reason(
        {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, accelerator_installed=False)
    assert SWITCH in skip_reason({SWITCH: "default"}, accelerator_installed=False)


def test_skipped_settings_are_not_applied():
    assert host_allocator.tune_for_cpu({SWITCH: "default"}) == f"{SWITCH}=default"


# A worker thread (as XLA's are) takes 100 MB, writes it, frees it, and does it again; the second
# pass's page faults show whether glibc kept the pages (a few) or mapped them afresh (~25,600).
FAULTS_TWICE = textwrap.dedent("""
    import ctypes, resource, threading
    from realnets.training import host_allocator
    print(host_allocator.tune_for_cpu())
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    size, faults = 100 << 20, []

    def work():
        for _ in range(2):
            block = libc.malloc(size)
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            ctypes.memset(block, 1, size)
            faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
            libc.free(block)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    print(*faults)
""")


def _faults_twice(extra: dict) -> tuple[str, int, int]:
    env = {k: v for k, v in os.environ.items()
           if k not in (SWITCH, "GLIBC_TUNABLES", "JAX_PLATFORM_NAME", *USER_VARIABLES)}
    env.update(JAX_PLATFORMS="cpu", **extra)
    out = subprocess.run([sys.executable, "-c", FAULTS_TWICE], env=env, check=True,
                         capture_output=True, text=True).stdout.split("\n")
    first, second = map(int, out[1].split())
    return out[0], first, second


@pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(os, "confstr")
                    or "CS_GNU_LIBC_VERSION" not in os.confstr_names, reason="glibc only")
def test_a_freed_large_block_is_reused_only_when_tuned():
    pages = (100 << 20) // os.sysconf("SC_PAGE_SIZE")
    status, first, second = _faults_twice({})
    assert status == "None"
    assert first > pages // 2 and second < pages // 20
    status, first, second = _faults_twice({SWITCH: "default"})
    assert status == f"{SWITCH}=default"
    assert first > pages // 2 and second > pages // 2     # glibc's default maps it afresh

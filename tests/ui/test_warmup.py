"""ui.warmup: explorations computed ahead of time are the live ones, hits do not recompute,
a newer schedule drops stale work, a failing job does not stop the worker, the LRU bound holds."""

import threading

import pandas as pd
import pytest

from ui import explorer, warmup
from nqm.problem import NQMConfig

GRID = warmup.ControlGrid(dims=(100, 300, 1000, 3000, 10000), spectrum=(0.5, 2.0, 0.1),
                          noise_exponent=(0.0, 2.0, 0.1),
                          batch_sizes=tuple(2 ** k for k in range(0, 23)))
SMALL = (NQMConfig(dim=100), ("sgd",), (0.0,), (4, 8, 16, 32, 64))


class Recorder:
    """A fake compute function: records its calls, can block on a gate, fails on demand."""

    def __init__(self, fail=(), gate=None):
        self.calls = []
        self.fail = set(fail)
        self.gate = gate
        self.started = threading.Event()

    def __call__(self, *key):
        self.calls.append(key)
        self.started.set()
        if self.gate is not None:
            self.gate.wait(10)
        if key in self.fail:
            raise ValueError(f"bad neighbour {key}")
        return ("value", key)


def assert_same_exploration(warm, live):
    pd.testing.assert_frame_equal(warm.points, live.points)
    pd.testing.assert_frame_equal(warm.summary.drop(columns="seconds"),
                                  live.summary.drop(columns="seconds"))
    pd.testing.assert_frame_equal(warm.lower_bound, live.lower_bound)
    assert warm.analyses.keys() == live.analyses.keys()
    for label in warm.analyses:
        assert warm.analyses[label].fit == live.analyses[label].fit


def test_warmed_neighbours_are_the_live_explorations():
    cache = warmup.WarmCache(explorer.explore)
    keys = warmup.neighbours(*SMALL, GRID)
    cache.schedule(keys)
    assert cache.wait_idle(timeout=120)
    assert cache.background_errors == 0 and len(cache) == len(keys)
    computed = cache.computed
    for key in keys:
        warm = cache.get(key)
        assert warm is not None
        assert_same_exploration(warm, explorer.explore(*key))
    assert cache.computed == computed   # the gets above computed nothing
    # and a neighbour differs from the drawn setting where it should
    up = cache.get(keys[0])
    assert keys[0][0].spectrum_exponent == 1.1
    assert not up.points["steps"].equals(explorer.explore(*SMALL).points["steps"])


def test_neighbours_one_notch_of_each_control_most_likely_first():
    config, optimizers, powers, batch = NQMConfig(dim=1000, noise="power", noise_exponent=0.5), \
        ("sgd",), (0.0, 0.5), (4, 8, 16)
    keys = warmup.neighbours(config, optimizers, powers, batch, GRID)
    assert all(k[1] == optimizers and k[2] == powers for k in keys)
    changes = []
    for cfg, _, _, b in keys:
        if b != batch:
            changes.append(("batch", b[0], b[-1]))
        elif cfg.dim != 1000:
            changes.append(("dim", cfg.dim))
        elif cfg.noise_exponent != 0.5:
            changes.append(("noise_exponent", cfg.noise_exponent))
        else:
            changes.append(("spectrum", cfg.spectrum_exponent))
    assert changes == [("spectrum", 1.1), ("spectrum", 0.9),
                       ("noise_exponent", 0.6), ("noise_exponent", 0.4),
                       ("batch", 8, 16), ("batch", 4, 8), ("batch", 2, 16), ("batch", 4, 32),
                       ("dim", 300), ("dim", 3000),
                       ("spectrum", 1.2), ("spectrum", 0.8)]
    # at the ends of the sliders: nothing beyond them; curvature noise: no noise-exponent moves
    edge = NQMConfig(dim=10000, spectrum_exponent=2.0)
    keys = warmup.neighbours(edge, ("sgd",), (0.0,), (1, 2 ** 22), GRID)
    assert [k[0].spectrum_exponent for k in keys if k[0].dim == 10000 and k[3] == (1, 2 ** 22)] \
        == [1.9, 1.8]
    assert {k[0].dim for k in keys} == {3000, 10000}
    assert all(k[3][0] >= 1 and k[3][-1] <= 2 ** 22 for k in keys)
    assert all(k[0].noise_exponent == 1.0 for k in keys)


def test_neighbour_values_are_the_slider_values():
    # 1.1 + 0.1 is 1.2000000000000002 in floating point; a key must be the slider's 1.2
    config = NQMConfig(spectrum_exponent=1.1)
    values = [k[0].spectrum_exponent for k in warmup.neighbours(config, ("sgd",), (0.0,),
                                                                (4,), GRID)]
    assert 1.2 in values and 1.3 in values and 0.9 in values
    assert warmup.snap(1.2000000000000002) == 1.2


def test_a_hit_does_not_recompute():
    compute = Recorder()
    cache = warmup.WarmCache(compute)
    key = ("a", 1)
    assert cache.get(key) is None
    assert cache.get_or_compute(key) == ("value", key)
    assert cache.get_or_compute(key) == ("value", key)
    assert cache.get(key) == ("value", key)
    assert compute.calls == [key] and cache.computed == 1 and cache.hits == 2
    # a key computed in the background is a hit too
    cache.schedule([("b",), key])
    assert cache.wait_idle(timeout=10)
    assert cache.get_or_compute(("b",)) == ("value", ("b",))
    assert compute.calls == [key, ("b",)]


def test_get_or_compute_waits_for_the_job_computing_that_key():
    gate = threading.Event()
    compute = Recorder(gate=gate)
    cache = warmup.WarmCache(compute)
    cache.schedule([("slow",)])
    assert compute.started.wait(10)
    threading.Timer(0.2, gate.set).start()
    assert cache.get_or_compute(("slow",)) == ("value", ("slow",))
    assert compute.calls == [("slow",)]   # not computed a second time


def test_a_newer_schedule_drops_stale_pending_work():
    gate = threading.Event()
    compute = Recorder(gate=gate)
    cache = warmup.WarmCache(compute)
    cache.schedule([("old", i) for i in range(5)])
    assert compute.started.wait(10)          # ("old", 0) is running
    cache.schedule([("new", 0), ("old", 0), ("new", 1)])   # the running key is not queued again
    assert cache.pending() == [("new", 0), ("new", 1)]
    gate.set()
    assert cache.wait_idle(timeout=10)
    assert compute.calls == [("old", 0), ("new", 0), ("new", 1)]
    assert ("old", 0) in cache and ("old", 1) not in cache
    # cached keys are not scheduled again
    cache.schedule([("new", 0), ("new", 2)])
    assert cache.wait_idle(timeout=10)
    assert compute.calls[-1] == ("new", 2) and len(compute.calls) == 4


def test_a_failing_neighbour_does_not_break_later_jobs():
    compute = Recorder(fail={("bad",)})
    cache = warmup.WarmCache(compute)
    cache.schedule([("bad",), ("good", 1)])
    assert cache.wait_idle(timeout=10)
    cache.schedule([("good", 2)])
    assert cache.wait_idle(timeout=10)
    assert ("good", 1) in cache and ("good", 2) in cache and ("bad",) not in cache
    assert cache.background_errors == 1 and isinstance(cache.last_error, ValueError)
    # asked for directly, a bad setting raises for the caller
    with pytest.raises(ValueError, match="bad neighbour"):
        cache.get_or_compute(("bad",))


def test_a_real_bad_neighbour_is_swallowed():
    # target 0.01 is below the initial loss at d = 100 but a (d, a) neighbour need not be: any
    # error of explore in the background is counted, and the worker goes on
    cache = warmup.WarmCache(explorer.explore)
    bad = (NQMConfig(dim=100, target=1e3), ("sgd",), (0.0,), (4, 8))
    cache.schedule([bad, SMALL])
    assert cache.wait_idle(timeout=60)
    assert cache.background_errors == 1 and "must be below the initial loss" in str(cache.last_error)
    assert SMALL in cache


def test_lru_bound_holds():
    compute = Recorder()
    cache = warmup.WarmCache(compute, max_entries=3)
    for i in range(3):
        cache.get_or_compute((i,))
    cache.get((0,))                      # 0 is now the most recently used
    cache.get_or_compute((3,))           # evicts 1, the least recently used
    assert len(cache) == 3 and (1,) not in cache and (0,) in cache
    cache.schedule([(i,) for i in range(10, 20)])
    assert cache.wait_idle(timeout=10)
    assert len(cache) == 3 and all((i,) in cache for i in (17, 18, 19))
    with pytest.raises(ValueError, match="max_entries"):
        warmup.WarmCache(compute, max_entries=0)


def test_only_cheap_settings_are_warmed():
    batch = tuple(2 ** k for k in range(2, 22))
    assert warmup.worth_warming(NQMConfig(), ("sgd",), (0.0,), batch)
    assert warmup.worth_warming(NQMConfig(), ("sgd",), (0.0, 0.5, 1.0), batch)
    assert warmup.worth_warming(NQMConfig(), ("sgd", "momentum"), (0.0, 0.5), batch)  # ~1.8 s
    assert warmup.worth_warming(NQMConfig(), ("momentum", "ema"), (0.0,), batch)      # ~1.6 s
    assert not warmup.worth_warming(NQMConfig(), ("momentum", "ema"), (0.0, 0.5), batch)  # ~3.1 s
    assert not warmup.worth_warming(NQMConfig(), ("schedule",), (0.0,), batch)         # ~10 s
    # the estimate scales with the dimension and the number of batch sizes
    assert not warmup.worth_warming(NQMConfig(dim=40_000), ("momentum",), (0.0,), batch)  # ~3.4 s
    assert warmup.worth_warming(NQMConfig(dim=40_000), ("momentum",), (0.0,), batch[:10])
    assert warmup.worth_warming(NQMConfig(dim=300), ("sgd", "momentum"), (0.0,), batch)


def test_the_worker_is_a_daemon_thread():
    cache = warmup.WarmCache(Recorder())
    cache.schedule([(1,)])
    assert cache.wait_idle(timeout=10)
    assert cache._thread.daemon and cache._thread.is_alive()   # idle, waiting for work

"""Redraw time of the app's NQM explorer on the default problem.

Run: `python benchmarks/bench_app.py [--repeats N]`. Measures, in one run: the tuning alone (the
baseline, `ui.explorer.explore`; median of N), the first draw of the app (AppTest, tuning
included), a redraw after a control moved back to a value already seen (the app's caches serve
the tuning; back and forth between two values), a redraw after the spectrum slider moved one
notch once the warm-up (`ui.warmup`) has computed the neighbours of the setting drawn, and one
after it moved to a value nothing computed ahead (a cold tuning, the warm-up's cache emptied);
medians of N moves each, with ratios to the baseline and the load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from ui import explorer, warmup
from nqm.problem import NQMConfig

APP = str(Path(__file__).resolve().parents[1] / "app.py")
BATCH = tuple(2 ** k for k in range(2, 22))
IDLE_TIMEOUT = 600.0


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def move_spectrum(at, value: float) -> float:
    """Seconds to redraw the app after the spectrum slider moved to `value`."""
    _, seconds = timed(lambda: at.slider(key="spectrum").set_value(value).run())
    assert not at.exception, at.exception
    return seconds


def wait_for_warm_up() -> None:
    if not warmup.EXPLORATIONS.wait_idle(IDLE_TIMEOUT):
        raise RuntimeError(f"the warm-up did not finish in {IDLE_TIMEOUT:g} s")


def spread(values: list[float]) -> str:
    return f"[{min(values):.3f}-{max(values):.3f}, n = {len(values)}]"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4, help="moves (and tunings) per number")
    repeats = parser.parse_args().repeats

    explorer.explore(NQMConfig(dim=50), ("sgd",), (0.0,), (4, 64))  # load the kernels
    tunes = [timed(lambda: explorer.explore(NQMConfig(), ("sgd",), (0.0,), BATCH))[1]
             for _ in range(repeats)]
    t_tune = statistics.median(tunes)
    at, t_first = timed(lambda: AppTest.from_file(APP, default_timeout=300).run())
    at.slider(key="spectrum").set_value(1.1).run()                 # a new problem
    # back and forth between the two values drawn: both are cached
    backs = [move_spectrum(at, value) for value in ([1.0, 1.1] * repeats)[:repeats]]

    drawn = {1.0, 1.1}
    # Cold: values near the default (so a tuning costs about the baseline's) that nothing
    # computed ahead: the warm-up's cache emptied, once the warm-up of the previous draw is
    # done (so that it does not compete); Streamlit's cache has not seen them either.
    cold_values = [0.9, 1.2, 0.8, 1.3, 0.7, 1.4, 0.6, 1.5][:repeats]
    cold = []
    for value in cold_values:
        wait_for_warm_up()
        warmup.EXPLORATIONS.clear()
        tuned = warmup.EXPLORATIONS.computed_on_demand
        cold.append(move_spectrum(at, value))
        drawn.add(value)
        assert warmup.EXPLORATIONS.computed_on_demand == tuned + 1, "expected a cold tuning"
    # Warm: one notch at a time up from 0.5, once the warm-up after the previous draw is done;
    # only values new to the app (not drawn before) are timed.
    warm = []
    value = 0.5
    if value not in drawn:
        wait_for_warm_up()
        move_spectrum(at, value)
    while len(warm) < repeats and value < 2.0:
        value = warmup.snap(value + 0.1)
        wait_for_warm_up()
        tuned = warmup.EXPLORATIONS.computed_on_demand
        seconds = move_spectrum(at, value)
        assert warmup.EXPLORATIONS.computed_on_demand == tuned, "expected a warm-up hit"
        if value not in drawn:
            warm.append(seconds)
    t_back, t_warm, t_cold = (statistics.median(backs), statistics.median(warm),
                              statistics.median(cold))

    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"tuning the default SGD curve (baseline): {t_tune:6.3f} s  {spread(tunes)}")
    print(f"first draw of the app:                   {t_first:6.3f} s ({t_first / t_tune:4.2f}x the tuning)")
    print(f"redraw with the curve cached:            {t_back:6.3f} s ({t_back / t_tune:4.2f}x the tuning)  {spread(backs)}")
    print(f"redraw, spectrum one notch, warmed up:   {t_warm:6.3f} s ({t_warm / t_tune:4.2f}x the tuning)  {spread(warm)}")
    print(f"redraw, spectrum moved, nothing warmed:  {t_cold:6.3f} s ({t_cold / t_tune:4.2f}x the tuning)  {spread(cold)}")


if __name__ == "__main__":
    main()

"""Redraw time of the app's NQM explorer on the default problem.

Run: `python benchmarks/bench_app.py`. Measures, in one run: the tuning alone (the baseline,
`nqm.explorer.explore`), the first draw of the app (AppTest, tuning included), and a redraw after
a control moved back to a value already seen (Streamlit's cache serves the tuning), with ratios.
"""

from __future__ import annotations

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from nqm import explorer
from nqm.problem import NQMConfig

APP = str(Path(__file__).resolve().parents[1] / "app.py")
BATCH = tuple(2 ** k for k in range(2, 22))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main():
    explorer.explore(NQMConfig(dim=50), ("sgd",), (0.0,), (4, 64))  # load the kernels
    _, t_tune = timed(lambda: explorer.explore(NQMConfig(), ("sgd",), (0.0,), BATCH))
    at, t_first = timed(lambda: AppTest.from_file(APP, default_timeout=300).run())
    at.slider(key="spectrum").set_value(1.1).run()                 # a new problem: tunes
    _, t_back = timed(lambda: at.slider(key="spectrum").set_value(1.0).run())  # cached
    print(f"tuning the default SGD curve (baseline): {t_tune:6.3f} s")
    print(f"first draw of the app:                   {t_first:6.3f} s ({t_first / t_tune:4.2f}x the tuning)")
    print(f"redraw with the curve cached:            {t_back:6.3f} s ({t_back / t_tune:4.2f}x the tuning)")


if __name__ == "__main__":
    main()

"""The app's "Run a sweep" form: its fields as a SweepConfig (a shipped workload or an own one,
docs/own_workload.md), the out directory, and the progress of the sweep as it is written (pure
library code, no streamlit)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nqm.validation import parse_batch_sizes, parse_range
from realnets import workloads
from realnets.sweeps.records import SweepConfig
from realnets.workloads.search_space import TrialSearchSpace
from ui.measured import Measured
from ui.places import Places


def workload_key(chosen: str, own: str, places: Places) -> str:
    """The workload the form names: the own workload `own` ('FILE.py:FUNCTION' or
    'module:FUNCTION') when filled, else the shipped `chosen`. The own one is loaded here
    (`realnets.workloads.get` checks it; a bad one raises its one-line ValueError); a relative
    file is taken from `places.root`, and written as typed when the current directory is that
    root too (so the sweep's config.json stays portable), else as an absolute path."""
    own = (own or "").strip()
    if not own:
        return workloads.get(chosen).key
    where, sep, function = own.rpartition(":")
    if sep and where.endswith(".py"):
        path = Path(where).expanduser()
        in_root = places.root / path
        if not path.is_absolute() and (Path.cwd() / path).resolve() != in_root.resolve():
            path = in_root
        own = f"{path}:{function}"
    return workloads.get(own).key


def sweep_config(workload: str, batch_sizes: str, trials: int, max_steps: int = 0,
                 seed: int = 0, final_lr_fraction: str = "",
                 decay_steps: str = "") -> SweepConfig:
    """A SweepConfig from the app's form, the workload's defaults filling the rest (as
    `python -m realnets sweep` does); `batch_sizes` as the CLI takes them ('16,32' or '16:256');
    max_steps 0: the workload's budget. `final_lr_fraction` and `decay_steps` are the linear
    decay's searched ranges as 'LO,HI' (the CLI's `--final-lr-fraction-range` and
    `--decay-steps-range`); blank: the workload's (a constant rate for the shipped ones; a decay
    length needs a final fraction). Raises ValueError naming the bad field (before any work)."""
    w = workloads.get(workload)
    sizes = parse_batch_sizes(batch_sizes or "")
    final = ((final_lr_fraction or "").strip() and
             parse_range(final_lr_fraction, "final-lr-fraction-range"))
    decay = (decay_steps or "").strip() and parse_range(decay_steps, "decay-steps-range")
    search = w.search
    if final or decay:
        search = TrialSearchSpace(search.learning_rate, search.one_minus_momentum,
                                  final or search.final_lr_fraction, decay or search.decay_steps)
    return SweepConfig(workload=w.key, metric=w.recorded_metric, batch_sizes=tuple(sizes),
                       trials=int(trials),
                       max_steps=int(max_steps) or w.max_steps, goal=w.goal, optimizer=w.optimizer,
                       search=search,
                       seed=int(seed), eval_resolution=w.eval_resolution)


def out_dir_for(text: str, workload: str, places: Places) -> Path:
    """The sweep directory of the form: `<places.results>/<workload's name>` when left blank (an
    own workload's name, not its FILE.py:FUNCTION)."""
    if text and text.strip():
        return places.resolve(text)
    return places.results / workloads.get(workload).name


def finished_trials(measured_sweep: Measured, config: SweepConfig) -> tuple[int, int]:
    """(finished, total) trials of `config` in a loaded sweep directory (for a progress bar)."""
    t = measured_sweep.trials
    ids = pd.to_numeric(t["trial_id"], errors="coerce")
    mine = t["batch_size"].isin(config.batch_sizes) & (ids < config.trials)
    return int(mine.sum()), len(config.batch_sizes) * config.trials

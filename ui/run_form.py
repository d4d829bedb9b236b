"""The app's "Run a sweep" form: its fields as a SweepConfig (a shipped workload or an own one,
docs/own_workload.md), the out directory, and the progress of the sweep as it is written (pure
library code, no streamlit)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from nqm.validation import parse_batch_sizes, parse_optional_range
from realnets import workloads
from realnets.sweeps.records import SweepConfig
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
                 decay_steps: str = "", full_trials: bool = False) -> SweepConfig:
    """A SweepConfig from the app's form, the workload's defaults filling the rest
    (`SweepConfig.for_workload`, as for `python -m realnets sweep`); `batch_sizes` as the CLI
    takes them ('16,32' or '16:256'); max_steps 0: the workload's budget. `final_lr_fraction` and `decay_steps` are the linear
    decay's searched ranges as 'LO,HI' (the CLI's `--final-lr-fraction-range` and
    `--decay-steps-range`); blank: the workload's (a constant rate for the shipped ones; a decay
    length needs a final fraction). `full_trials`: every trial to its own end (the CLI's
    `--full-trials`; B_crit's interval over resampled trials needs it). Raises ValueError naming
    the bad field (before any work)."""
    return SweepConfig.for_workload(
        workload, int(trials), batch_sizes=parse_batch_sizes(batch_sizes or ""),
        max_steps=int(max_steps) or None, seed=int(seed),
        final_lr_fraction=parse_optional_range(final_lr_fraction, "final-lr-fraction-range"),
        decay_steps=parse_optional_range(decay_steps, "decay-steps-range"),
        full_trials=bool(full_trials))


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

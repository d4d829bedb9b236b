"""Measured sweeps as the app's tables: the shipped sweeps, any sweep or batch_science
directory, the trials behind each point and the measured noise scale.

Pure library code (no streamlit): `app.py` reads the controls and calls these, `ui.charts`
draws the tables. Curves and their analysis come from `realnets.sweeps.curve` (`build_curve`,
`curve_document`), the same functions the CLI's `report` uses, so the app and the CLI agree.
Every loader raises ValueError with a message naming the path and what is wrong. The NQM beside
a measured curve is `ui.prediction`; a sweep run from the app's form, `ui.run_form`; the
validation report of a sweep, `ui.reports`.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from nqm.curve import ScalingCurve
from nqm.scaling import Fit
from realnets.sweeps import report
from realnets.sweeps.batch_science import load_batch_science
from realnets.sweeps.curve import best_row, best_trial, build_curve, curve_document
from realnets.sweeps.records import (REPEATS_FILE, CurveDocument, TrialRecord, load_sweep,
                                     read_repeats)

STATUS_LABELS = {"COMPLETE": "reached", "INCOMPLETE": "not reached", "INFEASIBLE": "infeasible"}


@dataclass(frozen=True)
class Measured:
    """One measured curve and everything the app draws from it.

    Attributes:
      name: label (sweep directory name, or dataset/model/optimizer of a batch_science workload).
      curve: the ScalingCurve (source 'measured' or 'batch_science').
      document: `realnets.sweeps.curve.curve_document(curve)`: fit, regimes, efficiency, noise
        scale.
      points: one row per batch size: curve, batch_size, steps (NaN where not reached),
        learning_rate, momentum, efficiency, regime, reached / not_reached / infeasible (trial
        counts), b_simple, edge, perfect (S(B0) B0 / B), fit (S_min (1 + B_crit / B) of the fit).
      summary: one row: curve, s_min, b_crit, r2, cbs20, maximal_from; where the trials ran
        to their end or the best trials were rerun with other seeds, also
        b_crit_resampled_p16 / _p84 (`realnets.sweeps.curve.b_crit_resampled`).
      trials: one row per trial: batch_size, trial_id, status ('reached', 'not reached',
        'infeasible'), learning_rate, momentum, one_minus_momentum, final_lr_fraction and
        decay_steps (its linear decay: 1 and NaN for a constant rate), steps_to_goal, steps_run,
        best (the trial that set the point).
      noise: the best trial's B_simple along training, per batch size: batch_size, trial_id,
        step, b_simple (empty when the data hold no noise-scale estimates, e.g. batch_science).
    """

    name: str
    curve: ScalingCurve
    document: CurveDocument
    points: pd.DataFrame
    summary: pd.DataFrame
    trials: pd.DataFrame
    noise: pd.DataFrame

    @property
    def config(self) -> dict:
        return self.curve.config


# The README's sweep, shown first when it is there.
DEFAULT_SWEEP = "sweeps/mnist_mlp"


def list_sweeps(*roots: Path) -> dict[str, Path]:
    """Every directory under a root, at any depth, holding a config.json, as
    {'root_name/relative/path': path}, sorted (the app passes its `Places.sweeps` and
    `Places.results`; a study of several sweeps, e.g. sweeps/digits_mlp_nqm_decay/b8_decay, is
    listed sweep by sweep). Hidden directories and missing roots are skipped."""
    found = {}
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for config in sorted(root.rglob("config.json")):
            d = config.parent
            parts = d.relative_to(root).parts
            if parts and not any(p.startswith(".") for p in parts):
                found["/".join((root.name, *parts))] = d
    return found


@functools.lru_cache(maxsize=256)
def _records_in(path: str, size: int, mtime_ns: int) -> int:
    """Non-empty lines of a JSON-lines file, read once per (size, mtime): the app asks on every
    rerun, and a trials.jsonl can hold 100 MB."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def sweep_label(name: str, path: Path) -> str:
    """`name`, with '(unfinished: N of M trials)' when trials.jsonl holds fewer trials than its
    config.json asks for (a sweep still running, or stopped to be resumed); `name` alone when
    either file cannot be read (the sweep's own loading reports that)."""
    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        wanted = len(config["batch_sizes"]) * int(config["trials"])
        st = os.stat(path / "trials.jsonl")
        have = _records_in(str(path / "trials.jsonl"), st.st_size, st.st_mtime_ns)
    except (OSError, ValueError, KeyError, TypeError):
        return name
    return name if have >= wanted else f"{name} (unfinished: {have} of {wanted} trials)"


def signature(path) -> tuple:
    """(path, size and mtime of config.json, trials.jsonl and repeats.jsonl): changes whenever a
    sweep being written gains a trial or a rerun, so a cache keyed on it is never stale."""
    path = Path(path)
    out = [str(path)]
    for name in ("config.json", "trials.jsonl", REPEATS_FILE):
        try:
            st = os.stat(path / name)
            out += [st.st_size, st.st_mtime_ns]
        except OSError:
            out += [None, None]
    return tuple(out)


def load_sweep_dir(path, name: str | None = None) -> Measured:
    """A sweep directory (config.json + trials.jsonl, as `python -m realnets sweep` writes it).

    The curve is rebuilt from trials.jsonl (not read from curve.json), so a sweep still running
    shows every trial finished so far. Raises ValueError for a missing directory, a missing or
    corrupt config.json, a config without batch sizes, or a bad trials.jsonl record. `name`
    labels the curve ("measured: NAME"; default: the directory's name).
    """
    path = Path(path)
    config, records = load_sweep(path)
    return measured(build_curve(records, config, read_repeats(path)), records,
                    name=name or path.name)


def load_batch_science_dir(path, goal: float | None, metric: str | None = None) -> list[Measured]:
    """Every workload of a published batch_science directory, at `goal` on `metric`
    (see `realnets.sweeps.batch_science.load_batch_science`; its ValueErrors pass through)."""
    metric = metric.strip() if isinstance(metric, str) and metric.strip() else None
    curves = load_batch_science(path, goal=goal, metric=metric)
    return [measured(c, (), name="/".join(str(c.config.get(k)) for k in
                                          ("dataset", "model", "optimizer"))) for c in curves]


def measured(curve: ScalingCurve, records: Sequence[TrialRecord] = (),
             name: str = "measured") -> Measured:
    """The app's tables of a measured curve; `records` (trials.jsonl) give the noise series."""
    doc = curve_document(curve)
    label = f"measured: {name}"
    points = pd.DataFrame(report.rows(doc), columns=report.COLUMNS)
    points.insert(0, "curve", label)
    for col in ("steps", "learning_rate", "momentum", "efficiency", "b_simple"):
        points[col] = pd.to_numeric(points[col], errors="coerce").astype(float)
    points["perfect"] = perfect_scaling(points["batch_size"].to_numpy(float),
                                        points["steps"].to_numpy())
    fit, regimes = doc.fit, doc.regimes
    points["fit"] = Fit(fit["s_min"], fit["b_crit"], fit["r2"], 0).predict(points["batch_size"])
    medians = (doc.b_crit_repeats or {}).get("rerun_median_steps")
    points["reruns_median"] = pd.to_numeric(
        pd.Series(medians if medians else [None] * len(points), index=points.index),
        errors="coerce").astype(float)
    summary = pd.DataFrame([{"curve": label, "s_min": fit["s_min"], "b_crit": fit["b_crit"],
                             "r2": fit["r2"], "cbs20": regimes["cbs20"],
                             "maximal_from": regimes["maximal_from"], **resampled_columns(doc)}])
    return Measured(name, curve, doc, points, summary, trials_table(curve),
                    noise_series(records))


def resampled_columns(document: CurveDocument) -> dict:
    """The summary columns of the measured B_crit's interval (`curve.b_crit_resampled`):
    b_crit_resampled_p16 / _p84 and b_crit_interval (how it was made) where the trials could be
    resampled (--full-trials sweeps, batch_science) or the best trials were rerun with other
    seeds, else none; b_crit_reruns_median_curve where the winners were rerun (the B_crit of
    the reruns' median steps, `curve.b_crit_over_repeats`), with b_crit_reruns_median_p16 /
    _p84, its 16-84% range over the reruns' seeds drawn again, where fitted; b_crit_search_lo /
    _hi where a 4x larger search would likely put B_crit (`robustness.search_range`)."""
    r = document.b_crit_resampled
    out = {}
    if r is not None and r["available"] and r["median"] is not None:
        out = {"b_crit_resampled_p16": r["p16"], "b_crit_resampled_p84": r["p84"],
               "b_crit_interval": ("reruns under other seeds" if r.get("method") == "repeats"
                                   else "resampled trials")}
    search = (document.robustness or {}).get("search")
    if search:
        out["b_crit_search_lo"], out["b_crit_search_hi"] = search["lo"], search["hi"]
    repeats = document.b_crit_repeats
    if repeats and repeats.get("available"):
        out["b_crit_reruns_median_curve"] = repeats.get("rerun_median_b_crit")
        over_seeds = repeats.get("rerun_median_resampled") or {}
        if over_seeds.get("p16") is not None:
            out["b_crit_reruns_median_p16"] = over_seeds["p16"]
            out["b_crit_reruns_median_p84"] = over_seeds["p84"]
    return out


def perfect_scaling(batch_sizes: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Perfect scaling from the smallest batch size: S(B0) B0 / B (NaN if B0 was not reached)."""
    if not batch_sizes.size or not np.isfinite(steps[0]):
        return np.full(batch_sizes.shape, np.nan)
    return steps[0] * batch_sizes[0] / batch_sizes


TRIAL_COLUMNS = ("batch_size", "trial_id", "status", "learning_rate", "momentum",
                 "one_minus_momentum", "final_lr_fraction", "decay_steps", "steps_to_goal",
                 "steps_run", "best")
NUMERIC_TRIAL_COLUMNS = ("learning_rate", "momentum", "one_minus_momentum", "final_lr_fraction",
                         "decay_steps", "steps_to_goal", "steps_run")


def decayed(trials: pd.DataFrame) -> bool:
    """Whether any trial of a `trials_table` decayed its rate (final_lr_fraction below 1)."""
    return bool((trials["final_lr_fraction"] < 1).any()) if "final_lr_fraction" in trials else False


def trials_table(curve: ScalingCurve) -> pd.DataFrame:
    """Every trial behind the curve's points (see Measured.trials). A trial without momentum
    (plain SGD) has momentum 0, so 1 - momentum = 1; a constant rate has final_lr_fraction 1
    (also for records written before decays existed), and decay_steps is NaN unless the decay's
    length was searched (else it spans the run)."""
    rows = []
    for p in curve.points:
        best = best_row(p.trials)
        for t in p.trials:
            is_best = best is not None and t.get("trial_id") == best["trial_id"]
            momentum = t.get("momentum")
            momentum = 0.0 if momentum is None else float(momentum)
            rows.append({"batch_size": int(p.batch_size), "trial_id": str(t.get("trial_id")),
                         "status": STATUS_LABELS.get(t.get("status"), str(t.get("status"))),
                         "learning_rate": t.get("learning_rate"), "momentum": momentum,
                         "one_minus_momentum": 1.0 - momentum,
                         "final_lr_fraction": t.get("final_lr_fraction", 1.0),
                         "decay_steps": t.get("decay_steps"),
                         "steps_to_goal": t.get("steps_to_goal"), "steps_run": t.get("steps_run"),
                         "best": is_best})
    out = pd.DataFrame(rows, columns=TRIAL_COLUMNS)
    for col in NUMERIC_TRIAL_COLUMNS:
        out[col] = pd.to_numeric(out[col], errors="coerce").astype(float)
    out["best"] = out["best"].astype(bool)
    return out


def noise_series(records: list[TrialRecord]) -> pd.DataFrame:
    """B_simple along training of each batch size's best trial, from trials.jsonl records.

    The best trial reached the goal in the fewest steps (ties: lowest trial id), as in
    `realnets.sweeps.curve.build_curve`; where none reached it, the trial that ran longest without
    diverging. Steps without an estimate (null: the moving averages were not yet positive) are
    left out.
    """
    by_batch: dict[int, list[TrialRecord]] = {}
    for r in records:
        by_batch.setdefault(r.batch_size, []).append(r)
    rows = []
    for batch_size, trials in sorted(by_batch.items()):
        best = best_trial(trials)
        if best is None:
            alive = [r for r in trials if r.status != "INFEASIBLE"]
            if not alive:
                continue
            best = min(alive, key=lambda r: (-r.steps_run, r.trial_id))
        ns = best.noise_scale
        for step, value in zip(ns.step, ns.b_simple):
            if value is not None and math.isfinite(value) and value > 0:
                rows.append({"batch_size": batch_size, "trial_id": str(best.trial_id),
                             "step": int(step), "b_simple": float(value)})
    return pd.DataFrame(rows, columns=["batch_size", "trial_id", "step", "b_simple"])

"""What the app's "Measured curves" section shows, as plain tables: shipped sweeps, any sweep or
batch_science directory, the trials behind each point, the measured noise scale, and the
side-by-side with an NQM prediction.

Pure library code (no streamlit): `app.py` reads the controls and calls these, `ui.charts`
draws the tables. Curves and their analysis come from `realnets.sweeps.curve` (`build_curve`,
`curve_document`), the same functions the CLI's `report` uses, so the app and the CLI agree.
Every loader raises ValueError with a message naming the path and what is wrong.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from nqm.validation import parse_batch_sizes
from nqm.curve import ScalingCurve
from nqm.problem import NQMConfig
from nqm.scaling import Fit, analyse, analyse_curve
from nqm.tuning import OptimizerSpec, tune_curve
from realnets.sweeps import report
from realnets import workloads
from realnets.sweeps.batch_science import load_batch_science
from realnets.sweeps.curve import best_row, best_trial, build_curve, curve_document
from realnets.sweeps.records import (IDENTITY, CurveDocument, SweepConfig, TrialRecord,
                                     load_sweep)
from realnets.validation.files import VALIDATION_FILE, read_validation
from ui.places import Places

STATUS_LABELS = {"COMPLETE": "reached", "INCOMPLETE": "not reached", "INFEASIBLE": "infeasible"}
NO_BUDGET = 10 ** 8                    # the NQM explorer's step budget


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
        to their end, also b_crit_resampled_p16 / _p84 (`realnets.sweeps.curve.b_crit_resampled`).
      trials: one row per trial: batch_size, trial_id, status ('reached', 'not reached',
        'infeasible'), learning_rate, momentum, one_minus_momentum, steps_to_goal, steps_run, best
        (the trial that set the point).
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


# ----------------------------------------------------------------------------------------------
# Finding and loading


# The README's sweep, shown first when it is there.
DEFAULT_SWEEP = "sweeps/mnist_mlp"


def list_sweeps(*roots: Path) -> dict[str, Path]:
    """Every `root/*/` directory holding a config.json, as {'root_name/dir_name': path}, sorted
    (the app passes its `Places.sweeps` and `Places.results`). Missing roots are skipped."""
    found = {}
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for d in sorted(root.iterdir()):
            if d.is_dir() and not d.name.startswith(".") and (d / "config.json").is_file():
                found[f"{root.name}/{d.name}"] = d
    return found


def signature(path) -> tuple:
    """(path, size and mtime of config.json and trials.jsonl): changes whenever a sweep being
    written gains a trial, so a cache keyed on it is never stale."""
    path = Path(path)
    out = [str(path)]
    for name in ("config.json", "trials.jsonl"):
        try:
            st = os.stat(path / name)
            out += [st.st_size, st.st_mtime_ns]
        except OSError:
            out += [None, None]
    return tuple(out)


def load_sweep_dir(path) -> Measured:
    """A sweep directory (config.json + trials.jsonl, as `python -m realnets sweep` writes it).

    The curve is rebuilt from trials.jsonl (not read from curve.json), so a sweep still running
    shows every trial finished so far. Raises ValueError for a missing directory, a missing or
    corrupt config.json, a config without batch sizes, or a bad trials.jsonl record.
    """
    path = Path(path)
    config, records = load_sweep(path)
    return measured(build_curve(records, config), records, name=path.name)


def load_batch_science_dir(path, goal: float | None, metric: str | None = None) -> list[Measured]:
    """Every workload of a published batch_science directory, at `goal` on `metric`
    (see `realnets.sweeps.batch_science.load_batch_science`; its ValueErrors pass through)."""
    metric = metric.strip() if isinstance(metric, str) and metric.strip() else None
    curves = load_batch_science(path, goal=goal, metric=metric)
    return [measured(c, (), name="/".join(str(c.config.get(k)) for k in
                                          ("dataset", "model", "optimizer"))) for c in curves]


# ----------------------------------------------------------------------------------------------
# Tables of one measured curve


def measured(curve: ScalingCurve, records: Sequence[TrialRecord] = (),
             name: str = "measured") -> Measured:
    """The app's tables of a measured curve; `records` (trials.jsonl) give the noise series."""
    doc = curve_document(curve)
    label = f"measured: {name}"
    points = pd.DataFrame(report.rows(doc), columns=report.COLUMNS)
    points.insert(0, "curve", label)
    for col in ("steps", "learning_rate", "momentum", "efficiency", "b_simple"):
        points[col] = pd.to_numeric(points[col], errors="coerce").astype(float)
    points["perfect"] = _perfect(points["batch_size"].to_numpy(float), points["steps"].to_numpy())
    fit, regimes = doc.fit, doc.regimes
    points["fit"] = Fit(fit["s_min"], fit["b_crit"], fit["r2"], 0).predict(points["batch_size"])
    summary = pd.DataFrame([{"curve": label, "s_min": fit["s_min"], "b_crit": fit["b_crit"],
                             "r2": fit["r2"], "cbs20": regimes["cbs20"],
                             "maximal_from": regimes["maximal_from"], **resampled_columns(doc)}])
    return Measured(name, curve, doc, points, summary, trials_table(curve),
                    noise_series(records))


def resampled_columns(document: CurveDocument) -> dict:
    """The summary columns of the B_crit over resampled trials (`curve.b_crit_resampled`):
    b_crit_resampled_p16 / _p84 where the trials could be resampled (--full-trials sweeps,
    batch_science), else none."""
    r = document.b_crit_resampled
    if r is None or not r["available"] or r["median"] is None:
        return {}
    return {"b_crit_resampled_p16": r["p16"], "b_crit_resampled_p84": r["p84"]}


def _perfect(batch_sizes: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Perfect scaling from the smallest batch size: S(B0) B0 / B (NaN if B0 was not reached)."""
    if not batch_sizes.size or not np.isfinite(steps[0]):
        return np.full(batch_sizes.shape, np.nan)
    return steps[0] * batch_sizes[0] / batch_sizes


TRIAL_COLUMNS = ("batch_size", "trial_id", "status", "learning_rate", "momentum",
                 "one_minus_momentum", "steps_to_goal", "steps_run", "best")


def trials_table(curve: ScalingCurve) -> pd.DataFrame:
    """Every trial behind the curve's points (see Measured.trials). A trial without momentum
    (plain SGD) has momentum 0, so 1 - momentum = 1."""
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
                         "steps_to_goal": t.get("steps_to_goal"), "steps_run": t.get("steps_run"),
                         "best": is_best})
    out = pd.DataFrame(rows, columns=TRIAL_COLUMNS)
    for col in ("learning_rate", "momentum", "one_minus_momentum", "steps_to_goal", "steps_run"):
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


# ----------------------------------------------------------------------------------------------
# The NQM beside a measured curve


@dataclass(frozen=True)
class PredictionSetup:
    """Which NQM curve to draw beside a measured one (hashable: a cache key).

    Attributes:
      config: the NQM problem.
      optimizer: the tuned family.
      max_steps: step budget of the tuning.
      exact: True when the measured curve is the `nqm` workload, i.e. this NQM trained by SGD:
        then the prediction is in the same units (steps to the same loss) and needs no scaling.
      label: what the chart's legend calls it.
    """

    config: NQMConfig
    optimizer: OptimizerSpec
    max_steps: int
    exact: bool
    label: str


def prediction_setup(measured_config: dict, explorer_config: NQMConfig,
                     optimizer: str = "sgd", precond_power: float = 0.0) -> PredictionSetup:
    """The exact prediction for the `nqm` workload (`workloads.NQM_WORKLOAD` at the sweep's goal,
    tuned for its optimizer within its step budget); for any other curve, the explorer's problem
    with the explorer's optimizer."""
    if measured_config.get("workload") == "nqm":
        goal = measured_config.get("goal", workloads.NQM_WORKLOAD.target)
        problem = replace(workloads.NQM_WORKLOAD, target=float(goal))
        name = "momentum" if measured_config.get("optimizer") == "momentum" else "sgd"
        budget = measured_config.get("max_steps") or NO_BUDGET
        label = (f"NQM exact: {name}, d = {problem.dim}, h_i = i^-{problem.spectrum_exponent:g}, "
                 f"target {problem.target:g}")
        return PredictionSetup(problem, OptimizerSpec(name), int(budget), True, label)
    spec = OptimizerSpec(optimizer, float(precond_power))
    label = (f"NQM: {optimizer}{f', p = {precond_power:g}' if precond_power else ''}, "
             f"d = {explorer_config.dim}, h_i = i^-{explorer_config.spectrum_exponent:g}, "
             f"c = {explorer_config.noise}, target {explorer_config.target:g}")
    return PredictionSetup(explorer_config, spec, NO_BUDGET, False, label)


def predict(setup: PredictionSetup, batch_sizes) -> ScalingCurve:
    """The tuned NQM curve of `setup` at `batch_sizes` (`nqm.tuning.tune_curve`)."""
    return tune_curve(setup.config, setup.optimizer, tuple(int(b) for b in batch_sizes),
                      setup.max_steps)


@dataclass(frozen=True)
class Comparison:
    """A measured curve and an NQM curve side by side.

    Attributes:
      points: both curves in the chart format of `Measured.points` (column `curve` names each;
        the NQM's steps already multiplied by `scale` when scaled).
      summary: one row per curve: curve, s_min, b_crit, r2, cbs20, maximal_from, b_crit_ratio
        (that curve's B_crit / the measured B_crit).
      table: one row per batch size: batch_size, measured_steps, nqm_steps, and when scaled
        nqm_steps_scaled.
      b_crit_measured, b_crit_predicted: B_crit of the fits S = S_min (1 + B_crit / B).
      b_crit_ratio: predicted / measured (None when either fit is missing).
      scale: factor applied to the NQM's steps (measured S_min / NQM S_min), or None.
      note: why scaling was not possible, else ''.
    """

    points: pd.DataFrame
    summary: pd.DataFrame
    table: pd.DataFrame
    b_crit_measured: float | None
    b_crit_predicted: float | None
    b_crit_ratio: float | None
    scale: float | None
    note: str = ""


def compare(measured_curve: ScalingCurve, predicted: ScalingCurve, scale_to_measured: bool = False,
            measured_label: str = "measured", predicted_label: str = "NQM",
            measured_columns: dict | None = None) -> Comparison:
    """Both curves, their fits, and the ratio of their critical batch sizes.

    `measured_columns` are added to the measured curve's summary row (e.g. `resampled_columns`
    of its document, computed once when it was loaded).

    With `scale_to_measured` the NQM's steps are multiplied by S_min(measured) / S_min(NQM), so
    both fits share S_min and only the shapes differ; B_crit, cbs20 and maximal_from do not
    change under that scaling (the fit is on log S, a constant factor moves only S_min).
    """
    m_analysis = analyse_curve(measured_curve)
    p_steps = predicted.steps
    p_analysis = analyse_curve(predicted)
    scale, note = None, ""
    if scale_to_measured:
        if m_analysis.fit.s_min is None or p_analysis.fit.s_min is None:
            note = ("cannot scale to the measured S_min: each curve needs at least two batch sizes "
                    "that reached their target")
        else:
            scale = m_analysis.fit.s_min / p_analysis.fit.s_min
            p_steps = p_steps * scale
            p_analysis = analyse(predicted.batch_sizes, p_steps)
            predicted_label = f"{predicted_label} x {scale:.3g} (scaled to measured S_min)"

    frames, summary = [], []
    for label, curve, steps, analysis in (
            (measured_label, measured_curve, measured_curve.steps, m_analysis),
            (predicted_label, predicted, p_steps, p_analysis)):
        b = curve.batch_sizes.astype(float)
        frames.append(pd.DataFrame({
            "curve": label, "batch_size": curve.batch_sizes, "steps": steps,
            "learning_rate": [np.nan if p.learning_rate is None else p.learning_rate
                              for p in curve.points],
            "momentum": [np.nan if p.momentum is None else p.momentum for p in curve.points],
            "regime": list(analysis.regimes), "perfect": _perfect(b, np.asarray(steps, float)),
            "fit": analysis.fit.predict(b)}))
        summary.append({"curve": label, "s_min": analysis.fit.s_min, "b_crit": analysis.fit.b_crit,
                        "r2": analysis.fit.r2, "cbs20": analysis.cbs20,
                        "maximal_from": analysis.maximal_from})
    b_meas, b_pred = m_analysis.fit.b_crit, p_analysis.fit.b_crit
    ratio = None if b_meas is None or b_pred is None else b_pred / b_meas
    summary[0].update(measured_columns or {})
    summary[0]["b_crit_ratio"] = None if b_meas is None else 1.0
    summary[1]["b_crit_ratio"] = ratio

    table = pd.DataFrame({"batch_size": measured_curve.batch_sizes,
                          "measured_steps": measured_curve.steps}).merge(
        pd.DataFrame({"batch_size": predicted.batch_sizes, "nqm_steps": predicted.steps}),
        on="batch_size", how="outer")
    if scale is not None:
        table["nqm_steps_scaled"] = table["nqm_steps"] * scale
    return Comparison(pd.concat(frames, ignore_index=True), pd.DataFrame(summary), table,
                      b_meas, b_pred, ratio, scale, note)


# ----------------------------------------------------------------------------------------------
# Running a sweep from the app


def sweep_config(workload: str, batch_sizes: str, trials: int, max_steps: int = 0,
                 seed: int = 0) -> SweepConfig:
    """A SweepConfig from the app's form, the workload's defaults filling the rest (as
    `python -m realnets sweep` does); `batch_sizes` as the CLI takes them ('16,32' or '16:256');
    max_steps 0: the workload's budget. Raises ValueError naming the bad field."""
    w = workloads.get(workload)
    sizes = parse_batch_sizes(batch_sizes or "")
    return SweepConfig(workload=w.name, batch_sizes=tuple(sizes), trials=int(trials),
                       max_steps=int(max_steps) or w.max_steps, goal=w.goal, optimizer=w.optimizer,
                       search=w.search,
                       seed=int(seed), eval_resolution=w.eval_resolution)


def out_dir_for(text: str, workload: str, places: Places) -> Path:
    """The sweep directory of the form: `<places.results>/<workload>` when left blank."""
    return places.resolve(text) if text and text.strip() else places.results / workload


def finished_trials(measured_sweep: Measured, config: SweepConfig) -> tuple[int, int]:
    """(finished, total) trials of `config` in a loaded sweep directory (for a progress bar)."""
    t = measured_sweep.trials
    ids = pd.to_numeric(t["trial_id"], errors="coerce")
    mine = t["batch_size"].isin(config.batch_sizes) & (ids < config.trials)
    return int(mine.sum()), len(config.batch_sizes) * config.trials


def lower_bound(setup: PredictionSetup, batch_sizes) -> pd.DataFrame | None:
    """The NQM's estimator bound sum(c/h) / (2 target B) at `batch_sizes` when the prediction is
    exact (then it bounds the measured curve too, both being the same problem), else None."""
    if not setup.exact:
        return None
    b = np.asarray(batch_sizes, dtype=float)
    return pd.DataFrame({"batch_size": b, "steps": setup.config.problem().lower_bound_steps(b)})


# ----------------------------------------------------------------------------------------------
# Validation reports (`python -m realnets validate`) beside a measured curve.

def validation_for(config: dict, root: Path) -> Path | None:
    """The directory of the validation report made from a sweep of the same study as this config
    (`realnets.sweeps.records.IDENTITY` and the trials per batch size), or None: a report of
    another study of the same workload would compare the wrong curve."""
    workload = config.get("workload")
    if not workload:
        return None
    path = Path(root) / str(workload)
    if not (path / VALIDATION_FILE).is_file():
        return None
    try:
        made_from = read_validation(path).sweep_config
    except ValueError:
        return None
    if any(made_from.get(k) != config.get(k) for k in (*IDENTITY, "trials")):
        return None
    return path


def load_validation(out_dir: Path) -> pd.DataFrame:
    """The comparison table of a validation directory, one row per estimate (for the app):
    workload, quantity, checkpoint, value, uncertainty, ratio, note."""
    rows = read_validation(out_dir).comparison
    table = pd.DataFrame(rows, columns=["workload", "quantity", "checkpoint", "value",
                                        "uncertainty", "ratio", "note"])
    for col in ("value", "uncertainty", "ratio"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype(float)
    return table

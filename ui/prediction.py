"""The NQM beside a measured curve: which NQM to tune (the exact one for the `nqm` workload,
else the explorer's), its tuned curve, its estimator bound, and the two curves side by side
with the ratio of their critical batch sizes.

Pure library code (no streamlit): `app.py` calls these with a `ui.measured.Measured` curve.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from nqm import linear_decay
from nqm.curve import ScalingCurve
from nqm.problem import NQMConfig
from nqm.scaling import analyse, analyse_curve
from nqm.tuning import OptimizerSpec, tune_curve
from realnets import workloads
from ui.explorer import DECAY_OF, tuned_curve
from ui.measured import perfect_scaling

NO_BUDGET = 10 ** 8                    # the NQM explorer's step budget


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
      decay_bounds: for the exact NQM, the (lo, hi) learning-rate bounds of a linear decay tuned
        from the constant curve (`nqm.linear_decay`) when its sweep searched one (the sweep's
        rate range); None: constant, and always None for the explorer's NQM.
      explorer_optimizer: for the explorer's NQM (not exact), the explorer's name of what is
        tuned (`ui.explorer.tuned_curve`, its own bounds: e.g. 'momentum', 'momentum_decay');
        None when exact.
    """

    config: NQMConfig
    optimizer: OptimizerSpec
    max_steps: int
    exact: bool
    label: str
    decay_bounds: tuple[float, float] | None = None
    explorer_optimizer: str | None = None


def prediction_setup(measured_config: dict, explorer_config: NQMConfig,
                     optimizer: str = "sgd", precond_power: float = 0.0,
                     decayed_trials: bool = False) -> PredictionSetup:
    """The exact prediction for the `nqm` workload (`workloads.NQM_WORKLOAD` at the sweep's goal,
    tuned for its optimizer within its step budget, with a linear decay inside the sweep's rate
    range when the sweep searched one); for any other curve, the explorer's problem with the
    explorer's optimizer (Adam at p = 0; a linear decay, at p = 0 within the explorer's rate
    bounds, only beside a sweep that searched one or whose trials decayed, `decayed_trials`, as
    a batch_science study's may: else its optimizer at a constant rate)."""
    if measured_config.get("workload") == "nqm":
        goal = measured_config.get("goal", workloads.NQM_WORKLOAD.target)
        problem = replace(workloads.NQM_WORKLOAD, target=float(goal))
        name = "momentum" if measured_config.get("optimizer") == "momentum" else "sgd"
        budget = measured_config.get("max_steps") or NO_BUDGET
        search = measured_config.get("search") or {}
        decay = (tuple(float(x) for x in search["learning_rate"])
                 if search.get("final_lr_fraction") is not None else None)
        label = (f"NQM exact: {name}{', linear decay' if decay else ''}, d = {problem.dim}, "
                 f"h_i = i^-{problem.spectrum_exponent:g}, target {problem.target:g}")
        return PredictionSetup(problem, OptimizerSpec(name), int(budget), True, label, decay)
    # the explorer's NQM is not fitted to the sweep: a decay chosen in the explorer is drawn
    # only beside a sweep that searched one, else at its constant rate (as that sweep ran); the
    # decays and Adam at p = 0, with the explorer's rate bounds, as the explorer tunes them
    searched = (measured_config.get("search") or {}).get("final_lr_fraction") is not None
    decayed = optimizer in DECAY_OF and (searched or decayed_trials)
    tuned_as = optimizer if decayed else DECAY_OF.get(optimizer, optimizer)
    optimizer = DECAY_OF.get(optimizer, optimizer)
    precond_power = 0.0 if optimizer == "adam" or decayed else float(precond_power)
    spec = OptimizerSpec(optimizer, precond_power)
    label = (f"NQM: {optimizer}{', linear decay' if decayed else ''}"
             f"{f', p = {precond_power:g}' if precond_power else ''}, "
             f"d = {explorer_config.dim}, h_i = i^-{explorer_config.spectrum_exponent:g}, "
             f"c = {explorer_config.noise}, target {explorer_config.target:g}")
    return PredictionSetup(explorer_config, spec, NO_BUDGET, False, label,
                           explorer_optimizer=tuned_as)


def predict(setup: PredictionSetup, batch_sizes) -> ScalingCurve:
    """The tuned NQM curve of `setup` at `batch_sizes`: the explorer's own curve
    (`ui.explorer.tuned_curve`) for the explorer's NQM; for the exact one `nqm.tuning.tune_curve`,
    then `nqm.linear_decay.tune_decay_curve` within `setup.decay_bounds` when set. A decay is
    refused in one line above its work cap."""
    batch_sizes = tuple(int(b) for b in batch_sizes)
    if not setup.exact:
        return tuned_curve(setup.config, setup.explorer_optimizer, setup.optimizer.precond_power,
                           batch_sizes, setup.max_steps)
    curve = tune_curve(setup.config, setup.optimizer, batch_sizes, setup.max_steps)
    if setup.decay_bounds is None:
        return curve
    problem = setup.config.problem()
    linear_decay.check_work(problem, setup.optimizer.name, [p.steps for p in curve.points])
    return linear_decay.tune_decay_curve(problem, setup.optimizer.name, curve,
                                         learning_rate_bounds=setup.decay_bounds)


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
            measured_columns: dict | None = None,
            reruns_median: Sequence[float] | None = None) -> Comparison:
    """Both curves, their fits, and the ratio of their critical batch sizes.

    `measured_columns` are added to the measured curve's summary row (e.g. `resampled_columns`
    of its document, computed once when it was loaded); `reruns_median` (one per measured
    point, NaN where none: `ui.measured.Measured.points["reruns_median"]`) becomes the measured
    rows' `reruns_median` column, which `ui.charts.steps_chart` draws.

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
    for label, curve, steps, analysis, reruns in (
            (measured_label, measured_curve, measured_curve.steps, m_analysis, reruns_median),
            (predicted_label, predicted, p_steps, p_analysis, None)):
        b = curve.batch_sizes.astype(float)
        frames.append(pd.DataFrame({
            "curve": label, "batch_size": curve.batch_sizes, "steps": steps,
            "learning_rate": [np.nan if p.learning_rate is None else p.learning_rate
                              for p in curve.points],
            "momentum": [np.nan if p.momentum is None else p.momentum for p in curve.points],
            "regime": list(analysis.regimes),
            "perfect": perfect_scaling(b, np.asarray(steps, float)),
            "fit": analysis.fit.predict(b)}))
        if reruns_median is not None:
            frames[-1]["reruns_median"] = np.nan if reruns is None else np.asarray(reruns, float)
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


def lower_bound(setup: PredictionSetup, batch_sizes) -> pd.DataFrame | None:
    """The NQM's estimator bound sum(c/h) / (2 target B) at `batch_sizes` when the prediction is
    exact (then it bounds the measured curve too, both being the same problem), else None."""
    if not setup.exact:
        return None
    b = np.asarray(batch_sizes, dtype=float)
    return pd.DataFrame({"batch_size": b, "steps": setup.config.problem().lower_bound_steps(b)})

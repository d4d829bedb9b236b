"""Validation: three predictions of a workload's critical batch size beside the measured one.

For a measured sweep (DESIGN.md section 5) this module
1. analyses the measured curve (`nqm.scaling.analyse_curve`: the fit S_min (1 + B_crit / B));
2. takes the best trial at a calibration batch size (default: the smallest batch size the sweep
   reached, which is in the perfect-scaling regime by construction and gives the longest run,
   so its checkpoints are far apart) and retrains it alone with the sweep's settings (same seed,
   trial id, budget and schedule; stopped at the sweep's steps to goal) to get two checkpoints:
   the initialisation (step 0: `task.init_params(fold_in(key(seed), trial_id))`, the trainer's
   rule) and the parameters at the step it reached the goal;
3. fits an NQM to the network (`realnets.calibrate`): curvature h_i and noise c_i of the top-k
   Hessian directions, a power-law tail, measured at a checkpoint (default: the goal checkpoint,
   where the noise-dominated end of the run decides how far a bigger batch helps; the
   initialisation is reported too), and the initial second moments E[theta_i^2] = g_i^2 / h_i^2
   from the components g_i of the gradient *at initialisation* along those directions (on a
   fixed quadratic G_0 = H (theta_0 - theta*)). The target is the training loss at which the run
   reached its goal (the mean loss over the calibration sample at the goal checkpoint, minus an
   optional loss floor L*, default 0); for a workload whose metric is the loss itself (the NQM)
   the goal is that loss, and it is used as it is. A second target needs no L*: the fitted
   quadratic's own loss at the goal checkpoint (`quadratic_target`); predictions are made with
   both, the headline being `ValidationConfig.target_rule`. Every prediction's B_crit gets a
   spread from a parametric bootstrap over the fitted numbers (`bootstrap_b_crit`);
4. predicts B_crit three ways:
   - the calibrated NQM's tuned curve (`nqm.tuning.tune_curve`; SGD for sgd sweeps, heavy-ball
     momentum for momentum, nesterov and adam sweeps: Adam has no NQM counterpart in this engine
     with a learning rate on the same scale, so the NQM tunes momentum SGD instead), analysed by
     the same function as the measured curve; beside it, the NQM run with exactly the sweep's
     trial metaparameters and step budget (min over trials per batch size, like the sweep): the
     same search as the measurement, not available for adam;
   - McCandlish et al.'s B_crit ~ B_noise = tr(H Sigma) / (G^T H G), measured by Hessian-vector
     products at the checkpoints of the calibration run (`calibrate.hessian_noise_scale`);
   - B_simple = tr(Sigma) / |G|^2, the cheap proxy, as the trainer measured it during the sweep
     (moving averages, pooled over batch sizes: `realnets.sweep.pooled_b_simple`), and from the
     calibration sample at the checkpoints;
5. returns one JSON-ready document (`validate`), written by `write_validation` and read back by
   `load_validation`, whose `comparison` table the report (`realnets.validation_report`) and the
   app show.

References:
  McCandlish et al. 2018, "An empirical model of large-batch training", eqs. 2.8-2.11 and
    section 4 (B_crit of a target compared with the noise scale at that loss).
  Zhang et al. 2019, "Which algorithmic choices matter at which batch sizes?", section 3.
  Shallue et al. 2018 (the measured protocol).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import numpy as np
import pandas as pd

from nqm import noise_scale
from nqm.crossing import NOT_REACHED, steps_to_target
from nqm.curve import CurvePoint, ScalingCurve
from nqm.moments import dynamics
from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, tune_curve
from realnets import calibrate, curvature, store
from realnets.sweep import (IDENTITY, SweepConfig, build_curve, curve_document, load_sweep,
                            run_sweep)
from realnets.sweep import best_trial as sweep_best_trial
from realnets.tasks import Task
from realnets.trainer import RunConfig, TrialSpec, run_trials

CHECKPOINTS = ("goal", "init")
VALIDATION_FILE = "validation.json"
TARGET_RULES = ("train_loss", "quadratic")
TARGET_LABELS = {"train_loss": "target = training loss at the goal",
                 "quadratic": "target = the quadratic's loss at the goal"}
NQM_FAMILY = {"sgd": "sgd", "momentum": "momentum", "nesterov": "momentum", "adam": "momentum"}


@dataclass(frozen=True)
class ValidationConfig:
    """How a sweep is validated (see the module docstring).

    Attributes:
      batch_size: calibration batch size (one of the sweep's, reached); None: the smallest reached.
      checkpoints: where curvature and noise are measured, 'goal' and/or 'init'; the first one is
        the headline prediction.
      top_k: measured Hessian eigen-directions.
      lanczos_steps: Lanczos steps for them (None: max(2 k, k + 20)).
      slq_steps, slq_probes: stochastic Lanczos quadrature for the tail.
      floor_ratio: the tail stops at curvature floor_ratio * h_1 (at most h_k / 2): directions
        flatter than that are left out of the NQM (their share of tr(H) and tr(Sigma) is reported).
      sample_rows: training rows of the calibration sample (Hessian, gradient statistics, target).
      noise_rows: per-example gradients in tr(H Sigma) (one HVP each).
      chunk_rows: rows per compiled call over the sample (None: all at once).
      loss_floor: L*, subtracted from the training loss at the goal for the NQM's target (the NQM
        measures loss above its minimum).
      seed: calibration sample and Lanczos/SLQ probes.
      nqm_max_steps: step budget of the tuned NQM curve (generous: its B_crit should not depend on
        the sweep's budget; the search-matched curve uses the sweep's budget).
      bootstrap: NQMs redrawn from the fitted numbers' uncertainties to give each predicted B_crit
        its spread (`bootstrap_b_crit`); 0 for none.
      target_rule: the headline NQM target, one of TARGET_RULES (both are always computed):
        'train_loss', the training loss at the goal minus `loss_floor` (the issue's rule); or
        'quadratic', the fitted quadratic's own loss at the goal checkpoint,
        0.5 sum_i g_goal,i^2 / h_i (see `quadratic_target`), which needs no L*.
    """

    batch_size: int | None = None
    checkpoints: tuple[str, ...] = CHECKPOINTS
    top_k: int = 20
    lanczos_steps: int | None = None
    slq_steps: int = 40
    slq_probes: int = 8
    floor_ratio: float = 1e-2
    sample_rows: int = 1024
    noise_rows: int = 128
    chunk_rows: int | None = None
    loss_floor: float = 0.0
    seed: int = 0
    nqm_max_steps: int = 10 ** 8
    bootstrap: int = 8
    target_rule: str = "train_loss"

    def __post_init__(self):
        def whole(name, value, lo):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < lo:
                raise ValueError(f"{name} must be a whole number >= {lo}, got {value!r}")

        if self.batch_size is not None:
            whole("batch-size", self.batch_size, 1)
        if not self.checkpoints or any(c not in CHECKPOINTS for c in self.checkpoints) or len(
                set(self.checkpoints)) != len(self.checkpoints):
            raise ValueError(f"checkpoints must be distinct names among {', '.join(CHECKPOINTS)}, "
                             f"got {','.join(self.checkpoints)!r}")
        whole("top-k", self.top_k, 1)
        if self.lanczos_steps is not None:
            whole("lanczos-steps", self.lanczos_steps, self.top_k)
        whole("slq-steps", self.slq_steps, 2)
        whole("slq-probes", self.slq_probes, 1)
        if not (math.isfinite(self.floor_ratio) and 0.0 < self.floor_ratio < 1.0):
            raise ValueError(f"floor-ratio must be in (0, 1), got {self.floor_ratio}")
        whole("sample-rows", self.sample_rows, 2)
        whole("noise-rows", self.noise_rows, 2)
        if self.noise_rows > self.sample_rows:
            raise ValueError(f"noise-rows must be <= sample-rows ({self.sample_rows}), got "
                             f"{self.noise_rows}")
        if self.chunk_rows is not None:
            whole("chunk-rows", self.chunk_rows, 1)
        if not (math.isfinite(self.loss_floor) and self.loss_floor >= 0.0):
            raise ValueError(f"loss-floor must be a finite number >= 0, got {self.loss_floor}")
        whole("nqm-max-steps", self.nqm_max_steps, 1)
        whole("bootstrap", self.bootstrap, 0)
        if self.target_rule not in TARGET_RULES:
            raise ValueError(f"target-rule must be one of {', '.join(TARGET_RULES)}, got "
                             f"{self.target_rule!r}")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["checkpoints"] = list(self.checkpoints)
        return out


# ---------------------------------------------------------------------------------------------
# The measured side.


def measured_summary(curve: ScalingCurve) -> dict:
    """The measured curve (points without their trials), its fit, regimes and noise scale."""
    doc = curve_document(curve)
    points = [{k: p[k] for k in ("batch_size", "steps", "learning_rate", "momentum")}
              for p in doc["points"]]
    return {"points": points, "fit": doc["fit"], "regimes": doc["regimes"],
            "b_simple_pooled": doc["noise_scale"]["b_simple"],
            "per_point_b_simple": doc["noise_scale"]["per_point_b_simple"]}


def ensure_sweep(workload, sweep_dir: Path, trials: int, progress: bool = True,
                 log=None) -> tuple[dict, list[dict]]:
    """(config, records) of the sweep in `sweep_dir`; when there is none, runs one first with the
    workload's defaults (batch sizes, budget, goal, optimizer, search) and `trials` trials per
    batch size. ValueError when the directory holds another workload or no finished trial."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / "config.json").exists():
        if log:
            log(f"no sweep in {sweep_dir}: running one ({trials} trials per batch size)")
        run_sweep(SweepConfig(workload=workload.name, batch_sizes=workload.batch_sizes,
                              trials=trials, max_steps=workload.max_steps, goal=workload.goal,
                              optimizer=workload.optimizer, search=workload.search,
                              eval_resolution=workload.eval_resolution), sweep_dir,
                  progress=progress)
    config, records = load_sweep(sweep_dir)
    if config.get("workload") != workload.name:
        raise ValueError(f"sweep {sweep_dir} is of workload {config.get('workload')!r}, not "
                         f"{workload.name!r}")
    if not records:
        raise ValueError(f"sweep directory {sweep_dir} has no finished trials")
    return config, records


def calibration_batch_size(curve: ScalingCurve, requested: int | None) -> int:
    """`requested` if the sweep reached the goal there, else ValueError; default: the smallest
    batch size that reached it."""
    reached = [p.batch_size for p in curve.points if p.reached]
    if not reached:
        raise ValueError("the sweep reached its goal at no batch size: nothing to calibrate on")
    if requested is None:
        return int(reached[0])
    if int(requested) not in reached:
        raise ValueError(f"batch-size must be one the sweep reached its goal at "
                         f"({', '.join(map(str, reached))}), got {requested}")
    return int(requested)


def best_trial(records: list[dict], batch_size: int) -> dict:
    """The trial that set the point at `batch_size` (`realnets.sweep.best_trial`'s rule)."""
    best = sweep_best_trial([r for r in records if int(r["batch_size"]) == batch_size])
    if best is None:
        raise ValueError(f"no trial reached the goal at batch size {batch_size}")
    return best


def init_params_of(task: Task, seed: int, trial_id: int):
    """Step-0 parameters of a trial, by the trainer's rule fold_in(key(seed), trial_id)."""
    key = jax.random.fold_in(jax.random.key(seed), trial_id)
    return jax.tree.map(np.asarray, jax.jit(task.init_params)(key))


def retrain(task: Task, sweep_config: dict, trial: dict, devices=None):
    """Reruns one sweep trial alone, stopped at its steps to goal; returns (record, goal params).

    Same seed (data order), trial id (initialisation), budget (`max_steps`: a linear-decay
    schedule depends on it), optimizer and evaluation cadence as the sweep. The rerun is one
    trial where the sweep vmapped several, so float rounding can move its goal step a little:
    the record says where it got (its `steps_to_goal`, or INCOMPLETE at the sweep's step).
    """
    run = RunConfig(batch_size=int(trial["batch_size"]), max_steps=int(sweep_config["max_steps"]),
                    goal=float(sweep_config["goal"]), optimizer=sweep_config["optimizer"],
                    seed=int(sweep_config.get("seed", 0)),
                    eval_resolution=float(sweep_config.get("eval_resolution", 0.02)),
                    max_rows_per_device=int(sweep_config.get("max_rows_per_device", 4096)),
                    stop_after=int(trial["steps_to_goal"]),
                    # the same gradient path (two halves or one batch) as the sweep's trial
                    noise_every=(1 if trial.get("noise_every") is None
                                 else int(trial["noise_every"])))
    spec = TrialSpec(trial_id=int(trial["trial_id"]), learning_rate=float(trial["learning_rate"]),
                     momentum=trial.get("momentum"),
                     final_lr_fraction=float(trial.get("final_lr_fraction") or 1.0))
    params = []
    (record,) = run_trials(task, run, [spec], devices=devices, final_params=params)
    return record, params[0]


def calibration_sample(task: Task, rows: int, seed: int) -> dict:
    """`rows` training rows drawn without replacement (or fresh draws for unlimited data)."""
    rng = np.random.default_rng(seed)
    if task.train is None:
        return task.draw_batch(rng, rows)
    n = task.train_size
    idx = np.sort(rng.choice(n, size=min(rows, n), replace=False))
    return {k: np.asarray(v)[idx] for k, v in task.train.items()}


def mean_loss(task: Task, params, sample: dict, chunk_rows: int | None = None,
              devices=None) -> float:
    """The task's mean training loss over the sample (float64)."""
    rows = curvature.ShardedSample(sample, chunk_rows=chunk_rows, devices=devices)
    return float(rows.mean(lambda p, b: task.loss_fn(p, b), params))


# ---------------------------------------------------------------------------------------------
# The NQM fitted at a checkpoint.


def _alignment(h, c) -> dict:
    """How well c_i follows h_i on the top-k: the ratios c_i / h_i, their spread, and the slope
    of log c on log h (1 when c is proportional to h, the NQM's default)."""
    h, c = np.asarray(h, float), np.asarray(c, float)
    ratio = c / h
    out = {"ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
           "ratio_median": float(np.median(ratio))}
    if h.size > 2 and np.ptp(np.log(h)) > 0:
        slope, _ = np.polyfit(np.log(h), np.log(c), 1)
        out["log_slope"] = float(slope)
        out["log_correlation"] = float(np.corrcoef(np.log(h), np.log(c))[0, 1])
    return out


def tail_floor(density: curvature.SpectralDensity, top_eigenvalues, floor_ratio: float) -> float:
    """Lowest curvature of the NQM's tail: floor_ratio * h_1, raised to 0.99 times the smallest
    SLQ node when the whole spectrum is positive (below the smallest eigenvalue the counting
    function is flat, and such grid points would bend the power-law fit), and at most h_k / 2."""
    h = np.asarray(top_eigenvalues, float)
    floor = floor_ratio * float(h.max())
    used = density.weights_LxM > 0
    lowest = float(density.nodes_LxM[used].min()) if used.any() else -math.inf
    if lowest > 0:
        floor = max(floor, 0.99 * lowest)
    return min(floor, 0.5 * float(h.min()))


def quadratic_target(config: NQMConfig, top_k: int, goal: calibrate.GradientStatistics) -> float:
    """The fitted NQM's own loss at the goal checkpoint: 0.5 sum_i g_i^2 / h_i (on a quadratic
    g_i = h_i theta_i, so this is 0.5 sum_i h_i theta_i^2), from the goal's gradient.

    Top-k: g_i = v_i . G_goal, debiased by c_i / n (the sample mean's own noise), clipped at 0.
    Tail: the rest of |G_goal|^2 spread like `calibrate.fit_nqm`'s start, E[theta_i^2] = m with
    m = (|G|^2 - sum_top g_i^2) / sum_tail h_i^2, giving 0.5 m sum_tail h_i. The directions must
    be those of `config` in the same (descending) order.
    """
    problem = config.problem()
    h = problem.curvature_D
    g2 = np.maximum(goal.grad_components_K ** 2
                    - goal.noise_projections_K / goal.num_examples, 0.0)
    loss = 0.5 * float(np.sum(g2 / h[:top_k]))
    tail = h[top_k:]
    if tail.size:
        rest = max(goal.grad_sq_norm - float(g2.sum()), 0.0)
        loss += 0.5 * rest / float(tail @ tail) * float(tail.sum())
    return loss


def fit_checkpoint(task: Task, params, init_params, goal_params, sample: dict,
                   train_target: float, vcfg: ValidationConfig, key,
                   devices=None) -> tuple[dict, dict]:
    """Measure the network at `params` and fit an NQM whose start comes from `init_params`.

    Hessian (top-k by Lanczos, tail by SLQ down to the floor) and gradient noise c_i along the
    top-k eigenvectors at `params`; gradient components g_i along the same eigenvectors and
    |G|^2 at `init_params` (`calibrate.fit_nqm`'s start rule), and at `goal_params` for the
    quadratic target (`quadratic_target`); B_noise by HVPs and B_simple at `params`.

    Returns:
      ({target rule: NQMConfig, or None where that target is not below the fitted initial loss},
       JSON-ready record; with an "error" and no configs when no NQM could be fitted).
    """
    loss_fn = task.loss_fn
    t0 = time.perf_counter()
    measured = calibrate.measure_spectrum(
        loss_fn, params, sample, key, top_k=vcfg.top_k, lanczos_steps=vcfg.lanczos_steps,
        slq_steps=vcfg.slq_steps, slq_probes=vcfg.slq_probes, chunk_rows=vcfg.chunk_rows,
        devices=devices)
    hessian, pairs, density = measured.hessian, measured.pairs, measured.density
    h_top = pairs.eigenvalues_K     # descending (`curvature.top_eigenpairs`), fit_nqm's order
    record: dict = {"eigenpairs": pairs.to_dict(), "spectrum": measured.spectrum}
    trace, _ = density.trace()
    by_params = {}

    def stats_at(p):      # one measurement per parameter set (params may be init or goal)
        if id(p) not in by_params:
            by_params[id(p)] = calibrate.gradient_statistics(
                loss_fn, p, sample, pairs.eigenvectors_KxP, chunk_rows=vcfg.chunk_rows,
                devices=devices)
        return by_params[id(p)]

    stats = stats_at(params)
    start = stats_at(init_params)
    at_goal = stats_at(goal_params)
    hns = calibrate.hessian_noise_scale(hessian, loss_fn, params, sample, vcfg.noise_rows,
                                        chunk_rows=vcfg.chunk_rows)
    record["gradient"], record["gradient_at_init"] = stats.to_dict(), start.to_dict()
    record["b_noise"] = hns.to_dict()
    record["measure_seconds"] = time.perf_counter() - t0
    record["num_params"] = hessian.dim
    record["sample_rows"] = hessian.num_rows
    record["hessian_matvecs"] = hessian.num_matvecs
    record["negative_top"] = bool(np.any(h_top <= 0))
    record["alignment"] = None if record["negative_top"] else \
        _alignment(h_top, stats.noise_projections_K)
    if record["negative_top"]:
        record["error"] = ("a top-k Hessian eigenvalue is not positive: no quadratic to fit "
                           f"(eigenvalues {h_top.tolist()})")
        return {}, record
    floor = tail_floor(density, h_top, vcfg.floor_ratio)
    try:
        tail = calibrate.fit_power_law_tail(density, h_top, floor=floor)
        # fitted without a target; the targets are set below, once the start is known
        config, fitted = calibrate.fit_nqm(
            h_top, stats.noise_projections_K, start.grad_components_K, target=None,
            tail=tail, eigenvalue_errors=pairs.residuals_K,
            noise_errors=stats.noise_projections_se_K, grad_errors=start.grad_components_se_K,
            grad_sq_norm=start.grad_sq_norm, grad_sq_norm_se=start.grad_sq_norm_se)
    except ValueError as err:
        record["error"] = str(err)
        return {}, record
    targets = {"train_loss": train_target,
               "quadratic": quadratic_target(config, h_top.size, at_goal)}
    record["nqm"] = fitted
    record["targets"] = targets
    record["target_errors"] = {}
    configs = {}
    for rule, t in targets.items():
        if 0 < t < fitted["initial_loss"]:
            configs[rule] = dataclasses.replace(config, target=float(t))
        else:
            configs[rule] = None
            record["target_errors"][rule] = (
                f"target {t:.4g} is not in (0, {fitted['initial_loss']:.4g}), the fitted initial "
                "loss: the NQM starts at or below it")
    problem = config.problem()
    b_simple0, b_noise0 = noise_scale.initial_noise_scale(problem)
    record["nqm_noise_scale_at_start"] = {"b_simple": b_simple0, "b_noise": b_noise0}
    record["captured"] = {
        "trace_noise_nqm": fitted["trace_noise"], "trace_noise_measured": stats.trace_cov,
        "trace_noise_fraction": fitted["trace_noise"] / stats.trace_cov
        if stats.trace_cov > 0 else None,
        "trace_curvature_nqm": fitted["trace_curvature"], "trace_curvature_slq": trace,
        "trace_curvature_fraction": fitted["trace_curvature"] / trace if trace > 0 else None,
        "note": "the NQM's tr(C) and tr(H) against the network's tr(Sigma) (gradient statistics) "
                "and tr(H) (SLQ): what the top-k plus the tail above the floor keep"}
    return configs, record


# ---------------------------------------------------------------------------------------------
# Predictions.


def search_matched_curve(config: NQMConfig, sweep_config: dict, records: list[dict],
                         batch_sizes) -> ScalingCurve | None:
    """The NQM run with the sweep's own trials: per batch size, the fewest expected steps to the
    target over the metaparameters the sweep tried there, within the sweep's budget (None for
    adam, whose learning rate has no NQM counterpart)."""
    optimizer = sweep_config["optimizer"]
    if optimizer == "adam":
        return None
    problem = config.problem()
    budget = int(sweep_config["max_steps"])
    rows = [(int(r["batch_size"]), float(r["learning_rate"]), float(r.get("momentum") or 0.0))
            for r in records if int(r["batch_size"]) in set(int(b) for b in batch_sizes)]
    rows = sorted(set(rows))
    batch = np.array([r[0] for r in rows], float)
    lr = np.array([r[1] for r in rows])
    mom = np.array([r[2] for r in rows]) if optimizer != "sgd" else np.zeros(len(rows))
    steps = steps_to_target(dynamics(problem, batch, lr, mom), problem.target, budget)
    points = []
    for b in sorted(set(int(x) for x in batch_sizes)):
        here = np.flatnonzero((batch == b) & (steps != NOT_REACHED))
        if here.size == 0:
            points.append(CurvePoint(b, None))
            continue
        i = here[np.argmin(steps[here])]
        points.append(CurvePoint(b, int(steps[i]), learning_rate=float(lr[i]),
                                 momentum=float(mom[i]) if optimizer != "sgd" else None))
    return ScalingCurve(points=tuple(points), source="nqm",
                        config={"optimizer": "sgd" if optimizer == "sgd" else "momentum",
                                "max_steps": budget, "target": problem.target,
                                "search": "the sweep's trial metaparameters"})


def _curve_summary(curve: ScalingCurve | None) -> dict | None:
    if curve is None:
        return None
    analysis = analyse_curve(curve)
    config = {k: v for k, v in curve.config.items() if k != "problem"}   # no d-long arrays
    out = {"points": [{k: v for k, v in p.to_dict().items() if k != "trials"}
                      for p in curve.points], "config": config}
    out.update(analysis.to_dict())
    return out


def predict(config: NQMConfig, sweep_config: dict, records: list[dict], batch_sizes,
            vcfg: ValidationConfig) -> dict:
    """The calibrated NQM's tuned curve and its search-matched curve, each with its analysis."""
    family = NQM_FAMILY[sweep_config["optimizer"]]
    t0 = time.perf_counter()
    tuned = tune_curve(config, OptimizerSpec(family), batch_sizes, max_steps=vcfg.nqm_max_steps)
    t1 = time.perf_counter()
    matched = search_matched_curve(config, sweep_config, records, batch_sizes)
    return {"family": family, "tuned": _curve_summary(tuned),
            "search_matched": _curve_summary(matched),
            "search_matched_note": None if matched is not None else
            "adam's learning rate has no counterpart in the NQM",
            "seconds": {"tuned": t1 - t0, "search_matched": time.perf_counter() - t1}}


def resampled_nqm(fitted: dict, target: float, rng: np.random.Generator) -> NQMConfig:
    """One NQM drawn from a `calibrate.fit_nqm` record's values and uncertainties (independent
    normals; positive quantities clipped at a tenth of their value): the top-k h, c and g, the
    tail's exponent, dimension, noise ratio and start. A parametric bootstrap for the spread of a
    prediction. The dimension's draw uses its standard error over SLQ probes only, not the
    quadrature's resolution (`dim_resolution`, reported beside it): where the SLQ density is not
    resolved at the floor that resolution can exceed d itself, and it bounds a discretisation
    error rather than giving a spread."""
    top = fitted["top"]

    def draw(m, positive=True):
        value = np.asarray(m["value"], float)
        err = np.nan_to_num(np.asarray(m["uncertainty"] if m["uncertainty"] is not None
                                       else np.zeros_like(value), float))
        x = value + err * rng.standard_normal(value.shape)
        return np.maximum(x, 0.1 * value) if positive else x

    h = draw(top["curvature"])
    c = draw(top["noise_variance"])
    g = draw(top["grad_components"], positive=False)
    curv, noise, init = [h], [c], [g ** 2 / h ** 2]
    tail = fitted.get("tail")
    if tail:
        k = tail["anchor_index"]
        a = float(draw(tail["exponent"]))
        sd = tail["dim"]["uncertainty"] or 0.0
        d = max(k + 1, int(round(tail["dim"]["value"] + sd * rng.standard_normal())))
        rho = float(draw(tail["noise_ratio"]))
        m = float(draw(tail["init_second_moment"], positive=False))
        h_tail = calibrate.tail_curvature(np.arange(k + 1, d + 1), k, float(h.min()), a)
        curv.append(h_tail)
        noise.append(rho * h_tail)
        init.append(np.full(h_tail.shape, max(m, 0.0)))
    curv, noise, init = (np.concatenate(x) for x in (curv, noise, init))
    return NQMConfig(dim=int(curv.size), target=float(target),
                     curvature=tuple(curv.tolist()), noise_variance=tuple(noise.tolist()),
                     init_second_moments=tuple(init.tolist()))


def bootstrap_b_crit(fitted: dict, target: float, sweep_config: dict, records: list[dict],
                     batch_sizes, vcfg: ValidationConfig) -> dict:
    """B_crit of the tuned and search-matched curves over `vcfg.bootstrap` resampled NQMs
    (`resampled_nqm`): their standard deviation is the predictions' uncertainty."""
    rng = np.random.default_rng(vcfg.seed)
    family = NQM_FAMILY[sweep_config["optimizer"]]
    tuned, matched, failed = [], [], 0
    for _ in range(vcfg.bootstrap):
        try:
            config = resampled_nqm(fitted, target, rng)
            if not config.problem().initial_loss() > config.target:
                raise ValueError("target above the initial loss")
        except ValueError:
            failed += 1
            continue
        curve = tune_curve(config, OptimizerSpec(family), batch_sizes,
                           max_steps=vcfg.nqm_max_steps)
        tuned.append(analyse_curve(curve).fit.b_crit)
        m = search_matched_curve(config, sweep_config, records, batch_sizes)
        matched.append(None if m is None else analyse_curve(m).fit.b_crit)

    def spread(values):
        v = np.array([x for x in values if x is not None], float)
        if v.size < 2:
            return None
        return {"sd": float(np.std(v, ddof=1)), "p16": float(np.percentile(v, 16)),
                "p84": float(np.percentile(v, 84)), "draws": v.tolist()}

    return {"draws": vcfg.bootstrap, "failed": failed, "tuned": spread(tuned),
            "search_matched": spread(matched),
            "note": "parametric bootstrap: NQMs redrawn from the fitted numbers' uncertainties"}


# ---------------------------------------------------------------------------------------------
# The whole chain.


def _value(x):
    if isinstance(x, dict):
        return x.get("value"), x.get("uncertainty")
    return x, None


def _ratio_se(b_simple, gradient: dict):
    """First-order standard error of tr(Sigma) / |G|^2 from those of numerator and denominator
    (treated as independent)."""
    if b_simple is None or not gradient:
        return None
    t, t_se = _value(gradient.get("trace_cov"))
    g, g_se = _value(gradient.get("grad_sq_norm"))
    if None in (t, t_se, g, g_se) or t <= 0 or g <= 0:
        return None
    return abs(b_simple) * math.hypot(t_se / t, g_se / g)


def target_rules(doc: dict) -> list[str]:
    """The document's target rules, its headline rule (settings "target_rule") first."""
    headline = doc["settings"].get("target_rule", "train_loss")
    return [headline] + [r for r in TARGET_RULES if r != headline]


def comparison(doc: dict) -> list[dict]:
    """The table: every B_crit estimate of one workload beside the measured one.

    Rows: workload, quantity, checkpoint, value, uncertainty, ratio (value / measured B_crit),
    note. The measured row comes first.
    """
    measured = doc["measured"]["fit"]["b_crit"]
    name = doc["workload"]
    rows = [{"workload": name, "quantity": "measured B_crit (fit)", "checkpoint": None,
             "value": measured, "uncertainty": None, "ratio": 1.0 if measured else None,
             "note": f"S(B) = S_min (1 + B_crit / B) fitted to the sweep; cbs20 "
                     f"{doc['measured']['regimes']['cbs20']}"}]

    def add(quantity, checkpoint, value, uncertainty=None, note=""):
        ratio = value / measured if value is not None and measured else None
        rows.append({"workload": name, "quantity": quantity, "checkpoint": checkpoint,
                     "value": value, "uncertainty": uncertainty, "ratio": ratio, "note": note})

    rules = target_rules(doc)
    for ckpt in doc["settings"]["checkpoints"]:
        c = doc["checkpoints"].get(ckpt) or {}
        for rule in rules:
            pred = (c.get("predictions") or {}).get(rule) or {}
            why = (c.get("target_errors") or {}).get(rule) or c.get("error", "no NQM")
            boot = pred.get("bootstrap") or {}
            tuned = pred.get("tuned")
            label = f" [{TARGET_LABELS[rule]}]"
            add("NQM tuned B_crit" + label, ckpt, tuned["fit"]["b_crit"] if tuned else None,
                (boot.get("tuned") or {}).get("sd"),
                note=f"calibrated NQM, {pred.get('family', '-')} tuned per batch size, target "
                     f"{pred['target']:.4g}" if tuned else why)
            matched = pred.get("search_matched")
            add("NQM at the sweep's trials B_crit" + label, ckpt,
                matched["fit"]["b_crit"] if matched else None,
                (boot.get("search_matched") or {}).get("sd"),
                note="calibrated NQM with the sweep's metaparameters and budget" if matched
                else pred.get("search_matched_note") or why)
        value, err = _value((c.get("b_noise") or {}).get("b_noise"))
        add("B_noise = tr(H Sigma) / (G^T H G)", ckpt, value, err,
            note="Hessian-vector products on the calibration sample")
        grad = c.get("gradient") or {}
        value, _ = _value(grad.get("b_simple"))
        add("B_simple = tr(Sigma) / ‖G‖²", ckpt, value, _ratio_se(value, grad),
            note="per-example gradients on the calibration sample" if grad else "")
    add("B_simple (sweep, moving averages)", None, doc["measured"]["b_simple_pooled"],
        note="measured during training, best trials pooled over batch sizes (weights B^2)")
    ref = doc.get("reference")
    if ref:
        add("the workload's own NQM, tuned B_crit", None, ref["tuned"]["fit"]["b_crit"],
            note="the exact NQM the task was built from, same optimizer family and target")
        if ref.get("search_matched"):
            add("the workload's own NQM at the sweep's trials B_crit", None,
                ref["search_matched"]["fit"]["b_crit"],
                note="the exact NQM with the sweep's metaparameters and budget")
    return rows


def reference_nqm(workload: str) -> NQMConfig | None:
    """The NQM a workload was built from, when there is one (the `nqm` workload): the calibrated
    NQM can then be checked against the truth."""
    from realnets.workloads import NQM_WORKLOAD

    return NQM_WORKLOAD if workload == "nqm" else None


def validate(task: Task, sweep_config: dict, records: list[dict], vcfg: ValidationConfig,
             devices=None, log=None, reference: NQMConfig | None = None) -> dict:
    """Runs the whole validation of one measured sweep; returns the JSON-ready document.

    Args:
      task: the workload's Task (the one the sweep trained).
      sweep_config: the sweep's config.json.
      records: its trials.jsonl records.
      vcfg: the validation settings.
      devices: devices for the rerun and the measurements (default all).
      log: optional callable(str) for progress lines.
      reference: the NQM the task was built from, if known (`reference_nqm`): its own tuned and
        search-matched curves are added as "reference" (target: the same as the calibrated NQM's).

    Returns:
      dict with workload, settings, measured, calibration_run, checkpoints (per checkpoint: step,
      train loss, the fitted NQM record, B_noise, B_simple, the prediction curves), comparison
      (the table, see `comparison`) and seconds per phase.
    """
    say = log or (lambda _: None)
    seconds = {}
    curve = build_curve(records, sweep_config)
    batch_size = calibration_batch_size(curve, vcfg.batch_size)
    trial = best_trial(records, batch_size)
    say(f"rerunning trial {trial['trial_id']} at B = {batch_size} to step "
        f"{trial['steps_to_goal']}")
    t0 = time.perf_counter()
    seed = int(sweep_config.get("seed", 0))
    init = init_params_of(task, seed, int(trial["trial_id"]))
    rerun, goal_params = retrain(task, sweep_config, trial, devices)
    seconds["rerun"] = time.perf_counter() - t0

    sample = calibration_sample(task, vcfg.sample_rows, vcfg.seed)
    loss_goal = mean_loss(task, goal_params, sample, vcfg.chunk_rows, devices)
    loss_init = mean_loss(task, init, sample, vcfg.chunk_rows, devices)
    if task.metric == "loss":
        target = float(sweep_config["goal"])
        target_rule = "the goal itself (the workload's metric is the loss)"
    else:
        target = loss_goal - vcfg.loss_floor
        target_rule = (f"training loss on the calibration sample at the goal checkpoint minus "
                       f"the loss floor L* = {vcfg.loss_floor:g}")
    noise_series = rerun.get("noise_scale") or {}
    calibration_run = {
        "batch_size": batch_size, "trial_id": int(trial["trial_id"]),
        "learning_rate": trial["learning_rate"], "momentum": trial.get("momentum"),
        "final_lr_fraction": trial.get("final_lr_fraction"),
        "optimizer": sweep_config["optimizer"], "seed": seed,
        "sweep_steps_to_goal": trial["steps_to_goal"],
        "rerun_status": rerun["status"], "rerun_steps_to_goal": rerun["steps_to_goal"],
        "rerun_steps_run": rerun["steps_run"],
        "rerun_final_metric": (rerun.get("eval") or {}).get("metric", [None])[-1],
        "train_loss_init": loss_init, "train_loss_goal": loss_goal,
        "target": target, "target_rule": target_rule,
        "noise_scale_during_run": {k: noise_series.get(k) for k in ("step", "b_simple")},
    }
    out = {"workload": sweep_config["workload"], "settings": vcfg.to_dict(),
           "sweep_config": {k: sweep_config.get(k) for k in (*IDENTITY, "batch_sizes", "trials")},
           "measured": measured_summary(curve), "calibration_run": calibration_run,
           "checkpoints": {}}
    params_at = {"goal": (goal_params, int(rerun["steps_run"])), "init": (init, 0)}
    key = jax.random.key(vcfg.seed)
    for i, name in enumerate(vcfg.checkpoints):
        params, step = params_at[name]
        say(f"measuring the {name} checkpoint (step {step})")
        t0 = time.perf_counter()
        configs, record = fit_checkpoint(task, params, init, goal_params, sample, target, vcfg,
                                         jax.random.fold_in(key, i), devices)
        record["step"] = step
        record["train_loss"] = loss_goal if name == "goal" else loss_init
        seconds[f"measure_{name}"] = time.perf_counter() - t0
        record["predictions"] = {}
        t0 = time.perf_counter()
        for rule, config in configs.items():
            if config is None:
                continue
            say(f"predicting with the NQM fitted at {name} (d = {config.problem().dim}, "
                f"{TARGET_LABELS[rule]} {config.target:.4g})")
            pred = predict(config, sweep_config, records, curve.batch_sizes, vcfg)
            pred["target"] = config.target
            if vcfg.bootstrap:
                pred["bootstrap"] = bootstrap_b_crit(record["nqm"], config.target, sweep_config,
                                                     records, curve.batch_sizes, vcfg)
            record["predictions"][rule] = pred
        seconds[f"predict_{name}"] = time.perf_counter() - t0
        out["checkpoints"][name] = record
    if reference is not None:
        t0 = time.perf_counter()
        ref = dataclasses.replace(reference, target=target)
        out["reference"] = predict(ref, sweep_config, records, curve.batch_sizes, vcfg)
        out["reference"]["problem"] = ref.to_dict()
        seconds["reference"] = time.perf_counter() - t0
    out["seconds"] = seconds
    out["comparison"] = comparison(out)
    return out


# ---------------------------------------------------------------------------------------------
# Files.


def write_validation(out_dir: Path, doc: dict) -> Path:
    """DIR/validation.json, atomically; returns its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / VALIDATION_FILE
    store.write_json_atomic(path, doc)
    return path


def read_validation(out_dir: Path) -> dict:
    """The document of DIR/validation.json (ValueError naming the path if missing or corrupt)."""
    doc = store.read_json(Path(out_dir) / VALIDATION_FILE, "validation")
    for key in ("workload", "measured", "checkpoints", "comparison"):
        if key not in doc:
            raise ValueError(f"validation: {Path(out_dir) / VALIDATION_FILE} has no {key!r}")
    return doc


def load_validation(out_dir: Path) -> pd.DataFrame:
    """The comparison table of a validation directory, one row per estimate (for the app):
    workload, quantity, checkpoint, value, uncertainty, ratio, note."""
    rows = read_validation(out_dir)["comparison"]
    table = pd.DataFrame(rows, columns=["workload", "quantity", "checkpoint", "value",
                                        "uncertainty", "ratio", "note"])
    for col in ("value", "uncertainty", "ratio"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype(float)
    return table

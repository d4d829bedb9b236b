"""One checkpoint of the calibration run measured and fitted: the Hessian spectrum, the gradient
noise along its top directions, B_noise and B_simple, and an NQM per target rule."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from nqm import noise_scale
from realnets.calibration import calibrate, gradient_stats, nqm_fit, power_tail
from realnets.calibration.fitting import alignment, quadratic_target, tail_floor
from realnets.validation.settings import ValidationConfig
from realnets.validation.targets import StepMatch, step_matched_target
from realnets.workloads.tasks import Task


def fit_checkpoint(task: Task, params, init_params, goal_params, sample: dict,
                   train_target: float, vcfg: ValidationConfig, key,
                   devices=None, match: StepMatch | None = None) -> tuple[dict, dict]:
    """Measure the network at `params` and fit an NQM whose start comes from `init_params`.

    Hessian (top-k by Lanczos, tail by SLQ down to the floor) and gradient noise c_i along the
    top-k eigenvectors at `params`; gradient components g_i along the same eigenvectors and
    |G|^2 at `init_params` (`nqm_fit.fit_nqm`'s start rule), and at `goal_params` for the
    quadratic target (`quadratic_target`); B_noise by HVPs and B_simple at `params`. With
    `match`, the step-matched target too (`targets.step_matched_target`).

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
    h_top = pairs.eigenvalues_K     # descending (`lanczos.top_eigenpairs`), fit_nqm's order
    record: dict = {"eigenpairs": pairs.to_dict(), "spectrum": measured.spectrum}
    trace, _ = density.trace()
    by_params = {}

    def stats_at(p):      # one measurement per parameter set (params may be init or goal)
        if id(p) not in by_params:
            by_params[id(p)] = gradient_stats.gradient_statistics(
                loss_fn, p, sample, pairs.eigenvectors_KxP, chunk_rows=vcfg.chunk_rows,
                devices=devices)
        return by_params[id(p)]

    stats = stats_at(params)
    start = stats_at(init_params)
    at_goal = stats_at(goal_params)
    hns = gradient_stats.hessian_noise_scale(hessian, loss_fn, params, sample, vcfg.noise_rows,
                                        chunk_rows=vcfg.chunk_rows)
    record["gradient"], record["gradient_at_init"] = stats.to_dict(), start.to_dict()
    record["b_noise"] = hns.to_dict()
    record["measure_seconds"] = time.perf_counter() - t0
    record["num_params"] = hessian.dim
    record["sample_rows"] = hessian.num_rows
    record["hessian_matvecs"] = hessian.num_matvecs
    record["negative_top"] = bool(np.any(h_top <= 0))
    record["alignment"] = None if record["negative_top"] else \
        alignment(h_top, stats.noise_projections_K)
    if record["negative_top"]:
        record["error"] = ("a top-k Hessian eigenvalue is not positive: no quadratic to fit "
                           f"(eigenvalues {h_top.tolist()})")
        return {}, record
    floor = tail_floor(density, h_top, vcfg.floor_ratio)
    try:
        tail = power_tail.fit_power_law_tail(density, h_top, floor=floor)
        # fitted without a target; the targets are set below, once the start is known
        config, fitted = nqm_fit.fit_measured(pairs, stats, start, target=None, tail=tail,
                                              train_size=task.train_size)
    except ValueError as err:
        record["error"] = str(err)
        return {}, record
    targets = {"train_loss": train_target,
               "quadratic": quadratic_target(config, h_top.size, at_goal)}
    if match is not None:
        try:
            targets["step_matched"], record["step_match"] = step_matched_target(config, match)
        except ValueError as err:
            record.setdefault("target_errors", {})["step_matched"] = str(err)
    record["nqm"] = fitted
    record["targets"] = targets
    record.setdefault("target_errors", {})
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

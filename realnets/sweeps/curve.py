"""The measured curve of a sweep's trials, and how much its B_crit depends on which trials ran.

Steps to result at a batch size is the first evaluation step at which any trial reached the goal
(Shallue et al. 2018, section 3); the trial that got there sets the point's metaparameters.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from nqm.curve import CurvePoint, ScalingCurve
from nqm.scaling import analyse_curve, fit_mccandlish
from realnets.sweeps.records import CurveDocument, SweepConfig, TrialRecord, trial_order
from realnets.sweeps.robustness import robustness, runs_to_end
from realnets.workloads.search_space import TrialSearchSpace

EDGE_FRACTION = 0.1   # best value in the outer 10% of a log range counts as "on the edge"
RESAMPLES = 200


def _fewest_steps(items, steps_of: Callable, id_of: Callable):
    """The rule that picks a point's trial: the fewest steps to goal, ties to the lowest trial
    id (ordered as numbers where they are numbers, even as strings: "2" < "10"); None if none
    reached the goal."""
    reached = [x for x in items if steps_of(x) is not None]
    return min(reached, key=lambda x: (steps_of(x), trial_order(id_of(x)))) if reached else None


def best_trial(records: Sequence[TrialRecord]) -> TrialRecord | None:
    """The trial that sets a point (`_fewest_steps` over trial records)."""
    return _fewest_steps(records, lambda r: r.steps_to_goal, lambda r: r.trial_id)


def best_row(rows: Sequence[dict]) -> dict | None:
    """`best_trial` over a curve point's trial rows (`trial_summary` rows, or batch_science
    records)."""
    return _fewest_steps(rows, lambda r: r["steps_to_goal"], lambda r: r["trial_id"])


def trial_summary(record: TrialRecord) -> dict:
    """What a curve point keeps of a trial (the full record stays in trials.jsonl): its
    metaparameters and outcome, and its last noise-scale estimates."""
    out = {"trial_id": record.trial_id, "status": record.status,
           "learning_rate": record.learning_rate, "momentum": record.momentum,
           "final_lr_fraction": record.final_lr_fraction, "steps_to_goal": record.steps_to_goal,
           "steps_run": record.steps_run}
    if record.decay_steps is not None:     # curve.json files of sweeps without it stay as they were
        out["decay_steps"] = record.decay_steps
    noise = record.noise_scale
    b_simple = [v for v in noise.b_simple if v is not None]
    out["b_simple"] = b_simple[-1] if b_simple else None
    out["grad_sq_ema"] = noise.grad_sq_ema[-1] if noise.grad_sq_ema else None
    out["trace_cov_ema"] = noise.trace_cov_ema[-1] if noise.trace_cov_ema else None
    return out


def _edges(best: TrialRecord, search: TrialSearchSpace) -> tuple[str, ...]:
    """Names of the best trial's metaparameters in the outer EDGE_FRACTION of their log range
    (the decay's final fraction and length only where the sweep searched them)."""
    edges = []
    for name, value, bounds in (
            ("learning_rate", best.learning_rate, search.learning_rate),
            ("momentum", None if best.momentum is None else 1.0 - best.momentum,
             search.one_minus_momentum),
            ("final_lr_fraction", best.final_lr_fraction, search.final_lr_fraction),
            ("decay_steps", best.decay_steps, search.decay_steps)):
        if value is None or bounds is None:
            continue
        lo, hi = np.log(np.maximum(bounds, 1e-300))
        pos = (np.log(max(value, 1e-300)) - lo) / (hi - lo) if hi > lo else 0.5
        if pos <= EDGE_FRACTION or pos >= 1 - EDGE_FRACTION:
            edges.append(name)
    return tuple(edges)


def same_configuration(run: TrialRecord, best: TrialRecord) -> bool:
    """Whether `run` trained `best`'s metaparameters at its batch size (a rerun made before the
    sweep was resumed and another trial won is not one of the winner's)."""
    return (run.batch_size == best.batch_size and run.learning_rate == best.learning_rate
            and run.momentum == best.momentum and run.final_lr_fraction == best.final_lr_fraction
            and run.decay_steps == best.decay_steps)


def repeat_summary(record: TrialRecord) -> dict:
    """What a curve point keeps of a rerun of its best trial (`realnets.sweeps.repeats`)."""
    return {"seed": record.seed, "trial_id": record.trial_id, "status": record.status,
            "steps_to_goal": record.steps_to_goal, "steps_run": record.steps_run}


def build_curve(records: Sequence[TrialRecord], config: SweepConfig,
                repeats: Sequence[TrialRecord] = ()) -> ScalingCurve:
    """The measured ScalingCurve: per batch size, steps to result = the fewest steps_to_goal of
    its trials (None if no trial reached the goal), with the best trial's metaparameters; its
    config is the sweep's config.json. `repeats` (repeats.jsonl, `realnets.sweeps.repeats`):
    reruns of the best trials with other seeds; each point keeps those of its own winner."""
    by_batch: dict[int, list[TrialRecord]] = {}
    for r in records:
        by_batch.setdefault(r.batch_size, []).append(r)
    points = []
    ordered = sorted(repeats, key=lambda r: (r.seed, trial_order(r.trial_id)))
    for batch_size, trials in sorted(by_batch.items()):
        trials = sorted(trials, key=lambda r: trial_order(r.trial_id))
        best = best_trial(trials)
        own = () if best is None else tuple(repeat_summary(r) for r in ordered
                                            if same_configuration(r, best))
        points.append(CurvePoint(
            batch_size=batch_size, steps=None if best is None else best.steps_to_goal,
            learning_rate=None if best is None else best.learning_rate,
            momentum=None if best is None else best.momentum,
            edge=() if best is None else _edges(best, config.search),
            trials=tuple(trial_summary(r) for r in trials), repeats=own))
    return ScalingCurve(points=tuple(points), source="measured", config=config.to_dict())


def pooled_b_simple(points) -> float | None:
    """B_simple of a whole sweep: the best trials' averages of tr(Sigma) and |G|^2 at their goal
    step, pooled over batch sizes with weights B^2 (the variance of both estimates falls as
    1 / B^2: at a batch size far below B_simple one step says almost nothing about |G|^2)."""
    num = den = 0.0
    for p in points:
        best = best_row(p.trials)
        if best is None:
            continue
        # batch_science rows hold no noise estimates
        g, t = best.get("grad_sq_ema"), best.get("trace_cov_ema")
        if g is None or t is None or not (math.isfinite(g) and math.isfinite(t)):
            continue
        num += p.batch_size ** 2 * t
        den += p.batch_size ** 2 * g
    return num / den if den > 0 and num > 0 else None


def _best_b_simple(point: CurvePoint):
    """The noise scale of the trial that set the point (None if unreached or not estimated)."""
    best = best_row(point.trials)
    return None if best is None else best.get("b_simple")


def curve_document(curve: ScalingCurve) -> CurveDocument:
    """curve.json: the curve with its analysis, its B_crit interval (`b_crit_resampled`), the
    interval over reruns of its winners when it has any (`b_crit_over_repeats`), robustness
    checks and noise scale (docs/design.md, 'Formats')."""
    analysis = analyse_curve(curve)
    summary = analysis.to_dict()
    interval = b_crit_resampled(curve)
    if interval.get("method") == "repeats":
        over_repeats = interval          # the same draws: made once
    elif any(p.repeats for p in curve.points):
        over_repeats = b_crit_over_repeats(curve)
    else:
        over_repeats = None
    return CurveDocument(
        source=curve.source, config=curve.config, points=curve.points,
        fit=summary["fit"], regimes=summary["regimes"],
        efficiency=tuple(analysis.efficiency), regime=tuple(analysis.regimes),
        b_crit_resampled=interval, b_crit_repeats=over_repeats,
        robustness=robustness(curve),
        noise_scale={"b_simple": pooled_b_simple(curve.points), "b_noise": None,
                     "per_point_b_simple": [_best_b_simple(p) for p in curve.points],
                     "note": "each point: its best trial's B_simple at its goal step "
                             "(moving averages, McCandlish et al. app. A.1); b_simple: "
                             "those averages pooled over batch sizes with weights B^2"})


def b_crit_resampled(curve: ScalingCurve, resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """How much the measured B_crit depends on which trials the search happened to draw.

    Per resample, every batch size's K trials are drawn again with replacement, its steps to
    result are the fewest steps_to_goal among the drawn (not reached if none reached), and the
    McCandlish fit is redone. Only sweeps whose trials all ran to their own end can be resampled
    (`--full-trials`, or published batch_science data): by default a batch size's other trials
    stop once one reached the goal, so their steps are censored, and a resample without the
    winner would count as unreached. Such a sweep whose winners were rerun under other seeds
    gets the interval over those reruns instead (`b_crit_over_repeats`, another spread: the
    data order's and initialisation's, not the search's), "method" saying which.

    Returns:
      {"available": True, "method": "trials", "median", "p16", "p84": B_crit quantiles (None
      where fewer than half of the resamples could be fitted), "resamples", "fitted":
      resamples with a fit, "note"}; `b_crit_over_repeats`'s dict for a censored sweep with
      reruns; else "available" False and a "note" saying why.
    """
    # a batch_science curve's config has no full_trials: its trials all ran to their end
    if not runs_to_end(curve):
        reached = [p for p in curve.points if p.reached]
        if reached and any(p.repeats for p in reached):
            return b_crit_over_repeats(curve, resamples, seed)
        return {"available": False,
                "note": "trials stopped when one reached the goal; needs --full-trials, or "
                        "the best trials run again with other seeds (python -m realnets "
                        "repeat)"}
    rng = np.random.default_rng(seed)
    sizes = np.asarray([p.batch_size for p in curve.points], float)
    steps = []
    for p in curve.points:
        s = [t["steps_to_goal"] for t in p.trials]
        steps.append(np.asarray([np.inf if v is None else float(v) for v in s]))
    quantiles = _refitted(sizes, resamples, lambda: [
        np.min(s[rng.integers(0, s.size, s.size)]) if s.size else np.inf for s in steps])
    return {"available": True, "method": "trials", **quantiles,
            "note": "B_crit refitted with each batch size's trials drawn again with replacement: "
                    "the spread from which trials the search drew (not from the data order or "
                    "initialisation, and not the bias of too few trials)"}


def _refitted(sizes: np.ndarray, resamples: int, draw: Callable[[], list]) -> dict:
    """B_crit refitted `resamples` times, each on steps to result drawn by `draw()` (one value
    per batch size of `sizes`; inf or NaN: not reached). Returns {"resamples", "fitted", "median",
    "p16", "p84"}, the quantiles None where fewer than half of the draws could be fitted."""
    fits = []
    for _ in range(int(resamples)):
        drawn = np.asarray(draw(), float)
        b_crit = fit_mccandlish(sizes, np.where(np.isfinite(drawn), drawn, np.nan)).b_crit
        if b_crit is not None:
            fits.append(b_crit)
    out = {"resamples": int(resamples), "fitted": len(fits), "median": None, "p16": None,
           "p84": None}
    if len(fits) >= resamples / 2:
        out.update(median=float(np.median(fits)), p16=float(np.percentile(fits, 16)),
                   p84=float(np.percentile(fits, 84)))
    return out


def _median_with_misses(steps) -> float:
    """Median steps to result of some runs, a run not at the goal (None or inf) the slowest;
    NaN (not reached) when there are none or half or more missed."""
    s = np.asarray([np.inf if v is None else v for v in steps], float)
    if s.size == 0 or 2 * np.count_nonzero(~np.isfinite(s)) >= s.size:
        return np.nan
    return float(np.median(s))


def _median_steps(steps: Sequence[int | None]) -> float | None:
    """`_median_with_misses` for curve.json: None where not reached."""
    m = _median_with_misses(steps)
    return None if np.isnan(m) else m


def _median_over_seeds(groups: Sequence[np.ndarray], rng: np.random.Generator) -> float:
    """One draw of a batch size's reruns' median steps: its seeds drawn again with replacement,
    each bringing all of its runs (inf: not at the goal); `_median_with_misses` of them."""
    if not groups:
        return np.nan
    return _median_with_misses(
        np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))]))


def _seed_order(rerun: dict) -> tuple:
    """Reruns by seed (a rerun without one last), then initialisation."""
    seed = rerun.get("seed")
    return (seed is None, seed or 0, trial_order(rerun.get("trial_id") or 0))


def b_crit_over_repeats(curve: ScalingCurve, resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """How much the measured B_crit depends on the data order and initialisation of the runs
    that set the curve (`realnets.sweeps.repeats`).

    Per resample, every batch size that reached the goal draws one run, uniformly among its
    sweep's own winning run and that configuration's reruns with other seeds (a rerun not at the
    goal within its cap counts as not reached, as an unreached point is everywhere else), and the
    McCandlish fit is redone. Batch sizes where no trial reached the goal stay unreached.

    Returns b_crit_resampled's keys with "method" "repeats" and "runs" (per point, the runs drawn
    from: 0 where not reached), and "rerun_median_steps" (per point, the median steps to result
    of the reruns alone, a rerun not at the goal counted as the slowest; None where half or more
    did not reach it, or none was made) with "rerun_median_b_crit", the fit of that curve: the
    configurations' typical steps under another seed, without the luck of the seed that made
    them win; "rerun_median_resampled" is that B_crit's spread ({"resamples", "fitted",
    "median", "p16", "p84"}): per draw and batch size the reruns' seeds drawn again with
    replacement, each with all of its runs (initialisations under one seed are not independent
    runs), the median retaken and the fit redone (quantiles None, with a "note", when a reached
    batch size has reruns under one seed only); "rerun_median_by_seeds" is that B_crit from the
    reruns of each point's first 4, 8, 16, ... seeds, up to the fewest seeds any reached point
    has ([{"seeds", "b_crit"}]: does it settle?). "available" False when a reached point has no
    reruns.
    """
    if not any(p.reached for p in curve.points):
        return {"available": False, "method": "repeats", "note": "no batch size reached the goal"}
    if any(p.reached and not p.repeats for p in curve.points):
        missing = [p.batch_size for p in curve.points if p.reached and not p.repeats]
        return {"available": False, "method": "repeats",
                "note": f"no reruns of the best trial at batch sizes {missing} "
                        "(python -m realnets repeat)"}
    rng = np.random.default_rng(seed)
    sizes = np.asarray([p.batch_size for p in curve.points], float)
    runs = []
    for p in curve.points:
        own = [] if not p.reached else [float(p.steps)] + [
            np.inf if r["steps_to_goal"] is None else float(r["steps_to_goal"]) for r in p.repeats]
        runs.append(np.asarray(own))
    quantiles = _refitted(sizes, resamples, lambda: [
        r[rng.integers(0, r.size)] if r.size else np.nan for r in runs])
    medians = [_median_steps([r["steps_to_goal"] for r in p.repeats]) for p in curve.points]
    fit = fit_mccandlish(sizes, np.asarray([np.nan if m is None else m for m in medians]))
    by_seed = []                 # per point: {seed: steps of its runs}, seeds in order
    for p in curve.points:
        groups: dict = {}
        for r in sorted(p.repeats if p.reached else (), key=_seed_order):
            groups.setdefault(r.get("seed"), []).append(
                np.inf if r["steps_to_goal"] is None else float(r["steps_to_goal"]))
        by_seed.append({seed: np.asarray(g) for seed, g in groups.items()})
    fewest = min(len(g) for g, p in zip(by_seed, curve.points) if p.reached)
    if fewest >= 2:
        over_seeds = _refitted(sizes, resamples, lambda: [
            _median_over_seeds(list(g.values()), rng) for g in by_seed])
    else:
        over_seeds = {"resamples": int(resamples), "fitted": 0, "median": None, "p16": None,
                      "p84": None, "note": "a batch size has reruns under one seed only: "
                                           "no spread over seeds to draw"}
    by_count = []
    for k in [k for k in (4, 8, 16, 32, 64) if k < fewest] + [fewest]:
        # each point's own first k seeds: every reached point has at least `fewest`
        steps = [_median_with_misses([v for seed in list(g)[:k] for v in g[seed]])
                 for g in by_seed]
        by_count.append({"seeds": k, "b_crit": fit_mccandlish(sizes, np.asarray(steps)).b_crit})
    return {"available": True, "method": "repeats", **quantiles,
            "runs": [int(r.size) for r in runs],
            "rerun_median_steps": medians, "rerun_median_b_crit": fit.b_crit,
            "rerun_median_resampled": over_seeds, "rerun_median_by_seeds": by_count,
            "note": "B_crit refitted with one run drawn per batch size among the winning "
                    "configuration's run and its reruns with other seeds: the spread from the "
                    "data order and initialisation (not from which trials the search drew)"}

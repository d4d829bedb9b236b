"""How far the measured B_crit can be trusted: leave-one-batch-size-out, the fit's residual,
convergence against the number of trials, best trials on the edge of the search space, and the
search range (where a 4x larger search would likely put B_crit, from 8, 16 or 32 trials per batch
size, and on a sweep that has that search, whether the range held).

These stand beside the 16-84% interval over resampled trials (`realnets.sweeps.curve.
b_crit_resampled`) in curve.json and the reports (docs/prediction_rule.md, 'Definitions').
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from nqm.curve import ScalingCurve
from nqm.scaling import fit_mccandlish
from realnets.sweeps.records import trial_order

TRIAL_COUNTS = (16, 32, 64, 128)
# What a larger search did to the resampled-trials interval (docs/prediction_rule.md, session
# 44; `python -m realnets shortfall` on the shipped 128-trial sweeps and steps CSV, recomputed by
# tests/realnets/sweeps/test_shortfall.py): the 128-trial B_crit lay outside the interval from
# the first 32 trials on "outside" of "checked" sweeps, at most "largest" times (or over) the
# 32-trial value.
SHORTFALL_CHECK = {"trials": 32, "to_trials": 128, "outside": 8, "checked": 15, "largest": 1.49}
# Per trials K of a sweep: the 68% split-conformal factor exp of |ln(B_4K / B_K)| over those
# fifteen (the 11th smallest of 15, rounded up to three decimals so that it covers that 11th),
# each fixed before its held-out check
# (docs/prediction_rule.md: K = 32 session 44, K = 8 and 16 session 45).
SEARCH_FACTORS = {k: {"trials": k, "to_trials": 4 * k, "factor": f, "level": 0.68}
                  for k, f in ((8, 1.704), (16, 1.376), (32, 1.360))}
# How each did (tests/realnets/sweeps/test_shortfall.py recomputes them): B_4K within the factor
# of B_K on "within" of the fifteen and on "held_out_within" of the 8 held out, at most "largest"
# times (or over) B_K on all 23.
SEARCH_CHECKS = {8: {"within": 11, "of": 15, "held_out_within": 7, "held_out": 8,
                     "largest": 2.76},
                 16: {"within": 11, "of": 15, "held_out_within": 5, "held_out": 8,
                      "largest": 4.2e8},
                 32: {"within": 11, "of": 15, "held_out_within": 6, "held_out": 8,
                      "largest": 1.50}}
# below this many steps at the smallest batch size one step is over a tenth of S(B): B_crit rests
# on a step or two (the breast-cancer workload's pilot goal, sweeps/README.md)
FEW_STEPS = 10
# the two-point estimate's condition: a whole-set descent of at least this many steps (under
# fewer, one step moves the estimate by a fifth or more; realnets.validation.two_point, which
# sits above this package and takes it from here)
TRUST_MIN_STEPS = 5
# at most this many steps at the batch size nearest the goal: the whole-set descent will likely
# take fewer than TRUST_MIN_STEPS (on the shipped record the six sweeps so near their goal
# include all four whose descent took fewer, and no other sweep's did: docs/own_workload.md,
# session 49)
NEAR_GOAL_STEPS = 3


def search_interval(b_crit: float | None, trials: int) -> tuple[float, float] | None:
    """[B / F, B F] with F the search factor of `trials` (SEARCH_FACTORS): where a 4x larger
    search would likely put a B_crit from that many trials per batch size (examples); None
    for a trial count without a factor."""
    if b_crit is None or trials not in SEARCH_FACTORS:
        return None
    f = SEARCH_FACTORS[trials]["factor"]
    return b_crit / f, b_crit * f


def runs_to_end(curve: ScalingCurve) -> bool:
    """Whether the curve's trials ran to their own end (`--full-trials`, or published
    batch_science data), so that each trial's steps to the goal is known."""
    return curve.source == "batch_science" or bool(curve.config.get("full_trials"))


def few_steps(points) -> tuple[int, int] | None:
    """(B, S) of the smallest batch size that reached the goal when its steps S are fewer than
    FEW_STEPS (the curve has little resolution), else None. `points`: anything with
    `batch_size` and `steps` (None: not reached)."""
    reached = sorted((int(p.batch_size), int(p.steps)) for p in points if p.steps is not None)
    if reached and reached[0][1] < FEW_STEPS:
        return reached[0]
    return None


def near_goal(points) -> tuple[int, int] | None:
    """(B, S) of the batch size with the fewest steps to the goal when they are at most
    NEAR_GOAL_STEPS (the largest such B on a tie), else None. `points` as in `few_steps`."""
    reached = [(int(p.batch_size), int(p.steps)) for p in points if p.steps is not None]
    fewest = min((s for _, s in reached), default=None)
    if fewest is None or fewest > NEAR_GOAL_STEPS:
        return None
    return max(b for b, s in reached if s == fewest), fewest


def _steps(points) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.asarray([p.batch_size for p in points], float)
    steps = np.asarray([np.nan if p.steps is None else float(p.steps) for p in points])
    return sizes, steps


def leave_one_out(curve: ScalingCurve) -> dict:
    """B_crit refitted without each reached batch size in turn.

    Returns:
      {"b_crit": the full fit's, "without": [{"batch_size", "b_crit"}] (None where the rest
      cannot be fitted), "max_ratio": the largest of b / B_crit and B_crit / b over them}.
    """
    sizes, steps = _steps(curve.points)
    full = fit_mccandlish(sizes, steps).b_crit
    rows, worst = [], None
    for i in np.flatnonzero(np.isfinite(steps)):
        keep = np.arange(sizes.size) != i
        b = fit_mccandlish(sizes[keep], steps[keep]).b_crit
        rows.append({"batch_size": int(sizes[i]), "b_crit": b})
        if b is not None and full:
            r = max(b / full, full / b)
            worst = r if worst is None else max(worst, r)
    return {"b_crit": full, "without": rows, "max_ratio": worst}


def rms_log_residual(curve: ScalingCurve) -> float | None:
    """sqrt(mean((log S - log S_fit)^2)) over the reached points: how far the measured steps lie
    from S_min (1 + B_crit / B) (0.1 is about 10% per point). None with fewer than 3 points."""
    sizes, steps = _steps(curve.points)
    ok = np.isfinite(steps)
    fit = fit_mccandlish(sizes, steps)
    if fit.b_crit is None or ok.sum() < 3:
        return None
    model = np.log(fit.s_min) + np.log1p(fit.b_crit / sizes[ok])
    return float(math.sqrt(np.mean((np.log(steps[ok]) - model) ** 2)))


def first_trials(curve: ScalingCurve, k: int) -> ScalingCurve:
    """The curve from each batch size's first k trials in trial-id order (the first k points of
    the quasi-random sequence), each point's steps the fewest of those; its trials the k."""
    points = []
    for p in curve.points:
        first = tuple(sorted(p.trials, key=lambda t: trial_order(t["trial_id"]))[:k])
        reached = [t["steps_to_goal"] for t in first if t["steps_to_goal"] is not None]
        points.append(dataclasses.replace(p, steps=min(reached) if reached else None,
                                          trials=first))
    return ScalingCurve(points=tuple(points), source=curve.source, config=curve.config)


def trial_count_convergence(curve: ScalingCurve, counts=TRIAL_COUNTS) -> list[dict]:
    """B_crit from the first K trials of every batch size (in trial-id order: the first K points
    of the quasi-random sequence), for each K in `counts` up to the trials run.

    A sweep whose B_crit still moves between the two largest K is under-searched. Only sweeps run
    to their own end (`--full-trials`) give the first K < all trials' true best: otherwise a
    trial stopped at another's goal step counts as not reached, and the value is marked censored.

    Returns:
      [{"trials": K, "b_crit", "censored": bool}].
    """
    full = runs_to_end(curve)
    out = []
    most = min((len(p.trials) for p in curve.points), default=0)
    for k in counts:
        if k > most:
            break
        first = first_trials(curve, k)
        out.append({"trials": int(k),
                    "b_crit": fit_mccandlish(first.batch_sizes, first.steps).b_crit,
                    "censored": not full and k < most})
    return out


def edge_points(curve: ScalingCurve) -> list[dict]:
    """Batch sizes whose best trial lies on the edge of the search space (`CurvePoint.edge`): the
    space may have cut off the best metaparameters there."""
    return [{"batch_size": p.batch_size, "edge": list(p.edge)} for p in curve.points if p.edge]


def search_range(curve: ScalingCurve) -> dict | None:
    """Where a search of 4K trials per batch size would likely (68%) put the B_crit of a sweep
    run to its trials' end with exactly K at every batch size, K one of SEARCH_FACTORS':
    {"lo", "hi" (examples), "factor", "level", "trials", "to_trials"}; None for any other sweep
    (the factors were measured on this repository's sweeps, not on imported data) or without a
    fit."""
    trials = {len(p.trials) for p in curve.points}
    if curve.source != "measured" or not runs_to_end(curve) or len(trials) != 1:
        return None
    (k,) = trials
    span = search_interval(fit_mccandlish(curve.batch_sizes, curve.steps).b_crit, k)
    return None if span is None else {"lo": span[0], "hi": span[1], **SEARCH_FACTORS[k]}


def search_check(curve: ScalingCurve, trial_count: list[dict]) -> dict | None:
    """The search range on a sweep that has the larger search too (its
    `trial_count_convergence`, `trial_count`, run to their end): for the largest K of
    SEARCH_FACTORS with B_crit from its first 4K trials, the range from its first K against
    that B_crit, {"lo", "hi", "b_crit" (from the larger search), "inside", "trials" (K),
    "to_trials" (4K)}; None for any other sweep."""
    if curve.source != "measured" or not runs_to_end(curve):
        return None
    by_k = {c["trials"]: c["b_crit"] for c in trial_count}
    for k in sorted(SEARCH_FACTORS, reverse=True):
        if 4 * k not in by_k:
            continue
        if k not in by_k:           # a count trial_count does not list (8)
            first = first_trials(curve, k)
            by_k[k] = fit_mccandlish(first.batch_sizes, first.steps).b_crit
        span = search_interval(by_k[k], k)
        b_crit = by_k[4 * k]
        if span is None or b_crit is None:
            return None
        return {"lo": span[0], "hi": span[1], "b_crit": b_crit,
                "inside": span[0] <= b_crit <= span[1], "trials": k, "to_trials": 4 * k}
    return None


def robustness(curve: ScalingCurve) -> dict:
    """All of the above, JSON-ready (curve.json's "robustness")."""
    trial_count = trial_count_convergence(curve)
    return {"leave_one_out": leave_one_out(curve), "rms_log_residual": rms_log_residual(curve),
            "trial_count": trial_count, "edges": edge_points(curve),
            "search": search_range(curve), "search_check": search_check(curve, trial_count)}

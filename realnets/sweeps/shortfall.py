"""The search's shortfall: how far a larger search would likely move the measured B_crit.

A batch size's steps to result is the best of its K trials. The resampled-trials interval
(`realnets.sweeps.curve.b_crit_resampled`) draws those K again with replacement, so no resample
beats the sweep's best trial: it cannot see what more trials would find. This module
extrapolates that from the trials the sweep has (docs/prediction_rule.md, 'session 44'):

1. at each batch size, with its steps sorted s_(1) <= ... <= s_(K) (a trial not at the goal
   counted at the sweep's max_steps, a lower bound of its steps), the expected log steps of the
   best of k = K/2 trials drawn without replacement, exactly:
   E_k = sum_i C(K - i, k - 1) / C(K, k) ln s_(i);
2. the shortfall of one doubling there, Delta = E_(K/2) - ln s_(1) >= 0;
3. the best of 4K trials with the same shortfall per doubling, ln S_4K = ln s_(1) - 2 Delta
   (a batch size not at the goal stays so);
4. B_ext, the McCandlish fit of S_4K, and the interval with the shortfall [min(p16, B_ext),
   max(p84, B_ext)].
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from nqm.curve import CurvePoint, ScalingCurve
from nqm.scaling import fit_mccandlish
from realnets.sweeps.curve import best_row
from realnets.sweeps.records import trial_order

DOUBLINGS = 2            # extrapolated from K to 4K trials


def best_of_k_weights(trials: int, k: int) -> np.ndarray:
    """(trials,) probabilities that the best of k trials drawn without replacement from
    `trials` sorted ones is the i-th (i = 1..trials): C(trials - i, k - 1) / C(trials, k)."""
    if not 1 <= k <= trials:
        raise ValueError(f"k must be in 1..{trials} (the trials there are), got {k}")
    total = math.comb(trials, k)
    return np.array([math.comb(trials - i, k - 1) / total for i in range(1, trials + 1)])


def expected_log_best(steps: Sequence[float], k: int) -> float:
    """E[ln min] over the best of k of `steps` (all finite, > 0) drawn without replacement."""
    s = np.sort(np.asarray(steps, float))
    if s.size == 0 or not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError("steps must be finite and positive")
    return float(best_of_k_weights(s.size, k) @ np.log(s))


def extrapolated_steps(steps: Sequence[float | None], max_steps: int,
                       doublings: int = DOUBLINGS) -> float | None:
    """One batch size's steps to result with 2**doublings times its trials (step 3 above).

    Args:
      steps: each trial's steps to the goal (None: not at the goal); at least 2 trials.
      max_steps: the sweep's step budget (a trial not at the goal counts at it).
      doublings: how many doublings of the search to extrapolate.

    Returns S_4K (steps, not an integer), or None when no trial reached the goal."""
    if len(steps) < 2:
        raise ValueError(f"steps: need at least 2 trials, got {len(steps)}")
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1, got {max_steps}")
    reached = [s for s in steps if s is not None]
    if not reached:
        return None
    counted = [float(max_steps) if s is None else float(s) for s in steps]
    best = math.log(min(reached))
    delta = expected_log_best(counted, len(counted) // 2) - best
    return math.exp(best - doublings * delta)


def shortfall(curve: ScalingCurve, max_steps: int) -> dict:
    """B_ext of a sweep run to its trials' own end (steps 1-4 above; the interval with the
    shortfall needs the resampled-trials interval, `with_shortfall`).

    Args:
      curve: the measured curve, every point's trials with their "steps_to_goal".
      max_steps: the sweep's step budget.

    Returns:
      {"trials": the fewest trials at any batch size (K), "to_trials": 4K, "b_crit": the
      curve's B_crit, "b_ext": B_crit of the extrapolated curve (None: no fit)}.
    """
    counts = [len(p.trials) for p in curve.points]
    if not counts or min(counts) < 2:
        raise ValueError("curve: every batch size needs at least 2 trials for the shortfall")
    sizes = np.asarray([p.batch_size for p in curve.points], float)
    ext = [extrapolated_steps([t["steps_to_goal"] for t in p.trials], max_steps)
           for p in curve.points]
    fit = fit_mccandlish(sizes, np.asarray([np.nan if e is None else e for e in ext]))
    return {"trials": min(counts), "to_trials": min(counts) * 2 ** DOUBLINGS,
            "b_crit": fit_mccandlish(sizes, curve.steps).b_crit, "b_ext": fit.b_crit}


def with_shortfall(p16: float | None, p84: float | None, b_ext: float | None) -> tuple:
    """The interval with the shortfall, (min(p16, B_ext), max(p84, B_ext)); the plain interval
    where B_ext is None, (None, None) without one."""
    if p16 is None or p84 is None:
        return None, None
    if b_ext is None:
        return p16, p84
    return min(p16, b_ext), max(p84, b_ext)


def curve_of_steps(rows: Sequence[dict]) -> ScalingCurve:
    """A measured curve from trial rows {"batch_size", "trial_id", "steps_to_goal"} (the
    steps CSV of `realnets.sweeps.shortfall_check`), for sweeps run to their trials' end."""
    by_batch: dict[int, list[dict]] = {}
    for r in rows:
        by_batch.setdefault(int(r["batch_size"]), []).append(
            {"trial_id": r["trial_id"], "steps_to_goal": r["steps_to_goal"]})
    points = []
    for b, trials in sorted(by_batch.items()):
        trials.sort(key=lambda t: trial_order(t["trial_id"]))
        best = best_row(trials)
        points.append(CurvePoint(batch_size=b, steps=None if best is None
                                 else best["steps_to_goal"], trials=tuple(trials)))
    return ScalingCurve(points=tuple(points), source="measured", config={"full_trials": True})

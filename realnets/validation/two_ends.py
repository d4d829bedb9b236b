"""Both ends of S(B) measured on the network: the restated two-point estimate and rule 3
(docs/prediction_rule.md, "2026-11-27 (session 32)").

The noise-free end, S_fb^N: the network's fewest full-batch steps on its *whole* training set (the
sweep's trials at B_ref, rule 2's descents, `noise_free_match.full_batch_steps`), to the reference
run's goal-checkpoint loss on those rows. The noisy end, S~_ref: the median steps of the
reference trial's reruns under other seeds (the sweep's S_ref is its luckiest seed). From the two:

- `two_point_estimate`: B_2pt' = B_ref (S~_ref / S_fb^N - 1), no NQM;
- `pinned_target` (rule 3): the depth at which the tuned NQM's noise penalty at B_ref,
  S_nqm(B_ref) / S_nqm(noise-free), is the network's rho = S~_ref / S_fb^N; the NQM's tuned S(B)
  to that target is then the prediction.

Both take their interval from the 16th and 84th percentiles of the reruns in place of the median.
`run_two_ends` does it all for one validation document; `python -m realnets two-ends DIR` writes
its record to DIR/two_ends.json.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Callable

import numpy as np

from nqm.problem import NQMConfig
from nqm.tuning import tune_curve
from realnets.sweeps.curve import build_curve
from realnets.sweeps.records import SweepConfig, TrialRecord, trial_order
from realnets.validation.bootstrap import fitted_nqm
from realnets.validation.noise_free_match import (UNLIMITED_BATCH, full_batch_steps,
                                                  noise_free_match, reference_reruns)
from realnets.validation.predictions import predict
from realnets.validation.reconciliation import rerun_percentiles, two_point_estimate
from realnets.validation.rerun import calibration_sample, mean_loss
from realnets.validation.settings import NQM_FAMILY, ValidationConfig
from realnets.validation.summary import rule_1_of
from realnets.validation.targets import nqm_optimizer, nqm_search_space, step_matched_target
from realnets.workloads.tasks import Task

# rows of the "whole set" of a task with unlimited data (the control): 16x the calibration sample
UNLIMITED_ROWS = 16_384
# rule 3 uses rule 1's NQM: the one fitted at the goal checkpoint
RULE_3_CHECKPOINT = "goal"
# rows of the whole set per compiled call where neither the command nor the report names a
# number: all at once, the text model's 12,685 rows took 8 GB a call and its descents' process
# 15-23 GB; in 1024-row chunks 1.1 GB a call, 2.4 GB a process, at half the time a step
# (docs/performance.md, session 48)
WHOLE_SET_CHUNK_ROWS = 1024


def whole_set(task: Task, seed: int) -> dict:
    """Every training row ({name: array (N, ...)}); with unlimited data the task's population
    rows where its expectation is known (the control: its exact loss, docs/prediction_rule.md,
    session 36), else UNLIMITED_ROWS fresh rows."""
    if task.train is None and task.population is not None:
        return task.population
    return calibration_sample(task, task.train_size or UNLIMITED_ROWS, seed)


def whole_set_chunk_rows(chunk_rows: int | None) -> int:
    """Rows of the whole set per compiled call: `chunk_rows` where given, else
    WHOLE_SET_CHUNK_ROWS (a number at least the set's rows is all at once)."""
    return WHOLE_SET_CHUNK_ROWS if chunk_rows is None else int(chunk_rows)


def descent_cap(s_ref: int, reruns: list[int | None], p84: float | None) -> int:
    """The full-batch descents' step cap: the larger of S_ref and the reruns' 84th percentile
    (rounded up); where that percentile is infinite, the slowest rerun that reached the goal."""
    if p84 is not None:
        return max(int(s_ref), math.ceil(p84))
    return max([int(s_ref)] + [int(x) for x in reruns if x is not None])


def noise_free_batch(config: NQMConfig) -> int:
    """The NQM's batch size without gradient noise: N (the finite-population correction makes the
    noise zero there), or UNLIMITED_BATCH for unlimited data."""
    return UNLIMITED_BATCH if config.train_size is None else int(config.train_size)


def noise_penalty(config: NQMConfig, sweep_config: SweepConfig, b_ref: int, n: int,
                  max_steps: int, certify: bool = False) -> dict:
    """The tuned NQM's noise penalty at B_ref at the depth it reaches in n noise-free steps.

    Returns {"n", "target": T(n) (the lowest expected loss in n steps without noise, tuned in the
    sweep's space), "steps_b_ref", "steps_noise_free" (tuned steps to T(n); None: not within
    max_steps), "ratio": steps_b_ref / steps_noise_free (inf, written null, when B_ref does not
    reach it; nan, written null, in the impossible case that B = N does not)}. `certify`: as
    `nqm.tuning.tune_curve`'s (the validation setting)."""
    family = NQM_FAMILY[sweep_config.optimizer]
    space = nqm_search_space(sweep_config.search)
    match = noise_free_match(sweep_config, config.train_size, n)
    target, _ = step_matched_target(config, match)
    curve = tune_curve(dataclasses.replace(config, target=target), nqm_optimizer(family, space),
                       [b_ref, match.batch_size], max_steps=max_steps, space=space,
                       certify=certify)
    steps = {int(p.batch_size): p.steps for p in curve.points}   # one point when B_ref = N
    s_ref, s_nf = steps[int(b_ref)], steps[int(match.batch_size)]
    ratio = math.nan if s_nf is None else math.inf if s_ref is None else s_ref / s_nf
    return {"n": int(n), "target": float(target), "steps_b_ref": s_ref,
            "steps_noise_free": s_nf, "ratio": float(ratio)}


def pinned_target(penalty, rho: float, n_max: int) -> tuple[int | None, list[dict]]:
    """Rule 3's n*: the smallest n in 1 .. n_max with penalty(n)["ratio"] >= rho, found by
    doubling then bisection; (None, evaluated) when none does. The noise penalty grows with
    depth once noise matters; where it does not grow (the first few steps can dip) the search
    returns a crossing of rho, which is the smallest n only on a nondecreasing stretch.

    Args:
      penalty: callable n -> `noise_penalty` record (memoise it: the three rhos share calls).
      rho: the network's S~_ref / S_fb^N (> 1).
      n_max: the largest n tried.
    Returns (n*, the records evaluated, in order)."""
    seen = []

    def at(n):
        record = penalty(n)
        seen.append(record)
        return record["ratio"] >= rho

    lo, hi = 0, 1
    while not at(hi):
        if hi >= n_max:
            return None, seen
        lo, hi = hi, min(2 * hi, n_max)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if at(mid):
            hi = mid
        else:
            lo = mid
    return hi, seen


def run_two_ends(task: Task, sweep_config: SweepConfig, records: list[TrialRecord], doc: dict,
                 goal_params, repeats: list[TrialRecord], devices=None, log=None,
                 journal: Path | None = None) -> dict:
    """B_2pt' and rule 3 for one validation document (`ValidationDocument.to_dict()`) with a
    fitted NQM at its goal checkpoint (rule 1's).

    Args:
      task, sweep_config, records: the workload's Task and the sweep the document was made from.
      doc: the validation document.
      goal_params: the reference trial's parameters at its goal (`rerun.reference_checkpoints`).
      repeats: the sweep's reruns of its winners (`read_repeats`).
      devices, log, journal: as `full_batch_steps`.

    Returns the JSON-ready record written to two_ends.json (see docs/design.md)."""
    say = log or (lambda _: None)
    t0 = time.perf_counter()
    vcfg = ValidationConfig.from_dict(doc["settings"])
    ends = both_ends(task, sweep_config, records, doc["calibration_run"], goal_params, repeats,
                     vcfg.seed, vcfg.chunk_rows, devices, log, journal)
    b_ref, s_fb, pct = ends["b_ref"], ends["full_set"]["steps"], ends["reruns"]["percentiles"]
    out = {"workload": doc["workload"], "optimizer": sweep_config.optimizer, **ends,
           "s_fb_sample": (doc.get("full_batch") or {}).get("steps"),
           "rule_3": _rule_3(doc, sweep_config, records, vcfg, b_ref, s_fb, pct, say)}
    out["seconds"] = time.perf_counter() - t0
    return out


def retune_two_ends(record: dict, doc: dict, sweep_config: SweepConfig,
                    records: list[TrialRecord], log=None) -> dict:
    """A stored two_ends.json record with its NQM part, rule 3, computed again for `doc` (the
    validation document it belongs to, its NQM side tuned again: `realnets.validation.retune`);
    the network's two ends and B_2pt' are kept as measured. The caller refreshes "compared"."""
    say = log or (lambda _: None)
    t0 = time.perf_counter()
    vcfg = ValidationConfig.from_dict(doc["settings"])
    rule_3 = _rule_3(doc, sweep_config, records, vcfg, int(record["b_ref"]),
                     record["full_set"]["steps"], record["reruns"]["percentiles"], say)
    return {**record, "rule_3": rule_3, "retune_seconds": time.perf_counter() - t0}


def both_ends(task: Task, sweep_config: SweepConfig, records: list[TrialRecord], run: dict,
              goal_params, repeats: list[TrialRecord], seed: int = 0,
              chunk_rows: int | None = None, devices=None, log=None,
              journal: Path | None = None) -> dict:
    """The two measured ends and B_2pt' (no NQM).

    Args:
      task, sweep_config, records: the workload's Task and its sweep.
      run: the reference trial as a validation's "calibration_run" ({"batch_size", "trial_id",
        "sweep_steps_to_goal", "learning_rate", "momentum", "final_lr_fraction",
        "decay_steps"}).
      goal_params: the reference trial's parameters at its goal (retrained).
      repeats: the sweep's reruns of its winners (`read_repeats`).
      seed, chunk_rows, devices, log: the whole set's draw (unlimited data) and how its loss
        is computed (chunk_rows None: WHOLE_SET_CHUNK_ROWS); progress lines.
      journal: the descents' journal (`full_batch_steps`): a killed call resumes from it.

    Returns {"b_ref", "s_ref", "reruns": {"count", "not_at_goal", "percentiles"}, "full_set":
    `full_batch_steps` on the whole set to the reference run's loss there (cap:
    `descent_cap`), "two_point": {"16", "50", "84": B_2pt' with that percentile of the
    reruns, examples per step, or None}}."""
    say = log or (lambda _: None)
    b_ref, s_ref = int(run["batch_size"]), int(run["sweep_steps_to_goal"])
    reruns = reference_reruns(repeats, run)
    pct = rerun_percentiles(reruns)
    cap = descent_cap(s_ref, reruns, pct["84"])
    rows, chunk_rows = whole_set(task, seed), whole_set_chunk_rows(chunk_rows)
    target = mean_loss(task, goal_params, rows, chunk_rows, devices)
    trials = sorted((r for r in records if r.batch_size == b_ref),
                    key=lambda r: trial_order(r.trial_id))
    where = ("its exact loss" if task.train is None and task.population is not None
             else f"{len(next(iter(rows.values())))} rows")
    say(f"two ends: the network full batch on {where} from each "
        f"of the {len(trials)} trials at B = {b_ref} (up to {cap} steps)")
    fb = full_batch_steps(task, sweep_config, trials, rows, target, cap, chunk_rows, devices,
                          log, journal)
    fb["population"] = task.train is None and task.population is not None
    return {"b_ref": b_ref, "s_ref": s_ref,
            "reruns": {"count": len(reruns), "not_at_goal": sum(x is None for x in reruns),
                       "percentiles": pct},
            "full_set": fb,
            "two_point": {q: two_point_estimate(b_ref, fb["steps"], pct[q]) for q in pct}}


def _rule_3(doc, sweep_config, records, vcfg, b_ref, s_fb, pct, say) -> dict:
    """Rule 3 with the goal checkpoint's NQM: per percentile of the reruns, rho, n*, the target and
    the tuned NQM's B_crit; the records evaluated; or {"skipped": why}."""
    record = doc["checkpoints"].get(RULE_3_CHECKPOINT) or {}
    if "nqm" not in record:
        return {"skipped": f"no NQM fitted at the {RULE_3_CHECKPOINT} checkpoint"}
    if s_fb is None:
        return {"skipped": "no trial reached the target full batch"}
    if s_fb == 0:
        return {"skipped": "the initialisation is already at the target: no steps to match"}
    config = fitted_nqm(record["nqm"], 1.0)
    if b_ref >= noise_free_batch(config):
        return {"skipped": f"B_ref = {b_ref} is the whole training set: no noise to pin"}
    cache: dict[int, dict] = {}

    def penalty(n):
        if n not in cache:
            cache[n] = noise_penalty(config, sweep_config, b_ref, n, vcfg.nqm_max_steps,
                                     vcfg.certify)
            say(f"rule 3: n = {n}: target {cache[n]['target']:.4g}, noise penalty "
                f"{cache[n]['ratio']:.4g}")
        return cache[n]

    batch_sizes = build_curve(records, sweep_config).batch_sizes
    out = {"checkpoint": RULE_3_CHECKPOINT, "noise_free_batch": noise_free_batch(config), "by": {}}
    for q, steps in pct.items():
        if steps is None:
            out["by"][q] = {"rho": None, "note": "the percentile is infinite (reruns not at the "
                                                 "goal): unbounded above"}
            continue
        if steps <= s_fb:
            out["by"][q] = {"rho": None, "note": "no bend above B_ref (S~ <= S_fb^N)"}
            continue
        rho = steps / s_fb
        n, _ = pinned_target(penalty, rho, vcfg.nqm_max_steps)
        if n is None:
            out["by"][q] = {"rho": rho, "n": None,
                            "note": "no depth within the NQM's step budget has that penalty"}
            continue
        target = cache[n]["target"]
        say(f"rule 3 ({q}th percentile): predicting to target {target:.4g}")
        pred = predict(dataclasses.replace(config, target=target), sweep_config, records,
                       batch_sizes, vcfg, search_matched=False)
        tuned = pred["tuned"]
        out["by"][q] = {"rho": rho, "n": n, "target": target,
                        "b_crit": tuned["fit"]["b_crit"] if tuned else None,
                        "tuned": tuned}
    out["evaluated"] = [cache[n] for n in sorted(cache)]
    return out


def compared(entry: dict) -> dict:
    """What a two_ends record is held against, from the document's summary entry
    (`summary.summary_entry`): the measured B_crit of record with its interval, the reruns' median
    curve's, B_simple (per example, goal checkpoint) and rule 1's prediction."""
    reruns = entry.get("reruns") or {}
    return {"measured": {k: entry["measured"][k] for k in ("b_crit", "lo", "hi")},
            "reruns_curve": {k: reruns.get(k) for k in ("b_crit", "lo", "hi")},
            "b_simple": entry["b_simple"]["value"],
            "rule_1": rule_1_of(entry)["b_crit"]}


def _ratio(x, y):
    return None if x is None or not y else x / y


def row(record: dict) -> dict:
    """One line of `table`: the two estimates (value, 16-84% range) and their ratios to the
    measured B_crit of record and to the reruns' median curve's, beside B_simple's and rule 1's."""
    vs = record["compared"]
    measured, curve = vs["measured"]["b_crit"], vs["reruns_curve"]["b_crit"]
    r3 = (record["rule_3"].get("by") or {})
    two = {q: record["two_point"][q] for q in ("16", "50", "84")}
    three = {q: (r3.get(q) or {}).get("b_crit") for q in ("16", "50", "84")}
    return {"workload": record["workload"], "optimizer": record["optimizer"],
            "s_ref": record["s_ref"], "s_tilde": record["reruns"]["percentiles"],
            "s_fb_sample": record["s_fb_sample"], "s_fb_whole": record["full_set"]["steps"],
            "rows": ("exact loss" if record["full_set"].get("population")
                     else record["full_set"]["sample_rows"]), "measured": vs["measured"],
            "reruns_curve": vs["reruns_curve"], "two_point": two, "rule_3": three,
            "ratio": {"two_point": _ratio(two["50"], measured),
                      "rule_3": _ratio(three["50"], measured),
                      "b_simple": _ratio(vs["b_simple"], measured),
                      "rule_1": _ratio(vs["rule_1"], measured),
                      "two_point_vs_curve": _ratio(two["50"], curve),
                      "rule_3_vs_curve": _ratio(three["50"], curve)}}


def table(records: list[dict], labels: list[str] | None = None) -> str:
    """The two_ends records as a Markdown table (docs/validation.md); `labels` name the rows'
    workloads (default: each record's own; `summary.workload_labels` names the goal where a
    workload and optimizer come twice)."""
    def g(x, digits=3):
        return "-" if x is None else f"{x:.{digits}g}"

    def span(d):
        # an 84th percentile without a value: reruns not at the goal, S~ (and so B_2pt' and rule
        # 3's depth) unbounded above
        hi = "inf" if d["84"] is None and d["16"] is not None else g(d["84"])
        return f"{g(d['50'])} ({g(d['16'])} .. {hi})"

    lines = ["| workload | optimizer | S_ref | S~_ref (16-84%) | S_fb sample / whole (rows) | "
             "measured B_crit (16-84%) | reruns' curve | B_2pt' (16-84%) | / measured | "
             "rule 3 (16-84%) | / measured | B_simple / measured | rule 1 / measured |",
             "|---" * 13 + "|"]
    for rec, label in zip(records, labels or [r["workload"] for r in records]):
        r = row(rec)
        m, c, ratio = r["measured"], r["reruns_curve"], r["ratio"]
        lines.append(
            f"| {label} | {r['optimizer']} | {r['s_ref']} | {span(r['s_tilde'])} | "
            f"{g(r['s_fb_sample'])} / {g(r['s_fb_whole'])} ({r['rows']}) | "
            f"{g(m['b_crit'])} ({g(m['lo'])}-{g(m['hi'])}) | {g(c['b_crit'])} | "
            f"{span(r['two_point'])} | {g(ratio['two_point'])} | {span(r['rule_3'])} | "
            f"{g(ratio['rule_3'])} | {g(ratio['b_simple'])} | {g(ratio['rule_1'])} |")
    return "\n".join(lines)


# the diagnostic's reading (docs/prediction_rule.md, session 32, later)
GOAL_METRIC_FACTOR = 1.3


def validation_metric(task: Task, unravel) -> Callable:
    """theta (P,) -> the task's validation metric (its `eval_fn` over every validation row)."""
    import jax
    import jax.numpy as jnp

    rows = {k: jnp.asarray(v) for k, v in task.val.items()}
    rows["mask"] = jnp.ones(len(next(iter(task.val.values()))), jnp.float32)
    evaluate = jax.jit(lambda t: task.eval_fn(unravel(t), rows))

    def metric(theta):
        out = evaluate(jnp.asarray(theta, jnp.float32))
        return float(out["metric_sum"]) / float(out["count"])

    return metric


def goal_metric_descent(task: Task, sweep_config: SweepConfig, record: dict,
                        chunk_rows: int | None = None, devices=None) -> dict:
    """The fastest whole-set descent of a two_ends record again, with the validation metric at
    every step: {"trial_id", "goal", "metric_start", "metric_at_s_fb" (at S_fb^N steps, or where
    the goal was met if earlier), "steps_to_goal" (the first step with the metric at or below the
    sweep's goal; None: not within the descents' cap), "step_limit", "seconds"}. Needs a task with
    validation rows (not the control)."""
    from jax.flatten_util import ravel_pytree

    from realnets.validation.quadratic_path import descend, path_optimizer, sample_loss
    from realnets.validation.rerun import init_params_of

    t0 = time.perf_counter()
    fb = record["full_set"]
    if fb["steps"] is None:
        raise ValueError("no whole-set descent reached the target: nothing to follow")
    if task.val is None:
        raise ValueError("the task has no validation rows (the control): no goal metric")
    init = init_params_of(task, sweep_config.seed, int(fb["trial_id"]))
    flat, unravel = ravel_pytree(init)
    network = sample_loss(task, init, whole_set(task, ValidationConfig().seed),
                          whole_set_chunk_rows(chunk_rows), devices)
    metric = validation_metric(task, unravel)
    seen = []            # the metric at every step the descent takes

    def at_goal(theta):
        seen.append(metric(theta))
        return seen[-1] <= sweep_config.goal

    trial = TrialRecord(batch_size=record["b_ref"], trial_id=fb["trial_id"], status="COMPLETE",
                        learning_rate=fb["learning_rate"], momentum=fb["momentum"])
    descent, _ = descend(network, np.asarray(flat, np.float64),
                         path_optimizer(sweep_config, trial), -math.inf, int(fb["step_limit"]),
                         stop=at_goal)
    return {"trial_id": fb["trial_id"], "goal": sweep_config.goal, "metric_start": seen[0],
            # at S_fb^N steps, or where the goal was met if earlier
            "metric_at_s_fb": seen[min(int(fb["steps"]), len(seen) - 1)],
            "steps_to_goal": descent.steps_to_target, "step_limit": fb["step_limit"],
            "seconds": time.perf_counter() - t0}


def goal_metric_reading(s_fb: int, steps_to_goal: int | None, largest_steps: int) -> str:
    """The fixed reading, on a workload with a gap (the sweep's steps at its largest batch size
    above GOAL_METRIC_FACTOR x S_fb^N; else 'no gap'): 'explains' when the steps to the goal
    metric reach the largest batch size's within that factor (or the goal is not reached within
    the cap), 'does not' when they stay below the factor x S_fb^N, else 'partly'."""
    if largest_steps <= GOAL_METRIC_FACTOR * s_fb:
        return "no gap"
    if steps_to_goal is None or steps_to_goal * GOAL_METRIC_FACTOR >= largest_steps:
        return "explains"
    if steps_to_goal < GOAL_METRIC_FACTOR * s_fb:
        return "does not"
    return "partly"

"""The two-point estimate of the critical batch size from one batch size's trials: no NQM, no
sweep over batch sizes (docs/prediction_rule.md, sessions 32, 35 and 41; docs/own_workload.md).

    B_2pt' = B_ref (S~_ref / S_fb^N - 1)    (examples per step)

S~_ref is the median steps to goal of the reference trial's reruns under other seeds (the best
trial at B_ref, the smallest batch size that reached the goal), S_fb^N the fewest full-batch
steps on the whole training set from the sweep's trials at B_ref to the reference run's loss at
its goal (`two_ends.both_ends`). Its interval takes the reruns' 16th and 84th percentiles in
place of the median. It is the McCandlish form S(B) = S_min (1 + B_crit / B) through the
reference point with S_min = S_fb^N.

The estimate of record since session 42 is B_2pt'(med) (`with_median_end`): S_fb^N, a best
case over the trials' initialisations, replaced by the median steps of the fastest full-batch
configuration descending from 16 other initialisations; B_2pt' stays beside it.

The condition of docs/prediction_rule.md (session 35) is reported beside it: trust the estimate
only when the full-batch descent needs at least `TRUST_MIN_STEPS` steps (under fewer, one step
moves it by a fifth or more, and the reference run's steps are few and lucky).
`python -m realnets two-point DIR` runs it on a sweep directory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from nqm.curve import ScalingCurve
from nqm.scaling import fit_mccandlish
from realnets.planning.plan import TwoPointCurve
from realnets.sweeps.curve import build_curve, same_configuration
from realnets.sweeps.records import SweepConfig, TrialRecord
# the condition's constant lives below, in sweeps (its near-goal warning names it); the
# validation modules take it from here
from realnets.sweeps.robustness import TRUST_MIN_STEPS, first_trials
from realnets.validation.files import TWO_POINT_FILE
from realnets.validation.noise_free_match import reference_record, reference_reruns
from realnets.validation.rerun import best_trial, calibration_batch_size, retrain
from realnets.validation.two_ends import both_ends
from realnets.workloads.tasks import Task


def reference_run(trial: TrialRecord) -> dict:
    """The reference trial as a validation's "calibration_run" (the fields `both_ends` reads)."""
    return {"batch_size": int(trial.batch_size), "trial_id": trial.trial_id,
            "sweep_steps_to_goal": int(trial.steps_to_goal),
            "learning_rate": float(trial.learning_rate),
            "momentum": None if trial.momentum is None else float(trial.momentum),
            "final_lr_fraction": trial.final_lr_fraction, "decay_steps": trial.decay_steps}


def check_inputs(config: SweepConfig, records: list[TrialRecord],
                 repeats: list[TrialRecord], batch_size: int | None = None
                 ) -> tuple[TrialRecord, dict, list[int | None]]:
    """(reference trial, its run dict, its reruns' steps) before any training; ValueError naming
    what is missing: no batch size at the goal, `batch_size` not one of them, or no reruns."""
    b_ref = calibration_batch_size(build_curve(records, config), batch_size)
    trial = best_trial(records, b_ref)
    run = reference_run(trial)
    reruns = reference_reruns(repeats, run)
    if not reruns:
        raise ValueError(f"sweep: no reruns of the reference trial (B = {b_ref}, trial "
                         f"{trial.trial_id}) under other seeds; run `python -m realnets repeat "
                         "DIR --seeds 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 --inits 2` first")
    return trial, run, reruns


def condition(s_fb: int | None, value: float | None) -> dict:
    """{"min_full_batch_steps", "holds", "why"}: the session-35 condition on S_fb^N."""
    if value is None:
        return {"min_full_batch_steps": TRUST_MIN_STEPS, "holds": False,
                "why": "no estimate (no full-batch steps, or none below the reruns' median)"}
    holds = s_fb >= TRUST_MIN_STEPS
    return {"min_full_batch_steps": TRUST_MIN_STEPS, "holds": bool(holds),
            "why": (f"S_fb^N = {s_fb}" if holds else
                    f"S_fb^N = {s_fb}: one step moves the estimate by a fifth or more")}


def measured_b_crit(records: list[TrialRecord], config: SweepConfig) -> float | None:
    """The sweep's own fitted B_crit where it reached the goal at three batch sizes or more (a
    check of the estimate, not an input); None otherwise."""
    curve = build_curve(records, config)
    if sum(p.reached for p in curve.points) < 3:
        return None
    return fit_mccandlish(curve.batch_sizes, curve.steps).b_crit


def examples_processed(records: list[TrialRecord], repeats: list[TrialRecord], run: dict,
                       full_set: dict) -> dict:
    """Training examples each part consumed (steps x batch size), a device-independent measure of
    cost: "b_ref_trials" (the sweep's trials at B_ref), "reruns" (the reference trial's),
    "full_batch" (the whole-set descents: steps x rows; a descent that did not reach its target
    counted at its cap, an upper bound), "estimate" (their sum), and "sweep" (every trial of the
    sweep at every batch size, with every rerun), all in examples."""
    b_ref = int(run["batch_size"])
    trials = sum(r.steps_run * b_ref for r in records if r.batch_size == b_ref)
    reference = reference_record(run)
    ref = [r for r in repeats if same_configuration(r, reference)]
    reruns = sum(r.steps_run * b_ref for r in ref)
    full = sum((t["steps_to_target"] or t["step_limit"]) for t in full_set["trials"])
    full *= int(full_set["sample_rows"])
    sweep = sum(r.steps_run * r.batch_size for r in list(records) + list(repeats))
    return {"b_ref_trials": int(trials), "reruns": int(reruns), "full_batch": int(full),
            "estimate": int(trials + reruns + full), "sweep": int(sweep)}


def estimate(task: Task, config: SweepConfig, records: list[TrialRecord],
             repeats: list[TrialRecord], batch_size: int | None = None, seed: int = 0,
             chunk_rows: int | None = None, devices=None, log=None,
             journal: Path | None = None) -> dict:
    """B_2pt' of a sweep (`check_inputs` first, then the reference trial retrained to its goal
    and the whole-set full-batch descents).

    Args:
      task, config, records: the workload's Task and the sweep (its trials at B_ref at least).
      repeats: the sweep's reruns (`read_repeats`); those of the reference trial are required.
      batch_size: B_ref (default: the smallest batch size that reached the goal).
      seed, chunk_rows, devices, log, journal: as `two_ends.both_ends`.

    Returns the JSON-ready record: `both_ends`'s fields, "value"/"lo"/"hi" (B_2pt' at the
    reruns' median, 16th and 84th percentiles; examples per step), "condition", "measured"
    (the sweep's own B_crit or None), "ratio" (value / measured, or None), "examples"
    (`examples_processed`), "seconds"."""
    trial, run, _ = check_inputs(config, records, repeats, batch_size)
    t0 = time.perf_counter()
    say = log or (lambda _: None)
    say(f"two-point: retraining the reference trial {trial.trial_id} at B = {trial.batch_size} "
        f"to its goal ({trial.steps_to_goal} steps)")
    _, goal_params = retrain(task, config, trial, devices)
    ends = both_ends(task, config, records, run, goal_params, repeats, seed, chunk_rows,
                     devices, log, journal)
    return _record(config, records, repeats, trial, run, seed, ends, time.perf_counter() - t0)


def _record(config: SweepConfig, records: list[TrialRecord], repeats: list[TrialRecord],
            trial: TrialRecord, run: dict, seed: int, ends: dict, seconds: float) -> dict:
    """The two_point.json record from the two measured ends (`both_ends`'s fields): B_2pt' at
    the reruns' percentiles, its condition, the sweep's own B_crit and the cost in examples."""
    value = ends["two_point"]["50"]
    measured = measured_b_crit(records, config)
    return {"workload": config.workload, "optimizer": config.optimizer, "goal": config.goal,
            "trials": config.trials, "trial_id": trial.trial_id, "rows_seed": int(seed), **ends,
            "value": value,
            "lo": ends["two_point"]["16"], "hi": ends["two_point"]["84"],
            "condition": condition(ends["full_set"]["steps"], value),
            "measured": measured,
            "ratio": None if value is None or not measured else value / measured,
            "examples": examples_processed(records, repeats, run, ends["full_set"]),
            "seconds": seconds}


# the parts of `both_ends`'s record, stored in two_ends.json too
_ENDS = ("b_ref", "s_ref", "reruns", "full_set", "two_point")


def stored_ends(report_dir: Path, config: SweepConfig, records: list[TrialRecord],
                repeats: list[TrialRecord], batch_size: int | None = None,
                seed: int = 0) -> tuple[dict, dict | None]:
    """The two measured ends `estimate` would measure, read from a validation report's
    two_ends.json (`two-ends`, `validate --rule-4`) instead of retraining the reference trial
    and descending again: the same sweep goal, reference trial, trials at B_ref, reruns and
    whole-set draw give the same descents, up to the float rounding of the retrained reference
    (of the ten shipped two-point records, nine agree to the bit; on synthetic_clusters the
    whole-set target differs in the 8th digit and one of 16 descents took a step fewer).

    Args:
      report_dir: the report directory (validation.json and two_ends.json).
      config, records, repeats, batch_size, seed: as `estimate`'s.

    Returns (the record `estimate` returns, its "seconds" those of this reading, with
    "ends_from": the report directory; the report's stored "full_batch_inits" or None, for
    `with_median_end`). ValueError naming the first part that differs, before anything is used.
    """
    from realnets import store
    from realnets.sweeps.records import trial_order
    from realnets.validation.files import TWO_ENDS_FILE, VALIDATION_FILE
    from realnets.validation.reconciliation import rerun_percentiles

    t0 = time.perf_counter()
    report_dir = Path(report_dir)
    where = f"ends-from {report_dir}"
    for name in (VALIDATION_FILE, TWO_ENDS_FILE):
        if not (report_dir / name).is_file():
            raise ValueError(f"{where}: no {name} (run `python -m realnets validate ... --rule-4` "
                             "or `two-ends` there first)")
    doc = store.read_json(report_dir / VALIDATION_FILE, VALIDATION_FILE)
    ends = store.read_json(report_dir / TWO_ENDS_FILE, TWO_ENDS_FILE)
    missing = [k for k in _ENDS if not isinstance(ends, dict) or k not in ends]
    if missing:
        raise ValueError(f"{where}: its {TWO_ENDS_FILE} lacks {', '.join(missing)}")
    trial, run, reruns = check_inputs(config, records, repeats, batch_size)
    at_ref = sorted((r.trial_id for r in records if r.batch_size == trial.batch_size),
                    key=trial_order)
    stored_run = doc.get("calibration_run") or {}
    checks = [
        ("workload", ends.get("workload"), config.workload),
        ("optimizer", ends.get("optimizer"), config.optimizer),
        ("goal", (doc.get("sweep_config") or {}).get("goal"), config.goal),
        ("reference trial", (stored_run.get("batch_size"), stored_run.get("trial_id")),
         (int(trial.batch_size), trial.trial_id)),
        ("reference steps", ends.get("s_ref"), int(trial.steps_to_goal)),
        ("trials at B_ref", [t["trial_id"] for t in (ends.get("full_set") or {}).get("trials", [])],
         at_ref),
        ("reruns' percentiles", (ends.get("reruns") or {}).get("percentiles"),
         rerun_percentiles(reruns)),
        ("whole-set draw (seed)", (doc.get("settings") or {}).get("seed", 0), int(seed)),
    ]
    for name, stored, here in checks:
        if stored != here:
            raise ValueError(f"{where}: its {name} differs from the sweep's ({stored} there, "
                             f"{here} here); run two-point without --ends-from")
    part = {k: ends[k] for k in _ENDS}
    record = _record(config, records, repeats, trial, run, seed, part, time.perf_counter() - t0)
    return {**record, "ends_from": str(report_dir)}, ends.get("full_batch_inits")


def stale(record: dict, goal: float, steps_at: dict[int, float]) -> str | None:
    """Why a two_point.json no longer describes its sweep (another goal, or other steps at its
    B_ref: the sweep was extended or rerun since), or None when it does. `steps_at` is the
    sweep's steps to goal per batch size now ({B: steps})."""
    b_ref = int(record["b_ref"])
    if record.get("goal") != goal or steps_at.get(b_ref) != record["s_ref"]:
        return (f"{TWO_POINT_FILE} was made before this sweep changed (its goal or its steps "
                f"at B = {b_ref}): rerun `python -m realnets two-point` on it")
    return None


def plan_curve(record: dict, sweep: ScalingCurve) -> TwoPointCurve:
    """A two_point.json record as the plan reads it (`plan --steps-from two-point`), after
    checking it against the sweep's curve now: ValueError (one line) for a record made before the
    sweep changed (`stale`) or one without an estimate."""
    # a record made before the sweep was resumed is checked against the trials it saw
    seen = sweep if not record.get("trials") else first_trials(sweep, int(record["trials"]))
    at = {p.batch_size: p.steps for p in seen.points if p.steps is not None}
    why = stale(record, sweep.config.get("goal"), at)
    if why:
        raise ValueError(f"two-point: {why}")
    if record.get("value") is None:
        raise ValueError(f"two-point: the record has no estimate at B_ref = {record['b_ref']} "
                         f"({record['condition']['why']}), so there are no steps to plan with")
    pct, fb = record["reruns"]["percentiles"], record["full_set"]
    # with the exact loss of unlimited data (the control) there is no training-set size: plan up
    # to twice the sweep's largest batch size, as a sweep's fit is extrapolated
    rows = (2 * max(sweep.batch_sizes) if fb.get("population") else int(fb["sample_rows"]))
    s_fb, what = of_record(record)
    return TwoPointCurve(
        b_ref=int(record["b_ref"]), s_fb=s_fb, s_ref=float(pct["50"]),
        s_ref_p16=pct.get("16"), s_ref_p84=pct.get("84"), rows=rows,
        note=(f"steps from {what}: {verdict(record['condition'])}; how far each curve held "
              "in absolute steps: docs/validation.md, 'The two-point curve in absolute "
              "steps'"))


@dataclass(frozen=True)
class Choice:
    """The two-point estimate a record offers as of record (`chosen`): its name
    ("B_2pt'(med)" or "B_2pt'"), value and 16-84% `lo` .. `hi` (examples per step; None where
    unknown), the full-batch steps `end` it stands on (the median over `inits`
    initialisations, or S_fb^N with `inits` None), and `why` it is not B_2pt'(med) (None when
    it is)."""

    predictor: str
    value: float | None
    lo: float | None
    hi: float | None
    end: float | None
    inits: int | None
    why: str | None


def chosen(record: dict) -> Choice:
    """The one place that chooses which estimate of a two-point record stands as of record
    (for the plan's curve, the track record's error bar and the app's line): B_2pt'(med) where
    it has a value (since session 42, docs/prediction_rule.md), else B_2pt', the diagnostic,
    with why. ValueError where a B_2pt'(med) value comes without the descents it stands on."""
    med = record.get("b_2pt_med") or {}
    if med.get("value") is not None:
        median = ((record.get("full_batch_inits") or {}).get("percentiles") or {}).get("50")
        if median is None:
            raise ValueError("two-point record: B_2pt'(med) has a value but no median "
                             "full-batch end (full_batch_inits); rerun `python -m realnets "
                             "two-point`")
        return Choice("B_2pt'(med)", med["value"], med.get("lo"), med.get("hi"), float(median),
                      len(record["full_batch_inits"].get("seeds") or []), None)
    why = (med.get("why") or "no value in this record") if med else (
        "not in this record: rerun `python -m realnets two-point` without --best-end-only")
    steps = (record.get("full_set") or {}).get("steps")
    return Choice("B_2pt'", record["value"], record.get("lo"), record.get("hi"),
                  None if steps is None else float(steps), None, why)


def of_record(record: dict) -> tuple[float, str]:
    """(the full-batch end the estimate of record stands on, its name and value in words), by
    `chosen`: B_2pt'(med)'s median end, else S_fb^N and B_2pt', named as the diagnostic it
    is."""
    c = chosen(record)
    if c.why is None:
        return c.end, (
            f"the two-point estimate of record B_2pt'(med) = {number(c.value)} (the "
            f"median full-batch end over {c.inits} initialisations, "
            f"{number(c.end)} steps; B_2pt' = {number(record['value'])} with the best end)")
    return c.end, (
        f"B_2pt' = {number(record['value'])}, the best full-batch end (B_2pt'(med), the "
        f"estimate of record: {c.why})")


def number(x: float | None) -> str:
    """A value of the record for display: 4 significant digits, '?' where unknown."""
    return "?" if x is None else f"{x:.4g}"


def usable_inits(stored_inits: dict | None, seeds: list[int], record: dict) -> bool:
    """Whether a report's stored descents from other initialisations are those `with_median_end`
    would make for `record`: the same seeds, from the same fastest configuration."""
    return (stored_inits is not None and stored_inits.get("seeds") == list(seeds)
            and stored_inits.get("trial_id") == record["full_set"].get("trial_id"))


def with_median_end(task: Task, config: SweepConfig, record: dict, seeds: list[int],
                    chunk_rows: int | None = None, devices=None,
                    journal: Path | None = None, log=None,
                    stored_inits: dict | None = None) -> dict:
    """The record with B_2pt'(med) (docs/prediction_rule.md, session 41): its fastest
    full-batch configuration descended again from the initialisations of `seeds` on the same
    whole set (`full_batch_inits.over_inits`, the rows the record's "rows_seed" drew in
    `estimate`), as "full_batch_inits", and "b_2pt_med" {"value", "lo", "hi"}: the two-point
    estimate at the reruns' median, 16th and 84th percentiles with their median full-batch end.
    A record whose whole-set descents all missed the target gets "b_2pt_med" with value None
    and its "why", and no descents. `stored_inits` (from `stored_ends`): descents already made
    by `two-ends`, taken as they are when they are of the same configuration and `seeds`
    (nothing is trained then, and `task` is not used). `journal`, `log`: as `over_inits`'s."""
    from realnets.validation.full_batch_inits import median_end, over_inits, why_no_value

    if record["full_set"].get("steps") is None:
        return {**record, "b_2pt_med": {
            "value": None, "lo": None, "hi": None,
            "why": "not computed: no full-batch descent of the sweep's trials at B_ref reached "
                   "the target, so there is no fastest configuration to descend again"}}
    if usable_inits(stored_inits, seeds, record):
        inits = stored_inits
    else:
        inits = over_inits(task, config, record, seeds, int(record.get("rows_seed", 0)),
                           chunk_rows, devices, journal, log)
    median = inits["percentiles"]["50"]
    by = median_end(record["b_ref"], record["reruns"]["percentiles"], median)
    # their cost: steps x rows (a descent not at the target ran to the step limit)
    extra = int(record["full_set"]["sample_rows"]) * sum(
        inits["step_limit"] if s is None else s for s in inits["steps"])
    ex = record["examples"]
    med = {"value": by["50"], "lo": by["16"], "hi": by["84"]}
    if med["value"] is None:
        med["why"] = why_no_value(len(seeds), median, record["reruns"]["percentiles"]["50"])
    return {**record, "full_batch_inits": inits, "b_2pt_med": med,
            "examples": {**ex, "full_batch_inits": extra, "estimate": ex["estimate"] + extra}}


def verdict(cond: dict) -> str:
    """The condition's verdict in words, the same in the terminal and the app."""
    return (f"the condition S_fb^N >= {cond['min_full_batch_steps']} "
            + (f"holds ({cond['why']}; its record: docs/prediction_rule.md, session 35)"
               if cond["holds"] else
               f"does not hold ({cond['why']}): do not lean on the estimate"))


def text(record: dict) -> str:
    """The record as a few lines for the terminal: the estimate of record (B_2pt'(med)) first
    where the record has it, B_2pt' beside it."""
    g = number
    pct, fb = record["reruns"]["percentiles"], record["full_set"]
    lines = [
        f"workload {record['workload']}  optimizer {record['optimizer']}  goal {record['goal']}",
        f"reference: B_ref = {record['b_ref']}, trial {record['trial_id']}, {record['s_ref']} "
        f"steps to the goal in the sweep; its {record['reruns']['count']} reruns: median "
        f"{g(pct['50'])} (16-84%: {g(pct['16'])} .. {g(pct['84'])}; "
        f"{record['reruns']['not_at_goal']} not at the goal)",
        f"noise-free end: S_fb^N = {g(fb['steps'])} full-batch steps on {fb['sample_rows']} "
        f"rows (the fastest of {len(fb['trials'])} trials; cap {fb['step_limit']})",
    ]
    med = record.get("b_2pt_med")
    best = (f"B_2pt' = B_ref (S~_ref / S_fb^N - 1) = {g(record['value'])} examples per step "
            f"(16-84%: {g(record['lo'])} .. {g(record['hi'])})")
    if not med:
        lines += [best, "B_2pt'(med), the estimate of record, is not in this record (`python -m "
                        "realnets two-point` without --best-end-only computes it)"]
    elif "full_batch_inits" not in record:
        lines += [best, f"B_2pt'(med) {med.get('why', 'not computed')}"]
    else:
        inits = record["full_batch_inits"]
        lines += [
            f"median noise-free end: {g(inits['percentiles']['50'])} steps from "
            f"{len(inits['seeds'])} other initialisations of the fastest configuration "
            f"({g(inits['over_s_fb'])} x S_fb^N)",
            f"B_2pt'(med) = B_ref (S~_ref / median end - 1) = {g(med['value'])} examples per step "
            f"(16-84%: {g(med['lo'])} .. {g(med['hi'])})"
            + (f": {med.get('why', 'no value')}" if med["value"] is None else
               ": the two-point estimate of record, docs/prediction_rule.md"),
            f"with the best end, a diagnostic: {best}"]
    lines.append(verdict(record["condition"]))
    ex = record["examples"]
    inits = ("" if "full_batch_inits" not in ex
             else f", from other initialisations {ex['full_batch_inits']:.3g}")
    lines.append(f"cost in training examples: {ex['estimate']:.3g} (trials at B_ref "
                 f"{ex['b_ref_trials']:.3g}, reruns {ex['reruns']:.3g}, full batch at most "
                 f"{ex['full_batch']:.3g}{inits}); "
                 + ("every trial and rerun in the sweep directory" if not record.get("trials")
                    else f"the sweep's {record['trials']} trials per batch size it was made "
                         "from, with every rerun")
                 + f": {ex['sweep']:.3g}")
    if record["measured"]:
        med = (record.get("b_2pt_med") or {}).get("value")
        lines.append(f"the sweep's own B_crit {g(record['measured'])}: "
                     + ("" if med is None else f"B_2pt'(med) / it = "
                                               f"{g(med / record['measured'])}, ")
                     + f"B_2pt' / it = {g(record['ratio'])}")
    return "\n".join(lines)

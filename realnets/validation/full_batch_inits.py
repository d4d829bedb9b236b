"""The full-batch end over initialisations: a diagnostic of the two-point estimate
(docs/prediction_rule.md, "2026-11-28 (session 40, last)").

S_fb^N is a best case, the fastest of the sweep's configurations at B_ref descending full batch,
each from its own initialisation, while S~_ref is a median over reruns. `over_inits` descends
with the fastest configuration again from other initialisations (the trainer's rule
fold_in(key(seed), trial id), one per seed), on the same whole set to the same target, and
gives the median and 16-84% of those steps and B_2pt' with that median in place of S_fb^N.
`python -m realnets two-ends DIR --full-batch-inits SEEDS` adds it to DIR/two_ends.json.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from jax.flatten_util import ravel_pytree

from realnets.sweeps.records import SweepConfig, TrialRecord
from realnets.validation import descent_journal
from realnets.validation.quadratic_path import descend, path_optimizer, sample_loss
from realnets.validation.reconciliation import rerun_percentiles, two_point_estimate
from realnets.validation.rerun import init_params_of
from realnets.validation.two_ends import whole_set, whole_set_chunk_rows
from realnets.workloads.tasks import Task

# the fixed reading: the median over initialisations against S_fb^N
EXPLAINS_FACTOR = 1.5
DOES_NOT_FACTOR = 1.3


def over_inits(task: Task, sweep_config: SweepConfig, record: dict, seeds: Sequence[int],
               rows_seed: int, chunk_rows: int | None = None, devices=None,
               journal: Path | None = None, log=None) -> dict:
    """The fastest full-batch configuration of a two_ends record descending from the
    initialisations of `seeds`.

    Args:
      task, sweep_config: the workload's Task and its sweep (optimizer; trial ids' rule).
      record: a two_ends record ("b_ref", "reruns" percentiles, "full_set" with "steps",
        "trial_id", "learning_rate", "momentum", "target" in loss units, "step_limit").
      seeds: the initialisations' seeds (whole numbers, each once, not the sweep's own seed:
        under it the trials' initialisations are those S_fb^N already descended from).
      rows_seed: the whole set's draw (the validation's seed, as `two_ends.both_ends`).
      chunk_rows, devices: how the whole set's loss is computed (chunk_rows None:
        `two_ends.WHOLE_SET_CHUNK_ROWS`).
      journal: optional JSON-lines file (`descent_journal`, keyed by seed): each descent is
        appended when finished, and one already there for the same configuration, target, cap
        and rows is taken instead of descending again (a killed call resumes, the descent under
        way from its last saved state: `descent_journal.checkpoint`).
      log: optional callable(str), a line per finished descent.

    Returns JSON-ready {"trial_id", "learning_rate", "momentum", "seeds", "steps" (per seed,
    None: not at the target within "step_limit"), "percentiles" {"16", "50", "84"} (a descent
    not at the target the slowest), "s_fb", "over_s_fb" (median / S_fb^N), "two_point"
    (B_2pt' with the median: examples per step, or None), "reading", "step_limit", "chunk_rows"
    (rows of the whole set per compiled call), "seconds"}.
    """
    seeds = check_seeds(seeds, sweep_config.seed)
    fb = record["full_set"]
    if fb.get("steps") is None:
        raise ValueError("no whole-set descent reached the target: nothing to repeat")
    t0 = time.perf_counter()
    trial = TrialRecord(batch_size=record["b_ref"], trial_id=fb["trial_id"], status="COMPLETE",
                        learning_rate=fb["learning_rate"], momentum=fb["momentum"])
    rows, chunk_rows = whole_set(task, rows_seed), whole_set_chunk_rows(chunk_rows)
    header = {"workload": sweep_config.workload, "optimizer": sweep_config.optimizer,
              "trial_id": fb["trial_id"], "learning_rate": fb["learning_rate"],
              "momentum": fb["momentum"], "target": float(fb["target"]),
              "step_limit": int(fb["step_limit"]), "rows_seed": int(rows_seed),
              "rows": int(len(next(iter(rows.values()))))}
    header.update(descent_journal.chunking(chunk_rows, header["rows"]))
    done = {} if journal is None else descent_journal.open_journal(journal, header, key="seed")
    network, steps = None, []
    for seed in seeds:
        if str(seed) in done:
            steps.append(done[str(seed)]["steps"])
            continue
        began = time.perf_counter()
        init = init_params_of(task, seed, int(fb["trial_id"]))
        if network is None:      # one compiled loss for every initialisation
            network = sample_loss(task, init, rows, chunk_rows, devices)
        theta_0 = np.asarray(ravel_pytree(init)[0], np.float64)
        descent, _ = descend(network, theta_0, path_optimizer(sweep_config, trial),
                             float(fb["target"]), int(fb["step_limit"]),
                             checkpoint=descent_journal.checkpoint(journal, header,
                                                                   {"seed": int(seed)}))
        steps.append(descent.steps_to_target if descent.status == "reached" else None)
        if journal is not None:
            descent_journal.append_run(journal, {"seed": int(seed), "steps": steps[-1]})
        if log is not None:
            log(f"full batch from seed {seed}: "
                + (f"reached the target in {steps[-1]} steps" if steps[-1] is not None
                   else f"{descent.status} (cap {fb['step_limit']} steps)")
                + f" ({time.perf_counter() - began:.0f} s)")
    pct = rerun_percentiles(steps)
    median, s_fb = pct["50"], int(fb["steps"])
    s_ref = record["reruns"]["percentiles"]["50"]
    return {"trial_id": fb["trial_id"], "learning_rate": fb["learning_rate"],
            "momentum": fb["momentum"], "seeds": seeds, "steps": steps, "percentiles": pct,
            "s_fb": s_fb, "over_s_fb": None if median is None else median / s_fb,
            "two_point": (None if median is None or s_ref is None
                          else two_point_estimate(int(record["b_ref"]), median, s_ref)),
            "reading": reading(s_fb, median), "step_limit": int(fb["step_limit"]),
            "chunk_rows": descent_journal.rows_per_call(chunk_rows, header["rows"]),
            "seconds": time.perf_counter() - t0}


def median_end(b_ref: int, reruns: dict, median: float | None) -> dict:
    """B_2pt'(med) (docs/prediction_rule.md, session 41): B_ref (S~_ref,q / median - 1) at the
    reruns' percentiles q ("16", "50", "84" of `reruns`, steps), the median full-batch end in
    place of S_fb^N; each None where that percentile is missing or not above the median."""
    return {q: two_point_estimate(int(b_ref), median, reruns.get(q)) for q in ("16", "50", "84")}


def why_no_value(inits: int, median: float | None, s_ref: float | None) -> str:
    """Why B_2pt'(med) has no value (`median_end`'s "50" None), in the words every place that
    shows it uses: the median full-batch end over `inits` initialisations (steps; None: not
    at the target) not below the reruns' median S~_ref `s_ref` (steps)."""
    if median is None:
        return (f"the median full-batch end over {inits} initialisations did not reach the "
                "target")
    if s_ref is None:
        return "the reruns at B_ref have no median at the goal"
    return (f"the median full-batch end, {median:.4g} steps, is not below the reruns' median "
            f"S~_ref, {s_ref:.4g}")


DEFAULT_COUNT = 16


def default_seeds(sweep_seed: int, count: int = DEFAULT_COUNT) -> list[int]:
    """The first `count` whole numbers from 1 that are not `sweep_seed` (`check_seeds`)."""
    return [s for s in range(1, count + 2) if s != int(sweep_seed)][:count]


def check_seeds(seeds: Sequence[int], sweep_seed: int | None = None) -> list[int]:
    """The seeds as a list; ValueError unless they are distinct whole numbers >= 0, at least
    one, and none is `sweep_seed` (the sweep's own: its initialisations are the trials' own,
    from which S_fb^N was already measured, and would pull the median toward that best case)."""
    seeds = [int(s) for s in seeds]
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"full-batch-inits must be distinct whole numbers >= 0, got "
                         f"{','.join(map(str, seeds))!r}")
    if sweep_seed is not None and int(sweep_seed) in seeds:
        raise ValueError(f"full-batch-inits: seed {int(sweep_seed)} is the sweep's own (its "
                         "initialisations are those S_fb^N was measured from); give others, "
                         f"e.g. {','.join(map(str, default_seeds(sweep_seed)))}")
    return seeds


def reading(s_fb: int, median: float | None) -> str:
    """The fixed reading: 'explains' (a part of the miss) when the median over initialisations
    is at least EXPLAINS_FACTOR x S_fb^N (or not at the target), 'does not' below
    DOES_NOT_FACTOR x S_fb^N, else 'partly'."""
    if median is None or median >= EXPLAINS_FACTOR * s_fb:
        return "explains"
    if median < DOES_NOT_FACTOR * s_fb:
        return "does not"
    return "partly"

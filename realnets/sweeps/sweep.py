"""The measuring protocol of Shallue et al. 2018 over batch sizes, resumable, on disk.

A sweep directory holds (DESIGN.md section 6):
- `config.json`: what the sweep is (workload, goal, optimizer, search space, budget, seed...);
- `trials.jsonl`: one finished trial a line, appended (and fsynced) as trials finish;
- `curve.json`: the ScalingCurve and its analysis, rewritten atomically after every batch size.

Steps to result at a batch size is the first evaluation step at which any trial reached the
goal. Rerunning the same sweep skips every (batch size, trial id) already in trials.jsonl; a
sweep killed at any moment loses at most the trials in flight and leaves no broken file (a cut
final line of trials.jsonl is ignored and repaired). Only process 0 writes; with several hosts
the directory must be on a filesystem that every process reads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import jax
import numpy as np

from nqm import validation
from nqm.curve import CurvePoint, ScalingCurve
from nqm.scaling import analyse_curve, fit_mccandlish
from realnets import store, workloads
from realnets.training.search import trial_specs
from realnets.workloads.search_space import SearchSpace
from realnets.training.step import OPTIMIZERS
from realnets.training.trainer import STATUSES, RunConfig, run_trials


# Fields that define the study: a rerun with other values would mix incomparable trials.
IDENTITY = ("workload", "goal", "optimizer", "search", "max_steps", "seed", "eval_resolution",
            "text_file")
EDGE_FRACTION = 0.1   # best value in the outer 10% of a log range counts as "on the edge"


@dataclass(frozen=True)
class SweepConfig:
    """A sweep: for each batch size, `trials` quasi-random trials (see realnets.training.search).

    Attributes:
      workload: registry name (realnets.workloads).
      batch_sizes: the batch sizes, each >= 1.
      trials: trials per batch size (trial ids 0 .. trials - 1).
      max_steps: step budget of every trial.
      goal: metric value to reach (metric <= goal).
      optimizer: sgd, momentum, nesterov or adam.
      search: the search space.
      seed: data order, initialisation and the quasi-random sequence.
      eval_resolution: see RunConfig.
      vmap_trials: trials compiled into one program at a time (0: all of a batch size).
      max_rows_per_device: see RunConfig (gradient accumulation above it).
      text_file: text for the text workload (None: pydoc_data).
      full_trials: run every trial to its own end instead of stopping a batch size's trials once
        one reached the goal (see RunConfig.stop_at_first_goal; steps to result are the same).
      noise_every: see RunConfig (None: every step; 0: off on one device).
    """

    workload: str
    batch_sizes: tuple[int, ...]
    trials: int
    max_steps: int
    goal: float
    optimizer: str
    search: SearchSpace
    seed: int = 0
    eval_resolution: float = 0.02
    vmap_trials: int = 0
    max_rows_per_device: int = 4096
    text_file: str | None = None
    full_trials: bool = False
    noise_every: int | None = None

    def __post_init__(self):
        workloads.get(self.workload)
        if not self.batch_sizes:
            raise ValueError("batch-sizes must list at least one batch size")
        for b in self.batch_sizes:
            if not isinstance(b, (int, np.integer)) or b < 1:
                raise ValueError(f"batch-sizes must be whole numbers >= 1, got {b!r}")
        if len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise ValueError(f"batch-sizes must not repeat, got {list(self.batch_sizes)}")
        if not isinstance(self.trials, (int, np.integer)) or not 1 <= self.trials <= 10_000:
            raise ValueError(f"trials must be a whole number in [1, 10000], got {self.trials!r}")
        if not isinstance(self.max_steps, (int, np.integer)) or not 1 <= self.max_steps <= 10 ** 9:
            raise ValueError(f"max-steps must be a whole number in [1, 1e9], got {self.max_steps!r}")
        if not math.isfinite(self.goal):
            raise ValueError(f"goal must be a finite number, got {self.goal}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.vmap_trials < 0:
            raise ValueError(f"vmap-trials must be >= 0, got {self.vmap_trials}")
        if self.noise_every is not None and (not isinstance(self.noise_every, (int, np.integer))
                                             or not 0 <= self.noise_every <= 10 ** 6):
            raise ValueError(f"noise-every must be a whole number in [0, 1e6] (0: off), got "
                             f"{self.noise_every!r}")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["batch_sizes"] = [int(b) for b in self.batch_sizes]
        out["search"] = self.search.to_dict()
        return out


def _check_same_study(old: dict, new: dict, path: Path) -> None:
    for key in IDENTITY:
        if old.get(key) != new.get(key):
            raise ValueError(f"out directory {path} holds a sweep with {key} = {old.get(key)!r}, "
                             f"not {new.get(key)!r}: use a new --out to start another sweep")


def _edges(best: dict, config: dict) -> tuple[str, ...]:
    edges = []
    search = config.get("search") or {}
    for name, key in (("learning_rate", "learning_rate"), ("momentum", "one_minus_momentum")):
        value, bounds = best.get(name), search.get(key)
        if value is None or not bounds:
            continue
        if name == "momentum":
            value = 1.0 - value
        lo, hi = np.log(bounds)
        pos = (np.log(max(value, 1e-300)) - lo) / (hi - lo) if hi > lo else 0.5
        if pos <= EDGE_FRACTION or pos >= 1 - EDGE_FRACTION:
            edges.append(name)
    return tuple(edges)


def best_trial(records) -> dict | None:
    """The trial that sets a point: the fewest steps_to_goal, ties to the lowest trial_id (None
    if no trial reached the goal). Takes full records or `trial_summary` rows alike. Ids are
    ordered as numbers where they are numbers, even as strings (batch_science's "2" < "10")."""
    reached = [r for r in records if r.get("steps_to_goal") is not None]
    return min(reached, key=lambda r: (r["steps_to_goal"], _id_order(r["trial_id"]))) \
        if reached else None


def _id_order(trial_id) -> tuple:
    """Sort key of a trial id: numeric ids (int or digit string) by value first, then the rest
    by name (the order of `realnets.sweeps.batch_science` trial directories)."""
    if isinstance(trial_id, int) or (isinstance(trial_id, str) and trial_id.isdigit()):
        return (0, int(trial_id), "")
    return (1, 0, str(trial_id))


def trial_summary(record: dict) -> dict:
    """What a curve point keeps of a trial (the full record stays in trials.jsonl)."""
    keys = ("trial_id", "status", "learning_rate", "momentum", "final_lr_fraction",
            "steps_to_goal", "steps_run")
    out = {k: record.get(k) for k in keys}
    noise = record.get("noise_scale") or {}
    b_simple = [v for v in noise.get("b_simple", []) if v is not None]
    out["b_simple"] = b_simple[-1] if b_simple else None
    for key in ("grad_sq_ema", "trace_cov_ema"):
        values = noise.get(key) or []
        out[key] = values[-1] if values else None
    return out


def pooled_b_simple(points) -> float | None:
    """B_simple of a whole sweep: the best trials' averages of tr(Sigma) and |G|^2 at their goal
    step, pooled over batch sizes with weights B^2 (the variance of both estimates falls as
    1 / B^2: at a batch size far below B_simple one step says almost nothing about |G|^2)."""
    num = den = 0.0
    for p in points:
        best = best_trial(p.trials)
        if best is None:
            continue
        g, t = best.get("grad_sq_ema"), best.get("trace_cov_ema")
        if g is None or t is None or not (math.isfinite(g) and math.isfinite(t)):
            continue
        num += p.batch_size ** 2 * t
        den += p.batch_size ** 2 * g
    return num / den if den > 0 and num > 0 else None


def build_curve(records: list[dict], config: dict) -> ScalingCurve:
    """The measured ScalingCurve: per batch size, steps to result = the fewest steps_to_goal of
    its trials (None if no trial reached the goal), with the best trial's metaparameters."""
    by_batch: dict[int, list[dict]] = {}
    for r in records:
        by_batch.setdefault(int(r["batch_size"]), []).append(r)
    points = []
    for batch_size, trials in sorted(by_batch.items()):
        trials = sorted(trials, key=lambda r: _id_order(r["trial_id"]))
        best = best_trial(trials)
        points.append(CurvePoint(
            batch_size=batch_size, steps=None if best is None else int(best["steps_to_goal"]),
            learning_rate=None if best is None else best["learning_rate"],
            momentum=None if best is None else best.get("momentum"),
            edge=() if best is None else _edges(best, config),
            trials=tuple(trial_summary(r) for r in trials)))
    return ScalingCurve(points=tuple(points), source="measured", config=dict(config))


def curve_document(curve: ScalingCurve) -> dict:
    """curve.json: the curve with its analysis (DESIGN.md section 6 shape)."""
    out = curve.to_dict()
    analysis = analyse_curve(curve)
    out.update(analysis.to_dict())
    out["efficiency"] = analysis.efficiency
    out["regime"] = list(analysis.regimes)
    per_point = [_best_b_simple(p) for p in curve.points]
    out["b_crit_resampled"] = b_crit_resampled(curve)
    out["noise_scale"] = {"b_simple": pooled_b_simple(curve.points),
                          "b_noise": None, "per_point_b_simple": per_point,
                          "note": "each point: its best trial's B_simple at its goal step "
                                  "(moving averages, McCandlish et al. app. A.1); b_simple: "
                                  "those averages pooled over batch sizes with weights B^2"}
    return out


RESAMPLES = 200


def b_crit_resampled(curve: ScalingCurve, resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """How much the measured B_crit depends on which trials the search happened to draw.

    Per resample, every batch size's K trials are drawn again with replacement, its steps to
    result are the fewest steps_to_goal among the drawn (not reached if none reached), and the
    McCandlish fit is redone. Only sweeps whose trials all ran to their own end can be resampled
    (`--full-trials`, or published batch_science data): by default a batch size's other trials
    stop once one reached the goal, so their steps are censored, and a resample without the
    winner would count as unreached.

    Returns:
      {"median", "p16", "p84": B_crit quantiles (None where fewer than half of the resamples
      could be fitted), "resamples", "fitted": resamples with a fit, "note"}; "available" False
      and a "note" saying why when the trials cannot be resampled.
    """
    uncensored = curve.source == "batch_science" or bool(curve.config.get("full_trials"))
    if not uncensored:
        return {"available": False,
                "note": "trials stopped when one reached the goal; needs --full-trials"}
    rng = np.random.default_rng(seed)
    sizes = np.asarray([p.batch_size for p in curve.points], float)
    steps = []
    for p in curve.points:
        s = [t.get("steps_to_goal") for t in p.trials]
        steps.append(np.asarray([np.inf if v is None else float(v) for v in s]))
    fits = []
    for _ in range(int(resamples)):
        drawn = [np.min(s[rng.integers(0, s.size, s.size)]) if s.size else np.inf for s in steps]
        drawn = np.where(np.isfinite(drawn), drawn, np.nan)
        b_crit = fit_mccandlish(sizes, drawn).b_crit
        if b_crit is not None:
            fits.append(b_crit)
    out = {"available": True, "resamples": int(resamples), "fitted": len(fits),
           "median": None, "p16": None, "p84": None,
           "note": "B_crit refitted with each batch size's trials drawn again with replacement: "
                   "the spread from which trials the search drew (not from the data order or "
                   "initialisation, and not the bias of too few trials)"}
    if len(fits) >= resamples / 2:
        out.update(median=float(np.median(fits)), p16=float(np.percentile(fits, 16)),
                   p84=float(np.percentile(fits, 84)))
    return out


def _best_b_simple(point: CurvePoint):
    """The noise scale of the trial that set the point (None if unreached or not estimated)."""
    best = best_trial(point.trials)
    return None if best is None else best.get("b_simple")


def load_sweep(out_dir: Path) -> tuple[dict, list[dict]]:
    """(config, trial records) of a sweep directory.

    Raises ValueError naming the file and what is wrong: a missing directory or config.json, a
    corrupt file, a config without batch sizes, workload or finite goal, a record without a
    whole batch size, trial id, known status, positive learning rate or whole steps to goal
    (`nqm.validation`'s checks, with the file and record number).
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise ValueError(f"sweep directory {out_dir} does not exist")
    if not (out_dir / "config.json").is_file():
        raise ValueError(f"sweep directory {out_dir} has no config.json: not a sweep directory "
                         "(expected config.json and trials.jsonl, as `python -m realnets sweep` "
                         "writes them)")
    config = store.read_json(out_dir / "config.json", "sweep config")
    records = store.read_jsonl(out_dir / "trials.jsonl")
    _check_config(config, out_dir / "config.json")
    _check_records(records, out_dir / "trials.jsonl")
    return config, records


def _located(where: str, check, *args):
    """`check(*args)` (an `nqm.validation` check) with `where` put before its message."""
    try:
        return check(*args)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _check_config(config: dict, where: Path) -> None:
    sizes = config.get("batch_sizes")
    if not isinstance(sizes, list):
        raise ValueError(f"{where}: batch_sizes must hold at least one batch size >= 1, "
                         f"got {sizes!r:.80}")
    _located(str(where), validation.check_batch_sizes, sizes)
    if not isinstance(config.get("workload"), str):
        raise ValueError(f"{where}: workload must be a name, got {config.get('workload')!r:.80}")
    _located(str(where), validation.check_finite, "goal", config.get("goal"))


def _check_records(records: list[dict], where: Path) -> None:
    for number, r in enumerate(records, start=1):
        at = f"{where} record {number}"
        _located(at, validation.check_positive_int, "batch_size", r.get("batch_size"))
        if "trial_id" not in r:
            raise ValueError(f"{at}: trial_id is missing")
        if r.get("status") not in STATUSES:
            raise ValueError(f"{at}: status must be one of {', '.join(STATUSES)}, got "
                             f"{r.get('status')!r:.80}")
        _located(at, validation.check_positive, "learning_rate", r.get("learning_rate"))
        if r.get("steps_to_goal") is not None:
            _located(at, validation.check_positive_int, "steps_to_goal", r["steps_to_goal"])


def run_sweep(config: SweepConfig, out_dir: Path, progress: bool = True,
              on_trials: Callable[[list[dict]], None] | None = None,
              on_eval: Callable[[int, int], None] | None = None, task=None) -> ScalingCurve:
    """Runs (or resumes) a sweep into `out_dir`; returns the measured curve.

    Args:
      config: the sweep.
      out_dir: sweep directory (created if needed).
      progress: show a tqdm bar per group of trials (batch size, trial ids, step).
      on_trials: called with the new records each time trials finish (e.g. the app's chart).
      on_eval: called with (batch size, step) after every evaluation (e.g. a progress bar).
      task: the workload's Task if the caller already built it (the app caches it); else built
        here from the workload.
    """
    out_dir = Path(out_dir)
    writer = jax.process_index() == 0
    new = config.to_dict()
    if (out_dir / "config.json").exists():
        old = store.read_json(out_dir / "config.json", "sweep config")
        _check_same_study(old, new, out_dir)
    if writer:
        out_dir.mkdir(parents=True, exist_ok=True)
        store.write_json_atomic(out_dir / "config.json", new)
        store.repair_jsonl(out_dir / "trials.jsonl")
    records = store.read_jsonl(out_dir / "trials.jsonl")
    _check_records(records, out_dir / "trials.jsonl")
    finished = {(int(r["batch_size"]), int(r["trial_id"])) for r in records}

    workload = workloads.get(config.workload)
    if task is None:
        task = workload.build(text_file=config.text_file)
    specs = trial_specs(config.search, config.optimizer, config.trials, config.seed)
    chunk = config.vmap_trials or config.trials
    for batch_size in config.batch_sizes:
        todo = [s for s in specs if (batch_size, s.trial_id) not in finished]
        for start in range(0, len(todo), chunk):
            group = todo[start:start + chunk]
            best = [r["steps_to_goal"] for r in records
                    if r["batch_size"] == batch_size and r.get("steps_to_goal") is not None]
            run = RunConfig(batch_size=int(batch_size), max_steps=config.max_steps, goal=config.goal,
                        optimizer=config.optimizer, seed=config.seed,
                        eval_resolution=config.eval_resolution,
                        max_rows_per_device=config.max_rows_per_device,
                        stop_at_first_goal=not config.full_trials,
                        noise_every=config.noise_every,
                        stop_after=min(best) if best and not config.full_trials else None)
            bar = _bar(progress and writer, batch_size, group, config.max_steps)
            def report_step(step: int, batch_size=batch_size, bar=bar) -> None:
                if bar:
                    bar.update_to(step)
                if on_eval is not None:
                    on_eval(batch_size, step)

            try:
                done = run_trials(task, run, group, on_eval=report_step)
            finally:
                if bar:
                    bar.close()
            if writer:
                store.append_jsonl(out_dir / "trials.jsonl", done)
            records.extend(done)
            if on_trials is not None:
                on_trials(done)
        if writer:
            store.write_json_atomic(out_dir / "curve.json",
                                    curve_document(build_curve(records, new)))
    curve = build_curve(records, new)
    if writer:
        store.write_json_atomic(out_dir / "curve.json", curve_document(curve))
    return curve


def _bar(enabled: bool, batch_size: int, group, total: int):
    if not enabled:
        return None
    from tqdm import tqdm

    ids = f"{group[0].trial_id}-{group[-1].trial_id}" if len(group) > 1 else str(group[0].trial_id)
    bar = tqdm(total=total, desc=f"B={batch_size} trials {ids}", unit="step", leave=False)

    def update_to(step: int) -> None:
        bar.update(step - bar.n)

    bar.update_to = update_to
    return bar

"""The files of a sweep directory as typed records, and reading a directory.

A sweep directory holds (docs/design.md, 'Formats'):
- `config.json`: a `SweepConfig`, what the sweep is (workload, goal, optimizer, search, budget,
  seed...);
- `trials.jsonl`: one `TrialRecord` a line, as `realnets.training.trainer.run_trials` returns
  them, appended as trials finish;
- `curve.json`: a `CurveDocument`, the measured curve with its analysis
  (`realnets.sweeps.curve.curve_document`).

Each record's defaults live on its fields, and only there: `from_dict` gives a field a file does
not hold (a file written before the field existed) its default, and raises ValueError naming the
field that is wrong; `to_dict` is the file's form. `load_sweep` puts the file and the record
number before the message.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nqm import validation
from nqm.curve import CurvePoint, ScalingCurve
from realnets import store, workloads
from realnets.training.step import OPTIMIZERS
from realnets.training.trainer import MAX_SEED, STATUSES  # noqa: F401 (MAX_SEED: re-exported)
from realnets.workloads.tasks import METRIC_RANGES, check_goal
from realnets.workloads.search_space import TrialSearchSpace

REPEATS_FILE = "repeats.jsonl"   # reruns of the best trials (realnets.sweeps.repeats)
PILOT_GOAL = math.nan   # --goal auto, before the pilot has chosen the goal
# Fields that define the study: a rerun with other values would mix incomparable trials.
IDENTITY = ("workload", "goal", "optimizer", "search", "max_steps", "seed", "eval_resolution",
            "text_file")


@dataclass(frozen=True)
class SweepConfig:
    """A sweep: for each batch size, `trials` quasi-random trials (see realnets.training.search).

    Attributes:
      workload: registry name (realnets.workloads).
      batch_sizes: the batch sizes, each >= 1, none twice.
      trials: trials per batch size (trial ids 0 .. trials - 1), in [1, 10000].
      max_steps: step budget of every trial, in [1, 1e9].
      goal: metric value to reach (metric <= goal).
      optimizer: sgd, momentum, nesterov or adam.
      search: the search space (its decay_steps range, if any, within max_steps).
      seed: data order, initialisation and the quasi-random sequence, in [0, 2^63 - 1].
      eval_resolution: see RunConfig, in [0, 1].
      vmap_trials: trials compiled into one program at a time (0: all of a batch size).
      max_rows_per_device: see RunConfig (gradient accumulation above it).
      text_file: text for the text workload (None: pydoc_data).
      full_trials: run every trial to its own end instead of stopping a batch size's trials once
        one reached the goal (see RunConfig.stop_at_first_goal; steps to result are the same).
      noise_every: see RunConfig (None: every step; 0: off on one device), in [0, 1e6].
      goal_choice: how a pilot chose the goal (`realnets.sweeps.pilot.GoalChoice.to_dict`), or
        None when the goal was given. `goal` may be PILOT_GOAL (NaN) only until the pilot ran:
        such a config is never written.
      metric: the workload's metric, recorded for an own workload (`realnets.workloads.own`)
        so that its sweep can be read, reported and checked without importing the user's file;
        None for a shipped workload (the catalogue knows it; the field is then not written).
    """

    workload: str
    batch_sizes: tuple[int, ...]
    trials: int
    max_steps: int
    goal: float
    optimizer: str
    search: TrialSearchSpace
    seed: int = 0
    eval_resolution: float = 0.02
    vmap_trials: int = 0
    max_rows_per_device: int = 4096
    text_file: str | None = None
    full_trials: bool = False
    noise_every: int | None = None
    goal_choice: dict | None = None
    metric: str | None = None

    def __post_init__(self):
        if self.metric is None:
            metric = workloads.get(self.workload).metric
        else:
            metric = validation.check_choice("metric", self.metric, tuple(METRIC_RANGES))
        if not self.batch_sizes:
            raise ValueError("batch-sizes must list at least one batch size >= 1")
        sizes = tuple(validation.check_whole("batch-sizes entry", b, 1) for b in self.batch_sizes)
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"batch-sizes must not repeat, got {list(sizes)}")
        set_ = functools.partial(object.__setattr__, self)   # normalised values on a frozen record
        set_("batch_sizes", sizes)
        set_("trials", validation.check_whole("trials", self.trials, 1, 10_000))
        set_("max_steps", validation.check_whole("max-steps", self.max_steps, 1, 10 ** 9))
        if self.search.decay_steps is not None and self.search.decay_steps[1] > self.max_steps:
            lo, hi = self.search.decay_steps
            raise ValueError(f"decay-steps-range must end at or below max-steps "
                             f"({self.max_steps}), got {lo:g},{hi:g}")
        if not (isinstance(self.goal, float) and math.isnan(self.goal)):    # PILOT_GOAL
            set_("goal", check_goal(validation.check_finite("goal", self.goal), metric))
        validation.check_choice("optimizer", self.optimizer, OPTIMIZERS)
        set_("seed", validation.check_whole("seed", self.seed, 0, MAX_SEED))
        set_("eval_resolution",
             validation.check_in_range("eval-resolution", self.eval_resolution, 0.0, 1.0))
        set_("vmap_trials", validation.check_whole("vmap-trials", self.vmap_trials, 0))
        set_("max_rows_per_device",
             validation.check_whole("max-rows-per-device", self.max_rows_per_device, 1))
        if self.noise_every is not None:
            set_("noise_every", validation.check_whole("noise-every", self.noise_every, 0,
                                                       10 ** 6))

    @classmethod
    def for_workload(cls, workload: str, trials: int, *, batch_sizes=None, max_steps=None,
                     goal=None, optimizer=None, learning_rate=None, one_minus_momentum=None,
                     final_lr_fraction=None, decay_steps=None, eval_resolution=None,
                     **settings) -> "SweepConfig":
        """A sweep of `workload` (a catalogue name or an own workload's key) with its defaults
        (`realnets.workloads.Workload`) filling every argument left None: its batch sizes,
        budget, goal, optimizer, search ranges ((lo, hi) pairs) and evaluation cadence. The one
        place those defaults fill a sweep (the CLI's flags and the app's form both come here);
        `settings` are the remaining fields (seed, vmap_trials, full_trials, text_file...)."""
        w = workloads.get(workload)
        space = w.search
        search = TrialSearchSpace(
            space.learning_rate if learning_rate is None else learning_rate,
            space.one_minus_momentum if one_minus_momentum is None else one_minus_momentum,
            space.final_lr_fraction if final_lr_fraction is None else final_lr_fraction,
            space.decay_steps if decay_steps is None else decay_steps)
        return cls(workload=w.key, metric=w.recorded_metric,
                   batch_sizes=tuple(w.batch_sizes if batch_sizes is None else batch_sizes),
                   trials=trials, max_steps=w.max_steps if max_steps is None else max_steps,
                   goal=w.goal if goal is None else goal, optimizer=optimizer or w.optimizer,
                   search=search, eval_resolution=(w.eval_resolution if eval_resolution is None
                                                   else eval_resolution), **settings)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["batch_sizes"] = list(self.batch_sizes)
        out["search"] = self.search.to_dict()
        for optional in ("goal_choice", "metric"):   # files without them stay as they were
            if out[optional] is None:
                del out[optional]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "SweepConfig":
        """A config.json; fields it lacks take their defaults (ValueError naming a bad one)."""
        if not isinstance(d, dict):
            raise ValueError(f"a sweep config must be a JSON object, got {d!r:.80}")
        sizes = d.get("batch_sizes")
        if not isinstance(sizes, list):
            raise ValueError(f"batch_sizes must hold at least one batch size >= 1, got "
                             f"{sizes!r:.80}")
        # batch sizes, workload and goal are checked here, before the missing-field check and
        # __post_init__ (which checks them again): a file wrong in several ways names these first
        validation.check_batch_sizes(sizes)
        if not isinstance(d.get("workload"), str):
            raise ValueError(f"workload must be a name, got {d.get('workload')!r:.80}")
        validation.check_finite("goal", d.get("goal"))
        for name in ("trials", "max_steps", "optimizer", "search"):
            if name not in d:
                raise ValueError(f"{name} is missing")
        known = {f.name for f in dataclasses.fields(cls)}
        given = {k: v for k, v in d.items() if k in known}
        return cls(**{**given, "batch_sizes": tuple(sizes),
                      "search": TrialSearchSpace.from_dict(d["search"])})


def _series(d: dict, name: str) -> tuple:
    value = d.get(name, [])
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list, got {value!r:.80}")
    return tuple(value)


@dataclass(frozen=True)
class EvalCurve:
    """A trial's evaluations: after each `step`, the validation metric and that step's training
    loss (None where not finite). All (evaluations,)."""

    step: tuple[int, ...] = ()
    metric: tuple[float | None, ...] = ()
    train_loss: tuple[float | None, ...] = ()

    def to_dict(self) -> dict:
        return {"step": list(self.step), "metric": list(self.metric),
                "train_loss": list(self.train_loss)}

    @classmethod
    def from_dict(cls, d: dict) -> "EvalCurve":
        if not isinstance(d, dict):
            raise ValueError(f"eval must be a JSON object of lists, got {d!r:.80}")
        return cls(*(_series(d, f.name) for f in dataclasses.fields(cls)))


@dataclass(frozen=True)
class NoiseSeries:
    """A trial's gradient-noise estimates at each evaluation (realnets.training.gradient_noise).

    Attributes:
      step: the evaluation steps, (evaluations,).
      grad_sq_ema, trace_cov_ema: moving averages of the |G|^2 and tr(Sigma) estimates there.
      b_simple: trace_cov_ema / grad_sq_ema (None until both are positive, or not measured).
      b_small, b_big: the two batch sizes the estimates compare (b_small None: not measured).
    """

    step: tuple[int, ...] = ()
    grad_sq_ema: tuple[float | None, ...] = ()
    trace_cov_ema: tuple[float | None, ...] = ()
    b_simple: tuple[float | None, ...] = ()
    b_small: int | None = None
    b_big: int | None = None

    def to_dict(self) -> dict:
        return {"step": list(self.step), "grad_sq_ema": list(self.grad_sq_ema),
                "trace_cov_ema": list(self.trace_cov_ema), "b_simple": list(self.b_simple),
                "b_small": self.b_small, "b_big": self.b_big}

    @classmethod
    def from_dict(cls, d: dict) -> "NoiseSeries":
        if not isinstance(d, dict):
            raise ValueError(f"noise_scale must be a JSON object of lists, got {d!r:.80}")
        return cls(*(_series(d, name) for name in ("step", "grad_sq_ema", "trace_cov_ema",
                                                   "b_simple")),
                   b_small=d.get("b_small"), b_big=d.get("b_big"))


@dataclass(frozen=True)
class TrialRecord:
    """One trial of a sweep: one line of trials.jsonl (fields in the trainer's order).

    Attributes:
      batch_size: examples per step.
      trial_id: index in the quasi-random sequence (a name in imported data).
      status: COMPLETE (reached the goal), INCOMPLETE (did not) or INFEASIBLE (diverged).
      learning_rate, momentum, final_lr_fraction: its metaparameters (momentum None: plain SGD).
      decay_steps: steps of its linear decay when the sweep searched them, else None (the decay
        spanned the sweep's max_steps); written only when set.
      optimizer: the sweep's optimizer.
      steps_to_goal: the first evaluation step whose metric was <= goal, or None.
      steps_run: steps trained.
      goal, metric: the goal and the metric's name ('error', 'loss').
      reason: why an INFEASIBLE or INCOMPLETE trial stopped, else None.
      eval: its evaluation curve.
      noise_scale: its gradient-noise estimates.
      seed: the sweep's seed (None: not recorded).
      devices, processes, microbatches: how the step was laid out.
      noise_every: noise measured every this many steps (0: never); records written before the
        field existed measured every step.
    """

    batch_size: int
    trial_id: int | str
    status: str
    learning_rate: float
    momentum: float | None = None
    final_lr_fraction: float = 1.0
    decay_steps: int | None = None
    optimizer: str | None = None
    steps_to_goal: int | None = None
    steps_run: int = 0
    goal: float | None = None
    metric: str | None = None
    reason: str | None = None
    eval: EvalCurve = field(default_factory=EvalCurve)
    noise_scale: NoiseSeries = field(default_factory=NoiseSeries)
    seed: int | None = None
    devices: int = 1
    processes: int = 1
    microbatches: int = 1
    noise_every: int = 1

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)   # normalised values on a frozen record
        set_("batch_size", validation.check_whole("batch_size", self.batch_size, 1))
        if self.trial_id is None:
            raise ValueError("trial_id is missing")
        if isinstance(self.trial_id, bool) or not isinstance(self.trial_id, (int, str)):
            raise ValueError(f"trial_id must be a whole number or a name, got "
                             f"{self.trial_id!r:.80}")
        validation.check_choice("status", self.status, STATUSES)
        set_("learning_rate", validation.check_positive("learning_rate", self.learning_rate))
        if self.steps_to_goal is not None:
            set_("steps_to_goal", validation.check_whole("steps_to_goal", self.steps_to_goal, 1))
        if self.momentum is not None:
            validation.check_in_range("momentum", self.momentum, 0.0, 1.0, closed_high=False)
        validation.check_in_range("final_lr_fraction", self.final_lr_fraction, 0.0, 1.0)
        if self.decay_steps is not None:
            set_("decay_steps", validation.check_whole("decay_steps", self.decay_steps, 1))
        set_("steps_run", validation.check_whole("steps_run", self.steps_run, 0))
        for name in ("devices", "processes", "microbatches"):
            set_(name, validation.check_whole(name, getattr(self, name), 1))
        set_("noise_every", validation.check_whole("noise_every", self.noise_every, 0))

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.decay_steps is None:     # trials.jsonl lines without it stay as they were
            del out["decay_steps"]
        out["eval"] = self.eval.to_dict()
        out["noise_scale"] = self.noise_scale.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "TrialRecord":
        """A trials.jsonl line (or a trainer record); fields it lacks take their defaults."""
        if not isinstance(d, dict):
            raise ValueError(f"a trial record must be a JSON object, got {d!r:.80}")
        required = {name: d.get(name) for name in ("batch_size", "trial_id", "status",
                                                    "learning_rate")}
        optional = {f.name: d[f.name] for f in dataclasses.fields(cls)
                    if f.name in d and f.name not in required}
        if "eval" in d:
            optional["eval"] = EvalCurve.from_dict(d["eval"])
        if "noise_scale" in d:
            optional["noise_scale"] = NoiseSeries.from_dict(d["noise_scale"])
        return cls(**required, **optional)


@dataclass(frozen=True)
class CurveDocument:
    """curve.json: a ScalingCurve and its analysis (`realnets.sweeps.curve.curve_document`).

    Attributes:
      source: 'measured' (a sweep) or 'batch_science' (imported).
      config: the curve's provenance: a sweep's config.json, or a batch_science workload's
        dataset, model, optimizer, metric, goal and directories.
      points: one per batch size, each with the trials behind it.
      fit: {s_min, b_crit, r2} of S(B) = S_min (1 + B_crit / B) (`nqm.scaling.fit_mccandlish`).
      regimes: {cbs20, maximal_from, perfect_threshold, maximal_threshold}.
      efficiency: per point, S(B0) B0 / (S(B) B) (None where not reached).
      regime: per point, 'perfect', 'diminishing', 'maximal' or 'not reached'.
      noise_scale: {b_simple (pooled), b_noise, per_point_b_simple, note}.
      b_crit_resampled: B_crit over resampled trials (`realnets.sweeps.curve.b_crit_resampled`);
        None in files written before it existed.
      b_crit_repeats: B_crit over reruns of the best trials with other seeds
        (`realnets.sweeps.curve.b_crit_over_repeats`) when any point has reruns, else None. On
        a sweep whose trials stopped early it is also b_crit_resampled; on one whose trials ran
        to their end it stands beside it (the seeds' spread beside the search's).
      robustness: leave-one-out B_crit, the fit's RMS log residual, B_crit against the number
        of trials, best trials on the search space's edge (`realnets.sweeps.robustness`); None
        in files written before it existed.
    """

    source: str
    config: dict
    points: tuple[CurvePoint, ...]
    fit: dict
    regimes: dict
    efficiency: tuple[float | None, ...]
    regime: tuple[str, ...]
    noise_scale: dict
    b_crit_resampled: dict | None = None
    robustness: dict | None = None
    b_crit_repeats: dict | None = None

    def to_dict(self) -> dict:
        out = {"source": self.source, "config": self.config,
               "points": [p.to_dict() for p in self.points], "fit": self.fit,
               "regimes": self.regimes, "efficiency": list(self.efficiency),
               "regime": list(self.regime)}
        if self.b_crit_resampled is not None:
            out["b_crit_resampled"] = self.b_crit_resampled
        if self.b_crit_repeats is not None:
            out["b_crit_repeats"] = self.b_crit_repeats
        if self.robustness is not None:
            out["robustness"] = self.robustness
        out["noise_scale"] = self.noise_scale
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "CurveDocument":
        """A curve.json (ValueError naming a missing or malformed part)."""
        curve = ScalingCurve.from_dict(d)
        for name in ("fit", "regimes", "efficiency", "regime", "noise_scale"):
            if name not in d:
                raise ValueError(f"{name} is missing")
        n = len(curve.points)
        for name in ("efficiency", "regime"):
            if not isinstance(d[name], list) or len(d[name]) != n:
                raise ValueError(f"{name} must be a list of one value per point ({n}), got "
                                 f"{d[name]!r:.80}")
        return cls(source=curve.source, config=curve.config, points=curve.points, fit=d["fit"],
                   regimes=d["regimes"], efficiency=tuple(d["efficiency"]),
                   regime=tuple(d["regime"]), noise_scale=d["noise_scale"],
                   b_crit_resampled=d.get("b_crit_resampled"),
                   b_crit_repeats=d.get("b_crit_repeats"),
                   robustness=d.get("robustness"))


def trial_order(trial_id) -> tuple:
    """Sort key of a trial id: numeric ids (int or digit string) by value first, then the rest
    by name (the order of `realnets.sweeps.batch_science` trial directories)."""
    if isinstance(trial_id, int) or (isinstance(trial_id, str) and trial_id.isdigit()):
        return (0, int(trial_id), "")
    return (1, 0, str(trial_id))


def first_records(records, k: int) -> list:
    """Each batch size's first `k` trial records in trial-id order (the first k points of the
    quasi-random sequence), batch sizes in the order they first appear: the sweep as it stood at
    k trials per batch size."""
    by_batch: dict[int, list] = {}
    for r in records:
        by_batch.setdefault(r.batch_size, []).append(r)
    return [r for rows in by_batch.values()
            for r in sorted(rows, key=lambda r: trial_order(r.trial_id))[:k]]


def located(where, read, *args):
    """`read(*args)` with `where` (a file, a record number) put before any ValueError's message."""
    try:
        return read(*args)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def read_trials(path: Path) -> list[TrialRecord]:
    """The records of a trials.jsonl ([] if absent; see `store.read_jsonl` for a cut last line)."""
    path = Path(path)
    return [located(f"{path} record {number}", TrialRecord.from_dict, r)
            for number, r in enumerate(store.read_jsonl(path), start=1)]


def read_config(path: Path) -> SweepConfig:
    """The SweepConfig of a config.json."""
    return located(path, SweepConfig.from_dict, store.read_json(path, "sweep config"))


def read_repeats(out_dir: Path) -> list[TrialRecord]:
    """The reruns of a sweep's best trials with other seeds (`realnets.sweeps.repeats`) recorded
    in its directory; [] when it has none."""
    return read_trials(Path(out_dir) / REPEATS_FILE)


def load_sweep(out_dir: Path) -> tuple[SweepConfig, list[TrialRecord]]:
    """(config, trial records) of a sweep directory.

    Raises ValueError naming the file and what is wrong: a missing directory or config.json, a
    corrupt file, a record with a bad field (its number in trials.jsonl), a config without
    batch sizes, workload or finite goal, or with a field out of its range.
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise ValueError(f"sweep directory {out_dir} does not exist")
    if not (out_dir / "config.json").is_file():
        raise ValueError(f"sweep directory {out_dir} has no config.json: not a sweep directory "
                         "(expected config.json and trials.jsonl, as `python -m realnets sweep` "
                         "writes them)")
    raw = store.read_json(out_dir / "config.json", "sweep config")
    records = read_trials(out_dir / "trials.jsonl")   # a bad record is reported before the config
    return located(out_dir / "config.json", SweepConfig.from_dict, raw), records

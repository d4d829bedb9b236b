"""The local critical batch size by branching: from checkpoints of one run at batch size B,
short runs at k B (learning rate scaled by the optimizer's rule) over the same examples, and
the largest k whose loss keeps up with k = 1's.

At each branch point s (a step of the reference run) the reference state (parameters and
optimizer state) is the start of one branch per multiplier k: `window_examples` W examples at
batch size k B, i.e. W / (k B) steps at learning rate a k (linear rule: SGD, momentum, Nesterov)
or a sqrt(k) (square-root rule: Adam). Every branch of one repeat sees the same W examples in
the same order (k consecutive batches of the k = 1 branch make one batch of branch k), so the
comparison is paired and the data order's noise largely cancels. The loss after the window is the
training objective on a fixed evaluation set (the exact loss for the NQM); branch k keeps up when
its mean over repeats is at most (1 + tolerance) times the k = 1 branch's. The local critical
batch size at s is k B for the largest k such that it and every smaller multiplier keep up; a
branch that diverges does not keep up (a result, not an error).

References:
  Merrill, Arora, Groeneveld, Hajishirzi 2025, "Critical Batch Size Revisited: A Simple
  Empirical Approach to Large-Batch Language Model Training" (arXiv 2505.23971): branched
  training from checkpoints to measure the critical batch size along a run; docs/branching.md
  says what is followed and where this module departs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass
from typing import Callable

import jax
import numpy as np

from nqm import validation
from realnets.training.step import OPTIMIZERS, TrainState
from realnets.training.trainer import MAX_SEED, RunConfig, TrialSpec, run_trials
from realnets.workloads.tasks import Task

LR_RULES = ("linear", "sqrt")
DEFAULT_LR_RULE = {"sgd": "linear", "momentum": "linear", "nesterov": "linear", "adam": "sqrt"}
MOMENTUM_OPTIMIZERS = ("momentum", "nesterov", "adam")
# A goal no metric reaches (error, cross-entropy and the quadratic loss are >= 0): every run
# goes its full length.
_NO_GOAL = -1.0
EVAL_CHUNK_ROWS = 1024


def scaled_learning_rate(learning_rate: float, multiplier: int, rule: str) -> float:
    """The branch's learning rate: a k (linear, Goyal et al. 2017) or a sqrt(k) (square root,
    Malladi et al. 2022, for Adam)."""
    validation.check_choice("lr-rule", rule, LR_RULES)
    return learning_rate * (multiplier if rule == "linear" else math.sqrt(multiplier))


def keeps_up(loss_k: float | None, loss_1: float | None, tolerance: float) -> bool:
    """Branch k keeps up when its loss is finite and <= (1 + tolerance) x the k = 1 loss."""
    if loss_k is None or loss_1 is None or not (math.isfinite(loss_k) and math.isfinite(loss_1)):
        return False
    return loss_k <= (1.0 + tolerance) * loss_1


@dataclass(frozen=True)
class BranchSettings:
    """What a branching measurement is.

    Attributes:
      batch_size: B, the reference run's batch size (>= 1).
      learning_rate: a, the reference run's constant learning rate (> 0).
      branch_steps: steps of the reference run to branch at (sorted, unique, >= 1).
      window_examples: W, examples every branch trains on after its branch point; a multiple of
        lcm(multipliers) x B so that every branch takes a whole number of steps.
      multipliers: k, batch-size multipliers (sorted, unique, >= 1; 1 is always included: it
        is the baseline).
      optimizer: sgd, momentum, nesterov or adam.
      momentum: heavy-ball / Nesterov momentum or Adam's beta1 in [0, 1); required for those
        optimizers, refused for sgd. The branches keep it.
      lr_rule: linear or sqrt; default by optimizer (DEFAULT_LR_RULE).
      tolerance: relative loss excess a branch may have and still keep up, in [0, 10].
      repeats: windows per branch, each with its own data order (the loss is their mean), in
        [1, 1000].
      seed: data order and initialisation of the reference run (as the trainer's), 0 to
        MAX_SEED; the repeats' data orders derive from it.
      trial_id: the reference run's trial id (its initialisation), >= 0.
      eval_rows: training rows the loss is measured on (all of them if the set is smaller;
        ignored by tasks with an exact loss).
      max_rows_per_device: see RunConfig (gradient accumulation above it).
      workload: a label for the record (the registry name), or None.
    """

    batch_size: int
    learning_rate: float
    branch_steps: tuple[int, ...]
    window_examples: int
    multipliers: tuple[int, ...] = (1, 2, 4, 8)
    optimizer: str = "sgd"
    momentum: float | None = None
    lr_rule: str | None = None
    tolerance: float = 0.05
    repeats: int = 3
    seed: int = 0
    trial_id: int = 0
    eval_rows: int = 4096
    max_rows_per_device: int = 4096
    workload: str | None = None

    def __post_init__(self):
        set_ = functools.partial(object.__setattr__, self)   # normalised values on a frozen record
        set_("batch_size", validation.check_whole("batch-size", self.batch_size, 1))
        set_("learning_rate", validation.check_positive("learning-rate", self.learning_rate))
        validation.check_choice("optimizer", self.optimizer, OPTIMIZERS)
        if self.optimizer in MOMENTUM_OPTIMIZERS:
            if self.momentum is None:
                raise ValueError(f"momentum is required for optimizer {self.optimizer} (Adam: "
                                 "beta1), in [0, 1)")
            set_("momentum", validation.check_in_range("momentum", self.momentum, 0.0, 1.0,
                                                       closed_high=False))
        elif self.momentum is not None:
            raise ValueError(f"momentum applies only to optimizers {', '.join(MOMENTUM_OPTIMIZERS)}"
                             f", not {self.optimizer}")
        set_("branch_steps", _whole_set("branch-steps", self.branch_steps, 1))
        multipliers = _whole_set("multipliers", self.multipliers, 1, 1 << 20)
        set_("multipliers", tuple(sorted(set(multipliers) | {1})))
        step = math.lcm(*self.multipliers) * self.batch_size
        window = validation.check_whole("window-examples", self.window_examples, 1)
        if window % step:
            raise ValueError(f"window-examples must be a positive multiple of lcm(multipliers) x "
                             f"batch-size = {step}, got {window}")
        set_("window_examples", window)
        rule = self.lr_rule if self.lr_rule is not None else DEFAULT_LR_RULE[self.optimizer]
        set_("lr_rule", validation.check_choice("lr-rule", rule, LR_RULES))
        set_("tolerance", validation.check_in_range("tolerance", self.tolerance, 0.0, 10.0))
        set_("repeats", validation.check_whole("repeats", self.repeats, 1, 1000))
        set_("seed", validation.check_whole("seed", self.seed, 0, MAX_SEED))
        set_("trial_id", validation.check_whole("trial-id", self.trial_id, 0))
        set_("eval_rows", validation.check_whole("eval-rows", self.eval_rows, 1))
        set_("max_rows_per_device",
             validation.check_whole("max-rows-per-device", self.max_rows_per_device, 1))

    def branch_learning_rate(self, multiplier: int) -> float:
        return scaled_learning_rate(self.learning_rate, multiplier, self.lr_rule)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["branch_steps"], out["multipliers"] = list(self.branch_steps), list(self.multipliers)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "BranchSettings":
        """The `settings` of a branching file (ValueError naming a bad or missing field)."""
        if not isinstance(d, dict):
            raise ValueError(f"branching settings must be a JSON object, got {d!r:.80}")
        known = {f.name for f in dataclasses.fields(cls)}
        for f in dataclasses.fields(cls):
            if f.default is dataclasses.MISSING and f.name not in d:
                raise ValueError(f"settings.{f.name} is missing")
        given = {k: v for k, v in d.items() if k in known}
        for name in ("branch_steps", "multipliers"):
            if name in given:
                if not isinstance(given[name], list):
                    raise ValueError(f"settings.{name} must be a list, got {given[name]!r:.80}")
                given[name] = tuple(given[name])
        return cls(**given)


def _whole_set(name: str, values, low: int, high: int | None = None) -> tuple[int, ...]:
    """Sorted whole numbers in [low, high], at least one, none twice."""
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must list at least one whole number >= {low}")
    out = tuple(validation.check_whole(f"{name} entry", v, low, high) for v in values)
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat, got {list(out)}")
    return tuple(sorted(out))


@dataclass(frozen=True)
class Branch:
    """One multiplier at one branch point.

    Attributes:
      multiplier: k.
      batch_size: k B.
      learning_rate: the scaled rate.
      steps: W / (k B).
      losses: the loss after the window, one per repeat (None where a repeat diverged).
      loss: their mean (None if any diverged).
      loss_se: its standard error over repeats (None with one repeat or a divergence).
      diverged: some repeat diverged (the trainer marked it INFEASIBLE or its loss is not
        finite).
      keeps_up: `keeps_up(loss, loss of k = 1, tolerance)`.
    """

    multiplier: int
    batch_size: int
    learning_rate: float
    steps: int
    losses: tuple[float | None, ...]
    loss: float | None
    loss_se: float | None
    diverged: bool
    keeps_up: bool

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["losses"] = list(self.losses)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "Branch":
        return cls(**{**_fields_of(cls, d, "branch"), "losses": tuple(d["losses"])})


@dataclass(frozen=True)
class BranchPoint:
    """The branches from one step of the reference run.

    Attributes:
      step: s, the reference run's step (examples seen: s B).
      loss_at_branch: the loss of the reference state there.
      branches: one per multiplier, ascending.
      cbs: the local critical batch size k B: the largest k such that it and every smaller
        multiplier keep up; None when the k = 1 branch itself diverged.
      cbs_is_lower_bound: the largest multiplier kept up: the CBS may be larger.
    """

    step: int
    loss_at_branch: float | None
    branches: tuple[Branch, ...]
    cbs: int | None
    cbs_is_lower_bound: bool

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["branches"] = [b.to_dict() for b in self.branches]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "BranchPoint":
        given = _fields_of(cls, d, "point")
        return cls(**{**given, "branches": tuple(Branch.from_dict(b) for b in d["branches"])})


def _fields_of(cls, d, what: str) -> dict:
    if not isinstance(d, dict):
        raise ValueError(f"a {what} must be a JSON object, got {d!r:.80}")
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [n for n in names if n not in d]
    if missing:
        raise ValueError(f"{what} field {missing[0]} is missing")
    return {n: d[n] for n in names}


@dataclass(frozen=True)
class BranchResult:
    """A branching measurement: its settings and one BranchPoint per branch step.

    `to_dict` adds `local_cbs`, [{"step", "cbs"}] (the shape reports/validation/summary.json
    takes), a function of the points.
    """

    settings: BranchSettings
    points: tuple[BranchPoint, ...]
    loss_kind: str
    wall_seconds: float | None = None

    def local_cbs(self) -> list[dict]:
        return [{"step": p.step, "cbs": p.cbs} for p in self.points]

    def to_dict(self) -> dict:
        return {"settings": self.settings.to_dict(), "loss_kind": self.loss_kind,
                "local_cbs": self.local_cbs(), "points": [p.to_dict() for p in self.points],
                "wall_seconds": self.wall_seconds}

    @classmethod
    def from_dict(cls, d: dict) -> "BranchResult":
        """A branching file (ValueError naming what is wrong); `local_cbs` is recomputed."""
        if not isinstance(d, dict):
            raise ValueError(f"a branching file must be a JSON object, got {d!r:.80}")
        for name in ("settings", "points", "loss_kind"):
            if name not in d:
                raise ValueError(f"{name} is missing")
        if not isinstance(d["points"], list):
            raise ValueError(f"points must be a list, got {d['points']!r:.80}")
        return cls(settings=BranchSettings.from_dict(d["settings"]),
                   points=tuple(BranchPoint.from_dict(p) for p in d["points"]),
                   loss_kind=str(d["loss_kind"]), wall_seconds=d.get("wall_seconds"))


def loss_kind(task: Task) -> str:
    return "exact training loss" if task.exact_eval is not None else "training loss"


def loss_program(task: Task, settings: BranchSettings) -> Callable:
    """params with a leading trial axis T -> float64 (T,) losses: the task's exact loss, or the
    mean training loss over a fixed sample of `eval_rows` training rows (drawn once from the
    seed, the same for every branch, so the comparison is paired)."""
    if task.exact_eval is not None:
        exact = jax.jit(jax.vmap(task.exact_eval))

        def exact_loss(params_T):
            sums = exact(params_T)
            return np.asarray(sums["loss_sum"], np.float64) / np.asarray(sums["count"], np.float64)

        return exact_loss
    rng = np.random.default_rng((settings.seed, 2))
    if task.train is None:
        sample = task.draw_batch(rng, settings.eval_rows)
    else:
        n = task.train_size
        idx = np.sort(rng.choice(n, size=min(settings.eval_rows, n), replace=False))
        sample = {k: np.asarray(v)[idx] for k, v in task.train.items()}
    rows = int(next(iter(sample.values())).shape[0])
    chunks = [({k: v[i:i + EVAL_CHUNK_ROWS] for k, v in sample.items()},
               min(EVAL_CHUNK_ROWS, rows - i)) for i in range(0, rows, EVAL_CHUNK_ROWS)]
    per_trial = jax.jit(jax.vmap(task.loss_fn, in_axes=(0, None)))

    def sample_loss(params_T):
        total = sum(np.asarray(per_trial(params_T, c), np.float64) * n for c, n in chunks)
        return total / rows

    return sample_loss


def _host(tree):
    return jax.tree.map(np.asarray, tree)


def _finite_or_none(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def repeat_seed(seed: int, repeat: int) -> int:
    """The data order of a repeat's windows: derived from (seed, repeat), apart from the
    reference run's own order."""
    return int(np.random.SeedSequence((seed, 1, repeat)).generate_state(1)[0])


def reference_states(task: Task, settings: BranchSettings, devices=None) -> list[TrainState]:
    """The reference run's state at each branch step (host numpy, leading trial axis 1).

    Each is a run from scratch to that step with the same seed and trial id, so all are states
    of one and the same run (the trainer is deterministic; a constant learning rate makes the
    step budget irrelevant to the path). Costs sum(branch_steps) steps, under twice the
    last when the steps grow geometrically. ValueError if the reference run diverges.
    """
    spec = TrialSpec(settings.trial_id, settings.learning_rate, settings.momentum)
    out = []
    for step in settings.branch_steps:
        config = RunConfig(batch_size=settings.batch_size, max_steps=step, goal=_NO_GOAL,
                           optimizer=settings.optimizer, seed=settings.seed, eval_resolution=1.0,
                           max_rows_per_device=settings.max_rows_per_device, noise_every=0)
        states: list = []
        (record,) = run_trials(task, config, [spec], devices=devices, final_states=states)
        if record["status"] == "INFEASIBLE":
            raise ValueError(f"learning-rate {settings.learning_rate:g}: the reference run "
                             f"diverged before step {step} ({record['reason']}); lower it")
        out.append(_host(states[0]))
    return out


def run_branching(task: Task, settings: BranchSettings, devices=None,
                  log: Callable[[str], None] | None = None) -> BranchResult:
    """Measures the local critical batch size at each of `settings.branch_steps`.

    Args:
      task: the workload's data and functions.
      settings: the reference run, branch points, multipliers, window, rule and tolerance.
      devices: devices to shard over (default: every device JAX sees).
      log: called with a line of progress now and then.

    Returns:
      A BranchResult: per branch point the loss after the window per multiplier and repeat,
      which multipliers keep up, and the local CBS.
    """
    start_time = time.perf_counter()
    say = log or (lambda _: None)
    biggest = settings.multipliers[-1] * settings.batch_size
    if task.train is not None and biggest > task.train_size:
        raise ValueError(f"multipliers: k x batch-size must not exceed the {task.train_size} "
                         f"training examples, got {settings.multipliers[-1]} x "
                         f"{settings.batch_size} = {biggest}")
    evaluate = loss_program(task, settings)
    say(f"reference run at B = {settings.batch_size} to steps "
        f"{', '.join(map(str, settings.branch_steps))}")
    refs = reference_states(task, settings, devices)
    start = jax.tree.map(lambda *xs: np.concatenate(xs), *refs)   # trial axis: branch points
    at_branch = evaluate(start.params)
    n_points = len(settings.branch_steps)
    # losses[k][r, p]: multiplier k, repeat r, branch point p
    losses, diverged = {}, {}
    for k in settings.multipliers:
        lr = settings.branch_learning_rate(k)
        steps = settings.window_examples // (k * settings.batch_size)
        specs = [TrialSpec(p, lr, settings.momentum) for p in range(n_points)]
        losses[k] = np.full((settings.repeats, n_points), np.nan)
        diverged[k] = np.zeros(n_points, bool)
        for r in range(settings.repeats):
            say(f"k = {k}: {steps} steps at B = {k * settings.batch_size}, learning rate "
                f"{lr:.4g}, repeat {r + 1}/{settings.repeats}")
            config = RunConfig(batch_size=k * settings.batch_size, max_steps=steps,
                               goal=_NO_GOAL, optimizer=settings.optimizer,
                               seed=repeat_seed(settings.seed, r), eval_resolution=1.0,
                               max_rows_per_device=settings.max_rows_per_device,
                               stop_at_first_goal=False, noise_every=0)
            finals: list = []
            records = run_trials(task, config, specs, devices=devices, start=start,
                                 final_states=finals)
            with np.errstate(invalid="ignore", over="ignore"):
                losses[k][r] = evaluate(finals[0].params)
            diverged[k] |= np.array([rec["status"] == "INFEASIBLE" for rec in records])
            diverged[k] |= ~np.isfinite(losses[k][r])
    points = []
    for p, step in enumerate(settings.branch_steps):
        branches = []
        base = None
        for k in settings.multipliers:
            values = losses[k][:, p]
            bad = bool(diverged[k][p])
            mean = None if bad else float(np.mean(values))
            se = (float(np.std(values, ddof=1) / math.sqrt(values.size))
                  if not bad and values.size > 1 else None)
            if k == 1:
                base = mean
            branches.append(Branch(
                multiplier=k, batch_size=k * settings.batch_size,
                learning_rate=settings.branch_learning_rate(k),
                steps=settings.window_examples // (k * settings.batch_size),
                losses=tuple(_finite_or_none(v) for v in values), loss=mean, loss_se=se,
                diverged=bad, keeps_up=keeps_up(mean, base, settings.tolerance)))
        cbs, lower = local_cbs(branches, settings.batch_size)
        points.append(BranchPoint(step=step, loss_at_branch=_finite_or_none(at_branch[p]),
                                  branches=tuple(branches), cbs=cbs, cbs_is_lower_bound=lower))
    return BranchResult(settings=settings, points=tuple(points), loss_kind=loss_kind(task),
                        wall_seconds=time.perf_counter() - start_time)


def local_cbs(branches, batch_size: int) -> tuple[int | None, bool]:
    """(k B for the largest k whose branch and every smaller one keep up, whether that is the
    largest multiplier tried); (None, False) when k = 1 does not keep up (it diverged)."""
    kept = None
    for b in sorted(branches, key=lambda b: b.multiplier):
        if not b.keeps_up:
            break
        kept = b.multiplier
    if kept is None:
        return None, False
    return kept * batch_size, kept == max(b.multiplier for b in branches)


def render(result: BranchResult) -> str:
    """A text table: per branch point the loss at the branch, the k = 1 loss after the window,
    each branch's loss as a ratio to it ('div': diverged) and the local CBS ('>=': the largest
    multiplier kept up)."""
    s = result.settings
    momentum = "" if s.momentum is None else f", momentum {s.momentum:g}"
    lines = [f"local critical batch size by branching{f' on {s.workload}' if s.workload else ''}: "
             f"B = {s.batch_size}, {s.optimizer} at learning rate {s.learning_rate:g}{momentum} "
             f"({s.lr_rule} rule), window {s.window_examples} examples, tolerance "
             f"{s.tolerance:g}, {s.repeats} repeat(s); {result.loss_kind} after the window as a "
             "ratio to k = 1's"]
    head = f"{'step':>7} {'examples':>9} {'loss@branch':>11} {'loss k=1':>9}"
    head += "".join(f" {f'k={k}':>7}" for k in s.multipliers[1:]) + f" {'local CBS':>10}"
    lines.append(head)
    for p in result.points:
        base = p.branches[0].loss
        row = (f"{p.step:>7} {p.step * s.batch_size:>9} {_number(p.loss_at_branch):>11} "
               f"{_number(base):>9}")
        for b in p.branches[1:]:
            cell = "div" if b.diverged else ("-" if base is None else f"{b.loss / base:.4f}")
            row += f" {cell:>7}"
        cbs = "-" if p.cbs is None else f"{'>=' if p.cbs_is_lower_bound else ''}{p.cbs}"
        lines.append(row + f" {cbs:>10}")
    return "\n".join(lines)


def _number(x) -> str:
    return "-" if x is None else f"{x:.4g}"

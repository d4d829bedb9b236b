"""Is the loss quadratic along the way? Where the NQM is faster than the network, this tells
apart the three things it assumes between the initialisation and the goal.

The calibrated NQM is a quadratic fitted at the reference run's goal checkpoint theta_g. At each
batch size where its tuned curve needs DEPARTS_FACTOR or more fewer steps than measured, or where
the sweep never reached the goal (the batch sizes the transfer's reading asks about), two
deterministic runs start from the reference trial's initialisation theta_0 with the headline NQM's optimizer and metaparameters there (a constant
rate), on the calibration sample (the rows the NQM was measured on), full batch:

- **the network**: the mean loss of the sample, L(theta);
- **its own quadratic**: the second-order Taylor expansion of that loss at theta_g,
  q(theta) = L(theta_g) + G^T d + 1/2 d^T H d with d = theta - theta_g, G and H the sample's
  gradient and Hessian at theta_g (every direction, not only the NQM's top-k and tail).

Each runs until its loss is at or below L(theta_g), the loss the reference run had at its goal,
within the transfer's step limit. The steps factor the transfer's miss at B, S_transfer / S_nqm,
into three measured ratios:

- **fit** = S_quadratic / S_nqm: the fitted NQM (top-k spectrum, power-law tail, start from the
  gradient at init) against the quadratic it was fitted to (loosely: the NQM has noise at B, its
  own start E theta_i^2 = g_i^2 / h_i^2 and a step-matched target, and no linear term; the
  quadratic runs without noise from theta_0 to L(theta_g));
- **path** = S_network / S_quadratic: the network against its own quadratic, same start, same
  steps, same target, no noise: 1 when the loss is quadratic between theta_0 and theta_g;
- **noise** = S_transfer / S_network: the network with the gradient noise of batch size B (the
  transfer's run, to the sweep's goal) against the same network without it.

The reading (`path_reading`) names the batch sizes where the network needs PATH_FACTOR or more
times the steps of its own quadratic, or never reaches the target while the quadratic does: there
the quadratic fitted at the goal does not hold between the initialisation and the goal (measured).
docs/validation.md, 'Is the loss quadratic along the way?', fixes the rule.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from realnets.calibration import hessian_products, sharded_sample
from realnets.sweeps.records import SweepConfig
from realnets.training.step import Metaparameters, StepConfig, make_optimizer
from realnets.validation import descent_checkpoint
from realnets.validation.transfer import (BUDGET_FACTOR, DEPARTS_FACTOR, edge_ratio,
                                          headline_points, sharpness_probe)
from realnets.workloads.tasks import Task

# the loss is not quadratic along the way at B when the network needs at least this many times
# the steps of its own quadratic (or does not reach the target where the quadratic does)
PATH_FACTOR = 2.0
# a run has diverged when its loss is not finite or exceeds this many times its starting loss
DIVERGED_FACTOR = 1e6
# losses kept per run in the record (the first ones; a run ends at its target or its limit)
KEPT_LOSSES = 400
# a loss that goes up by more than this fraction of itself in one step has risen
RISE_TOLERANCE = 1e-6


@dataclass(frozen=True)
class PathRun:
    """One batch size's pair of runs.

    Attributes:
      batch_size: the batch size whose NQM metaparameters are used (the runs are full batch).
      learning_rate, momentum: the tuned NQM's choice there (momentum None for SGD; b1 for Adam).
      nqm_steps: the NQM's expected steps to its target with them.
      measured_steps: the sweep's steps to result (None: it never reached the goal).
      transfer_steps: the network's steps to the goal with them and batch size B (the transfer's
        run), None when it did not reach it or was not run.
      step_limit: BUDGET_FACTOR x max(nqm_steps, measured_steps), within the sweep's budget.
    """

    batch_size: int
    learning_rate: float
    momentum: float | None
    nqm_steps: int
    measured_steps: int | None
    transfer_steps: int | None
    step_limit: int


def path_settings(doc: dict, sweep_config: SweepConfig, every: bool = False) -> list[PathRun]:
    """The batch sizes where the headline NQM reached its target in DEPARTS_FACTOR or more fewer
    steps than measured, or where the sweep never reached the goal, one PathRun each; with
    `every`, each batch size where the NQM reached its target (`realnets.validation.adam_basis`)."""
    transfer = {int(p["batch_size"]): p.get("steps_to_goal")
                for p in (doc.get("transfer") or {}).get("points", [])}
    measured = {int(p["batch_size"]): p.get("steps") for p in doc["measured"]["points"]}
    runs = []
    for p in headline_points(doc):
        if not p.get("reached") or p.get("steps") is None:
            continue
        b, s_nqm = int(p["batch_size"]), int(p["steps"])
        s_meas = measured.get(b)
        if not every and s_meas is not None and s_meas < DEPARTS_FACTOR * s_nqm:
            continue
        longest = max(s_nqm, int(s_meas) if s_meas is not None else 0)
        momentum = None if sweep_config.optimizer == "sgd" else p.get("momentum")
        runs.append(PathRun(
            batch_size=b, learning_rate=float(p["learning_rate"]),
            momentum=None if momentum is None else float(momentum), nqm_steps=s_nqm,
            measured_steps=None if s_meas is None else int(s_meas),
            transfer_steps=transfer.get(b),
            step_limit=min(sweep_config.max_steps, max(1, math.ceil(BUDGET_FACTOR * longest)))))
    return runs


@dataclass(frozen=True)
class Descent:
    """One full-batch run.

    Attributes:
      status: 'reached' (loss at or below the target), 'not reached' (within the step limit) or
        'diverged' (a loss not finite, or above DIVERGED_FACTOR x |the first|).
      steps_to_target: the first step count t with loss(theta_t) <= target (0: at the start),
        None unless reached.
      losses: loss(theta_t) for t = 0, 1, ... (at most KEPT_LOSSES of them; None where not
        finite).
    """

    status: str
    steps_to_target: int | None
    losses: tuple[float | None, ...]


@dataclass(frozen=True)
class FirstRise:
    """Where a descent's loss first went up: from step `step` (parameters `theta_P`, (P,)
    float64) to step + 1, by `rise` (loss units; None when the loss there was not finite). A
    rise counts when it exceeds RISE_TOLERANCE x |the loss before it| (float32 rounding does
    not)."""

    step: int
    rise: float | None
    theta_P: np.ndarray


def descend(value_and_grad: Callable, theta_P: np.ndarray, optimizer, target: float,
            step_limit: int, stop: Callable[[np.ndarray], bool] | None = None,
            checkpoint: descent_checkpoint.Checkpoint | None = None
            ) -> tuple[Descent, FirstRise | None]:
    """Runs `optimizer` (an optax transformation) on `value_and_grad`: theta (P,) float64 ->
    (loss, gradient (P,)) from `theta_P` until the loss is at or below `target` (or, with
    `stop`, until stop(theta) is True: another goal, checked at every step before the loss's),
    diverges, or `step_limit` updates are made. Returns the Descent and its FirstRise (None if
    the loss never went up).

    With `checkpoint` (`descent_checkpoint`), the state is saved every `checkpoint.every` steps
    and a saved state of the same key is resumed; the result is the one an uninterrupted call
    gives. The file is deleted when the descent ends."""
    theta = np.asarray(theta_P, np.float64)
    # the optimizer in single precision, as in training; the parameters are kept in double
    state = optimizer.init(theta.astype(np.float32))
    losses, first, previous, rise, start = [], None, None, None, 0
    saved = None if checkpoint is None else descent_checkpoint.load(checkpoint, theta, state)
    if saved is not None:
        theta, state, losses, first, start = (saved.theta_P, saved.opt_state, list(saved.losses),
                                              saved.first, saved.t)
        previous = saved.previous
        rise = None if saved.rise is None else FirstRise(*saved.rise)

    def done(status, steps):
        descent_checkpoint.remove(checkpoint)
        return Descent(status, steps, tuple(losses)), rise

    for t in range(start, step_limit + 1):
        if checkpoint is not None and t > start and t % checkpoint.every == 0:
            descent_checkpoint.save(checkpoint, descent_checkpoint.DescentState(
                t, theta, state, tuple(losses), first, previous,
                None if rise is None else (rise.step, rise.rise, rise.theta_P)))
        loss, grad = value_and_grad(theta)
        loss = float(loss)
        if len(losses) < KEPT_LOSSES:
            losses.append(loss if math.isfinite(loss) else None)
        first = loss if first is None else first
        if rise is None and previous is not None and (
                not math.isfinite(loss)
                or loss - previous[1] > RISE_TOLERANCE * abs(previous[1])):
            rise = FirstRise(t - 1, loss - previous[1] if math.isfinite(loss) else None,
                             previous[0])
        if not math.isfinite(loss):
            return done("diverged", None)
        if (stop is not None and stop(theta)) or loss <= target:
            return done("reached", t)     # a quadratic unbounded below reaches any target
        if loss > DIVERGED_FACTOR * max(abs(first), 1e-30):
            return done("diverged", None)
        if t == step_limit:
            break
        previous = (theta, loss)
        updates, state = optimizer.update(np.asarray(grad, np.float32), state,
                                          theta.astype(np.float32))
        theta = theta + np.asarray(updates, np.float64)
    return done("not reached", None)


def taylor_quadratic(hessian: hessian_products.HessianOperator, loss_at: float) -> Callable:
    """theta (P,) -> (q(theta), grad q(theta)) for the second-order Taylor expansion
    q = loss_at + G^T d + 1/2 d^T H d, d = theta - theta_g, at the operator's parameters theta_g
    (its sample's mean gradient G and Hessian H; one Hessian-vector product per call)."""
    centre, grad_g = hessian.params_P, hessian.gradient()

    def value_and_grad(theta):
        d = np.asarray(theta, np.float64) - centre
        hd = hessian(d)
        return loss_at + float(grad_g @ d) + 0.5 * float(d @ hd), grad_g + hd

    return value_and_grad


def sample_loss(task: Task, params, sample: dict, chunk_rows: int | None = None,
                devices=None) -> Callable:
    """theta (P,) -> (L(theta), grad L(theta) (P,)): the task's mean loss over `sample` (in
    chunks of `chunk_rows`, sharded over `devices`), parameters flattened as `params`; computed
    in the parameters' dtype (float32), the chunks averaged in float64."""
    flat, unravel = ravel_pytree(params)
    dtype = flat.dtype
    placed = sharded_sample.ShardedSample(sample, chunk_rows=chunk_rows, devices=devices)

    def joined(t_P, rows):       # one output: the mean loss, then its gradient
        loss, grad = jax.value_and_grad(lambda t: task.loss_fn(unravel(t), rows))(t_P)
        return jnp.concatenate([loss[None], grad])

    def value_and_grad(theta):
        out = placed.mean(joined, jnp.asarray(theta, dtype))
        return float(out[0]), out[1:]

    return value_and_grad


def path_optimizer(sweep_config: SweepConfig, run: PathRun):
    """The sweep's optimizer with the NQM's metaparameters at run.batch_size, a constant rate."""
    one_minus = 1.0 if run.momentum is None else 1.0 - run.momentum
    # final fraction 1: the decay length does not matter (1 step)
    hp = Metaparameters(jnp.float32(run.learning_rate), jnp.float32(one_minus), jnp.float32(1.0),
                        jnp.float32(1.0))
    return make_optimizer(StepConfig(optimizer=sweep_config.optimizer), hp)


def rise_record(rise: FirstRise, run: PathRun, optimizer: str,
                h1: tuple[float, float]) -> dict:
    """The network's first rise with the top Hessian eigenvalue h_1 (loss / param^2) of the
    sample's loss where it started, its Ritz residual, and the step's `edge_ratio` there (a h_1
    over the quadratic stability edge, dimensionless; >= 1: the step is past the edge of that
    curvature; None for Adam)."""
    return {"step": rise.step, "rise": rise.rise, "h1": h1[0], "h1_residual": h1[1],
            "edge_ratio": edge_ratio(run.learning_rate, run.momentum, h1[0], optimizer)}


def complete(path: dict) -> bool:
    """Whether a stored quadratic-path record has everything this module now records (a record
    from before the first rise was measured has not)."""
    return all("first_rise" in p for p in path["points"])


def step_ratio(a, b):
    """a / b for step counts, None when either is missing or b is 0."""
    return None if a is None or b is None or b == 0 else a / b


def run_quadratic_path(task: Task, sweep_config: SweepConfig, doc: dict, init_params,
                       goal_params, sample: dict, devices=None, log=None) -> dict:
    """The network and its own quadratic at the goal checkpoint, full batch on `sample`, at the
    batch sizes of `path_settings`.

    Args:
      task: the workload's Task.
      sweep_config: the sweep (its optimizer and budget).
      doc: the validation document so far: its headline tuned curve, measured curve, transfer
        (optional), calibration run (the target: its `train_loss_goal`) and settings
        (chunk_rows).
      init_params, goal_params: the reference trial's initialisation and goal checkpoint (not
        used, and may be None, when `path_settings` is empty).
      sample: the calibration sample the NQM was measured on.
      devices: devices for the sample's chunks (default all).
      log: optional callable(str) for progress lines.

    Returns:
      {"target", "points", "reading", "seconds"} when `path_settings` is empty; else also "loss_goal"
      (L(theta_g) on the sample, recomputed: the target when the goal
      checkpoint is the one the document was measured at), "loss_init", "quadratic_init"
      (q(theta_0)), "sample_rows", "points": [per
      batch size: the PathRun's fields, "network" and "quadratic" (Descent's fields),
      "first_rise" (`rise_record` where the network's loss first went up, None if it never
      did), the ratios "fit", "path", "noise" (None where a side is missing), "seconds" (0 for
      a batch size that shared another's descents)], "reading", "seconds" (the whole call)}.
    """
    start = time.perf_counter()
    say = log or (lambda _: None)
    chunk_rows = doc["settings"].get("chunk_rows")
    target = float(doc["calibration_run"]["train_loss_goal"])
    runs = path_settings(doc, sweep_config)
    if not runs:            # nothing to take apart: nothing measured (the parameters unused)
        return {"target": target, "points": [], "reading": path_reading({"points": []}),
                "seconds": time.perf_counter() - start}
    theta_0, unravel = ravel_pytree(init_params)
    theta_0 = np.asarray(theta_0, np.float64)
    sharpness = sharpness_probe(task, sample, doc["settings"]["seed"], chunk_rows, devices)
    network = sample_loss(task, goal_params, sample, chunk_rows, devices)
    hessian = hessian_products.hvp(task.loss_fn, goal_params, sample, chunk_rows=chunk_rows,
                                   devices=devices)
    loss_goal = network(hessian.params_P)[0]
    quadratic = taylor_quadratic(hessian, loss_goal)
    out = {"target": target, "loss_goal": loss_goal, "loss_init": network(theta_0)[0],
           "quadratic_init": quadratic(theta_0)[0],
           "sample_rows": int(hessian.num_rows), "points": []}
    done = {}
    for run in runs:
        say(f"the network and its quadratic at the goal, full batch, with the NQM's "
            f"metaparameters at B = {run.batch_size} (up to {run.step_limit} steps)")
        t0 = time.perf_counter()
        # batch sizes where the NQM chose the same step share their descents
        same = (run.learning_rate, run.momentum, run.step_limit)
        if same not in done:
            got = {name: descend(fn, theta_0, path_optimizer(sweep_config, run), target,
                                 run.step_limit)
                   for name, fn in (("network", network), ("quadratic", quadratic))}
            rise = got["network"][1]
            done[same] = ({name: asdict(descent) for name, (descent, _) in got.items()},
                          None if rise is None else rise_record(
                              rise, run, sweep_config.optimizer,
                              sharpness(unravel(rise.theta_P))))
        got, rise = done[same]
        s_net, s_quad = got["network"]["steps_to_target"], got["quadratic"]["steps_to_target"]
        out["points"].append({
            **asdict(run), **got, "first_rise": rise,
            "fit": step_ratio(s_quad, run.nqm_steps), "path": step_ratio(s_net, s_quad),
            "noise": step_ratio(run.transfer_steps, s_net),
            "seconds": time.perf_counter() - t0})
    out["reading"] = path_reading(out)
    out["seconds"] = time.perf_counter() - start
    return out


def steps_text(descent: dict) -> str:
    """A descent's steps to target, or its status when it did not reach it."""
    return str(descent["steps_to_target"]) if descent["status"] == "reached" else descent["status"]


def not_quadratic(point: dict) -> bool:
    """Whether the network needs PATH_FACTOR or more times its quadratic's steps at this batch
    size, or does not reach the target where the quadratic does."""
    net, quad = point["network"], point["quadratic"]
    if quad["status"] != "reached":
        return False
    if net["status"] != "reached":
        return True
    return net["steps_to_target"] >= PATH_FACTOR * max(quad["steps_to_target"], 1)


def network_shape(point: dict) -> dict:
    """How the network's full-batch loss moved (its kept losses): "peak" (the highest loss over
    the first), "rises" (steps at which the loss went up) and "steps" (steps seen)."""
    losses = [x for x in point["network"]["losses"] if x is not None]
    return {"peak": max(losses) / losses[0] if losses and losses[0] > 0 else None,
            "rises": sum(1 for a, b in zip(losses, losses[1:]) if b > a),
            "steps": max(len(losses) - 1, 0)}


def _edge_sentences(rising: list[dict]) -> list[str]:
    """What the curvature where each run's loss first went up says (`rise_record`)."""
    def ratio(p):
        return (p.get("first_rise") or {}).get("edge_ratio")

    def listed(ps):
        return ", ".join(f"{p['batch_size']} ({ratio(p):.3g} at step "
                         f"{p['first_rise']['step']})" for p in ps)

    past = [p for p in rising if ratio(p) is not None and ratio(p) >= 1.0]
    within = [p for p in rising if ratio(p) is not None and ratio(p) < 1.0]
    out = []
    if past:
        out.append("Where it first went up, the NQM's step is past the stability edge of the top "
                   f"curvature there (a h_1 / edge) at B = {listed(past)}: the curvature the "
                   "network has reached by then is more than the step can take (measured).")
    if within:
        out.append(f"At B = {listed(within)} the step is within that edge where the loss first "
                   "went up: the rise is not an instability of the top direction (what it is "
                   "is not measured).")
    return out


def path_reading(path: dict) -> str:
    """The fixed rule's reading of a `run_quadratic_path` record."""
    points = path["points"]
    if not points:
        return (f"The NQM is nowhere {DEPARTS_FACTOR:g}x or more faster than measured: no batch "
                "size to take apart.")
    bad = [p for p in points if not_quadratic(p)]
    good = [p for p in points if p not in bad and p["quadratic"]["status"] == "reached"]
    missed = [p for p in points if p["quadratic"]["status"] != "reached"]

    def listed(ps):
        return ", ".join(f"{p['batch_size']} (network {steps_text(p['network'])}, quadratic "
                         f"{steps_text(p['quadratic'])})" for p in ps)

    parts = []
    if bad:
        parts.append(
            f"Without gradient noise, from the same start with the NQM's own steps, the network "
            f"needs {PATH_FACTOR:g}x or more the steps of its own quadratic at the goal, or does "
            f"not reach the target, at B = {listed(bad)}: the loss is not quadratic between the "
            "initialisation and the goal, and a quadratic fitted at the goal descends faster "
            "than the network there (measured).")
        rising = [p for p in bad if (p["first_rise"] is not None if "first_rise" in p
                                     else network_shape(p)["rises"] > 0)]
        falling = [p for p in bad if p not in rising]
        if rising:
            parts.append(
                "The network's loss goes up along the way at B = " + ", ".join(
                    f"{p['batch_size']} (at {network_shape(p)['rises']} of "
                    f"{network_shape(p)['steps']} steps, up to {network_shape(p)['peak']:.3g}x "
                    "its start)" for p in rising)
                + ", where the goal's quadratic falls to the target with the same steps.")
            parts += _edge_sentences(rising)
        if falling:
            parts.append(
                "At B = " + ", ".join(str(p["batch_size"]) for p in falling)
                + " it falls at every step, only slower: the loss on the way is flatter than "
                "the goal's quadratic.")
    if good:
        parts.append(
            f"At B = {listed(good)} the network descends within {PATH_FACTOR:g}x of its own "
            "quadratic: the miss there is in the fit or the noise (the ratios beside).")
    if missed:
        parts.append(
            f"At B = {listed(missed)} the quadratic itself does not reach the target: the "
            "NQM's step does not suit the quadratic it was fitted to (a curvature past the "
            "step's edge that the NQM did not keep, or directions too flat for the limit).")
    return " ".join(parts)

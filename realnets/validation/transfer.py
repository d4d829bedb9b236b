"""The NQM's own metaparameters run on the network: where the prediction misses, is it the model
or the measurement?

The headline prediction is the calibrated NQM's tuned curve: at every batch size B of the sweep a
learning rate and momentum (b1 for Adam) and the steps S_nqm(B) the NQM needs with them. This
module trains the network once per batch size with exactly those metaparameters, from the
reference trial's initialisation and the sweep's data order, to the sweep's goal, and compares
its steps S_net(B) with S_nqm(B) and with the sweep's measured S(B). Two failures can make the
predicted curve differ from the measured one, and this tells them apart by a measurement:

- the network follows the NQM (S_net near S_nqm) where the sweep measured more steps: the sweep's
  search did not find what the NQM found; the measured side is what is off at that B;
- the network does not follow (much slower, diverged, or not at the goal within the budget):
  the fixed quadratic fitted at one checkpoint does not describe the network at those step sizes.

The settings and the reading are fixed by one rule (`transfer_settings`, `reading`),
docs/validation.md, 'Does the network follow the NQM?'. A diverging run is a result.

Each run's top Hessian eigenvalue at its last step is measured too (`sharpness_probe`, on the
calibration sample): where the network does not follow, it says whether its curvature rose to
the stability edge of the NQM's step (the edge of stability, Cohen et al. 2021, "Gradient descent
on neural networks typically occurs at the edge of stability"), which a fixed quadratic cannot do.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import jax

from realnets.calibration import hessian_products, lanczos
from realnets.sweeps.records import SweepConfig, TrialRecord
from realnets.training.trainer import RunConfig, TrialSpec, run_trials
from realnets.validation.reconciliation import headline
from realnets.workloads.tasks import Task

# the network follows the NQM at B when it reaches the goal in at most this many times its steps
FOLLOWS_FACTOR = 2.0
# each run stops after this many times the larger of S_nqm(B) and the measured S(B) (within the
# sweep's budget): a run that slow has answered the question
BUDGET_FACTOR = 4.0
# the NQM's curve departs from the measured one at B when one is this many times the other
DEPARTS_FACTOR = 1.5
# the network at the NQM's metaparameters beats the sweep at B when it needs fewer than
# S(B) / SWEEP_MISSED_FACTOR steps
SWEEP_MISSED_FACTOR = 1.2
# a run ended at the edge of stability when its own h_1 at its last step puts the NQM's step at
# this fraction of the stability edge or beyond
AT_EDGE = 0.8
# Lanczos steps for a run's top eigenvalue (its Ritz residual is recorded)
SHARPNESS_LANCZOS_STEPS = 20


@dataclass(frozen=True)
class TransferRun:
    """One batch size's run: the NQM's metaparameters there and the budget they get.

    Attributes:
      batch_size: examples per step.
      learning_rate, momentum: the tuned NQM's choice (momentum None for SGD; b1 for Adam).
      nqm_steps: the NQM's expected steps to its target with them.
      measured_steps: the sweep's steps to result at B (None: it did not reach the goal).
      stop_after: the run's step limit, BUDGET_FACTOR x max(nqm_steps, measured_steps) within the
        sweep's budget.
    """

    batch_size: int
    learning_rate: float
    momentum: float | None
    nqm_steps: int
    measured_steps: int | None
    stop_after: int


def transfer_settings(tuned_points: list[dict], measured_points: list[dict],
                      sweep_config: SweepConfig) -> list[TransferRun]:
    """One TransferRun per batch size at which the tuned NQM reached its target (points of the
    headline prediction's `tuned` curve and of the document's `measured` curve, as dicts)."""
    measured = {int(p["batch_size"]): p.get("steps") for p in measured_points}
    runs = []
    for p in tuned_points:
        if not p.get("reached") or p.get("steps") is None:
            continue
        b = int(p["batch_size"])
        s_meas = measured.get(b)
        longest = max(int(p["steps"]), int(s_meas) if s_meas is not None else 0)
        stop = min(sweep_config.max_steps, max(1, math.ceil(BUDGET_FACTOR * longest)))
        momentum = None if sweep_config.optimizer == "sgd" else p.get("momentum")
        runs.append(TransferRun(batch_size=b, learning_rate=float(p["learning_rate"]),
                                momentum=None if momentum is None else float(momentum),
                                nqm_steps=int(p["steps"]),
                                measured_steps=None if s_meas is None else int(s_meas),
                                stop_after=stop))
    return runs


def s_min_split(doc: dict) -> dict | None:
    """Where a step-matched prediction's error sits. With S(B) = S_min (1 + B_crit / B) through
    the reference point (B_ref, S_ref), B_crit = B_ref (S_ref / S_min - 1): once the NQM's steps
    are matched at B_ref, its B_crit differs from the measured one only through S_min, the steps
    at an unlimited batch. Returns {"s_min_measured", "s_min_predicted", "ratio" (measured over
    predicted), "b_crit_measured", "b_crit_predicted" (B_ref (S_ref / S_min - 1) of each fit)},
    or None when a fit is missing."""
    _, _, _, prediction = headline(doc)
    measured = (doc.get("measured") or {}).get("fit") or {}
    predicted = (prediction.get("tuned") or {}).get("fit") or {}
    run = doc.get("calibration_run") or {}
    s_ref, b_ref = run.get("sweep_steps_to_goal"), run.get("batch_size")
    if not (measured.get("s_min") and predicted.get("s_min") and s_ref and b_ref):
        return None
    sm, sp = float(measured["s_min"]), float(predicted["s_min"])
    return {"s_min_measured": sm, "s_min_predicted": sp, "ratio": sm / sp,
            "b_crit_measured": b_ref * (s_ref / sm - 1.0),
            "b_crit_predicted": b_ref * (s_ref / sp - 1.0)}


def verdict(run: TransferRun, record: TrialRecord) -> str:
    """One batch size's outcome: 'follows' (at the goal within FOLLOWS_FACTOR x S_nqm), 'slower'
    (at the goal, later), 'diverged' or 'not reached' (within its step limit)."""
    if record.status == "INFEASIBLE":
        return "diverged"
    if record.steps_to_goal is None:
        return "not reached"
    return "follows" if record.steps_to_goal <= FOLLOWS_FACTOR * run.nqm_steps else "slower"


def sharpness_probe(task: Task, sample: dict, seed: int, chunk_rows: int | None = None,
                    devices=None):
    """params -> (h_1, its Ritz residual): the top eigenvalue of the Hessian of the mean training
    loss over `sample` (loss / param^2), by SHARPNESS_LANCZOS_STEPS Lanczos steps from a start
    fixed by `seed`."""
    def probe(params) -> tuple[float, float]:
        hessian = hessian_products.hvp(task.loss_fn, params, sample, chunk_rows=chunk_rows,
                                       devices=devices)
        pairs = lanczos.top_eigenpairs(hessian, hessian.dim, 1, jax.random.key(seed),
                                       num_steps=min(SHARPNESS_LANCZOS_STEPS, hessian.dim))
        return float(pairs.eigenvalues_K[0]), float(pairs.residuals_K[0])

    return probe


def headline_points(doc: dict) -> list[dict]:
    """The tuned curve's points of a validation document's headline prediction (its first
    checkpoint, its target rule), or [] when there is none."""
    return list((headline(doc)[3].get("tuned") or {}).get("points") or [])


def run_transfer(task: Task, sweep_config: SweepConfig, doc: dict, sample: dict | None = None,
                 devices=None, log=None) -> dict:
    """Trains the network at each batch size with the headline NQM's tuned metaparameters.

    Args:
      task: the workload's Task.
      sweep_config: the sweep (goal, budget, optimizer, seed, evaluation cadence).
      doc: the validation document so far (`realnets.validation.pipeline.validate`): its
        calibration run's trial id gives the initialisation every run starts from, its headline
        tuned curve the metaparameters, its measured curve the steps to compare with.
      sample: the calibration sample (`realnets.validation.rerun.calibration_sample` with the
        document's settings): each run's h_1 at its last step is measured on it
        (`sharpness_probe`, the settings' seed and chunk rows; not for a diverged run). None:
        not measured.
      devices: devices to train on (default all).
      log: optional callable(str) for progress lines.

    Returns:
      {"trial_id", "points": [per batch size: the TransferRun's fields, status, steps_to_goal
      (None if not reached), steps_run, final_metric, verdict, h1_end and h1_end_residual (None
      when not measured), seconds], "reading"}.
    """
    trial_id = int(doc["calibration_run"]["trial_id"])
    settings = doc["settings"]
    sharpness = None if sample is None else sharpness_probe(
        task, sample, settings["seed"], settings["chunk_rows"], devices)
    say = log or (lambda _: None)
    points = []
    for run in transfer_settings(headline_points(doc), doc["measured"]["points"], sweep_config):
        say(f"the NQM's metaparameters on the network at B = {run.batch_size} (lr "
            f"{run.learning_rate:.4g}, momentum {run.momentum}, up to {run.stop_after} steps)")
        config = RunConfig(batch_size=run.batch_size, max_steps=sweep_config.max_steps,
                           goal=sweep_config.goal, optimizer=sweep_config.optimizer,
                           seed=sweep_config.seed, eval_resolution=sweep_config.eval_resolution,
                           max_rows_per_device=sweep_config.max_rows_per_device,
                           stop_after=run.stop_after, noise_every=0)
        spec = TrialSpec(trial_id=trial_id, learning_rate=run.learning_rate,
                         momentum=run.momentum)
        t0 = time.perf_counter()
        final = []
        (raw,) = run_trials(task, config, [spec], devices=devices, final_params=final)
        record = TrialRecord.from_dict(raw)
        h1 = residual = None
        if sharpness is not None and record.status != "INFEASIBLE":
            h1, residual = sharpness(final[0])
        points.append({**asdict(run), "status": record.status,
                       "steps_to_goal": record.steps_to_goal, "steps_run": record.steps_run,
                       "final_metric": record.eval.metric[-1] if record.eval.metric else None,
                       "verdict": verdict(run, record), "h1_end": h1,
                       "h1_end_residual": residual, "seconds": time.perf_counter() - t0})
    out = {"trial_id": trial_id, "points": points}
    out["reading"] = reading(out, doc)
    return out


def _ratio(a, b):
    return None if a is None or b is None else a / b


def top_curvatures(doc: dict) -> dict[str, float]:
    """The top Hessian eigenvalue h_1 measured at each checkpoint of a validation document."""
    return {name: float(record["nqm"]["top"]["curvature"]["value"][0])
            for name, record in doc["checkpoints"].items()
            if record and (record.get("nqm") or {}).get("top")}


def edge_ratio(learning_rate: float, momentum: float | None, h_1: float,
               optimizer: str) -> float | None:
    """a h_1 over the stability edge of a quadratic of curvature h_1: 2 for SGD, 2 (1 + b) for
    heavy-ball momentum (v <- b v + g, theta <- theta - a v), 2 (1 + b) / (1 + 2 b) for Nesterov;
    above 1 the run diverges along that direction. None for Adam (its step is normalised)."""
    b = momentum or 0.0
    edge = {"sgd": 2.0, "momentum": 2.0 * (1.0 + b),
            "nesterov": 2.0 * (1.0 + b) / (1.0 + 2.0 * b)}.get(optimizer)
    return None if edge is None else learning_rate * h_1 / edge


def edge_ratios(point: dict, doc: dict) -> dict[str, float | None]:
    """`edge_ratio` of a transfer point's metaparameters at every checkpoint's h_1, and at the
    run's own h_1 at its last step ('end', when measured)."""
    optimizer = doc["calibration_run"]["optimizer"]
    curvatures = top_curvatures(doc)
    if point.get("h1_end") is not None:
        curvatures["end"] = point["h1_end"]
    return {name: edge_ratio(point["learning_rate"], point["momentum"], h, optimizer)
            for name, h in curvatures.items()}


def reading(transfer: dict, doc: dict) -> str:
    """What the runs say, by the fixed rule. At each batch size where the NQM needs
    DEPARTS_FACTOR or more fewer steps than measured: if the network, run with the NQM's
    metaparameters, beat the sweep's best by more than SWEEP_MISSED_FACTOR, the sweep missed what
    the NQM found (the measurement is off there); otherwise the NQM's own choice does not give the
    network the NQM's speed (the model's assumption breaks there); a batch size the sweep never
    reached the goal at counts as one where the NQM is faster, and any run that reaches the goal
    there beats the sweep. Batch sizes where the NQM needs
    DEPARTS_FACTOR or more the measured steps are named apart. Where the NQM's step is past the
    stability edge of the top curvature measured at a checkpoint (`edge_ratio` above 1), the
    reading says so: the curvature there is not the one the NQM was fitted to."""
    points = transfer["points"]
    if not points:
        return "no run: the tuned NQM reached its target at no batch size"
    measured = [p for p in points if p["measured_steps"] is not None]
    # a batch size the sweep never reached the goal at, where the NQM did: the NQM is faster
    optimistic = [p for p in points if p["measured_steps"] is None
                  or p["measured_steps"] >= DEPARTS_FACTOR * p["nqm_steps"]]
    pessimistic = [p for p in measured if p["nqm_steps"] >= DEPARTS_FACTOR * p["measured_steps"]]

    def beats(p):
        return p["steps_to_goal"] is not None and (
            p["measured_steps"] is None
            or p["steps_to_goal"] * SWEEP_MISSED_FACTOR < p["measured_steps"])

    def sizes(ps):
        return ", ".join(str(p["batch_size"]) for p in ps)

    def outcome(p):
        if p["steps_to_goal"] is None:
            return f"{p['batch_size']} ({p['verdict']})"
        measured_text = ("not reached" if p["measured_steps"] is None
                         else p["measured_steps"])
        return (f"{p['batch_size']} ({p['steps_to_goal']} steps; NQM {p['nqm_steps']}, "
                f"measured {measured_text})")

    parts = []
    if optimistic:
        missed = [p for p in optimistic if beats(p)]
        broke = [p for p in optimistic if not beats(p)]
        parts.append(f"the NQM needs {DEPARTS_FACTOR:g}x or more fewer steps than measured (or "
                     f"the sweep never reached the goal) at B = {sizes(optimistic)}")
        if broke:
            parts.append("there the network with the NQM's metaparameters does not beat the "
                         "sweep at B = " + ", ".join(outcome(p) for p in broke)
                         + ": the quadratic fitted at one checkpoint does not hold at the step "
                           "sizes the NQM uses (the model's assumption breaks)")
            at_edge = [p for p in broke if (edge_ratios(p, doc).get("end") or 0.0) >= AT_EDGE]
            if at_edge:
                parts.append(
                    f"at B = {sizes(at_edge)} the run's own top curvature at its last step puts "
                    f"the NQM's step at " + ", ".join(
                        f"{edge_ratios(p, doc)['end']:.2f}" for p in at_edge)
                    + " of its stability edge: the network's curvature ends at the edge its step "
                      "allows (the edge of stability), which a fixed quadratic's does not")
            h = top_curvatures(doc)
            for name in h:
                past = [p for p in broke if (edge_ratios(p, doc).get(name) or 0.0) > 1.0]
                if past:
                    others = ", ".join(f"{h[k]:.3g} at {k}" for k in h if k != name)
                    parts.append(f"at B = {sizes(past)} the NQM's step is past the stability "
                                 f"edge of the top curvature measured at the {name} checkpoint "
                                 f"(h_1 {h[name]:.3g}" + (f" against {others}" if others else "")
                                 + "): the curvature changes along training, which the fixed "
                                   "quadratic does not")
        if missed:
            parts.append("it beats the sweep by more than "
                         f"{SWEEP_MISSED_FACTOR:g}x at B = " + ", ".join(outcome(p) for p in missed)
                         + ": there the sweep's search missed what the NQM found (the measurement "
                           "is off)")
    if pessimistic:
        parts.append(f"the NQM needs {DEPARTS_FACTOR:g}x or more the measured steps at "
                     f"B = {sizes(pessimistic)} (the network descends faster than the quadratic)")
    if not optimistic and not pessimistic:
        parts.append(f"the NQM's steps are within {DEPARTS_FACTOR:g}x of the measured ones at "
                     f"every batch size")
    return "; ".join(parts)

"""Adam's coordinates: does it matter that the NQM scales Adam's step per eigenvector of the
Hessian while the network's Adam scales it per weight, and that the NQM keeps only d of the
eigenvectors?

SGD and momentum take the same steps in any orthonormal basis; Adam does not, since it divides
each coordinate's step by that coordinate's own second moment. The calibrated NQM is diagonal in
the Hessian's eigenbasis, so its Adam is Adam per eigenvector, over its d directions (those above
its tail's floor); the network's is Adam per weight, over all of them. On a report of an Adam
sweep whose network is small enough for its whole Hessian (MAX_DENSE_PARAMS), this module runs
deterministic descents per batch size of the headline tuned curve, from the reference trial's
initialisation theta_0, full batch on the calibration sample, with the NQM's own learning rate
and b1 there, to the loss the reference run had at its goal (the target and step limit of
`realnets.validation.quadratic_path`):

- the network's loss L(theta) and its second-order Taylor expansion q(theta) at the goal
  checkpoint theta_g (every direction), each with Adam per weight (the sweep's optimizer) and
  with Adam per eigenvector of the sample's Hessian at theta_g, H = U diag(h) U^T (`rotated`:
  the gradient rotated by U^T, Adam's update computed in those coordinates, rotated back by U);
- the quadratic with Adam per eigenvector over the NQM's top d eigenvectors only (TOP_D), the
  other parameters held at theta_0; beside it the lowest loss that run can reach at all
  (`top_d_floor`), since the held directions keep their share of the loss.

`basis_reading` applies the rule fixed in docs/validation.md, 'Adam's coordinates: per weight or
per eigenvector?' and its follow-up.
"""

from __future__ import annotations

import time
from dataclasses import asdict

import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from realnets.calibration import hessian_products
from realnets.sweeps.records import SweepConfig
from realnets.validation.quadratic_path import (PathRun, descend, path_optimizer, path_settings,
                                                sample_loss, step_ratio, steps_text,
                                                taylor_quadratic)
from realnets.validation.reconciliation import headline
from realnets.validation.transfer import DEPARTS_FACTOR
from realnets.workloads.tasks import Task

# the largest network whose Hessian is formed whole and diagonalised: about four P x P float64
# arrays are held at once (the products, their symmetrised copy, the eigenvectors), 4.6 GB at
# 12,000, and eigh takes a few minutes there on this machine's two cores
MAX_DENSE_PARAMS = 12_000
# a descent explains a miss when it needs at least this many times the steps of the one it is
# held against (the transfer's departure factor)
EXPLAINS_FACTOR = DEPARTS_FACTOR
BASES = ("per_weight", "per_eigenvector")
# the quadratic's fifth descent: Adam per eigenvector over the NQM's d top directions only
TOP_D = "per_top_d_eigenvector"
# eigenvalues below -NEGATIVE_TOLERANCE x the top one count as negative curvature
NEGATIVE_TOLERANCE = 1e-6


def rotated(inner: optax.GradientTransformation, basis_PK) -> optax.GradientTransformation:
    """`inner` applied in the coordinates of K orthonormal vectors: for flat parameters (P,),
    the gradient g becomes U^T g (K,), `inner`'s update u there goes back as U u (P,) (U =
    `basis_PK`, (P, K), columns the basis vectors; K = P for a whole basis, where U = I gives
    `inner` itself; with K < P only their span moves). The rotations are made in float64 on the
    host (a float32 product would leave rounding of about 1e-7 |g| in exactly flat directions,
    which Adam, dividing by the square root of its second moment, would turn into full steps);
    `inner` sees float32, as in training."""
    u_PK = np.asarray(basis_PK, np.float64)

    def inside(x):
        return (u_PK.T @ np.asarray(x, np.float64)).astype(np.float32)

    def init(params):
        return inner.init(inside(params))

    def update(updates, state, params=None):
        step, state = inner.update(inside(updates), state,
                                   None if params is None else inside(params))
        return u_PK @ np.asarray(step, np.float64), state

    return optax.GradientTransformation(init, update)


def dense_hessian(hessian: hessian_products.HessianOperator) -> np.ndarray:
    """The operator's whole Hessian, (P, P) float64, column by column (P products),
    symmetrised ((H + H^T) / 2: the products are float32)."""
    p = hessian.dim
    h_PP = np.empty((p, p))
    unit = np.zeros(p, np.float32)
    for j in range(p):
        unit[j] = 1.0
        h_PP[:, j] = hessian(unit)
        unit[j] = 0.0
    h_PP += h_PP.T
    h_PP *= 0.5
    return h_PP


class DenseHessian:
    """A formed Hessian with the operator's face that `taylor_quadratic` uses: `params_P` (the
    centre theta_g, (P,)), `gradient()` (G, (P,)) and `h(v)` = H v, all float64."""

    def __init__(self, h_PP: np.ndarray, params_P: np.ndarray, gradient_P: np.ndarray):
        self.h_PP, self.params_P, self._gradient = h_PP, params_P, gradient_P

    def gradient(self) -> np.ndarray:
        return self._gradient

    def __call__(self, v_P) -> np.ndarray:
        return self.h_PP @ np.asarray(v_P, np.float64)


def refusal(doc: dict) -> str | None:
    """Why the measurement does not apply to this validation document (None: it does): its
    sweep is not Adam's, its headline NQM is not the Adam one or not fitted at the goal
    checkpoint, or its network has more than MAX_DENSE_PARAMS parameters."""
    optimizer = (doc.get("sweep_config") or {}).get("optimizer")
    if optimizer != "adam":
        return (f"adam-basis applies to reports of Adam sweeps; {doc['workload']}'s sweep trained "
                f"{optimizer}")
    checkpoint, _, record, prediction = headline(doc)
    if prediction.get("family") != "adam":
        return (f"adam-basis needs the report's headline NQM to be the Adam one; "
                f"{doc['workload']}'s is {prediction.get('family')} (validate it again)")
    if checkpoint != "goal":
        return (f"adam-basis needs the report's headline fitted at the goal checkpoint "
                f"(--checkpoints goal,...); {doc['workload']}'s is at {checkpoint}")
    params = int(record["num_params"])
    if params > MAX_DENSE_PARAMS:
        return (f"adam-basis forms the whole Hessian, for networks of at most "
                f"{MAX_DENSE_PARAMS:,} parameters; {doc['workload']} has {params:,}")
    return None


def top_d_floor(quadratic, theta_0: np.ndarray, h: np.ndarray, u_PD: np.ndarray) -> float:
    """The lowest value of the quadratic `quadratic` (theta -> (q, grad q)) over theta_0 plus
    the span of the D eigenvectors `u_PD` (P, D) with eigenvalues `h` (D,): q(theta_0) minus
    sum_i g_i^2 / (2 h_i), g = U^T grad q(theta_0) (loss units); -inf if any h_i <= 0 with a
    gradient along it (the quadratic is unbounded below there)."""
    value, grad = quadratic(theta_0)
    g = u_PD.T @ np.asarray(grad, np.float64)
    if np.any((h <= 0) & (g != 0)):
        return -np.inf
    keep = h > 0
    return float(value - 0.5 * np.sum(g[keep] ** 2 / h[keep]))


def spectrum_record(h: np.ndarray, fitted: dict) -> dict:
    """The whole spectrum's summary beside the NQM's: top and bottom eigenvalues, the count
    above the NQM's tail floor, the count of negative ones (below -NEGATIVE_TOLERANCE x top),
    and the NQM's d."""
    floor = (fitted.get("tail") or {}).get("floor")
    return {"top": float(h[-1]), "bottom": float(h[0]),
            "above_floor": None if floor is None else int(np.sum(h > floor)),
            "negative": int(np.sum(h < -NEGATIVE_TOLERANCE * abs(float(h[-1])))),
            "nqm_dim": fitted.get("dim")}


def _descents(network, quadratic, theta_0, run: PathRun, sweep_config: SweepConfig,
              u_PP: np.ndarray, u_PD: np.ndarray | None, target: float) -> dict:
    """One batch size's descents: {"network": {basis: Descent's fields}, "quadratic": {basis:
    ..., TOP_D: ... when u_PD is given}} (BASES)."""
    per_weight = path_optimizer(sweep_config, run)
    optimizers = {"per_weight": per_weight, "per_eigenvector": rotated(per_weight, u_PP)}
    out = {side: {basis: asdict(descend(fn, theta_0, optimizers[basis], target,
                                        run.step_limit)[0]) for basis in BASES}
           for side, fn in (("network", network), ("quadratic", quadratic))}
    if u_PD is not None:
        out["quadratic"][TOP_D] = asdict(descend(quadratic, theta_0, rotated(per_weight, u_PD),
                                                 target, run.step_limit)[0])
    return out


def _point(run: PathRun, got: dict) -> dict:
    def steps(side, basis):
        return got[side][basis]["steps_to_target"]

    return {**asdict(run), **got,
            "coordinates": step_ratio(steps("quadratic", "per_eigenvector"),
                                      steps("quadratic", "per_weight")),
            "coordinates_network": step_ratio(steps("network", "per_eigenvector"),
                                              steps("network", "per_weight")),
            "nqm_over_eigenvector": step_ratio(run.nqm_steps,
                                               steps("quadratic", "per_eigenvector")),
            "truncation": (None if TOP_D not in got["quadratic"]
                           else step_ratio(steps("quadratic", TOP_D),
                                           steps("quadratic", "per_eigenvector")))}


def run_adam_basis(task: Task, sweep_config: SweepConfig, doc: dict, init_params, goal_params,
                   sample: dict, devices=None, log=None) -> dict:
    """The descents at every batch size where the headline NQM reached its target
    (`path_settings(..., every=True)`).

    Args:
      task, sweep_config: the workload's Task and its Adam sweep.
      doc: the validation document (its headline tuned curve, measured curve, transfer if any,
        calibration run: the target `train_loss_goal`, settings: chunk_rows).
      init_params, goal_params: the reference trial's initialisation and goal checkpoint.
      sample: the calibration sample.
      devices, log: devices for the sample's chunks; optional callable(str) for progress.

    Returns:
      {"workload", "checkpoint", "num_params", "sample_rows", "target", "loss_goal", "spectrum"
      (`spectrum_record`), "top_d_floor" (`top_d_floor`, None when d is not below P),
      "points": [per batch size: the PathRun's fields, "network" and "quadratic" ({basis:
      Descent's fields} for BASES; the quadratic also TOP_D when d < P), "coordinates"
      (quadratic per eigenvector / per weight, steps), "coordinates_network" (the same on the
      network), "nqm_over_eigenvector" (the NQM's steps / the quadratic's per eigenvector),
      "truncation" (the quadratic's TOP_D / per eigenvector steps; None without TOP_D)],
      "reading", "seconds": {"hessian", "eigh", "descents"}}. ValueError (`refusal`) where it
      does not apply. Batch sizes with the same rate, b1 and step limit share their descents.
    """
    why = refusal(doc)
    if why:
        raise ValueError(why)
    say = log or (lambda _: None)
    seconds = {}
    chunk_rows = doc["settings"].get("chunk_rows")
    target = float(doc["calibration_run"]["train_loss_goal"])
    network = sample_loss(task, goal_params, sample, chunk_rows, devices)
    operator = hessian_products.hvp(task.loss_fn, goal_params, sample, chunk_rows=chunk_rows,
                                    devices=devices)
    say(f"forming the whole Hessian at the goal ({operator.dim} products)")
    t0 = time.perf_counter()
    h_PP = dense_hessian(operator)
    seconds["hessian"] = time.perf_counter() - t0
    say(f"diagonalising it ({operator.dim} x {operator.dim})")
    t0 = time.perf_counter()
    h, u_PP = np.linalg.eigh(h_PP)          # ascending
    seconds["eigh"] = time.perf_counter() - t0
    loss_goal = network(operator.params_P)[0]
    quadratic = taylor_quadratic(DenseHessian(h_PP, operator.params_P, operator.gradient()),
                                 loss_goal)
    checkpoint, _, record, _ = headline(doc)
    fitted = record.get("nqm") or {}
    d = None if fitted.get("dim") is None else int(round(fitted["dim"]))
    u_PD = u_PP[:, -d:] if d is not None and 0 < d < operator.dim else None
    theta_0 = np.asarray(ravel_pytree(init_params)[0], np.float64)
    out = {"workload": doc["workload"], "checkpoint": checkpoint,
           "num_params": int(operator.dim), "sample_rows": int(operator.num_rows),
           "target": target, "loss_goal": loss_goal, "spectrum": spectrum_record(h, fitted),
           "top_d_floor": None if u_PD is None else top_d_floor(quadratic, theta_0, h[-d:], u_PD),
           "points": []}
    t0 = time.perf_counter()
    done = {}
    for run in path_settings(doc, sweep_config, every=True):
        same = (run.learning_rate, run.momentum, run.step_limit)
        if same not in done:
            say(f"descents with the NQM's metaparameters at B = {run.batch_size} (up to "
                f"{run.step_limit} steps)")
            done[same] = _descents(network, quadratic, theta_0, run, sweep_config, u_PP, u_PD,
                                   target)
        out["points"].append(_point(run, done[same]))
    seconds["descents"] = time.perf_counter() - t0
    out["reading"] = basis_reading(out)
    out["seconds"] = seconds
    return out


def slower(point: dict, slow: str, fast: str) -> bool | None:
    """Whether the quadratic's descent `slow` needs EXPLAINS_FACTOR or more times the steps of
    its descent `fast` at this batch size (or does not reach the target where `fast` does);
    None when `fast` does not reach it either, or `slow` was not run (nothing to compare)."""
    quadratic = point["quadratic"]
    if slow not in quadratic or quadratic[fast]["status"] != "reached":
        return None
    if quadratic[slow]["status"] != "reached":
        return True
    return (quadratic[slow]["steps_to_target"]
            >= EXPLAINS_FACTOR * max(quadratic[fast]["steps_to_target"], 1))


def explained(point: dict) -> bool | None:
    """Whether, at this batch size, Adam per eigenvector needs EXPLAINS_FACTOR or more times
    the steps of Adam per weight on the same quadratic (or does not reach the target where per
    weight does); None when per weight does not reach it either (nothing to compare)."""
    return slower(point, "per_eigenvector", "per_weight")


def _truncation_sentences(slow: list[dict], record: dict) -> list[str]:
    """The follow-up's reading: the quadratic per eigenvector over the NQM's top d directions
    only (TOP_D) against every direction, at the slow batch sizes, with the lowest loss the
    truncated run can reach."""
    def listed(ps):
        return ", ".join(f"{p['batch_size']} (top d {steps_text(p['quadratic'][TOP_D])}, every "
                         f"direction {steps_text(p['quadratic']['per_eigenvector'])})"
                         for p in ps)

    yes = [p for p in slow if slower(p, TOP_D, "per_eigenvector") is True]
    no = [p for p in slow if slower(p, TOP_D, "per_eigenvector") is False]
    out = []
    if yes:
        out.append(f"With only the NQM's d top directions moving, the quadratic with Adam per "
                   f"eigenvector needs {EXPLAINS_FACTOR:g}x or more the steps of every direction "
                   f"(or does not reach the target) at B = {listed(yes)}: on this quadratic the "
                   "directions the NQM leaves out carry much of Adam's progress (measured; "
                   "whether they make the NQM itself slow is not: validate with a lower "
                   "--floor-ratio for that).")
    if no:
        out.append(f"With only the NQM's d top directions moving, it needs fewer than "
                   f"{EXPLAINS_FACTOR:g}x the steps of every direction at B = {listed(no)}: the "
                   "truncation does not explain the slowness there.")
    floor = record.get("top_d_floor")
    if (yes or no) and floor is not None:
        target = record["target"]
        out.append(f"The lowest loss the quadratic reaches with only those directions moving is "
                   f"{floor:.4g} against the target {target:.4g}: "
                   + ("above it, so the truncated run cannot reach the target at any step count."
                      if floor > target else
                      f"below it by {(target - floor) / target:.2%} of the target, so how soon "
                      "the truncated run crosses it depends on how close that floor is."))
    return out


def basis_reading(record: dict) -> str:
    """The fixed rule's reading of a `run_adam_basis` record, at the batch sizes where the NQM
    needs DEPARTS_FACTOR or more times the sweep's steps."""
    slow = [p for p in record["points"] if p["measured_steps"] is not None
            and p["nqm_steps"] >= DEPARTS_FACTOR * p["measured_steps"]]
    if not slow:
        return (f"The NQM nowhere needs {DEPARTS_FACTOR:g}x or more the measured steps: no miss "
                "for the coordinates to explain.")

    def listed(ps):
        return ", ".join(
            f"{p['batch_size']} (quadratic per eigenvector "
            f"{steps_text(p['quadratic']['per_eigenvector'])}, per weight "
            f"{steps_text(p['quadratic']['per_weight'])}; NQM {p['nqm_steps']})" for p in ps)

    yes = [p for p in slow if explained(p) is True]
    no = [p for p in slow if explained(p) is False]
    open_ = [p for p in slow if explained(p) is None]
    parts = []
    if yes:
        parts.append(f"At B = {listed(yes)} Adam per eigenvector needs {EXPLAINS_FACTOR:g}x or "
                     "more the steps of Adam per weight on the same quadratic: the coordinates "
                     "explain the NQM's slowness there (measured).")
    if no:
        parts.append(f"At B = {listed(no)} Adam per eigenvector needs fewer than "
                     f"{EXPLAINS_FACTOR:g}x the steps of Adam per weight on the same quadratic: "
                     "the coordinates do not explain the NQM's slowness there; it sits in what "
                     "the NQM adds to that quadratic (its directions, start, mean-field second "
                     "moment and noise), by the ratio NQM / per eigenvector beside.")
    if open_:
        parts.append(f"At B = {listed(open_)} the quadratic with Adam per weight does not reach "
                     "the target: nothing to compare.")
    return " ".join(parts + _truncation_sentences(slow, record))

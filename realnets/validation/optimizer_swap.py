"""The calibrated NQM of a validation report, tuned as another optimizer family.

A prediction that misses has two suspects: the quadratic fitted to the network (curvature, noise,
start) and the optimizer model the rule puts on it (heavy-ball momentum for momentum sweeps,
mean-field Adam for Adam sweeps). Keeping the quadratic and changing the optimizer separates
them: the rule's step-matched target is recomputed for the new family at the same reference
point (B_ref, S_ref), then the NQM is tuned per batch size in the given search space and fitted
as the headline curve is. A diagnostic, not the rule: the new family's search space is the
caller's choice, since the sweep only searched its own. With `decay`, the swapped constant
curve is tuned again with a linear decay of the rate (`nqm.linear_decay`), at the same target:
the calibrated model's reading of what a decay does to this network's B_crit. With
`start_scale`, the fitted start E theta_i^2 is scaled before the step match: a diagnostic of the
start (docs/validation.md, 'Adam's coordinates', third follow-up).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from nqm import adam, linear_decay, validation
from nqm.adam_tuning import BETA1, BETA2
from nqm.curve import ScalingCurve
from nqm.problem import NQMConfig, Problem
from nqm.scaling import analyse_curve
from nqm.tuning import SearchSpace, tune_curve
from realnets.validation.bootstrap import fitted_nqm
from realnets.validation.reconciliation import headline
from realnets.validation.settings import NQM_FAMILY, ValidationConfig
from realnets.validation.targets import (StepMatch, betas_inside, nqm_optimizer,
                                         step_matched_target)


@dataclass(frozen=True)
class SwappedPrediction:
    """The calibrated NQM of one report tuned as `family`.

    Attributes:
      family: NQM optimizer family ('sgd', 'momentum' or 'adam').
      space: its search space (learning rate; 1 - momentum or 1 - b1).
      target: the step-matched target for this family (NQM loss above its minimum).
      batch_sizes, steps: the tuned curve, steps to target per batch size (None: not reached).
      b_crit, s_min: the fit S(B) = S_min (1 + B_crit / B) (McCandlish et al. 2018, eq. 2.11);
        None when it could not be fitted.
      schedule: 'constant' (the rate tuned constant) or 'linear_decay' (`nqm.linear_decay`).
      start_scale: the factor every start second moment E theta_i^2 was multiplied by (1: the
        fitted start).
      initial_loss: the NQM's expected loss at its start, 1/2 sum_i h_i E theta_i^2 (loss above
        its minimum), after that scaling.
      curve: the tuned ScalingCurve itself (every point's metaparameters; not in `to_dict`).
      problem: the NQM it was tuned on, target included (not in `to_dict`).
    """

    family: str
    space: SearchSpace
    target: float
    batch_sizes: tuple[int, ...]
    steps: tuple[int | None, ...]
    b_crit: float | None
    s_min: float | None
    schedule: str = "constant"
    start_scale: float = 1.0
    initial_loss: float | None = None
    curve: ScalingCurve | None = field(default=None, repr=False, compare=False)
    problem: Problem | None = field(default=None, repr=False, compare=False)

    @property
    def final_lr_fractions(self) -> tuple[float | None, ...] | None:
        """With a decay, the tuned final fraction f per batch size; None at a constant rate."""
        if self.schedule == "constant" or self.curve is None:
            return None
        return tuple(p.final_lr_fraction for p in self.curve.points)

    @property
    def label(self) -> str:
        start = "" if self.start_scale == 1.0 else f", start x {self.start_scale:g}"
        return (f"{self.family} (swapped in{start})" if self.schedule == "constant"
                else f"{self.family}, linear decay{start}")

    def _decay_point(self, i: int) -> dict:
        """With a decay, point i's tuned metaparameters (a, b or b1, f); else nothing."""
        if self.final_lr_fractions is None:
            return {}
        p = self.curve.points[i]
        return {"learning_rate": p.learning_rate, "momentum": p.momentum,
                "final_lr_fraction": p.final_lr_fraction}

    def to_dict(self) -> dict:
        return {"family": self.family, "schedule": self.schedule, "target": self.target,
                "space": {"learning_rate": list(self.space.learning_rate),
                          "one_minus_momentum": list(self.space.one_minus_momentum)},
                "points": [{"batch_size": b, "steps": s, **self._decay_point(i)}
                           for i, (b, s) in enumerate(zip(self.batch_sizes, self.steps))],
                "b_crit": self.b_crit, "s_min": self.s_min, "start_scale": self.start_scale,
                "initial_loss": self.initial_loss}


def own_prediction(doc: dict) -> dict:
    """The report's headline prediction (`reconciliation.headline`), which must follow the
    step-matched rule: {"checkpoint", "nqm" (the fitted record), "match" (its step match),
    "tuned" (its tuned curve's summary)}."""
    checkpoint, rule, record, prediction = headline(doc)
    match, tuned = record.get("step_match"), prediction.get("tuned")
    if rule != "step_matched" or not match or not tuned or not record.get("nqm"):
        raise ValueError(f"report of {doc['workload']!r}: no step-matched headline prediction at "
                         f"its {checkpoint!r} checkpoint to swap the optimizer of")
    return {"checkpoint": checkpoint, "nqm": record["nqm"], "match": match, "tuned": tuned}


def comparison_rows(doc: dict, *swapped: SwappedPrediction) -> list[dict]:
    """The report's own headline and the swapped predictions side by side, one row each:
    {"optimizer", "target", "b_crit", "ratio" (to the measured B_crit), "s_min", "steps"}."""
    own = own_prediction(doc)
    measured = doc["measured"]["fit"]["b_crit"]
    fit = own["tuned"]["fit"]
    rows = [{"optimizer": f"{own['match']['family']} (the rule's)",
             "target": own["match"]["target"], "b_crit": fit["b_crit"], "s_min": fit["s_min"],
             "steps": [p["steps"] for p in own["tuned"]["points"]]},
            *({"optimizer": w.label, "target": w.target, "b_crit": w.b_crit, "s_min": w.s_min,
               "steps": list(w.steps)} for w in swapped)]
    for r in rows:
        r["ratio"] = r["b_crit"] / measured if r["b_crit"] is not None and measured else None
    return rows


def scaled_start(config: NQMConfig, scale: float) -> NQMConfig:
    """`config` (with caller arrays) with every start second moment E theta_i^2 times `scale`."""
    if scale == 1.0:
        return config
    return dataclasses.replace(config, init_second_moments=tuple(
        (scale * np.asarray(config.init_second_moments)).tolist()))


def swapped_prediction(doc: dict, family: str, space: SearchSpace, decay: bool = False,
                       start_scale: float = 1.0,
                       ) -> SwappedPrediction | tuple[SwappedPrediction, SwappedPrediction]:
    """The report's calibrated NQM (headline checkpoint) tuned as `family` in `space`, with its
    target matched in steps at the report's reference point, over the headline curve's batch
    sizes and step budget.

    Args:
      doc: a validation document (`ValidationDocument.to_dict()`).
      family: 'sgd', 'momentum' or 'adam' (the NQM families of `settings.NQM_FAMILY`).
      space: the search space of that family's metaparameters.
      decay: also tune a linear decay from the constant curve (any family), at the same
        target, rates within `space.learning_rate`, b or b1 from the decay tuner's list inside
        `space.one_minus_momentum` (`decay_search`). Refused in one line when its step-by-step
        work would exceed `nqm.linear_decay.MAX_WORK`: before any tuning on the report's
        headline steps (exact for the report's own family, an estimate for another), and after
        the constant tuning on that curve's own steps.
      start_scale: every start second moment E theta_i^2 of the fitted NQM multiplied by this
        (> 0) before the step match and the tuning (a diagnostic of the start; 1: as fitted).

    Returns:
      The constant-rate prediction, or (constant, decay) with `decay`.
    """
    families = sorted(set(NQM_FAMILY.values()))
    if family not in families:
        raise ValueError(f"optimizer must be one of {', '.join(families)}, got {family!r}")
    start_scale = validation.check_positive("start-scale", start_scale)
    h = own_prediction(doc)
    match = StepMatch(family=family, batch_size=int(h["match"]["batch_size"]),
                      steps=int(h["match"]["steps"]), space=space)
    config = scaled_start(fitted_nqm(h["nqm"], target=1.0), start_scale)
    target, _ = step_matched_target(config, match)
    batch_sizes = tuple(int(p["batch_size"]) for p in h["tuned"]["points"])
    matched = dataclasses.replace(config, target=target)
    problem = matched.problem()
    if decay:
        linear_decay.check_work(problem, family, [p["steps"] for p in h["tuned"]["points"]],
                                "decay (estimated on the report's headline steps)")
    curve = tune_curve(matched, nqm_optimizer(family, space),
                       batch_sizes, max_steps=int(doc["settings"]["nqm_max_steps"]), space=space,
                       certify=ValidationConfig.from_dict(doc["settings"]).certify)
    start = {"start_scale": start_scale, "initial_loss": problem.initial_loss(),
             "problem": problem}
    constant = _prediction(family, space, target, curve, **start)
    if not decay:
        return constant
    linear_decay.check_work(problem, family, [p.steps for p in curve.points])
    decayed = linear_decay.tune_decay_curve(problem, family, curve, decay_search(family, space),
                                            learning_rate_bounds=space.learning_rate)
    return constant, _prediction(family, space, target, decayed, "linear_decay", **start)


def monte_carlo_steps(swapped: SwappedPrediction, runs: int, seed: int = 0,
                      ) -> tuple[int | None, ...]:
    """Real Adam at the swapped Adam curve's tuned points, by Monte Carlo on the NQM it was tuned on
    (`nqm.adam.simulate_losses`: running averages and bias corrections, b2 = BETA2 and
    epsilon 0 as the tuner's): per batch size the first step whose mean loss over `runs` runs
    is at or below the curve's target, looked for up to twice the mean field's steps there
    (None: not by then, or the mean field did not reach the target). A check of the mean-field
    approximation where the prediction is made (docs/validation.md, 'Adam's coordinates',
    fourth follow-up)."""
    if swapped.family != "adam" or swapped.curve is None or swapped.problem is None:
        raise ValueError("monte-carlo: only for a swapped Adam curve (--optimizer adam)")
    runs = validation.check_whole("monte-carlo", runs, 2)
    out = []
    for p in swapped.curve.points:
        if p.steps is None:
            out.append(None)
            continue
        result = adam.simulate_losses(swapped.problem, 2 * int(p.steps), p.batch_size,
                                      p.learning_rate,
                                      beta1=p.momentum, beta2=BETA2, epsilon=0.0, runs=runs,
                                      seed=seed)
        below = np.flatnonzero(result.mean_T <= swapped.target)
        out.append(int(below[0]) if below.size else None)
    return tuple(out)


def decay_search(family: str, space: SearchSpace) -> linear_decay.DecaySearch:
    """The decay tuner's candidates kept inside the sweep's space: b (momentum) or b1 (Adam)
    from its default list within 1 - `space.one_minus_momentum` (the constant optimum's own is
    always tried too); SGD tries b = 0 only."""
    if family == "sgd":
        return linear_decay.DecaySearch()
    default = linear_decay.MOMENTUM_BETAS if family == "momentum" else BETA1
    return linear_decay.DecaySearch(betas=betas_inside(default, space)
                                    or (1.0 - space.one_minus_momentum[1],))


def _prediction(family, space, target, curve, schedule="constant", start_scale=1.0,
                initial_loss=None, problem=None) -> SwappedPrediction:
    fit = analyse_curve(curve).fit
    return SwappedPrediction(
        family=family, space=space, target=float(target),
        batch_sizes=tuple(int(p.batch_size) for p in curve.points),
        steps=tuple(p.steps for p in curve.points),
        b_crit=None if fit.b_crit is None else float(fit.b_crit),
        s_min=None if fit.s_min is None else float(fit.s_min), schedule=schedule,
        start_scale=float(start_scale), initial_loss=initial_loss, curve=curve, problem=problem)

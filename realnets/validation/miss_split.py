"""Where the headline's miss sits: rule 1's predicted / measured B_crit split exactly into four
measured factors (docs/prediction_rule.md, "2026-11-27 (session 33)").

With P rule 1's B_crit, M the measured one, B_ref and S_q the tuned NQM's steps there (its matched
point), n_q the tuned NQM's steps to the same target without noise, S_fb = S_fb^N the network's
whole-set full-batch steps and S~ the median of the reference trial's reruns (both from
two_ends.json):

    P / M = shape_nqm x noise_free x reference x shape_net
    shape_nqm  = P / (B_ref (S_q / n_q - 1))
    noise_free = (S_q / n_q - 1) / (S_q / S_fb - 1)
    reference  = (S_q / S_fb - 1) / (S~ / S_fb - 1)
    shape_net  = B_ref (S~ / S_fb - 1) / M            (B_2pt' / M)

n_q is the first step count at which the lowest noise-free E[L] over the search space
(`nqm.lowest_loss`: a grid, then Nelder-Mead) reaches the target: the definition of a tuned
step count, by the engine's grid search (not exhaustive either). The tuner's own answers bound the scan from
above: the setting tuned at B = N alone, and the winners of the tuned curve run without noise
(for SGD and momentum a setting's noise-free loss is never above its noisy one, so n_q <= S_q(B)
at every B). The tuner's local search fell short of that minimum on momentum runs, by up to 5
steps in 11 (docs/prediction_rule.md, session 37).

`factors` is the identity (pure); `nqm_ends` the NQM's side for one NQM; `run_split` the record for
one report (the fitted NQM, its bootstrap draws, the reruns' percentiles); `table` the Markdown.
`python -m realnets miss-split DIR` writes DIR/miss_split.json.
"""

from __future__ import annotations

import math
import time

import numpy as np

from nqm import adam as nqm_adam
from nqm.crossing import NOT_REACHED, steps_to_target
from nqm.lowest_loss import first_steps_at_target
from nqm.moments import dynamics
from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, tune_curve
from realnets.validation.bootstrap import bootstrap_configs, fitted_nqm
from realnets.validation.reconciliation import headline
from realnets.validation.settings import NQM_FAMILY, ValidationConfig
from realnets.validation.targets import StepMatch, nqm_optimizer, nqm_search_space
from realnets.validation.two_ends import noise_free_batch
from realnets.workloads.search_space import TrialSearchSpace

FACTORS = ("shape_nqm", "noise_free", "reference", "shape_net")
# the NQM's side (over its bootstrap draws) and the network's (over the reruns' percentiles)
NQM_SIDE, NETWORK_SIDE = FACTORS[:2], FACTORS[2:]


def factors(b_ref: float, p: float | None, s_q: float | None, n_q: float | None,
            s_fb: float | None, s_tilde: float | None, m: float) -> dict:
    """The four factors of P / M (module docstring), each None where undefined.

    Args:
      b_ref: the reference batch size (examples).
      p, m: predicted and measured B_crit (examples).
      s_q, n_q: the NQM's steps at B_ref and without noise, to rule 1's target.
      s_fb, s_tilde: the network's whole-set full-batch steps and the reruns' median (or another
        percentile) at B_ref; None: not measured, or infinite (reruns not at the goal).
    Returns {name: value or None for name in FACTORS, "undefined": {name: why}}."""
    bends = {"nqm": None if None in (s_q, n_q) or not n_q else s_q / n_q - 1,
             "matched": None if None in (s_q, s_fb) or not s_fb else s_q / s_fb - 1,
             "network": None if None in (s_tilde, s_fb) or not s_fb else s_tilde / s_fb - 1}
    reasons = {"nqm": "S_q <= n_q (the NQM has no noise penalty at B_ref)"
                      if None not in (s_q, n_q) else
                      "the NQM does not reach its target at B_ref or without noise within its "
                      "step budget",
               "matched": "S_q <= S_fb^N (the matched steps are not above the network's "
                          "full-batch steps)" if None not in (s_q, s_fb) else
                          "S_fb^N not measured (no whole-set descent reached the target) or no "
                          "S_q",
               "network": "S~ <= S_fb^N (no bend above B_ref)" if None not in (s_tilde, s_fb)
                          else "S~ infinite (reruns not at the goal) or S_fb^N not measured"}
    needs = {"shape_nqm": ("nqm",), "noise_free": ("nqm", "matched"),
             "reference": ("matched", "network"), "shape_net": ("network",)}
    ok = {k: v is not None and v > 0 for k, v in bends.items()}
    nqm, matched, network = (bends[k] if ok[k] else None for k in ("nqm", "matched", "network"))
    out = {"shape_nqm": None if p is None or nqm is None else p / (b_ref * nqm),
           "noise_free": None if nqm is None or matched is None else nqm / matched,
           "reference": None if matched is None or network is None else matched / network,
           "shape_net": None if network is None else b_ref * network / m}
    out["undefined"] = {
        name: "; ".join([reasons[b] for b in needs[name] if not ok[b]]
                        or ["the NQM's fit has no B_crit"])
        for name in FACTORS if out[name] is None}
    return out


def largest(split: dict) -> str | None:
    """The factor with the largest |log| among the defined ones (None when none is)."""
    defined = {k: split[k] for k in FACTORS if split.get(k) is not None}
    return max(defined, key=lambda k: abs(math.log(defined[k]))) if defined else None


def noise_free_steps(config: NQMConfig, spec: OptimizerSpec, winners: list[tuple[float, float]],
                     max_steps: int) -> list[int | None]:
    """Steps to `config.target` without noise (at `two_ends.noise_free_batch`) of each
    (learning_rate, momentum) in `winners` (momentum: b1 for Adam, ignored for SGD); None where
    not reached within max_steps. Adam by its mean-field model at the tuner's settings."""
    if not winners:
        return []
    problem = config.problem()
    lr = np.array([w[0] for w in winners], dtype=float)
    mom = np.array([w[1] for w in winners], dtype=float)
    batch = np.full(lr.shape, float(noise_free_batch(config)))
    if spec.name == "adam":
        steps = nqm_adam.steps_to_target(problem, batch, lr, mom, spec.beta2, 0.0,
                                         max_steps=max_steps)   # the tuner's epsilon
    else:
        steps = steps_to_target(dynamics(problem, batch, lr, mom if spec.name == "momentum"
                                         else 0.0, precond_power=spec.precond_power),
                                problem.target, max_steps)
    return [None if s == NOT_REACHED or s > max_steps else int(s) for s in steps]


def nqm_ends(config: NQMConfig, family: str, space, batch_sizes, b_ref: int,
             max_steps: int, tuned_curve: dict | None = None, certify: bool = False) -> dict:
    """The NQM's side of the split for one NQM with its target set: {"b_crit" (P: the fit of its
    tuned S(B) over `batch_sizes`), "s_q" (its tuned steps at b_ref), "n_q" (its fewest steps
    without noise, at `two_ends.noise_free_batch`: module docstring), "n_q_alone" (the tuner's
    at B = N alone), "n_q_winners" (the fewest of the curve's winners run without noise, or
    None), "n_q_from" (that winner's batch size, or None), "noise_free_batch"}. With
    `tuned_curve` (a stored `predictions.curve_summary`), P, S_q and the winners are read from
    it instead of tuned again. `certify`: as `nqm.tuning.tune_curve`'s (the validation
    setting)."""
    spec = nqm_optimizer(family, space)
    if tuned_curve is None:
        curve = tune_curve(config, spec, batch_sizes, max_steps=max_steps, space=space,
                           certify=certify)
        p = analyse_curve(curve).fit.b_crit
        points = [{"batch_size": pt.batch_size, "steps": pt.steps,
                   "learning_rate": pt.learning_rate, "momentum": pt.momentum}
                  for pt in curve.points]
    else:
        p = tuned_curve["fit"]["b_crit"]
        points = tuned_curve["points"]
    s_q = {int(pt["batch_size"]): pt["steps"] for pt in points}.get(int(b_ref))
    nf = noise_free_batch(config)
    alone = tune_curve(config, spec, [nf], max_steps=max_steps, space=space,
                       certify=certify).points[0].steps
    won = [pt for pt in points if pt.get("steps") is not None
           and pt.get("learning_rate") is not None]
    free = noise_free_steps(config, spec, [(pt["learning_rate"], pt.get("momentum") or 0.0)
                                           for pt in won], max_steps)
    by_winner = [(steps, int(pt["batch_size"])) for pt, steps in zip(won, free)
                 if steps is not None]
    n_w, n_from = min(by_winner) if by_winner else (None, None)
    known = [n for n in (alone, n_w) if n is not None]
    n_q = (first_steps_at_target(config.problem(), spec, float(nf), min(known), space)
           if known else None)
    return {"b_crit": p, "s_q": s_q, "n_q": n_q,
            "n_q_alone": alone, "n_q_winners": n_w, "n_q_from": n_from, "noise_free_batch": nf}


def _percentiles(values) -> dict:
    v = np.array([x for x in values if x is not None], float)
    if v.size == 0:
        return {"16": None, "84": None, "count": 0}
    return {"16": float(np.percentile(v, 16)), "84": float(np.percentile(v, 84)),
            "count": int(v.size)}


def run_split(doc: dict, two_ends_record: dict, log=None) -> dict:
    """The split for one validation document (`ValidationDocument.to_dict()`) and its two_ends
    record: the JSON-ready record written to miss_split.json (docs/design.md)."""
    say = log or (lambda _: None)
    t0 = time.perf_counter()
    checkpoint, rule, record, prediction = headline(doc)
    if rule != "step_matched" or not prediction.get("tuned") or "nqm" not in record:
        raise ValueError(f"report of {doc['workload']!r}: no step-matched headline prediction "
                         f"at its {checkpoint!r} checkpoint to split")
    vcfg = ValidationConfig.from_dict(doc["settings"])
    sweep = doc["sweep_config"]
    family = NQM_FAMILY[sweep["optimizer"]]
    space = nqm_search_space(TrialSearchSpace.from_dict(sweep["search"]))
    tuned = prediction["tuned"]
    batch_sizes = [int(pt["batch_size"]) for pt in tuned["points"]]
    b_ref, m = int(two_ends_record["b_ref"]), two_ends_record["compared"]["measured"]["b_crit"]
    s_fb = two_ends_record["full_set"]["steps"]
    pct = two_ends_record["reruns"]["percentiles"]
    target = prediction["target"]
    say(f"{doc['workload']}: the fitted NQM without noise")
    fitted = nqm_ends(fitted_nqm(record["nqm"], target), family, space, batch_sizes, b_ref,
                      vcfg.nqm_max_steps, tuned_curve=tuned, certify=vcfg.certify)
    match = StepMatch.from_record(record["step_match"], space)
    draws = []
    for i, config in enumerate(bootstrap_configs(record["nqm"], target, vcfg, match)):
        if config is None:
            draws.append(None)
            continue
        say(f"{doc['workload']}: bootstrap NQM {i + 1} of {vcfg.bootstrap}")
        ends = nqm_ends(config, family, space, batch_sizes, b_ref, vcfg.nqm_max_steps,
                        certify=vcfg.certify)
        draws.append({**ends, "target": config.target,
                      **{k: v for k, v in factors(b_ref, ends["b_crit"], ends["s_q"],
                                                  ends["n_q"], s_fb, pct["50"], m).items()
                         if k in NQM_SIDE}})
    split = {"workload": doc["workload"], "optimizer": sweep["optimizer"],
              "checkpoint": checkpoint, "b_ref": b_ref, "predicted": fitted["b_crit"],
              "target": target, "s_ref": two_ends_record["s_ref"], "s_q": fitted["s_q"],
              "n_q": fitted["n_q"], "n_q_alone": fitted["n_q_alone"],
              "n_q_winners": fitted["n_q_winners"], "n_q_from": fitted["n_q_from"],
              "noise_free_batch": fitted["noise_free_batch"], "s_fb": s_fb, "s_tilde": pct,
              "intervals": {k: _percentiles((d or {}).get(k) for d in draws) for k in NQM_SIDE},
              "draws": draws}
    return {**with_measured(split, m), "seconds": time.perf_counter() - t0}


def with_measured(record: dict, m: float) -> dict:
    """A split record (`run_split`'s, or one without its measured parts) held against the
    measured B_crit `m` (examples): measured, ratio, within_2x, the four factors at the reruns'
    median, undefined, largest, by_percentile and the network side's intervals set from `m`. The
    NQM side (its factors' draws and intervals) does not involve M and is kept, so a sweep
    resumed with more trials (`realnets.validation.remeasure`) needs no NQM run again."""
    b_ref, p, pct = record["b_ref"], record["predicted"], record["s_tilde"]

    def at(s_tilde):
        return factors(b_ref, p, record["s_q"], record["n_q"], record["s_fb"], s_tilde, m)

    point = at(pct["50"])
    by_percentile = {q: {k: v for k, v in at(pct[q]).items() if k in NETWORK_SIDE}
                     for q in ("16", "84")}
    intervals = {**{k: record["intervals"][k] for k in NQM_SIDE},
                 **network_intervals(by_percentile)}
    ratio = p / m if p is not None and m else None
    return {**record, "measured": m, "ratio": ratio,
            "within_2x": ratio is not None and 0.5 <= ratio <= 2.0,
            "factors": {k: point[k] for k in FACTORS}, "undefined": point["undefined"],
            "intervals": intervals, "largest": largest(point), "by_percentile": by_percentile}


def network_intervals(by_percentile: dict) -> dict:
    """The 16-84% ranges of the network's factors from their values at the reruns' 16th and 84th
    percentiles ({"16": {"reference", "shape_net"}, "84": ...}): reference falls as S~ grows,
    shape_net rises, so reference's low end comes from the 84th percentile and shape_net's from
    the 16th. An end whose percentile gives no value (S~ infinite, or no bend) is None: unknown
    (reference's low end tends to 0 and shape_net's high end to infinity as S~ grows)."""
    return {"reference": {"16": by_percentile["84"]["reference"],
                          "84": by_percentile["16"]["reference"]},
            "shape_net": {"16": by_percentile["16"]["shape_net"],
                          "84": by_percentile["84"]["shape_net"]}}


def table(records: list[dict], labels: list[str] | None = None) -> str:
    """The miss_split records as a Markdown table (docs/validation.md); `labels` name the rows'
    workloads (default: each record's own; `summary.workload_labels` names the goal where a
    workload and optimizer come twice)."""
    def g(x, digits=3):
        return "-" if x is None else f"{x:.{digits}g}"

    def factor(rec, k):
        iv = rec["intervals"][k]      # an end without a value is unknown ('?')
        ends = ["?" if iv[q] is None else g(iv[q]) for q in ("16", "84")]
        return f"{g(rec['factors'][k])} ({ends[0]} .. {ends[1]})"

    header = ("| workload | optimizer | rule 1 / measured | S_q | n_q (NQM, no noise) | S_fb^N "
              "(network, full batch) | S~_ref | shape_nqm (16-84%) | noise_free (16-84%) | "
              "reference (16-84%) | shape_net (16-84%) | largest |")
    lines = [header, "|---" * 12 + "|"]
    for rec, label in zip(records, labels or [r["workload"] for r in records]):
        lines.append(
            f"| {label} | {rec['optimizer']} | {g(rec['ratio'])} | {g(rec['s_q'])} | "
            f"{g(rec['n_q'])} | {g(rec['s_fb'])} | {g(rec['s_tilde']['50'])} | "
            + " | ".join(factor(rec, k) for k in FACTORS) + f" | {rec['largest'] or '-'} |")
    return "\n".join(lines)

"""The comparison table of a validation document: every estimate of B_crit beside the measured one."""

from __future__ import annotations

import math

from nqm.curve import ScalingCurve
from nqm.scaling import Bound, b_crit_bound
from realnets.sweeps.curve import curve_document
from realnets.validation.settings import RULE_2, TARGET_LABELS, TARGET_RULES


def measured_summary(curve: ScalingCurve) -> dict:
    """The measured curve (points without their trials), its fit, its B_crit interval (over
    resampled trials, or over reruns where the trials stopped early), the interval over reruns
    of the best trials with other seeds when there are any (`repeats`, else None), robustness
    checks, regimes and noise scale."""
    doc = curve_document(curve)
    points = [{"batch_size": p.batch_size, "steps": p.steps, "learning_rate": p.learning_rate,
               "momentum": p.momentum} for p in doc.points]
    return {"points": points, "fit": doc.fit, "regimes": doc.regimes,
            "interval": doc.b_crit_resampled, "repeats": doc.b_crit_repeats,
            "robustness": doc.robustness,
            "b_simple_pooled": doc.noise_scale["b_simple"],
            "per_point_b_simple": doc.noise_scale["per_point_b_simple"]}


def points_bound(points: list[dict] | None) -> Bound | None:
    """`nqm.scaling.b_crit_bound` of a document's curve points ({"batch_size", "steps"}, steps
    None where not reached)."""
    if not points:
        return None
    return b_crit_bound([p["batch_size"] for p in points], [p["steps"] for p in points])


def value_and_error(x):
    """(value, uncertainty) of a `measured.measured_value` record, or (x, None) of a plain number."""
    if isinstance(x, dict):
        return x.get("value"), x.get("uncertainty")
    return x, None


def ratio_se(b_simple, gradient: dict):
    """First-order standard error of tr(Sigma) / |G|^2 from those of numerator and denominator
    (treated as independent)."""
    if b_simple is None or not gradient:
        return None
    t, t_se = value_and_error(gradient.get("trace_cov"))
    g, g_se = value_and_error(gradient.get("grad_sq_norm"))
    if None in (t, t_se, g, g_se) or t <= 0 or g <= 0:
        return None
    return abs(b_simple) * math.hypot(t_se / t, g_se / g)


def unbounded_note(name: str, denominator: str, record) -> str:
    """Why a baseline (B_simple, B_noise) has no number where its `denominator` (|G|^2 or
    G^T H G, a `measured_value` record or a plain number) was measured but is not positive:
    the mean gradient is lost in its noise and the ratio unbounded. '' where the denominator is
    positive (the baseline has its number) or missing (not measured)."""
    value, se = value_and_error(record)
    if value is None or value > 0:
        return ""
    err = "" if se is None else f" +- {se:.2g}"
    return (f"{denominator} estimated at {value:.2g}{err}, not positive: the mean gradient is "
            f"not distinguishable from zero, so {name} is unbounded")


def target_rules(doc: dict) -> list[str]:
    """The document's target rules, its headline rule (settings "target_rule") first."""
    headline = doc["settings"].get("target_rule", "train_loss")
    return [headline] + [r for r in TARGET_RULES if r != headline]


def comparison(doc: dict) -> list[dict]:
    """The table: every B_crit estimate of one workload beside the measured one.

    Rows: workload, quantity, checkpoint, value, uncertainty, ratio (value / measured B_crit),
    note. The measured row comes first.
    """
    measured = doc["measured"]["fit"]["b_crit"]
    name = doc["workload"]
    rows = [{"workload": name, "quantity": "measured B_crit (fit)", "checkpoint": None,
             "value": measured, "uncertainty": None, "ratio": 1.0 if measured else None,
             "note": f"S(B) = S_min (1 + B_crit / B) fitted to the sweep; cbs20 "
                     f"{doc['measured']['regimes']['cbs20']}"}]

    def add(quantity, checkpoint, value, uncertainty=None, note=""):
        ratio = value / measured if value is not None and measured else None
        rows.append({"workload": name, "quantity": quantity, "checkpoint": checkpoint,
                     "value": value, "uncertainty": uncertainty, "ratio": ratio, "note": note})

    rules = target_rules(doc)
    for ckpt in doc["settings"]["checkpoints"]:
        c = doc["checkpoints"].get(ckpt) or {}
        for rule in rules:
            pred = (c.get("predictions") or {}).get(rule) or {}
            why = (c.get("target_errors") or {}).get(rule) or c.get("error", "no NQM")
            boot = pred.get("bootstrap") or {}
            tuned = pred.get("tuned")
            label = f" [{TARGET_LABELS[rule]}]"
            add("NQM tuned B_crit" + label, ckpt, tuned["fit"]["b_crit"] if tuned else None,
                (boot.get("tuned") or {}).get("sd"),
                note=f"calibrated NQM, {pred.get('family', '-')} tuned per batch size, target "
                     f"{pred['target']:.4g}" if tuned else why)
            if rule == RULE_2:      # the tuned curve only, by the rule: no row of nans
                continue
            matched = pred.get("search_matched")
            add("NQM at the sweep's trials B_crit" + label, ckpt,
                matched["fit"]["b_crit"] if matched else None,
                (boot.get("search_matched") or {}).get("sd"),
                note="calibrated NQM with the sweep's metaparameters and budget" if matched
                else pred.get("search_matched_note") or why)
        noise = c.get("b_noise") or {}
        value, err = value_and_error(noise.get("b_noise"))
        add("B_noise = tr(H Sigma) / (G^T H G)", ckpt, value, err,
            note=unbounded_note("B_noise", "G^T H G", noise.get("grad_h_grad"))
            or "Hessian-vector products on the calibration sample")
        grad = c.get("gradient") or {}
        value, _ = value_and_error(grad.get("b_simple"))
        add("B_simple = tr(Sigma) / ‖G‖²", ckpt, value, ratio_se(value, grad),
            note=unbounded_note("B_simple", "|G|^2", grad.get("grad_sq_norm"))
            or ("per-example gradients on the calibration sample" if grad else ""))
    add("B_simple (sweep, moving averages)", None, doc["measured"]["b_simple_pooled"],
        note="measured during training, best trials pooled over batch sizes (weights B^2)")
    ref = doc.get("reference")
    if ref:
        add("the workload's own NQM, tuned B_crit", None, ref["tuned"]["fit"]["b_crit"],
            note="the exact NQM the task was built from, same optimizer family and target")
        if ref.get("search_matched"):
            add("the workload's own NQM at the sweep's trials B_crit", None,
                ref["search_matched"]["fit"]["b_crit"],
                note="the exact NQM with the sweep's metaparameters and budget")
    return rows

"""What `python -m realnets report` prints: the measured curve, its analysis (the same function
as the NQM's), the noise scale, and the trials behind each point; as a table, JSON or CSV."""

from __future__ import annotations

import csv
import io
import math

from nqm.curve import ScalingCurve, to_json
from nqm.scaling import b_crit_bound
from realnets.sweeps.curve import curve_document
from realnets.sweeps.records import CurveDocument
from realnets.sweeps.robustness import (FEW_STEPS, SEARCH_CHECKS, SHORTFALL_CHECK,
                                        TRUST_MIN_STEPS, few_steps, near_goal)

COLUMNS = ("batch_size", "steps", "learning_rate", "momentum", "efficiency", "regime",
           "reached", "not_reached", "infeasible", "b_simple", "edge")


def rows(doc: CurveDocument) -> list[dict]:
    """One row per batch size of a curve document (see `realnets.sweeps.curve.curve_document`)."""
    out = []
    for i, p in enumerate(doc.points):
        statuses = [t["status"] for t in p.trials]
        out.append({"batch_size": int(p.batch_size), "steps": p.steps,
                    "learning_rate": p.learning_rate, "momentum": p.momentum,
                    "efficiency": doc.efficiency[i], "regime": doc.regime[i],
                    "reached": statuses.count("COMPLETE"),
                    "not_reached": statuses.count("INCOMPLETE"),
                    "infeasible": statuses.count("INFEASIBLE"),
                    "b_simple": doc.noise_scale["per_point_b_simple"][i],
                    "edge": ",".join(p.edge)})
    return out



def fmt(v) -> str:
    """A number as the reports print it: 4 significant digits, "-" for None or not finite."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else "-"
    return str(v)


def format_goal(v) -> str:
    """The goal as given (0.04) or as the pilot rule computed it, to 6 significant digits."""
    return f"{v:.6g}" if isinstance(v, float) else fmt(v)


def runs_drawn(r: dict) -> str:
    """The runs each batch size draws from in `b_crit_over_repeats`' dict `r`: '9', or '5-9'
    when batch sizes differ (batch sizes not at the goal left out)."""
    runs = sorted({n for n in r["runs"] if n})
    return f"{runs[0]}-{runs[-1]}" if len(runs) > 1 else f"{runs[0]}"


def _over_seeds(r: dict | None) -> str:
    """The reruns' median curve's B_crit interval over their seeds drawn again, as ', 16-84% ..'."""
    if not r:
        return ""
    if r.get("p16") is None:
        why = r.get("note") or f"{r['fitted']} of {r['resamples']} draws fitted"
        return f", no interval over seeds: {why}"
    return (f", 16-84% over the seeds drawn again {fmt(r['p16'])} .. {fmt(r['p84'])}")


def _resampled_line(r: dict | None) -> str:
    if r is not None and not r["available"] and r.get("method") == "repeats":
        return f"B_crit over reruns of the best trials: not available ({r['note']})"
    if r is None or not r["available"]:
        return f"B_crit over resampled trials: not available ({r['note'] if r else 'no trials'})"
    if r.get("method") == "repeats":
        line = (f"B_crit over reruns of the best trials with other seeds ({runs_drawn(r)} runs per "
                f"batch size): median {fmt(r['median'])}, 16-84% {fmt(r['p16'])} .. "
                f"{fmt(r['p84'])} ({r['fitted']} of {r['resamples']} draws fitted)")
        if "rerun_median_steps" not in r:
            return line
        line += ("\nthe reruns' median steps per batch size: "
                 + " ".join(fmt(m) for m in r["rerun_median_steps"])
                 + f"  (B_crit of that curve {fmt(r['rerun_median_b_crit'])}"
                 + _over_seeds(r.get("rerun_median_resampled")) + ")")
        counts = r.get("rerun_median_by_seeds") or []
        if len(counts) > 1:
            line += ("\nB_crit of the reruns' median curve from the first K seeds: "
                     + "  ".join(f"K={c['seeds']}: {fmt(c['b_crit'])}" for c in counts))
        return line
    return (f"B_crit over resampled trials: median {fmt(r['median'])}, 16-84% "
            f"{fmt(r['p16'])} .. {fmt(r['p84'])} ({r['fitted']} of {r['resamples']} "
            f"resamples fitted)")


def search_caution() -> str:
    """What the interval over resampled trials leaves out, with the check that measured it
    (`robustness.SHORTFALL_CHECK`); `report` and the app say it beside that interval."""
    c = SHORTFALL_CHECK
    return (f"the interval over resampled trials does not count what a larger search would "
            f"find: on {c['checked']} sweeps checked, B_crit from {c['to_trials']} trials lay "
            f"outside the {c['trials']}-trial interval on {c['outside']}, up to "
            f"x{c['largest']:.2f} from the {c['trials']}-trial value (docs/trainer.md, 'How many "
            f"trials')")


def search_line(search: dict) -> str:
    """`robustness.search_range` in words."""
    return (f"a search of {search['to_trials']} trials per batch size would likely "
            f"({search['level']:.0%}) put B_crit in {fmt(search['lo'])} .. {fmt(search['hi'])}"
            f" (x{search['factor']:.3f} either side: {search['to_trials']} trials moved the "
            f"{search['trials']}-trial value less than that on {search_record(search['trials'])}"
            f"; docs/trainer.md)")


def search_check_line(check: dict) -> str:
    """`robustness.search_check` in words."""
    return (f"the search range from the first {check['trials']} trials, {fmt(check['lo'])} .. "
            f"{fmt(check['hi'])}, {'holds' if check['inside'] else 'misses'} B_crit from the "
            f"first {check['to_trials']}, {fmt(check['b_crit'])} (docs/trainer.md)")


def search_record(trials: int) -> str:
    """How the search factor of `trials` did (`robustness.SEARCH_CHECKS`), in words."""
    c = SEARCH_CHECKS[trials]
    most = (f"x{c['largest']:.2f}" if c["largest"] < 100
            else f"x{c['largest']:.2g} where a fit had no bend")
    return (f"{c['within']} of {c['of']} sweeps and {c['held_out_within']} of "
            f"{c['held_out']} held out, up to {most}")


def _robustness_lines(r: dict | None, resampled: dict | None = None) -> list[str]:
    """The robustness lines; `resampled` (`b_crit_resampled`): the shortfall's caution is said
    where that interval resamples trials."""
    if r is None:
        return []
    loo = r["leave_one_out"]
    lines = [f"leave one batch size out: B_crit moves by up to a factor {fmt(loo['max_ratio'])}"
             f"  (fit's RMS log residual {fmt(r['rms_log_residual'])})"]
    if r["trial_count"]:
        lines.append("B_crit from the first K trials per batch size: " + "  ".join(
            f"K={c['trials']}: {fmt(c['b_crit'])}" for c in r["trial_count"])
            + ("  (censored: trials stopped at another's goal)"
               if any(c["censored"] for c in r["trial_count"]) else ""))
    if (resampled or {}).get("available") and resampled.get("method") == "trials":
        lines.append(search_caution())
    if r.get("search"):
        lines.append(search_line(r["search"]))
    if r.get("search_check"):
        lines.append(search_check_line(r["search_check"]))
    edges = r["edges"]
    lines.append("best trial on the search space's edge at B = " + ", ".join(
        f"{e['batch_size']} ({','.join(e['edge'])})" for e in edges) if edges
        else "no best trial on the search space's edge")
    return lines


def _resolution_lines(doc: CurveDocument) -> list[str]:
    """A warning when the curve's steps are too few to resolve B_crit (`robustness.few_steps`)."""
    few = few_steps(doc.points)
    if few is None:
        return []
    return [f"few steps: S(B) = {few[1]} at B = {few[0]}, the smallest batch size reached (under "
            f"{FEW_STEPS}), so one step is over a tenth of S(B) and B_crit rests on a step or "
            "two; a lower goal (--goal) gives a curve to fit"]


# below this many trials at some batch size, a near-goal sweep is told to search more
NEAR_GOAL_TRIALS = 128


def _near_goal_lines(doc: CurveDocument) -> list[str]:
    """A warning when the goal is a few steps away at some batch size (`robustness.near_goal`):
    the two-point estimate's whole-set end will likely fail its condition."""
    near = near_goal(doc.points)
    if near is None:
        return []
    text = (f"near goal: S(B) = {near[1]} at B = {near[0]}, so a whole-set descent will likely "
            f"reach the goal in under {TRUST_MIN_STEPS} steps, too few for the two-point estimate "
            f"(its condition S_fb^N >= {TRUST_MIN_STEPS}: python -m realnets two-point); a lower "
            "goal needs more steps at every batch size, --goal-min-steps floors them at the "
            "smallest only (docs/own_workload.md)")
    if min((len(p.trials) for p in doc.points), default=0) < NEAR_GOAL_TRIALS:
        text += ("; such a sweep's B_crit can also move far with more trials (on two near-goal "
                 "sweeps, 2.3-3.1x from 32 trials to 128, outside the range given for a "
                 "128-trial search: docs/prediction_rule.md, session 50), so resume it with "
                 "--trials "
                 f"{NEAR_GOAL_TRIALS} before leaning on its B_crit")
    return [text]


def _luck_lines(doc: CurveDocument) -> list[str]:
    """A warning where the winners' reruns under other seeds mostly miss the goal (their median
    is None at a batch size the sweep reached): the sweep's steps there are its fastest trial's
    luck, not what the configuration does."""
    r = doc.b_crit_repeats or {}
    medians, runs = r.get("rerun_median_steps"), r.get("runs")
    if not medians or not runs:
        return []
    lucky = [int(p.batch_size) for p, m, n in zip(doc.points, medians, runs)
             if p.steps is not None and m is None and n > 1]
    if not lucky:
        return []
    return ["luck: at B = " + ", ".join(map(str, lucky)) + " half or more of the winner's reruns "
            "under other seeds miss the goal within their cap, so the sweep's steps there are its "
            "fastest trial's luck (a looser goal, reached under most seeds, gives firmer steps)"]


def curve_warnings(doc: CurveDocument) -> list[str]:
    """What makes a measured curve's B_crit weak, one line each (the report prints them; the app
    shows them): too few steps at the smallest batch size, a goal a few steps away at some batch
    size, steps that are the winners' luck."""
    return _resolution_lines(doc) + _near_goal_lines(doc) + _luck_lines(doc)


def _bound_lines(doc: CurveDocument) -> list[str]:
    """The bound on B_crit when the curve has no bend between its batch sizes (else none)."""
    bound = b_crit_bound([p.batch_size for p in doc.points], [p.steps for p in doc.points])
    return [] if bound is None else [bound.describe()]


def format_table(doc: CurveDocument) -> str:
    table = [[fmt(r[c]) for c in COLUMNS] for r in rows(doc)]
    widths = [max(len(c), *(len(t[j]) for t in table)) for j, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(t, widths)) for t in table]
    # a sweep's config.json, or a batch_science curve's provenance (no workload, trials, budget)
    cfg = doc.config
    fit, reg = doc.fit, doc.regimes
    lines += ["",
              f"workload {cfg.get('workload')}  goal {format_goal(cfg.get('goal'))}  optimizer "
              f"{cfg.get('optimizer')}  trials/batch size {cfg.get('trials')}  budget "
              f"{cfg.get('max_steps')} steps",
              f"fit S(B) = S_min (1 + B_crit / B): S_min {fmt(fit['s_min'])}  B_crit "
              f"{fmt(fit['b_crit'])}  R^2 {fmt(fit['r2'])}",
              *_bound_lines(doc),
              *curve_warnings(doc),
              _resampled_line(doc.b_crit_resampled),
              *([_resampled_line(doc.b_crit_repeats)] if doc.b_crit_repeats is not None
                and (doc.b_crit_resampled or {}).get("method") != "repeats" else []),
              *_robustness_lines(doc.robustness, doc.b_crit_resampled),
              f"perfect scaling up to cbs20 = {fmt(reg['cbs20'])}  maximal data parallelism "
              f"from {fmt(reg['maximal_from'])}",
              f"gradient noise scale B_simple (pooled over batch sizes, weights B^2) "
              f"{fmt(doc.noise_scale['b_simple'])}"]
    return "\n".join(lines)


def format_csv(doc: CurveDocument) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    for r in rows(doc):
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()


def render(curve: ScalingCurve, fmt: str) -> str:
    doc = curve_document(curve)
    if fmt == "json":
        return to_json(doc.to_dict(), indent=1)
    if fmt == "csv":
        return format_csv(doc).rstrip("\n")
    return format_table(doc)

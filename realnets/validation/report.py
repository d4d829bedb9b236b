"""report.md of a validation document (`realnets.validation.pipeline.validate`): the
reconciliation (`realnets.validation.reconciliation`) first, then the diagnostic comparison table,
the measured sweep, the calibration run and every fitted number with its uncertainty,
readable without running anything. Pure rendering of `validation.json`; the charts it links are
drawn by `ui.validation_charts`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from realnets import store
from realnets.sweeps.branching import BranchResult, render as render_branches
from realnets.validation.files import side_records
from realnets.validation.quadratic_path import network_shape, steps_text
from realnets.validation.reconciliation import reconciliation, two_point
from realnets.validation.settings import RULE_2, TARGET_LABELS, TARGET_RULES
from realnets.validation.transfer import (BUDGET_FACTOR, DEPARTS_FACTOR, FOLLOWS_FACTOR,
                                          edge_ratios, s_min_split, top_curvatures)
from realnets.workloads.catalog import WORKLOADS

# where `python -m realnets adam-basis DIR` writes its record (read by `write_report`)
ADAM_BASIS_FILE = "adam_basis.json"

RECONCILIATION_CHART = "reconciliation"
STEPS_CHART = "steps"
SPECTRUM_CHART = "spectrum_{}"
PATH_CHART = "quadratic_path"
# the heading of the section `validate --notes` adds (and `rerender` carries over)
NOTES_HEADING = "Where the NQM's assumptions hold and break"


def _fmt(x, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return str(int(x))
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    return f"{v:.{digits}g}" if math.isfinite(v) else "-"


def _pm(measured: dict | None, digits: int = 4) -> str:
    """'value ± uncertainty' of a `measured.measured_value` record (or a bare number)."""
    if measured is None:
        return "-"
    if not isinstance(measured, dict):
        return _fmt(measured, digits)
    value, err = measured.get("value"), measured.get("uncertainty")
    return _fmt(value, digits) + ("" if err is None else f" ± {_fmt(err, 2)}")


def _interval_words(interval: dict) -> str:
    """How the measured B_crit's interval was made, in the words of the report's footnote."""
    if not interval.get("available"):
        return "none: the sweep stopped trials at the first goal"
    if interval.get("method") == "repeats":
        return "16-84% over reruns of each batch size's best trial with other seeds"
    return "16-84% over resampled trials"


def _table(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out


def _span(lo, hi, digits: int = 4) -> str:
    return "-" if lo is None or hi is None else f"{_fmt(lo, digits)} .. {_fmt(hi, digits)}"


RECONCILIATION_HEADER = ["estimate", "B (per example)", "range", "ratio to measured B_crit",
                         "range / measured B_crit", "how"]


def reconciliation_cells(doc: dict, sides: dict | None = None) -> list[list[str]]:
    """The reconciliation as text cells under RECONCILIATION_HEADER: per estimate its B (±
    standard error; '>=' a lower bound), its 16-84% range or spread, both as ratios to the
    measured B_crit, and how it was made (`sides` as `reconciliation`'s)."""
    rows = []
    for r in reconciliation(doc, sides):
        value = ((">= " if r["lower_bound"] else "") + _fmt(r["value"])
                 + ("" if r["se"] is None else f" ± {_fmt(r['se'], 2)}"))
        rows.append([r["estimate"], value, _span(r["lo"], r["hi"]), _fmt(r["ratio"], 3),
                     _span(r["ratio_lo"], r["ratio_hi"], 3), r["note"]])
    return rows


def reconciliation_markdown(doc: dict, sides: dict | None = None) -> list[str]:
    """The reconciliation table (`reconciliation_cells`) in markdown."""
    return _table(RECONCILIATION_HEADER, reconciliation_cells(doc, sides))


MISS_SPLIT_HEADER = ["factor", "value", "16-84%", "what it compares"]
MISS_SPLIT_WHAT = {
    "shape_nqm": "the NQM's S(B) against the hyperbola through its own two ends: P / (B_ref "
                 "(S_q / n_q - 1)); range over the bootstrap NQMs",
    "noise_free": "the NQM's steps without noise against the network's full batch: (S_q / n_q - "
                  "1) / (S_q / S_fb^N - 1); range over the bootstrap NQMs",
    "reference": "the NQM's matched steps at B_ref against the reruns' median: (S_q / S_fb^N - "
                 "1) / (S~_ref / S_fb^N - 1); range with the reruns' 16th and 84th percentiles",
    "shape_net": "the network's S(B) against the hyperbola through its two ends: B_2pt' / "
                 "measured B_crit; range likewise"}


def miss_split_cells(split: dict) -> list[list[str]]:
    """A miss_split record (`realnets.validation.miss_split`) as text cells under
    MISS_SPLIT_HEADER, one row per factor."""
    def span(iv):             # an end without a value is unknown ('?'): S~ infinite, no bend
        lo, hi = ("?" if iv[q] is None else _fmt(iv[q], 3) for q in ("16", "84"))
        return "-" if lo == hi == "?" else f"{lo} .. {hi}"

    return [[k, _fmt(split["factors"][k], 3), span(split["intervals"][k]),
             MISS_SPLIT_WHAT[k] + (f" (undefined: {split['undefined'][k]})"
                                   if k in split.get("undefined", {}) else "")]
            for k in MISS_SPLIT_WHAT]


def miss_split_markdown(split: dict | None) -> list[str]:
    """The section of a miss_split record (nothing without one)."""
    if split is None:
        return []
    return ["## Where the headline's miss sits", "",
            f"`python -m realnets miss-split` (docs/validation.md, 'Where the headline's miss "
            f"sits'): the headline's predicted / measured B_crit, {_fmt(split['predicted'])} / "
            f"{_fmt(split['measured'])} = {_fmt(split['ratio'], 3)}, is the product of four "
            f"factors. The tuned NQM needs S_q = {_fmt(split['s_q'])} steps at B_ref = "
            f"{split['b_ref']} and n_q = {_fmt(split['n_q'])} without noise to its target; the "
            f"network needs S_fb^N = {_fmt(split['s_fb'])} full batch on "
            + ("its exact loss (unlimited data)" if split.get("noise_free_batch", 0) >= 2 ** 40
               else "its whole training set")
            + f", and its reruns at B_ref a median S~_ref = {_fmt(split['s_tilde']['50'])}.", "",
            *_table(MISS_SPLIT_HEADER, miss_split_cells(split)), "",
            f"The largest (by |log|): **{split['largest'] or '-'}**.", ""]


def comparison_markdown(doc: dict) -> list[str]:
    rows = []
    for r in doc["comparison"]:
        value = _fmt(r["value"]) + ("" if r["uncertainty"] is None else f" ± {_fmt(r['uncertainty'], 2)}")
        rows.append([r["quantity"], r["checkpoint"] or "-", value, _fmt(r["ratio"], 3), r["note"]])
    return _table(["estimate", "checkpoint", "B", "ratio to measured B_crit", "how"], rows)


def _curve_markdown(summaries: list[tuple[str, dict]]) -> list[str]:
    sizes = [p["batch_size"] for p in summaries[0][1]["points"]]
    header = ["B"] + [label for label, _ in summaries]
    rows = []
    for i, b in enumerate(sizes):
        row = [b]
        for _, s in summaries:
            p = s["points"][i]
            cell = _fmt(p["steps"])
            if p["steps"] is not None and p.get("learning_rate") is not None:
                cell += f" (lr {_fmt(p['learning_rate'], 3)}"
                cell += f", m {_fmt(p['momentum'], 3)})" if p.get("momentum") is not None else ")"
            row.append(cell)
        rows.append(row)
    fits = ["fit: S_min, B_crit, R²"] + [
        f"{_fmt(s['fit']['s_min'])}, {_fmt(s['fit']['b_crit'])}, {_fmt(s['fit']['r2'], 3)}"
        for _, s in summaries]
    regimes = ["cbs20, maximal from"] + [
        f"{_fmt(s['regimes']['cbs20'])}, {_fmt(s['regimes']['maximal_from'])}"
        for _, s in summaries]
    return _table(header, rows + [fits, regimes])


def checkpoint_markdown(name: str, record: dict, chart: dict | None) -> list[str]:
    out = [f"### Checkpoint: {name} (step {record['step']}, training loss "
           f"{_fmt(record['train_loss'])} on the calibration sample)", ""]
    out.append(f"Measured on {record['sample_rows']} training rows, {record['num_params']} "
               f"parameters, {record['hessian_matvecs']} Hessian-vector products, "
               f"{_fmt(record['measure_seconds'], 3)} s.")
    out.append("")
    g, gi, bn = record["gradient"], record["gradient_at_init"], record["b_noise"]
    out += _table(["noise statistic", "here", "at init"], [
        ["tr(Sigma)", _pm(g["trace_cov"]), _pm(gi["trace_cov"])],
        ["‖G‖² (unbiased)", _pm(g["grad_sq_norm"]), _pm(gi["grad_sq_norm"])],
        ["B_simple = tr(Sigma) / ‖G‖²", _fmt(g["b_simple"]), _fmt(gi["b_simple"])],
        ["tr(H Sigma)", _pm(bn["trace_h_cov"]), "-"],
        ["G^T H G (unbiased)", _fmt(bn["grad_h_grad"]), "-"],
        ["B_noise = tr(H Sigma) / G^T H G", _pm(bn["b_noise"]), "-"],
        ["tr(H) (SLQ)", _pm(record["spectrum"]["trace"]), "-"]])
    out.append("")
    out.append(f"B_noise uses {bn['noise_rows']} per-example gradients (one HVP each); "
               "uncertainties are standard errors over examples (over SLQ probes for tr(H)).")
    out.append("")
    if record.get("error"):
        out += [f"**No NQM could be fitted here:** {record['error']}", ""]
        return out
    nqm = record["nqm"]
    top = nqm["top"]
    targets = "; ".join(f"{_fmt(t)} ({TARGET_LABELS[rule]})"
                        for rule, t in (record.get("targets") or {}).items())
    out.append(f"**Fitted NQM:** d = {nqm['dim']} directions, target losses {targets or '-'}, "
               f"initial loss {_fmt(nqm['initial_loss'])} (0.5 Σ h_i E[θ_i²]), "
               f"tr(C) = {_fmt(nqm['trace_noise'])}, tr(H) = {_fmt(nqm['trace_curvature'])}.")
    cap = record["captured"]
    out.append(f"The NQM keeps {_fmt(cap['trace_noise_fraction'], 3)} of the measured tr(Sigma) "
               f"and {_fmt(cap['trace_curvature_fraction'], 3)} of the SLQ tr(H).")
    al = record.get("alignment") or {}
    if al:
        out.append(f"Noise against curvature on the top-{nqm['top_k']}: c_i / h_i from "
                   f"{_fmt(al['ratio_min'], 3)} to {_fmt(al['ratio_max'], 3)} (median "
                   f"{_fmt(al['ratio_median'], 3)}); slope of log c on log h "
                   f"{_fmt(al.get('log_slope'), 3)}, correlation {_fmt(al.get('log_correlation'), 3)} "
                   "(the NQM's c ∝ h gives slope 1).")
    s0 = record.get("nqm_noise_scale_at_start") or {}
    out.append(f"The fitted NQM's own noise scales at its start: B_simple {_fmt(s0.get('b_simple'))}, "
               f"B_noise {_fmt(s0.get('b_noise'))}.")
    out.append("")
    keys = ("curvature", "noise_variance", "grad_components", "init_second_moments")

    def col(key, i):
        m = top[key]
        err = (m["uncertainty"] or [None] * len(m["value"]))[i]
        return _fmt(m["value"][i]) + ("" if err is None else f" ± {_fmt(err, 2)}")

    rows = [[i + 1] + [col(k, i) for k in keys] for i in range(len(top["curvature"]["value"]))]
    out += _table(["i", "h_i ± Ritz residual", "c_i ± s.e.", "g_i (at init) ± s.e.",
                   "E[θ_i²] = g_i²/h_i² ± err"], rows)
    out.append("")
    tail = nqm.get("tail")
    if tail:
        out.append(f"**Tail** (i = {tail['anchor_index'] + 1} .. d): h_i = h_k (i/k)^-a with "
                   f"a = {_pm(tail['exponent'])} (jackknife over SLQ probes), h_k = "
                   f"{_fmt(tail['anchor_curvature'])}, fitted to the SLQ counting function from "
                   f"the floor {_fmt(tail['floor'])} up (R² {_fmt(tail['r2'], 3)}); "
                   f"d = {_pm(tail['dim'])} (SLQ count above the floor; quadrature resolution "
                   f"{_fmt(tail['dim_resolution'], 3)}); c_i = ratio × h_i with ratio "
                   f"{_pm(tail['noise_ratio'])}; E[θ_i²] = {_pm(tail['init_second_moment'])} "
                   f"({tail['init_rule']}).")
        out.append("")
    if chart:
        out += [f"![spectrum at {name}]({chart['png']}) ([SVG]({chart['svg']}))", ""]
    targets = record.get("targets") or {}
    out.append("Targets: " + "; ".join(
        f"{TARGET_LABELS[r]}: {_fmt(targets.get(r))}" for r in TARGET_RULES) + ".")
    for rule, why in (record.get("target_errors") or {}).items():
        out.append(f"No prediction with the {TARGET_LABELS[rule]}: {why}.")
    out.append("")
    for rule in TARGET_RULES:
        pred = (record.get("predictions") or {}).get(rule)
        if not pred:
            continue
        summaries = [("calibrated NQM tuned " + pred["family"], pred["tuned"])]
        if pred.get("search_matched"):
            summaries.append(("calibrated NQM at the sweep's trials", pred["search_matched"]))
        boot = pred.get("bootstrap") or {}
        spread = "; ".join(f"{label} B_crit 16-84% over the bootstrap {_fmt(b['p16'])} .. "
                           f"{_fmt(b['p84'])}" for label, b in (
                               ("tuned", boot.get("tuned")),
                               ("sweep's trials", boot.get("search_matched"))) if b)
        out.append(f"Steps predicted with the {TARGET_LABELS[rule]} ({_fmt(pred['target'])}); "
                   f"tuned with a budget of {pred['tuned']['config']['max_steps']} steps"
                   + (f"; {spread}" if spread else "") + ":")
        out.append("")
        out += _curve_markdown(summaries)
        if pred.get("search_matched_note"):
            out += ["", f"No search-matched curve: {pred['search_matched_note']}."]
        out.append("")
    return out


def branching_markdown(branching: dict | None) -> list[str]:
    """The branches behind the local CBS (`realnets.sweeps.branching.render`), or why none."""
    out = ["## Local critical batch size by branching", ""]
    if branching is None:
        return out + ["Not measured: this document was made before validate measured it.", ""]
    if "skipped" in branching:
        return out + [f"Local CBS {branching['skipped']}.", ""]
    return out + ["From the reference run (the calibration run's trial, its learning rate held "
                  "constant), docs/branching.md:", "", "```",
                  render_branches(BranchResult.from_dict(branching)), "```", ""]


def transfer_cells(doc: dict) -> tuple[list[str], list[list]]:
    """(header, rows) of the transfer table (`realnets.validation.transfer`): per batch size the
    NQM's metaparameters, their step over the stability edge of each checkpoint's top curvature,
    the NQM's and the measured steps, the network's with the NQM's metaparameters, the verdict
    and the run's seconds. No rows without a transfer."""
    curvatures = top_curvatures(doc)
    header = ["B", "NQM's lr, momentum",
              *(f"a h_1 / edge ({n}, h_1 {_fmt(h, 3)})" for n, h in curvatures.items()),
              "NQM's steps", "measured S(B)", "network at the NQM's metaparameters", "verdict",
              "run's h_1 at its end", "a h_1 / edge (end)", "s"]
    rows = []
    for p in (doc.get("transfer") or {}).get("points", []):
        got = (f"{p['steps_to_goal']}" if p["steps_to_goal"] is not None
               else f"- ({p['status'].lower()} after {p['steps_run']})")
        edges = edge_ratios(p, doc)
        h1 = p.get("h1_end")
        rows.append([p["batch_size"], f"{_fmt(p['learning_rate'])}, {_fmt(p['momentum'])}",
                     *(_fmt(edges[n], 3) for n in curvatures), p["nqm_steps"],
                     _fmt(p["measured_steps"]), got, p["verdict"],
                     "-" if h1 is None else f"{_fmt(h1, 3)} ± {_fmt(p['h1_end_residual'], 1)}",
                     _fmt(edges.get("end"), 3), f"{p['seconds']:.0f}"])
    return header, rows


TRANSFER_NOTE = (f"'follows': at the goal within {FOLLOWS_FACTOR:g} times the NQM's steps. "
                 "a h_1 / edge: the step "
                 "over the stability edge of the top curvature h_1 measured at a checkpoint, or "
                 "at the run's own last step on the calibration sample (± its Ritz residual) "
                 "(2 (1 + b) for heavy-ball momentum, 2 (1 + b) / (1 + 2 b) for Nesterov, 2 for "
                 "SGD; none for Adam); above 1 the run diverges along that direction.")


def transfer_markdown(doc: dict) -> list[str]:
    """The network trained with the headline NQM's metaparameters (`transfer_cells`) and the
    fixed rule's reading; or why there is none."""
    out = ["## Does the network follow the NQM?", ""]
    transfer = doc.get("transfer")
    if transfer is None:
        why = ("not run" if doc["settings"].get("transfer", False)
               else "made with --no-transfer, or before validate ran it")
        return out + [f"Not measured: {why} (`--reuse` without --no-transfer runs it alone).", ""]
    out += ["The network trained once per batch size with the learning rate and momentum the "
            "headline NQM chose there, from the reference trial's initialisation (trial "
            f"{transfer['trial_id']}) and the sweep's data order, to the sweep's goal; each run "
            f"stops after {BUDGET_FACTOR:g} times the larger of the NQM's and the measured steps "
            "(docs/validation.md, 'Does the network follow the NQM?'). " + TRANSFER_NOTE, ""]
    out += _table(*transfer_cells(doc))
    out += ["", f"Reading (the fixed rule): {transfer['reading']}.", ""]
    split = s_min_split(doc)
    if split:
        out += [f"Where the error sits: S_min (the fits' steps at an unlimited batch) is "
                f"{_fmt(split['s_min_measured'])} measured and {_fmt(split['s_min_predicted'])} "
                f"predicted, a ratio of {_fmt(split['ratio'], 3)}. Through the reference point, "
                f"B_crit = B_ref (S_ref / S_min - 1) gives {_fmt(split['b_crit_measured'])} and "
                f"{_fmt(split['b_crit_predicted'])}: with the steps matched at B_ref, S_min alone "
                "sets the predicted B_crit's error (about the S_min ratio itself where S_ref is "
                "many times S_min; the fits' own B_crit differ from these by their residuals).",
                ""]
    if transfer.get("command"):
        out += [f"Run on the stored measurements by `{transfer['command']}`.", ""]
    return out


def path_cells(path: dict) -> tuple[list[str], list[list]]:
    """(header, rows) of the quadratic-path table (`realnets.validation.quadratic_path`): per
    batch size the NQM's, the measured and the transfer's steps, the full-batch steps of the
    network and of its own quadratic at the goal, the three ratios, how the network's loss moved
    (`network_shape`) and the curvature where it first went up ('-': it never did)."""
    header = ["B", "NQM's steps", "measured S(B)", "network at B (transfer)",
              "network, full batch", "its quadratic, full batch", "fit", "path", "noise",
              "network's loss: rises, peak / start",
              "where it first went up: step, h_1, a h_1 / edge", "s"]

    def rose(p):
        if "first_rise" not in p:
            return "not measured"
        r = p["first_rise"]
        if not r:
            return "-"
        return f"{r['step']}, {_fmt(r['h1'], 3)}, {_fmt(r['edge_ratio'], 3)}"

    def steps(d, limit):
        if d["status"] == "reached":
            return str(d["steps_to_target"])
        return f"- ({d['status']}" + (f" in {limit})" if d["status"] == "not reached" else ")")

    rows = [[p["batch_size"], p["nqm_steps"], _fmt(p["measured_steps"]),
             _fmt(p["transfer_steps"]), steps(p["network"], p["step_limit"]),
             steps(p["quadratic"], p["step_limit"]),
             _fmt(p["fit"], 3), _fmt(p["path"], 3), _fmt(p["noise"], 3),
             "{rises} of {steps}, {peak}".format(**{**network_shape(p),
                                                   "peak": _fmt(network_shape(p)["peak"], 3)}),
             rose(p), f"{p['seconds']:.0f}"] for p in path["points"]]
    return header, rows


def path_markdown(doc: dict, chart: dict | None = None) -> list[str]:
    """The network against its own quadratic at the goal (`path_cells`), its chart (`chart`:
    {"png", "svg"} file names, or None) and the fixed rule's reading; nothing for a document
    without it."""
    path = (doc.get("transfer") or {}).get("quadratic_path")
    if path is None:
        return []
    out = ["## Is the loss quadratic along the way?", ""]
    if path["points"]:
        out += ["At each batch size where the NQM needs "
                f"{DEPARTS_FACTOR:g}x or more fewer steps than measured: the network and the "
                "second-order Taylor expansion of its loss at the goal checkpoint, each run full "
                f"batch on the calibration sample ({path['sample_rows']} rows) from the reference "
                "trial's initialisation with the NQM's optimizer and metaparameters at that batch "
                f"size, until the loss is at most {_fmt(path['target'])} (the reference run's at "
                f"its goal), within {BUDGET_FACTOR:g} times the larger of the NQM's and the "
                f"measured steps. At the start the loss is {_fmt(path['loss_init'])} and the "
                f"quadratic's {_fmt(path['quadratic_init'])}. fit = quadratic / NQM, path = "
                "network / quadratic, noise = transfer / network (docs/validation.md, 'Is the "
                "loss quadratic along the way?').", ""]
        out += _table(*path_cells(path)) + [""]
    if chart:
        out += [f"![the network and its quadratic]({chart['png']}) ([SVG]({chart['svg']}))", ""]
    out += [f"Reading (the fixed rule): {path['reading']}", ""]
    if path.get("command"):
        out += [f"Run on the stored measurements by `{path['command']}`.", ""]
    return out


def adam_basis_markdown(record: dict | None) -> list[str]:
    """The section of `python -m realnets adam-basis DIR` (its DIR/adam_basis.json,
    `realnets.validation.adam_basis`), or nothing when the report has none."""
    if not record:
        return []

    def steps(d):
        return "-" if d is None else steps_text(d)

    spec = record["spectrum"]
    rows = [[p["batch_size"], p["nqm_steps"], _fmt(p["measured_steps"]),
             steps(p["quadratic"]["per_weight"]), steps(p["quadratic"]["per_eigenvector"]),
             steps(p["quadratic"].get("per_top_d_eigenvector")),
             steps(p["network"]["per_weight"]), steps(p["network"]["per_eigenvector"])]
            for p in record["points"]]
    made = f"`{record['command']}`" if record.get("command") else "`python -m realnets adam-basis`"
    return ["## Adam's basis and the NQM's directions", "",
            f"Made by {made}"
            + (f" ({record['wall_seconds']:.0f} s)" if record.get("wall_seconds") else "")
            + " (docs/validation.md, 'Adam's coordinates: per weight or per eigenvector?'). "
            f"Full batch on the {record['sample_rows']}-row sample from the reference trial's "
            f"initialisation to the loss {_fmt(record['target'])}, with the NQM's rate and b1 at "
            f"each B. The goal's whole Hessian: {record['num_params']} parameters, eigenvalues "
            f"{_fmt(spec['bottom'], 3)} .. {_fmt(spec['top'], 3)} ({spec['negative']} negative), "
            f"{spec['above_floor']} above the NQM's floor, NQM d = {_fmt(spec['nqm_dim'])}; the "
            f"lowest loss with only the top d moving {_fmt(record.get('top_d_floor'))}.", ""]\
        + _table(["B", "NQM steps", "sweep steps", "quadratic, Adam per weight",
                  "per eigenvector", "top d eigenvectors only", "network, Adam per weight",
                  "per eigenvector"], rows) + [
            "", record["reading"], "",
            "Whether these make the NQM itself slow is measured on the NQM in docs/validation.md "
            "(the same section's follow-ups: a lower floor, its start scaled, real Adam by Monte "
            "Carlo).", ""]


def rule_2_markdown(doc: dict) -> list[str]:
    """Rule 2 (docs/prediction_rule.md): the network's full-batch descents from the sweep's
    trials at B_ref, S_fb, the noise-free match and the predicted S(B) beside the measured one
    (nothing for a document without it)."""
    fb = doc.get("full_batch")
    if fb is None:
        return []
    checkpoint = doc["settings"]["checkpoints"][0]
    record = doc["checkpoints"].get(checkpoint) or {}
    out = ["## Rule 2: the NQM's time scale matched without noise", "",
           f"The network, full batch on the calibration sample ({fb['sample_rows']} rows), from "
           f"each of the sweep's {len(fb['trials'])} trials at B = "
           f"{doc['calibration_run']['batch_size']} (its metaparameters and initialisation, a "
           f"constant rate) to the reference run's loss there at its goal, {_fmt(fb['target'])}; "
           f"each stops after min({fb['step_limit']}, the fewest steps found before it) steps "
           f"({fb['seconds']:.0f} s).", ""]
    reached = sorted((r for r in fb["trials"] if r["status"] == "reached"),
                     key=lambda r: r["steps_to_target"])
    counts = {s: sum(r["status"] == s for r in fb["trials"])
              for s in ("reached", "not reached", "diverged")}
    if fb["steps"] is None:
        out += [f"No trial reached it ({counts['not reached']} not within their limit, "
                f"{counts['diverged']} diverged): no prediction.", ""]
        return out
    out += [f"S_fb = **{fb['steps']}** steps (trial {fb['trial_id']}, learning rate "
            f"{_fmt(fb['learning_rate'])}"
            + ("" if fb["momentum"] is None else f", momentum {_fmt(fb['momentum'])}")
            + f"); {counts['reached']} trials reached it within their limits, "
            f"{counts['not reached']} did not, {counts['diverged']} diverged. The fastest: "
            + ", ".join(f"trial {r['trial_id']} {r['steps_to_target']}" for r in reached[:5])
            + ".", ""]
    two = two_point(doc)
    span = ("" if two["lo"] is None and two["hi"] is None else
            f" ({_fmt(two['lo'])} .. {'unbounded' if two['hi'] is None else _fmt(two['hi'])})")
    out += ["Without the NQM, the two-point estimate B_ref (S_ref / S_fb - 1) "
            f"(docs/prediction_rule.md): {_fmt(two['value'])}{span} against the measured "
            f"{_fmt(doc['measured']['fit']['b_crit'])}; {two['note']}.", ""]
    match = record.get("noise_free_match")
    pred = (record.get("predictions") or {}).get(RULE_2) or {}
    if match is None or not pred.get("tuned"):
        why = (record.get("target_errors") or {}).get(RULE_2, "not computed")
        return out + [f"No prediction at the {checkpoint} checkpoint: {why}.", ""]
    out += [f"The NQM fitted at the {checkpoint} checkpoint reaches {_fmt(match['target'])} "
            f"in {match['steps']} steps without noise (B = {match['batch_size']}, learning rate "
            f"{_fmt(match['learning_rate'])}"
            + ("" if match.get("momentum") is None else f", momentum or b1 "
               f"{_fmt(match['momentum'])}")
            + f"; rule 1's target is {_fmt(record['targets'].get('step_matched'))}). Tuned "
            "with its noise against that target, per batch size:", ""]
    measured = {int(p["batch_size"]): p["steps"] for p in doc["measured"]["points"]}
    rows = [[int(p["batch_size"]), _fmt(measured.get(int(p["batch_size"]))),
             _fmt(p["steps"]), _fmt(p.get("learning_rate")), _fmt(p.get("momentum"))]
            for p in pred["tuned"]["points"]]
    out += _table(["B", "measured steps", "rule 2 NQM steps", "learning rate",
                   "momentum or b1"], rows)
    fit = pred["tuned"]["fit"]
    if not any(p.get("reached") for p in pred["tuned"]["points"]):
        out += ["", "The tuned NQM reaches this target at none of the sweep's batch sizes: its "
                "noise keeps it above the target at every one of them, so rule 2 gives no B_crit "
                "in their range (a miss)."]
    out += ["", f"Fit: S_min {_fmt(fit['s_min'])}, B_crit {_fmt(fit['b_crit'])} (measured: "
            f"S_min {_fmt(doc['measured']['fit']['s_min'])}, B_crit "
            f"{_fmt(doc['measured']['fit']['b_crit'])}).", ""]
    return out


def made_for(record: dict, doc: dict) -> bool:
    """Whether an adam-basis record was made on this validation document: the same workload and
    the same target (the reference run's loss at its goal, recomputed by each validation)."""
    target = doc.get("calibration_run", {}).get("train_loss_goal")
    return (record.get("workload") == doc.get("workload") and target is not None
            and math.isclose(float(record["target"]), float(target), rel_tol=1e-9))


def title(doc: dict) -> str:
    """The workload's name, and the optimizer when the sweep replaced a shipped workload's own
    ('digits_mlp, trained with adam'); an own workload's name alone."""
    w, optimizer = doc["workload"], doc["sweep_config"].get("optimizer")
    shipped = WORKLOADS.get(w)
    if shipped is None or optimizer in (None, shipped.optimizer):
        return w
    return f"{w}, trained with {optimizer}"


def render_markdown(doc: dict, charts: dict, notes: str | None = None,
                    command: str | None = None, wall_seconds: float | None = None,
                    adam_basis: dict | None = None, sides: dict | None = None) -> str:
    """report.md: the reconciliation table and chart, the diagnostic comparison table, the charts,
    the measured sweep, the calibration run, and every fitted number with its uncertainty; with
    `adam_basis` (a `realnets.validation.adam_basis` record) its section too, and with `sides`
    (`files.side_records`) the two-point estimate's row and the miss split's section."""
    sc = doc["sweep_config"]
    run = doc["calibration_run"]
    lines = [f"# Validation: {title(doc)}", ""]
    if command:
        lines += ["Made by", "", "```", command, "```", ""]
    retuned = (doc.get("provenance") or {}).get("retuned")
    if retuned:
        parts = "every tuned curve, bootstrap, rules 2 and 3" + (
            ", the transfer" if doc.get("transfer") else "") + " and the split"
        how = ("with the grid search's certificate" if doc["settings"].get("certify")
               else "without the grid search's certificate")
        lines += [f"Its NQM side ({parts}) tuned again on the stored measurements, {how} "
                  "(docs/prediction_rule.md, session 38), by", "", "```", retuned, "```", "",
                  f"in {doc['provenance'].get('retune_seconds') or 0:.0f} s.", ""]
    remeasured = (doc.get("provenance") or {}).get("remeasured")
    k = doc.get("predicted_from_trials")
    if remeasured or k:
        lines += [f"Its measured side rebuilt from all {sc['trials']} trials per batch size of the "
                  "sweep, resumed after the validation; the predictions are the ones made from "
                  f"its first {k or sc['trials']} (docs/prediction_rule.md, session 45)"
                  + (", by" if remeasured else "."), ""]
        if remeasured:
            lines += ["```", remeasured, "```", ""]
    if wall_seconds is not None:
        lines += [f"Wall time {wall_seconds:.0f} s (phases: " + ", ".join(
            f"{k} {v:.1f} s" for k, v in doc.get("seconds", {}).items()) + ").", ""]
    checkpoint = doc["settings"]["checkpoints"][0]
    rule = doc["settings"].get("target_rule", "train_loss")
    lines += ["## Reconciliation: the critical batch size measured and predicted", ""]
    lines += reconciliation_markdown(doc, sides)
    lines += ["", f"Headline: the {checkpoint} checkpoint, {TARGET_LABELS.get(rule, rule)} "
              "(docs/prediction_rule.md). Ranges: 16-84% over resampled trials or reruns of the "
              "best trials with other seeds (measured: the row says which), the "
              "smallest and largest B_crit refitted without one batch size (leave one out), "
              "16-84% over bootstrap NQMs (prediction). The local CBS is measured by branching "
              "from the reference run (docs/branching.md; settings by the rule in "
              "docs/validation.md). B_simple and B_noise are McCandlish et al.'s baselines: the "
              "NQM adds something only where it is at least as close to the measured B_crit.",
              ""]
    if RECONCILIATION_CHART in charts:
        c = charts[RECONCILIATION_CHART]
        lines += [f"![reconciliation]({c['png']}) ([SVG]({c['svg']}))", ""]
    lines += miss_split_markdown((sides or {}).get("miss_split"))
    lines += transfer_markdown(doc)
    lines += path_markdown(doc, charts.get(PATH_CHART))
    lines += adam_basis_markdown(adam_basis)
    lines += rule_2_markdown(doc)
    lines += ["## Diagnostics: every estimate of B_crit", "",
              "Every target rule, checkpoint and NQM variant (docs/prediction_rule.md keeps them "
              "as diagnostics beside the headline above).", ""]
    lines += comparison_markdown(doc)
    boots = [p.get("bootstrap") for c in doc["settings"]["checkpoints"]
             for p in ((doc["checkpoints"].get(c) or {}).get("predictions") or {}).values()]
    boots = [b for b in boots if b]
    lines += ["", "Ratios are prediction / measured B_crit (the fit S(B) = S_min (1 + B_crit / B) "
              "of each curve, docs/design.md, 'Critical batch size'). B_noise and B_simple are "
              "McCandlish et al.'s "
              "predictions B_crit ≈ B_noise (eq. 2.11) and its cheap proxy. The ± of the NQM "
              "rows is the standard deviation of B_crit over "
              + (f"{boots[0]['draws']} NQMs redrawn from the fitted numbers' uncertainties "
                 f"(parametric bootstrap; {sum(b['failed'] for b in boots)} draws failed)"
                 if boots else "(no bootstrap run)")
              + "; the measured B_crit's interval is in the reconciliation above ("
              + _interval_words(doc["measured"].get("interval") or {})
              + ").", ""]
    if STEPS_CHART in charts:
        c = charts[STEPS_CHART]
        lines += [f"![steps to goal]({c['png']}) ([SVG]({c['svg']}))", ""]
    if notes:
        lines += [f"## {NOTES_HEADING}", "", notes.strip(), ""]
    lines += ["## The measured sweep", "",
              f"Sweep: workload {sc['workload']}, goal {sc['goal']}, optimizer {sc['optimizer']}, "
              f"{sc['trials']} trials per batch size, budget {sc['max_steps']} steps, seed "
              f"{sc['seed']}, search {sc['search']}.", ""]
    summaries = [("measured", doc["measured"])]
    ref = doc.get("reference")
    if ref:
        summaries.append(("the workload's own NQM, tuned", ref["tuned"]))
        if ref.get("search_matched"):
            summaries.append(("the workload's own NQM, at the sweep's trials", ref["search_matched"]))
    lines += _curve_markdown(summaries)
    lines += ["", f"B_simple measured during training (moving averages of the best trials, pooled "
              f"over batch sizes with weights B²): {_fmt(doc['measured']['b_simple_pooled'])}.", ""]
    lines += ["## Calibration run", "",
              f"The best trial at B = {run['batch_size']} (trial {run['trial_id']}, learning rate "
              f"{_fmt(run['learning_rate'])}, momentum {_fmt(run['momentum'])}, {run['optimizer']}) "
              f"reached the goal in {run['sweep_steps_to_goal']} steps in the sweep; rerun alone "
              f"with the same seed it ended {run['rerun_status']} after {run['rerun_steps_run']} "
              f"steps (steps to goal {_fmt(run['rerun_steps_to_goal'])}, last metric "
              f"{_fmt(run['rerun_final_metric'])}). Its checkpoints: step 0 and the last step.",
              "",
              f"Training loss on the calibration sample: {_fmt(run['train_loss_init'])} at init, "
              f"{_fmt(run['train_loss_goal'])} at the goal. NQM target: {_fmt(run['target'])} "
              f"({run['target_rule']}).", ""]
    st = doc["settings"]
    lines += [f"Settings: top-k {st['top_k']}, Lanczos steps {st['lanczos_steps'] or 'default'}, "
              f"SLQ {st['slq_probes']} probes × {st['slq_steps']} steps, tail floor "
              f"{st['floor_ratio']} × h_1, sample {st['sample_rows']} rows, {st['noise_rows']} "
              f"per-example gradients for tr(H Sigma), seed {st['seed']}, headline target rule "
              f"{st.get('target_rule', 'train_loss')}, {st.get('bootstrap', 0)} bootstrap NQMs.", ""]
    lines += branching_markdown(doc.get("branching"))
    lines += ["## The NQM fitted to the network", ""]
    for name in st["checkpoints"]:
        record = doc["checkpoints"].get(name)
        if record:
            lines += checkpoint_markdown(name, record, charts.get(SPECTRUM_CHART.format(name)))
    lines += ["## Files", "",
              "`validation.json` holds every number above (fitted values with their "
              "uncertainties, the SLQ nodes and weights, the curves); "
              "`realnets.validation.files.read_validation(DIR)` reads it back.", ""]
    return "\n".join(lines)


def write_report(out_dir: Path, doc: dict, charts: dict | None = None, notes: str | None = None,
                 command: str | None = None, wall_seconds: float | None = None) -> Path:
    """report.md into `out_dir` (charts: {stem: {"png": name, "svg": name}} already written
    there, e.g. by `ui.validation_charts.export_charts`), with the section of an
    ADAM_BASIS_FILE the directory holds (`python -m realnets adam-basis`) and the two_ends and
    miss_split records made from this document (`files.side_records`); returns the report's
    path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.md"
    basis = out_dir / ADAM_BASIS_FILE
    record = store.read_json(basis, "adam-basis") if basis.is_file() else None
    if record is not None and not made_for(record, doc):
        record = None          # a record of an earlier validation in this directory: left out
    store.write_text_atomic(path, render_markdown(doc, charts or {}, notes, command, wall_seconds,
                                                  record, side_records(out_dir, doc)))
    return path


def rerender(out_dir: Path) -> Path:
    """report.md of a validation directory written again from what it holds (validation.json,
    its side records, the charts already exported there: a chart is a PNG with its SVG beside
    it), with the provenance's command and wall time: after a side record changed (e.g.
    `two-ends --full-batch-inits`), without running anything. Returns the report's path."""
    from realnets.validation.files import read_validation

    out_dir = Path(out_dir)
    doc = read_validation(out_dir)
    notes = None      # the --notes section of the report it replaces, carried over as written
    old = out_dir / "report.md"
    head = f"## {NOTES_HEADING}\n\n"
    if old.is_file() and head in (text := old.read_text(encoding="utf-8")):
        notes = text.split(head, 1)[1].split("\n## ", 1)[0].strip()
    charts = {png.stem: {"png": png.name, "svg": png.with_suffix(".svg").name}
              for png in sorted(out_dir.glob("*.png")) if png.with_suffix(".svg").is_file()}
    prov = doc.provenance
    return write_report(out_dir, doc.to_dict(), charts, notes,
                        command=None if prov is None else prov.command,
                        wall_seconds=None if prov is None else prov.wall_seconds)


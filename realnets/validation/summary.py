"""reports/validation/summary.json: one object per workload, optimizer and goal (a validated
sweep): the prediction of record and the numbers beside it.

The prediction of record is rule 4 where both ends were measured on the network (two_ends.json
and miss_split.json beside the document), else rule 1 (docs/prediction_rule.md); "rule" names
which, and "rule_1" always holds rule 1's.

Each entry (`summary_entry`, from a validation document):
  {"workload", "optimizer", "rule",             # "rule_4" or "rule_1": whose is "predicted"
   "checkpoint",                                # the NQM's checkpoint (both rules')
   "measured": {"b_crit", "lo", "hi", "bound",  # fit, and the 16-84% range over resampled trials
                "method",                       # ("trials") or over reruns ("repeats"), or null;
                "search": {"lo", "hi"}},        # where a 4x larger search would likely put it
                                                # (32 trials run to their end; else null)
   "reruns": {"b_crit", "lo", "hi",             # where the winners were rerun under other seeds:
              "one_run": {"lo", "hi"}} or null, # the reruns' median curve's B_crit, its 16-84%
                                                # range over the seeds drawn again, and the range
                                                # over one run drawn per batch size
   "predicted": {"b_crit", "lo", "hi", "bound"},# the rule of record's B_crit and 16-84% range
   "rule_1": {"target_rule", "b_crit", "lo",    # the calibrated NQM alone (rule 1, the headline
              "hi", "bound", "ratio"},          # target rule), its range over bootstrap NQMs;
                                                # bound: {"side": "lower"|"upper", "value"} when
                                                # the curve has no bend between its batch sizes
                                                # (`nqm.scaling.b_crit_bound`), else null
   "b_noise": {"value", "se"}, "b_simple": {"value", "se"},   # per example, headline checkpoint
   "local_cbs": [{"step", "cbs"}],              # branching (empty when not measured)
   "ratio",                                     # predicted / measured B_crit
   "rule_2": {"b_crit", "lo", "hi", "bound",    # rule 2 of docs/prediction_rule.md beside the
              "ratio", "full_batch_steps"},     # headline (null in a document without it)
   "two_point": {"b_crit", "lo", "hi", "ratio"},  # B_ref (S_ref / S_fb - 1), no NQM (null
                                                # without rule 2's full-batch steps)
   "two_ends": {"s_fb", "s_ref_reruns": {"16", "50", "84"},   # DIR/two_ends.json (null without
                "b_2pt": {"b_crit", "lo", "hi", "ratio"},     # one made from this document):
                "rule_3": {"b_crit", "lo", "hi", "ratio"},    # B_2pt' and rule 3, session 32
                "b_2pt_med": {"b_crit", "lo", "hi", "ratio",  # B_2pt'(med), session 41: S_fb^N
                              "s_fb_median", "inits"}},       # replaced by the median over
                                                              # initialisations (null without
                                                              # `--full-batch-inits`)
   "miss_split": {"factors": {"shape_nqm", "noise_free",      # DIR/miss_split.json (null
                              "reference", "shape_net"},      # likewise): the headline's
                  "intervals": {factor: {"16", "84"}},        # ratio split into four factors
                  "largest"},
   "rule_4": {"b_crit", "lo", "hi", "ratio"}}   # the NQM's bend between the two ends (session
                                                # 36; null without both records); its range
                                                # over the reruns' 16th and 84th percentiles
Each entry also holds the sweep's "goal". Unknown numbers are null. An entry is keyed by its
workload, optimizer and goal (the same network and data may be swept with momentum and with Adam,
or to two goals: one entry each); the tables name the goal where a workload and optimizer come
twice. `python -m realnets validate` replaces
its key's entry and keeps the others (`update_summary`, under `store.updating`'s lock, so that
runs finishing at once keep each other's entries); the file is written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

from realnets import store
from realnets.validation.comparison import points_bound, ratio_se, value_and_error
from realnets.validation.reconciliation import search_of, two_point
from realnets.validation.settings import RULE_2

SUMMARY_FILE = "summary.json"
BOUND_NOTE = ("\\* The curve has no bend between its batch sizes (it still scales perfectly at the "
              "largest, or is flat from the smallest), so they only bound B_crit "
              "(`nqm.scaling.b_crit_bound`); the fitted value is an extrapolation.")


def _interval(stats: dict | None, lo: str = "p16", hi: str = "p84") -> tuple:
    if not stats or stats.get("available") is False:
        return None, None
    return stats.get(lo), stats.get(hi)


def _bound_dict(bound) -> dict | None:
    return None if bound is None else bound.to_dict()


def _reruns_entry(reruns: dict | None) -> dict | None:
    if not reruns:
        return None
    lo, hi = _interval(reruns.get("rerun_median_resampled"))
    one_lo, one_hi = _interval(reruns)
    return {"b_crit": reruns.get("rerun_median_b_crit"), "lo": lo, "hi": hi,
            "one_run": {"lo": one_lo, "hi": one_hi}}


def summary_entry(doc: dict, sides: dict | None = None) -> dict:
    """The headline numbers of one validation document (`ValidationDocument.to_dict()`), with
    `sides` (`files.side_records`: its two_ends and miss_split records, each or both None) the
    two_ends and miss_split entries too."""
    settings = doc["settings"]
    rule = settings.get("target_rule", "train_loss")
    checkpoint = settings["checkpoints"][0]
    measured = doc["measured"]["fit"]["b_crit"]
    m_lo, m_hi = _interval(doc["measured"].get("interval"))
    method = ((doc["measured"].get("interval") or {}).get("method", "trials")
              if m_lo is not None else None)
    reruns = doc["measured"].get("repeats")
    c = doc["checkpoints"].get(checkpoint) or {}
    pred = (c.get("predictions") or {}).get(rule) or {}
    tuned = pred.get("tuned")
    predicted = tuned["fit"]["b_crit"] if tuned else None
    p_lo, p_hi = _interval((pred.get("bootstrap") or {}).get("tuned"))
    b_noise, b_noise_se = value_and_error((c.get("b_noise") or {}).get("b_noise"))
    grad = c.get("gradient") or {}
    b_simple, _ = value_and_error(grad.get("b_simple"))
    rule_1 = {"target_rule": rule, "b_crit": predicted, "lo": p_lo, "hi": p_hi,
              "bound": _bound_dict(points_bound(tuned.get("points")) if tuned else None),
              "ratio": predicted / measured if predicted is not None and measured else None}
    rule_4 = _rule_4_entry(doc, sides or {}, measured)
    of_record = ("rule_4", {**{k: rule_4[k] for k in ("b_crit", "lo", "hi")}, "bound": None}
                 ) if rule_4 and rule_4["b_crit"] is not None else (
        "rule_1", {k: rule_1[k] for k in ("b_crit", "lo", "hi", "bound")})
    return {
        "workload": doc["workload"],
        "optimizer": doc.get("sweep_config", {}).get("optimizer"),
        "goal": doc.get("sweep_config", {}).get("goal"),
        "rule": of_record[0], "checkpoint": checkpoint,
        "measured": {"b_crit": measured, "lo": m_lo, "hi": m_hi,
                     "bound": _bound_dict(points_bound(doc["measured"].get("points"))),
                     "method": method, "search": _search_entry(doc)},
        "reruns": _reruns_entry(reruns),
        "predicted": of_record[1],
        "rule_1": rule_1,
        "b_noise": {"value": b_noise, "se": b_noise_se},
        "b_simple": {"value": b_simple, "se": ratio_se(b_simple, grad)},
        "local_cbs": [{"step": r["step"], "cbs": r["cbs"]} for r in doc.get("local_cbs") or []],
        "ratio": (of_record[1]["b_crit"] / measured
                  if of_record[1]["b_crit"] is not None and measured else None),
        "rule_2": _rule_2_entry(doc, c, measured),
        "two_point": _two_point_entry(doc, measured),
        "two_ends": _two_ends_entry((sides or {}).get("two_ends"), measured),
        "miss_split": _miss_split_entry((sides or {}).get("miss_split")),
        "rule_4": rule_4,
    }


def _search_entry(doc: dict) -> dict | None:
    """{"lo", "hi"}: where a 4x larger search would likely put the measured B_crit
    (`reconciliation.search_of`), or None."""
    span = search_of(doc)
    return None if span is None else {"lo": span[0], "hi": span[1]}


def rule_1_of(entry: dict) -> dict:
    """An entry's rule-1 prediction ({"b_crit", "lo", "hi", "bound", "ratio", ...}); an entry
    written before entries held "rule_1" had it as its "predicted" and "ratio"."""
    if entry.get("rule_1") is not None:
        return entry["rule_1"]
    return {**entry["predicted"], "ratio": entry.get("ratio"), "target_rule": entry.get("rule")}


def _rule_4_entry(doc: dict, sides: dict, measured: float | None) -> dict | None:
    """Rule 4's B_crit (`two_point_curve.bend`) where both side records exist, else None."""
    from realnets.validation.two_point_curve import bend

    if sides.get("two_ends") is None or sides.get("miss_split") is None:
        return None
    b = bend(sides["two_ends"], doc, sides["miss_split"])
    return {"b_crit": b["value"], "lo": b["lo"], "hi": b["hi"],
            "ratio": b["value"] / measured if b["value"] is not None and measured else None}


def _two_ends_entry(record: dict | None, measured: float | None) -> dict | None:
    if record is None:
        return None

    def estimate(by: dict) -> dict:
        value = by.get("50")
        return {"b_crit": value, "lo": by.get("16"), "hi": by.get("84"),
                "ratio": value / measured if value is not None and measured else None}

    rule_3 = {q: v.get("b_crit") for q, v in ((record.get("rule_3") or {}).get("by")
                                               or {}).items()}
    reruns = record["reruns"]["percentiles"]
    return {"s_fb": record["full_set"]["steps"], "s_ref_reruns": reruns,
            "b_2pt": estimate(record["two_point"]), "rule_3": estimate(rule_3),
            "b_2pt_med": _median_end_entry(record, reruns, estimate)}


def _median_end_entry(record: dict, reruns: dict, estimate) -> dict | None:
    """B_2pt'(med) (docs/prediction_rule.md, session 41): the two-point estimate at the reruns'
    16th, 50th and 84th percentiles with the full-batch end's median over initialisations in
    place of S_fb^N; None without a `full_batch_inits` diagnostic in the record."""
    inits = record.get("full_batch_inits")
    if not inits:
        return None
    from realnets.validation.full_batch_inits import median_end

    median = inits["percentiles"]["50"]
    by = median_end(record["b_ref"], reruns, median)
    return {**estimate(by), "s_fb_median": median, "inits": len(inits["seeds"])}


def _miss_split_entry(record: dict | None) -> dict | None:
    if record is None:
        return None
    return {"factors": record["factors"],
            "intervals": {k: {"16": v["16"], "84": v["84"]}
                          for k, v in record["intervals"].items()},
            "largest": record["largest"]}


def _two_point_entry(doc: dict, measured: float | None) -> dict | None:
    if doc.get("full_batch") is None:
        return None
    two = two_point(doc)
    return {"b_crit": two["value"], "lo": two["lo"], "hi": two["hi"],
            "ratio": two["value"] / measured if two["value"] is not None and measured else None}


def _rule_2_entry(doc: dict, checkpoint: dict, measured: float | None) -> dict | None:
    """Rule 2's prediction at the headline checkpoint (null when the document has no rule 2)."""
    fb = doc.get("full_batch")
    if fb is None:
        return None
    pred = (checkpoint.get("predictions") or {}).get(RULE_2) or {}
    tuned = pred.get("tuned")
    value = tuned["fit"]["b_crit"] if tuned else None
    lo, hi = _interval((pred.get("bootstrap") or {}).get("tuned"))
    return {"b_crit": value, "lo": lo, "hi": hi,
            "bound": _bound_dict(points_bound(tuned.get("points")) if tuned else None),
            "ratio": value / measured if value is not None and measured else None,
            "full_batch_steps": fb.get("steps")}


def read_summary(path: Path) -> list[dict]:
    """The entries of a summary file ([] when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"validation summary: {path} is not valid JSON ({err})") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "workload" in e
                                                 for e in entries):
        raise ValueError(f"{path}: a validation summary must be a list of objects with a workload")
    return entries


def entry_key(entry: dict) -> tuple[str, str, float]:
    """What identifies a summary entry: (workload, optimizer, goal); -1 for an entry written
    before entries held their goal."""
    goal = entry.get("goal")
    return entry["workload"], entry["optimizer"] or "", -1.0 if goal is None else float(goal)


def update_summary(path: Path, entry: dict) -> None:
    """Replaces the entry with `entry`'s workload, optimizer and goal in the summary at `path`
    (or adds it), sorted by workload, optimizer, then goal."""
    def replaced(e):     # the same study; one written before entries held their goal counts too
        return entry_key(e) == entry_key(entry) or (
            e.get("goal") is None and entry_key(e)[:2] == entry_key(entry)[:2])

    with store.updating(path):       # several validate runs may finish at once
        entries = [e for e in read_summary(path) if not replaced(e)]
        entries.append(entry)
        store.write_json_atomic(Path(path), sorted(entries, key=entry_key))


def directory_entry(directory: Path) -> dict:
    """The summary entry of a validation directory: its validation.json with the two_ends and
    miss_split records made from it (`files.side_records`)."""
    from realnets.validation.files import read_validation, side_records

    doc = read_validation(directory).to_dict()
    return summary_entry(doc, side_records(directory, doc))


def rebuild_summary(path: Path) -> list[dict]:
    """Rewrites the summary at `path` from the validation directories beside it (each
    DIR/validation.json and the records beside it), with no measurement rerun: the summary is a
    view of them. Returns the entries written."""
    from realnets.validation.files import VALIDATION_FILE

    path = Path(path)
    dirs = sorted(d for d in path.parent.iterdir() if (d / VALIDATION_FILE).is_file())
    if not dirs:
        raise ValueError(f"no validation documents beside {path} (DIR/{VALIDATION_FILE})")
    with store.updating(path):
        store.write_json_atomic(path, sorted((directory_entry(d) for d in dirs), key=entry_key))
    return read_summary(path)


def refresh_summary(directory: Path) -> Path | None:
    """After a record was added beside a validation document: its entry replaced in the
    summary.json beside the directory, when that summary exists (its path; else None)."""
    path = Path(directory).resolve().parent / SUMMARY_FILE
    if not path.is_file():
        return None
    update_summary(path, directory_entry(directory))
    return path


def workload_labels(entries: list[dict]) -> list[str]:
    """Each entry's workload as the tables name it: with its goal where the same workload and
    optimizer come twice."""
    pairs = [(e["workload"], e["optimizer"]) for e in entries]
    return [e["workload"] + (f" (goal {e['goal']:.4g})" if pairs.count(pair) > 1
                             and e.get("goal") is not None else "")
            for e, pair in zip(entries, pairs)]


def _num(x, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def _rule_name(entry: dict) -> str:
    """'4' or '1': which rule an entry's prediction of record is."""
    return "4" if entry.get("rule") == "rule_4" else "1"


def _b_crit_cell(m: dict) -> str:
    cell = _num(m["b_crit"])
    if m.get("lo") is not None or m.get("hi") is not None:     # a missing end: unbounded/unknown
        lo = "?" if m.get("lo") is None else _num(m["lo"], 3)
        hi = "?" if m.get("hi") is None else _num(m["hi"], 3)
        cell += f" ({lo}-{hi})"
        if m.get("method") == "repeats":
            cell += "†"
    bound = m.get("bound")
    if bound:
        cell += f"; {'≥' if bound['side'] == 'lower' else '≤'} {_num(bound['value'])}*"
    return cell


def summary_table(entries: list[dict]) -> str:
    """The summary as a Markdown table, one row per workload (the table of the docs).

    Columns: workload, optimizer, measured B_crit and the prediction of record with their 16-84%
    ranges (and bounds, starred), which rule it is (4 or 1), its ratio, rule 1's ratio (starred
    where rule 1's curve has no bend), B_simple
    and B_noise with standard errors and their ratios to the measured B_crit, local CBS along
    training. A footnote explains the stars when one appears.
    """
    lines = ["| workload | optimizer | measured B_crit (16-84%) | prediction of record (16-84%) "
             "| rule | ratio | rule 1 ratio | B_simple (ratio) | B_noise (ratio) | local CBS "
             "along training |", "|---" * 10 + "|"]
    label = dict(zip(map(entry_key, entries), workload_labels(entries)))
    for e in entries:
        measured = e["measured"]["b_crit"]

        def baseline(x):
            over = x["value"] / measured if x["value"] is not None and measured else None
            return f"{_num(x['value'])} ± {_num(x['se'], 2)} ({_num(over, 2)})"

        cbs = ", ".join("-" if c["cbs"] is None else str(c["cbs"])
                        for c in e["local_cbs"]) or "-"
        lines.append(f"| {label[entry_key(e)]} | {e['optimizer']} | {_b_crit_cell(e['measured'])} | "
                     f"{_b_crit_cell(e['predicted'])} | {_rule_name(e)} | "
                     f"**{_num(e['ratio'], 3)}** | {_num(rule_1_of(e)['ratio'], 3)}"
                     f"{'*' if rule_1_of(e).get('bound') else ''} | "
                     f"{baseline(e['b_simple'])} | {baseline(e['b_noise'])} | {cbs} |")
    if any(e["measured"].get("method") == "repeats" for e in entries):
        lines += ["", "† Over reruns of each batch size's best trial under other seeds (the sweep "
                      "stopped its trials at the first goal, so they cannot be resampled)."]
    if any((e["measured"].get("bound") or e["predicted"].get("bound")
            or rule_1_of(e).get("bound")) for e in entries):
        lines += ["", BOUND_NOTE]
    return "\n".join(lines)


def reruns_table(entries: list[dict]) -> str:
    """The workloads whose sweep winners were rerun under other seeds, as a Markdown table (""
    when none): the sweep's B_crit, the 16-84% range over one rerun drawn per batch size, the
    B_crit of the reruns' median curve with its 16-84% range over the seeds drawn again, and the
    prediction of record's, rule 1's and B_simple's ratios to that B_crit (a diagnostic of how
    much of the measured B_crit is the winners' seed luck; the headline ratio stays the
    sweep's)."""
    rows = [e for e in entries if e.get("reruns")]
    if not rows:
        return ""
    lines = ["| workload | optimizer | measured B_crit (sweep) | one rerun per batch size, "
             "16-84% | B_crit of the reruns' median curve (16-84% over seeds) | prediction of "
             "record / it | rule 1 / it | B_simple / it |", "|---" * 8 + "|"]
    label = dict(zip(map(entry_key, entries), workload_labels(entries)))
    for e in rows:
        r = e["reruns"]
        # an entry written before the median curve had its own interval: one_run absent
        one = r.get("one_run") or {"lo": r["lo"], "hi": r["hi"]}
        own = (f" ({_num(r['lo'], 3)}-{_num(r['hi'], 3)})" if "one_run" in r
               and r["lo"] is not None else "")

        def over(x, r=r):
            return None if x is None or not r["b_crit"] else x / r["b_crit"]

        lines.append(f"| {label[entry_key(e)]} | {e['optimizer']} | {_num(e['measured']['b_crit'])} | "
                     f"{_num(one['lo'], 3)}-{_num(one['hi'], 3)} | {_num(r['b_crit'])}{own} | "
                     f"{_num(over(e['predicted']['b_crit']), 3)} ({_rule_name(e)}) | "
                     f"{_num(over(rule_1_of(e)['b_crit']), 3)} | "
                     f"{_num(over(e['b_simple']['value']), 3)} |")
    return "\n".join(lines)


def rule_2_table(entries: list[dict]) -> str:
    """Rule 2 (docs/prediction_rule.md) beside the headline, as a Markdown table ("" when no
    entry has it): the measured B_crit, rule 2's prediction with its 16-84% range over bootstrap
    NQMs, its ratio, rule 1's ratio, B_simple's, the network's fewest full-batch
    steps S_fb that rule 2 matched, and the two-point estimate B_2pt with its 16-84% range over
    the reference trial's reruns and its ratio."""
    rows = [e for e in entries if e.get("rule_2")]
    if not rows:
        return ""
    lines = ["| workload | optimizer | measured B_crit | rule 2 prediction (16-84%) | rule 2 "
             "ratio | rule 1 ratio | B_simple ratio | S_fb | B_2pt (16-84%) | B_2pt ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    label = dict(zip(map(entry_key, entries), workload_labels(entries)))
    for e in rows:
        r, measured = e["rule_2"], e["measured"]["b_crit"]
        simple = e["b_simple"]["value"]
        two = e.get("two_point") or {"b_crit": None, "ratio": None}
        lines.append(f"| {label[entry_key(e)]} | {e['optimizer']} | {_num(measured)} | "
                     f"{_b_crit_cell(r)} | **{_num(r['ratio'], 3)}** | "
                     f"{_num(rule_1_of(e)['ratio'], 3)} | "
                     f"{_num(simple / measured if simple is not None and measured else None, 3)}"
                     f" | {_num(r['full_batch_steps'])} | {_b_crit_cell(two)} | "
                     f"{_num(two['ratio'], 3)} |")
    if any(e["rule_2"].get("bound") for e in rows):
        lines += ["", BOUND_NOTE]
    return "\n".join(lines)


def two_ends_table(entries: list[dict]) -> str:
    """Both ends measured on the network and where the headline's miss sits, as a Markdown table
    ("" when no entry has a two_ends record): the measured B_crit, rule 1's ratio, B_2pt'
    with its 16-84% range over the reruns and its ratio, rule 3's and rule 4's ratios, B_simple's,
    and the split's noise-free factor (16-84% over bootstrap NQMs) and its largest factor."""
    rows = [e for e in entries if e.get("two_ends")]
    if not rows:
        return ""
    lines = ["| workload | optimizer | measured B_crit | rule 1 ratio | S_fb^N | B_2pt' "
             "(16-84%) | B_2pt' ratio | rule 3 ratio | rule 4 ratio | B_simple ratio | "
             "noise-free factor (16-84%) | largest factor |", "|---" * 12 + "|"]
    label = dict(zip(map(entry_key, entries), workload_labels(entries)))
    for e in rows:
        ends, split, measured = e["two_ends"], e.get("miss_split"), e["measured"]["b_crit"]
        simple = e["b_simple"]["value"]
        if split:
            iv = split["intervals"]["noise_free"]
            ends_nf = ["?" if iv[q] is None else _num(iv[q], 3) for q in ("16", "84")]
            nf = f"{_num(split['factors']['noise_free'], 3)} ({ends_nf[0]}-{ends_nf[1]})"
        lines.append(f"| {label[entry_key(e)]} | {e['optimizer']} | {_num(measured)} | "
                     f"{_num(rule_1_of(e)['ratio'], 3)} | {_num(ends['s_fb'])} | "
                     f"{_b_crit_cell(ends['b_2pt'])} | **{_num(ends['b_2pt']['ratio'], 3)}** | "
                     f"{_num(ends['rule_3']['ratio'], 3)} | "
                     f"{_num((e.get('rule_4') or {}).get('ratio'), 3)} | "
                     f"{_num(simple / measured if simple is not None and measured else None, 3)}"
                     f" | {nf if split else '-'} | {split['largest'] if split else '-'} |")
    return "\n".join(lines)


def median_end_table(entries: list[dict]) -> str:
    """The full-batch end over initialisations (docs/prediction_rule.md, session 41) as a
    Markdown table ("" when no entry has one): S_fb^N, the median over initialisations and
    their ratio, B_2pt''s ratio and B_2pt'(med) with its 16-84% range and ratio."""
    rows = [e for e in entries if (e.get("two_ends") or {}).get("b_2pt_med")]
    if not rows:
        return ""
    lines = ["| workload | optimizer | measured B_crit | S_fb^N | median over initialisations "
             "| / S_fb^N | B_2pt' ratio | B_2pt'(med) (16-84%) | B_2pt'(med) ratio |",
             "|---" * 9 + "|"]
    label = dict(zip(map(entry_key, entries), workload_labels(entries)))
    for e in rows:
        ends = e["two_ends"]
        med, s_fb = ends["b_2pt_med"]["s_fb_median"], ends["s_fb"]
        over = med / s_fb if med is not None and s_fb else None
        lines.append(f"| {label[entry_key(e)]} | {e['optimizer']} | "
                     f"{_num(e['measured']['b_crit'])} | {_num(s_fb)} | "
                     f"{'not at the target' if med is None else _num(med, 3)} | "
                     f"{_num(over, 3)} | {_num(ends['b_2pt']['ratio'], 3)} | "
                     f"{_b_crit_cell(ends['b_2pt_med'])} | "
                     f"**{_num(ends['b_2pt_med']['ratio'], 3)}** |")
    return "\n".join(lines)

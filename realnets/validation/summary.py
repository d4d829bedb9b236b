"""reports/validation/summary.json: one object per workload, the headline rule's numbers only.

Each entry (`summary_entry`, from a validation document):
  {"workload", "optimizer", "rule", "checkpoint",
   "measured": {"b_crit", "lo", "hi"},          # fit, and the 16-84% range over resampled trials
   "predicted": {"b_crit", "lo", "hi"},         # the calibrated NQM under the headline rule, and
                                                # the 16-84% range over bootstrap NQMs
   "b_noise": {"value", "se"}, "b_simple": {"value", "se"},   # per example, headline checkpoint
   "local_cbs": [{"step", "cbs"}],              # branching (empty when not measured)
   "ratio"}                                     # predicted / measured B_crit
Unknown numbers are null. `python -m realnets validate` replaces its workload's entry and keeps
the others (`update_summary`); the file is written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path

from realnets import store
from realnets.validation.comparison import ratio_se, value_and_error

SUMMARY_FILE = "summary.json"


def _interval(stats: dict | None, lo: str = "p16", hi: str = "p84") -> tuple:
    if not stats or stats.get("available") is False:
        return None, None
    return stats.get(lo), stats.get(hi)


def summary_entry(doc: dict) -> dict:
    """The headline numbers of one validation document (`ValidationDocument.to_dict()`)."""
    settings = doc["settings"]
    rule = settings.get("target_rule", "train_loss")
    checkpoint = settings["checkpoints"][0]
    measured = doc["measured"]["fit"]["b_crit"]
    m_lo, m_hi = _interval(doc["measured"].get("interval"))
    c = doc["checkpoints"].get(checkpoint) or {}
    pred = (c.get("predictions") or {}).get(rule) or {}
    tuned = pred.get("tuned")
    predicted = tuned["fit"]["b_crit"] if tuned else None
    p_lo, p_hi = _interval((pred.get("bootstrap") or {}).get("tuned"))
    b_noise, b_noise_se = value_and_error((c.get("b_noise") or {}).get("b_noise"))
    grad = c.get("gradient") or {}
    b_simple, _ = value_and_error(grad.get("b_simple"))
    return {
        "workload": doc["workload"],
        "optimizer": doc.get("sweep_config", {}).get("optimizer"),
        "rule": rule, "checkpoint": checkpoint,
        "measured": {"b_crit": measured, "lo": m_lo, "hi": m_hi},
        "predicted": {"b_crit": predicted, "lo": p_lo, "hi": p_hi},
        "b_noise": {"value": b_noise, "se": b_noise_se},
        "b_simple": {"value": b_simple, "se": ratio_se(b_simple, grad)},
        "local_cbs": [{"step": r["step"], "cbs": r["cbs"]} for r in doc.get("local_cbs") or []],
        "ratio": predicted / measured if predicted is not None and measured else None,
    }


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


def update_summary(path: Path, entry: dict) -> None:
    """Replaces `entry`'s workload in the summary at `path` (or adds it), sorted by workload."""
    entries = [e for e in read_summary(path) if e["workload"] != entry["workload"]]
    entries.append(entry)
    store.write_json_atomic(Path(path), sorted(entries, key=lambda e: e["workload"]))

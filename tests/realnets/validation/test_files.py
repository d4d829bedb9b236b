"""realnets.validation.files: validation.json round-trips with and without the branching fields,
older files (without them, or without settings.branch_repeats) still read, and a part of the
wrong kind is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from realnets.validation import files
from realnets.validation.settings import ValidationConfig

ROOT = Path(__file__).resolve().parents[3]
BRANCHING = {"settings": {"batch_size": 4}, "loss_kind": "exact training loss", "points": [],
             "local_cbs": [{"step": 10, "cbs": 64}, {"step": 30, "cbs": None}],
             "wall_seconds": 1.5}


def _minimal(**extra) -> dict:
    return {"workload": "toy", "settings": ValidationConfig(branch_repeats=2).to_dict(),
            "measured": {"fit": {"b_crit": 1.0}}, "checkpoints": {}, "comparison": [], **extra}


def test_round_trip_with_the_branching_fields(tmp_path):
    doc = files.ValidationDocument.from_dict(
        _minimal(branching=BRANCHING, local_cbs=BRANCHING["local_cbs"]))
    files.write_validation(tmp_path, doc)
    back = files.read_validation(tmp_path)
    assert back == doc
    assert back.local_cbs == [{"step": 10, "cbs": 64}, {"step": 30, "cbs": None}]
    assert back.branching["wall_seconds"] == 1.5 and back.settings.branch_repeats == 2
    raw = json.loads((tmp_path / files.VALIDATION_FILE).read_text())
    keys = list(raw)
    order = [keys.index(k) for k in ("checkpoints", "branching", "local_cbs", "seconds")]
    assert order == sorted(order)


def test_round_trip_without_them_writes_neither(tmp_path):
    doc = files.ValidationDocument.from_dict(_minimal())
    assert doc.branching is None and doc.local_cbs is None
    files.write_validation(tmp_path, doc)
    raw = json.loads((tmp_path / files.VALIDATION_FILE).read_text())
    assert "branching" not in raw and "local_cbs" not in raw
    assert files.read_validation(tmp_path) == doc


def test_an_older_report_still_reads(tmp_path):
    # a committed report as validate wrote it before it measured the local CBS (and before
    # settings.branch_repeats existed): both fields are None, and no branching ran (0)
    raw = json.loads((ROOT / "reports" / "validation" / "nqm" / files.VALIDATION_FILE).read_text())
    for key in ("branching", "local_cbs"):
        raw.pop(key, None)
    raw["settings"].pop("branch_repeats")
    (tmp_path / files.VALIDATION_FILE).write_text(json.dumps(raw))
    doc = files.read_validation(tmp_path)
    assert doc.branching is None and doc.local_cbs is None
    assert doc.settings.branch_repeats == 0 != ValidationConfig().branch_repeats


@pytest.mark.parametrize("field, value, message", [
    ("local_cbs", {"step": 1}, "local_cbs must be a JSON list"),
    ("branching", [1, 2], "branching must be a JSON dict"),
])
def test_a_part_of_the_wrong_kind_is_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        files.ValidationDocument.from_dict(_minimal(**{field: value}))


def test_branch_repeats_is_checked():
    assert ValidationConfig(branch_repeats=0).branch_repeats == 0
    for bad in (-1, 1.5, 1001):
        with pytest.raises(ValueError, match="branch-repeats"):
            ValidationConfig(branch_repeats=bad)

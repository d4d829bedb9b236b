"""realnets.validation.retune and `validate --retune`: a stored validation's NQM side tuned again on
its measurements (docs/prediction_rule.md, session 38)."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest

from realnets.cli import main
from realnets.sweeps.curve import build_curve
from realnets.sweeps.records import load_sweep, read_repeats
from realnets.validation.reconciliation import headline
from realnets.validation.remeasure import prediction_sweep
from realnets.validation.retune import retune
from realnets.validation.settings import ValidationConfig

ROOT = Path(__file__).resolve().parents[3]
REPORT = ROOT / "reports" / "validation" / "diabetes_mlp"
SWEEP = ROOT / "sweeps" / "diabetes_mlp"


def _without_seconds(x, approx: bool = False):
    """x with every "seconds" key dropped; with `approx` every finite float as pytest.approx
    (relative 1e-9: the tuner's searches end in float64 round-off that differs between CPUs)."""
    if isinstance(x, dict):
        return {k: _without_seconds(v, approx) for k, v in x.items() if k != "seconds"}
    if isinstance(x, list):
        return [_without_seconds(v, approx) for v in x]
    if approx and isinstance(x, float) and math.isfinite(x):
        return pytest.approx(x, rel=1e-9, abs=0.0)
    return x


@pytest.fixture(scope="module")
def stored():
    doc = json.loads((REPORT / "validation.json").read_text())
    # the trials its predictions were made from (the sweep was resumed to 128 since; session 45)
    config, records = prediction_sweep(doc, *load_sweep(SWEEP))
    return doc, config, records, build_curve(records, config, read_repeats(SWEEP)).batch_sizes


def _comes_back_and_without_certificate(doc, config, records, sizes):
    """Retuned with its own (certified) settings the document comes back as stored; returns
    (headline steps per B without the certificate, stored ones, the uncertified document)."""
    vcfg = ValidationConfig.from_dict(doc["settings"])
    assert vcfg.certify
    again = retune(doc, config, records, sizes, vcfg)
    assert _without_seconds(again["checkpoints"]) == _without_seconds(doc["checkpoints"], True)
    assert again["comparison"] == _without_seconds(doc["comparison"], True)
    local = retune(doc, config, records, sizes, dataclasses.replace(vcfg, certify=False))
    steps = {p["batch_size"]: p["steps"] for p in headline(local)[3]["tuned"]["points"]}
    stored_steps = {p["batch_size"]: p["steps"] for p in headline(doc)[3]["tuned"]["points"]}
    return steps, stored_steps, local


def test_retuned_with_its_own_settings_the_document_comes_back(stored):
    """diabetes_mlp (momentum, tuned with the certificate since session 38): every prediction,
    bootstrap draw and the comparison table come back as stored; with certify off the
    headline's B = 256 point takes the 8 steps the local search alone stops at (6 certified)."""
    doc, config, records, sizes = stored
    steps, stored_steps, local = _comes_back_and_without_certificate(doc, config, records, sizes)
    assert (steps[256], stored_steps[256]) == (8, 6)
    assert all(steps[b] >= stored_steps[b] for b in steps)
    assert local["settings"]["certify"] is False


def test_retune_refuses_other_measurement_settings(stored):
    doc, config, records, sizes = stored
    vcfg = dataclasses.replace(ValidationConfig.from_dict(doc["settings"]), top_k=5)
    with pytest.raises(ValueError, match="top_k differ from the stored"):
        retune(doc, config, records, sizes, vcfg)


def test_a_document_without_the_setting_was_tuned_without_the_certificate():
    assert ValidationConfig.from_dict({}).certify is False
    assert ValidationConfig().certify is True
    with pytest.raises(ValueError, match="certify must be true or false"):
        ValidationConfig(certify="yes")


def test_the_command_rewrites_the_report_and_refuses_bad_input(tmp_path, capsys):
    """--retune on a copy of the report without its transfer (--no-transfer; about 10 s): the
    document says which command tuned it again, its predictions are the stored ones, and the
    records beside it are kept; without a document, or with another workload's, one line."""
    out = tmp_path / "diabetes_mlp"
    shutil.copytree(REPORT, out)
    argv = ["validate", "--workload", "examples/diabetes.py:make_workload", "--sweep",
            str(SWEEP), "--out", str(out), "--retune", "--no-transfer", "--no-progress"]
    assert main(argv) == 0
    doc = json.loads((out / "validation.json").read_text())
    before = json.loads((REPORT / "validation.json").read_text())
    assert "--retune" in doc["provenance"]["retuned"]
    assert doc["provenance"]["command"] == before["provenance"]["command"]
    assert _without_seconds(doc["checkpoints"]) == _without_seconds(before["checkpoints"], True)
    assert json.loads((out / "two_ends.json").read_text())["rule_3"] == json.loads(
        (REPORT / "two_ends.json").read_text())["rule_3"]
    assert "tuned again on the stored measurements" in (out / "report.md").read_text()
    assert "transfer" not in doc           # --no-transfer: a stored one would be stale
    capsys.readouterr()
    assert main(argv[:5] + ["--out", str(tmp_path / "none"), "--retune"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no validation.json" in err[0]
    assert main(["validate", "--workload", "digits_mlp", "--sweep", str(SWEEP), "--out",
                 str(out), "--retune"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not 'digits_mlp'" in err[0]


def test_an_adam_report_is_tuned_again_with_the_certificate(tmp_path, capsys):
    """digits_mlp with Adam (mean-field Adam certified since session 39): every prediction and
    the comparison come back as stored; with certify off, the headline's B = 8 point takes the
    43 steps the rate scan alone stops at (42 certified). Other measurement settings are
    refused in one line, and so is --retune with --reuse, before any work."""
    shipped = ROOT / "reports" / "validation" / "digits_mlp_adam"
    sweep = ROOT / "sweeps" / "digits_mlp_adam"
    doc = json.loads((shipped / "validation.json").read_text())
    config, records = load_sweep(sweep)
    sizes = build_curve(records, config, read_repeats(sweep)).batch_sizes
    steps, stored_steps, local = _comes_back_and_without_certificate(doc, config, records, sizes)
    assert (steps[8], stored_steps[8]) == (43, 42)
    assert all(steps[b] >= stored_steps[b] for b in steps)

    out = tmp_path / "digits_mlp_adam"
    shutil.copytree(shipped, out)
    base = ["validate", "--workload", "digits_mlp", "--sweep", str(sweep), "--out", str(out),
            "--summary", str(tmp_path / "summary.json"), "--no-progress"]
    assert main(base + ["--retune", "--top-k", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "top_k differ" in err[0]
    assert main(base + ["--retune", "--reuse"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not both" in err[0]
    assert (out / "validation.json").read_bytes() == (shipped / "validation.json").read_bytes()

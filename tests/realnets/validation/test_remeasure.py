"""realnets.validation.remeasure and `python -m realnets remeasure`: a validation's measured side
from its sweep resumed with more trials, its predictions kept (docs/prediction_rule.md, session
45). Nothing here trains: the shipped 128-trial sweeps and their reports are the data."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from nqm.scaling import fit_mccandlish
from realnets.cli import main
from realnets.sweeps.curve import build_curve
from realnets.sweeps.records import load_sweep, read_repeats
from realnets.validation import files
from realnets.validation.comparison import comparison, measured_summary
from realnets.validation.miss_split import FACTORS, NQM_SIDE, with_measured
from realnets.validation.remeasure import prediction_sweep, remeasured
from realnets.validation.summary import read_summary, summary_entry
from realnets.validation.two_ends import compared
from realnets.validation.two_point import plan_curve

ROOT = Path(__file__).resolve().parents[3]
REPORTS = ROOT / "reports" / "validation"
NAME = "digits_attention"      # 32 -> 128 trials moved its B_ref steps (196 -> 146) and B_crit


def _best_steps_by_batch(trials_file: Path) -> dict[int, float]:
    """Per batch size, the fewest steps to goal of its trials, read straight from trials.jsonl
    (an independent reading of the measured curve)."""
    rows: dict[int, list] = {}
    for line in trials_file.read_text().splitlines():
        r = json.loads(line)
        rows.setdefault(r["batch_size"], []).append(r)
    out = {}
    for b, rs in rows.items():
        reached = [r["steps_to_goal"] for r in rs if r["steps_to_goal"] is not None]
        out[b] = float(min(reached)) if reached else math.nan
    return out


def test_with_measured_reproduces_every_shipped_split_at_its_own_measurement():
    shipped = sorted(REPORTS.glob("*/miss_split.json"))
    assert len(shipped) >= 30
    for path in shipped:
        record = json.loads(path.read_text())
        assert with_measured(record, record["measured"]) == record, path.parent.name


def test_with_measured_moves_only_the_network_side_and_the_ratio():
    record = json.loads((REPORTS / NAME / "miss_split.json").read_text())
    moved = with_measured(record, 2 * record["measured"])
    assert moved["ratio"] == pytest.approx(record["ratio"] / 2)
    assert moved["factors"]["shape_net"] == pytest.approx(record["factors"]["shape_net"] / 2)
    for k in FACTORS:
        if k != "shape_net":
            assert moved["factors"][k] == record["factors"][k]
    for k in NQM_SIDE:
        assert moved["intervals"][k] == record["intervals"][k]
    assert moved["draws"] == record["draws"]
    # P / M is still the product of the four factors
    assert math.prod(moved["factors"].values()) == pytest.approx(moved["ratio"])


def test_every_shipped_remeasured_report_is_what_its_sweep_gives():
    """The measured side of each shipped report predicted from fewer trials than its sweep has is
    the sweep's all-trials curve, and remeasuring it again changes nothing."""
    seen = 0
    for path in sorted(REPORTS.glob("*/validation.json")):
        doc = json.loads(path.read_text())
        if doc.get("predicted_from_trials") is None:
            continue
        seen += 1
        sweep = ROOT / doc["provenance"]["sweep"]
        config, records = load_sweep(sweep)
        assert doc["sweep_config"]["trials"] == config.trials > doc["predicted_from_trials"]
        again = remeasured(doc, config, records, read_repeats(sweep))
        assert again["measured"] == doc["measured"], path.parent.name
        assert again["comparison"] == doc["comparison"], path.parent.name
        # the fit is that of the best of all trials per batch size, read independently
        best = _best_steps_by_batch(sweep / "trials.jsonl")
        sizes = sorted(best)
        fit = fit_mccandlish(np.array(sizes, float), np.array([best[b] for b in sizes]))
        assert doc["measured"]["fit"]["b_crit"] == pytest.approx(fit.b_crit, rel=1e-9)
    assert seen == 24     # session 45's sixteen, multilabel_mlp, mnist_cnn, session 49's four,
    #                       session 50's two


def _as_made_from_32(tmp_path: Path) -> tuple[Path, Path, dict]:
    """A copy of the shipped report and sweep of NAME, the report put back as validate left it
    before the sweep was resumed (measured from the first 32 trials, records beside held against
    that): the state `remeasure` starts from. Returns (report dir, sweep dir, shipped doc)."""
    report, sweep = tmp_path / "reports" / NAME, tmp_path / "sweeps" / NAME
    shutil.copytree(REPORTS / NAME, report)
    shutil.copytree(ROOT / "sweeps" / NAME, sweep)
    shutil.copy(REPORTS / "summary.json", tmp_path / "reports" / "summary.json")
    shipped = json.loads((report / "validation.json").read_text())
    config, records = load_sweep(sweep)
    pconfig, first = prediction_sweep(shipped, config, records)
    old = {k: v for k, v in shipped.items() if k != "predicted_from_trials"}
    old["sweep_config"] = {**shipped["sweep_config"], "trials": 32}
    old["measured"] = measured_summary(build_curve(first, pconfig, read_repeats(sweep)))
    old["provenance"] = {k: v for k, v in shipped["provenance"].items() if k != "remeasured"}
    old["provenance"]["sweep"] = str(sweep)
    old["comparison"] = comparison(old)
    (report / "validation.json").write_text(json.dumps(old))
    m32 = old["measured"]["fit"]["b_crit"]
    ends = json.loads((report / "two_ends.json").read_text())
    (report / "two_ends.json").write_text(json.dumps(
        {**ends, "compared": compared(summary_entry(old))}))
    split = json.loads((report / "miss_split.json").read_text())
    (report / "miss_split.json").write_text(json.dumps(with_measured(split, m32)))
    point = json.loads((sweep / "two_point.json").read_text())
    point = {k: v for k, v in point.items() if k != "trials"}
    (sweep / "two_point.json").write_text(json.dumps(
        {**point, "measured": m32, "ratio": point["value"] / m32}))
    sides = files.side_records(report, old)
    assert sides["two_ends"] is not None and sides["miss_split"] is not None
    return report, sweep, shipped


def test_remeasure_cli_measures_from_all_trials_and_keeps_the_predictions(tmp_path, capsys):
    report, sweep, shipped = _as_made_from_32(tmp_path)
    old = json.loads((report / "validation.json").read_text())
    old_split = json.loads((report / "miss_split.json").read_text())
    assert main(["remeasure", str(report)]) == 0
    out = capsys.readouterr().out
    assert "from 128 trials per batch size" in out and "made from the first 32" in out
    doc = json.loads((report / "validation.json").read_text())
    # measured: the best of all 128 trials per batch size (read independently), fitted
    best = _best_steps_by_batch(sweep / "trials.jsonl")
    assert {p["batch_size"]: p["steps"] for p in doc["measured"]["points"]} == best
    m = doc["measured"]["fit"]["b_crit"]
    assert m == pytest.approx(shipped["measured"]["fit"]["b_crit"], rel=1e-12)
    assert m != pytest.approx(old["measured"]["fit"]["b_crit"], rel=0.05)
    assert doc["sweep_config"]["trials"] == 128 and doc["predicted_from_trials"] == 32
    assert doc["provenance"]["remeasured"].startswith("python -m realnets remeasure")
    # the predictions and everything else made from the 32 trials are untouched
    for key in ("checkpoints", "calibration_run", "branching", "transfer", "full_batch"):
        assert doc.get(key) == old.get(key), key
    # every ratio in the table is now against the new measurement
    for row in doc["comparison"]:
        if row["value"] is not None and row["ratio"] is not None:
            assert row["ratio"] == pytest.approx(row["value"] / m)
    # the records beside follow: both still belong to the document
    sides = files.side_records(report, doc)
    assert sides["two_ends"]["compared"]["measured"]["b_crit"] == m
    split = sides["miss_split"]
    assert split["measured"] == m
    assert split["factors"]["shape_net"] * m == pytest.approx(
        old_split["factors"]["shape_net"] * old_split["measured"])
    point = json.loads((sweep / "two_point.json").read_text())
    assert point["trials"] == 32 and point["ratio"] == pytest.approx(point["value"] / m)
    text = (report / "report.md").read_text()
    assert "the predictions are the ones made from its first 32" in text
    assert f"{m:.4g}" in text
    entry = [e for e in read_summary(tmp_path / "reports" / "summary.json")
             if e["workload"] == doc["workload"]]
    assert len(entry) == 1 and entry[0]["measured"]["b_crit"] == m
    # the plan reads the two-point record against the 32 trials it was made from; the same
    # record without its trial count is stale (B_ref's steps moved from 196 to 146 at 128)
    config, records = load_sweep(sweep)
    curve = build_curve(records, config)
    assert plan_curve(point, curve).b_ref == point["b_ref"]
    with pytest.raises(ValueError, match="rerun `python -m realnets two-point`"):
        plan_curve({k: v for k, v in point.items() if k != "trials"}, curve)
    # the commands that predict read the first 32 trials per batch size
    from realnets.cli.diagnostics import _report_sweep

    _, pconfig, first = _report_sweep(files.read_validation(report), None, report)
    assert pconfig.trials == 32 and len(first) == 32 * len(config.batch_sizes)
    # again: nothing moves
    before = {p.name: p.read_bytes() for p in report.glob("*.json")}
    assert main(["remeasure", str(report)]) == 0
    after = {p.name: p.read_bytes() for p in report.glob("*.json")}
    assert after == before


def _one_line_error(capsys, *argv) -> str:
    status = main(list(argv))
    out, err = capsys.readouterr()
    assert status == 2 and out == "", out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def test_remeasure_refuses_another_sweep_in_one_line_and_writes_nothing(tmp_path, capsys):
    report, sweep, _ = _as_made_from_32(tmp_path)
    before = {p.name: p.read_bytes() for p in report.iterdir()}
    config = json.loads((sweep / "config.json").read_text())
    # another study
    (sweep / "config.json").write_text(json.dumps({**config, "goal": config["goal"] / 2}))
    assert "goal differ" in _one_line_error(capsys, "remeasure", str(report))
    (sweep / "config.json").write_text(json.dumps(config))
    # a sweep not yet run to its trials
    lines = (sweep / "trials.jsonl").read_text().splitlines()
    (sweep / "trials.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    assert "trials must be run" in _one_line_error(capsys, "remeasure", str(report))
    # a sweep whose first 32 trials are not those the predictions were made from: the
    # reference trial (B = 8) made faster
    run = json.loads((report / "validation.json").read_text())["calibration_run"]
    rows = [json.loads(x) for x in lines]
    for r in rows:
        if r["batch_size"] == run["batch_size"] and r["trial_id"] == run["trial_id"]:
            r["steps_to_goal"] -= 1
    (sweep / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "reference trial" in _one_line_error(capsys, "remeasure", str(report))
    assert "no validation.json" in _one_line_error(capsys, "remeasure", str(sweep))
    assert {p.name: p.read_bytes() for p in report.iterdir()} == before


def test_validate_with_prediction_trials_makes_the_remeasured_document_again(tmp_path, capsys,
                                                                           one_default_device):
    """`validate --prediction-trials 32` on the tabular sweep resumed to 128 trials: in one
    command the document `validate` then `remeasure` left (predictions from the first 32, the
    measured side from all 128), number for number (about 30 s), on one device as the shipped
    document was made (`one_default_device`)."""
    shipped = json.loads((REPORTS / "breast_cancer_mlp" / "validation.json").read_text())
    out = tmp_path / "bc"
    assert main(["validate", "--workload", "examples/breast_cancer.py:make_workload", "--sweep",
                 str(ROOT / "sweeps" / "breast_cancer_mlp"), "--out", str(out),
                 "--prediction-trials", "32", "--summary", str(tmp_path / "summary.json"),
                 "--no-progress"]) == 0
    capsys.readouterr()
    doc = json.loads((out / "validation.json").read_text())
    assert doc["predicted_from_trials"] == 32 and doc["sweep_config"] == shipped["sweep_config"]
    assert doc["measured"] == shipped["measured"]
    # the same to float32 round-off: the test session's XLA (8 simulated devices, even with one
    # used) sums the rerun's losses in another order than the one-device command did
    # (Lanczos residuals near round-off are not compared: the table of every estimate is)
    _close(doc["calibration_run"], shipped["calibration_run"])
    _close(doc["comparison"], shipped["comparison"])


def _close(got, want, where="") -> None:
    """Equal structure and integers and text, floats within 1e-4 relative."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), where
        for k in want:
            _close(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert got == pytest.approx(want, rel=1e-4, nan_ok=True), where
    else:
        assert got == want, where

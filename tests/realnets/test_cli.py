"""`python -m realnets`: bad flags give one clear line and exit 2; report and import formats."""

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from realnets.cli import main
from realnets.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "batch_science"


def _run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("argv, names", [
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--batch-sizes", "0,16"], "batch-sizes"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--batch-sizes", ""], "batch-sizes"),
    (["sweep", "--workload", "imagenet", "--out", "X"], "workload"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--trials", "0"], "trials"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--max-steps", "-5"], "max-steps"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--lr-range", "1,0.1"], "lr-range"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--lr-range", "abc"], "lr-range"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--one-minus-momentum-range", "0.1,2"],
     "one-minus-momentum-range"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--decay-steps-range", "0,50"],
     "decay-steps-range must be LO,HI with 1 <= LO"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--decay-steps-range", "ten,50"],
     "decay-steps-range must be two numbers"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--max-steps", "100",
      "--final-lr-fraction-range", "0.1,1",
      "--decay-steps-range", "10,101"], "decay-steps-range must end at or below max-steps (100)"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--decay-steps-range", "10,50"],
     "decay-steps-range needs a final-lr-fraction-range"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--goal", "nan"], "goal"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--goal", "-3"], "--goal must be in [0, 1]"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--goal", "1.5"], "error metric"),
    (["sweep", "--workload", "text_transformer", "--out", "X", "--goal", "-0.1"], "cross_entropy"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--goal", "soon"], "--goal"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--optimizer", "lbfgs"], "optimizer"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--trials", "two"], "trials"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--noise-every", "-1"], "noise-every"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--text-file", "a.txt"], "text-file"),
    (["sweep", "--workload", "text_transformer", "--out", "X", "--text-file", "/no/such.txt"],
     "text-file"),
    (["sweep", "--workload", "mnist_mlp"], "--out"),
    (["sweep", "--workload", "mnist_mlp", "--out", "X", "--num-processes", "2"], "coordinator"),
    (["report", "/no/such/sweep"], "sweep directory"),
    (["import-batch-science", "/no/such/archive", "--goal", "0.01"], "root"),
    (["import-batch-science", str(FIXTURE)], "--goal"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_and_status_2(capsys, tmp_path, argv, names):
    argv = [str(tmp_path / "out") if a == "X" else a for a in argv]
    status, out, err = _run(capsys, *argv)
    assert status == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:")
    assert names in lines[0]
    assert not (tmp_path / "out").exists()


def test_bad_flag_from_the_shell_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "realnets", "sweep", "--workload", "mnist_mlp",
                           "--batch-sizes", "16,-1", "--out", "/tmp/never"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.startswith("error:")


def test_every_subcommand_has_a_handler():
    import argparse

    from realnets.cli import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)


def test_workloads_lists_every_workload_with_its_goal(capsys):
    status, out, _ = _run(capsys, "workloads", "--format", "json")
    assert status == 0
    listed = json.loads(out)
    assert [w["name"] for w in listed] == list(WORKLOADS)
    for w in listed:
        assert w["goal_note"] and w["batch_sizes"] and w["max_steps"] > 0
    # A workload without a goal of its own (the held-out ones) lists null, valid JSON, and its
    # text block says the pilot rule sets it; every other goal is a finite number.
    pilot_ruled = {w["name"] for w in listed if w["goal"] is None}
    assert pilot_ruled == {name for name, w in WORKLOADS.items() if math.isnan(w.goal)}
    assert {"digits_cnn", "mnist_logreg"} <= pilot_ruled
    status, table, _ = _run(capsys, "workloads")
    blocks = {block.split("\n")[0]: block for block in table.split("\n\n")}
    assert set(blocks) == set(WORKLOADS)
    for name, block in blocks.items():
        assert ("by the pilot rule" in block.split("\n")[3]) == (name in pilot_ruled)


def _write_sweep(path: Path):
    config = {"workload": "digits_mlp", "goal": 0.1, "optimizer": "momentum", "trials": 2,
              "max_steps": 100, "batch_sizes": [8, 16, 32],
              "search": {"learning_rate": [1e-3, 3.0], "one_minus_momentum": [0.01, 1.0]}}
    trials = []
    for b, steps, trace in ((8, 80, 100.0), (16, 40, 200.0), (32, 30, 400.0)):
        trials.append({"batch_size": b, "trial_id": 0, "status": "COMPLETE", "steps_to_goal": steps,
                       "learning_rate": 0.1, "momentum": 0.9,
                       "noise_scale": {"b_simple": [50.0, trace], "grad_sq_ema": [3.0, 1.0],
                                       "trace_cov_ema": [150.0, trace]}})
        trials.append({"batch_size": b, "trial_id": 1, "status": "INFEASIBLE",
                       "steps_to_goal": None, "learning_rate": 2.9, "momentum": 0.99,
                       "noise_scale": {"b_simple": []}})
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    (path / "trials.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trials))


def test_report_formats_agree(capsys, tmp_path):
    _write_sweep(tmp_path / "s")
    status, table, _ = _run(capsys, "report", str(tmp_path / "s"))
    assert status == 0 and "B_crit" in table and "cbs20" in table
    status, text, _ = _run(capsys, "report", str(tmp_path / "s"), "--format", "json")
    doc = json.loads(text)
    assert [p["steps"] for p in doc["points"]] == [80, 40, 30]
    assert doc["regimes"]["cbs20"] == 16          # 8 -> 16 halves the steps, 32 does not
    # pooled with weights B^2: (64 * 100 + 256 * 200 + 1024 * 400) / (64 + 256 + 1024)
    assert doc["noise_scale"]["b_simple"] == pytest.approx(467200 / 1344)
    assert doc["noise_scale"]["per_point_b_simple"] == [100.0, 200.0, 400.0]
    assert doc["efficiency"][1] == pytest.approx(1.0)
    status, text, _ = _run(capsys, "report", str(tmp_path / "s"), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(r["steps"]) for r in rows] == [80, 40, 30]
    assert [int(r["infeasible"]) for r in rows] == [1, 1, 1]


def test_report_of_corrupt_sweep_is_a_clear_error(capsys, tmp_path):
    _write_sweep(tmp_path / "s")
    (tmp_path / "s" / "config.json").write_text("{not json")
    status, _, err = _run(capsys, "report", str(tmp_path / "s"))
    assert status == 2 and "config" in err and "not valid JSON" in err


@pytest.mark.parametrize("field, value, names", [
    ("trial_id", None, "trial_id is missing"),
    ("learning_rate", None, "learning_rate must be a finite number, got None"),
    ("learning_rate", -0.1, "learning_rate must be > 0, got -0.1"),
    ("status", "DONE", "status must be one of"),
    ("batch_size", 2.5, "batch_size must be a whole number >= 1, got 2.5"),
    ("steps_to_goal", -3, "steps_to_goal must be a whole number >= 1, got -3"),
])
def test_report_of_a_bad_trial_record_names_the_field(capsys, tmp_path, field, value, names):
    _write_sweep(tmp_path / "s")
    lines = (tmp_path / "s" / "trials.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    if value is None:
        del record[field]
    else:
        record[field] = value
    lines[1] = json.dumps(record)
    (tmp_path / "s" / "trials.jsonl").write_text("\n".join(lines) + "\n")
    status, out, err = _run(capsys, "report", str(tmp_path / "s"))
    assert status == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "trials.jsonl record 2" in err and names in err


def test_report_of_a_config_without_batch_sizes_is_a_clear_error(capsys, tmp_path):
    _write_sweep(tmp_path / "s")
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    del config["batch_sizes"]
    (tmp_path / "s" / "config.json").write_text(json.dumps(config))
    status, out, err = _run(capsys, "report", str(tmp_path / "s"))
    assert status == 2 and out == "" and "batch_sizes must hold at least one" in err


def test_import_batch_science_gives_the_same_curve_format(capsys, tmp_path):
    status, text, _ = _run(capsys, "import-batch-science", str(FIXTURE), "--goal", "0.02",
                           "--format", "json", "--out", str(tmp_path / "imported"))
    assert status == 0
    (doc,) = json.loads(text)
    assert [p["steps"] for p in doc["points"]] == [3000, 2000, 1000, None]
    assert doc["source"] == "batch_science"
    (written,) = list((tmp_path / "imported").glob("*/curve.json"))
    assert json.loads(written.read_text())["points"] == doc["points"]


def test_noise_every_flag_reaches_the_trials(capsys, tmp_path):
    # --noise-every 0: no noise-scale estimate on one device (several devices, as here under
    # tests/conftest.py, measure it anyway: it comes with the all-reduce); 2: estimates
    for every in (0, 2):
        out = tmp_path / f"n{every}"
        status, _, err = _run(capsys, "sweep", "--workload", "digits_mlp", "--batch-sizes", "32",
                              "--trials", "1", "--max-steps", "6", "--goal", "0.9",
                              "--noise-every", str(every), "--out", str(out), "--no-progress")
        assert status == 0, err
        (record,) = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
        measured = every > 0 or record["devices"] > 1
        # the record holds the cadence that ran: several devices measure every step
        assert record["noise_every"] == (every if record["devices"] == 1 else 1)
        assert any(b is not None for b in record["noise_scale"]["b_simple"]) == measured


def test_bad_decay_steps_range_runs_nothing(capsys, tmp_path):
    status, _, err = _run(capsys, "sweep", "--workload", "digits_mlp", "--max-steps", "6",
                          "--final-lr-fraction-range", "0.1,1",
                          "--decay-steps-range", "2,7", "--out", str(tmp_path / "out"))
    assert status == 2 and "decay-steps-range" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_decay_steps_range_reaches_the_trials(capsys, tmp_path):
    out = tmp_path / "d"
    status, _, err = _run(capsys, "sweep", "--workload", "digits_mlp", "--batch-sizes", "32",
                          "--trials", "2", "--max-steps", "6", "--goal", "0.01",
                          "--final-lr-fraction-range", "0.01,0.5",
                          "--decay-steps-range", "2,5", "--out", str(out), "--no-progress")
    assert status == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["search"]["decay_steps"] == [2.0, 5.0]
    records = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert [r["trial_id"] for r in records] == [0, 1]
    from realnets.training.search import trial_specs
    from realnets.sweeps.records import SweepConfig
    specs = trial_specs(SweepConfig.from_dict(config).search, config["optimizer"], 2, 0)
    assert [r["decay_steps"] for r in records] == [s.decay_steps for s in specs]
    assert all(isinstance(r["decay_steps"], int) and 2 <= r["decay_steps"] <= 5 for r in records)


def test_reuse_rebuilds_the_measured_part_from_the_sweep_and_its_reruns(tmp_path):
    """validate --reuse's measured part comes from the sweep directory: the text model's with
    its reruns has the reruns' interval; the same sweep without them has none."""
    import shutil

    from realnets.cli import _refreshed_measured
    from realnets.validation.files import read_validation

    old = read_validation(ROOT / "reports" / "validation" / "text_transformer")
    sweep = tmp_path / "text_transformer"
    shutil.copytree(ROOT / "sweeps" / "text_transformer", sweep)
    fresh, (config, records) = _refreshed_measured(old, sweep, print)
    assert config.workload == "text_transformer" and records
    assert fresh.measured["interval"]["method"] == "repeats"
    assert fresh.measured["repeats"]["rerun_median_b_crit"] == pytest.approx(
        old.measured["repeats"]["rerun_median_b_crit"])
    (sweep / "repeats.jsonl").unlink()
    bare, _ = _refreshed_measured(old, sweep, print)
    assert bare.measured["interval"]["available"] is False and bare.measured["repeats"] is None
    assert bare.measured["points"] == old.measured["points"]
    # another study in that directory (another goal) is refused in one line
    config_file = sweep / "config.json"
    config_file.write_text(config_file.read_text().replace('"goal": 1.8', '"goal": 1.7'))
    with pytest.raises(ValueError, match="is not the sweep this validation was made from"):
        _refreshed_measured(old, sweep, print)


@pytest.mark.parametrize("module, argv", [("realnets", ["workloads"]),
                                          ("nqm", ["curve", "--dim", "20", "--batch-sizes", "4,64"])])
def test_a_reader_that_closes_the_pipe_gets_no_traceback(module, argv):
    # `... | head`: the reader is gone before the command prints. Python's default is a
    # BrokenPipeError traceback and a second error at exit; the entry points end quietly, with
    # the status of a process killed by SIGPIPE.
    proc = subprocess.Popen([sys.executable, "-m", module, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err


def test_a_broken_pipe_that_is_not_standard_output_is_raised(monkeypatch):
    # Only stdout's reader going away is quiet: another closed pipe inside a command is an error.
    from nqm.argparser import exit_with

    def main():
        raise BrokenPipeError("a worker's socket")

    with pytest.raises(BrokenPipeError, match="worker"):
        exit_with(main)

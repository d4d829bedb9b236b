"""realnets.validation.full_batch_inits: the fastest full-batch configuration from other
initialisations, against float64 gradient descent written out on a quadratic task's exact loss;
the fixed reading; bad seeds and bad command lines refused in one line."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pytest

from nqm.problem import NQMConfig
from realnets.sweeps.records import SweepConfig
from realnets.validation import full_batch_inits, two_ends
from realnets.validation.files import TWO_ENDS_FILE
from realnets.validation.reconciliation import rerun_percentiles
from realnets.validation.rerun import init_params_of
from realnets.workloads import tasks
from realnets.workloads.search_space import TrialSearchSpace

CPU = jax.devices("cpu")[:1]
H = np.array([2.0, 0.5, 0.1])


def _descent_steps(theta, rate, target, cap):
    """Plain float64 gradient descent on 1/2 theta^T H theta: the first step at the target."""
    for steps in range(cap + 1):
        if 0.5 * H @ theta ** 2 <= target:
            return steps
        theta = theta - rate * H * theta
    return None


def _quadratic(monkeypatch):
    """A quadratic task with unlimited data (its whole set 4,096 rows) and a plain-SGD sweep."""
    config = NQMConfig(curvature=tuple(H), noise_variance=(1.0, 0.5, 0.2),
                       init_second_moments=(4.0,) * 3, target=0.1)
    monkeypatch.setattr(two_ends, "UNLIMITED_ROWS", 4096)
    sweep = SweepConfig(workload="nqm", batch_sizes=(4, 8), trials=4, max_steps=500, goal=0.1,
                        optimizer="sgd", search=TrialSearchSpace((0.01, 2.0)), seed=5)
    return tasks.quadratic_task(config.problem()), sweep


def test_each_initialisation_descends_as_gradient_descent_written_out(monkeypatch):
    task, sweep = _quadratic(monkeypatch)
    target, rate, cap, seeds = 0.05, 0.9, 40, [1, 2, 3, 4, 6, 7, 8]
    record = {"b_ref": 4, "reruns": {"percentiles": {"16": 30.0, "50": 44.0, "84": 50.0}},
              "full_set": {"steps": 9, "trial_id": 1, "learning_rate": rate, "momentum": None,
                           "target": target, "step_limit": cap}}
    got = full_batch_inits.over_inits(task, sweep, record, seeds, rows_seed=0, devices=CPU)
    expect = [_descent_steps(np.asarray(init_params_of(task, s, 1)["theta"], np.float64),
                             rate, target, cap) for s in seeds]
    assert got["steps"] == expect and len(set(expect)) > 1      # the inits differ
    assert got["percentiles"] == rerun_percentiles(expect)
    median = got["percentiles"]["50"]
    assert got["over_s_fb"] == pytest.approx(median / 9)
    assert got["two_point"] == (pytest.approx(4 * (44.0 / median - 1)) if median < 44 else None)
    assert got["reading"] == full_batch_inits.reading(9, median)
    # a cap below every descent: none at the target, the median unknown, the reading 'explains'
    short = {**record, "full_set": {**record["full_set"], "step_limit": 0}}
    got = full_batch_inits.over_inits(task, sweep, short, [1, 2], rows_seed=0, devices=CPU)
    assert got["steps"] == [None, None] and got["two_point"] is None
    assert got["reading"] == "explains"
    with pytest.raises(ValueError, match="nothing to repeat"):
        full_batch_inits.over_inits(task, sweep, {**record, "full_set": {"steps": None}}, [1], 0)
    with pytest.raises(ValueError, match="seed 5 is the sweep's own"):   # its trials' inits
        full_batch_inits.over_inits(task, sweep, record, [4, 5], rows_seed=0, devices=CPU)


def test_a_killed_run_resumes_from_its_journal(monkeypatch, tmp_path):
    """Three of five initialisations journalled by a first call: the second descends from the
    other two only and gives what one uninterrupted call gives; another target starts afresh."""
    task, sweep = _quadratic(monkeypatch)
    record = {"b_ref": 4, "reruns": {"percentiles": {"16": 30.0, "50": 44.0, "84": 50.0}},
              "full_set": {"steps": 9, "trial_id": 1, "learning_rate": 0.9, "momentum": None,
                           "target": 0.05, "step_limit": 40}}
    seeds, journal = [1, 2, 3, 4, 6], tmp_path / "inits.jsonl"
    whole = full_batch_inits.over_inits(task, sweep, record, seeds, rows_seed=0, devices=CPU)
    full_batch_inits.over_inits(task, sweep, record, seeds[:3], rows_seed=0, devices=CPU,
                                journal=journal)
    calls, real = [], full_batch_inits.descend
    monkeypatch.setattr(full_batch_inits, "descend",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    got = full_batch_inits.over_inits(task, sweep, record, seeds, rows_seed=0, devices=CPU,
                                      journal=journal)
    assert len(calls) == 2 and got["steps"] == whole["steps"]
    assert got["percentiles"] == whole["percentiles"]
    other = {**record, "full_set": {**record["full_set"], "target": 0.04}}
    full_batch_inits.over_inits(task, sweep, other, seeds, rows_seed=0, devices=CPU,
                                journal=journal)
    assert len(calls) == 7


def test_a_run_killed_inside_a_descent_resumes_it_from_its_last_save(monkeypatch, tmp_path,
                                                                     killable_loss):
    """Killed inside the second initialisation's descent: the next call takes the first from
    the journal, starts the second at its last 5-step save (not at step 0), and gives what one
    uninterrupted call gives; no partial file is left."""
    task, sweep = _quadratic(monkeypatch)
    record = {"b_ref": 4, "reruns": {"percentiles": {"16": 30.0, "50": 44.0, "84": 50.0}},
              "full_set": {"steps": 9, "trial_id": 1, "learning_rate": 0.3, "momentum": None,
                           "target": 0.05, "step_limit": 200}}
    seeds, journal = [1, 2], tmp_path / "inits.jsonl"
    whole = full_batch_inits.over_inits(task, sweep, record, seeds, rows_seed=0, devices=CPU)
    first, second = whole["steps"]
    assert first is not None and second is not None and second > 15
    # the first descent takes first + 1 evaluations; kill 13 into the second (its save at 10)
    killable_loss.install(full_batch_inits, kill_at=first + 1 + 13)
    with pytest.raises(killable_loss.Killed):
        full_batch_inits.over_inits(task, sweep, record, seeds, rows_seed=0, devices=CPU,
                                    journal=journal)
    partial = journal.with_suffix(".partial.npz")
    assert partial.is_file()
    killable_loss.calls.clear()
    killable_loss.install(full_batch_inits)
    got = full_batch_inits.over_inits(task, sweep, record, seeds, rows_seed=0, devices=CPU,
                                      journal=journal)
    assert got["steps"] == whole["steps"] and len(killable_loss.calls) == second + 1 - 10
    assert not partial.exists()


def test_the_reading_by_its_fixed_thresholds():
    read = full_batch_inits.reading
    assert read(10, 15.0) == "explains" and read(10, None) == "explains"
    assert read(10, 14.9) == "partly" and read(10, 13.0) == "partly"
    assert read(10, 12.9) == "does not" and read(10, 10.0) == "does not"


@pytest.mark.parametrize("seeds", [[], [-1, 2], [3, 3]])
def test_bad_seeds_are_refused(seeds):
    with pytest.raises(ValueError, match="distinct whole numbers >= 0"):
        full_batch_inits.check_seeds(seeds)


@pytest.mark.parametrize("extra, message", [
    (["--full-batch-inits", "1,1"], "distinct whole numbers >= 0"),
    (["--full-batch-inits", "one,two"], "whole numbers separated by commas"),
    (["--full-batch-inits", "1,2", "--stored"], "give it without --stored"),
])
def test_the_command_refuses_bad_input_in_one_line(tmp_path, capsys, extra, message):
    from realnets.cli import main

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / TWO_ENDS_FILE).write_text(json.dumps({"full_set": {"steps": 3}}))
    assert main(["two-ends", str(tmp_path / "a"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_the_command_needs_a_stored_record(tmp_path, capsys):
    from realnets.cli import main

    (tmp_path / "b").mkdir()
    assert main(["two-ends", str(tmp_path / "b"), "--full-batch-inits", "1,2"]) == 2
    assert "no two_ends.json" in capsys.readouterr().err


def test_the_command_writes_the_record_and_refreshes_the_summary_beside(tmp_path, tabular_report,
                                                                        capsys):
    """On a copy of a shipped report (the small tabular one) with a summary beside it: the
    record gains `full_batch_inits` for the seeds given, and the summary's entry its
    B_2pt'(med) = B_ref (S~_ref / median - 1) from that record."""
    from realnets.cli import main
    from realnets.validation.summary import SUMMARY_FILE, read_summary

    d = tabular_report
    stripped = json.loads((d / TWO_ENDS_FILE).read_text())
    stripped.pop("full_batch_inits", None)
    (d / TWO_ENDS_FILE).write_text(json.dumps(stripped))
    assert main(["two-ends", str(d), "--full-batch-inits", "1,2,3", "--no-progress"]) == 0
    assert "B_2pt'(med) " in capsys.readouterr().out
    got = json.loads((d / TWO_ENDS_FILE).read_text())["full_batch_inits"]
    assert got["seeds"] == [1, 2, 3] and len(got["steps"]) == 3
    (entry,) = read_summary(tmp_path / SUMMARY_FILE)
    med = entry["two_ends"]["b_2pt_med"]
    assert med["s_fb_median"] == got["percentiles"]["50"] == float(np.median(
        [s if s is not None else np.inf for s in got["steps"]]))
    s_ref = stripped["reruns"]["percentiles"]["50"]
    want = (None if s_ref <= med["s_fb_median"]
            else stripped["b_ref"] * (s_ref / med["s_fb_median"] - 1))
    assert med["b_crit"] == (None if want is None else pytest.approx(want))


def test_the_default_seeds_leave_out_the_sweeps_own_and_the_refusal_suggests_them():
    assert full_batch_inits.default_seeds(0) == list(range(1, 17))
    assert full_batch_inits.default_seeds(5) == [1, 2, 3, 4] + list(range(6, 18))
    with pytest.raises(ValueError, match=r"seed 5 is the sweep's own.*e\.g\. 1,2,3,4,6,7"):
        full_batch_inits.check_seeds([4, 5], sweep_seed=5)
    assert full_batch_inits.check_seeds([4, 6], sweep_seed=5) == [4, 6]


def test_two_ends_checks_every_directory_before_any_descent(tmp_path, monkeypatch, capsys):
    """`two-ends A B --full-batch-inits ...` refuses the sweep's own seed (0 for the shipped
    tabular sweep), and a directory whose whole-set descents all missed the target, in one line
    before descending anywhere: A's record is left as it was."""
    import shutil
    from pathlib import Path

    from realnets.cli import main

    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(root)
    monkeypatch.setattr(full_batch_inits, "over_inits",
                        lambda *a, **k: pytest.fail("descended before every input was checked"))
    dirs = []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        for f in ("validation.json", TWO_ENDS_FILE, "miss_split.json"):
            shutil.copy(root / "reports" / "validation" / "breast_cancer_mlp" / f, d / f)
        dirs.append(d)
    before = (dirs[0] / TWO_ENDS_FILE).read_text()
    assert main(["two-ends", *map(str, dirs), "--full-batch-inits", "0,1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seed 0 is the sweep's own" in err and "e.g. 1,2,3" in err
    missed = json.loads((dirs[1] / TWO_ENDS_FILE).read_text())
    missed["full_set"]["steps"] = None
    (dirs[1] / TWO_ENDS_FILE).write_text(json.dumps(missed))
    assert main(["two-ends", *map(str, dirs), "--full-batch-inits", "1,2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no whole-set descent" in err and str(dirs[1]) in err
    assert (dirs[0] / TWO_ENDS_FILE).read_text() == before


def test_the_journal_names_the_chunking_only_where_the_set_takes_several_calls(monkeypatch,
                                                                                tmp_path):
    """A journal header carries chunk_rows only when the whole set is cut into several calls, so
    a journal made all at once (before chunking was the default) resumes with chunk_rows at
    least the set's rows; a run in smaller chunks starts it afresh. (The task without its exact
    loss: its whole set is 4,096 drawn rows.)"""
    task, sweep = _quadratic(monkeypatch)
    task = dataclasses.replace(task, population=None)
    record = {"b_ref": 4, "reruns": {"percentiles": {"16": 30.0, "50": 44.0, "84": 50.0}},
              "full_set": {"steps": 9, "trial_id": 1, "learning_rate": 0.9, "momentum": None,
                           "target": 0.05, "step_limit": 40}}
    journal = tmp_path / "inits.jsonl"
    full_batch_inits.over_inits(task, sweep, record, [1, 2], rows_seed=0, devices=CPU,
                                journal=journal)             # the default, 1,024 rows a call
    header = json.loads(journal.read_text().splitlines()[0])["header"]
    rows = header["rows"]
    assert rows > 1024 and header["chunk_rows"] == 1024
    # as a journal made all at once was written: no chunk_rows
    old = {k: v for k, v in header.items() if k != "chunk_rows"}
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join([json.dumps({"header": old})] + lines[1:]) + "\n")
    calls, real = [], full_batch_inits.descend
    monkeypatch.setattr(full_batch_inits, "descend",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    full_batch_inits.over_inits(task, sweep, record, [1, 2], rows_seed=0, devices=CPU,
                                chunk_rows=rows, journal=journal)
    assert calls == []                                         # both taken from the journal
    full_batch_inits.over_inits(task, sweep, record, [1, 2], rows_seed=0, devices=CPU,
                                chunk_rows=rows // 2, journal=journal)
    assert len(calls) == 2                                     # other chunking: afresh

"""summary.json: one entry per validated sweep (workload, optimizer, goal), the headline numbers
of its validation document."""

import json
import shutil
from pathlib import Path

import pytest

from realnets.cli import main as realnets_main
from realnets.validation.files import (INITS_JOURNAL, MISS_SPLIT_FILE, TWO_ENDS_FILE, read_validation,
                                       side_records, write_validation)
from realnets.validation.summary import (SUMMARY_FILE, entry_key, read_summary,
                                         rebuild_summary, refresh_summary, reruns_table,
                                         rule_1_of, rule_2_table, summary_entry,
                                         median_end_table, summary_table,
                                         two_ends_table, update_summary)

REPORTS = Path(__file__).resolve().parents[3] / "reports" / "validation"


def _doc(workload="w", measured=100.0, predicted=150.0, optimizer="sgd"):
    return {"workload": workload,
            "settings": {"target_rule": "step_matched", "checkpoints": ["goal", "init"]},
            "sweep_config": {"optimizer": optimizer, "goal": 0.1},
            "measured": {"fit": {"b_crit": measured},
                         "interval": {"available": True, "p16": 80.0, "p84": 130.0}},
            "checkpoints": {"goal": {
                "predictions": {"step_matched": {
                    "tuned": {"fit": {"b_crit": predicted}},
                    "bootstrap": {"tuned": {"p16": 120.0, "p84": 170.0}}},
                    "train_loss": {"tuned": {"fit": {"b_crit": 999.0}}}},
                "b_noise": {"b_noise": {"value": 50.0, "uncertainty": 5.0}},
                "gradient": {"b_simple": {"value": 40.0},
                             "trace_cov": {"value": 4.0, "uncertainty": 0.4},
                             "grad_sq_norm": {"value": 0.1, "uncertainty": 0.0}}}},
            "local_cbs": [{"step": 10, "cbs": 64, "detail": "x"}]}


def test_entry_takes_the_headline_rule_and_checkpoint():
    """Without both ends measured the prediction of record is rule 1, the headline target rule's."""
    e = summary_entry(_doc())
    assert e["rule"] == "rule_1" and e["checkpoint"] == "goal"
    assert e["measured"] == {"b_crit": 100.0, "lo": 80.0, "hi": 130.0, "bound": None,
                             "method": "trials", "search": None}
    # 32 trials resampled: where a 128-trial search would likely put it, x1.360 either side
    doc = _doc()
    doc["measured"]["interval"]["method"] = "trials"
    doc["sweep_config"]["trials"] = 32
    got = summary_entry(doc)["measured"]["search"]
    assert (got["lo"], got["hi"]) == pytest.approx((100.0 / 1.360, 136.0))
    assert e["reruns"] is None
    assert e["predicted"] == {"b_crit": 150.0, "lo": 120.0, "hi": 170.0, "bound": None}
    assert e["ratio"] == pytest.approx(1.5)
    assert e["rule_1"] == {"target_rule": "step_matched", "b_crit": 150.0, "lo": 120.0,
                           "hi": 170.0, "bound": None, "ratio": pytest.approx(1.5)}
    assert e["rule_4"] is None
    assert e["b_noise"] == {"value": 50.0, "se": 5.0}
    assert e["b_simple"]["value"] == 40.0
    assert e["b_simple"]["se"] == pytest.approx(40.0 * 0.1)     # relative errors 0.1 and 0
    assert e["local_cbs"] == [{"step": 10, "cbs": 64}]


def test_entry_of_a_censored_sweep_has_no_measured_interval():
    doc = _doc()
    doc["measured"]["interval"] = {"available": False, "note": "needs --full-trials"}
    assert summary_entry(doc)["measured"] == {"b_crit": 100.0, "lo": None, "hi": None,
                                              "bound": None, "method": None, "search": None}


def test_entry_with_reruns_names_the_method_and_tabulates_the_reruns():
    doc = _doc()
    reruns = {"available": True, "method": "repeats", "p16": 60.0, "p84": 140.0,
              "runs": [9, 9], "resamples": 200, "rerun_median_b_crit": 75.0,
              "rerun_median_resampled": {"resamples": 200, "fitted": 200, "median": 76.0,
                                         "p16": 70.0, "p84": 90.0}}
    doc["measured"]["interval"] = reruns     # a censored sweep: its interval is the reruns'
    doc["measured"]["repeats"] = reruns
    e = summary_entry(doc)
    assert e["measured"]["method"] == "repeats" and e["measured"]["lo"] == 60.0
    # the median curve's B_crit with its interval over seeds; one run per batch size beside it
    assert e["reruns"] == {"b_crit": 75.0, "lo": 70.0, "hi": 90.0,
                           "one_run": {"lo": 60.0, "hi": 140.0}}
    assert "100 (60-140)†" in summary_table([e]) and "† Over reruns" in summary_table([e])
    row = reruns_table([e, summary_entry(_doc("plain"))]).splitlines()
    # one row, for the rerun workload: the prediction of record (rule 1 here) 150 / 75 = 2, rule
    # 1 the same, B_simple 40 / 75
    assert len(row) == 3 and row[2].startswith(
        "| w | sgd | 100 | 60-140 | 75 (70-90) | 2 (1) | 2 | 0.533 |")
    # reruns whose seeds' draws fitted too seldom: the median curve has no interval
    reruns["rerun_median_resampled"].update(p16=None, p84=None)
    e = summary_entry(doc)
    assert e["reruns"]["lo"] is None and e["reruns"]["one_run"] == {"lo": 60.0, "hi": 140.0}
    assert "| 60-140 | 75 | 2 (1) | 2 |" in reruns_table([e])


def test_entry_and_table_carry_rule_2_beside_the_headline():
    doc = _doc()
    assert summary_entry(doc)["rule_2"] is None and rule_2_table([summary_entry(doc)]) == ""
    doc["full_batch"] = {"steps": 12, "reference_reruns": [30, 60, 96, 60, 60]}
    doc["calibration_run"] = {"batch_size": 8, "sweep_steps_to_goal": 60}
    doc["checkpoints"]["goal"]["predictions"]["noise_free_matched"] = {
        "tuned": {"fit": {"b_crit": 400.0}},
        "bootstrap": {"tuned": {"p16": 350.0, "p84": 480.0}}}
    e = summary_entry(doc)
    # the headline stays rule 1's; rule 2 sits beside it with its own interval and ratio
    assert e["ratio"] == pytest.approx(1.5) and e["predicted"]["b_crit"] == 150.0
    assert e["rule_2"] == {"b_crit": 400.0, "lo": 350.0, "hi": 480.0, "bound": None,
                           "ratio": pytest.approx(4.0), "full_batch_steps": 12}
    # B_2pt = 8 (60 / 12 - 1) = 32; its range with the reruns' 16th and 84th percentiles
    # (linear between the sorted 30, 60, 60, 60, 96: 49.2 and 72.96 steps): 24.8 and 40.64
    assert e["two_point"] == {"b_crit": pytest.approx(32.0), "lo": pytest.approx(24.8),
                              "hi": pytest.approx(40.64), "ratio": pytest.approx(0.32)}
    rows = rule_2_table([e, summary_entry(_doc("plain"))]).splitlines()
    assert len(rows) == 3 and rows[2] == ("| w | sgd | 100 | 400 (350-480) | **4** | 1.5 | 0.4 | 12 "
                                          "| 32 (24.8-40.6) | 0.32 |")
    # a document whose rule 2 found no full-batch steps: the entry says so, with no prediction
    doc["full_batch"] = {"steps": None}
    del doc["checkpoints"]["goal"]["predictions"]["noise_free_matched"]
    assert summary_entry(doc)["rule_2"] == {"b_crit": None, "lo": None, "hi": None,
                                            "bound": None, "ratio": None,
                                            "full_batch_steps": None}
    assert summary_entry(doc)["two_point"]["b_crit"] is None


def test_update_replaces_one_workload_and_keeps_the_rest(tmp_path):
    path = tmp_path / SUMMARY_FILE
    update_summary(path, summary_entry(_doc("b")))
    update_summary(path, summary_entry(_doc("a")))
    update_summary(path, summary_entry(_doc("b", predicted=300.0)))
    entries = read_summary(path)
    assert [e["workload"] for e in entries] == ["a", "b"]
    assert entries[1]["ratio"] == pytest.approx(3.0)
    # the same workload with another optimizer is another entry, and replaces only its own
    update_summary(path, summary_entry(_doc("a", optimizer="adam", predicted=50.0)))
    update_summary(path, summary_entry(_doc("a", optimizer="adam", predicted=70.0)))
    entries = read_summary(path)
    assert [(e["workload"], e["optimizer"]) for e in entries] == [("a", "adam"), ("a", "sgd"),
                                                                  ("b", "sgd")]
    assert [e["ratio"] for e in entries] == pytest.approx([0.7, 1.5, 3.0])
    # the same workload and optimizer swept to another goal is another entry too, and the tables
    # name each one's goal
    other = _doc("b", predicted=50.0)
    other["sweep_config"]["goal"] = 0.05
    update_summary(path, summary_entry(other))
    entries = read_summary(path)
    assert [(e["workload"], e["goal"]) for e in entries] == [("a", 0.1), ("a", 0.1),
                                                              ("b", 0.05), ("b", 0.1)]
    rows = summary_table(entries).splitlines()[2:]
    assert rows[2].startswith("| b (goal 0.05) | sgd |") and rows[0].startswith("| a | adam |")
    assert rows[3].startswith("| b (goal 0.1) | sgd |")
    update_summary(path, summary_entry(other))
    assert len(read_summary(path)) == 4
    # an entry written before entries held their goal is replaced by its study's new one
    old = tmp_path / "old.json"
    old.write_text(json.dumps([{k: v for k, v in summary_entry(_doc("c")).items()
                                if k != "goal"}]))
    update_summary(old, summary_entry(_doc("c", predicted=20.0)))
    assert [(e["workload"], e["goal"], e["ratio"]) for e in read_summary(old)] == [
        ("c", 0.1, pytest.approx(0.2))]
    path.write_text("{}")
    with pytest.raises(ValueError, match="list"):
        read_summary(path)


def _update_many(path: str, name: str, count: int, start) -> None:
    """`count` updates of the summary at `path`, each adding entry `name`-i, once every process
    has reached the barrier `start` (a child process's work in the test below)."""
    start.wait(timeout=60)
    for i in range(count):
        update_summary(Path(path), summary_entry(_doc(f"{name}-{i}")))


def test_updates_from_processes_at_once_keep_every_entry(tmp_path):
    """Four processes each add 15 entries to one summary, starting together at a barrier
    (validate runs that finish at once): all 60 are there, none lost to another's
    read-modify-write. With the lock (`store.updating`) taken out the test failed in each of
    three runs."""
    import multiprocessing

    path = tmp_path / SUMMARY_FILE
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(4)
    workers = [context.Process(target=_update_many, args=(str(path), f"p{k}", 15, start))
               for k in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    names = sorted(e["workload"] for e in read_summary(path))
    assert names == sorted(f"p{k}-{i}" for k in range(4) for i in range(15))


def test_committed_summary_matches_every_committed_report():
    entries = {entry_key(e): e for e in read_summary(REPORTS / SUMMARY_FILE)}
    docs = sorted(p.parent for p in REPORTS.glob("*/validation.json"))
    assert docs, "no committed validation reports"
    made = {d: read_validation(d).to_dict() for d in docs}
    # one entry per report, keyed by its workload (a name, or an own workload's FILE.py:FUNCTION)
    # and optimizer; a report's directory is named for its workload, or WORKLOAD_OPTIMIZER when
    # the workload's default optimizer was replaced
    keys = {d: (doc["workload"], doc["sweep_config"]["optimizer"],
                float(doc["sweep_config"]["goal"])) for d, doc in made.items()}
    assert set(entries) == set(keys.values())
    assert len(entries) == len(docs)
    for d, doc in made.items():
        assert (d.name in (doc["workload"], "_".join(keys[d][:2])) or ":" in doc["workload"])
        assert json.loads(json.dumps(summary_entry(doc, side_records(d, doc)))) == entries[keys[d]]


def _points(steps, batch_sizes=(16, 32, 64, 128, 256, 512, 1024)):
    return [{"batch_size": b, "steps": s} for b, s in zip(batch_sizes, steps)]


def test_a_predicted_curve_without_a_bend_gets_a_lower_bound_in_entry_and_table():
    """The own CNN's case: the NQM halves its steps at every doubling up to the largest batch
    size, so its batch sizes only say B_crit >= 5 B_max - 6 B_0 (the 20% rule)."""
    doc = _doc()
    doc["measured"]["points"] = _points([968, 472, 391, 266, 188, 119, 176])
    doc["checkpoints"]["goal"]["predictions"]["step_matched"]["tuned"]["points"] = _points(
        [971, 471, 222, 110, 54, 27, 15])
    e = summary_entry(doc)
    assert e["measured"]["bound"] is None            # the measured curve bends
    assert e["predicted"]["bound"] == {"side": "lower", "value": pytest.approx(5 * 1024 - 6 * 16)}
    table = summary_table([e, summary_entry(_doc("plain"))])
    row = next(line for line in table.splitlines() if line.startswith("| w |"))
    assert "150 (120-170); ≥ 5024*" in row and "**1.5**" in row
    assert "only bound" in table.splitlines()[-1]
    assert "*" not in summary_table([summary_entry(_doc("plain"))]).replace("**", "")


def test_table_row_holds_the_entry_numbers():
    row = summary_table([summary_entry(_doc())]).splitlines()[2]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["w", "sgd", "100 (80-130)", "150 (120-170)", "1", "**1.5**", "1.5",
                     "40 ± 4 (0.4)", "50 ± 5 (0.5)", "64"]


def test_rebuild_equals_the_committed_summary(tmp_path):
    """`python -m realnets summary --rebuild` rewrites the file from the documents beside it:
    on copies of the committed documents it gives the committed summary back."""
    docs = sorted(p.parent for p in REPORTS.glob("*/validation.json"))
    for d in docs:
        write_validation(tmp_path / d.name, read_validation(d))
        for name in (TWO_ENDS_FILE, MISS_SPLIT_FILE):
            if (d / name).is_file():
                shutil.copy(d / name, tmp_path / d.name / name)
    rebuilt = rebuild_summary(tmp_path / SUMMARY_FILE)
    assert rebuilt == read_summary(REPORTS / SUMMARY_FILE)


def test_summary_cli_prints_the_table_and_refuses_a_missing_file(tmp_path, capsys):
    path = tmp_path / SUMMARY_FILE
    update_summary(path, summary_entry(_doc()))
    assert realnets_main(["summary", str(path)]) == 0
    assert "| w | sgd | 100 (80-130) |" in capsys.readouterr().out
    assert realnets_main(["summary", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]
    assert realnets_main(["summary", "--rebuild", str(tmp_path / SUMMARY_FILE)]) == 2
    assert "no validation documents" in capsys.readouterr().err


def _report_copy(tmp_path, name="digits_mlp"):
    d = tmp_path / name
    d.mkdir()
    for f in ("validation.json", TWO_ENDS_FILE, MISS_SPLIT_FILE):
        shutil.copy(REPORTS / name / f, d / f)
    return d, read_validation(d).to_dict()


def test_side_records_keep_only_the_records_made_from_this_document(tmp_path):
    d, doc = _report_copy(tmp_path)
    sides = side_records(d, doc)
    assert sides["two_ends"]["b_ref"] == doc["calibration_run"]["batch_size"]
    assert sides["miss_split"]["predicted"] == doc["checkpoints"]["goal"]["predictions"][
        "step_matched"]["tuned"]["fit"]["b_crit"]
    # another headline prediction (a later validation): both records are an earlier one's
    changed = json.loads(json.dumps(doc))
    changed["checkpoints"]["goal"]["predictions"]["step_matched"]["tuned"]["fit"]["b_crit"] = 1.0
    assert side_records(d, changed) == {"two_ends": None, "miss_split": None}
    # another reference run: the two ends go, and the split with them
    changed = json.loads(json.dumps(doc))
    changed["calibration_run"]["sweep_steps_to_goal"] += 1
    assert side_records(d, changed) == {"two_ends": None, "miss_split": None}
    # another workload's records, or a file that does not read: left out
    assert side_records(d, {**doc, "workload": "other"}) == {"two_ends": None, "miss_split": None}
    # the split of other reruns (two-ends run again after more seeds): left out
    ends = json.loads((d / TWO_ENDS_FILE).read_text())
    split = json.loads((d / MISS_SPLIT_FILE).read_text())
    (d / MISS_SPLIT_FILE).write_text(json.dumps({**split, "s_tilde": {**split["s_tilde"],
                                                                       "50": 1.0}}))
    assert side_records(d, doc)["miss_split"] is None
    # two ends that parse but lack a part, or hold one of the wrong kind: left out, no crash
    for broken in ({k: v for k, v in ends.items() if k != "full_set"},
                   {**ends, "compared": {**ends["compared"], "measured": None}},
                   {**ends, "b_ref": "eight"}):
        (d / TWO_ENDS_FILE).write_text(json.dumps(broken))
        assert side_records(d, doc) == {"two_ends": None, "miss_split": None}
    (d / TWO_ENDS_FILE).write_text(json.dumps(ends))
    (d / MISS_SPLIT_FILE).write_text(json.dumps({k: v for k, v in split.items()
                                                 if k != "intervals"}))
    assert side_records(d, doc)["miss_split"] is None
    (d / MISS_SPLIT_FILE).write_text("{not json")
    assert side_records(d, doc)["miss_split"] is None
    assert side_records(d, doc)["two_ends"] is not None
    assert summary_entry(doc, side_records(d, doc))["miss_split"] is None


def test_rule_4_is_the_prediction_of_record_where_both_ends_were_measured(tmp_path):
    """digits_mlp (momentum) with its two side records: `predicted` and `ratio` are rule 4's,
    the network's two ends joined by the NQM's bend (`two_point_curve.bend`, computed here from
    the records), rule 1's stay under `rule_1`; without the split, rule 1 is of record again.
    An entry written before session 37 reads back its rule 1 from `predicted`."""
    from realnets.validation.two_point_curve import bend

    d, doc = _report_copy(tmp_path)
    sides = side_records(d, doc)
    e = summary_entry(doc, sides)
    want = bend(sides["two_ends"], doc, sides["miss_split"])
    measured = doc["measured"]["fit"]["b_crit"]
    assert e["rule"] == "rule_4" and want["value"] is not None
    assert e["predicted"] == {"b_crit": want["value"], "lo": want["lo"], "hi": want["hi"],
                              "bound": None}
    assert e["ratio"] == pytest.approx(want["value"] / measured)
    tuned = doc["checkpoints"]["goal"]["predictions"]["step_matched"]["tuned"]["fit"]["b_crit"]
    assert e["rule_1"]["b_crit"] == tuned and rule_1_of(e)["ratio"] == pytest.approx(
        tuned / measured)
    alone = summary_entry(doc, {**sides, "miss_split": None})
    assert alone["rule"] == "rule_1" and alone["predicted"]["b_crit"] == tuned
    old = {k: v for k, v in alone.items() if k != "rule_1"} | {"rule": "step_matched"}
    assert rule_1_of(old)["b_crit"] == tuned and rule_1_of(old)["ratio"] == alone["ratio"]
    # the committed summary names rule 4 wherever its entry holds a rule-4 number
    for entry in read_summary(REPORTS / SUMMARY_FILE):
        has_4 = (entry.get("rule_4") or {}).get("b_crit") is not None
        assert entry["rule"] == ("rule_4" if has_4 else "rule_1")
        of_record = entry["rule_4"] if has_4 else entry["rule_1"]
        assert entry["predicted"]["b_crit"] == of_record["b_crit"]


def test_the_two_ends_table_holds_each_records_numbers():
    entries = read_summary(REPORTS / SUMMARY_FILE)
    table = two_ends_table(entries).splitlines()
    with_ends = [e for e in entries if e["two_ends"]]
    assert len(table) == 2 + len(with_ends) and with_ends
    for e, row in zip(with_ends, table[2:]):
        d = next(p.parent for p in REPORTS.glob("*/validation.json")
                 if (read_validation(p.parent).workload,
                     read_validation(p.parent).sweep_config["optimizer"],
                     float(read_validation(p.parent).sweep_config["goal"])) == entry_key(e))
        ends = json.loads((d / TWO_ENDS_FILE).read_text())
        ratio = ends["two_point"]["50"] / e["measured"]["b_crit"]
        assert f"**{ratio:.3g}**" in row
        split = json.loads((d / MISS_SPLIT_FILE).read_text())
        assert row.endswith(f"| {split['largest']} |")
        noise_free = split["factors"]["noise_free"]    # None: S_q(B_ref) = n_q
        assert (f"| {noise_free:.3g} (" if noise_free is not None else "| - (") in row
    assert two_ends_table([{**e, "two_ends": None} for e in entries]) == ""


def test_the_median_full_batch_end_enters_the_entry_as_b_2pt_med():
    """B_2pt'(med) = B_ref (S~_ref,q / median - 1) at the reruns' 16th, 50th, 84th percentiles,
    written out; present exactly where the report has a whole-set descent."""
    entries = read_summary(REPORTS / SUMMARY_FILE)
    checked = 0
    for d in sorted(REPORTS.glob("*/two_ends.json")):
        record = json.loads(d.read_text())
        inits = record.get("full_batch_inits")
        doc = read_validation(d.parent)
        entry = next(e for e in entries if entry_key(e) == (
            doc.workload, doc.sweep_config["optimizer"], float(doc.sweep_config["goal"])))
        med = entry["two_ends"]["b_2pt_med"]
        # every shipped report with a whole-set descent carries the diagnostic, over 16 seeds,
        # or has its descents under way: a journal of the finished ones beside it, which
        # `two-ends DIR --full-batch-inits` resumes (the text model's, begun in session 47)
        under_way = (d.parent / INITS_JOURNAL).is_file()
        assert bool(inits) == (record["full_set"].get("steps") is not None) or (
            under_way and not inits), d
        if not inits:
            assert med is None
            continue
        median, s_ref = inits["percentiles"]["50"], record["reruns"]["percentiles"]
        assert med["s_fb_median"] == median and med["inits"] == len(inits["seeds"]) == 16
        for field, q in (("b_crit", "50"), ("lo", "16"), ("hi", "84")):
            want = (None if median is None or s_ref[q] is None or s_ref[q] <= median
                    else record["b_ref"] * (s_ref[q] / median - 1))
            assert med[field] == (None if want is None else pytest.approx(want, rel=1e-12))
        if med["b_crit"] is not None:
            assert med["ratio"] == pytest.approx(med["b_crit"] / entry["measured"]["b_crit"])
        checked += 1
    assert checked >= 29
    table = median_end_table(entries).splitlines()
    assert len(table) == 2 + sum(bool(e["two_ends"] and e["two_ends"]["b_2pt_med"])
                                 for e in entries)
    assert median_end_table([{**e, "two_ends": None} for e in entries]) == ""


def test_refresh_replaces_the_entry_when_a_summary_sits_beside(tmp_path):
    d, doc = _report_copy(tmp_path)
    assert refresh_summary(d) is None                   # no summary beside: nothing written
    (d / MISS_SPLIT_FILE).unlink()
    path = tmp_path / SUMMARY_FILE
    update_summary(path, summary_entry(doc))
    assert read_summary(path)[0]["two_ends"] is None
    assert refresh_summary(d) == path.resolve()
    entry = read_summary(path)[0]
    assert entry["two_ends"]["s_fb"] == json.loads((d / TWO_ENDS_FILE).read_text())[
        "full_set"]["steps"]
    assert entry["miss_split"] is None


def test_a_range_with_a_missing_end_shows_the_end_as_unknown():
    from realnets.validation.summary import _b_crit_cell
    assert _b_crit_cell({"b_crit": 56.0, "lo": 27.2, "hi": None}) == "56 (27.2-?)"
    assert _b_crit_cell({"b_crit": 6.0, "lo": None, "hi": 9.5}) == "6 (?-9.5)"
    assert _b_crit_cell({"b_crit": 6.0, "lo": None, "hi": None}) == "6"

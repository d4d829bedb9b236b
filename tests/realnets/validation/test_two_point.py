"""realnets.validation.two_point and `python -m realnets two-point`: B_2pt' from a sweep's
smallest batch size alone. On the shipped breast-cancer sweep it reproduces the two_ends.json
that `validate` + `two-ends` wrote (another path to the same reference trial, target and
descents); the condition's boundary; bad input refused before any training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from realnets.cli import main
from realnets.sweeps.records import load_sweep, read_repeats
from realnets.validation.remeasure import first_sweep
from realnets.validation import two_point, two_point_bar

ROOT = Path(__file__).resolve().parents[3]


def test_the_condition_needs_five_full_batch_steps_and_an_estimate():
    assert two_point.condition(5, 40.0)["holds"]
    assert not two_point.condition(4, 40.0)["holds"]
    assert "a fifth" in two_point.condition(1, 20.0)["why"]
    assert not two_point.condition(None, None)["holds"]
    assert not two_point.condition(30, None)["holds"]     # the reruns' median not above S_fb^N


def test_the_command_reproduces_the_committed_two_ends_record(tmp_path, monkeypatch, capsys):
    """sweeps/breast_cancer_mlp, whose reports/validation/breast_cancer_mlp/two_ends.json came
    from `validate` (reference trial, retrained) then `two-ends`: the same B_ref, trial, rerun
    percentiles, whole-set target, S_fb^N and B_2pt' at each percentile; the sweep's own B_crit
    is the report's measured one, and the ratio their quotient."""
    monkeypatch.chdir(ROOT)
    sweep = tmp_path / "bc"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    assert main(["two-point", str(sweep), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "does not hold (S_fb^N = 1" in out
    assert not (sweep / "full_batch_descents.jsonl").exists()    # the journal, once written
    got = json.loads((sweep / "two_point.json").read_text())
    ends = json.loads((ROOT / "reports/validation/breast_cancer_mlp/two_ends.json").read_text())
    # by default (session 42) B_2pt'(med) too: the descents from seeds 1-16, the sweep's seed 0
    # left out, take the steps `two-ends --full-batch-inits 1,...,16` recorded
    assert got["full_batch_inits"]["seeds"] == list(range(1, 17))
    assert got["full_batch_inits"]["steps"] == ends["full_batch_inits"]["steps"]
    assert got["b_2pt_med"]["value"] is not None and "the two-point estimate of record" in out
    doc = json.loads((ROOT / "reports/validation/breast_cancer_mlp/validation.json").read_text())
    assert got["b_ref"] == ends["b_ref"] and got["s_ref"] == ends["s_ref"]
    assert got["trial_id"] == doc["calibration_run"]["trial_id"]
    assert got["reruns"] == ends["reruns"]
    assert got["full_set"]["target"] == pytest.approx(ends["full_set"]["target"], rel=1e-6)
    assert got["full_set"]["steps"] == ends["full_set"]["steps"]
    assert got["two_point"] == ends["two_point"]
    assert (got["value"], got["lo"], got["hi"]) == (ends["two_point"]["50"],
                                                   ends["two_point"]["16"],
                                                   ends["two_point"]["84"])
    assert got["measured"] == pytest.approx(doc["measured"]["fit"]["b_crit"], rel=1e-9)
    assert got["ratio"] == pytest.approx(got["value"] / got["measured"])
    assert got["condition"]["holds"] is False
    # the cost in examples, summed here from the raw JSON lines
    trials, reruns = ([json.loads(x) for x in (sweep / name).read_text().splitlines()
                       if x.strip()] for name in ("trials.jsonl", "repeats.jsonl"))
    ex = got["examples"]
    assert ex["sweep"] == sum(r["steps_run"] * r["batch_size"] for r in trials + reruns)
    assert ex["b_ref_trials"] == sum(r["steps_run"] * 8 for r in trials if r["batch_size"] == 8)
    rate = next(r["learning_rate"] for r in trials
                if r["batch_size"] == 8 and r["trial_id"] == got["trial_id"])
    mine = [r for r in reruns if r["batch_size"] == 8 and r["learning_rate"] == rate]
    assert len(mine) == got["reruns"]["count"] == 32
    assert ex["reruns"] == sum(r["steps_run"] * 8 for r in mine)
    assert ex["full_batch"] == 455 * sum(t["steps_to_target"] or t["step_limit"]
                                         for t in got["full_set"]["trials"])
    assert ex["estimate"] == (ex["b_ref_trials"] + ex["reruns"] + ex["full_batch"]
                              + ex["full_batch_inits"])
    assert main(["two-point", str(sweep), "--best-end-only", "--no-progress"]) == 0
    alone = json.loads((sweep / "two_point.json").read_text())
    assert "b_2pt_med" not in alone and alone["value"] == got["value"]
    assert "B_2pt'(med), the estimate of record, is not in this record" in \
        capsys.readouterr().out


def test_the_descents_in_chunks_of_rows_take_the_same_steps(tmp_path, monkeypatch, capsys,
                                                           chunks_seen):
    """--chunk-rows 100 on the 455 training rows of sweeps/breast_cancer_mlp (five compiled
    calls, the last of 55 rows, averaged by their rows): the whole-set target within float
    rounding of the committed record's and the same S_fb^N and steps from all 16
    initialisations as its all-at-once descents."""
    monkeypatch.chdir(ROOT)
    sweep = tmp_path / "bc"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    assert main(["two-point", str(sweep), "--chunk-rows", "100", "--no-progress"]) == 0
    # the whole set's target, descents and initialisations' descents, each in five calls
    whole = [c for c in chunks_seen if sum(c) == 455]
    assert whole and all(c == [100, 100, 100, 100, 55] for c in whole)
    got = json.loads((sweep / "two_point.json").read_text())
    ends = json.loads((ROOT / "reports/validation/breast_cancer_mlp/two_ends.json").read_text())
    assert got["full_set"]["sample_rows"] == 455
    assert got["full_set"]["target"] == pytest.approx(ends["full_set"]["target"], rel=1e-6)
    # the record's descents are the first 32 trials' (its predictions' trials), in order
    first = got["full_set"]["trials"][:len(ends["full_set"]["trials"])]
    assert first == ends["full_set"]["trials"]
    assert got["full_set"]["steps"] == ends["full_set"]["steps"]
    assert got["full_batch_inits"]["steps"] == ends["full_batch_inits"]["steps"]
    assert "--chunk-rows 100" in got["command"]
    assert main(["two-point", str(sweep), "--chunk-rows", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: chunk-rows must be a whole number >= 1, got 0"


def test_bad_input_is_one_line_before_any_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(two_point, "retrain",
                        lambda *a, **k: pytest.fail("trained before the input was checked"))
    sweep = tmp_path / "bc"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    assert main(["two-point", str(sweep), "--batch-size", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: batch-size must be one") and "\n" not in err
    assert main(["two-point", str(sweep), "--full-batch-inits", "2,2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "full-batch-inits must be distinct" in err and "\n" not in err
    for bad, says in (("a,b", "full-batch-inits"), ("-1", "full-batch-inits"),
                      ("0,1", "the sweep's own")):        # 0: the sweep's seed
        assert main(["two-point", str(sweep), "--full-batch-inits", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and says in err and "\n" not in err, (bad, err)
    assert main(["two-point", str(sweep), "--prediction-trials", "129"]) == 2
    err = capsys.readouterr().err.strip()
    assert "prediction-trials must be in [1, 128]" in err and "\n" not in err
    (sweep / "repeats.jsonl").unlink()
    assert main(["two-point", str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no reruns of the reference trial" in err and "realnets repeat" in err
    assert main(["two-point", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert not (sweep / "two_point.json").exists()


def test_validate_rule_4_writes_both_records_and_the_reports_row(tmp_path, monkeypatch, capsys):
    """`validate --reuse --rule-4` on a copy of the shipped regression report, its two side
    records removed: it measures both ends and the split again, number for number those that
    `two-ends` and `miss-split` wrote, and the report and summary gain rule 4's row. (The
    breast-cancer report, used here before session 38, has no rule-4 value since its NQM is
    tuned with the certificate: S_q(B_ref) = n_q.)"""
    monkeypatch.chdir(ROOT)
    sweep, out = tmp_path / "sw", tmp_path / "rep"
    shutil.copytree(ROOT / "sweeps" / "diabetes_mlp", sweep)
    shutil.copytree(ROOT / "reports" / "validation" / "diabetes_mlp", out)
    for name in ("two_ends.json", "miss_split.json"):
        (out / name).unlink()
    assert main(["validate", "--workload", "examples/diabetes.py:make_workload",
                 "--sweep", str(sweep), "--out", str(out), "--reuse", "--rule-4",
                 "--summary", str(tmp_path / "summary.json"), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "NQM prediction, rule 4" in printed
    # its summary holds this workload alone: no track record to put a bar on it
    assert "no error bar from the track record: no other validated workload in " in printed
    shipped = ROOT / "reports" / "validation" / "diabetes_mlp"
    for name, keys in (("two_ends.json", ("b_ref", "s_ref", "reruns", "two_point")),
                       ("miss_split.json", ("s_q", "n_q", "s_fb", "factors"))):
        got, want = (json.loads((d / name).read_text()) for d in (out, shipped))
        for key in keys:
            assert got[key] == pytest.approx(want[key]) if not isinstance(want[key], dict) \
                else got[key] == want[key], (name, key)
    assert json.loads((out / "two_ends.json").read_text())["full_set"]["steps"] == \
        json.loads((shipped / "two_ends.json").read_text())["full_set"]["steps"]
    entry = json.loads((tmp_path / "summary.json").read_text())[0]
    assert entry["rule_4"]["b_crit"] is not None
    assert "| NQM prediction, rule 4" in (out / "report.md").read_text()
    # and B_2pt'(med), the estimate of record: the descents from seeds 1-16 take the steps that
    # `two-ends --full-batch-inits 1,...,16` recorded for the shipped report
    got, want = (json.loads((d / "two_ends.json").read_text())["full_batch_inits"]
                 for d in (out, shipped))
    assert got["seeds"] == list(range(1, 17)) and got["steps"] == want["steps"]
    assert entry["two_ends"]["b_2pt_med"]["b_crit"] is not None
    assert "| two-point estimate of record, B_2pt'(med)" in (out / "report.md").read_text()


def test_validate_rule_4_without_reruns_is_one_line_before_any_work(tmp_path, capsys):
    sweep = tmp_path / "sw"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    for name in ("repeats.jsonl", "repeats.json"):
        (sweep / name).unlink(missing_ok=True)
    assert main(["validate", "--workload", "examples/breast_cancer.py:make_workload",
                 "--sweep", str(sweep), "--out", str(tmp_path / "rep"), "--rule-4"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "rule-4" in err
    assert not (tmp_path / "rep").exists()


def test_the_median_full_batch_end_agrees_with_the_validation_path(tmp_path, monkeypatch,
                                                                    capsys):
    """`two-point --full-batch-inits 1,2,3` on sweeps/breast_cancer_mlp: the descents from seeds
    1-3 take the steps that `validate` then `two-ends --full-batch-inits` recorded for the same
    seeds (reports/validation/breast_cancer_mlp/two_ends.json, another path to the same
    configuration and whole set), and B_2pt'(med) is B_ref (S~_ref,q / median - 1) written
    out, None where a percentile is not above the median."""
    monkeypatch.chdir(ROOT)
    sweep = tmp_path / "bc"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    assert main(["two-point", str(sweep), "--full-batch-inits", "1,2,3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    got = json.loads((sweep / "two_point.json").read_text())
    ends = json.loads((ROOT / "reports/validation/breast_cancer_mlp/two_ends.json").read_text())
    inits = got["full_batch_inits"]
    assert inits["seeds"] == [1, 2, 3]
    assert inits["steps"] == ends["full_batch_inits"]["steps"][:3]
    median = float(np.median([np.inf if s is None else s for s in inits["steps"]]))
    assert inits["percentiles"]["50"] == median
    for field, q in (("value", "50"), ("lo", "16"), ("hi", "84")):
        s_ref = got["reruns"]["percentiles"][q]
        want = None if s_ref is None or s_ref <= median else 8 * (s_ref / median - 1)
        assert got["b_2pt_med"][field] == (None if want is None else pytest.approx(want))
    assert "B_2pt'(med) = B_ref" in out and "from 3 other initialisations" in out
    ex = got["examples"]       # the three descents' cost added: steps x the 455 rows
    assert ex["full_batch_inits"] == 455 * sum(inits["steps"])
    assert ex["estimate"] == (ex["b_ref_trials"] + ex["reruns"] + ex["full_batch"]
                              + ex["full_batch_inits"])


def _stored_record() -> dict:
    """The shipped synthetic-clusters two_point.json without its median-end diagnostic."""
    record = json.loads((ROOT / "sweeps/synthetic_clusters/two_point.json").read_text())
    record.pop("b_2pt_med")
    record.pop("full_batch_inits")
    record["examples"].pop("full_batch_inits")
    record["examples"]["estimate"] = sum(record["examples"][k] for k in
                                         ("b_ref_trials", "reruns", "full_batch"))
    return record


def test_the_median_end_counts_a_missed_descent_at_its_cap_and_says_when_it_has_none(
        monkeypatch):
    """`with_median_end` with the descents replaced by stated steps: one descent that missed the
    target costs its step limit; with two of three missing, the median is not at the target and
    B_2pt'(med) has no value, which the text shows as '?' without calling it the estimate of
    record; with no fastest configuration at all (every whole-set descent missed) nothing is
    descended and the text says why."""
    from realnets.validation import full_batch_inits

    record = _stored_record()
    rows, limit = int(record["full_set"]["sample_rows"]), int(record["full_set"]["step_limit"])
    pct = record["reruns"]["percentiles"]
    for steps, median in (([None, 30, 40], 40.0), ([None, None, 30], None),
                          ([900, 950, 1000], 950.0)):          # 950 above S~_ref = 735.5
        fake = {"seeds": [1, 2, 3], "steps": steps, "step_limit": limit,
                "percentiles": {"16": None, "50": median, "84": None},
                "over_s_fb": None if median is None else median / record["full_set"]["steps"]}
        monkeypatch.setattr(full_batch_inits, "over_inits", lambda *a, _f=fake, **k: _f)
        got = two_point.with_median_end(None, None, record, [1, 2, 3])
        cost = rows * sum(limit if s is None else s for s in steps)
        assert got["examples"]["full_batch_inits"] == cost
        assert got["examples"]["estimate"] == record["examples"]["estimate"] + cost
        med = got["b_2pt_med"]["value"]
        if median is None or median >= pct["50"]:
            why = ("did not reach the target" if median is None
                   else "950 steps, is not below the reruns' median S~_ref, 735.5")
            assert med is None and why in got["b_2pt_med"]["why"]
            assert "median end - 1) = ? examples" in two_point.text(got)
            assert why in two_point.text(got) and "estimate of record" not in two_point.text(got)
        else:
            assert med == pytest.approx(record["b_ref"] * (pct["50"] / 40.0 - 1))
            assert "the two-point estimate of record" in two_point.text(got)
    missed = {**record, "full_set": {**record["full_set"], "steps": None}}
    monkeypatch.setattr(full_batch_inits, "over_inits",
                        lambda *a, **k: pytest.fail("descended without a configuration"))
    got = two_point.with_median_end(None, None, missed, [1, 2])
    assert got["b_2pt_med"]["value"] is None and "full_batch_inits" not in got
    assert "B_2pt'(med) not computed: no full-batch descent" in two_point.text(got)


def test_the_error_bar_is_the_track_records_factor_held_out_from_the_workload(tmp_path, capsys,
                                                                           monkeypatch):
    """On the shipped synthetic-clusters record: the 68% factor written out here (the k-th
    smallest |ln(B_2pt'(med) / measured)| over the summary's other real entries, no number
    scoring +inf, k = ceil((n + 1) 0.68)) around B_2pt'(med); the same for B_2pt' where the
    record has no median end; and the command says where no summary is found."""
    import math

    from realnets.validation.summary import read_summary

    record = json.loads((ROOT / "sweeps/synthetic_clusters/two_point.json").read_text())
    entries = read_summary(ROOT / "reports/validation/summary.json")

    def factor(key):
        others = [e for e in entries
                  if e["workload"] not in ("nqm", record["workload"])]
        scores = sorted(math.inf if ((e.get("two_ends") or {}).get(key) or {}).get("b_crit")
                        is None else abs(math.log(e["two_ends"][key]["b_crit"]
                                                  / e["measured"]["b_crit"])) for e in others)
        return math.exp(scores[math.ceil((len(scores) + 1) * 0.68) - 1]), len(others)

    bar = two_point_bar.error_bar(record, entries)
    want, n = factor("b_2pt_med")
    assert bar.predictor == "B_2pt'(med)" and bar.held_out and bar.entries == n
    assert bar.factor == pytest.approx(want)
    value = record["b_2pt_med"]["value"]
    assert (bar.lo, bar.hi) == pytest.approx((value / want, value * want))
    best = {k: v for k, v in record.items() if k not in ("b_2pt_med", "full_batch_inits")}
    bar = two_point_bar.error_bar(best, entries)
    assert bar.predictor == "B_2pt'" and bar.factor == pytest.approx(factor("b_2pt")[0])
    line = two_point_bar.error_bar_line(bar, "S")
    assert f"{bar.lo:.4g} .. {bar.hi:.4g} (x{bar.factor:.3g}, 68%)" in line
    # a record whose own condition fails gets no bar: the count of entries where it held
    weak = {**best, "condition": {**best["condition"], "holds": False}}
    bar = two_point_bar.error_bar(weak, entries)
    # six of the others miss it: the tabular example at both goals (S_fb^N 1), the diabetes
    # MLP (2), the RAND visits with Adam (2, session 49) and the diamond prices with momentum
    # (3) and Adam (4, session 50); mnist_cnn (33, session 46) and the text model (81, session
    # 47) have whole-set descents now
    assert not bar.condition_holds and bar.entries_condition_held == n - 6
    line = two_point_bar.error_bar_line(bar, "S")
    assert f"no error bar from the track record of B_2pt' ({n} other validated entries, S): " \
        f"its entries are mostly ones where S_fb^N >= 5 ({n - 6} of {n}), and here that " \
        "condition does not hold" in line
    assert "68%" not in line
    # a B_2pt'(med) value without the descents it stands on does not read, in one line
    with pytest.raises(ValueError, match="B_2pt'.med. has a value but no median"):
        two_point.chosen({**record, "full_batch_inits": None})
    monkeypatch.chdir(ROOT)
    sweep = tmp_path / "bc"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    assert main(["two-point", str(sweep), "--best-end-only", "--summary",
                 str(tmp_path / "none.json"), "--no-progress"]) == 0
    assert "no error bar from the track record: " in capsys.readouterr().out


def test_a_summary_that_does_not_read_costs_the_error_bar_not_the_estimate(tmp_path, capsys,
                                                                           monkeypatch):
    monkeypatch.chdir(ROOT)
    sweep = tmp_path / "bc"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps([{"workload": "w"}]))         # an entry without its numbers
    assert main(["two-point", str(sweep), "--best-end-only", "--summary", str(bad),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "B_2pt' = B_ref" in out and f"no error bar from the track record: {bad} does " \
        "not read" in out
    assert (sweep / "two_point.json").is_file()


def test_the_error_bar_without_an_estimate_too_few_entries_or_a_new_workload():
    """No value: no bar, said; a summary with too few entries with a number: an infinite factor,
    said as such; a workload the summary does not hold: the factor over all its entries."""
    import math

    record = json.loads((ROOT / "sweeps/synthetic_clusters/two_point.json").read_text())
    none = {**record, "value": None, "b_2pt_med": {"value": None, "why": "w"}}
    assert two_point_bar.error_bar(none, []) is None
    assert "no estimate" in two_point_bar.error_bar_line(None, "S")
    import copy

    from realnets.validation.summary import read_summary

    real = next(e for e in read_summary(ROOT / "reports/validation/summary.json")
                if (e.get("two_ends") or {}).get("b_2pt_med"))

    def entry(name, measured, med):         # a shipped entry with its numbers replaced
        e = copy.deepcopy(real)
        e["workload"], e["measured"]["b_crit"] = name, measured
        e["two_ends"]["b_2pt_med"].update(b_crit=med, lo=med / 2, hi=med * 2)
        return e

    one = [entry("other", 100.0, 150.0)]
    bar = two_point_bar.error_bar(record, one)          # k = ceil(2 x 0.68) = 2 > n = 1
    assert bar.factor == math.inf and not bar.held_out and bar.entries == 1
    assert "too few entries with a number" in two_point_bar.error_bar_line(bar, "S")
    three = one + [entry("w1", 120.0, 150.0), entry("w2", 300.0, 150.0)]
    bar = two_point_bar.error_bar(record, three)        # scores ln 1.5, ln 1.25, ln 2: k = 3
    assert bar.factor == pytest.approx(2.0) and bar.entries == 3


def test_prediction_trials_estimate_from_the_first_trials_against_all(tmp_path, capsys):
    """`two-point --prediction-trials 32` on the tabular sweep resumed to 128 trials: the
    reference trial is the best of the first 32 at B_ref (the one its validation was made
    from), the measured B_crit the fit of all 128 (docs/prediction_rule.md, session 45)."""
    sweep = tmp_path / "bc"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    doc = json.loads((ROOT / "reports" / "validation" / "breast_cancer_mlp"
                      / "validation.json").read_text())
    assert doc["predicted_from_trials"] == 32 and doc["sweep_config"]["trials"] == 128
    assert main(["two-point", str(sweep), "--prediction-trials", "32", "--best-end-only",
                 "--no-progress"]) == 0
    capsys.readouterr()
    got = json.loads((sweep / "two_point.json").read_text())
    assert got["trials"] == 32
    assert got["trial_id"] == doc["calibration_run"]["trial_id"]
    assert got["s_ref"] == doc["calibration_run"]["sweep_steps_to_goal"]
    assert got["measured"] == pytest.approx(doc["measured"]["fit"]["b_crit"], rel=1e-12)
    assert got["ratio"] == pytest.approx(got["value"] / got["measured"])


def _no_training(monkeypatch):
    from realnets import workloads
    from realnets.validation import full_batch_inits

    def fail(*a, **k):
        pytest.fail("trained, or built the workload, where the report's ends serve")

    for module, name in ((two_point, "retrain"), (two_point, "both_ends"),
                         (full_batch_inits, "over_inits"), (workloads, "get")):
        monkeypatch.setattr(module, name, fail)


def test_ends_from_a_report_give_the_shipped_record_without_training(tmp_path, monkeypatch,
                                                                     capsys):
    """`two-point --ends-from` on the RAND HIE sweep (its two_point.json and its report's
    two_ends.json made by separate commands, session 49): the same record, nothing trained."""
    monkeypatch.chdir(ROOT)
    _no_training(monkeypatch)
    sweep = tmp_path / "rand_hie"
    shutil.copytree(ROOT / "sweeps" / "rand_hie", sweep)
    (sweep / "two_point.json").unlink()
    report = ROOT / "reports" / "validation" / "rand_hie"
    assert main(["two-point", str(sweep), "--prediction-trials", "32", "--ends-from",
                 str(report), "--no-progress"]) == 0
    assert "B_2pt'(med) = B_ref (S~_ref / median end - 1) = 81 examples" in capsys.readouterr().out
    got = json.loads((sweep / "two_point.json").read_text())
    shipped = json.loads((ROOT / "sweeps" / "rand_hie" / "two_point.json").read_text())
    assert got["ends_from"] == str(report)

    def kept(record):
        out = {k: v for k, v in record.items()
               if k not in ("seconds", "command", "wall_seconds", "ends_from")}
        for k in ("full_set", "full_batch_inits"):
            out[k] = {kk: vv for kk, vv in out[k].items() if kk != "seconds"}
        return out

    assert kept(got) == kept(shipped)


def test_ends_from_a_report_that_does_not_match_is_one_line_before_any_work(tmp_path,
                                                                            monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    _no_training(monkeypatch)
    sweep = tmp_path / "rand_hie"
    shutil.copytree(ROOT / "sweeps" / "rand_hie", sweep)
    (sweep / "two_point.json").unlink()
    reports = ROOT / "reports" / "validation"

    def refused(*extra, trials=("--prediction-trials", "32")):
        assert main(["two-point", str(sweep), *trials, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ends-from ") and "\n" not in err, err
        return err

    assert "its workload differs" in refused("--ends-from", str(reports / "fair_affairs"))
    lone = tmp_path / "report"
    lone.mkdir()
    shutil.copy(reports / "rand_hie" / "validation.json", lone)
    assert "no two_ends.json" in refused("--ends-from", str(lone))
    (lone / "two_ends.json").write_text('{"workload": "x"}')
    assert "two_ends.json lacks b_ref, s_ref" in refused("--ends-from", str(lone))
    # all 128 trials: the best at B_ref is another trial than the report's (from the first 32)
    err = refused("--ends-from", str(reports / "rand_hie"), trials=())
    assert "its reference trial differs from the sweep's ((8, 4) there, (8, 112) here)" in err
    lines = (sweep / "repeats.jsonl").read_text().splitlines()
    at_ref = [i for i, x in enumerate(lines) if json.loads(x)["batch_size"] == 8]
    (sweep / "repeats.jsonl").write_text(      # every other rerun at B_ref dropped
        "\n".join(x for i, x in enumerate(lines) if i not in at_ref[::2]) + "\n")
    assert "its reruns' percentiles differ" in refused("--ends-from", str(reports / "rand_hie"))
    assert not (sweep / "two_point.json").exists()
    # the stored descents serve only the same seeds from the same configuration
    shipped = ROOT / "sweeps" / "rand_hie"
    config, records = first_sweep(*load_sweep(shipped), 32)
    record, stored = two_point.stored_ends(reports / "rand_hie", config, records,
                                           read_repeats(shipped))
    assert two_point.usable_inits(stored, list(range(1, 17)), record)
    assert not two_point.usable_inits(stored, [1, 2, 3], record)
    assert not two_point.usable_inits(None, list(range(1, 17)), record)


def test_the_distributed_flags_are_checked_in_one_line(tmp_path, monkeypatch, capsys):
    """--num-processes without --coordinator, or a timeout below a second, is refused in one
    line before anything trains or joins, by two-point, repeat and two-ends (whose --stored and
    --curve run nothing to distribute); the two-process runs are in tests/realnets/
    test_multihost.py."""
    monkeypatch.chdir(ROOT)
    sweep = tmp_path / "bc"
    shutil.copytree(ROOT / "sweeps" / "breast_cancer_mlp", sweep)
    assert main(["two-point", str(sweep), "--num-processes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: num-processes and process-id need --coordinator HOST:PORT (the "
                   "address of process 0)")
    assert main(["two-point", str(sweep), "--coordinator", "127.0.0.1:1",
                 "--distributed-timeout", "0"]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: distributed-timeout must be >= 1 second, got 0"
    assert not (sweep / "two_point.json").exists()
    assert main(["repeat", str(sweep), "--seeds", "1", "--process-id", "1"]) == 2
    assert "need --coordinator" in capsys.readouterr().err
    report = str(ROOT / "reports" / "validation" / "breast_cancer_mlp")
    assert main(["two-ends", report, "--stored", "--coordinator", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.strip() == \
        "error: coordinator: --stored and --curve run nothing; give them without it"
    assert main(["two-ends", report, "--num-processes", "2"]) == 2
    assert "need --coordinator" in capsys.readouterr().err

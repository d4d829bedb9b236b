"""The predictions' track record: the split-conformal factor against an independent order
statistic and its coverage by Monte Carlo, the held-out count by hand, the record's counts on
made-up entries and on the shipped summary against its stored ratios, and the CLI."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from realnets.cli import main
from realnets.validation.summary import read_summary
from realnets.validation.track_record import (PREDICTORS, conformal_factor, conformal_score,
                                              held_out_coverage, record_factor, track_record,
                                              track_record_table)

SUMMARY = Path(__file__).resolve().parents[3] / "reports" / "validation" / "summary.json"


@pytest.mark.parametrize("n", [1, 5, 26, 40])
@pytest.mark.parametrize("level", [0.5, 0.68, 0.9])
def test_factor_is_the_conformal_order_statistic(n, level):
    scores = np.abs(np.random.default_rng(n).normal(0, 0.5, n))
    k = math.ceil((n + 1) * level)
    if k > n:
        assert conformal_factor(scores, level) == math.inf
    else:      # inverted_cdf at k / n is the k-th smallest
        expect = np.exp(np.quantile(scores, k / n, method="inverted_cdf"))
        assert conformal_factor(scores, level) == pytest.approx(expect, rel=1e-12)


def test_factor_refuses_a_level_outside_0_1():
    with pytest.raises(ValueError, match="level must be in"):
        conformal_factor([0.1, 0.2], 1.0)


def test_conformal_interval_covers_a_new_exchangeable_workload_at_its_level():
    """With n continuous exchangeable scores, P(new <= F) = k / (n + 1) exactly."""
    n, reps, level = 25, 20000, 0.68
    rng = np.random.default_rng(0)
    draws = np.abs(rng.standard_t(3, size=(reps, n + 1)))
    k = math.ceil((n + 1) * level)
    factors = np.array([conformal_factor(row[:n], level) for row in draws])
    covered = np.mean(draws[:, n] <= np.log(factors))
    sigma = math.sqrt(k / (n + 1) * (1 - k / (n + 1)) / reps)
    assert abs(covered - k / (n + 1)) < 4 * sigma


def test_held_out_coverage_by_hand():
    scores = [0.1, 0.2, 0.3, 0.4, 2.0, math.inf]
    groups = ["a", "a", "b", "b", "c", "c"]
    # level 0.5: a's factor from [0.3, 0.4, 2.0, inf] is the ceil(5 * 0.5) = 3rd: 2.0 -> a: 2
    # b's from [0.1, 0.2, 2.0, inf]: 3rd 2.0 -> b: 2; c's from [0.1 .. 0.4]: 3rd 0.3 -> c: 0
    assert held_out_coverage(scores, groups, 0.5) == (4, 0)
    # level 0.9: every factor infinite (k = 5 > 4): all covered but the missing number, all
    # of them by an unbounded interval
    assert held_out_coverage(scores, groups, 0.9) == (5, 5)


def test_held_out_coverage_counts_a_tie_with_the_bound_as_covered():
    # log(exp(0.25)) < 0.25 in floating point: a bound taken through the factor would leave the
    # tied scores out (2); compared as a score, they are covered
    assert math.log(math.exp(0.25)) < 0.25
    scores = [0.1, 0.2, 0.25, 0.4, 0.25, math.inf]
    groups = ["a", "a", "b", "b", "c", "c"]
    # a's bound from [0.25, 0.25, 0.4, inf] is the 3rd: 0.4 -> 2; b's from [0.1, 0.2, 0.25,
    # inf]: 0.25 -> b's 0.25 covered, 0.4 not; c's from [0.1 .. 0.4]: 0.25 -> c's 0.25 covered
    assert held_out_coverage(scores, groups, 0.5) == (4, 0)


@pytest.mark.parametrize("n, level, k", [(74, 0.68, 51), (149, 0.68, 102), (29, 0.9, 27),
                                         (30, 0.68, 22)])
def test_the_order_statistic_is_exact_where_n_plus_1_times_the_level_is_whole(n, level, k):
    # (n + 1) level is a whole number here but not in floating point (75 x 0.68 = 51.000...01)
    assert conformal_score(np.arange(1.0, n + 1), level) == k


def test_held_out_counts_on_the_shipped_summary_by_a_second_reading():
    """Leave-one-name-out written out again from the stored ratios (not from the scores)."""
    entries = [e for e in read_summary(SUMMARY) if e["workload"] != "nqm"]
    rec = {r.predictor: r for r in track_record(read_summary(SUMMARY))}

    def log_miss(e, field):
        ratio = ((e.get(field) or {}).get("ratio") if field == "rule_4"
                 else ((e.get("two_ends") or {}).get(field) or {}).get("ratio"))
        return abs(math.log(ratio)) if ratio else math.inf

    for predictor, field in (("rule 4", "rule_4"), ("B_2pt'", "b_2pt"),
                             ("B_2pt'(med)", "b_2pt_med")):
        for level in (0.68, 0.9):
            covered = unbounded = 0
            for name in {e["workload"] for e in entries}:
                others = sorted(log_miss(e, field) for e in entries if e["workload"] != name)
                k = math.ceil((len(others) + 1) * level)
                bound = others[k - 1] if k <= len(others) else math.inf
                mine = [log_miss(e, field) for e in entries if e["workload"] == name]
                hits = sum(m < math.inf and m <= bound + 1e-12 for m in mine)   # ratios: rounded
                covered += hits
                unbounded += hits if bound == math.inf else 0
            assert rec[predictor].held_out[level] == covered, (predictor, level)
            assert rec[predictor].unbounded[level] == unbounded, (predictor, level)


def _entry(workload, measured, rule_4=None, b_simple=None, lo=None, hi=None):
    return {"workload": workload, "optimizer": "sgd", "goal": 0.1,
            "measured": {"b_crit": measured, "lo": measured * 0.9, "hi": measured * 1.1},
            "predicted": {"b_crit": rule_4}, "ratio": None,
            "rule_1": {"b_crit": 2 * measured, "lo": None, "hi": None, "ratio": 2.0},
            "rule_4": None if rule_4 is None else {"b_crit": rule_4, "lo": lo, "hi": hi},
            "two_ends": None,
            "b_simple": {"value": b_simple, "se": 1.0}, "b_noise": {"value": None, "se": None}}


def test_record_on_made_up_entries():
    entries = [_entry("nqm", 100.0, rule_4=1.0, b_simple=1.0),            # the control: left out
               _entry("a", 100.0, rule_4=150.0, b_simple=100.5, lo=90.0, hi=200.0),
               _entry("a", 10.0, rule_4=30.0, b_simple=5.5, lo=20.0, hi=40.0),
               _entry("b", 50.0, b_simple=60.0)]                         # no rule 4
    rec = {r.predictor: r for r in track_record(entries)}
    r4 = rec["rule 4"]
    assert (r4.n, r4.missing, r4.within_2x, r4.inside, r4.overlap, r4.with_interval) == (
        3, 1, 1, 1, 1, 2)
    assert r4.median_ratio == pytest.approx(2.25)
    # scores ln 1.5, ln 3, inf: k = ceil(4 * 0.5) = 2 -> 3; among those with a number, 2 of 2 -> 3
    half = {r.predictor: r for r in track_record(entries, levels=(0.5,))}["rule 4"]
    assert half.factors[0.5] == pytest.approx(3.0) and half.given[0.5] == pytest.approx(3.0)
    # at 68% k = ceil(4 * 0.68) = 3: the workload without a number
    assert r4.factors[0.68] == math.inf and r4.given[0.68] == math.inf
    bs = rec["B_simple"]
    assert (bs.missing, bs.within_2x, bs.inside) == (0, 3, 1)    # 100.5 +- 1 holds 100
    assert rec["B_noise"].missing == 3 and math.isnan(rec["B_noise"].median_ratio)
    assert rec["rule 1"].median_ratio == pytest.approx(2.0)
    assert "| rule 4 | 3 (1) | 2.25 | 1 of 3 |" in track_record_table(list(rec.values()))


def test_a_rerun_range_with_a_missing_end_is_unbounded_and_a_diagnostic_not_run_is_named():
    # rule 4 120 with no 84th-percentile end: [90, inf) holds the measured 150
    entries = [_entry("a", 150.0, rule_4=120.0, b_simple=1.0, lo=90.0, hi=None),
               {**_entry("b", 44.0, rule_4=40.0, b_simple=1.0, lo=None, hi=45.0),
                "two_ends": {"b_2pt": {"b_crit": 60.0, "lo": 50.0, "hi": 70.0},
                             "b_2pt_med": None}}]
    rec = {r.predictor: r for r in track_record(entries)}
    assert (rec["rule 4"].inside, rec["rule 4"].with_interval) == (2, 2)   # [0, 45] holds 44
    med = rec["B_2pt'(med)"]
    assert (med.missing, med.not_computed) == (2, 1)      # a: no two ends; b: not run
    assert "| B_2pt'(med) | 2 (2; 1 not computed) |" in track_record_table(list(rec.values()))


def test_overlapping_intervals_that_do_not_hold_the_measurement():
    # measured 100 (90 .. 110); rule 4 150 (105 .. 200): they overlap, 100 is outside
    rec = {r.predictor: r for r in track_record(
        [_entry("a", 100.0, rule_4=150.0, b_simple=1.0, lo=105.0, hi=200.0)])}
    assert (rec["rule 4"].inside, rec["rule 4"].overlap, rec["rule 4"].with_interval) == (0, 1, 1)
    # a prediction of zero is no number: neither scored nor counted as shipped
    rec = {r.predictor: r for r in track_record(
        [_entry("a", 100.0, rule_4=0.0, b_simple=1.0, lo=0.0, hi=0.0)])}
    assert (rec["rule 4"].missing, rec["rule 4"].with_interval) == (1, 0)


@pytest.mark.parametrize("change, says", [
    ({"measured": None}, "measured must be an object"),
    ({"measured": {"b_crit": "12"}}, "measured.b_crit must be a finite number"),
    ({"measured": {"b_crit": math.nan}}, "measured.b_crit must be a finite number"),
    ({"rule_4": [1, 2]}, "the rule 4 field is missing or not an object"),
    ({"rule_4": {"b_crit": "big"}}, "rule 4's value must be a finite number"),
    ({"b_simple": {"value": 3.0, "se": math.inf}}, "B_simple's lo must be a finite number"),
    ({"measured": {"b_crit": 10.0, "lo": "9"}}, "measured.lo must be a finite number"),
    ({"rule_1": None, "predicted": None}, "the rule 1 field is missing or not an object"),
    ({"measured": {"b_crit": 10.0, "search": {"lo": 9.0}}}, "measured.search must be null"),
    ({"measured": {"b_crit": 10.0, "search": {"lo": 12.0, "hi": 9.0}}},
     "measured.search must be null or \\{lo, hi\\} with 0 < lo <= hi"),
])
def test_a_malformed_entry_is_named(change, says):
    entries = [_entry("a", 10.0, rule_4=12.0, b_simple=5.0), {**_entry("b", 10.0), **change}]
    with pytest.raises(ValueError, match="summary entry 1 \\('b'\\): " + says):
        track_record(entries)


def test_record_factor_leaves_a_workload_out():
    entries = [_entry("a", 100.0, rule_4=150.0), _entry("a", 10.0, rule_4=30.0),
               _entry("b", 50.0, rule_4=55.0), _entry("c", 50.0, rule_4=40.0)]
    # without a: scores ln 1.1, ln 1.25; k = ceil(3 * 0.5) = 2 -> 1.25
    assert record_factor(entries, "rule 4", 0.5, without="a") == (pytest.approx(1.25), 2)
    # all four: ln 1.1, ln 1.25, ln 1.5, ln 3; k = ceil(5 * 0.5) = 3 -> 1.5
    assert record_factor(entries, "rule 4", 0.5) == (pytest.approx(1.5), 4)
    with pytest.raises(ValueError, match="predictor must be one of"):
        record_factor(entries, "rule 9")


def test_record_on_the_shipped_summary_agrees_with_its_stored_ratios():
    entries = read_summary(SUMMARY)
    real = [e for e in entries if e["workload"] != "nqm"]
    rec = {r.predictor: r for r in track_record(entries)}
    stored = [e["rule_4"]["ratio"] for e in real if e.get("rule_4") and e["rule_4"]["ratio"]]
    assert rec["rule 4"].n == len(real)
    assert rec["rule 4"].missing == len(real) - len(stored)
    assert rec["rule 4"].within_2x == sum(0.5 <= r <= 2 for r in stored)
    assert rec["rule 4"].median_ratio == pytest.approx(np.median(stored))
    # no number (B_simple where |G|^2 is not distinguishable from zero) scores +inf
    scores = sorted(math.inf if e["b_simple"]["value"] is None
                    else abs(math.log(e["b_simple"]["value"] / e["measured"]["b_crit"]))
                    for e in real)
    k = math.ceil((len(scores) + 1) * 0.68)
    assert rec["B_simple"].factors[0.68] == pytest.approx(math.exp(scores[k - 1]))
    assert set(rec) == set(PREDICTORS)


def test_cli(capsys, tmp_path):
    assert main(["track-record", str(SUMMARY), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)   # no Infinity/NaN
    assert [r["predictor"] for r in rows] == list(PREDICTORS)
    # rule 4's 90% factor: the 33rd smallest of 35 scores, one without a number (the tabular
    # example at its first goal) since mnist_cnn (session 46) and the text model (47) got one
    assert rows[0]["factors"]["0.9"] is not None and rows[0]["missing"] == 1
    assert main(["track-record", str(tmp_path / "none.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    (tmp_path / "s.json").write_text(json.dumps([_entry("nqm", 10.0)]))
    assert main(["track-record", str(tmp_path / "s.json")]) == 2
    assert "no real workload" in capsys.readouterr().err


def test_within_2x_of_the_whole_search_range_or_part_of_it():
    """Measured 100 with its search range 73.5 .. 136: a prediction of 140 is within 2x of all
    of it (140 / 73.5 = 1.9), 200 of part (200 / 136 = 1.47, 200 / 73.5 = 2.7), 300 of none
    (300 / 136 = 2.2); an entry without a range is not counted."""
    from realnets.validation.track_record import search_reach

    search = {"lo": 100 / 1.36, "hi": 136.0}
    assert [search_reach(v, search) for v in (140.0, 200.0, 300.0, 40.0, 36.0, 70.0)] == [
        "all", "part", "none", "part", "none", "all"]
    entries = []
    for name, value in (("a", 140.0), ("b", 200.0), ("c", 300.0), ("d", 150.0)):
        e = _entry(name, 100.0, rule_4=value, b_simple=1.0)
        if name != "d":
            e["measured"]["search"] = search
        entries.append(e)
    r4 = {r.predictor: r for r in track_record(entries)}["rule 4"]
    assert (r4.with_search, r4.search_all, r4.search_part) == (3, 1, 1)
    assert "| 1 of 3 (1) |" in track_record_table([r4])

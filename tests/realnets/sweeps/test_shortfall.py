"""The search's shortfall (realnets.sweeps.shortfall, shortfall_check): the best-of-k
expectation against brute-force enumeration, the extrapolation against order statistics of a
known distribution (Monte Carlo), and the check's reading and counting."""

import itertools
import math

import numpy as np
import pytest

from nqm.scaling import fit_mccandlish
from realnets.sweeps.robustness import first_trials
from realnets.sweeps.shortfall import (best_of_k_weights, curve_of_steps, expected_log_best,
                                       extrapolated_steps, shortfall, with_shortfall)
from realnets.sweeps.shortfall_check import (CheckRow, check_row, read_steps_csv, read_sweeps,
                                             table, write_steps_csv)


def test_best_of_k_matches_every_subset():
    rng = np.random.default_rng(1)
    steps = rng.integers(5, 60, size=9).astype(float)     # ties included
    for k in (1, 3, 4, 9):
        brute = np.mean([np.log(min(c)) for c in itertools.combinations(steps, k)])
        assert expected_log_best(steps, k) == pytest.approx(brute, rel=1e-12)
    assert best_of_k_weights(9, 4).sum() == pytest.approx(1.0)
    assert expected_log_best(steps, 9) == pytest.approx(np.log(steps.min()))
    with pytest.raises(ValueError, match="k must be in 1..9"):
        best_of_k_weights(9, 10)


def test_extrapolation_on_an_exponential_lower_tail():
    """ln S = c - beta E, E ~ Exp(1): E[min_k ln S] = c - beta H_k, so the extrapolation from
    K = 32 expects c - beta (3 H_32 - 2 H_16) (5.414 beta below c, where the best of 128 is
    5.443 beta below: the log-linear tail is this distribution's)."""
    rng = np.random.default_rng(7)
    c, beta, reps = math.log(1e4), 0.5, 4000
    harmonic = lambda n: sum(1 / i for i in range(1, n + 1))      # noqa: E731
    draws = np.exp(c - beta * rng.exponential(size=(reps, 32)))
    got = np.mean([math.log(extrapolated_steps(list(d), max_steps=10 ** 6)) for d in draws])
    expect = c - beta * (3 * harmonic(32) - 2 * harmonic(16))
    se = np.std([math.log(extrapolated_steps(list(d), 10 ** 6)) for d in draws[:500]]) / math.sqrt(reps)
    assert abs(got - expect) < 4 * se


def test_unreached_trials_count_at_the_budget():
    # best 10, the other trial not at the goal: Delta = (ln 10 + ln 100) / 2 - ln 10
    s = extrapolated_steps([10, None], max_steps=100)
    assert s == pytest.approx(math.exp(math.log(10) - 2 * (math.log(100) - math.log(10)) / 2))
    assert extrapolated_steps([None, None], 100) is None
    with pytest.raises(ValueError, match="at least 2 trials"):
        extrapolated_steps([3], 100)


def _rows(step_table):
    return [{"batch_size": b, "trial_id": i, "steps_to_goal": s}
            for b, steps in step_table.items() for i, s in enumerate(steps)]


def test_equal_trials_leave_the_fit_unchanged_and_first_trials_cut():
    """Where every trial of a batch size ties, there is no shortfall: B_ext = B_crit."""
    sizes = [8, 16, 32, 64, 128]
    truth = {b: round(1000 * (1 + 40 / b)) for b in sizes}
    curve = curve_of_steps(_rows({b: [s] * 8 for b, s in truth.items()}))
    out = shortfall(curve, max_steps=10 ** 5)
    assert out["b_ext"] == pytest.approx(out["b_crit"])
    assert out["b_crit"] == pytest.approx(
        fit_mccandlish(np.array(sizes, float), np.array([truth[b] for b in sizes], float)).b_crit)
    assert (out["trials"], out["to_trials"]) == (8, 32)
    # the first 2 trials of each batch size: trial ids 0 and 1 in order
    cut = first_trials(curve_of_steps(_rows({8: [50, 40, 10], 16: [30, 20, 5]})), 2)
    assert [p.steps for p in cut.points] == [40, 20]
    assert [len(p.trials) for p in cut.points] == [2, 2]


def test_a_shortfall_growing_with_batch_size_raises_b_ext():
    """The spread of the trials grows with B, so more trials gain more at large B: the
    extrapolated curve bends later (B_ext > B_crit)."""
    sizes = [8, 16, 32, 64, 128, 256]
    spread = {b: [round(1000 * (1 + 40 / b) * (1 + 0.02 * math.log2(b) * j)) for j in range(8)]
              for b in sizes}
    out = shortfall(curve_of_steps(_rows(spread)), max_steps=10 ** 5)
    assert out["b_ext"] > out["b_crit"]
    assert with_shortfall(30.0, 50.0, out["b_ext"]) == (30.0, max(50.0, out["b_ext"]))
    assert with_shortfall(30.0, 50.0, 10.0) == (10.0, 50.0)
    assert with_shortfall(None, 50.0, 10.0) == (None, None)


def test_steps_csv_round_trip_and_the_check(tmp_path):
    rng = np.random.default_rng(3)
    sizes = [8, 16, 32, 64, 128, 256]
    table_ = {b: [None if rng.random() < 0.1 else int(1000 * (1 + 40 / b) * rng.uniform(1, 2))
                  for _ in range(16)] for b in sizes}
    path = tmp_path / "steps.csv"
    path.write_text("sweep,batch_size,trial_id,steps_to_goal,max_steps\n" + "".join(
        f"toy,{r['batch_size']},{r['trial_id']},{'' if r['steps_to_goal'] is None else r['steps_to_goal']},20000\n"
        for r in _rows(table_)))
    (sweep,) = read_steps_csv(path)
    again = tmp_path / "again.csv"
    write_steps_csv(again, [sweep])
    assert again.read_text() == path.read_text()
    row = check_row(sweep, first=4)
    assert row.all_trials == 16 and row.b_all is not None
    assert row.ext_lo <= min(row.lo, row.b_ext) + 1e-9 and row.ext_hi >= max(row.hi, row.b_ext)
    text = table([row])
    assert "of 1 sweeps with at least 16 trials" in text
    assert check_row(sweep, first=8).b_all is None        # 16 < 4 x 8: nothing to check against
    with pytest.raises(ValueError, match="fewer than --first 32"):
        check_row(sweep, first=32)
    bad = tmp_path / "bad.csv"
    bad.write_text("sweep,batch_size,trial_id,steps_to_goal,max_steps\ntoy,8,0,x,5000\n")
    with pytest.raises(ValueError, match="line 2"):
        read_steps_csv(bad)
    with pytest.raises(ValueError, match="neither a sweep directory nor a steps CSV"):
        read_sweeps([tmp_path / "missing"])


def test_check_row_counts():
    row = CheckRow("x", 32, 128, b_first=40.0, lo=35.0, hi=45.0, b_ext=30.0, ext_lo=30.0,
                   ext_hi=45.0, b_all=32.0)
    assert row.inside(row.lo, row.hi) is False
    assert row.inside(row.ext_lo, row.ext_hi) is True
    assert row.closer is True


CHECKED_SWEEPS = ("digits_mlp", "digits_mlp_adam", "digits_mlp_decay", "digits_mlp_adam_decay",
                  "nqm", "nqm_decay", "multilabel_mlp_128", "trial_count_128_steps.csv")


def test_the_shipped_check_is_what_report_says():
    """`report`'s line on the search's shortfall quotes the check on the shipped sweeps
    (robustness.SHORTFALL_CHECK); recomputed here from them."""
    from pathlib import Path

    from realnets.sweeps.robustness import SHORTFALL_CHECK as c

    root = Path(__file__).resolve().parents[3] / "sweeps"
    rows = [check_row(s, c["trials"]) for s in read_sweeps([root / n for n in CHECKED_SWEEPS])]
    assert all(r.all_trials >= c["to_trials"] for r in rows)
    assert len(rows) == c["checked"]
    assert sum(not r.inside(r.lo, r.hi) for r in rows) == c["outside"]
    largest = max(max(r.b_all / r.b_first, r.b_first / r.b_all) for r in rows)
    assert f"{largest:.2f}" == f"{c['largest']:.2f}"
    # each search factor is their 68% split-conformal factor of |ln(B_4K / B_K)|: the
    # ceil(0.68 (n + 1))-th smallest, for K = 8, 16 and 32
    from realnets.sweeps.robustness import SEARCH_CHECKS, SEARCH_FACTORS
    sweeps = read_sweeps([root / n for n in CHECKED_SWEEPS])
    for first, factor in SEARCH_FACTORS.items():
        rows = [check_row(s, first) for s in sweeps]
        scores = sorted(abs(math.log(r.b_all / r.b_first)) for r in rows)
        k = math.ceil(factor["level"] * (len(scores) + 1))
        # rounded up to three decimals, so that the factor covers its own k-th score
        assert factor["factor"] == math.ceil(math.exp(scores[k - 1]) * 1000) / 1000, first
        assert (sum(bool(r.inside(*r.search)) for r in rows), len(rows)) == (
            SEARCH_CHECKS[first]["within"], SEARCH_CHECKS[first]["of"])


def test_search_interval():
    from realnets.sweeps.robustness import SEARCH_FACTORS, search_interval

    for trials in (8, 16, 32):
        f = SEARCH_FACTORS[trials]["factor"]
        assert search_interval(100.0, trials) == pytest.approx((100 / f, 100 * f))
    assert search_interval(100.0, 64) is None and search_interval(None, 32) is None


def test_the_command(tmp_path, capsys):
    from realnets.cli import main

    path = tmp_path / "steps.csv"
    path.write_text("sweep,batch_size,trial_id,steps_to_goal,max_steps\n" + "".join(
        f"toy,{b},{i},{int(100 * (1 + 50 / b)) + 7 * i},1000\n"
        for b in (8, 16, 32, 64, 128) for i in range(8)))
    out = tmp_path / "out.csv"
    assert main(["shortfall", str(path), "--first", "2", "--write-steps", str(out)]) == 0
    assert "| toy |" in capsys.readouterr().out
    assert out.read_text() == path.read_text()
    assert main(["shortfall", str(path), "--first", "1"]) == 2
    assert "--first must be >= 2, got 1" in capsys.readouterr().err
    assert main(["shortfall", str(path), "--first", "2", "--write-steps",
                 str(tmp_path / "no" / "out.csv")]) == 2
    assert "--write-steps: the directory of" in capsys.readouterr().err


HEADER = "sweep,batch_size,trial_id,steps_to_goal,max_steps\n"


@pytest.mark.parametrize("body, message", [
    ("", "no trials"),
    ("toy,8,0,5\n", "line 2: expected 5 fields"),
    ("toy,8,0,5,100\ntoy,8,0,6,100\n", "line 3: trial 0 at batch size 8 of sweep 'toy' given twice"),
    ("toy,8,0,101,100\n", "line 2: steps_to_goal must be in 1..max_steps (100)"),
    ("toy,8,0,0,100\n", "line 2: steps_to_goal must be in 1..max_steps (100)"),
    ("toy,8,0,5,0\n", "line 2: max_steps must be >= 1"),
    ("toy,8,0,5,100\ntoy,16,0,5,200\n", "line 3: max_steps must be >= 1 and the same"),
    ("toy,0,0,5,100\n", "line 2: batch_size must be >= 1"),
])
def test_a_bad_steps_csv_is_one_line(tmp_path, body, message):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + body)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_steps_csv(bad)


def test_the_value_checked_against_is_the_first_4k_trials():
    """With more than 4K trials, B_all is fitted on the first 4K per batch size (the statement's
    32 -> 128), not on every trial."""
    sizes = [8, 16, 32, 64, 128]
    rows = _rows({b: [round(100 * (1 + 30 / b))] * 8 + [round(50 * (1 + 300 / b))] * 4
                  for b in sizes})
    (sweep,) = [curve_of_steps(rows)]
    from realnets.sweeps.shortfall_check import Sweep
    row = check_row(Sweep("toy", sweep, 10 ** 4), first=2)
    assert row.b_all == pytest.approx(row.b_first)       # the first 8 all tie: no move
    assert row.all_trials == 12


def test_report_gives_the_search_range_of_a_32_trial_sweep():
    from pathlib import Path

    from realnets.sweeps import report
    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import load_sweep

    root = Path(__file__).resolve().parents[3] / "sweeps"
    text = report.render(build_curve(*reversed(load_sweep(root / "mnist_mlp"))), "table")
    # B_crit 76.40 from 32 trials: 76.40 / 1.360 .. 76.40 x 1.360
    assert ("a search of 128 trials per batch size would likely (68%) put B_crit in 56.18 .. "
            "103.9") in text
    assert report.search_caution() in text
    nqm = report.render(build_curve(*reversed(load_sweep(root / "nqm"))), "table")
    assert "would likely" not in nqm and report.search_caution() in nqm     # 128 trials


def test_the_held_out_checks_of_the_search_factor():
    """The eight sweeps held out for the search factors (docs/prediction_rule.md, session 44,
    second and third sections, and session 45, third): their 128-trial B_crit inside x1.360 of the
    32-trial value on three of each four, and the 8- and 16-trial factors' counts, as
    robustness.SEARCH_CHECKS says."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "sweeps"
    first = [check_row(s, 32) for s in read_steps_csv(root / "trial_count_128_heldout_steps.csv")]
    assert [r.name for r in first] == ["digits_mlp_sgd", "mnist_logreg", "mnist_logreg_momentum",
                                       "teacher_student_mlp_adam"]
    assert [r.inside(*r.search) for r in first] == [False, True, True, True]
    assert sum(bool(r.inside(r.lo, r.hi)) for r in first) == 1
    second = [check_row(s, 32)
              for s in read_steps_csv(root / "trial_count_128_heldout2_steps.csv")]
    assert [r.name for r in second] == ["teacher_student_noisy_mlp_adam", "digits_cnn_adam",
                                        "mnist_logreg_sgd", "digits_cnn_sgd"]
    assert [r.inside(*r.search) for r in second] == [True, True, True, False]
    from realnets.sweeps.robustness import SEARCH_CHECKS
    rows = first + second
    assert sum(bool(r.inside(r.lo, r.hi)) for r in rows) == 2      # the plain interval
    # the held-out counts and the largest move over these and the fifteen, as the range's
    # wording quotes them, for each factor (K = 8 and 16: session 45)
    held = read_steps_csv(root / "trial_count_128_heldout_steps.csv") + read_steps_csv(
        root / "trial_count_128_heldout2_steps.csv")
    fifteen = read_sweeps([root / n for n in CHECKED_SWEEPS])
    for k, check in SEARCH_CHECKS.items():
        rows = [check_row(s, k) for s in held]
        assert (sum(bool(r.inside(*r.search)) for r in rows), len(rows)) == (
            check["held_out_within"], check["held_out"]), k
        rows += [check_row(s, k) for s in fifteen]
        largest = max(max(r.b_all / r.b_first, r.b_first / r.b_all) for r in rows)
        assert largest == pytest.approx(check["largest"], rel=0.01), k
    assert [r.name for r in [check_row(s, 8) for s in held] if not r.inside(*r.search)] == [
        "digits_mlp_sgd"]

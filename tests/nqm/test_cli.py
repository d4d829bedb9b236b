"""nqm.cli: `python -m nqm curve` as a table, JSON (docs/design.md, 'Formats') and CSV, the
batch-size parser, and one-line `error:` messages with exit status 2 for every bad flag
(docs/design.md, 'Errors')."""

import csv
import io
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from nqm import cli, validation
from nqm.problem import NQMConfig
from nqm.scaling import analyse_curve
from nqm.tuning import OptimizerSpec, SearchSpace, default_space, tune_curve

REPO = Path(__file__).resolve().parents[2]
SMALL_ARGS = ["curve", "--dim", "200", "--batch-sizes", "4:256"]
SMALL_BATCH = [4, 8, 16, 32, 64, 128, 256]


@pytest.fixture(autouse=True)
def quiet_unstable_rows():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def run(argv, capsys):
    """(exit status, stdout, stderr) of cli.main(argv); argparse errors exit via SystemExit."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def strict_json(text):
    """json.loads that rejects NaN / Infinity / -Infinity tokens."""
    def reject(token):
        raise ValueError(f"non-standard JSON constant {token}")
    return json.loads(text, parse_constant=reject)


@pytest.fixture(scope="module")
def direct_curve():
    """The curve the CLI's defaults should reproduce at --dim 200, B = 4..256."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return tune_curve(NQMConfig(dim=200), OptimizerSpec("sgd"), SMALL_BATCH)


# --- output formats ---------------------------------------------------------------------------

def test_table_has_header_one_row_per_batch_size_and_fit_line(capsys, direct_curve):
    code, out, err = run(SMALL_ARGS, capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    header = lines[0].split()
    assert header[:3] == ["batch_size", "steps", "learning_rate"]
    rows = [ln.split() for ln in lines[1:] if ln.strip() and ln.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == SMALL_BATCH
    assert [int(r[1]) for r in rows] == [p.steps for p in direct_curve.points]
    lr_col = header.index("learning_rate")
    np.testing.assert_allclose([float(r[lr_col]) for r in rows],
                               [p.learning_rate for p in direct_curve.points], rtol=1e-3)
    fit_lines = [ln for ln in lines if ln.startswith("fit S(B) = S_min (1 + B_crit / B)")]
    assert len(fit_lines) == 1
    fit = analyse_curve(direct_curve).fit
    s_min = float(re.search(r"S_min = ([0-9.e+-]+)", fit_lines[0]).group(1))
    b_crit = float(re.search(r"B_crit = ([0-9.e+-]+)", fit_lines[0]).group(1))
    assert s_min == pytest.approx(fit.s_min, rel=1e-3)
    assert b_crit == pytest.approx(fit.b_crit, rel=1e-3)
    assert any(ln.startswith("perfect scaling") for ln in lines)


def test_json_has_design_keys_and_agrees_with_the_library(capsys, direct_curve):
    code, out, err = run(SMALL_ARGS + ["--format", "json"], capsys)
    assert code == 0 and err == ""
    data = strict_json(out)  # one object: the whole of stdout parses
    assert isinstance(data, dict)
    assert {"config", "points", "fit", "regimes", "noise_scale", "lower_bound"} <= set(data)
    assert {"s_min", "b_crit", "r2"} <= set(data["fit"])
    assert {"cbs20", "maximal_from"} <= set(data["regimes"])
    assert {"b_simple", "b_noise"} <= set(data["noise_scale"])
    assert len(data["points"]) == len(SMALL_BATCH)
    for point, expected in zip(data["points"], direct_curve.points):
        assert {"batch_size", "steps", "learning_rate", "momentum", "reached"} <= set(point)
        assert point["batch_size"] == expected.batch_size
        assert point["steps"] == expected.steps
        assert point["reached"] is True
        assert point["momentum"] is None
        assert point["learning_rate"] == pytest.approx(expected.learning_rate, rel=1e-12)

    analysis = analyse_curve(direct_curve)
    assert data["fit"]["s_min"] == pytest.approx(analysis.fit.s_min, rel=1e-9)
    assert data["fit"]["b_crit"] == pytest.approx(analysis.fit.b_crit, rel=1e-9)
    assert data["fit"]["r2"] == pytest.approx(analysis.fit.r2, rel=1e-9)
    assert 0.99 < data["fit"]["r2"] <= 1.0
    assert data["regimes"]["cbs20"] == analysis.cbs20
    assert data["regimes"]["maximal_from"] == analysis.maximal_from

    # Independent formulas (docs/design.md, 'The NQM' and 'Noise scale') with h = c = 1/i,
    # E theta^2 = 1, d = 200.
    h = 1.0 / np.arange(1, 201)
    assert data["noise_scale"]["b_simple"] == pytest.approx(h.sum() / (h ** 2).sum(), rel=1e-12)
    assert data["noise_scale"]["b_noise"] == pytest.approx((h ** 2).sum() / (h ** 3).sum(),
                                                           rel=1e-12)
    np.testing.assert_allclose(data["lower_bound"], 200 / (2 * 0.01 * np.array(SMALL_BATCH)),
                               rtol=1e-12)
    assert data["config"]["problem"]["dim"] == 200
    assert data["config"]["optimizer"] == "sgd"
    assert data["config"]["target"] == 0.01


def test_json_with_unreached_points_writes_null(capsys):
    code, out, err = run(SMALL_ARGS + ["--max-steps", "1000", "--format", "json"], capsys)
    assert code == 0 and err == ""
    data = strict_json(out)
    steps = [p["steps"] for p in data["points"]]
    # Free steps at d = 200: 18183, 9120, 4589, 2325, 1194, 633, 361.
    assert steps[:5] == [None] * 5
    assert all(isinstance(s, int) and s <= 1000 for s in steps[5:])
    assert [p["reached"] for p in data["points"]] == [False] * 5 + [True] * 2
    assert all(p["learning_rate"] is None for p in data["points"][:5])
    assert data["regimes"]["cbs20"] is None  # the smallest batch size did not reach the target
    assert data["fit"]["r2"] is None         # two points: no R^2
    assert "NaN" not in out and "Infinity" not in out


def test_json_single_batch_size_has_null_fit(capsys):
    code, out, _ = run(["curve", "--dim", "100", "--batch-sizes", "16", "--format", "json"],
                       capsys)
    assert code == 0
    data = strict_json(out)
    assert data["fit"] == {"s_min": None, "b_crit": None, "r2": None}
    assert data["regimes"]["cbs20"] == 16 and data["regimes"]["maximal_from"] == 16


def test_json_momentum_and_edges(capsys):
    args = ["curve", "--dim", "100", "--batch-sizes", "4,64,4096", "--optimizer", "momentum",
            "--lr-range", "1e-8,0.5", "--format", "json"]
    code, out, _ = run(args, capsys)
    assert code == 0
    data = strict_json(out)
    direct = tune_curve(NQMConfig(dim=100), OptimizerSpec("momentum"), [4, 64, 4096],
                        space=SearchSpace(learning_rate=(1e-8, 0.5)))
    for point, expected in zip(data["points"], direct.points):
        assert point["steps"] == expected.steps
        assert point["momentum"] == pytest.approx(expected.momentum, rel=1e-12)
        assert 0.0 <= point["momentum"] < 1.0
        assert point.get("edge", []) == list(expected.edge)
    assert "learning_rate" in data["points"][-1]["edge"]  # capped at 0.5: a large-B edge
    assert data["config"]["search"]["learning_rate"] == [1e-8, 0.5]


def test_certify_flag_gives_the_certified_curve(capsys):
    """--certify is tune_curve(certify=True): on a problem of a few steps at large batch sizes,
    where momentum's local search alone takes 3 steps at B = 1024 and the grid search 2."""
    args = ["curve", "--dim", "20", "--spectrum-exponent", "2", "--target", "0.1",
            "--batch-sizes", "256,1024", "--optimizer", "momentum", "--format", "json"]
    code, out, _ = run(args + ["--certify"], capsys)
    assert code == 0
    direct = tune_curve(NQMConfig(dim=20, spectrum_exponent=2.0, target=0.1),
                        OptimizerSpec("momentum"), [256, 1024], certify=True)
    assert [p["steps"] for p in strict_json(out)["points"]] == [p.steps for p in direct.points]
    assert [p.steps for p in direct.points] == [3, 2]


def test_certify_flag_applies_to_adam(capsys):
    """--certify with mean-field Adam: the certified curve (5 steps at B = 4096 where the rate
    scan alone takes 6), recorded as certified."""
    args = ["curve", "--dim", "100", "--target", "0.05", "--batch-sizes", "1024,4096",
            "--optimizer", "adam", "--format", "json"]
    code, out, _ = run(args + ["--certify"], capsys)
    assert code == 0
    data = strict_json(out)
    direct = tune_curve(NQMConfig(dim=100, target=0.05), OptimizerSpec("adam"), [1024, 4096],
                        space=default_space(OptimizerSpec("adam")), certify=True)
    assert [p["steps"] for p in data["points"]] == [p.steps for p in direct.points] == [8, 5]
    assert [p["learning_rate"] for p in data["points"]] == pytest.approx(
        [p.learning_rate for p in direct.points], rel=1e-12)
    assert data["config"]["certified"] is True
    code, out, _ = run(args, capsys)
    assert [p["steps"] for p in strict_json(out)["points"]] == [8, 6]


def test_csv_parses_one_row_per_batch_size(capsys, direct_curve):
    code, out, err = run(SMALL_ARGS + ["--format", "csv"], capsys)
    assert code == 0 and err == ""
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == len(SMALL_BATCH)
    assert {"batch_size", "steps", "learning_rate", "momentum", "efficiency", "regime",
            "lower_bound"} <= set(rows[0])
    assert [int(r["batch_size"]) for r in rows] == SMALL_BATCH
    assert [int(r["steps"]) for r in rows] == [p.steps for p in direct_curve.points]
    np.testing.assert_allclose([float(r["learning_rate"]) for r in rows],
                               [p.learning_rate for p in direct_curve.points], rtol=1e-12)
    assert all(r["momentum"] == "" for r in rows)
    eff = np.array([float(r["efficiency"]) for r in rows])
    s = np.array([p.steps for p in direct_curve.points], float)
    np.testing.assert_allclose(eff, s[0] * 4 / (s * np.array(SMALL_BATCH)), rtol=1e-12)
    assert rows[0]["regime"] == "perfect"


# --- batch-size parser ------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("4,8,16", [4, 8, 16]),
    ("4:64", [4, 8, 16, 32, 64]),
    ("3:24", [3, 6, 12, 24]),
    ("4:63", [4, 8, 16, 32]),
    ("8:8", [8]),
    (" 16, 4 ,8 ", [4, 8, 16]),
    ("1", [1]),
])
def test_parse_batch_sizes(text, expected):
    assert validation.parse_batch_sizes(text) == expected


@pytest.mark.parametrize("text", ["", " ", ",", "4:2", "0,4", "-4,8", "a:b", "4:8:16", "0:8",
                                  "4.5,8", "4,x"])
def test_parse_batch_sizes_rejects_bad_forms(text):
    with pytest.raises(ValueError, match="batch-sizes"):
        validation.parse_batch_sizes(text)


# --- bad flags: exit 2, one line `error: ...` naming the parameter, nothing on stdout ----------

BASE = ["curve", "--dim", "50", "--batch-sizes", "4:16"]


@pytest.mark.parametrize("extra, name", [
    (["--optimizer", "lamb"], r"optimizer"),
    (["--optimizer", "adam", "--precond-power", "0.5"], r"precond"),
    (["--optimizer", "adam", "--max-steps", "10000000000"], r"max-steps"),
    (["--dim", "0"], r"dim"),
    (["--dim", "abc"], r"dim"),
    (["--dim", "2.5"], r"dim"),
    (["--target", "-1"], r"target"),
    (["--target", "0"], r"target"),
    (["--target", "nan"], r"target"),
    (["--precond-power", "2"], r"precond"),
    (["--precond-power", "-0.5"], r"precond"),
    (["--batch-sizes", "0"], r"batch-sizes"),
    (["--batch-sizes", "16:4"], r"batch-sizes"),
    (["--max-steps", "0"], r"max-steps"),
    (["--max-steps", "1.5"], r"max-steps"),
    (["--lr-range", "1,0"], r"learning_rate|lr-range"),
    (["--lr-range", "0,1"], r"learning_rate|lr-range"),
    (["--lr-range", "abc"], r"lr-range"),
    (["--lr-range", "1,2,3"], r"lr-range"),
    (["--format", "xml"], r"format"),
    (["--noise", "weird"], r"noise"),
    (["--noise-scale", "0"], r"noise_scale|noise-scale"),
    (["--spectrum-exponent", "-1"], r"spectrum_exponent|spectrum-exponent"),
    (["--init-second-moment", "-1"], r"init_second_moment|init-second-moment"),
    (["--bogus"], r"--bogus"),
])
def test_bad_flag_exits_2_with_one_error_line(capsys, extra, name):
    code, out, err = run(BASE + extra, capsys)
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith("error:")
    assert re.search(name, lines[0]), lines[0]


def test_missing_command_exits_2(capsys):
    code, out, err = run([], capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error:") and "command" in err


@pytest.mark.parametrize("target", ["5", "2.25"])
def test_target_at_or_above_initial_loss_exits_2(capsys, target):
    # d = 50: initial loss 1/2 sum_{i <= 50} 1/i = 2.2496; 2.25 is just above it.
    code, out, err = run(BASE + ["--target", target], capsys)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("error:")
    assert "target" in err and "initial loss" in err


def test_successful_run_returns_zero_not_none(capsys):
    assert cli.main(["curve", "--dim", "50", "--batch-sizes", "4", "--format", "csv"]) == 0
    out, _ = capsys.readouterr()
    assert len(list(csv.DictReader(io.StringIO(out)))) == 1


# --- as a module ------------------------------------------------------------------------------

def test_runs_as_module():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "nqm", "curve", "--dim", "100", "--batch-sizes", "4:16",
         "--format", "json"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = strict_json(proc.stdout)
    assert [p["batch_size"] for p in data["points"]] == [4, 8, 16]
    assert all(p["reached"] for p in data["points"])
    steps = [p["steps"] for p in data["points"]]
    assert steps[0] > steps[1] > steps[2] > 0
    bad = subprocess.run([sys.executable, "-m", "nqm", "curve", "--dim", "0"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error:") and len(bad.stderr.splitlines()) == 1


def test_parse_optimizers():
    from nqm.cli import parse_optimizers
    assert parse_optimizers("sgd,momentum,sgd@0.5") == [("sgd", 0.0), ("momentum", 0.0),
                                                       ("sgd", 0.5)]
    assert parse_optimizers("momentum,adam") == [("momentum", 0.0), ("adam", 0.0)]
    for bad in ("", "lamb", "sgd@x", "adam@0.5"):
        with pytest.raises(ValueError, match="optimizers"):
            parse_optimizers(bad)


def test_compare_prints_one_column_per_optimizer(capsys):
    from nqm.cli import main
    assert main(["compare", "--dim", "100", "--batch-sizes", "4:64",
                 "--optimizers", "sgd,sgd@0.5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["batch_size", "sgd", "steps", "sgd@0.5", "steps"]
    rows = [line.split() for line in out[1:6]]
    assert [r[0] for r in rows] == ["4", "8", "16", "32", "64"]
    # preconditioning never needs more steps here, and the summary rows follow
    assert all(int(r[2]) <= int(r[1]) for r in rows)
    assert any(line.strip().startswith("cbs20") for line in out)


def test_adam_curve_is_the_library_s_and_compares(capsys):
    """--optimizer adam tunes mean-field Adam in Adam's default bounds (1e-5, 1); compare takes
    adam beside the others and a preconditioned adam is one error line naming --optimizers."""
    from nqm.adam_tuning import AdamSearch, tune_adam_curve
    code, out, _ = run(["curve", "--dim", "20", "--target", "0.02", "--batch-sizes", "4,256",
                        "--optimizer", "adam", "--format", "json"], capsys)
    assert code == 0
    data = json.loads(out)
    direct = tune_adam_curve(NQMConfig(dim=20, target=0.02), [4, 256],
                             search=AdamSearch(max_steps=10 ** 8))
    assert data["config"]["optimizer"] == "adam" and data["config"]["search"]["learning_rate"] == [1e-5, 1.0]
    assert [p["steps"] for p in data["points"]] == list(direct.steps.astype(int))
    assert [p["momentum"] for p in data["points"]] == [p.momentum for p in direct.points]
    code, out, _ = run(["compare", "--dim", "20", "--target", "0.02", "--batch-sizes", "4,256",
                        "--optimizers", "sgd,adam"], capsys)
    assert code == 0 and out.splitlines()[0].split() == ["batch_size", "sgd", "steps", "adam",
                                                         "steps"]
    code, out, err = run(["compare", "--dim", "20", "--optimizers", "adam@0.5"], capsys)
    assert code == 2 and out == "" and err.startswith("error: optimizers") and err.count("\n") == 1


def test_table_states_the_bound_when_the_curve_has_no_bend(capsys):
    """B = 4..64 on a d = 1000 problem still scales perfectly at 64: only B_crit >= 5 x 64 - 6 x 4
    = 296 is known. Up to 4096 the curve bends and no bound is printed."""
    code, out, _ = run(["curve", "--dim", "1000", "--batch-sizes", "4:64"], capsys)
    assert code == 0
    assert "no bend between the batch sizes: B_crit >= 296 is all they say" in out
    code, out, _ = run(["curve", "--dim", "1000", "--batch-sizes", "4:4096"], capsys)
    assert code == 0 and "no bend" not in out


def test_linear_decay_is_the_library_s_and_refuses_what_it_cannot_do(capsys):
    """--linear-decay tunes the constant curve, then its decay (nqm.linear_decay); the table
    gains the final_lr_fraction column; another optimizer or too much step-by-step work is one
    error line, the latter before any tuning."""
    from nqm import linear_decay
    args = ["curve", "--dim", "8", "--batch-sizes", "4,256", "--optimizer", "momentum",
            "--linear-decay"]
    code, out, _ = run(args + ["--format", "json"], capsys)
    assert code == 0
    data = json.loads(out)
    cfg = NQMConfig(dim=8)
    constant = tune_curve(cfg, OptimizerSpec("momentum"), [4, 256], 10 ** 8)
    direct = linear_decay.tune_decay_curve(cfg.problem(), "momentum", constant)
    assert [p["steps"] for p in data["points"]] == [p.steps for p in direct.points]
    assert [p["final_lr_fraction"] for p in data["points"]] == [p.final_lr_fraction
                                                               for p in direct.points]
    assert data["config"]["schedule"] == "linear_decay"
    code, out, _ = run(args, capsys)
    assert code == 0 and "final_lr_fraction" in out.splitlines()[0]
    code, out, _ = run(args[:-2] + ["sgd", "--linear-decay", "--format", "json"], capsys)
    sgd = linear_decay.tune_decay_curve(cfg.problem(), "sgd",
                                        tune_curve(cfg, OptimizerSpec("sgd"), [4, 256], 10 ** 8))
    assert code == 0 and [p["steps"] for p in json.loads(out)["points"]] == list(sgd.steps)
    assert all(p["momentum"] == 0.0 for p in json.loads(out)["points"])
    code, out, _ = run(args[:-2] + ["adam", "--linear-decay"], capsys)
    assert code == 0 and "b2 = 0.999" in out and "linear decay of the rate" in out
    for bad, name in ((["--optimizer", "ema"], "--optimizer sgd, momentum or adam"),
                      (["--optimizer", "momentum", "--precond-power", "0.5"], "--precond-power"),
                      (["--optimizer", "adam", "--dim", "10000"], "--dim")):
        code, out, err = run(["curve", "--batch-sizes", "4,256", "--linear-decay", "--dim", "8"]
                             + bad, capsys)
        assert code == 2 and out == "" and err.count("\n") == 1 and name in err, err
    assert "at least" in err     # refused on the lower bound, before the constant tuning


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_adam_tuning_draws_its_passes_on_a_terminal_only(monkeypatch):
    with cli.adam_progress("sgd") as progress:
        assert progress is None                      # the fast families draw nothing
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with cli.adam_progress("adam") as progress:
        progress(1, 8)
        progress(8, 8)
    assert "tuning mean-field Adam" in terminal.getvalue() and "8/8" in terminal.getvalue()
    # the bar is closed when the tuning fails, before the error line is printed
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with pytest.raises(RuntimeError), cli.adam_progress("adam") as progress:
        progress(3, 8)
        raise RuntimeError("tuning failed")
    assert terminal.getvalue().endswith("\n") and "3/8" in terminal.getvalue()
    # the curve command passes it on: every rate of the default search, 4 b1 x (21 + 3 x 6)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert cli.main(["curve", "--optimizer", "adam", "--dim", "20", "--batch-sizes", "4,64",
                     "--format", "json"]) == 0
    assert "156/156" in terminal.getvalue()
    piped = io.StringIO()                            # not a terminal: nothing drawn
    monkeypatch.setattr(sys, "stderr", piped)
    with cli.adam_progress("adam") as progress:
        progress(8, 8)
    assert piped.getvalue() == ""

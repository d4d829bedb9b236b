"""ui.measured: the measured curves the app shows, checked against the files they come from."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ui import charts, measured, prediction, run_form
from ui.places import Places

PLACES = Places.under(Path(__file__).resolve().parents[2])
MNIST_MLP = PLACES.sweeps / "mnist_mlp"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "batch_science"


def raw_records(path=MNIST_MLP):
    return [json.loads(line) for line in (path / "trials.jsonl").read_text().splitlines() if line]


@pytest.fixture(scope="module")
def mnist_mlp():
    return measured.load_sweep_dir(MNIST_MLP)


def test_shipped_sweeps_are_every_directory_with_a_config(tmp_path):
    assert measured.list_sweeps(PLACES.sweeps, PLACES.results)["sweeps/mnist_mlp"] == MNIST_MLP
    for path in measured.list_sweeps(PLACES.sweeps, PLACES.results).values():
        assert (path / "config.json").is_file()
    (tmp_path / "b_sweep").mkdir()
    (tmp_path / "b_sweep" / "config.json").write_text("{}")
    (tmp_path / "a_not_a_sweep").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "config.json").write_text("{}")
    (tmp_path / "study" / "arm").mkdir(parents=True)
    (tmp_path / "study" / "arm" / "config.json").write_text("{}")
    (tmp_path / ".hidden" / "arm").mkdir()
    (tmp_path / ".hidden" / "arm" / "config.json").write_text("{}")
    assert measured.list_sweeps(tmp_path, tmp_path / "missing") == {
        f"{tmp_path.name}/b_sweep": tmp_path / "b_sweep",
        f"{tmp_path.name}/study/arm": tmp_path / "study" / "arm"}
    # the shipped study of several sweeps is listed sweep by sweep
    assert "sweeps/digits_mlp_nqm_decay/b8_decay" in measured.list_sweeps(PLACES.sweeps)


def test_a_sweep_with_fewer_trials_than_asked_is_labelled_unfinished(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"batch_sizes": [8, 16], "trials": 2}))
    (tmp_path / "trials.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    assert measured.sweep_label("s", tmp_path) == "s (unfinished: 3 of 4 trials)"
    with (tmp_path / "trials.jsonl").open("a") as f:
        f.write('{"a": 4}\n')
    assert measured.sweep_label("s", tmp_path) == "s"
    assert measured.sweep_label("t", tmp_path / "missing") == "t"


def test_mnist_mlp_points_and_status_counts_match_trials_jsonl(mnist_mlp):
    records = raw_records()
    config = json.loads((MNIST_MLP / "config.json").read_text())
    assert list(mnist_mlp.points["batch_size"]) == config["batch_sizes"]
    assert config["batch_sizes"] == [2 ** k for k in range(4, 13)]
    assert len(mnist_mlp.trials) == len(records) == 9 * 32
    # status counts per batch size, table against the raw file
    raw = Counter((r["batch_size"], r["status"]) for r in records)
    got = Counter(zip(mnist_mlp.trials["batch_size"], mnist_mlp.trials["status"]))
    names = {"COMPLETE": "reached", "INCOMPLETE": "not reached", "INFEASIBLE": "infeasible"}
    assert got == Counter({(b, names[s]): n for (b, s), n in raw.items()})
    for _, row in mnist_mlp.points.iterrows():
        b = row["batch_size"]
        assert row["reached"] == raw[(b, "COMPLETE")]
        assert row["not_reached"] == raw[(b, "INCOMPLETE")]
        assert row["infeasible"] == raw[(b, "INFEASIBLE")]
        # steps to result = the fewest steps_to_goal of the batch size's trials
        fewest = min(r["steps_to_goal"] for r in records
                     if r["batch_size"] == b and r["steps_to_goal"] is not None)
        assert row["steps"] == fewest
        best = mnist_mlp.trials[(mnist_mlp.trials["batch_size"] == b) & mnist_mlp.trials["best"]]
        assert len(best) == 1 and best["steps_to_goal"].iloc[0] == fewest
    # the perfect-scaling line starts at the smallest batch size's steps
    np.testing.assert_allclose(mnist_mlp.points["perfect"],
                               134 * 16 / mnist_mlp.points["batch_size"])
    # 1 - momentum is what the scatter's y axis shows
    # (trials.jsonl is in finishing order; the table in batch size, trial id order)
    by_key = {(r["batch_size"], str(r["trial_id"])): 1 - r["momentum"] for r in records}
    np.testing.assert_allclose(mnist_mlp.trials["one_minus_momentum"],
                               [by_key[k] for k in zip(mnist_mlp.trials["batch_size"],
                                                       mnist_mlp.trials["trial_id"])])


def test_summary_is_the_curve_document_fit(mnist_mlp):
    # the fit of sweeps/mnist_mlp as sweeps/README.md reports it (S_min 20.33, B_crit 76.4,
    # R^2 0.9833, 16-84% over resampled trials 67.88 .. 87.8)
    row = mnist_mlp.summary.iloc[0]
    assert row["s_min"] == pytest.approx(20.33, abs=0.01)
    assert row["b_crit"] == pytest.approx(76.40, abs=0.01)
    assert row["r2"] == pytest.approx(0.9833, abs=1e-4)
    assert row["cbs20"] == 64 and row["maximal_from"] == 512
    assert (row["b_crit_resampled_p16"], row["b_crit_resampled_p84"]) == pytest.approx(
        (67.88, 87.80), abs=0.01)
    # 32 trials run to their end: where 128 would likely put B_crit, x1.360 either side
    assert (row["b_crit_search_lo"], row["b_crit_search_hi"]) == pytest.approx(
        (76.40 / 1.360, 76.40 * 1.360), abs=0.01)
    # the fitted line at the smallest and largest batch sizes: 20.33 (1 + 76.4 / B)
    fit = dict(zip(mnist_mlp.points["batch_size"], mnist_mlp.points["fit"]))
    assert fit[16] == pytest.approx(117.41, abs=0.01) and fit[4096] == pytest.approx(20.71, abs=0.01)


def test_noise_series_is_the_best_trials_b_simple(mnist_mlp):
    records = raw_records()
    noise = mnist_mlp.noise
    assert not noise.empty and (noise["b_simple"] > 0).all()
    for b, group in noise.groupby("batch_size"):
        trials = [r for r in records if r["batch_size"] == b and r["steps_to_goal"] is not None]
        best = min(trials, key=lambda r: (r["steps_to_goal"], r["trial_id"]))
        assert set(group["trial_id"]) == {str(best["trial_id"])}
        ns = best["noise_scale"]
        expected = [(s, v) for s, v in zip(ns["step"], ns["b_simple"]) if v is not None]
        assert list(zip(group["step"], group["b_simple"])) == pytest.approx(expected)


def test_a_sweep_without_trials_yet_loads_empty(tmp_path):
    (tmp_path / "config.json").write_text((MNIST_MLP / "config.json").read_text())
    m = measured.load_sweep_dir(tmp_path)
    assert m.points.empty and m.trials.empty and m.noise.empty
    assert m.summary["b_crit"].iloc[0] is None


@pytest.mark.parametrize("setup, message", [
    (None, "does not exist"),
    ({}, "has no config.json"),
    ({"config.json": "{not json"}, "not valid JSON"),
    ({"config.json": '{"workload": "mnist_mlp", "goal": 0.04, "batch_sizes": []}'},
     "batch_sizes must hold at least one batch size"),
    ({"config.json": '{"workload": "mnist_mlp", "goal": 0.04, "batch_sizes": [16, 0]}'},
     "batch_sizes entry must be a whole number >= 1, got 0"),
    ({"config.json": '{"workload": "mnist_mlp", "batch_sizes": [16]}'}, "goal must be"),
    ({"config.json": '{"workload": "mnist_mlp", "goal": 0.04, "batch_sizes": [16]}',
      "trials.jsonl": '{"batch_size": 16, "trial_id": 0, "status": "DONE"}\n'},
     "record 1: status must be one of"),
    ({"config.json": '{"workload": "mnist_mlp", "goal": 0.04, "batch_sizes": [16]}',
      "trials.jsonl": '{"trial_id": 0, "status": "COMPLETE"}\n'}, "record 1: batch_size"),
    ({"config.json": '{"workload": "mnist_mlp", "goal": 0.04, "batch_sizes": [16]}',
      "trials.jsonl": 'oops\n{}\n'}, "line 1 is not valid JSON"),
])
def test_bad_sweep_directories_raise_a_value_error_naming_the_problem(tmp_path, setup, message):
    path = tmp_path / "sweep"
    if setup is not None:
        path.mkdir()
        for name, text in setup.items():
            (path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        measured.load_sweep_dir(path)


def test_the_trials_table_and_scatter_carry_a_searched_decay(mnist_mlp):
    decay_dir = PLACES.sweeps / "digits_mlp_decay"
    decayed = measured.load_sweep_dir(decay_dir)
    by_key = {(r["batch_size"], str(r["trial_id"])): (r["final_lr_fraction"], r["decay_steps"])
              for r in raw_records(decay_dir)}
    got = dict(zip(zip(decayed.trials["batch_size"], decayed.trials["trial_id"]),
                   zip(decayed.trials["final_lr_fraction"], decayed.trials["decay_steps"])))
    assert got == by_key and len(got) == len(decayed.trials)
    assert (decayed.trials["final_lr_fraction"] < 1).mean() > 0.9   # f drawn in [0.01, 1]
    # a constant-rate sweep: f = 1, no length, and no decay in the scatter's tooltip
    assert (mnist_mlp.trials["final_lr_fraction"] == 1).all()
    assert mnist_mlp.trials["decay_steps"].isna().all()

    def tooltip_fields(trials):
        tooltip = charts.trials_chart(trials).to_dict()["spec"]["encoding"]["tooltip"]
        return [t["field"] for t in tooltip]
    assert tooltip_fields(decayed.trials)[5:7] == ["final_lr_fraction", "decay_steps"]
    assert "final_lr_fraction" not in tooltip_fields(mnist_mlp.trials)
    # the published archive's decays too (the fixture's batch size 128)
    (bs,) = measured.load_batch_science_dir(FIXTURE, goal=0.02)
    at_128 = bs.trials[bs.trials["batch_size"] == 128]
    assert list(at_128["final_lr_fraction"]) == [0.0123, 0.0871]
    assert list(at_128["decay_steps"]) == [4500, 5200]


def test_batch_science_trials_and_counts():
    (m,) = measured.load_batch_science_dir(FIXTURE, goal=0.02)
    assert m.name == "mnist/simple_cnn_base/nesterov_momentum"
    assert list(m.points["batch_size"]) == [64, 128, 256, 512]
    assert list(m.points["steps"][:3]) == [3000, 2000, 1000] and np.isnan(m.points["steps"].iloc[3])
    counts = Counter(zip(m.trials["batch_size"], m.trials["status"]))
    assert counts == Counter({(64, "reached"): 2, (64, "infeasible"): 1, (128, "reached"): 1,
                              (128, "not reached"): 1, (256, "reached"): 2,
                              (512, "not reached"): 2})
    assert m.noise.empty   # the archive records no noise scale
    with pytest.raises(ValueError, match="goal is required"):
        measured.load_batch_science_dir(FIXTURE, goal=None)
    with pytest.raises(ValueError, match="does not exist"):
        measured.load_batch_science_dir(FIXTURE / "nope", goal=0.02)


def test_measured_summary_has_the_resampled_b_crit_only_where_trials_ran_to_their_end():
    from dataclasses import replace

    from realnets.sweeps.curve import build_curve
    from realnets.sweeps.records import TrialRecord

    records = []
    for b, steps in ((8, (900, 1200)), (16, (500, 700)), (32, (300, 300)), (64, (200, 260)),
                     (128, (150, 150)), (256, (125, 170))):
        for i, st in enumerate(steps):
            records.append(TrialRecord(batch_size=b, trial_id=i, status="COMPLETE",
                                       steps_to_goal=st, learning_rate=0.1))
    config = run_form.sweep_config("nqm", "8:256", 2)
    full = measured.measured(build_curve(records, replace(config, full_trials=True)), records)
    row = full.summary.iloc[0]
    # batch sizes 32 and 128 have two equal trials, the rest a slower second one: resamples
    # that miss a fast trial spread B_crit around the curve's own fit
    assert row["b_crit_resampled_p16"] < row["b_crit_resampled_p84"]
    assert row["b_crit_resampled_p16"] > 0.8 * row["b_crit"]
    censored = measured.measured(build_curve(records, config), records)
    assert "b_crit_resampled_p16" not in censored.summary.columns
    # beside an NQM prediction (what the app shows) the measured row keeps the columns
    comparison = prediction.compare(full.curve, full.curve,
                                    measured_columns=measured.resampled_columns(full.document))
    assert comparison.summary.iloc[0]["b_crit_resampled_p84"] == row["b_crit_resampled_p84"]
    assert "b_crit_resampled_p84" not in prediction.compare(censored.curve, full.curve).summary
    assert row["b_crit_interval"] == "resampled trials" and np.isnan(full.points["reruns_median"]).all()
    spec = charts.steps_chart(full.points, None, full.summary, series="curve").to_dict()
    assert "reruns_median" not in json.dumps(spec["layer"])      # no reruns, no diamonds


def test_a_sweep_with_reruns_shows_their_interval_and_median_steps():
    text = measured.load_sweep_dir(PLACES.sweeps / "text_transformer")
    row = text.summary.iloc[0]
    doc = json.loads((PLACES.sweeps / "text_transformer" / "curve.json").read_text())
    assert row["b_crit_interval"] == "reruns under other seeds"
    assert (row["b_crit_resampled_p16"], row["b_crit_resampled_p84"]) == pytest.approx(
        (doc["b_crit_resampled"]["p16"], doc["b_crit_resampled"]["p84"]))
    assert row["b_crit_reruns_median_curve"] == pytest.approx(
        doc["b_crit_repeats"]["rerun_median_b_crit"])
    assert list(text.points["reruns_median"]) == doc["b_crit_repeats"]["rerun_median_steps"]
    over_seeds = doc["b_crit_repeats"]["rerun_median_resampled"]
    assert (row["b_crit_reruns_median_p16"], row["b_crit_reruns_median_p84"]) == pytest.approx(
        (over_seeds["p16"], over_seeds["p84"]))
    # the chart draws the medians beside the curve, one diamond per batch size that has one
    spec = charts.steps_chart(text.points, None, text.summary, series="curve").to_dict()
    diamonds = [layer for layer in spec["layer"]
                if layer["encoding"].get("y", {}).get("field") == "reruns_median"]
    assert len(diamonds) == 1 and diamonds[0]["mark"]["shape"] == "diamond"
    drawn = spec["datasets"][diamonds[0]["data"]["name"]]
    assert sorted(d["reruns_median"] for d in drawn) == sorted(
        m for m in doc["b_crit_repeats"]["rerun_median_steps"] if m is not None)
    # beside the NQM (the app's usual chart) the measured rows keep them, the NQM's have none
    both = prediction.compare(text.curve, text.curve, measured_label="m", predicted_label="p",
                              reruns_median=text.points["reruns_median"].to_numpy())
    rows = both.points.set_index("curve")["reruns_median"]
    assert list(rows["m"]) == doc["b_crit_repeats"]["rerun_median_steps"]
    assert np.isnan(rows["p"]).all()

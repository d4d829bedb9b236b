"""realnets.sweeps.batch_science: the published Shallue et al. 2018 layout read as ScalingCurves.

The fixture (tests/fixtures/batch_science, synthetic numbers, see its README.md) is small enough
that every expected number below was read off the CSVs by hand.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from nqm.curve import ScalingCurve, to_json
from nqm.scaling import analyse_curve
from realnets.sweeps.batch_science import load_batch_science

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "batch_science"
WORKLOAD = FIXTURE / "mnist" / "simple_cnn_base" / "nesterov_momentum"
RECORD_KEYS = {"batch_size", "trial_id", "status", "learning_rate", "momentum", "final_lr_fraction",
               "steps_to_goal", "steps_run", "eval", "seed", "metaparameters"}


def load_one(root=FIXTURE, **kwargs):
    curves = load_batch_science(root, **{"goal": 0.02, **kwargs})
    assert len(curves) == 1
    return curves[0]


def trials_by_id(point):
    return {t["trial_id"]: t for t in point.trials}


@pytest.fixture
def broken(tmp_path):
    """A writable copy of the fixture; returns (root, workload dir)."""
    root = tmp_path / "bs"
    shutil.copytree(FIXTURE, root)
    return root, root / "mnist" / "simple_cnn_base" / "nesterov_momentum"


# ----------------------------------------------------------------------------------------------
# The fixture, by hand


def test_fixture_loads_to_the_hand_computed_curve():
    curve = load_one()
    assert curve.source == "batch_science"
    assert curve.config == {"dataset": "mnist", "model": "simple_cnn_base",
                            "optimizer": "nesterov_momentum", "metric": "val/classification_error",
                            "goal": 0.02, "root": str(FIXTURE), "workload_dir": str(WORKLOAD)}
    np.testing.assert_array_equal(curve.batch_sizes, [64, 128, 256, 512])
    # first step with val error <= 0.02 over any trial: 64 -> trial 2 at 3000 (trial 1 only at
    # 4000); 128 -> trial 1 at 2000; 256 -> trial 1 exactly 0.0200 at 1000 (<= counts);
    # 512 -> best is 0.0221, never reached
    assert [p.steps for p in curve.points] == [3000, 2000, 1000, None]
    assert [p.learning_rate for p in curve.points] == [0.0507, 0.0893, 0.1428, None]
    assert [p.momentum for p in curve.points] == [0.9433, 0.9525, 0.9615, None]
    assert [p.reached for p in curve.points] == [True, True, True, False]


def test_statuses_are_mapped_and_every_trial_is_kept():
    curve = load_one()
    got = {p.batch_size: {tid: (t["status"], t["steps_to_goal"]) for tid, t in trials_by_id(p).items()}
           for p in curve.points}
    assert got == {
        64: {"1": ("COMPLETE", 4000), "2": ("COMPLETE", 3000), "3": ("INFEASIBLE", None)},
        128: {"1": ("COMPLETE", 2000), "2": ("INCOMPLETE", None)},   # published COMPLETE, never reaches
        256: {"1": ("COMPLETE", 1000), "2": ("COMPLETE", 3000)},
        512: {"1": ("INCOMPLETE", None), "2": ("INCOMPLETE", None)},  # 2: published INCOMPLETE
    }


def test_trial_records_have_the_sweep_format():
    curve = load_one()
    for point in curve.points:
        for t in point.trials:
            assert set(t) - {"decay_steps"} == RECORD_KEYS
            assert t["batch_size"] == point.batch_size and isinstance(t["trial_id"], str)
            assert t["seed"] is None
            assert len(t["eval"]["step"]) == len(t["eval"]["metric"])
            assert all(type(s) is int for s in t["eval"]["step"])
            assert t["eval"]["step"] == sorted(t["eval"]["step"])
    infeasible = trials_by_id(curve.points[0])["3"]
    assert infeasible == {
        "batch_size": 64, "trial_id": "3", "status": "INFEASIBLE", "learning_rate": 3.162,
        "momentum": 0.9981, "final_lr_fraction": 1.0, "steps_to_goal": None, "steps_run": 1000,
        # the CSV's last row is nan/inf: None, never NaN
        "eval": {"step": [0, 500, 1000], "metric": [0.9003, 0.8875, None]},
        "seed": None, "metaparameters": {"learning_rate": 3.162, "momentum": 0.9981}}
    # irregular cadence, kept as measured; steps_run from metadata.json "steps"
    t = trials_by_id(curve.points[1])["1"]
    assert t["eval"]["step"] == [0, 500, 1000, 1500, 2000, 3000, 4000, 6000]
    assert t["eval"]["metric"][:2] == [0.9012, 0.1204] and t["steps_run"] == 6000
    assert trials_by_id(curve.points[3])["2"]["steps_run"] == 1000


def test_the_published_linear_decay_maps_onto_our_decay_fields():
    curve = load_one()
    decays = {(p.batch_size, t["trial_id"]): (t["final_lr_fraction"], t.get("decay_steps"))
              for p in curve.points for t in p.trials}
    assert decays[(128, "1")] == (0.0123, 4500) and decays[(128, "2")] == (0.0871, 5200)
    assert {v for (b, _), v in decays.items() if b != 128} == {(1.0, None)}   # constant rates


@pytest.mark.parametrize("name, value, message", [
    ("end_learning_rate_factor", 1.5, "end_learning_rate_factor must be in [0, 1], got 1.5"),
    ("end_learning_rate_factor", "fast", "end_learning_rate_factor must be a finite number"),
    ("end_learning_rate_factor", None, "end_learning_rate_factor must be a finite number"),
    ("learning_rate_decay_steps", 2.5, "learning_rate_decay_steps must be a whole number >= 1"),
    ("learning_rate_decay_steps", 0, "learning_rate_decay_steps must be a whole number >= 1")])
def test_a_bad_decay_parameter_names_the_file_and_the_range(broken, name, value, message):
    root, workload = broken
    path = workload / "128" / "2" / "metadata.json"
    meta = json.loads(path.read_text())
    meta["parameters"][name] = value
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="^'" + str(path) + "': " + message.replace("[", r"\[")
                       .replace("]", r"\]")):
        load_one(root)


def test_a_decay_length_without_a_final_factor_is_refused(broken):
    root, workload = broken
    path = workload / "128" / "1" / "metadata.json"
    meta = json.loads(path.read_text())
    del meta["parameters"]["end_learning_rate_factor"]
    path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="learning_rate_decay_steps needs an end_learning_rate_factor"):
        load_one(root)


def test_a_looser_goal_changes_steps_as_expected():
    curve = load_one(goal=0.03)
    assert curve.config["goal"] == 0.03
    # 64: trial 2 at 2000; 128: trial 1 at 1500; 256: both trials at 1000, the lower id wins;
    # 512: trial 2 (published INCOMPLETE: stopped at 1000, but got there first) at 1000
    assert [p.steps for p in curve.points] == [2000, 1500, 1000, 1000]
    assert [p.learning_rate for p in curve.points] == [0.0507, 0.0893, 0.1428, 0.3162]
    assert [p.momentum for p in curve.points] == [0.9433, 0.9525, 0.9615, 0.9]
    t512 = trials_by_id(curve.points[3])
    assert (t512["1"]["status"], t512["1"]["steps_to_goal"]) == ("COMPLETE", 1500)
    assert (t512["2"]["status"], t512["2"]["steps_to_goal"]) == ("COMPLETE", 1000)
    # a goal nobody reaches
    assert [p.steps for p in load_one(goal=0.001).points] == [None] * 4


def test_metric_picks_the_column():
    curve = load_one(metric="val/cross_entropy_error", goal=0.06)
    assert curve.config["metric"] == "val/cross_entropy_error"
    t = trials_by_id(curve.points[0])["2"]
    # val/cross_entropy_error of bs 64 trial 2: 2.2883, 0.1664, 0.0810, 0.0527, ...
    assert t["eval"]["metric"][:4] == [2.2883, 0.1664, 0.081, 0.0527]
    assert t["steps_to_goal"] == 3000 and curve.points[0].steps == 3000
    # 512: trial 1 ends at 0.0614 (step 3000), trial 2 at 0.0802 (step 1000): never <= 0.06
    assert curve.points[3].steps is None


def test_root_may_be_a_dataset_a_workload_or_one_study():
    full = load_one()
    for root in (FIXTURE / "mnist", FIXTURE / "mnist" / "simple_cnn_base", WORKLOAD):
        curve = load_one(root)
        assert curve.points == full.points
        assert curve.config["root"] == str(root) and curve.config["workload_dir"] == str(WORKLOAD)
    single = load_one(WORKLOAD / "128")
    assert [(p.batch_size, p.steps) for p in single.points] == [(128, 2000)]


def test_one_curve_per_workload(broken):
    root, workload = broken
    shutil.copytree(workload, workload.parent / "sgd")
    for study in (workload.parent / "sgd").glob("*/study.json"):
        data = json.loads(study.read_text())
        study.write_text(json.dumps({**data, "optimizer": "sgd"}))
    curves = load_batch_science(root, goal=0.02)
    assert [c.config["optimizer"] for c in curves] == ["nesterov_momentum", "sgd"]
    assert curves[0].points == curves[1].points


def test_non_finite_measurements_make_a_trial_infeasible(broken):
    # A published COMPLETE trial whose train loss went to inf diverged: ours is INFEASIBLE.
    _, workload = broken
    path = workload / "128" / "1" / "measurements.csv"
    lines = path.read_text().splitlines()
    cells = lines[-1].split(",")
    cells[1] = "inf"
    lines[-1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    curve = load_batch_science(broken[0], goal=0.02)[0]
    t = trials_by_id(curve.points[1])["1"]
    assert (t["status"], t["steps_to_goal"]) == ("INFEASIBLE", None)
    assert curve.points[1].steps is None  # trial 2 never gets there


# ----------------------------------------------------------------------------------------------
# The same analysis and JSON as our own curves


def test_analyse_curve_runs_on_the_loaded_curve():
    analysis = analyse_curve(load_one())
    # work at B0 = 64: 192000 examples; 128 needs 2000 > 1.2 * 192000 / 128 = 1800 steps
    assert analysis.cbs20 == 64
    assert analysis.maximal_from == 256  # fewest steps 1000, first reached at 256
    assert analysis.regimes == ("perfect", "diminishing", "maximal", "not reached")
    np.testing.assert_allclose(analysis.efficiency[:3], [1.0, 0.75, 0.75])
    assert analysis.fit.s_min is not None and analysis.fit.points_used == 3


def test_curve_survives_json():
    curve = load_one()
    text = to_json(curve.to_dict())
    assert "NaN" not in text and "Infinity" not in text
    back = ScalingCurve.from_dict(json.loads(text))
    assert back == curve and back.source == "batch_science" and back.config == curve.config
    for p, q in zip(curve.points, back.points):
        assert list(q.trials) == list(p.trials)


# ----------------------------------------------------------------------------------------------
# Bad input: ValueError naming the parameter or the path


def test_goal_is_required_and_must_be_a_finite_number():
    with pytest.raises(ValueError, match="goal is required"):
        load_batch_science(FIXTURE)
    for bad in (float("nan"), float("inf"), "0.02", True):
        with pytest.raises(ValueError, match="goal must be a finite number"):
            load_batch_science(FIXTURE, goal=bad)


def test_unknown_metric_lists_the_columns():
    with pytest.raises(ValueError, match=r"metric 'val/accuracy'.*available: \['train/classification_error'"):
        load_batch_science(FIXTURE, goal=0.02, metric="val/accuracy")
    with pytest.raises(ValueError, match="metric must be"):
        load_batch_science(FIXTURE, goal=0.02, metric=3)


def test_root_missing_or_not_a_directory(tmp_path):
    with pytest.raises(ValueError, match=r"root .*nowhere.* does not exist"):
        load_batch_science(tmp_path / "nowhere", goal=0.02)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(ValueError, match="root .* is not a directory"):
        load_batch_science(tmp_path / "file.txt", goal=0.02)
    with pytest.raises(ValueError, match="root must be a path"):
        load_batch_science(None, goal=0.02)


def test_no_studies_found(tmp_path):
    (tmp_path / "mnist" / "simple_cnn_base").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"no studies found under root .*study\.json"):
        load_batch_science(tmp_path, goal=0.02)


@pytest.mark.parametrize("name", ["64/study.json", "128/2/metadata.json"])
def test_corrupt_json_names_the_file(broken, name):
    root, workload = broken
    (workload / name).write_text('{"batch_size": 128, ')
    with pytest.raises(ValueError, match=rf"{name}' is not valid JSON"):
        load_batch_science(root, goal=0.02)


def test_json_that_is_not_an_object(broken):
    root, workload = broken
    (workload / "64" / "study.json").write_text("[64]")
    with pytest.raises(ValueError, match=r"64/study\.json' must hold a JSON object"):
        load_batch_science(root, goal=0.02)


def test_csv_missing_its_step_column(broken):
    root, workload = broken
    path = workload / "256" / "2" / "measurements.csv"
    path.write_text(path.read_text().replace("step,", "iteration,", 1))
    with pytest.raises(ValueError, match=r"256/2/measurements\.csv' has no 'step' column"):
        load_batch_science(root, goal=0.02)


def test_empty_csv_has_no_step_column(broken):
    root, workload = broken
    (workload / "64" / "1" / "measurements.csv").write_text("")
    with pytest.raises(ValueError, match=r"64/1/measurements\.csv' has no 'step' column"):
        load_batch_science(root, goal=0.02)


def test_csv_with_a_bad_step_or_metric_value(broken):
    root, workload = broken
    path = workload / "64" / "1" / "measurements.csv"
    original = path.read_text()
    path.write_text(original.replace("\n1000,", "\n1000.5,", 1))
    with pytest.raises(ValueError, match=r"measurements\.csv' line 3: step must be a whole number"):
        load_batch_science(root, goal=0.02)
    path.write_text(original.replace(",0.0812\n", ",n/a\n", 1))
    with pytest.raises(ValueError, match=r"line 3: val/classification_error must be a number"):
        load_batch_science(root, goal=0.02)


@pytest.mark.parametrize("name", ["abc", "0", "-8"])
def test_batch_size_directory_must_be_a_positive_integer(broken, name):
    root, workload = broken
    (workload / "256").rename(workload / name)
    with pytest.raises(ValueError, match=rf"batch-size directory .*/{name}' must be named by a positive integer"):
        load_batch_science(root, goal=0.02)


def test_batch_size_directory_and_study_json_must_agree(broken):
    root, workload = broken
    shutil.copytree(workload / "512", workload / "1024")
    with pytest.raises(ValueError, match=r"1024/study\.json': batch_size 512 disagrees"):
        load_batch_science(root, goal=0.02)
    shutil.rmtree(workload / "1024")
    (workload / "512").rename(workload / "0512")
    shutil.copytree(workload / "0512", workload / "512")
    with pytest.raises(ValueError, match="both hold batch size 512"):
        load_batch_science(root, goal=0.02)


def test_unknown_status(broken):
    root, workload = broken
    path = workload / "128" / "2" / "metadata.json"
    path.write_text(path.read_text().replace('"COMPLETE"', '"STOPPING"'))
    with pytest.raises(ValueError, match=r"128/2/metadata\.json': status must be one of \['COMPLETE'"):
        load_batch_science(root, goal=0.02)


def test_missing_trial_files(broken):
    root, workload = broken
    (workload / "128" / "2" / "measurements.csv").unlink()
    with pytest.raises(ValueError, match=r"128/2/measurements\.csv' is missing"):
        load_batch_science(root, goal=0.02)
    # a diverged trial may have left no measurements: fine
    shutil.copy(FIXTURE / "mnist/simple_cnn_base/nesterov_momentum/128/2/measurements.csv",
                workload / "128" / "2" / "measurements.csv")
    (workload / "64" / "3" / "measurements.csv").unlink()
    t = trials_by_id(load_batch_science(root, goal=0.02)[0].points[0])["3"]
    assert (t["status"], t["eval"]) == ("INFEASIBLE", {"step": [], "metric": []})
    (workload / "64" / "1" / "metadata.json").unlink()
    with pytest.raises(ValueError, match=r"64/1/metadata\.json' is missing"):
        load_batch_science(root, goal=0.02)


def test_study_without_trials(broken):
    root, workload = broken
    for trial in (workload / "256").iterdir():
        if trial.is_dir():
            shutil.rmtree(trial)
    with pytest.raises(ValueError, match=r"study directory .*/256' has no trial directories"):
        load_batch_science(root, goal=0.02)


def test_a_trial_without_the_metric_column(broken):
    root, workload = broken
    path = workload / "128" / "1" / "measurements.csv"
    rows = [line.rsplit(",", 1)[0] for line in path.read_text().splitlines()]
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"128/1/measurements\.csv' has no 'val/classification_error' column"):
        load_batch_science(root, goal=0.02)

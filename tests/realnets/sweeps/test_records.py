"""The sweep directory's records: every committed file reads back to itself, old files get the
defaults of newer fields, and a bad field is one line naming the file, record and field."""

import json
from pathlib import Path

import pytest

from realnets.sweeps.curve import build_curve, curve_document
from realnets.sweeps.records import (CurveDocument, EvalCurve, NoiseSeries, SweepConfig,
                                     TrialRecord, load_sweep, read_repeats)
from realnets.validation.files import ValidationDocument, read_validation
from realnets.validation.settings import ValidationConfig
from realnets.workloads.search_space import TrialSearchSpace

ROOT = Path(__file__).resolve().parents[3]
SWEEPS = sorted(p.parent for p in (ROOT / "sweeps").rglob("config.json"))   # arms nest one deeper
VALIDATIONS = sorted(p.parent for p in (ROOT / "reports" / "validation").glob("*/validation.json"))


def test_there_are_committed_files_to_check():
    assert len(SWEEPS) >= 5 and len(VALIDATIONS) >= 4


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.name)
def test_committed_config_reads_back_to_itself(sweep):
    raw = json.loads((sweep / "config.json").read_text())
    config = SweepConfig.from_dict(raw)
    out = config.to_dict()
    assert {k: out[k] for k in raw} == raw
    # a file written before noise_every existed gets the default (every step), not an error
    assert config.noise_every == raw.get("noise_every")
    assert config.search.learning_rate == tuple(raw["search"]["learning_rate"])


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.name)
def test_committed_trials_read_back_byte_for_byte(sweep):
    lines = [line for line in (sweep / "trials.jsonl").read_text().splitlines() if line]
    config, records = load_sweep(sweep)
    assert len(records) == len(lines) > 0
    for line, record in zip(lines, records):
        # every field, in the trainer's order: the record is the file's format
        assert json.dumps(record.to_dict()) == json.dumps(json.loads(line))
    assert all(isinstance(r.eval, EvalCurve) and isinstance(r.noise_scale, NoiseSeries)
               for r in records)


def _close(a, b, rel=1e-9) -> bool:
    """The same JSON tree, floats equal to `rel` (ints, strings, None and lengths exactly)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=rel)
    return type(a) is type(b) and a == b


def test_close_trees_differ_by_rounding_only():
    assert _close({"a": [1.0, {"b": 2}], "c": None}, {"a": [1.0 + 1e-15, {"b": 2}], "c": None})
    assert not _close({"a": [1.0]}, {"a": [1.001]})
    assert not _close({"a": 1}, {"a": 1.0}) and not _close({"a": [1.0]}, {"a": [1.0, 2.0]})
    assert not _close({"a": 1.0}, {"b": 1.0})


@pytest.mark.parametrize("sweep", SWEEPS, ids=lambda p: p.name)
def test_committed_curve_reads_back_and_is_rebuilt_from_the_trials(sweep):
    raw = json.loads((sweep / "curve.json").read_text())
    doc = CurveDocument.from_dict(raw)
    assert json.loads(json.dumps(doc.to_dict())) == raw
    # a file written before b_crit_resampled and robustness existed gets None for them, and
    # they are left out again when written back (the round trip above)
    assert doc.b_crit_resampled == raw.get("b_crit_resampled")
    assert doc.robustness == raw.get("robustness")
    config, records = load_sweep(sweep)
    rebuilt = curve_document(build_curve(records, config, read_repeats(sweep)))
    assert [p.steps for p in rebuilt.points] == [p["steps"] for p in raw["points"]]
    assert [p.trials for p in rebuilt.points] == [tuple(p["trials"]) for p in raw["points"]]
    # the winners' reruns (repeats.jsonl) and the intervals drawn from them
    assert [p.repeats for p in rebuilt.points] == [tuple(p.get("repeats", ()))
                                                   for p in raw["points"]]
    # equal up to rounding: the fits' last bits move with the CPU's vector instructions
    assert _close(json.loads(json.dumps(rebuilt.b_crit_repeats)), raw.get("b_crit_repeats"))
    if raw.get("b_crit_resampled") is not None:
        assert _close(json.loads(json.dumps(rebuilt.b_crit_resampled)), raw["b_crit_resampled"])
    assert rebuilt.regime == doc.regime
    assert rebuilt.fit["b_crit"] == pytest.approx(raw["fit"]["b_crit"], rel=1e-6)


@pytest.mark.parametrize("path", VALIDATIONS, ids=lambda p: p.name)
def test_committed_validation_document_reads_back_to_itself(path):
    raw = json.loads((path / "validation.json").read_text())
    doc = read_validation(path)
    assert isinstance(doc.settings, ValidationConfig)
    assert doc.to_dict() == raw and list(doc.to_dict()) == list(raw)
    assert doc.provenance.command.startswith("python -m realnets validate")
    assert doc.settings.to_dict() == raw["settings"]


def test_validation_document_without_optional_parts_gets_their_defaults(tmp_path):
    raw = json.loads((VALIDATIONS[0] / "validation.json").read_text())
    for key in ("provenance", "seconds", "reference", "calibration_run"):
        raw.pop(key, None)
    del raw["settings"]["target_rule"]
    doc = ValidationDocument.from_dict(raw)
    assert doc.provenance is None and doc.reference is None and doc.seconds == {}
    assert doc.settings.target_rule == ValidationConfig().target_rule
    del raw["comparison"]
    (tmp_path / "validation.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"validation\.json: comparison is missing"):
        read_validation(tmp_path)


def _config(**kw) -> dict:
    return {"workload": "digits_mlp", "batch_sizes": [8, 16], "trials": 2, "max_steps": 100,
            "goal": 0.1, "optimizer": "momentum",
            "search": {"learning_rate": [1e-3, 3.0], "one_minus_momentum": [0.01, 1.0]}, **kw}


def test_config_missing_optional_fields_gets_the_defaults_from_the_dataclass():
    config = SweepConfig.from_dict(_config())
    defaults = {"seed": 0, "eval_resolution": 0.02, "vmap_trials": 0, "max_rows_per_device": 4096,
                "text_file": None, "full_trials": False, "noise_every": None}
    assert {k: getattr(config, k) for k in defaults} == defaults
    assert config.search == TrialSearchSpace((1e-3, 3.0), (0.01, 1.0), None)
    assert config.batch_sizes == (8, 16)
    # whole floats (as JSON may hold them) are read as the counts they are
    assert SweepConfig.from_dict(_config(trials=2.0)).trials == 2
    assert hash(config) == hash(SweepConfig.from_dict(_config()))    # usable as a cache key


@pytest.mark.parametrize("change, message", [
    ({"trials": None}, "trials must be a whole number in [1, 10000], got None"),
    ({"max_steps": 2.5}, "max-steps must be a whole number in [1, 1000000000], got 2.5"),
    ({"optimizer": "lbfgs"}, "optimizer must be one of sgd, momentum, nesterov, adam, got 'lbfgs'"),
    ({"search": {"learning_rate": [1.0, 0.1]}}, "lr-range must be LO,HI with 0 < LO <= HI"),
    ({"seed": -1}, "seed must be a whole number in [0, 9223372036854775807], got -1"),
    ({"noise_every": -1}, "noise-every must be a whole number in [0, 1000000], got -1"),
    ({"eval_resolution": 2.0}, "eval-resolution must be in [0, 1], got 2"),
    ({"batch_sizes": [8, 8]}, "batch-sizes must not repeat"),
    ({"workload": 3}, "workload must be a name, got 3"),
    ({"search": {"decay_steps": [0.5, 50]}}, "decay-steps-range must be LO,HI with 1 <= LO <= HI"),
    ({"search": {"final_lr_fraction": [0.1, 1.0], "decay_steps": [10, 101]}},
     "decay-steps-range must end at or below max-steps (100), got 10,101"),
    ({"search": {"decay_steps": [10, 50]}}, "decay-steps-range needs a final-lr-fraction-range"),
])
def test_bad_config_field_is_one_line_naming_file_and_field(tmp_path, change, message):
    (tmp_path / "config.json").write_text(json.dumps(_config(**change)))
    with pytest.raises(ValueError) as err:
        load_sweep(tmp_path)
    text = str(err.value)
    assert text.startswith(f"{tmp_path / 'config.json'}: ") and message in text
    assert "\n" not in text


def test_config_without_a_required_field_names_it(tmp_path):
    raw = _config()
    del raw["optimizer"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"config\.json: optimizer is missing"):
        load_sweep(tmp_path)


RECORD = {"batch_size": 8, "trial_id": 0, "status": "COMPLETE", "learning_rate": 0.1,
          "steps_to_goal": 40}


def test_old_trial_record_gets_the_defaults_of_newer_fields():
    r = TrialRecord.from_dict(RECORD)
    out = r.to_dict()
    assert {k: out[k] for k in RECORD} == RECORD
    assert (r.momentum, r.final_lr_fraction, r.steps_run, r.seed) == (None, 1.0, 0, None)
    # records written before noise_every existed measured the noise scale every step
    assert r.noise_every == 1
    assert r.eval == EvalCurve() and r.noise_scale == NoiseSeries()
    partial = TrialRecord.from_dict({**RECORD, "noise_scale": {"b_simple": [50.0, None]}})
    assert partial.noise_scale.b_simple == (50.0, None) and partial.noise_scale.step == ()


@pytest.mark.parametrize("change, message", [
    ({"batch_size": 0}, "batch_size must be a whole number >= 1, got 0"),
    ({"trial_id": None}, "trial_id is missing"),
    ({"status": "DONE"}, "status must be one of COMPLETE, INCOMPLETE, INFEASIBLE, got 'DONE'"),
    ({"learning_rate": -0.1}, "learning_rate must be > 0, got -0.1"),
    ({"steps_to_goal": 2.5}, "steps_to_goal must be a whole number >= 1, got 2.5"),
    ({"momentum": 1.0}, "momentum must be in [0, 1), got 1"),
    ({"steps_run": -1}, "steps_run must be a whole number >= 0, got -1"),
    ({"decay_steps": 0}, "decay_steps must be a whole number >= 1, got 0"),
    ({"eval": [1, 2]}, "eval must be a JSON object of lists"),
    ({"noise_scale": {"b_simple": 3.0}}, "b_simple must be a list, got 3.0"),
])
def test_bad_trial_field_is_one_line_naming_file_record_and_field(tmp_path, change, message):
    (tmp_path / "config.json").write_text(json.dumps(_config()))
    lines = [RECORD, {**RECORD, "trial_id": 1, **change}]
    (tmp_path / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(ValueError) as err:
        load_sweep(tmp_path)
    text = str(err.value)
    assert text.startswith(f"{tmp_path / 'trials.jsonl'} record 2: ") and message in text
    assert "\n" not in text


def test_config_with_a_decay_length_range_round_trips_and_one_without_writes_none():
    with_range = SweepConfig.from_dict(_config(search={"learning_rate": [1e-3, 3.0],
                                                       "one_minus_momentum": [0.01, 1.0],
                                                       "final_lr_fraction": [0.1, 1.0],
                                                       "decay_steps": [10, 100]}))
    assert with_range.search.decay_steps == (10.0, 100.0)
    assert with_range.to_dict()["search"]["decay_steps"] == [10.0, 100.0]
    assert SweepConfig.from_dict(with_range.to_dict()) == with_range
    without = SweepConfig.from_dict(_config())
    assert without.search.decay_steps is None and "decay_steps" not in without.to_dict()["search"]


def test_trial_record_with_and_without_decay_steps_round_trips():
    plain = TrialRecord.from_dict(RECORD)
    assert plain.decay_steps is None and "decay_steps" not in plain.to_dict()
    again = TrialRecord.from_dict(plain.to_dict()).to_dict()
    assert json.dumps(plain.to_dict()) == json.dumps(again)
    decayed = TrialRecord.from_dict({**RECORD, "final_lr_fraction": 0.1, "decay_steps": 37.0})
    out = decayed.to_dict()
    assert decayed.decay_steps == 37 and isinstance(decayed.decay_steps, int)
    # written right after final_lr_fraction, the trainer's order
    keys = list(out)
    assert keys[keys.index("final_lr_fraction") + 1] == "decay_steps" and out["decay_steps"] == 37
    assert TrialRecord.from_dict(json.loads(json.dumps(out))) == decayed


def test_a_sweep_for_a_workload_takes_its_defaults_unless_given():
    import math

    from realnets import workloads
    from realnets.sweeps.records import PILOT_GOAL
    w = workloads.get("mnist_cnn")
    plain = SweepConfig.for_workload("mnist_cnn", 4)
    assert (plain.batch_sizes, plain.max_steps, plain.goal, plain.optimizer, plain.search,
            plain.eval_resolution, plain.metric) == (
        tuple(w.batch_sizes), w.max_steps, w.goal, w.optimizer, w.search, w.eval_resolution,
        w.recorded_metric)
    given = SweepConfig.for_workload(
        "mnist_cnn", 4, batch_sizes=(16, 64), max_steps=30, goal=PILOT_GOAL, optimizer="adam",
        learning_rate=(1e-3, 1e-2), final_lr_fraction=(0.1, 1.0), decay_steps=(2, 30),
        eval_resolution=0.1, seed=3, full_trials=True)
    assert (given.batch_sizes, given.max_steps, given.optimizer, given.seed, given.full_trials,
            given.eval_resolution) == ((16, 64), 30, "adam", 3, True, 0.1)
    assert math.isnan(given.goal)                      # 'auto': the pilot sets it later
    assert given.search == TrialSearchSpace((1e-3, 1e-2), w.search.one_minus_momentum,
                                            (0.1, 1.0), (2, 30))
    with pytest.raises(ValueError, match="decay-steps-range must end at or below max-steps"):
        SweepConfig.for_workload("mnist_cnn", 4, max_steps=10, final_lr_fraction=(0.1, 1.0),
                                 decay_steps=(2, 30))

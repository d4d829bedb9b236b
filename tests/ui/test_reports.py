"""ui.reports: the validation report shown beside a sweep is one made from the same study; its
reconciliation as a table of numbers."""

import json
import shutil
from pathlib import Path


from ui import reports

REPO = Path(__file__).resolve().parents[2]


def test_no_validation_report_for_a_sweep_it_was_not_made_from(tmp_path):
    config = json.loads((REPO / "sweeps" / "mnist_mlp" / "config.json").read_text())
    shipped = REPO / "reports" / "validation"
    assert reports.validation_for(config, shipped) is not None
    assert reports.validation_for(dict(config, goal=0.05), shipped) is None      # another study
    assert reports.validation_for(dict(config, workload="digits_mlp"), shipped) is None
    # a corrupt report is ignored rather than shown
    shutil.copytree(REPO / "reports" / "validation" / "mnist_mlp", tmp_path / "mnist_mlp")
    (tmp_path / "mnist_mlp" / "validation.json").write_text("{broken")
    assert reports.validation_for(config, root=tmp_path) is None
    # found by what it was made from, whatever its directory is called
    shutil.copytree(REPO / "reports" / "validation" / "mnist_mlp", tmp_path / "renamed")
    assert reports.validation_for(config, root=tmp_path) == tmp_path / "renamed"
    assert reports.validation_for(config, root=tmp_path / "absent") is None


def test_the_own_workloads_report_is_found_beside_its_sweep():
    """Its workload is 'examples/own_workload.py:make_workload', its report own_mnist1d_cnn."""
    config = json.loads((REPO / "sweeps" / "own_mnist1d_cnn" / "config.json").read_text())
    shipped = REPO / "reports" / "validation"
    assert reports.validation_for(config, shipped) == shipped / "own_mnist1d_cnn"


def test_reconciliation_table_of_a_committed_report():
    from realnets.validation import files

    doc = files.read_validation(REPO / "reports" / "validation" / "nqm").to_dict()
    table = reports.reconciliation_table(doc)
    assert table["estimate"].iloc[0] == "measured B_crit (fit)"
    assert table["value"].iloc[0] == doc["measured"]["fit"]["b_crit"]
    for col in ("step", "value", "se", "lo", "hi", "ratio", "ratio_lo", "ratio_hi"):
        assert table[col].dtype == float, col
    # B_noise at the goal with its standard error, the ratio over the measured B_crit
    noise = table[table["estimate"].str.startswith("B_noise")].iloc[0]
    b_noise = doc["checkpoints"]["goal"]["b_noise"]["b_noise"]
    assert (noise["value"], noise["se"]) == (b_noise["value"], b_noise["uncertainty"])
    assert noise["ratio"] == b_noise["value"] / table["value"].iloc[0]
    cbs = table[table["estimate"].str.startswith("local CBS")]
    assert list(cbs["value"]) == [float(r["cbs"]) for r in doc["local_cbs"]]    # along training
    # as the app shows it: the report's cells
    shown = reports.reconciliation_display(doc)
    assert list(shown["estimate"]) == list(table["estimate"])
    row = shown[shown["estimate"].str.startswith("B_noise")].iloc[0]
    assert row["B (per example)"] == f"{b_noise['value']:.4g} ± {b_noise['uncertainty']:.2g}"


def test_the_two_point_line_shows_a_record_made_from_the_sweep_and_names_a_stale_one(tmp_path):
    """SWEEP_DIR/two_point.json (python -m realnets two-point): its value, interval and the
    condition's verdict when it was made from the sweep as it is; a record of another goal or
    of other steps at its B_ref, or one that does not read, is named instead of shown."""
    record = {"b_ref": 16, "s_ref": 330, "goal": 0.34, "value": 389.7, "lo": 315.4,
              "hi": 449.1, "condition": {"min_full_batch_steps": 5, "holds": True,
                                         "why": "S_fb^N = 14"}}
    (tmp_path / "two_point.json").write_text(json.dumps(record))
    line = reports.two_point_summary(tmp_path, {16: 330.0, 32: 164.0}, 0.34)
    assert "**389.7**" in line and "315.4 .. 449.1" in line and "holds (S_fb^N = 14;" in line
    assert "stale" not in line and "made before" not in line
    assert "B_2pt'(med), the estimate of record, is not in this record" in line
    assert "made before" in reports.two_point_summary(tmp_path, {16: 331.0}, 0.34)
    assert "made before" in reports.two_point_summary(tmp_path, {16: 330.0}, 0.3)
    weak = {**record, "condition": {"min_full_batch_steps": 5, "holds": False,
                                    "why": "S_fb^N = 1: one step moves the estimate by a "
                                           "fifth or more"}}
    (tmp_path / "two_point.json").write_text(json.dumps(weak))
    assert "does not hold" in reports.two_point_summary(tmp_path, {16: 330.0}, 0.34)
    (tmp_path / "two_point.json").write_text("{not json")
    assert "does not read" in reports.two_point_summary(tmp_path, {16: 330.0}, 0.34)
    assert reports.two_point_summary(tmp_path / "none", {16: 330.0}, 0.34) is None
    # with --full-batch-inits: B_2pt'(med) beside, its interval and how many initialisations
    med = {**record, "b_2pt_med": {"value": 301.2, "lo": 250.0, "hi": None},
           "full_batch_inits": {"seeds": list(range(1, 17)),
                                "percentiles": {"16": 14, "50": 16.5, "84": 19}}}
    (tmp_path / "two_point.json").write_text(json.dumps(med))
    line = reports.two_point_summary(tmp_path, {16: 330.0}, 0.34)
    assert "over 16 initialisations" in line and "B_2pt' = 389.7 (315.4 .. 449.1)" in line
    assert "B_2pt'(med) = **301.2** examples per step (16-84%: 250 .. ?), the estimate of " \
        "record" in line and "**389.7**" not in line       # B_2pt' beside, not in bold
    (tmp_path / "two_point.json").write_text(json.dumps({**med, "full_batch_inits": None}))
    assert "does not read" in reports.two_point_summary(tmp_path, {16: 330.0}, 0.34)
    # the median end not computed (no full-batch descent at the target): B_2pt' and why
    none = {**record, "b_2pt_med": {"value": None, "lo": None, "hi": None,
                                    "why": "not computed: no full-batch descent"}}
    (tmp_path / "two_point.json").write_text(json.dumps(none))
    line = reports.two_point_summary(tmp_path, {16: 330.0}, 0.34)
    assert "**389.7**" in line and "has no value here (not computed: no full-batch" in line


def _held_out_factor(entries, ratio_of, without):
    """The 68% conformal factor written out: the k-th smallest |ln ratio| (no number: +inf) over
    the real entries of other workloads, k = ceil((n + 1) 0.68)."""
    import math
    scores = sorted(math.inf if ratio_of(e) is None else abs(math.log(ratio_of(e)))
                    for e in entries if e["workload"] not in ("nqm", without))
    k = math.ceil((len(scores) + 1) * 0.68)
    return math.exp(scores[k - 1]), len(scores)


def test_the_track_record_puts_its_error_bar_on_a_rule_4_prediction(tmp_path):
    """A shipped report's rule-4 prediction gets the record's 68% factor computed without its
    own network's entries; a workload the summary does not hold gets the factor of all."""
    from realnets.validation import files
    from realnets.validation.summary import read_summary

    summary = REPO / "reports" / "validation" / "summary.json"
    entries = read_summary(summary)

    def rule_4(e):
        return (e.get("rule_4") or {}).get("ratio")

    where = REPO / "reports" / "validation" / "mnist_mlp"
    doc = files.read_validation(where).to_dict()
    value = next(e for e in entries if e["workload"] == "mnist_mlp"
                 and e["optimizer"] == doc["sweep_config"]["optimizer"])["rule_4"]["b_crit"]
    factor, n = _held_out_factor(entries, rule_4, "mnist_mlp")
    note = reports.rule_4_track_note(doc, files.side_records(where, doc), summary)
    assert f"the {n} other validated entries" in note
    assert f"{value / factor:.3g} .. {value * factor:.3g} (x{factor:.3g}, 68%)" in note
    factor, n = _held_out_factor(entries, rule_4, None)
    note = reports.track_record_note(summary, "rule 4", 100.0, "a workload of its own")
    assert f"the {n} validated entries" in note and f"(x{factor:.3g}, 68%)" in note
    assert "own 16-84% interval counts one source" in note     # no interval given
    # the bar is called wider than the shipped interval only when it holds it
    narrow = reports.track_record_note(summary, "rule 4", 100.0, None, 99.0, 101.0)
    assert "wider than its 16-84% interval (99 .. 101)" in narrow
    broad = reports.track_record_note(summary, "rule 4", 100.0, None, 100.0 / (2 * factor), 101.0)
    assert "wider" not in broad and "beside its 16-84% interval" in broad
    assert reports.track_record_note(tmp_path / "none.json", "rule 4", 100.0) is None
    assert reports.track_record_note(summary, "rule 4", None) is None
    one = tmp_path / "summary.json"
    one.write_text(json.dumps([e for e in entries if e["workload"] == "mnist_mlp"][:1]))
    assert "too few" in reports.track_record_note(one, "rule 4", 100.0)
    one.write_text("[1]")
    assert "does not read" in reports.track_record_note(one, "rule 4", 100.0)
    one.write_text(json.dumps([{"workload": "a", "measured": {"b_crit": 1.0}, "rule_4": 3}]))
    assert "rule 4 field is missing or not an object" in reports.track_record_note(one, "rule 4",
                                                                                100.0)


def test_the_two_point_line_carries_its_track_record(tmp_path):
    record = {"b_ref": 16, "s_ref": 330, "goal": 0.34, "value": 389.7, "lo": 315.4,
              "hi": 449.1, "condition": {"min_full_batch_steps": 5, "holds": True,
                                         "why": "S_fb^N = 14"}}
    (tmp_path / "two_point.json").write_text(json.dumps(record))
    summary = REPO / "reports" / "validation" / "summary.json"
    line = reports.two_point_summary(tmp_path, {16: 330.0}, 0.34, summary, "mnist_mlp")
    others = sum(e["workload"] not in ("nqm", "mnist_mlp") for e in json.loads(summary.read_text()))
    assert "**389.7**" in line and f"track record of B_2pt' (the {others} other validated" in line
    assert "track record" not in reports.two_point_summary(tmp_path, {16: 330.0}, 0.34)
    # where the record's own condition does not hold, the bar (earned where it held) is withheld
    weak = {**record, "condition": {"min_full_batch_steps": 5, "holds": False, "why": "S_fb^N = 2"}}
    (tmp_path / "two_point.json").write_text(json.dumps(weak))
    line = reports.two_point_summary(tmp_path, {16: 330.0}, 0.34, summary, "mnist_mlp")
    assert "do not lean" in line and "Error bar from the track record" not in line
    assert "No error bar from the track record: its entries are mostly ones where S_fb^N >= " \
        "5, and here that condition does not hold." in line
    # without a summary file there is no track record to withhold: nothing said of it
    line = reports.two_point_summary(tmp_path, {16: 330.0}, 0.34, tmp_path / "none.json",
                                     "mnist_mlp")
    assert "do not lean" in line and "error bar" not in line.lower()
    # a record holding an empty B_2pt'(med) says it is not in the record
    (tmp_path / "two_point.json").write_text(json.dumps({**record, "b_2pt_med": {}}))
    line = reports.two_point_summary(tmp_path, {16: 330.0}, 0.34, summary, "mnist_mlp")
    assert "B_2pt'(med), the estimate of record, is not in this record" in line

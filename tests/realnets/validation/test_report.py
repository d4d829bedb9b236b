"""realnets.validation.report: the report's title names the optimizer when a sweep replaced a
shipped workload's own."""

from realnets.validation.report import title
from realnets.workloads.catalog import WORKLOADS


def _doc(workload, optimizer):
    return {"workload": workload, "sweep_config": {"optimizer": optimizer}}


def test_title_names_a_replaced_optimizer_only():
    assert WORKLOADS["digits_mlp"].optimizer == "momentum"
    assert title(_doc("digits_mlp", "momentum")) == "digits_mlp"
    assert title(_doc("digits_mlp", "adam")) == "digits_mlp, trained with adam"
    assert title(_doc("text_transformer", "adam")) == "text_transformer"
    # an own workload has no shipped optimizer to replace
    assert title(_doc("examples/own_workload.py:make_workload", "adam")) == \
        "examples/own_workload.py:make_workload"


def test_the_report_shows_the_records_made_from_its_document_and_no_other(tmp_path):
    """report.md of a committed document with its two_ends.json and miss_split.json beside it:
    the reconciliation gains B_2pt' (the record's median and 16-84%) and the report the miss
    split's section with each factor; a record of another workload is left out."""
    import json
    import shutil
    from pathlib import Path

    from realnets.validation.files import MISS_SPLIT_FILE, TWO_ENDS_FILE, read_validation
    from realnets.validation.report import write_report

    reports = Path(__file__).resolve().parents[3] / "reports" / "validation" / "digits_cnn"
    for name in ("validation.json", TWO_ENDS_FILE, MISS_SPLIT_FILE):
        shutil.copy(reports / name, tmp_path / name)
    doc = read_validation(tmp_path).to_dict()
    text = write_report(tmp_path, doc).read_text()
    ends = json.loads((reports / TWO_ENDS_FILE).read_text())
    split = json.loads((reports / MISS_SPLIT_FILE).read_text())
    row = next(line for line in text.splitlines()
               if line.startswith("| two-point estimate, both ends measured"))
    two = ends["two_point"]
    assert f"| {two['50']:.4g} | {two['16']:.4g} .. {two['84']:.4g} |" in row
    assert "## Where the headline's miss sits" in text
    for k, v in split["factors"].items():
        assert f"| {k} | {v:.3g} |" in text
    assert f"**{split['largest']}**" in text
    # rule 4's row: the two ends with the NQM's bend, recomputed here from the raw records
    # (S_4(B) = S_fb^N + (S~ - S_fb^N) max(0, S_q(B) - n_q) / (S_q(B_ref) - n_q), fitted)
    import numpy as np

    from nqm.scaling import fit_mccandlish
    tuned = {p["batch_size"]: p["steps"] for p in
             doc["checkpoints"]["goal"]["predictions"]["step_matched"]["tuned"]["points"]
             if p["steps"] is not None}
    sizes = [p["batch_size"] for p in doc["measured"]["points"]
             if p["steps"] is not None and p["batch_size"] in tuned]
    s_fb, s_med, n_q = ends["full_set"]["steps"], ends["reruns"]["percentiles"]["50"], split["n_q"]
    b_ref = ends["b_ref"]
    steps = [s_fb + (s_med - s_fb) * max(0, tuned[b] - n_q) / (tuned[b_ref] - n_q)
             for b in sizes]
    mine = fit_mccandlish(np.array(sizes, float), np.array(steps)).b_crit
    row = next(line for line in text.splitlines() if line.startswith("| NQM prediction, rule 4"))
    assert f"| {mine:.4g} |" in row
    # the records of another workload (an earlier validation in this directory): left out
    for name in (TWO_ENDS_FILE, MISS_SPLIT_FILE):
        record = json.loads((tmp_path / name).read_text())
        (tmp_path / name).write_text(json.dumps({**record, "workload": "other"}))
    text = write_report(tmp_path, doc).read_text()
    assert "both ends measured" not in text and "miss sits" not in text


def test_every_shipped_report_is_what_its_stored_records_render(tmp_path):
    """report.md in each shipped validation directory equals `report.rerender` of a copy of the
    directory (validation.json, its side records and charts): the committed reports are in step
    with their records and with the renderer, e.g. B_2pt'(med)'s row wherever two_ends.json has
    its `full_batch_inits`."""
    import shutil
    from pathlib import Path

    from realnets.validation.report import rerender

    root = Path(__file__).resolve().parents[3] / "reports" / "validation"
    dirs = sorted(p.parent for p in root.glob("*/validation.json"))
    assert len(dirs) >= 30
    stale = []
    for d in dirs:
        copy = tmp_path / d.name
        shutil.copytree(d, copy)
        (copy / "report.md").unlink()
        if rerender(copy).read_text() != (d / "report.md").read_text():
            stale.append(d.name)
    assert not stale, f"report.md out of step with its records: {stale}"
    assert "two-point estimate of record, B_2pt'(med)" in (root / "friedman_regression" /
                                                           "report.md").read_text()


def test_the_rerender_command_checks_every_directory_first(tmp_path, capsys):
    from realnets.cli import main

    (tmp_path / "empty").mkdir()
    assert main(["rerender", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no validation.json" in err
    assert main(["rerender", str(tmp_path / "nowhere")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    import shutil
    from pathlib import Path

    good = tmp_path / "good"
    shutil.copytree(Path(__file__).resolve().parents[3] / "reports" / "validation" /
                    "diabetes_mlp", good)
    (good / "report.md").unlink()
    assert main(["rerender", str(good), str(tmp_path / "empty")]) == 2
    assert not (good / "report.md").exists()            # nothing written before the check
    capsys.readouterr()
    assert main(["rerender", str(good)]) == 0
    assert capsys.readouterr().out.strip() == f"written: {good / 'report.md'}"


def test_rerender_carries_over_the_notes_of_the_report_it_replaces(tmp_path):
    """A report made with `validate --notes` keeps its notes section, word for word, when
    `rerender` writes it again (the notes are in no record)."""
    import shutil
    from pathlib import Path

    from realnets.validation.files import read_validation
    from realnets.validation.report import rerender, write_report

    d = tmp_path / "r"
    shutil.copytree(Path(__file__).resolve().parents[3] / "reports" / "validation" /
                    "diabetes_mlp", d)
    notes = "The regression's NQM needs a few steps only.\n\nA second paragraph."
    write_report(d, read_validation(d).to_dict(), notes=notes)
    first = (d / "report.md").read_text()
    assert notes in first
    assert rerender(d).read_text().count(notes) == 1

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
    # the records of another workload (an earlier validation in this directory): left out
    for name in (TWO_ENDS_FILE, MISS_SPLIT_FILE):
        record = json.loads((tmp_path / name).read_text())
        (tmp_path / name).write_text(json.dumps({**record, "workload": "other"}))
    text = write_report(tmp_path, doc).read_text()
    assert "both ends measured" not in text and "miss sits" not in text

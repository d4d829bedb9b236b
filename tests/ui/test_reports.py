"""ui.reports: the validation report shown beside a sweep is one made from the same study."""

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

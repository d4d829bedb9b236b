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

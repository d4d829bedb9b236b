"""ui.run_form: the app's sweep form as a SweepConfig, its out directory and its progress."""

from pathlib import Path

import pytest

from ui import measured, run_form
from ui.places import Places

PLACES = Places.under(Path(__file__).resolve().parents[2])
MNIST_MLP = PLACES.sweeps / "mnist_mlp"


@pytest.fixture(scope="module")
def mnist_mlp():
    return measured.load_sweep_dir(MNIST_MLP)


def test_sweep_form_values(tmp_path):
    config = run_form.sweep_config("digits_mlp", "8:32", 2, 0)
    assert config.batch_sizes == (8, 16, 32) and config.trials == 2 and config.max_steps == 2000
    assert run_form.sweep_config("digits_mlp", "8, 64", 2, 30).max_steps == 30
    with pytest.raises(ValueError, match="at least one batch size"):
        run_form.sweep_config("digits_mlp", "  ", 2, 30)
    with pytest.raises(ValueError, match="workload must be one of"):
        run_form.sweep_config("no_such_workload", "8", 2, 30)
    assert run_form.out_dir_for("", "digits_mlp", PLACES) == PLACES.results / "digits_mlp"
    assert run_form.out_dir_for("results/x", "digits_mlp", PLACES) == PLACES.root / "results" / "x"
    assert run_form.out_dir_for(str(tmp_path), "digits_mlp", PLACES) == tmp_path


def test_finished_trials_counts_only_this_configs_trials(tmp_path, mnist_mlp):
    config = run_form.sweep_config("mnist_mlp", "16,32,8192", 10, 0)
    # 16 and 32 hold trials 0..31; only ids 0..9 belong to this config; 8192 has none
    assert run_form.finished_trials(mnist_mlp, config) == (20, 30)

"""ui.run_form: the app's sweep form as a SweepConfig, its out directory and its progress."""

import math
import re
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
    # the linear decay's ranges, as the CLI's flags take them; blank keeps the constant rate
    assert config.search.final_lr_fraction is None and config.search.decay_steps is None
    decay = run_form.sweep_config("digits_mlp", "8", 2, 0, final_lr_fraction="0.01, 1",
                                  decay_steps="2,200").search
    assert decay.final_lr_fraction == (0.01, 1.0) and decay.decay_steps == (2.0, 200.0)
    assert decay.learning_rate == config.search.learning_rate
    for kw, says in ((dict(decay_steps="2,200"), "needs a final-lr-fraction-range"),
                     (dict(final_lr_fraction="0,1"), "final-lr-fraction-range"),
                     (dict(final_lr_fraction="a"), "final-lr-fraction-range must be two numbers"),
                     (dict(final_lr_fraction="0.1,1", decay_steps="2,5000"),
                      "decay-steps-range must end at or below max-steps (2000)")):
        with pytest.raises(ValueError, match=re.escape(says)):
            run_form.sweep_config("digits_mlp", "8", 2, 0, **kw)
    assert run_form.out_dir_for("", "digits_mlp", PLACES) == PLACES.results / "digits_mlp"
    assert run_form.out_dir_for("results/x", "digits_mlp", PLACES) == PLACES.root / "results" / "x"
    assert run_form.out_dir_for(str(tmp_path), "digits_mlp", PLACES) == tmp_path


@pytest.mark.parametrize("workload", ["digits_mlp", "mnist_mlp", "text_transformer"])
def test_the_form_and_the_cli_fill_the_same_defaults(workload):
    """Both come through SweepConfig.for_workload: the same fields give the same config, and
    what neither gives is the workload's own."""
    from realnets import workloads
    from realnets.cli import build_parser, sweep_config
    w = workloads.get(workload)
    form = run_form.sweep_config(workload, "8:64", 3, 0, seed=2, final_lr_fraction="0.1,1")
    flags = build_parser().parse_args(["sweep", "--workload", workload, "--batch-sizes", "8:64",
                                       "--trials", "3", "--seed", "2", "--final-lr-fraction-range",
                                       "0.1,1", "--out", "x"])
    assert form == sweep_config(flags)
    assert (form.goal, form.max_steps, form.optimizer, form.eval_resolution) == (
        w.goal, w.max_steps, w.optimizer, w.eval_resolution)
    assert form.search.learning_rate == w.search.learning_rate
    assert form.search.final_lr_fraction == (0.1, 1.0)


def test_finished_trials_counts_only_this_configs_trials(tmp_path, mnist_mlp):
    config = run_form.sweep_config("mnist_mlp", "16,32,8192", 10, 0)
    # 16 and 32 hold trials 0..31; only ids 0..9 belong to this config; 8192 has none
    assert run_form.finished_trials(mnist_mlp, config) == (20, 30)


OWN = "examples/own_workload.py:make_workload"

# A tiny own workload without a goal (logistic regression on two Gaussian clouds): the pilot
# rule runs on it in seconds.
TWO_CLOUDS = Path(__file__).resolve().parents[1] / "fixtures" / "two_clouds.py"


def test_an_own_workload_is_used_instead_of_the_chosen_one(tmp_path, monkeypatch):
    from realnets import workloads

    monkeypatch.chdir(PLACES.root)
    # blank: the chosen shipped workload; filled (spaces trimmed): the own one, as typed
    assert run_form.workload_key("digits_mlp", "  ", PLACES) == "digits_mlp"
    assert run_form.workload_key("digits_mlp", f" {OWN} ", PLACES) == OWN
    # from another directory a relative file is still taken from the repository root
    monkeypatch.chdir(tmp_path)
    key = run_form.workload_key("digits_mlp", OWN, PLACES)
    assert key == f"{PLACES.root / OWN}"
    own = workloads.get(key)
    config = run_form.sweep_config(key, "16,64", 2, 0)
    assert config.workload == key and config.batch_sizes == (16, 64)
    # the workload's own defaults fill the rest (a goal it does not give stays NaN until the
    # pilot rule chooses one)
    assert (config.max_steps, config.optimizer, config.search) == (own.max_steps, own.optimizer,
                                                                   own.search)
    assert config.goal == own.goal or (math.isnan(config.goal) and math.isnan(own.goal))
    # the default out directory is named after the workload, not its FILE.py:FUNCTION
    assert run_form.out_dir_for("", key, PLACES) == PLACES.results / own.name
    assert "/" not in own.name and ":" not in own.name


def test_a_bad_own_workload_is_one_line():
    for own, message in (
            (f"{TWO_CLOUDS}:no_such_function", "has no function 'no_such_function'"),
            (f"{TWO_CLOUDS}:not_a_workload", "must return a Workload .* got int"),
            ("examples/no_such_file.py:make_workload", "file .*no_such_file.py does not exist"),
            ("no_such_module:make_workload", "cannot import module 'no_such_module'"),
            ("examples/own_workload.py", "workload must be one of")):
        with pytest.raises(ValueError, match=message) as err:
            run_form.workload_key("digits_mlp", own, PLACES)
        assert "\n" not in str(err.value)


def test_the_own_workloads_goal_comes_from_the_pilot_rule(tmp_path):
    # what the form does with an own workload without a goal (as `--goal auto` does)
    from realnets import workloads
    from realnets.sweeps.pilot import PILOT_TRIALS, with_pilot_goal

    key = run_form.workload_key("digits_mlp", f"{TWO_CLOUDS}:make_workload", PLACES)
    config = run_form.sweep_config(key, "8,64", 2, 0)
    assert math.isnan(config.goal) and config.max_steps == 60
    built = []
    chosen = with_pilot_goal(config, tmp_path / "out",
                             lambda: built.append(1) or workloads.get(key).build())
    assert built == [1]
    choice = chosen.goal_choice
    assert choice["batch_sizes"] == [8, 64] and choice["trials"] == PILOT_TRIALS
    # the rule: 10% of the way from the worse end's best error back to the starting error
    worse = max(choice["best_small"], choice["best_large"])
    assert chosen.goal == pytest.approx(worse + 0.1 * (choice["metric_start"] - worse))
    assert 0.0 <= worse < chosen.goal < choice["metric_start"] <= 1.0

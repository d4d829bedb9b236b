"""Own workloads: built from the user's parts, found from `--workload FILE.py:FUNCTION` or
`MODULE:FUNCTION`, swept, resumed and reported through the CLI like a shipped one.

The CLI sweeps run on one CPU device (`one_default_device`, tests/conftest.py): what is tested
(the workload found, the records, the resume, the report, the pilot's goal) does not depend on
how a step is sharded."""

import json
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from realnets import workloads
from realnets.cli import main
from realnets.workloads import own
from realnets.workloads.own import own_task, own_workload

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "own_workload.py"


def _linear_parts(rng, n=40, d=3):
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x @ np.arange(1, d + 1, dtype=np.float32)).astype(np.float32)

    def init_params(key):
        return {"w": jnp.zeros((d,), jnp.float32)}

    def loss(params, batch):
        return 0.5 * (batch["x"] @ params["w"] - batch["y"]) ** 2

    return init_params, loss, {"x": x, "y": y}


def test_eval_sums_only_the_rows_the_mask_keeps():
    rng = np.random.default_rng(0)
    init_params, loss, data = _linear_parts(rng)
    task = own_task(init_params, loss, "loss", train=data, val=data)
    params = {"w": jnp.asarray([0.3, -1.0, 2.0], jnp.float32)}
    mask = (np.arange(40) % 3 == 0).astype(np.float32)
    sums = task.eval_fn(params, {**data, "mask": mask})
    per_row = 0.5 * (data["x"] @ np.asarray(params["w"]) - data["y"]) ** 2
    assert float(sums["count"]) == mask.sum()
    np.testing.assert_allclose(float(sums["metric_sum"]), per_row[mask == 1].sum(), rtol=1e-5)
    np.testing.assert_allclose(float(task.loss_fn(params, data)), per_row.mean(), rtol=1e-5)


@pytest.mark.parametrize("change, names", [
    (dict(val={"x": np.zeros((3, 2)), "y": np.zeros(4)}), "leading"),
    (dict(val={"x": np.zeros((3, 2)), "mask": np.zeros(3)}), "mask"),
    (dict(metric_name="error"), "metric function"),
    (dict(metric_name="accuracy"), "metric_name"),
    (dict(goal=-1.0, metric_name="loss"), "--goal"),
    (dict(batch_sizes=(8, 64)), "training examples"),
    (dict(optimizer="lbfgs"), "optimizer"),
    (dict(train=None), "exactly one of train"),
])
def test_bad_parts_are_refused_naming_them(change, names):
    init_params, loss, data = _linear_parts(np.random.default_rng(0))
    kwargs = dict(init_params=init_params, loss=loss, train=data, val=data, metric_name="loss",
                  batch_sizes=(4, 8))
    kwargs.update(change)
    with pytest.raises(ValueError, match=names):
        own_workload("lin", **kwargs)


def test_module_function_form_and_bad_specs(tmp_path, monkeypatch):
    (tmp_path / "my_pkg_own.py").write_text(textwrap.dedent("""
        from realnets.workloads.own import own_workload
        import jax.numpy as jnp, numpy as np
        X = np.linspace(-1, 1, 32, dtype=np.float32)[:, None]
        def make():
            return own_workload("tiny", init_params=lambda k: {"w": jnp.zeros((1,))},
                                loss=lambda p, b: (b["x"] @ p["w"] - b["x"][:, 0]) ** 2,
                                train={"x": X}, val={"x": X}, metric_name="loss", goal=0.01,
                                batch_sizes=(4, 8))
        def not_a_workload():
            return 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    w = workloads.get("my_pkg_own:make")
    assert (w.name, w.key, w.goal, w.metric) == ("tiny", "my_pkg_own:make", 0.01, "loss")
    with pytest.raises(ValueError, match="must return a Workload"):
        workloads.get("my_pkg_own:not_a_workload")
    with pytest.raises(ValueError, match="no function 'nope'"):
        workloads.get("my_pkg_own:nope")
    with pytest.raises(ValueError, match="does not exist"):
        workloads.get(str(tmp_path / "missing.py") + ":make")
    with pytest.raises(ValueError, match="cannot import module"):
        workloads.get("no_such_module_xyz:make")


def test_example_sweeps_resumes_and_reports_through_the_cli(capsys, tmp_path, monkeypatch,
                                                            one_default_device):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "own"
    argv = ["sweep", "--workload", "examples/own_workload.py:make_workload", "--batch-sizes",
            "8,64", "--trials", "2", "--max-steps", "30", "--goal", "0.85", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    assert config["workload"] == "examples/own_workload.py:make_workload"
    trials = (out / "trials.jsonl").read_text().splitlines()
    assert len(trials) == 4
    assert main(argv) == 0                            # resuming: nothing is run twice
    assert (out / "trials.jsonl").read_text().splitlines() == trials
    assert capsys.readouterr().out == first
    assert main(["report", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["batch_size"] for p in doc["points"]] == [8, 64]
    # MNIST-1D's split: 4,000 training rows, so B = 8192 is refused before training
    big = tmp_path / "big"
    assert main(["sweep", "--workload", "examples/own_workload.py:make_workload", "--batch-sizes",
                 "8,8192", "--goal", "0.2", "--out", str(big), "--no-progress"]) == 2
    assert "4000 training examples" in capsys.readouterr().err
    assert not (big / "trials.jsonl").exists()


def test_an_own_workload_without_a_goal_gets_one_by_the_pilot_rule(capsys, tmp_path, monkeypatch,
                                                                   one_default_device):
    (tmp_path / "no_goal_own.py").write_text(textwrap.dedent("""
        from realnets.workloads.own import own_workload
        import jax.numpy as jnp, numpy as np
        X = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
        Y = X @ np.arange(1.0, 5.0, dtype=np.float32)
        def make():
            return own_workload("lin", init_params=lambda k: {"w": jnp.zeros((4,))},
                                loss=lambda p, b: 0.5 * (b["x"] @ p["w"] - b["y"]) ** 2,
                                train={"x": X, "y": Y}, val={"x": X, "y": Y}, metric_name="loss",
                                optimizer="sgd", batch_sizes=(4, 16), max_steps=40)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "sweep"
    assert main(["sweep", "--workload", "no_goal_own:make", "--trials", "2", "--out", str(out),
                 "--no-progress"]) == 0
    config = json.loads((out / "config.json").read_text())
    choice = config["goal_choice"]
    assert config["batch_sizes"] == [4, 16] and config["max_steps"] == 40
    # the goal rule: m_best + 0.1 (m_start - m_best), with m_best the worse end's best
    m_best = max(choice["best_small"], choice["best_large"])
    assert config["goal"] == pytest.approx(m_best + 0.1 * (choice["metric_start"] - m_best))
    assert 0 < config["goal"] < choice["metric_start"]
    # the metric is recorded, so the sweep reports without the user's file
    assert config["metric"] == "loss"
    (tmp_path / "no_goal_own.py").unlink()
    own._load.cache_clear()
    capsys.readouterr()
    assert main(["report", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["workload"] == "no_goal_own:make"


def test_the_tabular_example_is_the_stated_split_of_the_bundled_data(monkeypatch):
    """examples/breast_cancer.py (held out in docs/prediction_rule.md, session 33): 455 training
    and 114 validation rows of scikit-learn's breast-cancer data, every row once, the features
    standardised with the training rows' mean and standard deviation (numpy on the raw data)."""
    from sklearn.datasets import load_breast_cancer

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/breast_cancer.py:make_workload").build()
    raw = load_breast_cancer()
    xt, xv = np.asarray(task.train["x"]), np.asarray(task.val["x"])
    assert xt.shape == (455, 30) and xv.shape == (114, 30)
    assert np.allclose(xt.mean(axis=0), 0.0, atol=1e-5) and np.allclose(xt.std(axis=0), 1.0,
                                                                         atol=1e-4)
    order = np.random.default_rng(0).permutation(len(raw.target))
    mean, std = raw.data[order[:455]].mean(axis=0), raw.data[order[:455]].std(axis=0)
    assert np.allclose(xv, (raw.data[order[455:]] - mean) / std, atol=1e-4)
    assert list(np.asarray(task.val["y"])) == list(raw.target[order[455:]])


def test_the_regression_example_scores_the_squared_error_on_its_stated_split(monkeypatch):
    """examples/diabetes.py (held out in docs/prediction_rule.md, session 33, last): 353 training
    and 89 validation rows of scikit-learn's diabetes data, variables and target standardised on
    the training rows; its validation metric is half the squared error of the MLP, written out
    here in numpy from the parameters."""
    import jax
    from sklearn.datasets import load_diabetes

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/diabetes.py:make_workload").build()
    raw = load_diabetes()
    order = np.random.default_rng(0).permutation(len(raw.target))
    train, val = order[:353], order[353:]
    x_val = (raw.data[val] - raw.data[train].mean(axis=0)) / raw.data[train].std(axis=0)
    y_val = (raw.target[val] - raw.target[train].mean()) / raw.target[train].std()
    assert np.asarray(task.train["x"]).shape == (353, 10) and task.metric == "loss"
    assert np.allclose(np.asarray(task.val["y"]), y_val, atol=1e-5)
    params = task.init_params(jax.random.key(0))
    layers = [params["params"][f"Dense_{i}"] for i in range(3)]
    h = x_val
    for layer in layers[:2]:
        h = np.maximum(h @ np.asarray(layer["kernel"]) + np.asarray(layer["bias"]), 0.0)
    pred = (h @ np.asarray(layers[2]["kernel"]) + np.asarray(layers[2]["bias"]))[:, 0]
    rows = {k: jnp.asarray(v) for k, v in task.val.items()}
    rows["mask"] = jnp.ones(89, jnp.float32)
    out = task.eval_fn(params, rows)
    assert float(out["count"]) == 89
    np.testing.assert_allclose(float(out["metric_sum"]) / 89, np.mean(0.5 * (pred - y_val) ** 2),
                               rtol=1e-4)


def test_the_teacher_student_labels_follow_the_teachers_softmax(monkeypatch):
    """examples/teacher_student.py (held out in docs/prediction_rule.md, session 35) draws each
    label from the softmax of the teacher's logits: over 200,000 rows the mean of the one-hot
    labels equals the mean of the softmax per class within 5 standard errors (an off-by-one in
    the inverse-CDF draw would shift whole classes); the workload has the stated sizes."""
    import importlib.util

    monkeypatch.chdir(ROOT)
    spec = importlib.util.spec_from_file_location("teacher_student",
                                                  ROOT / "examples" / "teacher_student.py")
    ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ts)
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((ts.INPUT_DIM, ts.TEACHER_WIDTH)) / np.sqrt(ts.INPUT_DIM)
    w2 = rng.standard_normal((ts.TEACHER_WIDTH, ts.CLASSES)) / np.sqrt(ts.TEACHER_WIDTH)
    x, y = ts.teacher_data(200_000, rng, w1, w2)
    logits = ts.TEACHER_SCALE * np.tanh(x.astype(np.float64) @ w1) @ w2
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    diff = np.eye(ts.CLASSES)[y] - p
    se = diff.std(axis=0) / np.sqrt(len(y))
    assert np.all(np.abs(diff.mean(axis=0)) < 5 * se)
    assert 0.05 < 1 - p.max(axis=1).mean() < 0.3        # labels noisy, but learnable
    task = workloads.get("examples/teacher_student.py:make_workload").build()
    assert np.asarray(task.train["x"]).shape == (16384, 32)
    assert np.asarray(task.val["y"]).shape == (4096,)
    # the noisy variant (session 36): the same inputs and teacher at half the logit scale; on
    # either, the share of labels that differ from the teacher's argmax is the teacher's own
    # error on those rows (1 - the largest softmax probability), within 5 standard errors
    noisy = workloads.get("examples/teacher_student.py:make_noisy_workload").build()
    np.testing.assert_array_equal(np.asarray(noisy.train["x"]), np.asarray(task.train["x"]))
    rng0 = np.random.default_rng(0)                      # make_workload's teacher
    t1 = rng0.standard_normal((ts.INPUT_DIM, ts.TEACHER_WIDTH)) / np.sqrt(ts.INPUT_DIM)
    t2 = rng0.standard_normal((ts.TEACHER_WIDTH, ts.CLASSES)) / np.sqrt(ts.TEACHER_WIDTH)
    h = np.tanh(np.asarray(task.train["x"], dtype=np.float64) @ t1) @ t2
    errors = []
    for built, scale in ((task, ts.TEACHER_SCALE), (noisy, ts.NOISY_SCALE)):
        q = np.exp(scale * h - (scale * h).max(axis=1, keepdims=True))
        q /= q.sum(axis=1, keepdims=True)
        wrong = np.asarray(built.train["y"]) != h.argmax(axis=1)
        expected = 1 - q.max(axis=1)
        assert abs(wrong.mean() - expected.mean()) < 5 * wrong.std() / np.sqrt(len(wrong))
        errors.append(expected.mean())
    assert 0.12 < errors[0] < 0.17 and 0.25 < errors[1] < 0.31


def test_the_attention_example_is_the_stated_network(monkeypatch):
    """examples/digits_attention.py (held out in docs/prediction_rule.md, session 41): its
    logits written out in numpy from the parameters (row tokens, position embedding, a pre-norm
    block of two-head softmax attention and a tanh-GELU MLP, mean over tokens), float64, and
    from them the workload's loss and error; its stated sizes; the digits split's sizes."""
    import jax

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/digits_attention.py:make_workload").build()
    params = task.init_params(jax.random.key(1))
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)["params"]
    x = np.asarray(task.val["x"], np.float64)[:16]                 # (16, 8, 8)
    assert np.asarray(task.train["x"]).shape == (1618, 8, 8) and x.shape[1:] == (8, 8)

    def dense(h, d):
        return h @ d["kernel"] + d["bias"]

    def norm(h, d):
        mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
        return (h - mean) / np.sqrt(var + 1e-6) * d["scale"] + d["bias"]

    def gelu(u):
        return 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u ** 3)))

    att = p["MultiHeadDotProductAttention_0"]
    h = dense(x, p["Dense_0"]) + p["position"]
    a = norm(h, p["LayerNorm_0"])
    q, k, v = (np.einsum("btd,dhe->bthe", a, att[n]["kernel"]) + att[n]["bias"]
               for n in ("query", "key", "value"))
    w = np.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    w = np.exp(w - w.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    mixed = np.einsum("bhqk,bkhe->bqhe", w, v)
    h = h + np.einsum("bqhe,hed->bqd", mixed, att["out"]["kernel"]) + att["out"]["bias"]
    h = h + dense(gelu(dense(norm(h, p["LayerNorm_1"]), p["Dense_1"])), p["Dense_2"])
    want = dense(norm(h, p["LayerNorm_2"]).mean(axis=1), p["Dense_3"])
    # the stated sizes: width 32, two heads of 16, an MLP of 64; 9,482 parameters
    assert att["query"]["kernel"].shape == (32, 2, 16) and p["Dense_1"]["kernel"].shape == (32, 64)
    assert sum(np.size(a) for a in jax.tree_util.tree_leaves(params)) == 9482
    _check_logits(_example_module("digits_attention").RowAttention(), params, task.val["x"][:16],
                  want)
    _check_task_against(task, params, want, 16)


def test_the_recurrent_example_is_the_stated_network(monkeypatch):
    """examples/digits_gru.py (held out in docs/prediction_rule.md, session 40): its logits
    written out in numpy (a GRU of Cho et al. 2014 from a zero state over the 8 rows: reset and
    update gates, the candidate with the reset applied to the recurrent term, then a dense layer
    on the last state), float64 against the float32 network."""
    import jax

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/digits_gru.py:make_workload").build()
    params = task.init_params(jax.random.key(2))
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)["params"]
    cell = p["GRUCell_0"]
    x = np.asarray(task.val["x"], np.float64)[:16]                 # (16, 8, 8)

    def sigmoid(u):
        return 1 / (1 + np.exp(-u))

    h = np.zeros((len(x), cell["hr"]["kernel"].shape[0]))
    for row in range(x.shape[1]):
        xt = x[:, row]
        r = sigmoid(xt @ cell["ir"]["kernel"] + cell["ir"]["bias"] + h @ cell["hr"]["kernel"])
        z = sigmoid(xt @ cell["iz"]["kernel"] + cell["iz"]["bias"] + h @ cell["hz"]["kernel"])
        n = np.tanh(xt @ cell["in"]["kernel"] + cell["in"]["bias"]
                    + r * (h @ cell["hn"]["kernel"] + cell["hn"]["bias"]))
        h = (1 - z) * n + z * h
    want = h @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"]
    # the stated size: 32 units on 8 pixels a step; 3 (8 + 32) 32 + 4 x 32 + 33 x 10 = 4,298 parameters
    assert cell["hz"]["kernel"].shape == (32, 32) and cell["iz"]["kernel"].shape == (8, 32)
    assert sum(np.size(a) for a in jax.tree_util.tree_leaves(params)) == 4298
    _check_logits(_example_module("digits_gru").RowGRU(), params, task.val["x"][:16], want)
    _check_task_against(task, params, want, 16)


def test_the_residual_example_is_the_stated_network(monkeypatch):
    """examples/digits_resmlp.py (held out in docs/prediction_rule.md, session 41): its logits
    written out in numpy (the flattened pixels projected to 64, three pre-norm residual blocks
    h + W2 relu(W1 LayerNorm(h)), a final layer norm, dense 10), float64, and from them the
    workload's loss and error; its stated sizes; Nesterov momentum."""
    import jax

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/digits_resmlp.py:make_workload").build()
    params = task.init_params(jax.random.key(3))
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)["params"]
    x = np.asarray(task.val["x"], np.float64)[:16].reshape(16, 64)

    def dense(h, name):
        return h @ p[name]["kernel"] + p[name]["bias"]

    def norm(h, name):
        mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
        return (h - mean) / np.sqrt(var + 1e-6) * p[name]["scale"] + p[name]["bias"]

    h = dense(x, "Dense_0")
    for block in range(3):       # flax numbers the outer layer first: it is built first
        inner, outer = f"Dense_{2 + 2 * block}", f"Dense_{1 + 2 * block}"
        assert p[inner]["kernel"].shape == (64, 128) and p[outer]["kernel"].shape == (128, 64)
        h = h + dense(np.maximum(dense(norm(h, f"LayerNorm_{block}"), inner), 0.0), outer)
    want = dense(norm(h, "LayerNorm_3"), "Dense_7")
    assert sum(np.size(a) for a in jax.tree_util.tree_leaves(params)) == 55050
    example = _example_module("digits_resmlp")
    _check_logits(example.ResidualMLP(), params, task.val["x"][:16], want)
    _check_task_against(task, params, want, 16)
    assert example.make_workload().optimizer == "nesterov"


def test_the_synthetic_example_is_the_stated_data_and_network(monkeypatch):
    """examples/synthetic_clusters.py (held out in docs/prediction_rule.md, session 41): the
    rows and labels of scikit-learn's make_classification as stated, standardised on the 6,400
    training rows (numpy on a fresh draw), so the training features have mean 0 and standard
    deviation 1 and the five classes about 1,280 rows each; the MLP's logits written out in
    numpy, and from them the workload's loss and error; plain SGD."""
    import jax
    from sklearn.datasets import make_classification

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/synthetic_clusters.py:make_workload").build()
    x, y = make_classification(n_samples=8000, n_features=20, n_informative=8, n_redundant=4,
                               n_classes=5, n_clusters_per_class=2, flip_y=0.05, class_sep=1.0,
                               random_state=0)
    z = (x - x[:6400].mean(axis=0)) / x[:6400].std(axis=0)
    np.testing.assert_allclose(np.asarray(task.train["x"]), z[:6400], atol=1e-5)
    np.testing.assert_allclose(np.asarray(task.val["x"]), z[6400:], atol=1e-5)
    assert list(np.asarray(task.train["y"])) == list(y[:6400])
    assert list(np.asarray(task.val["y"])) == list(y[6400:])
    xt, yt = np.asarray(task.train["x"], np.float64), np.asarray(task.train["y"])
    assert xt.shape == (6400, 20) and np.asarray(task.val["x"]).shape == (1600, 20)
    # standardised on the training rows: each feature's training mean 0 and std 1 (float32)
    np.testing.assert_allclose(xt.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(xt.std(axis=0), 1.0, atol=1e-5)
    # the validation rows, standardised with the training statistics, are not exactly so
    assert np.abs(np.asarray(task.val["x"]).mean(axis=0)).max() > 1e-3
    # make_classification draws 1,600 rows per class, and flip_y = 0.05 relabels about 5% of
    # them uniformly: each class holds about 1,280 of the 6,400 training rows (binomial sd 32)
    counts = np.bincount(yt)
    assert yt.min() == 0 and len(counts) == 5 and np.all(np.abs(counts - 1280) < 100), counts
    assert set(np.unique(np.asarray(task.val["y"]))) == set(range(5))
    params = task.init_params(jax.random.key(4))
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)["params"]
    h = z[6400:6416]
    for name in ("Dense_0", "Dense_1"):
        h = np.maximum(h @ p[name]["kernel"] + p[name]["bias"], 0.0)
    want = h @ p["Dense_2"]["kernel"] + p["Dense_2"]["bias"]
    assert p["Dense_1"]["kernel"].shape == (128, 128) and want.shape == (16, 5)
    example = _example_module("synthetic_clusters")
    _check_logits(example.MLP(), params, task.val["x"][:16], want)
    _check_task_against(task, params, want, 16)
    assert example.make_workload().optimizer == "sgd"


def _check_logits(module, params, x, want):
    """The example's flax `module` applied to `x` (float32) with `params` gives the logits
    `want` written out in numpy (float64), entry by entry: a mean loss, an error count or a
    softmax would not see a constant added to a row."""
    got = np.asarray(module.apply(params, jnp.asarray(np.asarray(x), jnp.float32)))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _check_task_against(task, params, logits, n):
    """The workload's training loss and validation error on its first `n` validation rows
    against numpy's cross-entropy and argmax of `logits` (n, number of classes), float64."""
    import jax.numpy as jnp

    y = np.asarray(task.val["y"])[:n]
    shifted = logits - logits.max(axis=1, keepdims=True)
    nll = -(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))[np.arange(n), y]
    rows = {"x": jnp.asarray(np.asarray(task.val["x"])[:n]), "y": jnp.asarray(y)}
    np.testing.assert_allclose(float(task.loss_fn(params, rows)), nll.mean(), rtol=1e-4)
    out = task.eval_fn(params, {**rows, "mask": jnp.ones(n, jnp.float32)})
    assert task.metric == "error" and float(out["count"]) == n
    assert float(out["metric_sum"]) == np.sum(logits.argmax(axis=1) != y)
    np.testing.assert_allclose(float(out["loss_sum"]), nll.sum(), rtol=1e-4)


def _example_module(name: str):
    """examples/NAME.py imported as a module (the examples are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_friedman_example_is_the_stated_function_and_network(monkeypatch):
    """examples/friedman_regression.py (held out in docs/prediction_rule.md, session 42): its
    inputs are make_friedman1's uniform draws, standardised on the 6,400 training rows; its
    target, unstandardised, is Friedman's formula written out here plus noise whose training
    mean is about 0 and standard deviation about 1 (the stated sd); the MLP's output written out
    in numpy (SiLU: h sigmoid(h)), float64, against the module's, and the workload's training
    loss and validation metric, half the squared error, from it; momentum."""
    import jax
    from sklearn.datasets import make_friedman1

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/friedman_regression.py:make_workload").build()
    raw, _ = make_friedman1(n_samples=8000, n_features=10, noise=0.0, random_state=0)
    assert raw.min() >= 0.0 and raw.max() <= 1.0            # uniform on [0, 1]^10
    z = (raw - raw[:6400].mean(axis=0)) / raw[:6400].std(axis=0)
    np.testing.assert_allclose(np.asarray(task.train["x"]), z[:6400], atol=1e-5)
    np.testing.assert_allclose(np.asarray(task.val["x"]), z[6400:], atol=1e-5)
    assert np.asarray(task.train["x"]).shape == (6400, 10) and task.metric == "loss"
    formula = (10 * np.sin(np.pi * raw[:, 0] * raw[:, 1]) + 20 * (raw[:, 2] - 0.5) ** 2
               + 10 * raw[:, 3] + 5 * raw[:, 4])
    # the target was standardised with the training rows' statistics: undo it with those of
    # (formula + noise), which the noise-free formula fixes up to the noise's small share
    y = np.concatenate([np.asarray(task.train["y"]), np.asarray(task.val["y"])]).astype(float)
    assert abs(y[:6400].mean()) < 1e-5 and abs(y[:6400].std() - 1) < 1e-5
    scale = np.sqrt(formula[:6400].var() + 1.0)            # sd of formula + noise of sd 1
    noise = y[:6400] * scale + formula[:6400].mean() - formula[:6400]
    assert abs(noise.mean()) < 0.1 and abs(noise.std() - 1.0) < 0.05, (noise.mean(), noise.std())
    params = task.init_params(jax.random.key(5))
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)["params"]
    h = z[6400:6432]
    for name in ("Dense_0", "Dense_1"):
        a = h @ p[name]["kernel"] + p[name]["bias"]
        h = a / (1 + np.exp(-a))
    want = (h @ p["Dense_2"]["kernel"] + p["Dense_2"]["bias"])[:, 0]
    assert p["Dense_1"]["kernel"].shape == (128, 128)
    example = _example_module("friedman_regression")
    _check_logits(example.RegressionMLP(), params, task.val["x"][:32], want)
    y_val = np.asarray(task.val["y"], np.float64)[:32]
    rows = {"x": jnp.asarray(np.asarray(task.val["x"])[:32]), "y": jnp.asarray(y_val, jnp.float32)}
    np.testing.assert_allclose(float(task.loss_fn(params, rows)),
                               np.mean(0.5 * (want - y_val) ** 2), rtol=1e-4)
    out = task.eval_fn(params, {**rows, "mask": jnp.ones(32, jnp.float32)})
    assert float(out["count"]) == 32
    np.testing.assert_allclose(float(out["metric_sum"]), np.sum(0.5 * (want - y_val) ** 2),
                               rtol=1e-4)
    assert example.make_workload().optimizer == "momentum"


def test_the_multilabel_example_is_the_stated_data_and_network(monkeypatch):
    """examples/multilabel_mlp.py (held out in docs/prediction_rule.md, session 42): the counts
    and label sets of make_multilabel_classification as stated, the counts standardised on the
    6,400 training rows; labels not exclusive (rows with several, about 2 per row); the MLP's
    logits written out in numpy (GELU in its tanh form, flax's default), float64, and from them
    the workload's loss and validation metric, the binary cross-entropy summed over the five
    labels, log(1 + e^z) - y z; Adam."""
    import jax
    from sklearn.datasets import make_multilabel_classification

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/multilabel_mlp.py:make_workload").build()
    x, y = make_multilabel_classification(n_samples=8000, n_features=20, n_classes=5,
                                          n_labels=2, random_state=0)
    assert np.all(x == np.round(x)) and x.min() >= 0          # word counts
    z = (x - x[:6400].mean(axis=0)) / x[:6400].std(axis=0)
    np.testing.assert_allclose(np.asarray(task.train["x"]), z[:6400], atol=1e-5)
    np.testing.assert_allclose(np.asarray(task.val["x"]), z[6400:], atol=1e-5)
    labels = np.asarray(task.train["y"])
    assert labels.shape == (6400, 5) and set(np.unique(labels)) == {0.0, 1.0}
    assert np.array_equal(labels, y[:6400]) and np.array_equal(np.asarray(task.val["y"]),
                                                               y[6400:])
    per_row = labels.sum(axis=1)
    assert 1.5 < per_row.mean() < 2.5 and (per_row >= 2).mean() > 0.3   # not exclusive
    params = task.init_params(jax.random.key(6))
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)["params"]

    def gelu(a):
        return 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))

    h = z[6400:6432]
    for name in ("Dense_0", "Dense_1"):
        h = gelu(h @ p[name]["kernel"] + p[name]["bias"])
    want = h @ p["Dense_2"]["kernel"] + p["Dense_2"]["bias"]
    assert want.shape == (32, 5)
    example = _example_module("multilabel_mlp")
    _check_logits(example.MultiLabelMLP(), params, task.val["x"][:32], want)
    y_val = np.asarray(task.val["y"], np.float64)[:32]
    bce = (np.log1p(np.exp(want)) - y_val * want).sum(axis=1)
    rows = {"x": jnp.asarray(np.asarray(task.val["x"])[:32]), "y": jnp.asarray(task.val["y"][:32])}
    np.testing.assert_allclose(float(task.loss_fn(params, rows)), bce.mean(), rtol=1e-4)
    out = task.eval_fn(params, {**rows, "mask": jnp.ones(32, jnp.float32)})
    assert task.metric == "loss" and float(out["count"]) == 32
    np.testing.assert_allclose(float(out["metric_sum"]), bce.sum(), rtol=1e-4)
    assert example.make_workload().optimizer == "adam"


def _statsmodels_csv(name: str) -> tuple[list[str], np.ndarray]:
    """The columns and float64 rows of the CSV statsmodels ships for dataset `name`, read with
    numpy straight from the installed package (not through statsmodels' loader)."""
    import importlib

    path = Path(importlib.import_module(f"statsmodels.datasets.{name}").__file__).parent
    with open(path / f"{name}.csv") as f:
        header = [c.strip('"') for c in f.readline().strip().split(",")]
    return header, np.loadtxt(path / f"{name}.csv", delimiter=",", skiprows=1)


def _relu_mlp_output(params, x):
    """A flax MLP Dense_0, Dense_1 (ReLU), Dense_2 with one output, written out in numpy on x
    (n, inputs), float64: (n,)."""
    import jax

    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)["params"]
    h = x
    for name in ("Dense_0", "Dense_1"):
        h = np.maximum(h @ p[name]["kernel"] + p[name]["bias"], 0.0)
    return (h @ p["Dense_2"]["kernel"] + p["Dense_2"]["bias"])[:, 0]


def _check_per_example_loss(task, params, batch, want):
    """The workload's training loss (mean) and validation metric (sum, count) on `batch`
    against `want`, the per-example loss (n,) computed independently."""
    n = len(want)
    np.testing.assert_allclose(float(task.loss_fn(params, batch)), want.mean(), rtol=1e-4)
    out = task.eval_fn(params, {**batch, "mask": jnp.ones(n, jnp.float32)})
    assert float(out["count"]) == n
    np.testing.assert_allclose(float(out["metric_sum"]), want.sum(), rtol=1e-4)


def test_the_rand_hie_example_is_the_stated_data_and_network(monkeypatch):
    """examples/rand_hie.py (held out in docs/prediction_rule.md, session 49): the 20,190 rows
    of statsmodels' randhie.csv shuffled by default_rng(0), 16,000 training rows, the 9
    covariates standardised on them and the visit counts unchanged; the MLP's log rate written
    out in numpy (ReLU), float64, and from it the workload's loss and validation metric, the
    Poisson negative log-likelihood, against scipy's Poisson log pmf; momentum."""
    import jax
    from scipy.stats import poisson

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/rand_hie.py:make_workload").build()
    header, table = _statsmodels_csv("randhie")
    assert header[0] == "mdvis" and table.shape == (20190, 10)
    table = table[np.random.default_rng(0).permutation(20190)]
    raw, visits = table[:, 1:], table[:, 0]
    z = (raw - raw[:16000].mean(axis=0)) / raw[:16000].std(axis=0)
    np.testing.assert_allclose(np.asarray(task.train["x"]), z[:16000], atol=1e-5)
    np.testing.assert_allclose(np.asarray(task.val["x"]), z[16000:], atol=1e-5)
    assert np.array_equal(np.asarray(task.train["y"]), visits[:16000])
    assert np.array_equal(np.asarray(task.val["y"]), visits[16000:])
    assert task.metric == "loss" and visits.max() == 77
    params = task.init_params(jax.random.key(7))
    log_rate = _relu_mlp_output(params, z[16000:16032])
    example = _example_module("rand_hie")
    _check_logits(example.PoissonMLP(), params, task.val["x"][:32], log_rate)
    y = visits[16000:16032]
    nll = -poisson.logpmf(y, np.exp(log_rate))
    assert np.all(nll >= 0)
    rows = {"x": jnp.asarray(np.asarray(task.val["x"])[:32]), "y": jnp.asarray(y, jnp.float32)}
    _check_per_example_loss(task, params, rows, nll)
    assert example.make_workload().optimizer == "momentum"


def test_the_diamonds_example_is_the_stated_data_and_network(monkeypatch):
    """examples/diamonds.py (held out in docs/prediction_rule.md, session 50): plotnine's
    diamonds.csv read here with the csv module, the 20 rows with a zero length, width or depth
    dropped, the grades ranked worst first, the 53,920 rows shuffled by default_rng(0), 40,000
    training rows, features and log price standardised on them; the MLP written out in numpy
    (ReLU), float64, and from it the workload's loss and validation metric, the squared error;
    momentum."""
    import csv
    import jax

    monkeypatch.chdir(ROOT)
    example = _example_module("diamonds")
    with open(example.diamonds_csv(), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 53940
    grades = {"cut": ["Fair", "Good", "Very Good", "Premium", "Ideal"],
              "color": list("JIHGFED"),
              "clarity": ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"]}
    kept = [r for r in rows if min(float(r["x"]), float(r["y"]), float(r["z"])) > 0]
    assert len(kept) == 53920
    raw = np.array([[float(r["carat"]), grades["cut"].index(r["cut"]),
                     grades["color"].index(r["color"]), grades["clarity"].index(r["clarity"]),
                     float(r["depth"]), float(r["table"]), float(r["x"]), float(r["y"]),
                     float(r["z"])] for r in kept])
    price = np.log([float(r["price"]) for r in kept])
    order = np.random.default_rng(0).permutation(53920)
    raw, price = raw[order], price[order]
    z = (raw - raw[:40000].mean(axis=0)) / raw[:40000].std(axis=0)
    y = (price - price[:40000].mean()) / price[:40000].std()
    task = workloads.get("examples/diamonds.py:make_workload").build()
    np.testing.assert_allclose(np.asarray(task.train["x"]), z[:40000], atol=1e-5)
    np.testing.assert_allclose(np.asarray(task.val["x"]), z[40000:], atol=1e-5)
    np.testing.assert_allclose(np.asarray(task.train["y"]), y[:40000], atol=1e-5)
    np.testing.assert_allclose(np.asarray(task.val["y"]), y[40000:], atol=1e-5)
    assert task.metric == "loss"
    params = task.init_params(jax.random.key(7))
    out_np = _relu_mlp_output(params, z[40000:40032])
    _check_logits(example.PriceMLP(), params, task.val["x"][:32], out_np)
    err = (out_np - y[40000:40032]) ** 2
    batch = {"x": jnp.asarray(np.asarray(task.val["x"])[:32]),
             "y": jnp.asarray(np.asarray(task.val["y"])[:32])}
    _check_per_example_loss(task, params, batch, err)
    assert example.make_workload().optimizer == "momentum"


def test_the_fair_example_is_the_stated_data_and_network(monkeypatch):
    """examples/fair_affairs.py (held out in docs/prediction_rule.md, session 49): the 6,366
    rows of statsmodels' fair.csv shuffled by default_rng(0), 5,000 training rows, the 8
    answers standardised on them, the label 1 where `affairs` > 0 (about a third); the MLP's
    logits written out in numpy (tanh), float64, and from them the workload's loss and
    validation metric, the softmax cross-entropy; Adam."""
    import jax

    monkeypatch.chdir(ROOT)
    task = workloads.get("examples/fair_affairs.py:make_workload").build()
    header, table = _statsmodels_csv("fair")
    assert header[-1] == "affairs" and table.shape == (6366, 9)
    table = table[np.random.default_rng(0).permutation(6366)]
    raw, labels = table[:, :-1], (table[:, -1] > 0).astype(int)
    z = (raw - raw[:5000].mean(axis=0)) / raw[:5000].std(axis=0)
    np.testing.assert_allclose(np.asarray(task.train["x"]), z[:5000], atol=1e-5)
    np.testing.assert_allclose(np.asarray(task.val["x"]), z[5000:], atol=1e-5)
    assert np.array_equal(np.asarray(task.train["y"]), labels[:5000])
    assert np.array_equal(np.asarray(task.val["y"]), labels[5000:])
    assert 0.30 < labels.mean() < 0.35
    params = task.init_params(jax.random.key(8))
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)["params"]
    h = z[5000:5032]
    for name in ("Dense_0", "Dense_1"):
        h = np.tanh(h @ p[name]["kernel"] + p[name]["bias"])
    logits = h @ p["Dense_2"]["kernel"] + p["Dense_2"]["bias"]
    example = _example_module("fair_affairs")
    _check_logits(example.AffairsMLP(), params, task.val["x"][:32], logits)
    y = labels[5000:5032]
    shifted = logits - logits.max(axis=1, keepdims=True)
    nll = -(shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)))[np.arange(32), y]
    rows = {"x": jnp.asarray(np.asarray(task.val["x"])[:32]), "y": jnp.asarray(y, jnp.int32)}
    np.testing.assert_allclose(float(task.loss_fn(params, rows)), nll.mean(), rtol=1e-4)
    out = task.eval_fn(params, {**rows, "mask": jnp.ones(32, jnp.float32)})
    assert task.metric == "cross_entropy" and float(out["count"]) == 32
    np.testing.assert_allclose(float(out["metric_sum"]), nll.sum(), rtol=1e-4)
    assert example.make_workload().optimizer == "adam"

"""The offline data sets of realnets."""

import hashlib

import numpy as np
import pytest

from realnets.workloads.datasets import MNIST10K, load_digits, load_mnist10k, load_mnist1d, load_text


def test_shipped_file_matches_its_provenance():
    digest = hashlib.sha256(MNIST10K.read_bytes()).hexdigest()
    assert digest == "0217e13bd0668deb198aa7d305edbf0331eb89f8a6e7dd226e03d1aa3a9bd4ef"


def test_mnist10k_split_shapes_and_labels():
    split = load_mnist10k()
    # every 10th image of each digit: sum of floor(count / 10) = 997 for validation
    assert split.train_x.shape == (9003, 28, 28) and split.val_x.shape == (997, 28, 28)
    assert split.train_x.dtype == np.float32 and split.train_y.dtype == np.int32
    assert 0.0 <= split.train_x.min() and split.train_x.max() <= 1.0
    # the first 10,000 MNIST training labels, per digit
    counts = np.bincount(split.train_y, minlength=10) + np.bincount(split.val_y, minlength=10)
    assert counts.tolist() == [1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]
    # stratified: about a tenth of every digit in validation
    np.testing.assert_allclose(np.bincount(split.val_y, minlength=10), counts / 10, atol=1)


def test_split_is_disjoint_and_deterministic():
    a, b = load_mnist10k(), load_mnist10k()
    np.testing.assert_array_equal(a.val_x, b.val_x)
    train = {x.tobytes() for x in (a.train_x * 255).astype(np.uint8)}
    assert not any(x.tobytes() in train for x in (a.val_x * 255).astype(np.uint8))


def test_images_are_real_digits():
    """A nearest-class-mean classifier, fit on train, is far above chance on validation: the
    labels belong to the images (real MNIST gets ~80% this way)."""
    split = load_mnist10k()
    means = np.stack([split.train_x[split.train_y == d].mean(axis=0) for d in range(10)])
    dist = ((split.val_x[:, None] - means[None]) ** 2).sum(axis=(2, 3))
    accuracy = np.mean(np.argmin(dist, axis=1) == split.val_y)
    assert accuracy > 0.75


def test_bad_split_parameter():
    with pytest.raises(ValueError, match="validation_every"):
        load_mnist10k(validation_every=1)


def nearest_mean_accuracy(split):
    flat = lambda a: a.reshape(a.shape[0], -1)
    means = np.stack([flat(split.train_x)[split.train_y == d].mean(axis=0) for d in range(10)])
    dist = ((flat(split.val_x)[:, None] - means[None]) ** 2).sum(axis=2)
    return np.mean(np.argmin(dist, axis=1) == split.val_y)


def test_mnist1d_is_generated_offline_and_deterministically():
    a = load_mnist1d(num_samples=500, seed=3)
    b = load_mnist1d(num_samples=500, seed=3)
    c = load_mnist1d(num_samples=500, seed=4)
    assert a.train_x.shape == (400, 40) and a.val_x.shape == (100, 40)
    np.testing.assert_array_equal(a.train_x, b.train_x)
    assert not np.array_equal(a.train_x, c.train_x)
    assert set(np.unique(a.train_y)) == set(range(10))


def test_digits_split_and_content():
    split = load_digits()
    assert split.train_x.shape[1:] == (8, 8) and len(split.train_y) + len(split.val_y) == 1797
    assert 0.0 <= split.train_x.min() and split.train_x.max() <= 1.0
    assert nearest_mean_accuracy(split) > 0.85     # real digits: ~0.9 by class means


def test_text_default_is_pydoc_prose(tmp_path):
    text = load_text()
    assert text.name == "pydoc_data.topics" and len(text.train) > 300_000
    decoded = "".join(text.vocab[i] for i in text.train[:2000])
    assert " the " in decoded
    assert len(text.val) == pytest.approx(0.1 * (len(text.train) + len(text.val)), abs=1)
    own = tmp_path / "t.txt"
    own.write_text("abc " * 100, encoding="utf-8")
    mine = load_text(own)
    assert mine.vocab == " abc" and mine.train[:4].tolist() == [1, 2, 3, 0]


@pytest.mark.parametrize("call, name", [
    (lambda: load_text("/no/such/file"), "text-file"),
    (lambda: load_text(val_fraction=1.0), "val_fraction"),
    (lambda: load_mnist1d(num_samples=3), "num_samples"),
    (lambda: load_digits(validation_every=0), "validation_every"),
])
def test_bad_arguments_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()

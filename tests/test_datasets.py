"""The offline data sets of realnets."""

import hashlib

import numpy as np
import pytest

from realnets.datasets import MNIST10K, load_mnist10k


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

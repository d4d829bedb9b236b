"""Real data sets that work offline, as float32 arrays with a fixed train/validation split.

So far: 10,000 real MNIST digits shipped in the repository (`data/mnist10k.npz`, see
`data/PROVENANCE.md`). MNIST-1D, scikit-learn's digits and the pydoc text come with the rest of
issue 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent / "data"
MNIST10K = DATA_DIR / "mnist10k.npz"


@dataclass(frozen=True)
class Split:
    """Train and validation arrays.

    Attributes:
      train_x: float32 (n_train, ...) inputs in [0, 1]; train_y: int32 (n_train,) labels.
      val_x, val_y: the same for validation.
      name: data set name.
    """

    train_x: np.ndarray
    train_y: np.ndarray
    val_x: np.ndarray
    val_y: np.ndarray
    name: str


def load_mnist10k(path: Path = MNIST10K, validation_every: int = 10) -> Split:
    """The 10,000 shipped MNIST digits; every `validation_every`-th image of each digit is kept
    for validation (stratified and deterministic).

    Returns:
      Split with images float32 (n, 28, 28) scaled to [0, 1] and labels int32.
    """
    if validation_every < 2:
        raise ValueError(f"validation_every must be >= 2, got {validation_every}")
    with np.load(path, allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    rank = np.zeros(labels.shape[0], dtype=np.int64)   # position of each image within its digit
    for digit in range(10):
        mine = np.flatnonzero(labels == digit)
        rank[mine] = np.arange(mine.size)
    val = rank % validation_every == validation_every - 1
    x = images.astype(np.float32) / 255.0
    y = labels.astype(np.int32)
    return Split(x[~val], y[~val], x[val], y[val], "mnist10k")

"""Real data sets that work offline, as arrays with a fixed train/validation split.

- `load_mnist10k`: 10,000 real MNIST digits shipped in the repository (`data/mnist10k.npz`, see
  `data/PROVENANCE.md`).
- `load_mnist1d`: MNIST-1D (Greydanus 2020, PyPI `mnist1d`, Apache-2.0), generated offline and
  deterministically by its `make_dataset`, any number of samples.
- `load_digits`: scikit-learn's bundled 8x8 digits (1,797 images), the smallest real set.
- `load_text`: characters of a text, by default the English prose CPython ships in
  `pydoc_data.topics`, or any text file.
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


def load_mnist1d(num_samples: int = 5000, seed: int = 42) -> Split:
    """MNIST-1D with `num_samples` sequences of length 40 (float32) and their digit labels; the
    package's own 80/20 train/test split serves as train/validation. Deterministic in `seed`."""
    from mnist1d.data import get_dataset_args, make_dataset

    if num_samples < 10:
        raise ValueError(f"num_samples must be >= 10, got {num_samples}")
    args = get_dataset_args()
    args.num_samples = int(num_samples)
    args.seed = int(seed)
    data = make_dataset(args)   # generated here: no download
    return Split(data["x"].astype(np.float32), data["y"].astype(np.int32),
                 data["x_test"].astype(np.float32), data["y_test"].astype(np.int32), "mnist1d")


def load_digits(validation_every: int = 10) -> Split:
    """scikit-learn's 8x8 digits, pixels scaled to [0, 1], float32 (n, 8, 8); every
    `validation_every`-th image for validation."""
    from sklearn.datasets import load_digits as sklearn_digits

    if validation_every < 2:
        raise ValueError(f"validation_every must be >= 2, got {validation_every}")
    bunch = sklearn_digits()
    x = (bunch.images / 16.0).astype(np.float32)
    y = bunch.target.astype(np.int32)
    val = np.arange(y.size) % validation_every == validation_every - 1
    return Split(x[~val], y[~val], x[val], y[val], "digits")


@dataclass(frozen=True)
class Text:
    """A character-level corpus.

    Attributes:
      train, val: int32 (n,) character ids; the last `val_fraction` of the text is validation.
      vocab: the characters, id -> character.
      name: where the text came from.
    """

    train: np.ndarray
    val: np.ndarray
    vocab: str
    name: str


def load_text(path: str | Path | None = None, val_fraction: float = 0.1) -> Text:
    """Characters of `path` (UTF-8), or by default of CPython's pydoc topics (sorted by topic)."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if path is None:
        from pydoc_data.topics import topics

        text, name = "\n\n".join(topics[k] for k in sorted(topics)), "pydoc_data.topics"
    else:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"text-file {str(path)!r} does not exist or is not a file")
        text, name = path.read_text(encoding="utf-8"), path.name
    if len(text) < 100:
        raise ValueError(f"text-file must hold at least 100 characters, got {len(text)}")
    vocab = "".join(sorted(set(text)))
    lookup = {c: i for i, c in enumerate(vocab)}
    ids = np.fromiter((lookup[c] for c in text), dtype=np.int32, count=len(text))
    cut = int(len(ids) * (1.0 - val_fraction))
    return Text(ids[:cut], ids[cut:], vocab, name)

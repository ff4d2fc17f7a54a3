"""Importer for TFF's federated EMNIST HDF5 files (``fed_emnist_*.h5``).

The layout (``examples/<writer>/pixels`` and ``label``; each writer is one user) and the
inversion to bright ink on black (``invert=True``, like TFF's own preprocessing):
docs/DATA.md, "`emnist-h5`".
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
from tqdm.auto import tqdm

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.importers._common import BadRows, ImportReport, assemble

#: EMNIST ByClass label order: digits, upper case, lower case (62 classes).
EMNIST_CHARACTERS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _open(path: Path) -> h5py.File:
    if not path.is_file():
        raise DataError(f"{path}: HDF5 file not found")
    try:
        return h5py.File(path, "r")
    except OSError as e:
        raise DataError(f"{path}: not a readable HDF5 file ({e})") from e


def label_names_for(max_label: int) -> list[str]:
    """EMNIST character names when the labels fit EMNIST (10 or 62 classes), else numbers."""
    if max_label < 10:
        return list(EMNIST_CHARACTERS[:10])
    if max_label < len(EMNIST_CHARACTERS):
        return list(EMNIST_CHARACTERS)
    return [str(i) for i in range(max_label + 1)]


def import_emnist_h5(
    h5_path: str | os.PathLike,
    *,
    skip_bad: bool = False,
    invert: bool = True,
    progress: bool = True,
) -> tuple[UserDataset, ImportReport]:
    """Import a TFF federated EMNIST file; writers become users.

    Labels keep EMNIST's class numbers with the characters as names, so the paper's
    protocol is ``eval_labels=range(36, 62)``. Pixels become ``round(255 * (1 - p))``
    (``invert``) or ``round(255 * p)``. A writer with a missing or mis-shaped
    ``pixels``/``label`` dataset, no examples, negative labels or pixels outside [0, 1]
    raises :class:`DataError` naming the writer; with ``skip_bad`` the writer is skipped
    and its examples counted as skipped.
    """
    path = Path(h5_path)
    bad = BadRows(skip_bad)
    report = bad.report
    with _open(path) as f:
        examples = f.get("examples")
        if not isinstance(examples, h5py.Group):
            raise DataError(
                f"{path}: no 'examples' group; expected TFF's federated EMNIST layout "
                "examples/<writer>/pixels and examples/<writer>/label"
            )
        writers = list(examples.keys())
        if not writers:
            raise DataError(f"{path}: the 'examples' group holds no writers")

        # Pass 1: validate shapes and labels, so the image array is allocated once.
        good: list[tuple[str, np.ndarray]] = []
        hw: tuple[int, int] | None = None
        for name in writers:
            where = f"{path} writer {name!r} (examples/{name})"
            g = examples[name]
            if not isinstance(g, h5py.Group):
                report.rows_total += len(g) if isinstance(g, h5py.Dataset) and g.ndim else 0
                bad.bad(where, "is not a group holding 'pixels' and 'label'")
                continue
            pix, lab = g.get("pixels"), g.get("label")
            n = _length(pix) if _length(pix) is not None else (_length(lab) or 0)
            report.rows_total += n
            problem = _check_writer(pix, lab, hw)
            if problem is None:
                labels = np.asarray(lab[()])
                if labels.dtype.kind not in "iu":
                    problem = f"label has dtype {labels.dtype}, expected integers"
                elif len(labels) and labels.min() < 0:
                    problem = f"negative label {int(labels.min())}"
            if problem is not None:
                bad.bad(where, problem, rows=n)
                continue
            if hw is None:
                hw = (pix.shape[1], pix.shape[2])
            good.append((name, where, labels.astype(np.int64)))
        if not good:
            raise DataError(
                f"{path}: no writer could be imported ({report.rows_skipped} rows skipped)"
            )

        # Pass 2: decode pixels writer by writer into one preallocated array.
        assert hw is not None
        total = sum(len(lab) for _, _, lab in good)
        images = np.empty((total, hw[0], hw[1], 1), dtype=np.uint8)
        labels_out = np.empty(total, dtype=np.int64)
        users_out = np.empty(total, dtype=np.int64)
        user_names: list[str] = []
        w = 0
        desc = f"importing {path.name}"
        with tqdm(total=total, desc=desc, unit="img", disable=not progress) as bar:
            for name, where, labels in good:
                n = len(labels)
                pixels = examples[name]["pixels"][()]
                converted = _to_uint8(pixels, invert)
                bar.update(n)
                if converted is None:
                    bad.bad(where, "pixels are not finite values in [0, 1]", rows=n)
                    continue
                images[w : w + n, :, :, 0] = converted
                labels_out[w : w + n] = labels
                users_out[w : w + n] = len(user_names)
                user_names.append(name)
                w += n
    report.rows_imported = w
    if w == 0:
        raise DataError(f"{path}: no writer could be imported ({report.rows_skipped} rows skipped)")
    source = {
        "format": "emnist_h5",
        "path": str(path.resolve()),
        "inverted": bool(invert),
        "rows_skipped": report.rows_skipped,
    }
    ds = assemble(
        images[:w],
        labels_out[:w],
        users_out[:w],
        user_names,
        label_names_for(int(labels_out[:w].max())),
        source,
        keep_all_labels=True,
    )
    return ds, report


def _length(d: object) -> int | None:
    if isinstance(d, h5py.Dataset) and d.ndim >= 1:
        return int(d.shape[0])
    return None


def _check_writer(pix: object, lab: object, hw: tuple[int, int] | None) -> str | None:
    if not isinstance(pix, h5py.Dataset):
        return "missing 'pixels' dataset"
    if not isinstance(lab, h5py.Dataset):
        return "missing 'label' dataset"
    shape = pix.shape
    if len(shape) == 4 and shape[3] == 1:
        shape = shape[:3]
    if len(shape) != 3:
        return f"pixels has shape {pix.shape}, expected (n, 28, 28)"
    if hw is not None and shape[1:] != hw:
        return f"pixels are {shape[1]}x{shape[2]} but earlier writers' are {hw[0]}x{hw[1]}"
    if lab.shape != (shape[0],):
        return f"label has shape {lab.shape}, expected ({shape[0]},) to match pixels"
    if shape[0] == 0:
        return "writer has no examples (empty user)"
    return None


def _to_uint8(pixels: np.ndarray, invert: bool) -> np.ndarray | None:
    """Pixels in [0, 1] (or uint8) -> uint8 (n, H, W); None when out of range."""
    if pixels.ndim == 4:
        pixels = pixels[..., 0]
    if pixels.dtype == np.uint8:
        return 255 - pixels if invert else pixels
    p = np.asarray(pixels, dtype=np.float32)
    tol = 1e-3
    if not np.all(np.isfinite(p)) or p.min() < -tol or p.max() > 1 + tol:
        return None
    if invert:
        p = 1.0 - p
    return np.rint(np.clip(p, 0.0, 1.0) * 255.0).astype(np.uint8)

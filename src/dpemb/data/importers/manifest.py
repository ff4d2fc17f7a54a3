"""Importer for a CSV manifest with columns ``path,user,label``."""

from __future__ import annotations

import os
from pathlib import Path

from dpemb.data.dataset import UserDataset
from dpemb.data.images import DEFAULT_IMAGE_SIZE
from dpemb.data.importers._common import BadRows, ImportReport, Row, clean, pack_rows, resolve
from dpemb.data.importers._csv import read_csv_rows

COLUMNS = ("path", "user", "label")


def import_manifest(
    csv_path: str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    image_size: int = DEFAULT_IMAGE_SIZE,
    channels: int = 1,
    skip_bad: bool = False,
    strict_geometry: bool = False,
    progress: bool = True,
) -> tuple[UserDataset, ImportReport]:
    """Import the images listed in a CSV manifest (columns ``path,user,label``).

    Relative paths are taken from ``root`` (default: the CSV's folder). Each image
    is resized (shorter side) and centre-cropped to ``image_size`` with ``channels``
    1 (grey) or 3 (RGB). Labels are identities shared across users by name.
    A missing file, a corrupt image, a missing cell or a ragged row raises
    :class:`DataError` naming the line; with ``skip_bad`` such rows are skipped and
    counted in the returned :class:`ImportReport`.
    """
    csv_path = Path(csv_path)
    base = Path(root) if root is not None else csv_path.parent
    report = ImportReport()
    bad = BadRows(report, skip_bad, strict_geometry)
    rows: list[Row] = []
    for line, cells, extra in read_csv_rows(csv_path, COLUMNS):
        report.rows_total += 1
        where = f"{csv_path} line {line}"
        if clean(cells["user"]):  # named even if the row is bad: a user left without rows is reported
            report.users_listed.add(clean(cells["user"]))
        if extra is not None:
            bad.bad(where, f"{len(extra)} more cell(s) than the header; quote values with commas")
            continue
        values = {c: clean(cells[c]) for c in COLUMNS}
        empty = [c for c in COLUMNS if not values[c]]
        if empty:
            bad.bad(where, f"missing {' and '.join(empty)}")
            continue
        path = resolve(values["path"], base)
        if not path.is_file():
            bad.bad(where, f"image file {path} not found")
            continue
        rows.append(Row(where, path, values["user"], values["label"]))
    source = {"format": "manifest", "path": str(csv_path.resolve()), "root": str(base.resolve())}
    ds = pack_rows(rows, image_size=image_size, channels=channels, bad=bad, source=source, progress=progress,
                   name=str(csv_path))
    return ds, report

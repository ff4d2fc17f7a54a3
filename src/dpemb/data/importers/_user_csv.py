"""Shared reader for federated split CSVs (``user_id,image_id,class``) + image folder.

Used by the GLDv2 and iNaturalist importers. An image id is looked up as
``<image_dir>/<id>.jpg`` (flat), then GLDv2's nested ``<image_dir>/<a>/<b>/<c>/<id>.jpg``
(a, b, c the first three characters of the id), then anywhere below ``image_dir``
(iNaturalist 2017 nests images by super-category and species; that index is built
once, on the first miss).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from dpemb.data.dataset import UserDataset
from dpemb.data.images import is_image_file
from dpemb.data.importers._common import BadRows, ImportReport, Row, clean, pack_rows
from dpemb.data.importers._csv import read_csv_rows
from dpemb.data.importers._folders import check_dir

#: Values of the user column that mean "not in this split" (TFF's iNaturalist CSV).
NOT_IN_SPLIT = frozenset({"NA", "N/A", "nan"})


class ImageLocator:
    """Finds the file of an image id below ``image_dir``."""

    def __init__(self, image_dir: Path, progress: bool = True) -> None:
        self.image_dir = image_dir
        self.progress = progress
        self._index: dict[str, Path] | None = None

    def find(self, image_id: str) -> Path | None:
        """The image file for ``image_id``, or None when there is none."""
        candidates = []
        if is_image_file(image_id):  # the id already names a file (relative path)
            candidates.append(self.image_dir / image_id)
        name = image_id + ".jpg"
        candidates.append(self.image_dir / name)
        if len(image_id) >= 3 and "/" not in image_id:
            candidates.append(self.image_dir / image_id[0] / image_id[1] / image_id[2] / name)
        for c in candidates:
            if c.is_file():
                return c
        return self._indexed().get(Path(image_id).stem if is_image_file(image_id) else image_id)

    def _indexed(self) -> dict[str, Path]:
        if self._index is None:
            index: dict[str, Path] = {}
            walk = tqdm(
                os.walk(self.image_dir),
                desc=f"indexing {self.image_dir.name}",
                unit="dir",
                disable=not self.progress,
            )
            for dirpath, dirnames, filenames in walk:
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for f in sorted(filenames):
                    if is_image_file(f):
                        index.setdefault(Path(f).stem, Path(dirpath) / f)
            self._index = index
        return self._index


def import_user_image_csv(
    csv_path: str | os.PathLike,
    image_dir: str | os.PathLike,
    *,
    fmt: str,
    user_columns: Sequence[str],
    image_size: int,
    channels: int,
    skip_bad: bool,
    strict_geometry: bool = False,
    progress: bool,
) -> tuple[UserDataset, ImportReport]:
    """Import a ``<user>,image_id,class`` CSV whose images live under ``image_dir``."""
    csv_path = Path(csv_path)
    image_root = check_dir(image_dir, "image")
    report = ImportReport()
    bad = BadRows(report, skip_bad, strict_geometry)
    locator = ImageLocator(image_root, progress=progress)
    user_key = user_columns[0]
    rows: list[Row] = []
    outside = 0
    for line, cells, extra in read_csv_rows(csv_path, [tuple(user_columns), "image_id", "class"]):
        user = clean(cells[user_key])
        if user in NOT_IN_SPLIT:
            outside += 1
            continue
        report.rows_total += 1
        if user:
            report.users_listed.add(user)
        where = f"{csv_path} line {line}"
        if extra is not None:
            bad.bad(where, f"{len(extra)} more cell(s) than the header")
            continue
        image_id, label = clean(cells["image_id"]), clean(cells["class"])
        empty = [n for n, v in (("user", user), ("image_id", image_id), ("class", label)) if not v]
        if empty:
            bad.bad(where, f"missing {' and '.join(empty)}")
            continue
        path = locator.find(image_id)
        if path is None:
            bad.bad(
                where,
                f"image {image_id!r} not found under {image_root} (looked for {image_id}.jpg "
                "flat, nested <a>/<b>/<c>/, and anywhere below)",
            )
            continue
        rows.append(Row(where, path, user, label))
    source = {"format": fmt, "path": str(csv_path.resolve()), "image_dir": str(image_root.resolve()),
              **({"rows_outside_split": outside} if outside else {})}
    ds = pack_rows(rows, image_size=image_size, channels=channels, bad=bad, source=source, progress=progress,
                   name=str(csv_path))
    return ds, report

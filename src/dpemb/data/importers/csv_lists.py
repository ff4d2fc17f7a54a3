"""Importers for CSV lists of images: a manifest ``path,user,label``, and federated split
CSVs ``user_id,image_id,class`` with an image folder (GLDv2, iNaturalist)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

from tqdm.auto import tqdm

from dpemb.data.dataset import UserDataset
from dpemb.data.images import DEFAULT_IMAGE_SIZE, is_image_file
from dpemb.data.importers._common import (
    BadRows,
    ImportReport,
    Row,
    check_dir,
    clean,
    pack_rows,
    read_csv_rows,
    resolve,
)

COLUMNS = ("path", "user", "label")

#: Values of the user column that mean "not in this split" (TFF's iNaturalist CSV).
NOT_IN_SPLIT = frozenset({"NA", "N/A", "nan"})

#: Accepted names of iNaturalist's user column: the generic one, then TFF's USER_120K split.
USER_COLUMNS = ("user_id", "user_120k")


def _listed_rows(
    csv_path: Path,
    columns: dict[str, str | tuple[str, ...]],
    label: str,
    bad: BadRows,
    find: Callable[[dict[str, str]], Path | str],
    *,
    extra_hint: str = "",
    outside: frozenset[str] = frozenset(),
) -> tuple[list[Row], int]:
    """The rows of ``csv_path`` and how many were outside the split. ``columns``: the name
    messages give a column (``user``, ``label`` among them) -> its header name or
    alternatives. A row with more cells than the header, an empty cell, or whose image
    ``find`` does not give (it says why instead) is a bad row; a row whose user is in
    ``outside`` is only counted."""
    keys = {name: spec if isinstance(spec, str) else spec[0] for name, spec in columns.items()}
    report = bad.report
    rows: list[Row] = []
    left_out = 0
    for line, cells, extra in read_csv_rows(csv_path, list(columns.values())):
        values = {name: clean(cells[key]) for name, key in keys.items()}
        if values["user"] in outside:
            left_out += 1
            continue
        report.rows_total += 1
        if values["user"]:  # named even if the row is bad: a user left without rows is reported
            report.users_listed.add(values["user"])
        where = f"{csv_path} line {line}"
        if extra is not None:
            bad.bad(where, f"{len(extra)} more cell(s) than the header{extra_hint}")
            continue
        empty = [name for name, value in values.items() if not value]
        if empty:
            bad.bad(where, f"missing {' and '.join(empty)}")
            continue
        found = find(values)
        if isinstance(found, str):
            bad.bad(where, found)
            continue
        rows.append(Row(where, found, values["user"], values[label]))
    return rows, left_out


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

    Paths, identities and geometry: docs/DATA.md, "`manifest`" and "Image geometry".
    A missing file, a corrupt image, a missing cell or a ragged row raises
    :class:`DataError` naming the line; with ``skip_bad`` such rows are skipped and
    counted in the returned :class:`ImportReport`.
    """
    csv_path = Path(csv_path)
    base = Path(root) if root is not None else csv_path.parent

    def find(values: dict[str, str]) -> Path | str:
        path = resolve(values["path"], base)
        return path if path.is_file() else f"image file {path} not found"

    bad = BadRows(skip_bad, strict_geometry)
    rows, _ = _listed_rows(csv_path, {c: c for c in COLUMNS}, "label", bad, find,
                           extra_hint="; quote values with commas")
    source = {"format": "manifest", "path": str(csv_path.resolve()), "root": str(base.resolve())}
    return pack_rows(rows, image_size=image_size, channels=channels, bad=bad, source=source,
                     progress=progress, name=str(csv_path))


class ImageLocator:
    """Finds the file of an image id below ``image_dir``: ``<image_dir>/<id>.jpg`` (flat),
    then GLDv2's nested ``<image_dir>/<a>/<b>/<c>/<id>.jpg`` (a, b, c the first three
    characters of the id), then anywhere below ``image_dir`` (iNaturalist 2017 nests
    images by super-category and species; that index is built once, on the first miss)."""

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


def _import_split_csv(
    csv_path: str | os.PathLike,
    image_dir: str | os.PathLike,
    fmt: str,
    user_columns: Sequence[str],
    *,
    image_size: int, channels: int, skip_bad: bool, strict_geometry: bool, progress: bool,
) -> tuple[UserDataset, ImportReport]:
    """Import a ``<user>,image_id,class`` CSV whose images live under ``image_dir``."""
    csv_path = Path(csv_path)
    image_root = check_dir(image_dir, "image")
    locator = ImageLocator(image_root, progress=progress)

    def find(values: dict[str, str]) -> Path | str:
        image_id = values["image_id"]
        return locator.find(image_id) or (
            f"image {image_id!r} not found under {image_root} (looked for {image_id}.jpg "
            "flat, nested <a>/<b>/<c>/, and anywhere below)"
        )

    bad = BadRows(skip_bad, strict_geometry)
    columns = {"user": tuple(user_columns), "image_id": "image_id", "class": "class"}
    rows, outside = _listed_rows(csv_path, columns, "class", bad, find, outside=NOT_IN_SPLIT)
    source = {"format": fmt, "path": str(csv_path.resolve()),
              "image_dir": str(image_root.resolve()),
              **({"rows_outside_split": outside} if outside else {})}
    return pack_rows(rows, image_size=image_size, channels=channels, bad=bad, source=source,
                     progress=progress, name=str(csv_path))


def import_gldv2(
    csv_path: str | os.PathLike,
    image_dir: str | os.PathLike,
    *,
    image_size: int = 64,
    channels: int = 3,
    skip_bad: bool = False,
    strict_geometry: bool = False,
    progress: bool = True,
) -> tuple[UserDataset, ImportReport]:
    """Import a GLDv2 federated split CSV (columns ``user_id,image_id,class``): users are
    photographers, identities landmarks, images found by :class:`ImageLocator`
    (docs/DATA.md, "`gldv2`"). A missing image, corrupt file or missing cell raises
    :class:`DataError` naming the CSV line; ``skip_bad`` skips and reports them.
    """
    return _import_split_csv(csv_path, image_dir, "gldv2", ("user_id",), image_size=image_size,
                             channels=channels, skip_bad=skip_bad, strict_geometry=strict_geometry,
                             progress=progress)


def import_inat(
    csv_path: str | os.PathLike,
    image_dir: str | os.PathLike,
    *,
    image_size: int = 64,
    channels: int = 3,
    skip_bad: bool = False,
    strict_geometry: bool = False,
    progress: bool = True,
) -> tuple[UserDataset, ImportReport]:
    """Import an iNaturalist user-split CSV (columns ``user_id,image_id,class``; TFF's
    ``user_120k`` is accepted for ``user_id``; rows of user ``NA`` are outside the split,
    ignored and counted in ``source``): docs/DATA.md, "`inat`". Species are the
    identities; images are found as by :class:`ImageLocator`.
    """
    return _import_split_csv(csv_path, image_dir, "inat", USER_COLUMNS, image_size=image_size,
                             channels=channels, skip_bad=skip_bad, strict_geometry=strict_geometry,
                             progress=progress)

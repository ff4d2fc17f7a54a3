"""Importers for image folder trees: ``root/<user>/<label>/<image>`` and DigiFace-1M's
``<identity>/<image>.png``."""

from __future__ import annotations

import os
from pathlib import Path

from dpemb.data.dataset import UserDataset
from dpemb.data.images import DEFAULT_IMAGE_SIZE
from dpemb.data.importers._common import BadRows, ImportReport, Row, check_dir, list_dir, pack_rows


def _subdirs(folder: Path, bad: BadRows, stray_image: str) -> list[Path]:
    """The sub-folders of ``folder``; each image directly in it is a bad row."""
    dirs, stray = list_dir(folder)
    for f in stray:
        bad.report.rows_total += 1
        bad.bad(str(f), stray_image)
    return dirs


def _images(folder: Path, report: ImportReport, deeper: str) -> list[Path]:
    """The images of ``folder`` (counted as rows); a sub-folder is ignored and reported."""
    dirs, images = list_dir(folder)
    for d in dirs:
        report.problem(f"{d}: folder {deeper} ignored")
    report.rows_total += len(images)
    return images


def import_tree(
    root: str | os.PathLike,
    *,
    image_size: int = DEFAULT_IMAGE_SIZE,
    channels: int = 1,
    skip_bad: bool = False,
    strict_geometry: bool = False,
    progress: bool = True,
) -> tuple[UserDataset, ImportReport]:
    """Import ``root/<user>/<label>/<image>``: one folder per user, one per identity.

    Identities are shared across users by folder name; non-image files and hidden entries
    are ignored (docs/DATA.md, "`tree`"). An image outside a ``<user>/<label>`` folder,
    a user folder without images, or a corrupt image raises :class:`DataError`
    naming the path; with ``skip_bad`` they are skipped and reported.
    """
    root_path = check_dir(root, "dataset root")
    bad = BadRows(skip_bad, strict_geometry)
    rows: list[Row] = []
    for user_dir in _subdirs(root_path, bad, "image directly under the root; expected "
                             "root/<user>/<label>/<image>"):
        bad.report.users_listed.add(user_dir.name)
        before = len(rows)
        for label_dir in _subdirs(user_dir, bad, "image directly in a user folder; expected "
                                  "<user>/<label>/<image>"):
            rows += [Row(str(img), img, user_dir.name, label_dir.name)
                     for img in _images(label_dir, bad.report, "below a label folder")]
        if len(rows) == before:
            bad.bad(
                str(user_dir),
                f"user {user_dir.name!r} has no images (expected {user_dir}/<label>/<image>)",
                rows=0,
            )
    source = {"format": "tree", "path": str(root_path.resolve())}
    return pack_rows(rows, image_size=image_size, channels=channels, bad=bad, source=source,
                     progress=progress, name=str(root_path))


def import_digiface(
    root: str | os.PathLike,
    *,
    image_size: int = 64,
    channels: int = 3,
    skip_bad: bool = False,
    strict_geometry: bool = False,
    progress: bool = True,
) -> tuple[UserDataset, ImportReport]:
    """Import DigiFace-1M: one folder per synthetic identity, each identity one user
    (docs/DATA.md, "`digiface`"). An image outside an identity folder, an empty identity
    folder or a corrupt image raises :class:`DataError` naming the path; ``skip_bad``
    skips and reports them.
    """
    root_path = check_dir(root, "DigiFace root")
    bad = BadRows(skip_bad, strict_geometry)
    rows: list[Row] = []
    stray = "image directly under the root; expected <identity>/<image>.png"
    for d in _subdirs(root_path, bad, stray):
        bad.report.users_listed.add(d.name)
        images = _images(d, bad.report, "inside an identity folder")
        if not images:
            bad.bad(str(d), f"identity {d.name!r} has no images", rows=0)
        rows += [Row(str(img), img, d.name, d.name) for img in images]
    source = {"format": "digiface", "path": str(root_path.resolve())}
    return pack_rows(rows, image_size=image_size, channels=channels, bad=bad, source=source,
                     progress=progress, name=str(root_path))

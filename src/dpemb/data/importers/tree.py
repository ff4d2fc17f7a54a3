"""Importer for a folder tree ``root/<user>/<label>/<image>``."""

from __future__ import annotations

import os

from dpemb.data.dataset import UserDataset
from dpemb.data.images import DEFAULT_IMAGE_SIZE
from dpemb.data.importers._common import BadRows, ImportReport, Row, pack_rows
from dpemb.data.importers._folders import check_dir, list_dir


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

    Identities are shared across users by folder name (``alice/A`` and ``bob/A`` are
    the same identity). Files whose names do not end in an image extension are
    ignored; hidden entries are ignored. An image outside a ``<user>/<label>`` folder,
    a user folder without images, or a corrupt image raises :class:`DataError`
    naming the path; with ``skip_bad`` they are skipped and reported.
    """
    root_path = check_dir(root, "dataset root")
    report = ImportReport()
    bad = BadRows(report, skip_bad, strict_geometry)
    rows: list[Row] = []
    user_dirs, stray, _ = list_dir(root_path)
    for f in stray:
        report.rows_total += 1
        bad.bad(str(f), "image directly under the root; expected root/<user>/<label>/<image>")
    for user_dir in user_dirs:
        report.users_listed.add(user_dir.name)
        label_dirs, stray, _ = list_dir(user_dir)
        for f in stray:
            report.rows_total += 1
            bad.bad(str(f), "image directly in a user folder; expected <user>/<label>/<image>")
        found = 0
        for label_dir in label_dirs:
            deeper, images, _ = list_dir(label_dir)
            for d in deeper:
                report.problem(f"{d}: folder below a label folder ignored")
            for img in images:
                report.rows_total += 1
                rows.append(Row(str(img), img, user_dir.name, label_dir.name))
                found += 1
        if not found:
            bad.bad(
                str(user_dir),
                f"user {user_dir.name!r} has no images (expected {user_dir}/<label>/<image>)",
                rows=0,
            )
    source = {"format": "tree", "path": str(root_path.resolve())}
    ds = pack_rows(rows, image_size=image_size, channels=channels, bad=bad, source=source, progress=progress,
                   name=str(root_path))
    return ds, report

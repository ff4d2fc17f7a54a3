"""Importer for the DigiFace-1M folder layout ``<identity>/<image>.png``."""

from __future__ import annotations

import os

from dpemb.data.dataset import UserDataset
from dpemb.data.importers._common import BadRows, ImportReport, Row, pack_rows
from dpemb.data.importers._folders import check_dir, list_dir


def import_digiface(
    root: str | os.PathLike,
    *,
    image_size: int = 64,
    channels: int = 3,
    skip_bad: bool = False,
    strict_geometry: bool = False,
    progress: bool = True,
) -> tuple[UserDataset, ImportReport]:
    """Import DigiFace-1M: one folder per synthetic identity, holding its images.

    Each identity is one user (the paper's face regime: a person holds photos of
    themselves), so users and identities coincide. The archives of the release can
    be extracted into the same ``root``. An image outside an identity folder, an
    empty identity folder or a corrupt image raises :class:`DataError` naming the
    path; ``skip_bad`` skips and reports them.
    """
    root_path = check_dir(root, "DigiFace root")
    report = ImportReport()
    bad = BadRows(report, skip_bad, strict_geometry)
    rows: list[Row] = []
    identity_dirs, stray, _ = list_dir(root_path)
    for f in stray:
        report.rows_total += 1
        bad.bad(str(f), "image directly under the root; expected <identity>/<image>.png")
    for d in identity_dirs:
        report.users_listed.add(d.name)
        deeper, images, _ = list_dir(d)
        for sub in deeper:
            report.problem(f"{sub}: folder inside an identity folder ignored")
        if not images:
            bad.bad(str(d), f"identity {d.name!r} has no images", rows=0)
            continue
        for img in images:
            report.rows_total += 1
            rows.append(Row(str(img), img, d.name, d.name))
    source = {"format": "digiface", "path": str(root_path.resolve())}
    ds = pack_rows(rows, image_size=image_size, channels=channels, bad=bad, source=source, progress=progress,
                   name=str(root_path))
    return ds, report

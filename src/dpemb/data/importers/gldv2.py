"""Importer for Google Landmarks v2 federated split CSVs (TFF's GLDv2 user split)."""

from __future__ import annotations

import os

from dpemb.data.dataset import UserDataset
from dpemb.data.importers._common import ImportReport
from dpemb.data.importers._user_csv import import_user_image_csv


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
    """Import a GLDv2 federated split CSV (columns ``user_id,image_id,class``).

    Users are the photographers (``user_id``), identities the landmarks (``class``).
    Images are ``<image_dir>/<image_id>.jpg`` or GLDv2's nested
    ``<image_dir>/<a>/<b>/<c>/<image_id>.jpg`` (a, b, c: the id's first three
    characters). A missing image, corrupt file or missing cell raises
    :class:`DataError` naming the CSV line; ``skip_bad`` skips and reports them.
    """
    return import_user_image_csv(
        csv_path,
        image_dir,
        fmt="gldv2",
        user_columns=("user_id",),
        image_size=image_size,
        channels=channels,
        skip_bad=skip_bad,
        strict_geometry=strict_geometry,
        progress=progress,
    )

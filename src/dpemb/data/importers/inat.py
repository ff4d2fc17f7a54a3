"""Importer for the iNaturalist user-split CSV (iNaturalist-User-120k, Hsu et al. 2020)."""

from __future__ import annotations

import os

from dpemb.data.dataset import UserDataset
from dpemb.data.importers._common import ImportReport
from dpemb.data.importers._user_csv import import_user_image_csv

#: Accepted names of the user column: the generic one, then TFF's USER_120K split.
USER_COLUMNS = ("user_id", "user_120k")


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
    """Import an iNaturalist user-split CSV (columns ``user_id,image_id,class``).

    TFF's ``iNaturalist_train.csv`` names the user column after the split
    (``user_120k``, ``geo_100``, ...): ``user_120k`` is accepted when ``user_id`` is
    absent. Rows whose user is ``NA`` are
    outside the split and ignored (their count is kept in ``source``). Images are
    looked up flat, nested GLDv2-style, then anywhere below ``image_dir`` (the
    iNaturalist 2017 archive nests them as ``<super-category>/<species>/<id>.jpg``).
    Species (``class``) are the identities.
    """
    return import_user_image_csv(
        csv_path,
        image_dir,
        fmt="inat",
        user_columns=USER_COLUMNS,
        image_size=image_size,
        channels=channels,
        skip_bad=skip_bad,
        strict_geometry=strict_geometry,
        progress=progress,
    )

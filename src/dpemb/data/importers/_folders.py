"""Listing image folders (sorted, hidden entries ignored)."""

from __future__ import annotations

import os
from pathlib import Path

from dpemb.data.dataset import DataError
from dpemb.data.images import is_image_file


def check_dir(root: str | os.PathLike, what: str) -> Path:
    """``root`` as a Path; :class:`DataError` unless it is an existing directory."""
    path = Path(root)
    if not path.is_dir():
        raise DataError(f"{path}: {what} folder not found (or not a folder)")
    return path


def list_dir(folder: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """(sub-folders, image files, other files) of ``folder``, each sorted by name."""
    dirs: list[Path] = []
    images: list[Path] = []
    others: list[Path] = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        raise DataError(f"{folder}: cannot list folder ({e})") from e
    for entry in entries:
        if entry.name.startswith("."):
            continue
        p = Path(entry.path)
        if entry.is_dir():
            dirs.append(p)
        elif is_image_file(entry.name):
            images.append(p)
        else:
            others.append(p)
    return dirs, images, others

"""Readers of verification protocol files: pair lists and IJB-style templates.

Pair lists (`dpemb eval --pairs`: LFW's ``pairs.txt`` or a CSV ``path1,path2,same[,fold]``;
without a ``fold`` column the folds come from :func:`dpemb.metrics.pairs.assign_folds` and
``folds_given`` is False) and templates (`dpemb eval --templates T --template-pairs P`):
the formats are in docs/EVALUATION.md, "File formats" of "Pair lists" and of "Templates".
Every error names the file and line and what to do.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from dpemb.data.dataset import DataError

__all__ = ["ImageTable", "PairList", "TemplateProtocol", "read_pairs", "read_templates"]


@dataclass
class ImageTable:
    """Distinct image paths, in first-use order, and where each was first named."""

    paths: list[Path] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    _index: dict[Path, int] = field(default_factory=dict)

    def add(self, path: Path, where: str) -> int:
        if path not in self._index:
            self._index[path] = len(self.paths)
            self.paths.append(path)
            self.where.append(where)
        return self._index[path]


@dataclass
class PairList:
    """Pairs of images: rows ``first[k]``, ``second[k]`` of ``images``, genuine when
    ``same[k]``, in fold ``folds[k]`` (None when the file gave no folds)."""

    images: ImageTable
    first: np.ndarray
    second: np.ndarray
    same: np.ndarray
    folds: np.ndarray | None
    format: str


@dataclass
class TemplateProtocol:
    """Images with their template (0..T-1) and media ids (None without a ``media``
    column), template names, and the template pairs to score."""

    images: ImageTable
    image_of: np.ndarray  # per (template, image) line: row of `images`
    template_of: np.ndarray  # per line: template index
    media_of: np.ndarray | None
    template_names: list[str]
    first: np.ndarray
    second: np.ndarray
    same: np.ndarray


def _resolve(root: Path, rel: str) -> Path:
    p = Path(rel)
    return p if p.is_absolute() else root / p


def _same(value: str, where: str) -> bool:
    v = value.strip()
    if v not in ("0", "1"):
        raise DataError(f"{where}: same must be 1 (genuine) or 0 (impostor); got {value!r}")
    return v == "1"


def _csv_rows(
    path: Path, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> Iterator[tuple[str, dict[str, str | None]]]:
    """``(where, row)`` for each line of the CSV ``path`` after its header, which must name
    ``required``; a row holds a key for every column of the header."""
    if not path.is_file():
        raise DataError(f"{path}: file not found; check the path")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        cols = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in required if c not in cols]
        if missing:
            raise DataError(
                f"{path} line 1: the header must name {','.join(required)}"
                + (f" (optionally {','.join(optional)})" if optional else "")
                + f"; missing {','.join(missing)} (header: {','.join(cols) or 'empty'})"
            )
        reader.fieldnames = cols
        for row in reader:
            yield f"{path} line {reader.line_num}", row


def _field(row: dict, name: str, where: str) -> str:
    v = row.get(name)
    if v is None or not v.strip():
        raise DataError(f"{where}: empty {name}; fill it in or remove the line")
    return v.strip()


def _read_lfw(path: Path, root: Path, lines: list[str]) -> PairList:
    head = lines[0].split()
    k, n = int(head[0]), int(head[1])
    if k < 2 or n < 1:
        raise DataError(f"{path} line 1: header {lines[0].strip()!r} must be 'FOLDS PAIRS_PER_CLASS', "
                        "folds >= 2 (LFW: '10 300')")
    body = [(i + 2, ln) for i, ln in enumerate(lines[1:]) if ln.strip()]
    if len(body) != 2 * k * n:
        raise DataError(f"{path}: the header '{k} {n}' promises {2 * k * n} pair lines "
                        f"({k} folds x ({n} matched + {n} mismatched)); found {len(body)}")
    images = ImageTable()
    pairs: list[tuple[int, int, bool, int]] = []

    def image(name: str, num: str, where: str) -> int:
        try:
            number = int(num)
        except ValueError:
            raise DataError(f"{where}: image number {num!r} is not an integer") from None
        return images.add(root / name / f"{name}_{number:04d}.jpg", where)

    for r, (line_no, ln) in enumerate(body):
        where = f"{path} line {line_no}"
        parts = ln.split()
        fold, matched = r // (2 * n), (r % (2 * n)) < n
        if matched and len(parts) == 3:
            a, b = image(parts[0], parts[1], where), image(parts[0], parts[2], where)
        elif not matched and len(parts) == 4:
            a, b = image(parts[0], parts[1], where), image(parts[2], parts[3], where)
        else:
            want = "'name n1 n2' (matched)" if matched else "'name1 n1 name2 n2' (mismatched)"
            raise DataError(f"{where}: expected {want} at this position of fold {fold + 1}; got {ln.strip()!r}")
        pairs.append((a, b, matched, fold))
    first, second, same, folds = (np.array(column) for column in zip(*pairs))
    return PairList(images, first, second, same, folds.astype(np.int64), "lfw")


def _read_csv_pairs(path: Path, root: Path) -> PairList:
    images = ImageTable()
    first, second, same, folds = [], [], [], []
    for where, row in _csv_rows(path, ("path1", "path2", "same"), ("fold",)):
        first.append(images.add(_resolve(root, _field(row, "path1", where)), where))
        second.append(images.add(_resolve(root, _field(row, "path2", where)), where))
        same.append(_same(_field(row, "same", where), where))
        if "fold" in row:
            try:
                folds.append(int(_field(row, "fold", where)))
            except ValueError:
                raise DataError(f"{where}: fold {row['fold']!r} is not an integer") from None
    if not first:
        raise DataError(f"{path}: no pairs after the header")
    return PairList(images, np.array(first), np.array(second), np.array(same, dtype=bool),
                    np.array(folds, dtype=np.int64) if folds else None, "csv")


def read_pairs(path: str | os.PathLike, images_root: str | os.PathLike) -> PairList:
    """Read a pair list: LFW ``pairs.txt`` when the first line is two integers, else
    a CSV with a header (see the module docstring)."""
    path, root = Path(path), Path(images_root)
    if not path.is_file():
        raise DataError(f"{path}: file not found; check the path")
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if not lines:
        raise DataError(f"{path}: empty file; see docs/EVALUATION.md for the pair-list formats")
    head = lines[0].split()
    if len(head) == 2 and all(h.isdigit() for h in head):
        return _read_lfw(path, root, lines)
    return _read_csv_pairs(path, root)


def read_templates(
    templates: str | os.PathLike, pairs: str | os.PathLike, images_root: str | os.PathLike
) -> TemplateProtocol:
    """Read a templates CSV and a template-pairs CSV (see the module docstring)."""
    tpath, ppath, root = Path(templates), Path(pairs), Path(images_root)
    images = ImageTable()
    names: dict[str, int] = {}
    subject: dict[str, str] = {}
    image_of, template_of, media_raw = [], [], []
    for where, row in _csv_rows(tpath, ("template_id", "path"), ("subject", "media")):
        tid = _field(row, "template_id", where)
        t = names.setdefault(tid, len(names))
        image_of.append(images.add(_resolve(root, _field(row, "path", where)), where))
        template_of.append(t)
        if "media" in row:
            media_raw.append(_field(row, "media", where))
        if "subject" in row:
            sub = _field(row, "subject", where)
            if subject.setdefault(tid, sub) != sub:
                raise DataError(f"{where}: template {tid} has subject {subject[tid]} on an earlier "
                                f"line and {sub} here; a template shows one subject")
    if not names:
        raise DataError(f"{tpath}: no templates after the header")
    pairs: list[tuple[int, int, bool]] = []
    for where, row in _csv_rows(ppath, ("template1", "template2", "same")):
        a, b = _field(row, "template1", where), _field(row, "template2", where)
        for tid in (a, b):
            if tid not in names:
                raise DataError(f"{where}: template {tid} is not in {tpath}; add its images there "
                                "or remove the line")
        s = _same(_field(row, "same", where), where)
        if a in subject and b in subject and (subject[a] == subject[b]) != s:
            raise DataError(f"{where}: same={int(s)} but {tpath} gives subjects {subject[a]} and "
                            f"{subject[b]}; correct one of the files")
        pairs.append((names[a], names[b], s))
    if not pairs:
        raise DataError(f"{ppath}: no template pairs after the header")
    media = None
    if media_raw:
        _, media = np.unique(np.array(media_raw), return_inverse=True)
        media = media.reshape(-1).astype(np.int64)
    first, second, same = (np.array(column) for column in zip(*pairs))
    return TemplateProtocol(images, np.array(image_of), np.array(template_of), media, list(names),
                            first, second, same)

"""Shared machinery of the importers: the report, bad-row handling, reading CSV files
and image folders, packing.

File-based importers first list their rows (``_Row``: where it came from, the image
file, its user and label), then :func:`pack_rows` decodes the images straight into
one preallocated uint8 array in user order, so decoded pixels are held once.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.images import check_geometry, decode_image_geometry, is_image_file

#: How many problems an :class:`ImportReport` keeps verbatim (all are counted).
MAX_PROBLEMS = 20

#: Image decoding threads (capped by the CPU count) and images decoded per batch.
DECODE_THREADS = 4
DECODE_CHUNK = 256

_DIGITS = re.compile(r"(\d+)")

SKIP_HINT = "fix or remove it, or pass --skip-bad (Python: skip_bad=True) to skip bad rows"

#: How many dropped users :meth:`ImportReport.lines` names (all are counted).
MAX_NAMED_USERS = 20


@dataclass
class ImportReport:
    """What an import did: counts, and the first problems met (each names its row/file/user)."""

    rows_total: int = 0
    rows_imported: int = 0
    rows_skipped: int = 0
    problems: list[str] = field(default_factory=list)
    num_problems: int = 0
    duplicates: int = 0  # rows dropped as duplicates (also counted in rows_skipped)
    upscaled: int = 0  # images whose shorter side was below the image size
    smallest_side: int | None = None
    cropped: int = 0  # non-square images, centre-cropped to a square
    max_aspect: float = 1.0
    users_listed: set[str] = field(default_factory=set)  # every user named by a row, good or bad
    users_dropped: list[str] = field(default_factory=list)  # listed users left without a usable row

    def problem(self, message: str) -> None:
        """Record one problem (kept verbatim while fewer than :data:`MAX_PROBLEMS`)."""
        self.num_problems += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)

    def geometry(self, size: tuple[int, int], image_size: int) -> None:
        """Count an image of ``size`` (width, height) that was upscaled or cropped."""
        w, h = size
        if min(w, h) < image_size:
            self.upscaled += 1
            self.smallest_side = min(w, h) if self.smallest_side is None else min(self.smallest_side, w, h)
        if w != h:
            self.cropped += 1
            self.max_aspect = max(self.max_aspect, max(w, h) / min(w, h))

    def lines(self) -> list[str]:
        """Human-readable lines, as printed by ``dpemb data make``."""
        out = [
            f"rows: {self.rows_total} total, {self.rows_imported} imported, "
            f"{self.rows_skipped} skipped"
            + (f" (of which {self.duplicates} duplicates)" if self.duplicates else "")
        ]
        if self.upscaled:
            out.append(f"resized: {self.upscaled} image(s) smaller than the image size were upscaled "
                       f"(smallest side {self.smallest_side} px); --strict-geometry refuses them")
        if self.cropped:
            out.append(f"cropped: {self.cropped} non-square image(s) lost their edges to a centre square "
                       f"(aspect up to {self.max_aspect:.2f}:1); --strict-geometry refuses them")
        if self.users_dropped:
            named = ", ".join(repr(u) for u in self.users_dropped[:MAX_NAMED_USERS])
            more = f" and {len(self.users_dropped) - MAX_NAMED_USERS} more" \
                if len(self.users_dropped) > MAX_NAMED_USERS else ""
            out.append(f"users dropped (no usable row left): {len(self.users_dropped)}: {named}{more}")
        if self.num_problems:
            shown = len(self.problems)
            more = f" (first {shown} shown)" if self.num_problems > shown else ""
            out.append(f"problems: {self.num_problems}{more}")
            out.extend(f"  - {p}" for p in self.problems)
        return out


@dataclass
class BadRows:
    """Raise on the first bad row, or (``skip_bad``) record it in ``report``.
    ``strict_geometry``: an image that would be upscaled or centre-cropped is a bad row."""

    skip_bad: bool
    strict_geometry: bool = False
    report: ImportReport = field(default_factory=ImportReport)

    def bad(self, where: str, what: str, *, rows: int = 1) -> None:
        """A bad row (or ``rows`` rows at once) at ``where``: raise or count as skipped."""
        message = f"{where}: {what}" if where else what
        if not self.skip_bad:
            raise DataError(f"{message}; {SKIP_HINT}")
        self.report.rows_skipped += rows
        self.report.problem(message)


@dataclass
class Row:
    """One example before decoding."""

    where: str  # names the row for messages, e.g. "list.csv line 7" or a file path
    path: Path
    user: str
    label: str


def natural_order(names: Iterable[str]) -> list[str]:
    """Unique names in natural order: digit runs compare as numbers ("u2" < "u10")."""
    return sorted(set(names), key=lambda name: (
        [int(t) if t.isdecimal() else t for t in _DIGITS.split(name)], name))


def clean(value: Any) -> str:
    """A CSV cell as a stripped string ('' for a missing cell)."""
    return "" if value is None else str(value).strip()


def resolve(path_text: str, base: Path) -> Path:
    """``path_text`` as a path; relative paths are taken from ``base``."""
    p = Path(os.path.expanduser(path_text))
    return p if p.is_absolute() else base / p


def read_csv_rows(
    csv_path: str | os.PathLike, required: Sequence[str | tuple[str, ...]]
) -> Iterator[tuple[int, dict[str, str | None], list[str] | None]]:
    """Yield ``(line_number, cells, extra_cells)`` for each data row of ``csv_path``.

    The header must contain every column in ``required`` (extra columns are allowed,
    names are compared after stripping spaces and case-folding). An entry may be a
    tuple of alternative names: the first one present is used, and ``cells`` is keyed
    by the tuple's first name. Raises :class:`DataError` naming the file when it is
    missing, empty or lacks a column. ``extra_cells`` is not None when a row has more
    cells than the header.
    """
    wanted = [(r,) if isinstance(r, str) else tuple(r) for r in required]
    spelled = ",".join("|".join(alts) for alts in wanted)
    path = Path(csv_path)
    if not path.is_file():
        raise DataError(f"{path}: CSV file not found")
    try:
        f = open(path, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise DataError(f"{path}: cannot open CSV file ({e})") from e
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise DataError(
                    f"{path}: empty file; expected a header line with columns {spelled}"
                )
            names = [h.strip().lower() for h in header]
            hits = {alts: next((a for a in alts if a in names), None) for alts in wanted}
            missing = [" or ".join(alts) for alts, hit in hits.items() if hit is None]
            col = {alts[0]: names.index(hit) for alts, hit in hits.items() if hit is not None}
            if missing:
                raise DataError(
                    f"{path}: missing column(s) {', '.join(missing)} in the header line "
                    f"(found: {', '.join(h.strip() for h in header) or 'nothing'}); the "
                    f"first line must name the columns {spelled}"
                )
            for cells in reader:
                if not cells or all(not c.strip() for c in cells):
                    continue  # blank line
                values: dict[str, str | None] = {
                    c: (cells[i] if i < len(cells) else None) for c, i in col.items()
                }
                extra = cells[len(header) :] if len(cells) > len(header) else None
                yield reader.line_num, values, extra
        except csv.Error as e:
            raise DataError(f"{path} line {reader.line_num}: malformed CSV ({e})") from e
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not UTF-8 text ({e}); save the CSV as UTF-8") from e


def check_dir(root: str | os.PathLike, what: str) -> Path:
    """``root`` as a Path; :class:`DataError` unless it is an existing directory."""
    path = Path(root)
    if not path.is_dir():
        raise DataError(f"{path}: {what} folder not found (or not a folder)")
    return path


def list_dir(folder: Path) -> tuple[list[Path], list[Path]]:
    """(sub-folders, image files) of ``folder``, each sorted by name; hidden entries and
    other files are left out."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        raise DataError(f"{folder}: cannot list folder ({e})") from e
    visible = [e for e in entries if not e.name.startswith(".")]
    dirs = [Path(e.path) for e in visible if e.is_dir()]
    return dirs, [Path(e.path) for e in visible if not e.is_dir() and is_image_file(e.name)]


def pack_rows(
    rows: Sequence[Row],
    *,
    image_size: int,
    channels: int,
    bad: BadRows,
    source: dict[str, Any],
    progress: bool,
    name: str,
) -> tuple[UserDataset, ImportReport]:
    """Decode ``rows`` into one preallocated array, grouped by user, and return it with
    ``bad.report``; the dataset's ``source`` is ``source`` followed by ``image_size`` and
    ``channels``.

    Bad images and duplicates (same file or pixels, same user and identity) raise or are
    skipped through ``bad`` (docs/DATA.md, "Bad input"). Upscaled and centre-cropped images
    are counted in the report (refused with ``bad.strict_geometry``). Users and labels left
    empty are dropped (dropped users named in the report); both are numbered in natural
    order of their names (numeric when all names are integers).
    """
    check_geometry(image_size, channels)
    report = bad.report
    report.users_listed.update(r.user for r in rows)
    rows = _without_repeated_files(rows, bad)
    if not rows:
        raise DataError(f"{name}: no usable rows to import ({report.rows_skipped} skipped)")
    user_names = natural_order(r.user for r in rows)
    user_index = {u: i for i, u in enumerate(user_names)}
    label_names = natural_order(r.label for r in rows)
    label_index = {lab: i for i, lab in enumerate(label_names)}
    row_users = np.fromiter((user_index[r.user] for r in rows), dtype=np.int64, count=len(rows))
    order = np.argsort(row_users, kind="stable")

    n = len(rows)
    images = np.empty((n, image_size, image_size, channels), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    users = np.empty(n, dtype=np.int64)
    w = 0
    decoded = _decode_in_order(rows, order, image_size, channels)
    desc = f"importing {Path(name).name}"
    bar = tqdm(decoded, total=n, desc=desc, unit="img", disable=not progress)
    first_with_pixels: dict[tuple[str, str, bytes], str] = {}
    for i, arr, size, err in bar:
        row = rows[i]
        where = "" if row.where == str(row.path) else row.where
        if err is not None:
            reason = str(err).split(";")[0]  # "<file>: what went wrong"
            bad.bad(where, reason)
            continue
        assert arr is not None and size is not None
        if bad.strict_geometry and (min(size) < image_size or size[0] != size[1]):
            bad.bad(where or str(row.path), f"{row.path} is {size[0]}x{size[1]} px: it would be "
                    f"{'upscaled' if min(size) < image_size else 'centre-cropped'} to {image_size}x{image_size} "
                    "(refused by --strict-geometry)")
            continue
        key = (row.user, row.label, hashlib.blake2b(arr.tobytes(), digest_size=16).digest())
        if key in first_with_pixels:
            _duplicate(bad, row, first_with_pixels[key], "the same pixels")
            continue
        first_with_pixels[key] = row.where
        report.geometry(size, image_size)
        images[w] = arr
        labels[w] = label_index[row.label]
        users[w] = row_users[i]
        w += 1
    report.rows_imported = w
    if w == 0:
        raise DataError(f"{name}: no image could be imported ({report.rows_skipped} skipped)")
    images, labels, users = images[:w], labels[:w], users[:w]

    kept = {user_names[u] for u in np.flatnonzero(np.bincount(users, minlength=len(user_names)))}
    report.users_dropped = natural_order(report.users_listed - kept)
    source = {**source, "image_size": image_size, "channels": channels, "rows_skipped": report.rows_skipped,
              "duplicates_dropped": report.duplicates, "users_dropped": len(report.users_dropped),
              "images_upscaled": report.upscaled, "images_cropped": report.cropped}
    return assemble(images, labels, users, user_names, label_names, source), report


def _duplicate(bad: BadRows, row: Row, first: str, what: str) -> None:
    bad.report.duplicates += 1 if bad.skip_bad else 0
    bad.bad(row.where, f"duplicate of {first} ({what} for user {row.user!r}, identity {row.label!r})")


def _without_repeated_files(rows: Sequence[Row], bad: BadRows) -> list[Row]:
    """``rows`` without a row that repeats an earlier row's file, user and identity."""
    first: dict[tuple[str, str, str], str] = {}
    out: list[Row] = []
    for row in rows:
        key = (os.path.realpath(row.path), row.user, row.label)
        if key in first:
            _duplicate(bad, row, first[key], "the same file")
            continue
        first[key] = row.where
        out.append(row)
    return out


Decoded = tuple[int, "np.ndarray | None", "tuple[int, int] | None", "DataError | None"]


def _decode_in_order(
    rows: Sequence[Row], order: np.ndarray, image_size: int, channels: int
) -> Iterator[Decoded]:
    """Decode ``rows[order]`` on a few threads (PIL releases the GIL), in order.

    At most :data:`DECODE_CHUNK` decoded images are in flight, so memory stays
    bounded by the preallocated array plus one chunk.
    """

    def work(i: int) -> Decoded:
        try:
            arr, size = decode_image_geometry(rows[i].path, image_size=image_size, channels=channels)
            return i, arr, size, None
        except DataError as e:
            return i, None, None, e

    workers = min(DECODE_THREADS, os.cpu_count() or 1)
    if workers <= 1:
        yield from map(work, order.tolist())
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for start in range(0, len(order), DECODE_CHUNK):
            yield from pool.map(work, order[start : start + DECODE_CHUNK].tolist())


def one_user_per_example(
    images: np.ndarray, labels: np.ndarray, label_names: Sequence[str], source: dict[str, Any]
) -> UserDataset:
    """A dataset without writer or owner information: each example is its own user
    (example-level = user-level privacy), named by its position."""
    n = len(labels)
    return UserDataset(
        images=images,
        labels=labels.astype(np.int64),
        offsets=np.arange(n + 1, dtype=np.int64),
        user_names=[str(i) for i in range(n)],
        label_names=list(label_names),
        source={**source, "unit": "each example is its own user"},
    )


def assemble(
    images: np.ndarray,
    labels: np.ndarray,
    users: np.ndarray,
    user_names: Sequence[str],
    label_names: Sequence[str],
    source: dict[str, Any],
    *,
    keep_all_labels: bool = False,
) -> UserDataset:
    """Build a :class:`UserDataset` from rows ALREADY grouped by user (non-decreasing).

    Drops users without rows and (unless ``keep_all_labels``) labels without rows,
    renumbering both; never copies ``images``.
    """
    if len(users) and np.any(np.diff(users) < 0):
        raise AssertionError("rows must be grouped by user")
    counts = np.bincount(users, minlength=len(user_names))
    kept_users = np.flatnonzero(counts > 0)
    offsets = np.concatenate([[0], np.cumsum(counts[kept_users])]).astype(np.int64)
    if not keep_all_labels:
        present = np.flatnonzero(np.bincount(labels, minlength=len(label_names)) > 0)
        if len(present) != len(label_names):
            remap = np.full(len(label_names), -1, dtype=np.int64)
            remap[present] = np.arange(len(present))
            labels = remap[labels]
            label_names = [label_names[i] for i in present]
    return UserDataset(
        images=images,
        labels=np.asarray(labels, dtype=np.int64),
        offsets=offsets,
        user_names=[str(user_names[u]) for u in kept_users],
        label_names=[str(x) for x in label_names],
        source=dict(source),
    )

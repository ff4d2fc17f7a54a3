"""Reading importer CSV files: header checks and per-row cell access."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Iterator, Sequence

from dpemb.data.dataset import DataError


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
            col: dict[str, int] = {}
            missing = []
            for alts in wanted:
                hit = next((a for a in alts if a in names), None)
                if hit is None:
                    missing.append(" or ".join(alts))
                else:
                    col[alts[0]] = names.index(hit)
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

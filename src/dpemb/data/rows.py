"""Lazy, read-only row views of a (memory-mapped) image array.

A dataset loaded with ``UserDataset.load(path, mmap=True)`` keeps its images in a
read-only ``np.memmap``; its splits (``UserDataset.select``) are :class:`RowView`\\ s of
that memmap (its sorted rows, not a copy). Nothing is read until rows are asked for; every
read (int, slice, mask, index array, ``np.asarray``) returns a fresh, writeable ``ndarray``
of just those rows, a user's consecutive rows copied as one slice. With ``release_pages``
every read ends by ``madvise(MADV_DONTNEED)`` on the bytes it touched, so a process holds
only the rows it works on (usage and page accounting: docs/DATA.md, "dpemb.data.rows").
"""

from __future__ import annotations

import mmap
from typing import Any, Iterator

import numpy as np

#: consecutive runs shorter than this on average are gathered with one ``np.take``
#: (a C loop) instead of one slice copy per run
MIN_MEAN_RUN = 4
#: rows per read when iterating or materialising (bounds the pages mapped at once)
CHUNK_BYTES = 32 << 20


class RowFlags:
    """The subset of ``ndarray.flags`` consumers read: a view is never writeable."""

    writeable = False
    c_contiguous = False
    f_contiguous = False
    owndata = False

    def __getitem__(self, name: str) -> bool:
        return bool(getattr(self, name.lower()))

    def __repr__(self) -> str:
        return "RowFlags(writeable=False, c_contiguous=False, owndata=False)"


_FLAGS = RowFlags()


class RowView:
    """Rows ``rows`` (sorted, distinct) of ``base``, read on demand; see the module
    docstring. ``base`` is an array of rows (typically a read-only ``np.memmap``) or
    another :class:`RowView` (then the view is composed onto that view's base).

    ``release_pages``: drop the memmap pages a read touched once its rows are copied
    out (None: when ``base`` is a read-only memmap of a whole file; False: never)."""

    __slots__ = ("_base", "_rows", "_mapping", "__weakref__")

    def __init__(self, base: Any, rows: Any, *, release_pages: bool | None = None) -> None:
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        elif rows.size == 0:
            rows = rows.astype(np.int64)
        if rows.ndim != 1 or rows.dtype.kind not in "iu":
            raise TypeError(f"rows must be a 1-D integer array (or boolean mask), got {rows.dtype} {rows.shape}")
        rows = rows.astype(np.int64, copy=False)
        if len(rows) > 1 and not np.all(rows[1:] > rows[:-1]):
            raise ValueError("rows must be sorted and distinct")
        if isinstance(base, RowView):
            if release_pages is None:
                release_pages = base._mapping is not None
            if len(rows) and (rows[0] < 0 or rows[-1] >= len(base)):
                raise IndexError(f"row index out of range for a view of {len(base)} rows")
            rows, base = base._rows[rows], base._base  # a fresh array
        else:
            if not hasattr(base, "shape") or len(base.shape) < 1:
                raise TypeError("base must be an array of rows")
            if len(rows) and (rows[0] < 0 or rows[-1] >= base.shape[0]):
                raise IndexError(f"row index out of range for a base of {base.shape[0]} rows")
            rows = np.array(rows, dtype=np.int64)  # own it: the caller may change theirs
        rows.setflags(write=False)
        self._base = base
        self._rows = rows
        self._mapping = _mapping(base) if release_pages in (None, True) else None

    # ------------------------------------------------------------------ ndarray-like
    @property
    def base(self) -> Any:
        """The array the rows are read from (never a RowView)."""
        return self._base

    @property
    def rows(self) -> np.ndarray:
        """The rows of ``base`` this view holds (sorted, distinct, read-only int64)."""
        return self._rows

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self._rows),) + tuple(self._base.shape[1:])

    @property
    def dtype(self) -> np.dtype:
        return self._base.dtype

    @property
    def ndim(self) -> int:
        return len(self._base.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def itemsize(self) -> int:
        return self._base.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the view as if materialised (not what it holds: only its index)."""
        return self.size * self.itemsize

    @property
    def flags(self) -> RowFlags:
        return _FLAGS

    @property
    def releases_pages(self) -> bool:
        """Whether reads drop the memmap pages they touched (see the module docstring)."""
        return self._mapping is not None

    def __len__(self) -> int:
        return len(self._rows)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickles as (file, rows) when the base is a memmap of a whole file, so a view
        sent to another process (``torch.multiprocessing``) is reopened there, not
        copied; any other base pickles with its data."""
        base = self._base
        if isinstance(base, np.memmap) and isinstance(base.base, mmap.mmap) and base.filename:
            return _reopen, (base.filename, int(base.offset), base.dtype.str, tuple(base.shape),
                             self._rows, self._mapping is not None)
        return RowView, (np.asarray(base), self._rows)

    def __repr__(self) -> str:
        kind = type(self._base).__name__
        return f"RowView({len(self)} of {self._base.shape[0]} rows of a {kind}, shape={self.shape}, dtype={self.dtype})"

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a RowView cannot be turned into an array without copying its rows")
        out = self._read(self._rows)
        return out if dtype is None else out.astype(dtype, copy=False)

    def copy(self) -> np.ndarray:
        """Every row, materialised (as ``ndarray.copy``)."""
        return self._read(self._rows)

    def __iter__(self) -> Iterator[np.ndarray]:
        for batch in self.batches(self.chunk_rows()):
            yield from batch

    def batches(self, batch_size: int) -> Iterator[np.ndarray]:
        """Consecutive batches of ``batch_size`` rows (the last may be shorter)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        for start in range(0, len(self), batch_size):
            yield self._read(self._rows[start : start + batch_size])

    # ------------------------------------------------------------------ indexing
    def view(self, rows: Any) -> "RowView":
        """A lazy view of rows ``rows`` (sorted, distinct positions in this view, or a
        boolean mask) of this view: one view over the same base."""
        return RowView(self, rows, release_pages=self._mapping is not None)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple):
            if not key:
                return self.__array__()
            first, rest = key[0], key[1:]
            if first is Ellipsis or first is None or any(k is Ellipsis for k in rest):
                return np.asarray(self)[key]  # rare forms: materialise
            out = self._take(first)
            return out[rest] if _is_int(first) else out[(slice(None),) + rest]
        return self._take(key)

    def _take(self, key: Any) -> np.ndarray:
        if _is_int(key):
            pos = self._rows[int(key)]  # IndexError as numpy's
            return self._read(np.array([pos], dtype=np.int64))[0]
        if not isinstance(key, slice) and key is not Ellipsis:
            key = np.asarray(key)
            if key.size == 0 and key.dtype.kind not in "iub":
                key = key.astype(np.intp)
            if key.dtype.kind not in "iub":
                raise IndexError(
                    "only integers, slices, boolean masks and integer arrays index a RowView's rows"
                )
        pos = self._rows[key]  # numpy's checks: bounds, mask length, negative indices
        return self._read(pos.reshape(-1)).reshape(pos.shape + self.shape[1:])

    # ------------------------------------------------------------------ reading
    def chunk_rows(self) -> int:
        """Rows per read of about ``CHUNK_BYTES`` (iteration, materialising, saving)."""
        row = max(1, int(np.prod(self.shape[1:], dtype=np.int64)) * self.itemsize)
        return max(1, CHUNK_BYTES // row)

    def _read(self, pos: np.ndarray) -> np.ndarray:
        """Base rows ``pos`` (any order, repeats allowed) as a fresh ndarray."""
        n = len(pos)
        if n > 1 and not np.all(pos[1:] > pos[:-1]):
            uniq, inverse = np.unique(pos, return_inverse=True)
            return self._read(uniq)[inverse]
        out = np.empty((n,) + self.shape[1:], dtype=self.dtype)
        if n == 0:
            return out
        chunk = self.chunk_rows() if self._mapping is not None else n
        for lo in range(0, n, chunk):  # bounded pages mapped at once when releasing
            self._read_sorted(pos[lo : lo + chunk], out[lo : lo + chunk])
        return out

    def _read_sorted(self, pos: np.ndarray, out: np.ndarray) -> None:
        base, n = self._base, len(pos)
        lo, hi = int(pos[0]), int(pos[-1]) + 1
        if hi - lo == n:  # one consecutive run (pos is strictly increasing): one slice
            out[...] = base[lo:hi]
            if self._mapping is not None:
                self._mapping.release(lo, hi)
            return
        breaks = np.flatnonzero(pos[1:] - pos[:-1] != 1) + 1
        if len(breaks) + 1 <= max(1, n // MIN_MEAN_RUN):
            starts = np.concatenate([[0], breaks]).tolist()
            ends = np.concatenate([breaks, [n]]).tolist()
            first = pos[starts].tolist()
            for s, e, p in zip(starts, ends, first):  # one slice per consecutive run
                out[s:e] = base[p : p + (e - s)]
        else:
            np.take(base, pos, axis=0, out=out)
        if self._mapping is not None:
            self._mapping.release(lo, hi)


class _Mapping:
    """The mmap behind a read-only memmap, to drop the pages a read touched."""

    __slots__ = ("mm", "data_offset", "row_bytes")

    def __init__(self, mm: mmap.mmap, data_offset: int, row_bytes: int) -> None:
        self.mm, self.data_offset, self.row_bytes = mm, data_offset, row_bytes

    def release(self, lo: int, hi: int) -> None:
        """``madvise(MADV_DONTNEED)`` on the pages of rows ``lo:hi`` (page-aligned,
        so the pages at the ends, shared with neighbouring rows, go too: harmless, a
        later read maps them again)."""
        start = self.data_offset + lo * self.row_bytes
        stop = self.data_offset + hi * self.row_bytes
        start -= start % mmap.PAGESIZE
        try:
            self.mm.madvise(mmap.MADV_DONTNEED, start, min(stop, len(self.mm)) - start)
        except (OSError, ValueError):  # closed mapping, or a platform without it
            pass


def _mapping(base: Any) -> _Mapping | None:
    """A :class:`_Mapping` for a read-only, C-contiguous memmap made by ``np.memmap``
    itself (``np.load(mmap_mode="r")``: its ``base`` is the mmap and its ``offset``
    where the data starts); None for anything else (no pages are then released)."""
    if not hasattr(mmap, "MADV_DONTNEED") or not isinstance(base, np.memmap):
        return None
    mm = base.base
    if not isinstance(mm, mmap.mmap) or base.flags.writeable or not base.flags.c_contiguous:
        return None  # a slice of a memmap, or a writeable / copy-on-write one
    data_offset = int(base.offset) % mmap.ALLOCATIONGRANULARITY
    row_bytes = int(np.prod(base.shape[1:], dtype=np.int64)) * base.dtype.itemsize
    if data_offset + base.shape[0] * row_bytes > len(mm):
        return None
    return _Mapping(mm, data_offset, row_bytes)


def _reopen(filename: str, offset: int, dtype: str, shape: tuple[int, ...], rows: np.ndarray,
            release_pages: bool) -> RowView:
    base = np.memmap(filename, dtype=np.dtype(dtype), mode="r", offset=offset, shape=shape)
    return RowView(base, rows, release_pages=release_pages)


def _is_int(key: Any) -> bool:
    return isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_))


def is_lazy(images: Any) -> bool:
    """Whether ``images`` is read on demand (a memmap or a RowView), not held in memory."""
    return isinstance(images, (RowView, np.memmap))


def row_view(images: Any, rows: Any = None) -> Any:
    """``images`` as a :class:`RowView` when it is lazy (a memmap or a RowView), of rows
    ``rows`` (sorted, distinct; None: all); an in-memory array is returned as it is
    (``rows`` None) or indexed (a copy)."""
    if isinstance(images, RowView):
        return images if rows is None else images.view(rows)
    if isinstance(images, np.memmap):
        return RowView(images, np.arange(len(images)) if rows is None else rows)
    return images if rows is None else images[np.asarray(rows)]


def row_span(images: Any, lo: int, hi: int) -> Any:
    """Rows ``lo:hi`` of ``images``, lazily when it is lazy (a memmap or a RowView:
    nothing is read), else as a numpy slice (a view)."""
    if is_lazy(images):
        return row_view(images, np.arange(lo, hi))
    return images[lo:hi]


def iter_batches(images: Any, batch_size: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, rows start:start + batch_size)`` over ``images`` (an ndarray, a memmap
    or a RowView), each batch a ndarray read on its own: a memmapped array through a
    :class:`RowView` (dropping the pages of each batch once read)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    src = row_view(images)
    for start in range(0, len(src), batch_size):
        yield start, src[start : start + batch_size]

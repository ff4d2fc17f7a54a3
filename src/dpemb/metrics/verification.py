"""Verification metrics: exact all-pairs Recall@FAR (TAR@FAR), ROC AUC and ROC curve.

Definitions: docs/EVALUATION.md, "The definition" (positive = same label, accepted when
``score >= t``, Recall@FAR = ``max(tpr[fpr <= f])``, AUC ties 1/2). Invariant: a score is
the float64 cosine rounded to a multiple of 2^-24, so equal similarities tie exactly
whatever order the sum ran in. The all-pairs pass is exact with no ``N^2`` array (working
memory ~``19 * block_size**2`` bytes; algorithm: docs/EVALUATION.md, "dpemb.metrics.verification").
``max_pairs`` samples pairs instead (``exact=False``; see :func:`verification_metrics`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from dpemb.data.dataset import DataError
from dpemb.data.tensors import resolve_device

__all__ = [
    "DEFAULT_FARS",
    "VerificationResult",
    "listed_pair_metrics",
    "verification_metrics",
]

DEFAULT_FARS: tuple[float, ...] = (1e-3, 1e-4, 1e-2)

# Distinct positive scores held at once; above this the positives are split into score
# ranges and the negatives are scanned once per range (exact either way).
_MAX_DISTINCT_POSITIVES = 1 << 24
# Bucketing negatives by the positive values uses a uniform lookup grid when no grid
# cell holds more than this many positive values; otherwise binary search.
_MAX_GRID_STEPS = 12
# Tile edge for the pass over same-label pairs (positives only).
_POSITIVE_TILE = 512
# Raw positive scores buffered before they are folded into (value, count) pairs.
_COMPRESS_EVERY = 1 << 22
# The compact ROC keeps at most about 4 * _ROC_GRID points.
_ROC_GRID = 600


# ---------------------------------------------------------------------------- inputs
def prepare_inputs(
    embeddings: Any,
    labels: Any,
    *,
    normalize: bool = True,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate ``embeddings (N, D)`` and integer ``labels (N,)``; return float64 and
    int64 tensors on ``device``, rows L2-normalised when ``normalize``.

    Raises :class:`~dpemb.data.dataset.DataError` naming the offending row.
    """
    dev = torch.device(device) if device is not None else resolve_device()
    if isinstance(embeddings, torch.Tensor):
        x = embeddings.detach().to(device=dev, dtype=torch.float64)
    else:
        try:
            arr = np.asarray(embeddings, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"embeddings must be a numeric (N, D) array: {exc}") from exc
        x = torch.from_numpy(arr).to(dev)
    if x.ndim != 2:
        raise DataError(f"embeddings must be a 2-D array (N, D); got shape {tuple(x.shape)}")
    n = x.shape[0]
    if n < 2:
        raise DataError(f"need at least 2 embeddings; got {n}")
    if x.shape[1] == 0:
        raise DataError("embeddings have dimension 0")

    if isinstance(labels, torch.Tensor):
        if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
            raise DataError(f"labels must be integers; got {labels.dtype}")
        y = labels.detach().to(device=dev, dtype=torch.int64)
    else:
        lab = np.asarray(labels)
        if not np.issubdtype(lab.dtype, np.integer):
            raise DataError(
                f"labels must be integers; got dtype {lab.dtype} "
                "(map identity names to integer ids first)"
            )
        y = torch.from_numpy(lab.astype(np.int64, copy=False)).to(dev)
    if y.ndim != 1 or y.shape[0] != n:
        raise DataError(
            f"labels must have shape ({n},) to match embeddings; got {tuple(y.shape)}"
        )

    finite = torch.isfinite(x).all(dim=1)
    if not bool(finite.all()):
        row = int(torch.nonzero(~finite)[0])
        raise DataError(
            f"embeddings row {row} has a non-finite value (NaN or inf); "
            "check the model output for that example"
        )
    norms = torch.linalg.vector_norm(x, dim=1)
    if normalize:
        zero = norms == 0
        if bool(zero.any()):
            row = int(torch.nonzero(zero)[0])
            raise DataError(
                f"embeddings row {row} has zero norm, so its cosine similarity is "
                "undefined; drop that example or pass normalize=False"
            )
        x = x / norms[:, None]
    elif float(norms.max()) ** 2 > 1e37:
        raise DataError(
            "embeddings are so large that pair scores overflow float32; normalise them "
            "or pass normalize=True"
        )
    return x, y


SCORE_QUANTUM = 2.0**-24  # scores are whole multiples of this (times `scale`)


def score_scale(x: torch.Tensor) -> float:
    """Power of two >= every ``|x_i . x_j|`` (1.0 for L2-normalised rows)."""
    top = float(torch.linalg.vector_norm(x, dim=1).max()) ** 2
    return 1.0 if top <= 1.0 + 1e-9 else 2.0 ** math.ceil(math.log2(top))


def quantize_scores(t: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Round float64 scores (in place) to the nearest multiple of
    ``SCORE_QUANTUM * scale``; return them as float32, where they are exact.

    The rounding makes equal similarities tie exactly whatever order the float64 sum
    ran in (its error, ~1e-16, is far below the quantum ~6e-8); without it, pairs that
    are exactly orthogonal come out as +-1e-17 and sort arbitrarily.
    """
    t.mul_(1.0 / (SCORE_QUANTUM * scale)).round_()
    s = t.to(torch.float32)
    s.mul_(SCORE_QUANTUM * scale)
    return s


def pair_scores(a: torch.Tensor, b: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Quantised scores ``a @ b.T`` (float64 matmul, see :func:`quantize_scores`)."""
    return quantize_scores(torch.mm(a, b.T), scale)


def order_key32(s: torch.Tensor) -> torch.Tensor:
    """Order-preserving int32 key of float32 scores (``-0.0`` and ``0.0`` share a key)."""
    bits = (s + 0.0).contiguous().view(torch.int32)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def _validate_fars(fars: Sequence[float] | float) -> list[float]:
    if isinstance(fars, (int, float)):
        fars = [fars]
    out: list[float] = []
    for f in fars:
        f = float(f)
        if not (0.0 < f <= 1.0) or math.isnan(f):
            raise ValueError(f"each FAR must lie in (0, 1]; got {f}")
        if f not in out:
            out.append(f)
    if not out:
        raise ValueError("fars is empty: give at least one false accept rate")
    return out


def _max_false_accepts(far: float, n_neg: int) -> int:
    """Largest k with ``k / n_neg <= far`` in float64 (the comparison roc_curve makes)."""
    k = min(n_neg, int(math.floor(far * n_neg)))
    while k < n_neg and (k + 1) / n_neg <= far:
        k += 1
    while k > 0 and k / n_neg > far:
        k -= 1
    return k


# ---------------------------------------------------------------------------- result
@dataclass(frozen=True, eq=False)
class VerificationResult:
    """Recall@FAR, thresholds, ROC AUC and a compact ROC curve for one evaluation set.

    ``recall_at_far[f]`` is the largest TAR with FAR <= f; ``thresholds[f]`` the score
    threshold (accept when ``score >= t``) at which it is reached with the fewest false
    accepts (``inf`` when no threshold accepts a positive pair within the budget).
    ``roc_fpr``/``roc_tpr`` are exact ROC points (a subset, <= ~2,400 points, from
    (0, 0) to (1, 1)) for plotting. ``exact`` is False when pairs were sampled
    (``num_positive_pairs + num_negative_pairs`` pairs were then used).
    """

    recall_at_far: dict[float, float]
    thresholds: dict[float, float]
    auc: float
    num_positive_pairs: int
    num_negative_pairs: int
    exact: bool
    roc_fpr: np.ndarray
    roc_tpr: np.ndarray

    def __post_init__(self) -> None:
        if set(self.recall_at_far) != set(self.thresholds):
            raise ValueError("recall_at_far and thresholds must have the same FAR keys")
        if self.roc_fpr.shape != self.roc_tpr.shape:
            raise ValueError("roc_fpr and roc_tpr must have the same shape")
        for arr in (self.roc_fpr, self.roc_tpr):
            arr.setflags(write=False)

    @property
    def num_pairs(self) -> int:
        return self.num_positive_pairs + self.num_negative_pairs

    def supported(self, far: float) -> bool:
        """Whether the negative pairs resolve ``far``: at least ``1 / far`` of them, so
        that one false accept is within the budget. Below that, Recall@FAR is measured
        at zero false accepts."""
        return self.num_negative_pairs > 0 and _max_false_accepts(far, self.num_negative_pairs) >= 1


# ------------------------------------------------------------------ positive values
class _DistinctCounter:
    """Accumulates float32 values into sorted distinct values + int64 counts."""

    def __init__(self, device: torch.device) -> None:
        self._values: list[torch.Tensor] = [torch.empty(0, dtype=torch.float32, device=device)]
        self._counts: list[torch.Tensor] = [torch.empty(0, dtype=torch.int64, device=device)]
        self._buffered = 0

    def add(self, v: torch.Tensor) -> None:
        if v.numel() == 0:
            return
        self._values.append(v)
        self._counts.append(torch.ones(v.numel(), dtype=torch.int64, device=v.device))
        self._buffered += v.numel()
        if self._buffered >= _COMPRESS_EVERY:
            self._compress()

    def _compress(self) -> None:
        """Merge the pieces into sorted distinct values with summed counts."""
        v = torch.cat(self._values)
        uniq, inverse = torch.unique(v, sorted=True, return_inverse=True)
        total = torch.zeros(uniq.numel(), dtype=torch.int64, device=v.device)
        total.scatter_add_(0, inverse, torch.cat(self._counts))
        self._values, self._counts, self._buffered = [uniq], [total], 0

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        self._compress()
        return self._values[0], self._counts[0]


class _SortedByLabel:
    """Embeddings reordered so that each label is one contiguous run."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        order = torch.argsort(y, stable=True)
        self.x = x[order]
        self.y = y[order]
        self.scale = score_scale(x)
        _, sizes = torch.unique_consecutive(self.y, return_counts=True)
        ends = torch.cumsum(sizes, 0)
        self.run_end = torch.repeat_interleave(ends, sizes).cpu().numpy()
        self.run_start = self.run_end - torch.repeat_interleave(sizes, sizes).cpu().numpy()
        self.n = int(x.shape[0])
        self.num_positive = int((sizes * (sizes - 1) // 2).sum())
        self.num_negative = self.n * (self.n - 1) // 2 - self.num_positive

    def same_label_count(self, a: int, b: int, c: int, d: int) -> int:
        """Number of (row, col) in [a, b) x [c, d) with equal labels (O(b - a))."""
        lo = np.maximum(self.run_start[a:b], c)
        hi = np.minimum(self.run_end[a:b], d)
        return int(np.maximum(hi - lo, 0).sum())

    def positive_scores(self, tile: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``(scores, labels)`` of all same-label pairs i < j, tile by tile (only
        near-diagonal tiles)."""
        dev = self.x.device
        for a in range(0, self.n, tile):
            b = min(a + tile, self.n)
            col_end = int(self.run_end[b - 1])
            rows = torch.arange(a, b, device=dev)
            for c in range(a + 1, col_end, tile):
                d = min(c + tile, col_end)
                cols = torch.arange(c, d, device=dev)
                mask = (self.y[a:b, None] == self.y[None, c:d]) & (cols[None, :] > rows[:, None])
                if bool(mask.any()):
                    labels = self.y[a:b, None].expand(b - a, d - c)[mask]
                    yield pair_scores(self.x[a:b], self.x[c:d], self.scale)[mask], labels


# ------------------------------------------------------------- negative bucketing
class _Workspace:
    """Buffers reused across tiles. Fresh multi-megabyte tensors cost more in page
    faults than the arithmetic done on them, so the hot loop allocates nothing big.
    ``raw`` holds the float64 matmul tile; once it is quantised into ``s`` its storage
    is reused as a float32 scratch (first half) and an int32 scratch (second half)."""

    def __init__(self, capacity: int, device: torch.device) -> None:
        self.capacity = capacity
        self.raw = torch.empty(capacity, dtype=torch.float64, device=device)
        self.s = torch.empty(capacity, dtype=torch.float32, device=device)
        self.j = torch.empty(capacity, dtype=torch.int32, device=device)
        self.mask = torch.empty(capacity, dtype=torch.bool, device=device)
        self.flag = torch.empty(capacity, dtype=torch.bool, device=device)

    def scratch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.raw.view(torch.float32)[:n]
        i = self.raw.view(torch.int32)[self.capacity : self.capacity + n]
        return f, i


class _NegativeBuckets:
    """Counts, for negative scores s, how many of the sorted distinct values U are <= s.

    ``below[r]`` = number of negatives with exactly r values of U <= s (so
    ``U[r-1] <= s < U[r]``); ``ties[r]`` = those among them with ``s == U[r-1]``.
    Entries equal to +inf are sentinels (masked pairs) and are removed via ``add``'s
    ``num_sentinels``.
    """

    def __init__(self, values: torch.Tensor) -> None:
        dev = values.device
        self.values = values
        self.m = m = int(values.numel())
        nan = torch.full((1,), math.nan, dtype=torch.float32, device=dev)
        self._next = torch.cat([values, nan])  # _next[r] = U[r]   (NaN past the end)
        self._next_np = self._next.cpu().numpy()
        self._prev = torch.cat([nan, values])  # _prev[r] = U[r-1] (NaN before the start)
        self.below = torch.zeros(m + 1, dtype=torch.int64, device=dev)
        self.ties = torch.zeros(m + 1, dtype=torch.int64, device=dev)
        # A uniform grid over [U[0], U[-1]]: start[c] = number of U in cells before c.
        # The cell map is monotone and computed by the same float32 operations for U
        # and for the queries, so every U in an earlier cell is < s and every U in a
        # later cell is > s; the few U sharing s's cell take <= `steps` comparisons.
        lo, hi = float(values[0]), float(values[-1])
        grid = 1 << max(10, min(22, (4 * m - 1).bit_length()))
        self._lo = lo
        self._scale = min((grid - 1) / (hi - lo), 1e30) if hi > lo else 1.0
        self._grid = grid
        cells = torch.empty(m, dtype=torch.int32, device=dev)
        self._cell_into(values, values.clone(), cells)
        cells = cells.long()
        steps = int(torch.bincount(cells, minlength=grid).max())
        if steps <= _MAX_GRID_STEPS:
            self._steps = steps
            self._start = torch.searchsorted(
                cells, torch.arange(grid, device=dev)
            ).to(torch.int32)
        else:  # values too clustered for the grid: plain binary search
            self._steps = 0
            self._start = None

    def _cell_into(self, s: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
        f.copy_(s)
        f.sub_(self._lo)
        f.mul_(self._scale)
        f.clamp_(0, self._grid - 1)
        out.copy_(f)  # truncation of values >= 0: floor

    def _rank_into(self, s: torch.Tensor, ws: _Workspace) -> torch.Tensor:
        """int32 number of values of U that are <= s, for each entry of s."""
        n = s.numel()
        j = ws.j[:n]
        if self._start is None:
            torch.searchsorted(self.values, s, right=True, out_int32=True, out=j)
            return j
        f, cell = ws.scratch(n)
        self._cell_into(s, f, cell)
        torch.index_select(self._start, 0, cell, out=j)
        if self._steps == 0:
            return j
        moved = ws.flag[:n]
        torch.index_select(self._next, 0, j, out=f)
        torch.le(f, s, out=moved)
        cell.copy_(moved)  # int32 += int32 is ~10x faster than int32 += bool
        j.add_(cell)
        if self._steps > 1:
            # only entries that moved can move again: continue on that (small) subset
            act = torch.nonzero(moved).flatten()
            if act.numel():
                ja, sa = j[act], s[act]
                if ja.device.type == "cpu":  # small: numpy avoids thread start-up costs
                    ja_np, sa_np, nxt = ja.numpy(), sa.numpy(), self._next_np
                    for _ in range(self._steps - 1):
                        ja_np += nxt[ja_np] <= sa_np
                else:
                    for _ in range(self._steps - 1):
                        ja += torch.index_select(self._next, 0, ja) <= sa
                j[act] = ja
        return j

    def add(self, s: torch.Tensor, num_sentinels: int = 0, ws: _Workspace | None = None) -> None:
        """Count the 1-D float32 scores ``s`` (``num_sentinels`` of them +inf)."""
        if ws is None or ws.capacity < s.numel():
            ws = _Workspace(s.numel(), s.device)
        j = self._rank_into(s, ws)
        self.below += torch.bincount(j, minlength=self.m + 1)
        f, _ = ws.scratch(s.numel())
        tie = ws.flag[: s.numel()]
        torch.index_select(self._prev, 0, j, out=f)
        torch.eq(f, s, out=tie)
        if bool(tie.any()):
            self.ties += torch.bincount(j[tie], minlength=self.m + 1)
        if num_sentinels:
            self.below[self.m] -= num_sentinels


class PassObserver:
    """Sees the exact pass: :meth:`begin` gets the label-sorted data before the pass,
    :meth:`positive` every positive pair's score with its label (in pieces, once each),
    :meth:`tile` every ``block_size`` tile of quantised scores (rows ``a..``, columns
    ``c..`` of the label-sorted order; entries that are not negative pairs hold +inf).
    The tile's storage is reused afterwards: copy what you keep."""

    def begin(self, data: "_SortedByLabel") -> None:  # pragma: no cover - interface
        pass

    def positive(self, scores: torch.Tensor, labels: torch.Tensor) -> None:  # pragma: no cover
        pass

    def tile(self, a: int, c: int, s: torch.Tensor) -> None:  # pragma: no cover - interface
        pass


def _negative_pass(
    data: _SortedByLabel,
    buckets: _NegativeBuckets,
    block_size: int,
    progress: bool,
    desc: str,
    observer: PassObserver | None = None,
) -> int:
    """One pass over all pairs i < j; negatives go into ``buckets`` (and the tiles to
    ``observer``). Returns #negatives."""
    from tqdm.auto import tqdm

    n, dev = data.n, data.x.device
    edge = min(block_size, n)
    ws = _Workspace(edge * edge, dev)
    idx = torch.arange(edge, device=dev)
    lower = idx[None, :] <= idx[:, None]  # j <= i: not a pair (diagonal tiles)
    quantum = SCORE_QUANTUM * data.scale
    starts = list(range(0, n, block_size))
    tiles = [(a, c) for i, a in enumerate(starts) for c in starts[i:]]
    seen = 0
    for a, c in tqdm(tiles, desc=desc, unit="tile", disable=not progress, leave=False):
        b, d = min(a + block_size, n), min(c + block_size, n)
        rows, cols = b - a, d - c
        size = rows * cols
        t = ws.raw[:size].view(rows, cols)
        torch.mm(data.x[a:b], data.x[c:d].T, out=t)
        t.mul_(1.0 / quantum).round_()  # = quantize_scores, in place
        s = ws.s[:size].view(rows, cols)
        s.copy_(t)
        s.mul_(quantum)
        masked = ws.mask[:size].view(rows, cols)
        torch.eq(data.y[a:b, None], data.y[None, c:d], out=masked)
        same = data.same_label_count(a, b, c, d)
        if a == c:  # upper same-label pairs plus the whole lower triangle with diagonal
            masked.logical_or_(lower[:rows, :cols])
            num_masked = (same - rows) // 2 + rows * (rows + 1) // 2
        else:
            num_masked = same
        s.masked_fill_(masked, math.inf)
        if observer is not None:
            observer.tile(a, c, s)
        buckets.add(s.view(-1), num_masked, ws)
        seen += size - num_masked
    return seen


# --------------------------------------------------------------- summarise counts
@dataclass
class _ChunkSummary:
    values: np.ndarray  # distinct positive scores in this range, ascending
    neg_ge: np.ndarray  # #negatives with score >= value
    pos_ge: np.ndarray  # #positives with score >= value
    auc2: int  # sum over positives of (2 * #neg below + #neg tied)


def _summarise(
    buckets: _NegativeBuckets, counts: torch.Tensor, n_neg: int, pos_above: int
) -> _ChunkSummary:
    m = buckets.m
    below = buckets.below.cpu().numpy()
    ties = buckets.ties.cpu().numpy()
    cnt = counts.cpu().numpy().astype(np.int64)
    neg_lt = np.cumsum(below)[:m]
    neg_eq = ties[1:]
    neg_ge = n_neg - neg_lt
    pos_ge = pos_above + np.cumsum(cnt[::-1])[::-1]
    weight = 2 * neg_lt + neg_eq
    if cnt.size and int(cnt.max()) * int(weight.max(initial=0)) * max(1, m) < (1 << 62):
        auc2 = int(np.dot(cnt, weight))
    else:  # would overflow int64: exact Python integers
        auc2 = int(np.dot(cnt.astype(object), weight.astype(object)))
    return _ChunkSummary(
        values=buckets.values.cpu().numpy(), neg_ge=neg_ge, pos_ge=pos_ge, auc2=auc2
    )


def _compact_roc(fpr: np.ndarray, tpr: np.ndarray, n_neg: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the first and last point of every run through a (log-FPR, TPR) grid cell.

    Input points are ordered by increasing FPR/TPR; the path is monotone, so it crosses
    at most ~2 * _ROC_GRID cells and at most ~4 * _ROC_GRID points survive.
    """
    if fpr.size <= 4 * _ROC_GRID:
        return fpr, tpr
    floor = math.log10(0.5 / max(n_neg, 1))
    lx = (np.log10(np.maximum(fpr, 10.0**floor)) - floor) / -floor
    cx = np.minimum((lx * _ROC_GRID).astype(np.int64), _ROC_GRID)
    cy = np.minimum((tpr * _ROC_GRID).astype(np.int64), _ROC_GRID)
    key = cx * (_ROC_GRID + 1) + cy
    change = np.flatnonzero(np.diff(key)) + 1
    keep = np.zeros(fpr.size, dtype=bool)
    keep[0] = keep[-1] = True
    keep[change] = True
    keep[change - 1] = True
    return fpr[keep], tpr[keep]


def _finish(
    chunks: list[_ChunkSummary],
    n_pos: int,
    n_neg: int,
    fars: list[float],
    exact: bool,
    warn: bool = True,
) -> VerificationResult:
    recall: dict[float, float] = {}
    thresholds: dict[float, float] = {}
    for far in fars:
        k = _max_false_accepts(far, n_neg)
        if k == 0 and warn:
            warnings.warn(
                f"FAR {far:g} is below 1/#negative pairs (1/{n_neg}): Recall@FAR is "
                "measured at zero false accepts; evaluate on more pairs to resolve it",
                RuntimeWarning,
                stacklevel=3,
            )
        recall[far], thresholds[far] = 0.0, math.inf
        for ch in chunks:  # ascending score ranges: the first feasible one is the best
            ok = np.flatnonzero(ch.neg_ge <= k)
            if ok.size:
                j = int(ok[0])
                recall[far] = float(ch.pos_ge[j] / n_pos)
                thresholds[far] = float(ch.values[j])
                break
    auc = sum(ch.auc2 for ch in chunks) / (2 * n_pos * n_neg)
    fpr = np.concatenate([[0.0]] + [ch.neg_ge[::-1] / n_neg for ch in reversed(chunks)] + [[1.0]])
    tpr = np.concatenate([[0.0]] + [ch.pos_ge[::-1] / n_pos for ch in reversed(chunks)] + [[1.0]])
    fpr, tpr = _compact_roc(fpr, tpr, n_neg)
    return VerificationResult(
        recall_at_far=recall,
        thresholds=thresholds,
        auc=float(auc),
        num_positive_pairs=n_pos,
        num_negative_pairs=n_neg,
        exact=exact,
        roc_fpr=np.ascontiguousarray(fpr, dtype=np.float64),
        roc_tpr=np.ascontiguousarray(tpr, dtype=np.float64),
    )


# ----------------------------------------------------------------- exact all pairs
def _key_ranges(data: _SortedByLabel) -> list[tuple[int, int, int]]:
    """Split the positive scores into order-key ranges ``[lo, hi)`` holding at most
    ``_MAX_DISTINCT_POSITIVES`` distinct values; returns ``(lo, hi, #positives)``."""
    bins = 1 << 16
    hist = torch.zeros(bins, dtype=torch.int64, device=data.x.device)
    for v, _ in data.positive_scores(_POSITIVE_TILE):
        hist += torch.bincount((order_key32(v) >> 16).long() + (bins // 2), minlength=bins)
    hist_np = hist.cpu().numpy()
    # A 16-bit key prefix holds at most 65,536 distinct float32 values.
    distinct_bound = np.minimum(hist_np, bins)
    edges = [0]
    acc = 0
    for p in np.flatnonzero(distinct_bound):
        if acc and acc + int(distinct_bound[p]) > _MAX_DISTINCT_POSITIVES:
            edges.append(int(p))
            acc = 0
        acc += int(distinct_bound[p])
    edges.append(bins)
    # prefix p covers keys [(p - 2^15) << 16, (p - 2^15 + 1) << 16)
    return [
        ((a - bins // 2) << 16, (b - bins // 2) << 16, int(hist_np[a:b].sum()))
        for a, b in zip(edges[:-1], edges[1:])
    ]


def _exact(
    x: torch.Tensor,
    y: torch.Tensor,
    fars: list[float],
    block_size: int,
    progress: bool | None,
    *,
    warn: bool = True,
    observer: PassObserver | None = None,
) -> VerificationResult:
    data = _SortedByLabel(x, y)
    n_pos, n_neg = data.num_positive, data.num_negative
    _require_both_classes(n_pos, n_neg)
    if observer is not None:
        observer.begin(data)
    if progress is None:
        progress = data.n * (data.n - 1) // 2 >= 50_000_000
    # One range (all positives) normally; several when they would not fit at once.
    # Ranges ascend; each is collected just before its own pass over the negatives.
    ranges: list[tuple[int, int, int] | None]
    ranges = [None] if n_pos <= _MAX_DISTINCT_POSITIVES else list(_key_ranges(data))
    in_range = [n_pos if r is None else r[2] for r in ranges]
    if sum(in_range) != n_pos:
        raise RuntimeError(f"internal error: binned {sum(in_range)} of {n_pos} positive pairs")
    summaries: list[_ChunkSummary] = []
    watching = observer  # the observer sees the first pass over the negatives only
    for i, rng in enumerate(ranges):
        counter = _DistinctCounter(x.device)
        for v, labels in data.positive_scores(_POSITIVE_TILE):
            if i == 0 and observer is not None:  # the observer sees every positive once
                observer.positive(v, labels)
            if rng is not None:
                key = order_key32(v).long()
                v = v[(key >= rng[0]) & (key < rng[1])]
            counter.add(v)
        values, counts = counter.result()
        if int(counts.sum()) != in_range[i]:
            raise RuntimeError("internal error: positive scores changed between passes")
        if values.numel() == 0:
            continue
        buckets = _NegativeBuckets(values)
        desc = "Recall@FAR" if len(ranges) == 1 else f"Recall@FAR {i + 1}/{len(ranges)}"
        seen = _negative_pass(data, buckets, block_size, progress, desc, watching)
        watching = None
        if seen != n_neg:
            raise RuntimeError(f"internal error: scanned {seen} of {n_neg} negative pairs")
        summaries.append(_summarise(buckets, counts, n_neg, sum(in_range[i + 1 :])))
        del buckets, values, counts
    return _finish(summaries, n_pos, n_neg, fars, exact=True, warn=warn)


def _require_both_classes(n_pos: int, n_neg: int, what: str = "pairs") -> None:
    if n_pos == 0:
        raise DataError(
            f"no positive {what}: no two embeddings share a label, so Recall@FAR is "
            "undefined; evaluate on a set with at least two examples of some identity"
        )
    if n_neg == 0:
        raise DataError(
            f"no negative {what}: all embeddings share one label, so the false accept "
            "rate is undefined; evaluate on a set with at least two identities"
        )


# ------------------------------------------------------------------- sampled pairs
def sample_pairs(n: int, num_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``num_pairs`` distinct pairs (i < j) of ``n`` items, uniformly without
    replacement, sorted; deterministic given ``seed``. Memory O(num_pairs)."""
    total = n * (n - 1) // 2
    if not 0 < num_pairs <= total:
        raise ValueError(f"num_pairs must lie in [1, {total}]; got {num_pairs}")
    rng = np.random.default_rng(seed)
    if 2 * num_pairs >= total:
        lin = np.sort(rng.permutation(total)[:num_pairs])
    else:  # rejection of duplicates keeps every subset equally likely
        lin = np.unique(rng.integers(0, total, size=num_pairs))
        while lin.size < num_pairs:
            extra = rng.integers(0, total, size=num_pairs - lin.size)
            lin = np.union1d(lin, extra)
    # row i holds pairs [off(i), off(i + 1)), off(i) = i * (2n - i - 1) / 2
    def off(i: np.ndarray) -> np.ndarray:
        return i * (2 * n - i - 1) // 2

    b = 2 * n - 1
    i = np.floor((b - np.sqrt(np.maximum(b * b - 8.0 * lin, 0.0))) / 2).astype(np.int64)
    i = np.clip(i, 0, n - 2)
    for _ in range(4):  # fix float rounding of the inverse
        i = np.where(off(i) > lin, i - 1, i)
        i = np.where(off(i + 1) <= lin, i + 1, i)
    j = lin - off(i) + i + 1
    return i, j


def _sampled(
    x: torch.Tensor, y: torch.Tensor, fars: list[float], max_pairs: int, seed: int, warn: bool = True
) -> VerificationResult:
    n = x.shape[0]
    scale = score_scale(x)
    i_np, j_np = sample_pairs(n, max_pairs, seed)
    dev = x.device
    counter = _DistinctCounter(dev)
    negatives: list[torch.Tensor] = []
    step = 1 << 16
    for s0 in range(0, i_np.size, step):
        i = torch.from_numpy(i_np[s0 : s0 + step]).to(dev)
        j = torch.from_numpy(j_np[s0 : s0 + step]).to(dev)
        s = quantize_scores((x[i] * x[j]).sum(dim=1), scale)
        pos = y[i] == y[j]
        counter.add(s[pos])
        negatives.append(s[~pos])
    return _from_scores(counter, negatives, fars, exact=False, warn=warn,
                        what=f"pairs among the {max_pairs} sampled")


def _from_scores(
    counter: _DistinctCounter, negatives: list[torch.Tensor], fars: list[float], *, exact: bool,
    warn: bool, what: str,
) -> VerificationResult:
    """The result from quantised positive scores (in ``counter``) and negative scores."""
    values, counts = counter.result()
    n_pos = int(counts.sum())
    n_neg = int(sum(t.numel() for t in negatives))
    _require_both_classes(n_pos, n_neg, what=what)
    buckets = _NegativeBuckets(values)
    for t in negatives:
        buckets.add(t)
    return _finish([_summarise(buckets, counts, n_neg, 0)], n_pos, n_neg, fars, exact=exact, warn=warn)


def listed_pair_metrics(
    scores: Any, same: Any, *, fars: Sequence[float] = DEFAULT_FARS, warn: bool = True
) -> VerificationResult:
    """Recall@FAR (TAR at FAR), thresholds, ROC AUC and ROC of given pairs: ``scores``
    (cosine similarities, one per listed pair) and ``same`` (True for a genuine pair,
    False for an impostor pair), with the definitions of :func:`verification_metrics`
    (docs/EVALUATION.md, "The definition"); the result counts the listed pairs only and has
    ``exact=True``.

    Raises :class:`~dpemb.data.dataset.DataError` when the lengths differ, a score is
    not finite, or there is no genuine (or no impostor) pair.
    """
    far_list = _validate_fars(fars)
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(same)
    if s.ndim != 1 or m.shape != s.shape:
        raise DataError(f"scores and same must be 1-D of one length; got {s.shape} and {m.shape}")
    if not np.isfinite(s).all():
        raise DataError(f"pair {int(np.flatnonzero(~np.isfinite(s))[0])} has a non-finite score")
    m = m.astype(bool)
    scale = 1.0 if s.size == 0 or float(np.abs(s).max()) <= 1.0 else 2.0 ** math.ceil(math.log2(np.abs(s).max()))
    q = quantize_scores(torch.from_numpy(s.copy()), scale)
    mask = torch.from_numpy(m)
    counter = _DistinctCounter(q.device)
    counter.add(q[mask])
    return _from_scores(counter, [q[~mask]], far_list, exact=True, warn=warn, what="pairs in the list")


# ---------------------------------------------------------------------------- API
def verification_metrics(
    embeddings: Any,
    labels: Any,
    *,
    fars: Sequence[float] = DEFAULT_FARS,
    normalize: bool = True,
    block_size: int = 4096,
    max_pairs: int | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    progress: bool | None = None,
    warn: bool = True,
) -> VerificationResult:
    """Exact all-pairs Recall@FAR at each FAR in ``fars``, ROC AUC and a compact ROC.

    Args:
        embeddings: ``(N, D)`` torch tensor or numpy array.
        labels: ``(N,)`` integer identity labels.
        fars: false accept rates in (0, 1].
        normalize: L2-normalise rows first (cosine); with False, plain dot products.
        block_size: tile edge of the all-pairs pass (memory ~``19 * block_size**2`` bytes).
        max_pairs: when set and smaller than ``N(N-1)/2``, use that many pairs drawn
            uniformly without replacement (seeded by ``seed``) instead of all pairs;
            the result has ``exact=False``. Memory is then O(max_pairs).
        device: torch device for the matmuls (default: CUDA when present, else CPU).
        progress: tqdm progress bar (default: on when there are >= 5e7 pairs).

    Raises:
        DataError: bad embeddings/labels, or no positive (or no negative) pairs.
        ValueError: bad parameters.

    A FAR below ``1 / #negative pairs`` is met only at zero false accepts: returned with a
    RuntimeWarning unless ``warn=False`` (docs/EVALUATION.md, "Which FARs the data supports").
    """
    far_list = _validate_fars(fars)
    if int(block_size) < 1:
        raise ValueError(f"block_size must be a positive integer; got {block_size}")
    x, y = prepare_inputs(embeddings, labels, normalize=normalize, device=device)
    total = x.shape[0] * (x.shape[0] - 1) // 2
    if max_pairs is not None:
        if int(max_pairs) < 1:
            raise ValueError(f"max_pairs must be a positive integer or None; got {max_pairs}")
        if int(max_pairs) < total:
            return _sampled(x, y, far_list, int(max_pairs), seed, warn)
    with torch.no_grad():
        return _exact(x, y, far_list, int(block_size), progress, warn=warn)

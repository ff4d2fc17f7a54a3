"""Bootstrap confidence intervals for exact Recall@FAR, resampling identities.

The scheme (identities, not pairs, resampled; a replicate's weighted pair counts) and how it
stays fast: docs/EVALUATION.md, "Confidence intervals: bootstrap over identities". A
replicate's Recall@FAR is computed exactly as the point estimate is, on weighted counts (with
all weights 1 it reproduces the exact value bit for bit), from only the tail a
:class:`~dpemb.metrics.verification.PassObserver` kept during the one exact pass (negatives
above a cutoff, ``_TAIL_MARGIN`` times the largest budget, at least ``_MIN_TAIL``; every positive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from dpemb.metrics.verification import (
    PassObserver,
    _max_false_accepts,
    _SortedByLabel,
    pair_scores,
)

__all__ = ["BootstrapResult", "TailCollector", "IdentityBootstrap", "tail_size"]

_TAIL_MARGIN = 4  # the tail holds this many times the largest false-accept budget
_MIN_TAIL = 1 << 20  # ... and at least this many negatives (all of them when fewer)
_MAX_TAIL = 1 << 25  # 12 bytes each: ~400 MB
_ROW_CHUNK = 1 << 22  # tile entries screened at once
_REPLICATE_CHUNK = 1 << 17  # tail entries a replicate reads at once


def tail_size(max_accepts: int, num_negative: int) -> int:
    """Negatives the tail keeps for a largest false-accept budget ``max_accepts``."""
    return int(min(num_negative, max(_MIN_TAIL, _TAIL_MARGIN * max(1, max_accepts))))


class TailCollector(PassObserver):
    """Keeps the ``keep`` (or a few more: ties) highest-scoring negative pairs seen in
    the exact pass, with their identities, and every positive pair with its identity.

    After the pass, every negative pair with score >= :attr:`cutoff` is in the tail
    (``cutoff`` is -inf when none was dropped: then the tail is all negatives). The
    kept pairs live in numpy arrays on the CPU (12 bytes each)."""

    def __init__(self, keep: int) -> None:
        if keep < 1:
            raise ValueError(f"keep must be positive; got {keep}")
        self.keep = int(keep)
        self.cutoff = -math.inf
        self._scores: list[np.ndarray] = [np.zeros(0, np.float32)]
        self._a: list[np.ndarray] = [np.zeros(0, np.int32)]
        self._b: list[np.ndarray] = [np.zeros(0, np.int32)]
        self._buffered = 0

    # -- PassObserver
    def begin(self, data: _SortedByLabel) -> None:
        self._uniq, ident, sizes = torch.unique_consecutive(data.y, return_inverse=True, return_counts=True)
        self._ident_t = ident.to(torch.int32)
        self.ident = self._ident_t.cpu().numpy()
        self.sizes = sizes.cpu().numpy().astype(np.int64)
        self._pos: list[np.ndarray] = []
        self._pos_id: list[np.ndarray] = []
        self.cutoff = self._first_cutoff(data)

    def positive(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        self._pos.append(scores.cpu().numpy())
        self._pos_id.append(torch.searchsorted(self._uniq, labels).to(torch.int32).cpu().numpy())

    def tile(self, a: int, c: int, s: torch.Tensor) -> None:
        rows, cols = s.shape
        step = max(1, _ROW_CHUNK // max(cols, 1))
        for r0 in range(0, rows, step):
            part = s[r0 : r0 + step].reshape(-1)
            if part.device.type == "cpu":
                # numpy: single-threaded, no thread start-up per small operation
                p = part.numpy()
                flat = np.flatnonzero(p >= self.cutoff)
                v = p[flat]
            else:
                flat_t = torch.nonzero(part >= self.cutoff).squeeze(1)
                v = part[flat_t].cpu().numpy()
                flat = flat_t.cpu().numpy()
            if flat.size == 0:
                continue
            finite = v != np.inf  # +inf: not a negative pair
            if not finite.all():
                flat, v = flat[finite], v[finite]
            self._scores.append(v.copy())  # the tile's storage is reused
            self._a.append(self.ident[a + r0 + flat // cols])
            self._b.append(self.ident[c + flat % cols])
            self._buffered += flat.size
            if self._buffered > 2 * self.keep:
                self._compact()

    # -- internals
    def _compact(self) -> None:
        v, a, b = (np.concatenate(p) if len(p) > 1 else p[0]
                   for p in (self._scores, self._a, self._b))
        if v.size > self.keep:
            kth = np.partition(v, v.size - self.keep)[v.size - self.keep]  # keep-th largest
            sel = v >= kth
            if int(sel.sum()) > 2 * self.keep:  # massive ties at kth: drop them all
                kth = np.nextafter(np.float32(kth), np.float32(np.inf))
                sel = v >= kth
            self.cutoff = max(self.cutoff, float(kth))
            v, a, b = v[sel], a[sel], b[sel]
        self._scores, self._a, self._b, self._buffered = [v], [a], [b], v.size

    def _first_cutoff(self, data: _SortedByLabel) -> float:
        """A score that about ``2 * keep`` negatives reach, estimated from the scores
        of 1024 random rows against 1024 random columns (seeded), so that the pass
        keeps little more than it must. Any value is correct (the tail is all
        negatives >= the final cutoff, whatever it is); a too high one only makes the
        tail shorter, which the bootstrap detects and repeats the pass for."""
        n_neg = data.num_negative
        if n_neg <= 2 * self.keep:
            return -math.inf
        rng = np.random.default_rng(0)
        dev = data.x.device
        i = torch.from_numpy(rng.integers(0, data.n, size=1024)).to(dev)
        j = torch.from_numpy(rng.integers(0, data.n, size=1024)).to(dev)
        sc = pair_scores(data.x[i], data.x[j], data.scale)
        sc = sc[data.y[i][:, None] != data.y[j][None, :]].cpu().numpy()
        if sc.size < 1000:
            return -math.inf
        return float(np.quantile(sc, 1.0 - 2.0 * self.keep / n_neg))

    @property
    def complete(self) -> bool:
        return self.cutoff == -math.inf

    def finish(self) -> "IdentityBootstrap":
        self._compact()
        v = self._scores[0]
        order = np.argsort(-v)  # descending; the order within ties is irrelevant
        return IdentityBootstrap(
            tail_scores=v[order],
            tail_a=self._a[0][order],
            tail_b=self._b[0][order],
            cutoff=self.cutoff,
            pos_scores=np.concatenate(self._pos) if self._pos else np.zeros(0, np.float32),
            pos_ident=np.concatenate(self._pos_id) if self._pos_id else np.zeros(0, np.int32),
            sizes=self.sizes,
        )


@dataclass(frozen=True)
class BootstrapResult:
    """Replicate values per FAR (NaN: unresolved, see ``escaped``) and bookkeeping."""

    values: dict[float, np.ndarray]  # FAR -> Recall@FAR of each kept replicate
    escaped: dict[float, int]  # FAR -> replicates whose budget reached below the cutoff
    dropped: int  # replicates with no positive or no negative pair


class IdentityBootstrap:
    """Replicates of Recall@FAR over resampled identities, from the kept tail of
    negatives and all positives (see the module docstring)."""

    def __init__(
        self,
        *,
        tail_scores: np.ndarray,
        tail_a: np.ndarray,
        tail_b: np.ndarray,
        cutoff: float,
        pos_scores: np.ndarray,
        pos_ident: np.ndarray,
        sizes: np.ndarray,
    ) -> None:
        self.tail_scores = np.asarray(tail_scores, dtype=np.float32)
        if self.tail_scores.size > 1 and np.any(np.diff(self.tail_scores) > 0):
            raise ValueError("tail_scores must be sorted in descending order")
        self.tail_a = np.asarray(tail_a, dtype=np.int32)
        self.tail_b = np.asarray(tail_b, dtype=np.int32)
        self.cutoff = float(cutoff)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.num_identities = int(self.sizes.size)
        order = np.argsort(-np.asarray(pos_scores, dtype=np.float32), kind="stable")
        ps = np.asarray(pos_scores, dtype=np.float32)[order]
        self.pos_ident = np.asarray(pos_ident, dtype=np.int32)[order]
        neg_ps = -ps
        # positives with score >= each positive's score (ties included)
        self.pos_end = np.searchsorted(neg_ps, neg_ps, side="right")
        # tail negatives with score >= each positive's score
        self.tail_count = np.searchsorted(-self.tail_scores, neg_ps, side="right")
        # positives at or above the cutoff (a prefix); the rest cannot be resolved
        self.num_resolved = int(np.searchsorted(neg_ps, -self.cutoff, side="right")) if not self.complete \
            else int(ps.size)
        self.pair_pos = self.sizes * (self.sizes - 1) // 2

    @property
    def complete(self) -> bool:
        return self.cutoff == -math.inf

    def draw(self, resamples: int, seed: int) -> np.ndarray:
        """``(resamples, K)`` multiplicities: K identities drawn with replacement."""
        rng = np.random.default_rng(seed)
        k = self.num_identities
        draws = rng.integers(0, k, size=(resamples, k))
        return np.stack([np.bincount(d, minlength=k) for d in draws]) if resamples else np.zeros((0, k), np.int64)

    def replicate(self, w: np.ndarray, fars: Sequence[float]) -> dict[float, float] | None:
        """Recall@FAR of the identity multiset ``w`` (NaN where the budget reaches below
        the cutoff); None when it has no positive or no negative pair."""
        w = np.asarray(w, dtype=np.int64)
        n_pos = int(np.dot(w, self.pair_pos))
        mass = w * self.sizes
        n_neg = (int(mass.sum()) ** 2 - int(np.dot(mass, mass))) // 2
        if n_pos == 0 or n_neg == 0:
            return None
        budgets = np.array([_max_false_accepts(f, n_neg) for f in fars], dtype=np.int64)
        kmax = int(budgets.max())
        # weighted negatives >= each tail score, read until the largest budget is exceeded
        parts: list[np.ndarray] = []
        total = 0
        read = 0
        n_tail = self.tail_scores.size
        while read < n_tail and total <= kmax:
            stop = min(n_tail, read + _REPLICATE_CHUNK)
            c = np.cumsum(w[self.tail_a[read:stop]] * w[self.tail_b[read:stop]])
            c += total
            parts.append(c)
            total = int(c[-1])
            read = stop
        cum_neg = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        exhausted = read == n_tail  # the whole tail was read (total <= kmax possibly)
        # negatives at or above each positive's score
        tc = self.tail_count
        neg_at = np.empty(tc.size, dtype=np.int64)
        inside = tc <= read
        neg_at[~inside] = max(kmax + 1, total)  # beyond what was read: over every budget
        idx = tc[inside]
        neg_at[inside] = np.where(idx > 0, cum_neg[np.maximum(idx, 1) - 1] if cum_neg.size else 0, 0)
        unresolved_mass = 0
        if not self.complete:
            below = slice(self.num_resolved, None)
            # below the cutoff at least the whole tail counts; exactly how many more, unknown
            neg_at[below] = max(kmax + 1, total) if not exhausted else total
            unresolved_mass = int(w[self.pos_ident[below]].sum())
        cum_pos = np.cumsum(w[self.pos_ident])
        out: dict[float, float] = {}
        for f, k in zip(fars, budgets):
            if unresolved_mass and exhausted and total <= k:
                out[f] = math.nan  # the threshold may lie below the cutoff
                continue
            j = int(np.searchsorted(neg_at, k, side="right"))
            out[f] = 0.0 if j == 0 else float(cum_pos[self.pos_end[j - 1] - 1] / n_pos)
        return out

    def run(self, fars: Sequence[float], resamples: int, seed: int) -> BootstrapResult:
        fars = list(fars)
        vals: dict[float, list[float]] = {f: [] for f in fars}
        escaped = {f: 0 for f in fars}
        dropped = 0
        for w in self.draw(resamples, seed):
            rep = self.replicate(w, fars)
            if rep is None:
                dropped += 1
                continue
            for f, v in rep.items():
                if math.isnan(v):
                    escaped[f] += 1
                else:
                    vals[f].append(v)
        return BootstrapResult(values={f: np.asarray(v) for f, v in vals.items()}, escaped=escaped,
                               dropped=dropped)

"""Retrieval metrics by cosine similarity: precision@1 and MAP@R, leave-one-out.

Every example is a query against all OTHER examples of the set. Neighbours are ranked
by cosine similarity (float64, rounded to float32 like the verification scores), ties
broken by the smaller example index, so results are deterministic. Queries whose
identity has no other example cannot be answered and are left out of both averages.
precision@1: fraction of queries whose nearest neighbour shares their label. MAP@R
(Musgrave, Belongie & Lim 2020): the mean over queries of AP@R over the R nearest
neighbours, R = the query's other examples of its label (formula and memory:
docs/EVALUATION.md, "dpemb.metrics.retrieval").
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from dpemb.data.dataset import DataError
from dpemb.metrics.verification import SCORE_QUANTUM, prepare_inputs

__all__ = ["precision_at_1", "map_at_r"]

_LOW32 = (1 << 32) - 1
_INDEX_BASE = (1 << 31) - 1
_NOT_A_NEIGHBOUR = torch.iinfo(torch.int64).min


def _ranked_relevance(
    x: torch.Tensor, y: torch.Tensor, queries: torch.Tensor, k: torch.Tensor, block_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (k of each query, relevance of its top-k neighbours) group by group.

    ``k[q]`` neighbours are ranked for query q; groups hold queries with similar k and
    the relevance matrix of a group is (rows, max k in the group), ranked best first.
    The ranking key of a neighbour is one int64: the quantised score (an integer, see
    :func:`dpemb.metrics.verification.quantize_scores`) in the high 32 bits and the
    reversed column index in the low 32 bits, so a single top-k ranks by score and
    then by smaller index. Buffers are reused across tiles.
    """
    n, dev = x.shape[0], x.device
    order = torch.argsort(k, descending=True, stable=True)
    queries, k = queries[order], k[order]
    budget = block_size * block_size
    width = min(block_size, n)
    low = _INDEX_BASE - torch.arange(n, device=dev)  # reversed index, low 32 bits
    raw = torch.empty(budget, dtype=torch.float64, device=dev)
    pos = 0
    while pos < queries.numel():
        kmax = int(k[pos])
        rows = max(1, min(block_size, budget // (kmax + width)))
        q = queries[pos : pos + rows]
        kq = k[pos : pos + rows]
        pos += q.numel()
        keys = torch.full((q.numel(), kmax + width), _NOT_A_NEIGHBOUR, dtype=torch.int64, device=dev)
        xq = x[q]
        for c in range(0, n, block_size):
            d = min(c + block_size, n)
            cols = d - c
            t = raw[: q.numel() * cols].view(q.numel(), cols)
            torch.mm(xq, x[c:d].T, out=t)
            t.mul_(1.0 / SCORE_QUANTUM).round_()  # integer scores, as quantize_scores
            tile = keys[:, kmax : kmax + cols]
            tile.copy_(t)
            tile.bitwise_left_shift_(32)
            tile.bitwise_or_(low[None, c:d])
            inside = (q >= c) & (q < d)  # a query never retrieves itself
            if bool(inside.any()):
                r = torch.nonzero(inside).flatten()
                tile[r, q[r] - c] = _NOT_A_NEIGHBOUR
            if cols < width:
                keys[:, kmax + cols :] = _NOT_A_NEIGHBOUR
            keys[:, :kmax] = torch.topk(keys, kmax, dim=1, sorted=True).values
        best = keys[:, :kmax]
        idx = _INDEX_BASE - (best & _LOW32)
        relevant = y[idx] == y[q][:, None]
        # positions beyond a query's own k are not part of its ranking
        relevant &= torch.arange(kmax, device=dev)[None, :] < kq[:, None]
        yield kq, relevant


@torch.no_grad()
def _mean_over_queries(
    embeddings: Any, labels: Any, device: Any, block_size: int, top1: bool
) -> float:
    """The mean over answerable queries of precision@1 (``top1``) or of AP@R."""
    if int(block_size) < 1:
        raise ValueError(f"block_size must be a positive integer; got {block_size}")
    x, y = prepare_inputs(embeddings, labels, normalize=True, device=device)
    _, inverse, counts = torch.unique(y, return_inverse=True, return_counts=True)
    r = counts[inverse] - 1  # other examples of the same label
    queries = torch.nonzero(r > 0).flatten()
    if queries.numel() == 0:
        raise DataError(
            "no identity has two or more examples, so no query has a correct neighbour; "
            "retrieval metrics need at least two examples of some identity"
        )
    k = torch.ones_like(queries) if top1 else r[queries]
    total = 0.0
    for kq, relevant in _ranked_relevance(x, y, queries, k, int(block_size)):
        if top1:
            total += int(relevant[:, 0].sum())
            continue
        rel = relevant.to(torch.float64)
        ranks = torch.arange(1, rel.shape[1] + 1, dtype=torch.float64, device=rel.device)
        precision = torch.cumsum(rel, dim=1) / ranks
        total += float(((precision * rel).sum(dim=1) / kq.to(torch.float64)).sum())
    return total / queries.numel()


def precision_at_1(
    embeddings: Any,
    labels: Any,
    *,
    block_size: int = 4096,
    device: torch.device | str | None = None,
) -> float:
    """Leave-one-out nearest-neighbour accuracy by cosine similarity (see module doc)."""
    return _mean_over_queries(embeddings, labels, device, block_size, top1=True)


def map_at_r(
    embeddings: Any,
    labels: Any,
    *,
    block_size: int = 4096,
    device: torch.device | str | None = None,
) -> float:
    """MAP@R (Musgrave et al. 2020) by cosine similarity, leave-one-out (see module doc)."""
    return _mean_over_queries(embeddings, labels, device, block_size, top1=False)


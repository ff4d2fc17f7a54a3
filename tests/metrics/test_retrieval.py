"""precision@1 and MAP@R against a brute-force computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.data.dataset import DataError
from dpemb.metrics import map_at_r, precision_at_1


def brute_force(x, y):
    """Rank every other example by (score desc, index asc) with numpy; average over
    queries that have at least one other example of their label."""
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    s = (np.round(xn @ xn.T * 2.0**24) / 2.0**24).astype(np.float32)
    p1, aps = [], []
    for q in range(len(x)):
        r = int((y == y[q]).sum()) - 1
        if r == 0:
            continue
        others = sorted((j for j in range(len(x)) if j != q), key=lambda j: (-s[q, j], j))
        rel = [y[j] == y[q] for j in others[:r]]
        p1.append(rel[0])
        hits, ap = 0, 0.0
        for rank, ok in enumerate(rel, start=1):
            if ok:
                hits += 1
                ap += hits / rank
        aps.append(ap / r)
    return float(np.mean(p1)), float(np.mean(aps))


@pytest.mark.parametrize("seed", [0, 1])
def test_random_embeddings(seed):
    rng = np.random.default_rng(seed)
    n = 250
    y = rng.integers(0, 20, n)
    x = rng.normal(size=(20, 6))[y] + 0.8 * rng.normal(size=(n, 6))
    p1, mapr = brute_force(x, y)
    assert precision_at_1(x, y, block_size=37) == pytest.approx(p1, abs=1e-12)
    assert map_at_r(x, y, block_size=37) == pytest.approx(mapr, abs=1e-12)
    assert 0.05 < mapr < p1 < 1.0  # a useful but imperfect embedding


def test_ties_break_by_index():
    rng = np.random.default_rng(2)
    base = rng.normal(size=(6, 5))
    x = base[rng.integers(0, 6, 120)]  # duplicated vectors: many exact ties
    y = rng.integers(0, 10, 120)
    p1, mapr = brute_force(x, y)
    assert precision_at_1(x, y, block_size=16) == pytest.approx(p1, abs=1e-12)
    assert map_at_r(x, y, block_size=16) == pytest.approx(mapr, abs=1e-12)


def test_skewed_identity_sizes_and_singletons():
    rng = np.random.default_rng(3)
    y = np.concatenate([np.zeros(80, int), np.arange(1, 40).repeat(2), np.arange(100, 130)])
    x = rng.normal(size=(y.size, 4))
    x[y == 0] += 2.0
    p1, mapr = brute_force(x, y)  # singletons (labels >= 100) are not queries
    assert precision_at_1(torch.from_numpy(x), torch.from_numpy(y), block_size=32) == pytest.approx(p1)
    assert map_at_r(x, y, block_size=32) == pytest.approx(mapr, abs=1e-12)


def test_perfect_embedding_scores_one():
    y = np.repeat(np.arange(5), 4)
    x = np.eye(5)[y] + 0.01 * np.random.default_rng(0).normal(size=(20, 5))
    assert precision_at_1(x, y) == 1.0
    assert map_at_r(x, y) == pytest.approx(1.0)


def test_no_answerable_query_is_an_error():
    x = np.random.default_rng(0).normal(size=(5, 3))
    with pytest.raises(DataError, match="two examples"):
        precision_at_1(x, np.arange(5))
    with pytest.raises(DataError):
        map_at_r(x, np.arange(5))

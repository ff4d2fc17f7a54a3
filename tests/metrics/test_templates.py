"""Template pooling (IJB-style) against an explicit per-template loop."""

from __future__ import annotations

import numpy as np
import pytest

from dpemb.data.dataset import DataError
from dpemb.metrics.templates import pool_templates


def unit(v):
    return v / np.linalg.norm(v)


def test_pooling_is_the_normalised_mean_of_normalised_embeddings():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 5)) * rng.uniform(0.1, 10, (12, 1))  # unequal norms
    t = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 1, 0, 2])
    got = pool_templates(x, t)
    for k in range(3):
        want = unit(np.mean([unit(r) for r in x[t == k]], axis=0))
        np.testing.assert_allclose(got[k], want, atol=1e-12)


def test_media_are_averaged_first():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 4))
    t = np.zeros(6, dtype=int)
    media = np.array([7, 7, 7, 7, 3, 5])  # a 4-frame video and two photos
    got = pool_templates(x, t, media)[0]
    video = np.mean([unit(r) for r in x[:4]], axis=0)
    want = unit((video + unit(x[4]) + unit(x[5])) / 3)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert not np.allclose(got, pool_templates(x, t)[0])  # the video no longer outweighs


def test_pooling_refuses_zero_embeddings_and_gaps():
    with pytest.raises(DataError, match="embedding row 1"):
        pool_templates(np.array([[1.0, 0], [0, 0]]), [0, 1])
    with pytest.raises(DataError, match="0..T-1"):
        pool_templates(np.eye(2), [0, 2])

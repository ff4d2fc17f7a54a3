"""The reference's in-batch approximation against a direct re-implementation."""

from __future__ import annotations

import numpy as np
import pytest

from dpemb.data.dataset import DataError
from dpemb.metrics import in_batch_recall_at_far, verification_metrics
from dpemb.metrics.in_batch import reference_thresholds


def direct_reference(x, y, far, batch_size=256, num_thresholds=200):
    """Straight transcription of the procedure, pair by pair and threshold by threshold:
    consecutive batches, pairs i > j inside a batch, similarity 1 - ||u - v||^2 / 4 of
    unit vectors, predicted positive when similarity > threshold, Keras thresholds,
    max sensitivity subject to specificity >= 1 - far."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    thresholds = [0.0] + [(i + 1) / (num_thresholds - 1) for i in range(num_thresholds - 2)] + [1.0]
    tp = np.zeros(len(thresholds))
    fp = np.zeros(len(thresholds))
    tn = np.zeros(len(thresholds))
    fn = np.zeros(len(thresholds))
    for start in range(0, len(x), batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        for i in range(len(xb)):
            for j in range(i):
                sim = 1.0 - np.sum((xb[i] - xb[j]) ** 2) / 4.0
                for k, t in enumerate(thresholds):
                    pred = sim > t
                    if yb[i] == yb[j]:
                        tp[k] += pred
                        fn[k] += not pred
                    else:
                        fp[k] += pred
                        tn[k] += not pred
    spec = tn / (tn + fp)
    sens = tp / (tp + fn)
    ok = spec >= 1.0 - far
    return float(sens[ok].max()) if ok.any() else 0.0


def test_thresholds_are_the_keras_grid():
    t = reference_thresholds(200)
    assert t.size == 200 and t[0] == 0.0 and t[-1] == 1.0
    assert np.allclose(np.diff(t), 1 / 199)


@pytest.mark.parametrize("far, batch_size", [(1e-3, 256), (0.05, 40), (0.2, 17)])
def test_matches_direct_implementation(far, batch_size):
    rng = np.random.default_rng(0)
    n = 200
    y = rng.integers(0, 12, n)
    x = rng.normal(size=(12, 8))[y] + 1.2 * rng.normal(size=(n, 8))
    got = in_batch_recall_at_far(x, y, far=far, batch_size=batch_size, num_thresholds=50)
    want = direct_reference(x, y, far, batch_size=batch_size, num_thresholds=50)
    assert got == pytest.approx(want, abs=1e-12)
    assert 0.0 < got < 1.0


def test_is_an_approximation_bounded_by_the_exact_value_on_one_batch():
    # with one batch covering all pairs, the grid thresholds are a subset of all
    # thresholds, so the estimate can only fall short of the exact Recall@FAR
    rng = np.random.default_rng(1)
    n = 400
    y = rng.integers(0, 20, n)
    x = rng.normal(size=(20, 8))[y] + 1.5 * rng.normal(size=(n, 8))
    for far in (1e-2, 0.1):
        approx = in_batch_recall_at_far(x, y, far=far, batch_size=n)
        exact = verification_metrics(x, y, fars=(far,)).recall_at_far[far]
        assert approx <= exact + 1e-12
        assert approx > 0.5 * exact  # same quantity, coarser grid


def test_depends_on_example_order():
    # batches are consecutive slices: sorting by label puts every positive pair in a
    # batch, random order leaves most of them out -- the reference's known bias
    rng = np.random.default_rng(2)
    n = 512
    y = np.repeat(np.arange(64), 8)
    x = rng.normal(size=(64, 8))[y] + 1.0 * rng.normal(size=(n, 8))
    perm = rng.permutation(n)
    a = in_batch_recall_at_far(x, y, far=0.01, batch_size=64)
    b = in_batch_recall_at_far(x[perm], y[perm], far=0.01, batch_size=64)
    assert a != b


def test_bad_arguments():
    x = np.random.default_rng(0).normal(size=(10, 3))
    y = np.arange(10) % 2
    with pytest.raises(ValueError):
        in_batch_recall_at_far(x, y, far=0.0)
    with pytest.raises(ValueError):
        in_batch_recall_at_far(x, y, batch_size=1)
    with pytest.raises(DataError):
        in_batch_recall_at_far(x, y[:5])

"""Feature clipping and unit weights: the bounds every sensitivity rests on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.data.dataset import DataError
from dpemb.transfer.prepare import prepare_features, transform_features, unit_weights


def test_normalize_scales_every_nonzero_row_to_c_and_keeps_zero_rows():
    x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-3, 0.0], [1e8, -1e8]])
    out, clipped = transform_features(x, 2.0, normalize=True)
    norms = torch.linalg.vector_norm(out, dim=1)
    assert torch.allclose(norms, torch.tensor([2.0, 0.0, 2.0, 2.0], dtype=torch.float64))
    assert bool((norms <= 2.0).all())
    assert clipped == 2  # rows longer than C
    # direction preserved
    assert torch.allclose(out[0], torch.tensor([1.2, 1.6], dtype=torch.float64))


def test_clip_only_shrinks_long_rows():
    x = np.array([[3.0, 4.0], [0.3, 0.4]])
    out, clipped = transform_features(x, 1.0, normalize=False)
    assert torch.allclose(out[1], torch.tensor([0.3, 0.4], dtype=torch.float64))
    assert torch.allclose(torch.linalg.vector_norm(out[0]), torch.tensor(1.0, dtype=torch.float64))
    assert clipped == 1


def test_adversarial_norms_never_exceed_the_bound():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2000, 7)) * 10.0 ** rng.uniform(-30, 30, size=(2000, 1))
    for normalize in (True, False):
        out, _ = transform_features(x, 0.7, normalize=normalize)
        assert float(torch.linalg.vector_norm(out, dim=1).max()) <= 0.7


def test_non_finite_row_is_named():
    x = np.ones((5, 3))
    x[3, 1] = np.nan
    with pytest.raises(DataError, match="row 3"):
        transform_features(x, 1.0, normalize=True)


def test_user_weights_sum_to_one_per_user():
    users = np.array([7, 7, 7, 2, 9, 9])
    w, n_units = unit_weights(users, 6, "user")
    assert n_units == 3
    for u in np.unique(users):
        assert w[users == u].sum() == pytest.approx(1.0)
    w_ex, n_ex = unit_weights(users, 6, "example")
    assert n_ex == 6 and np.all(w_ex == 1)


def test_user_unit_needs_user_ids():
    with pytest.raises(DataError, match="user ids"):
        prepare_features(np.ones((3, 2)), np.array([0, 1, 0]), num_classes=2, clip_norm=1.0, unit="user")


def test_labels_out_of_range_are_named():
    with pytest.raises(DataError, match="row 1"):
        prepare_features(np.ones((3, 2)), np.array([0, 5, 1]), num_classes=2, clip_norm=1.0)


def test_label_count_mismatch_names_the_source_and_the_fix():
    with pytest.raises(DataError, match=r"train\.npz: 3 feature rows but labels of shape \(2,\).*dpemb features"):
        prepare_features(np.ones((3, 2)), np.array([0, 1]), num_classes=2, clip_norm=1.0, source="train.npz")


def test_empty_class_and_single_class_are_refused_with_the_source_named():
    x = np.ones((4, 2))
    with pytest.raises(DataError, match=r"f\.npz: class\(es\) 2 have no training example"):
        prepare_features(x, np.array([0, 1, 0, 1]), num_classes=3, clip_norm=1.0, source="f.npz")
    with pytest.raises(DataError, match=r"f\.npz: only 1 class"):
        prepare_features(x, np.zeros(4, dtype=int), num_classes=1, clip_norm=1.0, source="f.npz")
    with pytest.raises(DataError, match=r"f\.npz: feature row 1 is not finite"):
        prepare_features(np.array([[1.0, 0], [np.nan, 0]]), np.array([0, 1]), num_classes=2, clip_norm=1.0,
                         source="f.npz")

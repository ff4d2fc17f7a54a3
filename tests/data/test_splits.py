"""assign_splits: disjoint train/eval identities, public users, determinism, uniformity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.splits import assign_splits, parse_label_spec


def make_ds(
    num_users: int = 30, num_labels: int = 40, per_user: int = 6, seed: int = 0
) -> UserDataset:
    rng = np.random.default_rng(seed)
    n = num_users * per_user
    users = np.repeat(np.arange(num_users), per_user)
    labels = rng.integers(0, num_labels, size=n)
    labels[:num_labels] = np.arange(num_labels)  # every label present
    images = rng.integers(0, 256, size=(n, 4, 4, 1), dtype=np.uint8)
    return UserDataset.from_arrays(
        images, labels, users,
        label_names=[f"L{i}" for i in range(num_labels)],
        user_names=[f"U{i}" for i in range(num_users)],
    )


def test_eval_fraction_gives_disjoint_identities():
    ds = make_ds()
    out = assign_splits(ds, eval_identity_fraction=0.25, seed=3)
    assert len(out.eval_labels) == 10 and out.eval_labels == sorted(set(out.eval_labels))
    assert out.images is ds.images  # arrays are shared, not copied
    splits = out.split()
    eval_names = {out.label_names[i] for i in out.eval_labels}
    assert set(splits.eval.label_names) == eval_names
    assert not set(splits.train.label_names) & eval_names
    assert splits.train.num_examples + splits.eval.num_examples == ds.num_examples
    assert out.source["splits"]["seed"] == 3


def test_deterministic_from_seed_and_streams_independent():
    ds = make_ds()
    a = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.2, seed=11)
    b = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.2, seed=11)
    c = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.2, seed=12)
    assert (a.eval_labels, a.public_users) == (b.eval_labels, b.public_users)
    assert a.eval_labels != c.eval_labels  # C(40, 12) choices: equal by chance ~1e-10
    # Changing the public share does not move the evaluation identities.
    d = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.5, seed=11)
    assert d.eval_labels == a.eval_labels


def test_eval_choice_is_uniform_over_identities():
    """Each identity is held out with probability k/L (a biased picker fails this)."""
    ds = make_ds(num_users=10, num_labels=20, per_user=4)
    trials, k = 1500, 5
    hits = np.zeros(ds.num_classes)
    for seed in range(trials):
        hits[assign_splits(ds, eval_identity_fraction=k / 20, seed=seed).eval_labels] += 1
    p = k / 20
    sd = math.sqrt(p * (1 - p) / trials)
    assert np.all(np.abs(hits / trials - p) < 4.5 * sd), hits / trials


def test_public_users_have_training_data_and_leave_private_training():
    ds = make_ds()
    out = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.2, seed=5)
    assert len(out.public_users) == round(0.2 * 30)
    assert all(0 <= u < ds.num_users for u in out.public_users)
    is_eval = np.isin(out.labels, out.eval_labels)
    for u in out.public_users:
        assert np.any(~is_eval[out.user_slice(u)])
    splits = out.split()
    public_names = {out.user_names[u] for u in out.public_users}
    assert not set(splits.train.user_names) & public_names
    assert set(splits.public.user_names) == public_names


def test_users_with_only_eval_identities_are_never_public():
    # Users 0-4 hold only label 0, users 5-9 only label 1; hold out label 0.
    images = np.zeros((20, 2, 2, 1), np.uint8)
    labels = np.repeat([0, 1], 10)
    users = np.repeat(np.arange(10), 2)
    ds = UserDataset.from_arrays(images, labels, users)
    for seed in range(20):
        out = assign_splits(ds, eval_labels=[0], public_user_fraction=0.4, seed=seed)
        assert len(out.public_users) == 2 and all(u >= 5 for u in out.public_users)


def test_explicit_eval_labels_and_errors():
    ds = make_ds()
    out = assign_splits(ds, eval_labels=[36, 37, 36, 39])
    assert out.eval_labels == [36, 37, 39]
    with pytest.raises(DataError, match="index 40 does not exist.*0-39"):
        assign_splits(ds, eval_labels=[3, 40])
    with pytest.raises(ValueError, match="not both"):
        assign_splits(ds, eval_labels=[1], eval_identity_fraction=0.1)
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="eval_identity_fraction"):
            assign_splits(ds, eval_identity_fraction=bad)
        with pytest.raises(ValueError, match="public_user_fraction"):
            assign_splits(ds, public_user_fraction=bad)
    with pytest.raises(DataError, match="all 40 identities"):
        assign_splits(ds, eval_labels=list(range(40)))
    tiny = make_ds(num_users=2, num_labels=3, per_user=3)
    with pytest.raises(DataError, match="no private training user"):
        assign_splits(tiny, public_user_fraction=0.9)


def test_zero_fractions_clear_previous_annotations():
    ds = make_ds()
    marked = assign_splits(ds, eval_identity_fraction=0.2, public_user_fraction=0.1)
    cleared = assign_splits(marked)
    assert cleared.eval_labels == [] and cleared.public_users == []
    small = assign_splits(ds, eval_identity_fraction=0.001, public_user_fraction=0.001)
    assert len(small.eval_labels) == 1 and len(small.public_users) == 1  # > 0 means at least one


def test_parse_label_spec():
    assert parse_label_spec("36-61") == list(range(36, 62))
    assert parse_label_spec("1,2,5") == [1, 2, 5]
    assert parse_label_spec(" 0-3, 7,2 ") == [0, 1, 2, 3, 7]
    for bad in ("a-b", "5-3", "", ",", "x", "-1"):
        with pytest.raises(ValueError):
            parse_label_spec(bad)

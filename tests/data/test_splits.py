"""assign_splits: test, validation and training identities, each held-out group with
its own users; public users; determinism; uniformity."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.splits import assign_splits, parse_label_spec


def make_ds(
    num_users: int = 30, num_labels: int = 40, per_user: int = 6, seed: int = 0
) -> UserDataset:
    """Shared regime: every user writes random labels (a label has many writers)."""
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


def make_owned(num_ids: int = 40, owners: int = 1, per_user: int = 3) -> UserDataset:
    """Face-like: identity i is held by ``owners`` users who hold nothing else."""
    users = np.repeat(np.arange(num_ids * owners), per_user)
    labels = users // owners
    images = np.zeros((len(users), 2, 2, 1), np.uint8)
    return UserDataset.from_arrays(images, labels, users)


def make_mixed(seed: int = 0) -> UserDataset:
    """Landmark-like: some users hold one identity, others many; sizes vary."""
    rng = np.random.default_rng(seed)
    users, labels = [], []
    for u in range(60):
        ids = [u % 25] if u < 25 else rng.choice(25, size=int(rng.integers(2, 6)), replace=False)
        for lab in ids:
            k = int(rng.integers(1, 4))
            users += [u] * k
            labels += [int(lab)] * k
    images = np.zeros((len(users), 2, 2, 1), np.uint8)
    return UserDataset.from_arrays(images, np.array(labels), np.array(users))


DATASETS = {
    "shared": make_ds,
    "faces": make_owned,
    "owned-pairs": lambda: make_owned(num_ids=30, owners=2),
    "mixed": make_mixed,
}


def check_roles(ds: UserDataset):
    """No user in two of public/train/validation/test, no identity in two of
    train/validation/test (role lists and the splits built from them)."""
    sp = ds.split()
    user_roles = {"public": set(ds.public_users), "validation": set(ds.validation_users),
                  "test": set(ds.eval_users)}
    for a, b in itertools.combinations(user_roles, 2):
        assert not user_roles[a] & user_roles[b], (a, b)
    assert not set(ds.eval_labels) & set(ds.validation_labels)
    parts = {"public": sp.public, "train": sp.train, "validation": sp.validation, "test": sp.test}
    users = {k: set(v.user_names) for k, v in parts.items()}
    for a, b in itertools.combinations(users, 2):
        assert not users[a] & users[b], f"a user is in both {a} and {b}"
    ids = {"train": set(sp.train.label_names) | set(sp.public.label_names),
           "validation": set(sp.validation.label_names), "test": set(sp.test.label_names)}
    for a, b in itertools.combinations(ids, 2):
        assert not ids[a] & ids[b], f"an identity is in both {a} and {b}"
    assert ids["test"] == {ds.label_names[i] for i in ds.eval_labels if np.any(sp.mask("test") & (ds.labels == i))}
    assert users["test"] <= {ds.user_names[u] for u in ds.eval_users}
    assert users["validation"] <= {ds.user_names[u] for u in ds.validation_users}
    kept = sum(p.num_examples for p in parts.values())
    assert kept + int(sp.unused.sum()) == ds.num_examples
    return sp


@pytest.mark.parametrize("name", sorted(DATASETS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_regime_puts_each_user_and_identity_in_one_split(name, seed):
    ds = DATASETS[name]()
    out = assign_splits(ds, eval_identity_fraction=0.2, public_user_fraction=0.1, seed=seed)
    sp = check_roles(out)
    assert sp.test.num_examples > 0 and sp.validation.num_examples > 0
    assert sp.train.num_examples > 0 and sp.public.num_examples > 0


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_defaults_hold_out_validation_and_test_users(name):
    out = assign_splits(DATASETS[name]())
    sp = check_roles(out)
    assert out.eval_labels and out.validation_labels
    assert out.eval_users and out.validation_users
    assert sp.test.num_examples > 0 and sp.validation.num_examples > 0
    assert out.source["splits"]["eval_identity_fraction"] == 0.1
    assert out.source["splits"]["validation_identity_fraction"] == 0.1


@pytest.mark.parametrize("owners", [1, 2])
def test_face_like_held_out_identities_come_with_exactly_their_owners(owners):
    ds = make_owned(num_ids=50, owners=owners)
    out = assign_splits(ds, eval_identity_fraction=0.2, validation_identity_fraction=0.1,
                        public_user_fraction=0.1, seed=4)
    sp = check_roles(out)
    owner_of = out.labels[out.offsets[:-1]]  # each user holds one identity
    assert sorted(out.eval_users) == sorted(np.flatnonzero(np.isin(owner_of, out.eval_labels)))
    assert sorted(out.validation_users) == sorted(
        np.flatnonzero(np.isin(owner_of, out.validation_labels)))
    assert len(out.eval_labels) == 10 and len(out.validation_labels) == 5
    assert not sp.unused.any()  # no example is wasted


def test_shared_regime_test_users_are_held_out_of_training():
    """EMNIST-like protocol: every writer writes every class. The test split holds only
    the test users' examples; their training-class examples are trained on by nobody."""
    ds = make_ds(num_users=40, num_labels=10, per_user=20)
    out = assign_splits(ds, eval_labels=[7, 8, 9], validation_identity_fraction=0.0, seed=1)
    sp = check_roles(out)
    assert len(out.eval_users) == round(3 / 10 * 40)
    test_names = {out.user_names[u] for u in out.eval_users}
    assert set(sp.test.user_names) == test_names
    assert not test_names & set(sp.train.user_names)
    # a training user's example of a test identity and a test user's example of a
    # training identity are both unused
    ex_user = out.user_of_example()
    is_test_label = np.isin(out.labels, [7, 8, 9])
    is_test_user = np.isin(ex_user, out.eval_users)
    np.testing.assert_array_equal(sp.unused, is_test_label != is_test_user)
    assert out.summary()["splits"]["unused_examples"] == int(sp.unused.sum()) > 0


def test_explicit_user_fractions():
    ds = make_ds(num_users=50)
    out = assign_splits(ds, eval_identity_fraction=0.2, validation_identity_fraction=0.1,
                        eval_user_fraction=0.3, validation_user_fraction=0.1, seed=2)
    check_roles(out)
    assert len(out.eval_users) == 15 and len(out.validation_users) == 5
    with pytest.raises(DataError, match="eval_user_fraction=0"):
        assign_splits(ds, eval_identity_fraction=0.2, eval_user_fraction=0.0)
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="validation_user_fraction"):
            assign_splits(ds, validation_user_fraction=bad)


def test_deterministic_from_seed_and_streams_independent():
    ds = make_ds()

    def roles(o):
        return (o.eval_labels, o.validation_labels, o.eval_users, o.validation_users, o.public_users)

    a = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.2, seed=11)
    b = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.2, seed=11)
    c = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.2, seed=12)
    assert roles(a) == roles(b)
    assert a.eval_labels != c.eval_labels  # C(40, 12) choices: equal by chance ~1e-10
    # Changing the public share moves neither the held-out identities nor their users.
    d = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.5, seed=11)
    assert roles(d)[:4] == roles(a)[:4]


def test_eval_choice_is_uniform_over_identities():
    """Each identity is held out with probability k/L (a biased picker fails this)."""
    ds = make_ds(num_users=10, num_labels=20, per_user=4)
    trials, k = 1500, 5
    hits = np.zeros(ds.num_classes)
    for seed in range(trials):
        out = assign_splits(ds, eval_identity_fraction=k / 20, validation_identity_fraction=0,
                            seed=seed)
        hits[out.eval_labels] += 1
    p = k / 20
    sd = math.sqrt(p * (1 - p) / trials)
    assert np.all(np.abs(hits / trials - p) < 4.5 * sd), hits / trials


def test_public_users_are_training_users_with_training_data():
    ds = make_ds()
    out = assign_splits(ds, eval_identity_fraction=0.3, public_user_fraction=0.2, seed=5)
    check_roles(out)
    candidates = [u for u in range(ds.num_users)
                  if u not in set(out.eval_users) | set(out.validation_users)]
    assert len(out.public_users) == round(0.2 * len(candidates))
    held = np.isin(out.labels, out.eval_labels + out.validation_labels)
    for u in out.public_users:
        assert np.any(~held[out.user_slice(u)])
    splits = out.split()
    public_names = {out.user_names[u] for u in out.public_users}
    assert not set(splits.train.user_names) & public_names
    assert set(splits.public.user_names) == public_names


def test_users_with_only_held_out_identities_are_never_public():
    # Users 0-4 hold only label 0, users 5-9 only label 1; hold out label 0.
    images = np.zeros((20, 2, 2, 1), np.uint8)
    labels = np.repeat([0, 1], 10)
    users = np.repeat(np.arange(10), 2)
    ds = UserDataset.from_arrays(images, labels, users)
    for seed in range(20):
        out = assign_splits(ds, eval_labels=[0], validation_identity_fraction=0,
                            public_user_fraction=0.4, seed=seed)
        assert out.eval_users == [0, 1, 2, 3, 4]
        assert len(out.public_users) == 2 and all(u >= 5 for u in out.public_users)


def test_explicit_labels_and_errors():
    ds = make_ds()
    out = assign_splits(ds, eval_labels=[36, 37, 36, 39], validation_labels=[1, 2])
    assert out.eval_labels == [36, 37, 39] and out.validation_labels == [1, 2]
    check_roles(out)
    with pytest.raises(DataError, match="index 40 does not exist.*0-39"):
        assign_splits(ds, eval_labels=[3, 40])
    with pytest.raises(DataError, match="both a test.*validation"):
        assign_splits(ds, eval_labels=[3, 4], validation_labels=[4])
    with pytest.raises(ValueError, match="not both"):
        assign_splits(ds, eval_labels=[1], eval_identity_fraction=0.1)
    with pytest.raises(ValueError, match="not both"):
        assign_splits(ds, validation_labels=[1], validation_identity_fraction=0.1)
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="eval_identity_fraction"):
            assign_splits(ds, eval_identity_fraction=bad)
        with pytest.raises(ValueError, match="public_user_fraction"):
            assign_splits(ds, public_user_fraction=bad)
    with pytest.raises(DataError, match="all 40 identities"):
        assign_splits(ds, eval_labels=list(range(40)))
    with pytest.raises(DataError, match="all 40 identities"):
        assign_splits(ds, eval_labels=list(range(20)), validation_labels=list(range(20, 40)))
    tiny = make_ds(num_users=2, num_labels=3, per_user=3)
    with pytest.raises(DataError, match="no private training user"):
        assign_splits(tiny, eval_identity_fraction=0, validation_identity_fraction=0,
                      public_user_fraction=0.9)


def test_zero_fractions_clear_previous_annotations():
    ds = make_ds()
    marked = assign_splits(ds, eval_identity_fraction=0.2, public_user_fraction=0.1)
    cleared = assign_splits(marked, eval_identity_fraction=0, validation_identity_fraction=0)
    assert cleared.eval_labels == [] and cleared.validation_labels == []
    assert cleared.eval_users == [] and cleared.validation_users == [] and cleared.public_users == []
    sp = cleared.split()
    assert sp.train.num_examples == ds.num_examples and sp.test.num_examples == 0
    small = assign_splits(ds, eval_identity_fraction=0.001, validation_identity_fraction=0.001,
                          public_user_fraction=0.001)
    # > 0 means at least two identities (a verification split needs two) and one user
    assert len(small.eval_labels) == len(small.validation_labels) == 2
    assert len(small.public_users) == 1


def test_parse_label_spec():
    assert parse_label_spec("36-61") == list(range(36, 62))
    assert parse_label_spec("1,2,5") == [1, 2, 5]
    assert parse_label_spec(" 0-3, 7,2 ") == [0, 1, 2, 3, 7]
    for bad in ("a-b", "5-3", "", ",", "x", "-1"):
        with pytest.raises(ValueError):
            parse_label_spec(bad)


# ---------------------------------------------------------------- subsample_training_users
def _split_users(ds: UserDataset) -> dict[str, set[str]]:
    parts = ds.split()
    return {name: {ds.user_names[u] for u in np.unique(ds.user_of_example()[parts.mask(name)])}
            for name in ("train", "public", "validation", "test")}


def _user_examples(ds: UserDataset) -> dict[str, tuple[bytes, list[str]]]:
    out = {}
    for u, name in enumerate(ds.user_names):
        images, labels = ds.user_examples(u)
        out[name] = (np.asarray(images).tobytes(), [ds.label_names[i] for i in labels])
    return out


@pytest.mark.parametrize("name", ["faces", "mixed"])
def test_subsample_keeps_every_held_out_and_public_user_and_n_training_users(name):
    from dpemb.data.splits import subsample_training_users

    ds = assign_splits(DATASETS[name](), eval_identity_fraction=0.2, validation_identity_fraction=0.2,
                       public_user_fraction=0.2, seed=1)
    before = _split_users(ds)
    sub = subsample_training_users(ds, 5, seed=0)
    after = _split_users(sub)
    for part in ("public", "validation", "test"):
        assert after[part] == before[part], part
    assert len(after["train"]) == 5 and after["train"] <= before["train"]
    # every kept user keeps exactly its examples (images and identities)
    full, kept = _user_examples(ds), _user_examples(sub)
    assert set(kept) == set().union(*after.values()) and all(kept[u] == full[u] for u in kept)
    assert sub.split().test.num_examples == ds.split().test.num_examples
    assert sub.source["subsample"] == {"training_users": 5, "of": len(before["train"]), "seed": 0}
    check_roles(sub)


def test_subsample_draw_is_seeded_uniform_and_blind_to_the_data():
    from dpemb.data.splits import subsample_training_users

    ds = assign_splits(make_owned(num_ids=60), eval_identity_fraction=0.1,
                       validation_identity_fraction=0.1, public_user_fraction=0.1, seed=0)
    train = sorted(_split_users(ds)["train"])
    pick = lambda d, seed: _split_users(subsample_training_users(d, 10, seed=seed))["train"]  # noqa: E731
    assert pick(ds, 3) == pick(ds, 3) and pick(ds, 3) != pick(ds, 4)
    # other pixels, same users: the same draw (it looks at roles, never at the data)
    other = UserDataset.from_arrays(np.full_like(np.asarray(ds.images), 255), ds.labels,
                                    ds.user_of_example(), label_names=ds.label_names,
                                    user_names=ds.user_names)
    other = assign_splits(other, eval_identity_fraction=0.1, validation_identity_fraction=0.1,
                          public_user_fraction=0.1, seed=0)
    assert pick(other, 3) == pick(ds, 3)
    # uniform: over 600 draws each training user is kept 600 x 10 / n times on average
    counts = {u: 0 for u in train}
    for seed in range(600):
        for u in pick(ds, seed):
            counts[u] += 1
    expected = 600 * 10 / len(train)
    sd = math.sqrt(600 * (10 / len(train)) * (1 - 10 / len(train)))
    assert all(abs(c - expected) < 5 * sd for c in counts.values()), (expected, counts)


def test_subsample_refuses_more_users_than_it_has():
    from dpemb.data.splits import subsample_training_users

    ds = assign_splits(make_owned(), eval_identity_fraction=0.1, validation_identity_fraction=0.1,
                       public_user_fraction=0.1, seed=0)
    n = len(_split_users(ds)["train"])
    assert subsample_training_users(ds, n).split().train.num_users == n
    for bad in (0, n + 1):
        with pytest.raises(DataError, match=f"ask for 1 to {n:,}"):
            subsample_training_users(ds, bad)

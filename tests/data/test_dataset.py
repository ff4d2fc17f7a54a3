"""UserDataset: construction, per-user access, subsets, splits, persistence, summary."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dpemb.data.dataset import DataError, UserDataset


def example_ds() -> UserDataset:
    # 7 examples, users given out of order; pixel value = example number.
    images = np.arange(7, dtype=np.uint8)[:, None, None, None] * np.ones((1, 3, 3, 1), np.uint8)
    labels = ["cat", "dog", "cat", "emu", "dog", "cat", "emu"]
    users = ["zoe", "amy", "zoe", "bob", "amy", "bob", "zoe"]
    return UserDataset.from_arrays(images, labels, users, source={"test": True})


def test_from_arrays_groups_by_user_stably():
    ds = example_ds()
    assert ds.user_names == ["zoe", "amy", "bob"]  # first-seen order
    assert ds.label_names == ["cat", "dog", "emu"]
    np.testing.assert_array_equal(ds.offsets, [0, 3, 5, 7])
    for u, expected in enumerate([[0, 2, 6], [1, 4], [3, 5]]):
        imgs, labels = ds.user_examples(u)
        np.testing.assert_array_equal(imgs[:, 0, 0, 0], expected)  # original order kept
        orig_labels = ["cat", "dog", "cat", "emu", "dog", "cat", "emu"]
        assert [ds.label_names[i] for i in labels] == [orig_labels[i] for i in expected]
    np.testing.assert_array_equal(ds.user_of_example(), [0, 0, 0, 1, 1, 2, 2])
    assert (ds.num_users, ds.num_examples, ds.num_classes, ds.image_shape) == (3, 7, 3, (3, 3, 1))


def test_from_arrays_integer_ids_and_names():
    images = np.zeros((4, 2, 2), np.uint8)  # (N, H, W) gains a channel axis
    ds = UserDataset.from_arrays(images, [10, 3, 10, 7], [5, 5, 2, 2])
    assert ds.image_shape == (2, 2, 1)
    assert ds.label_names == ["3", "7", "10"] and ds.user_names == ["2", "5"]
    assert [ds.label_names[i] for i in ds.labels] == ["10", "7", "10", "3"]
    named = UserDataset.from_arrays(images, [0, 1, 0, 1], [1, 1, 0, 0],
                                    label_names=["a", "b"], user_names=["p", "q"])
    assert named.user_names == ["p", "q"] and list(named.labels) == [0, 1, 0, 1]


def test_from_arrays_rejects_bad_input():
    images = np.zeros((2, 2, 2, 1), np.uint8)
    with pytest.raises(DataError, match="no examples.*'ghost'"):
        UserDataset.from_arrays(images, [0, 0], [0, 0], user_names=["u", "ghost"])
    with pytest.raises(DataError, match="one entry per example"):
        UserDataset.from_arrays(images, [0], [0, 0])
    with pytest.raises(DataError, match="outside label_names"):
        UserDataset.from_arrays(images, [0, 5], [0, 0], label_names=["a"])
    # Float images in [0, 1] must not be truncated to 0/1 silently.
    with pytest.raises(DataError, match="uint8"):
        UserDataset.from_arrays(np.full((2, 2, 2), 0.9), [0, 0], [0, 0])
    with pytest.raises(DataError, match="uint8"):
        UserDataset.from_arrays(np.full((2, 2, 2), 300), [0, 0], [0, 0])
    ok = UserDataset.from_arrays(np.full((2, 2, 2), 200, dtype=np.int64), [0, 0], [0, 0])
    assert ok.images.dtype == np.uint8 and np.all(ok.images == 200)


def test_post_init_validation():
    img = np.zeros((3, 2, 2, 1), np.uint8)
    good = dict(images=img, labels=np.zeros(3, np.int64), offsets=np.array([0, 1, 3]),
                user_names=["a", "b"], label_names=["x"])
    UserDataset(**good)
    for change, pattern in [
        ({"images": img.astype(np.float32)}, "uint8"),
        ({"labels": np.zeros(2, np.int64)}, "labels has shape"),
        ({"offsets": np.array([0, 3])}, "offsets has 2 entries"),
        ({"offsets": np.array([0, 2, 1])}, "rise"),
        ({"labels": np.array([0, 0, 1])}, "outside label_names"),
    ]:
        with pytest.raises(DataError, match=pattern):
            UserDataset(**{**good, **change})


def test_select_drops_empty_users_and_relabels():
    ds = example_ds()
    ds.public_users = [2]  # bob
    keep = ds.labels != ds.label_names.index("dog")
    sub = ds.select(keep)
    assert sub.user_names == ["zoe", "bob"] and sub.public_users == [1]
    assert sub.label_names == ds.label_names and sub.num_examples == 5
    rel = ds.select(keep, relabel=True)
    assert rel.label_names == ["cat", "emu"] and set(rel.labels.tolist()) == {0, 1}
    assert rel.public_users == [] and rel.eval_labels == []
    np.testing.assert_array_equal(rel.images[:, 0, 0, 0], [0, 2, 6, 3, 5])


def test_split_partitions_examples_by_role():
    ds = example_ds()  # zoe: cat cat emu, amy: dog dog, bob: emu cat
    ds.eval_labels = [ds.label_names.index("emu")]
    ds.eval_users = [ds.user_names.index("bob")]
    ds.public_users = [ds.user_names.index("amy")]
    s = ds.split()
    assert s.eval.label_names == ["emu"] and s.eval.user_names == ["bob"]
    assert s.eval.num_examples == 1 and s.test is not None and s.test.num_examples == 1
    assert s.train.user_names == ["zoe"] and s.train.label_names == ["cat"]
    assert s.train.num_examples == 2  # zoe's emu is a test identity: unused
    assert s.public.user_names == ["amy"] and s.public.num_examples == 2
    assert s.validation.num_examples == 0
    # zoe's emu (training user, test identity) and bob's cat (test user, training identity)
    np.testing.assert_array_equal(s.unused, [False, False, True, False, False, False, True])
    tp = s.get("train_and_public")
    assert tp.num_examples == s.train.num_examples + s.public.num_examples


def test_split_validation_part_and_get():
    ds = example_ds()
    ds.validation_labels = [ds.label_names.index("dog")]
    ds.validation_users = [ds.user_names.index("amy")]
    ds.eval_labels, ds.eval_users = [ds.label_names.index("emu")], [ds.user_names.index("bob")]
    s = ds.split()
    assert s.validation.user_names == ["amy"] and s.validation.label_names == ["dog"]
    assert s.get("test").label_names == ["emu"] and s.get("validation").num_examples == 2
    with pytest.raises(ValueError, match="unknown split"):
        s.get("holdout")


@pytest.mark.parametrize(
    "change, pattern",
    [
        ({"eval_labels": [2], "validation_labels": [2]}, "both a test and a validation identity"),
        ({"eval_users": [0], "public_users": [0]}, "both a public and a test user"),
        ({"eval_users": [1], "validation_users": [1]}, "both a validation and a test user"),
        ({"eval_users": [7]}, "test .*user index lies outside"),
    ],
)
def test_overlapping_roles_are_refused(tmp_path, change, pattern):
    ds = example_ds()
    ds.eval_users = []
    for k, v in change.items():
        setattr(ds, k, v)
    with pytest.raises(DataError, match=pattern):
        ds.split()
    with pytest.raises(DataError, match=pattern):
        ds.save(tmp_path / "d")


def test_select_keeps_user_roles():
    ds = example_ds()
    ds.eval_users, ds.validation_users, ds.public_users = [2], [1], [0]
    sub = ds.select(ds.user_of_example() != 1)  # drop amy
    assert sub.user_names == ["zoe", "bob"]
    assert (sub.eval_users, sub.validation_users, sub.public_users) == ([1], [], [0])
    legacy = example_ds()
    assert legacy.select(legacy.labels >= 0).eval_users is None
    rel = ds.select(ds.labels >= 0, relabel=True)
    assert (rel.eval_users, rel.validation_users, rel.public_users) == ([], [], [])


def test_save_load_round_trip_memory_mapped(tmp_path):
    ds = example_ds()
    ds.eval_labels, ds.public_users = [1], [0]
    ds.validation_labels, ds.eval_users, ds.validation_users = [2], [1], [2]
    path = ds.save(tmp_path / "d")
    back = UserDataset.load(path)
    assert isinstance(back.images, np.memmap) and not back.images.flags.writeable
    np.testing.assert_array_equal(back.images, ds.images)
    np.testing.assert_array_equal(back.labels, ds.labels)
    np.testing.assert_array_equal(back.offsets, ds.offsets)
    assert (back.user_names, back.label_names) == (ds.user_names, ds.label_names)
    assert (back.eval_labels, back.public_users, back.source) == ([1], [0], {"test": True})
    assert (back.validation_labels, back.eval_users, back.validation_users) == ([2], [1], [2])
    assert back.origin == str(path)
    meta = json.loads((path / "meta.json").read_text())
    assert meta["format"] == 2 and meta["eval_users"] == [1] and meta["validation_labels"] == [2]
    in_memory = UserDataset.load(path, mmap=False)
    assert not isinstance(in_memory.images, np.memmap)


def test_save_replaces_a_dataset_atomically_and_leaves_no_debris(tmp_path):
    ds = example_ds()
    ds.save(tmp_path / "d")
    smaller = ds.select(ds.labels == 0)
    smaller.save(tmp_path / "d")
    assert UserDataset.load(tmp_path / "d").num_examples == smaller.num_examples
    assert sorted(os.listdir(tmp_path)) == ["d"]  # no temporary or old directories left


def test_save_refuses_to_replace_other_folders(tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(DataError, match="not a dpemb dataset"):
        example_ds().save(precious)
    assert (precious / "thesis.tex").read_text() == "years of work"
    (tmp_path / "empty").mkdir()
    example_ds().save(tmp_path / "empty")  # an empty folder may be filled
    assert UserDataset.load(tmp_path / "empty").num_examples == 7


def test_load_errors(tmp_path):
    with pytest.raises(DataError, match="not a dpemb dataset.*dpemb data make"):
        UserDataset.load(tmp_path)
    path = example_ds().save(tmp_path / "d")
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "format": 99}))
    with pytest.raises(DataError, match="unsupported dataset format 99.*re-create"):
        UserDataset.load(path)
    (path / "meta.json").write_text(json.dumps(meta))
    (path / "labels.npy").write_bytes(b"garbage")
    with pytest.raises(DataError, match="cannot read dataset arrays"):
        UserDataset.load(path)


@pytest.mark.parametrize("key, value", [("public_users", None), ("eval_labels", ["x"]), ("user_names", ...),
                                        ("label_names", None), ("validation_users", 3)])
def test_a_malformed_meta_entry_is_one_error_naming_it(tmp_path, key, value):
    path = example_ds().save(tmp_path / "d")
    meta = json.loads((path / "meta.json").read_text())
    if value is ...:
        del meta[key]
    else:
        meta[key] = value
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match=f"meta.json: entry '{key}' is missing or malformed .*re-create"):
        UserDataset.load(path)


def test_eval_users_null_means_not_recorded(tmp_path):
    path = example_ds().save(tmp_path / "d")
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, "eval_users": None}))
    assert UserDataset.load(path).eval_users is None


def test_summary_against_direct_count():
    rng = np.random.default_rng(0)
    n = 200
    users = rng.integers(0, 15, size=n)
    labels = rng.integers(0, 25, size=n)
    ds = UserDataset.from_arrays(np.zeros((n, 2, 2, 1), np.uint8), labels, users)
    ds.eval_labels, ds.public_users = [0, 1], [3]
    ds.validation_labels, ds.eval_users, ds.validation_users = [2], [0, 1], [2]
    s = ds.summary()
    holders: dict[int, set[int]] = {}
    for u, lab in zip(users.tolist(), labels.tolist()):
        holders.setdefault(lab, set()).add(u)
    per_label = [len(holders[k]) for k in sorted(holders)]
    per_user = np.bincount(users)
    assert s["examples"] == n and s["users"] == 15 and s["identities"] == len(holders)
    assert s["users_per_identity"] == {
        "min": min(per_label), "median": float(np.median(per_label)),
        "mean": round(float(np.mean(per_label)), 3), "max": max(per_label),
    }
    assert s["examples_per_user"]["min"] == per_user.min()
    assert s["examples_per_user"]["max"] == per_user.max()
    assert s["test_identities"] == 2 and s["public_users"] == 1 and s["image_shape"] == [2, 2, 1]
    assert (s["validation_identities"], s["test_users"], s["validation_users"]) == (1, 2, 1)
    ex_user, lab = ds.user_of_example(), ds.labels
    expect = {
        "train": (~np.isin(ex_user, [0, 1, 2, 3])) & (lab > 2),
        "public": (ex_user == 3) & (lab > 2),
        "validation": (ex_user == 2) & (lab == 2),
        "test": np.isin(ex_user, [0, 1]) & (lab <= 1),
    }
    for part, m in expect.items():
        assert s["splits"][part] == {
            "users": len(set(ex_user[m])), "identities": len(set(lab[m])), "examples": int(m.sum())
        }
    assert s["splits"]["unused_examples"] == n - sum(int(m.sum()) for m in expect.values())
    json.dumps(s)  # serialisable


def _write_format_1(ds: UserDataset, path) -> None:
    """What dpemb wrote before evaluation users existed: format 1, no user roles."""
    ds.eval_users = []
    ds.save(path)
    meta = json.loads((path / "meta.json").read_text())
    for k in ("validation_labels", "eval_users", "validation_users"):
        del meta[k]
    meta["format"] = 1
    (path / "meta.json").write_text(json.dumps(meta))


def test_format_1_with_held_out_owners_derives_eval_users(tmp_path):
    """Old face-like data: the held-out identities' owners hold nothing else, so the
    derived test users are exactly them and the dataset stays usable."""
    images = np.zeros((12, 2, 2, 1), np.uint8)
    users = np.repeat(np.arange(6), 2)
    ds = UserDataset.from_arrays(images, users % 3, users)  # user u holds identity u % 3
    ds.eval_labels, ds.public_users = [2], [0]
    _write_format_1(ds, tmp_path / "old")
    old = UserDataset.load(tmp_path / "old")
    assert old.eval_users is None
    s = old.split()
    assert s.eval.user_names == ["2", "5"] and s.eval.num_examples == 4
    assert s.train.user_names == ["1", "3", "4"] and not s.unused.any()
    assert old.summary()["test_users"] == "not recorded (format 1)"


def test_format_1_evaluating_on_training_users_is_refused(tmp_path):
    """Old shared-regime data: the held-out characters were written by training users.
    split() must not silently evaluate on them."""
    ds = example_ds()
    ds.eval_labels = [ds.label_names.index("emu")]  # written by zoe and bob, who train
    _write_format_1(ds, tmp_path / "old")
    old = UserDataset.load(tmp_path / "old")
    with pytest.raises(DataError) as e:
        old.split()
    msg = str(e.value)
    assert str(tmp_path / "old") in msg and "2 of its 2 evaluation (test) examples" in msg
    assert "dpemb data split" in msg and "dpemb data make" in msg
    assert old.summary()["splits"].startswith("unusable:")  # inspect still works


def test_format_1_without_any_eval_example_is_refused(tmp_path):
    ds = example_ds()
    ds.eval_labels = [ds.label_names.index("emu")]
    ds.labels = np.where(ds.labels == 2, 0, ds.labels)  # emu has no example left
    _write_format_1(ds, tmp_path / "old")
    with pytest.raises(DataError, match="no evaluation \\(test\\) example"):
        UserDataset.load(tmp_path / "old").split()

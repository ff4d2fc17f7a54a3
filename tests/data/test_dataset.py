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
    ds = example_ds()
    ds.eval_labels = [ds.label_names.index("emu")]
    ds.public_users = [ds.user_names.index("amy")]
    s = ds.split()
    assert s.eval.label_names == ["emu"] and s.eval.num_examples == 2
    assert s.train.user_names == ["zoe", "bob"] and "emu" not in s.train.label_names
    assert s.public.user_names == ["amy"] and s.public.num_examples == 2
    assert s.train.num_examples + s.public.num_examples + s.eval.num_examples == ds.num_examples
    tp = s.train_and_public
    assert tp.num_examples == s.train.num_examples + s.public.num_examples


def test_save_load_round_trip_memory_mapped(tmp_path):
    ds = example_ds()
    ds.eval_labels, ds.public_users = [1], [0]
    path = ds.save(tmp_path / "d")
    back = UserDataset.load(path)
    assert isinstance(back.images, np.memmap) and not back.images.flags.writeable
    np.testing.assert_array_equal(back.images, ds.images)
    np.testing.assert_array_equal(back.labels, ds.labels)
    np.testing.assert_array_equal(back.offsets, ds.offsets)
    assert (back.user_names, back.label_names) == (ds.user_names, ds.label_names)
    assert (back.eval_labels, back.public_users, back.source) == ([1], [0], {"test": True})
    assert json.loads((path / "meta.json").read_text())["format"] == 1
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
    with pytest.raises(DataError, match="unsupported dataset format 99"):
        UserDataset.load(path)
    (path / "meta.json").write_text(json.dumps(meta))
    (path / "labels.npy").write_bytes(b"garbage")
    with pytest.raises(DataError, match="cannot read dataset arrays"):
        UserDataset.load(path)


def test_summary_against_direct_count():
    rng = np.random.default_rng(0)
    n = 200
    users = rng.integers(0, 15, size=n)
    labels = rng.integers(0, 25, size=n)
    ds = UserDataset.from_arrays(np.zeros((n, 2, 2, 1), np.uint8), labels, users)
    ds.eval_labels, ds.public_users = [0, 1], [3]
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
    assert s["eval_identities"] == 2 and s["public_users"] == 1 and s["image_shape"] == [2, 2, 1]
    json.dumps(s)  # serialisable

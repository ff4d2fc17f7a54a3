"""RowView: lazy read-only row views of a memory-mapped image array, and the splits of a
loaded dataset built from them (nothing copied until rows are read)."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest
import torch

from dpemb.algorithms.round import client_example_indices
from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.rows import RowView, iter_batches, row_view
from dpemb.models import build_backbone
from dpemb.training.evaluate import embed_images, evaluate_backbone
from tests.conftest import make_tiny_dataset


@pytest.fixture
def base(tmp_path):
    """(memmap of 200 random 3x2x2 rows, the same array in memory)."""
    arr = np.random.default_rng(0).integers(0, 256, size=(200, 3, 2, 2), dtype=np.uint8)
    np.save(tmp_path / "a.npy", arr)
    return np.load(tmp_path / "a.npy", mmap_mode="r"), arr


ROWS = np.sort(np.random.default_rng(1).choice(200, size=80, replace=False))


def keys(n: int) -> list:
    rng = np.random.default_rng(2)
    return [
        0, 7, n - 1, -1, -n, np.int64(3),
        slice(None), slice(5, 40), slice(3, 70, 7), slice(None, None, -1), slice(-5, 2, -3), slice(50, 10),
        rng.random(n) < 0.4, np.zeros(n, dtype=bool), np.ones(n, dtype=bool),
        np.array([4, 1, 1, n - 2, 4, 0]), [3, 3, 3], np.arange(n), np.array([-1, -2, 5]),
        np.array([[1, 2], [3, 0]]), [], np.array([], dtype=np.int64),
        (5, 1), (slice(2, 9), 0), (np.array([3, 1]), slice(None), 1), (slice(1, 4), Ellipsis, 0),
        Ellipsis, (Ellipsis, 1),
    ]


def _check(view, ref) -> None:
    assert len(view) == len(ref) and view.shape == ref.shape
    assert (view.dtype, view.ndim, view.size, view.nbytes) == (ref.dtype, ref.ndim, ref.size, ref.nbytes)
    for k in keys(len(ref)):
        got, want = view[k], ref[k]
        assert isinstance(got, np.ndarray) and not isinstance(got, np.memmap), k
        assert got.shape == want.shape and got.dtype == want.dtype, k
        np.testing.assert_array_equal(got, want, err_msg=repr(k))
    np.testing.assert_array_equal(np.asarray(view), ref)
    np.testing.assert_array_equal(np.stack(list(view)), ref)


def test_indexing_equals_numpy_on_the_materialised_array(base):
    mm, arr = base
    view = RowView(mm, ROWS)
    _check(view, arr[ROWS])
    assert not view.flags.writeable and not view.flags["WRITEABLE"]
    assert view.base is mm and view.releases_pages


def test_a_view_of_a_view_is_one_view_over_the_base(base):
    mm, arr = base
    view = RowView(mm, ROWS)
    sub = np.flatnonzero(np.random.default_rng(3).random(len(ROWS)) < 0.5)
    vv = view.view(sub)
    assert vv.base is mm and not isinstance(vv.base, RowView)
    np.testing.assert_array_equal(vv.rows, ROWS[sub])
    _check(vv, arr[ROWS][sub])
    assert RowView(view, np.arange(len(view)) < 10).base is mm  # a mask composes too
    _check(RowView(vv, np.arange(len(vv))[::3]), arr[ROWS][sub][::3])


def test_in_memory_base_and_empty_views(base):
    _, arr = base
    _check(RowView(arr, ROWS), arr[ROWS])
    empty = RowView(arr, [])
    assert empty.shape == (0, 3, 2, 2) and np.asarray(empty).shape == (0, 3, 2, 2)
    assert empty[:].shape == (0, 3, 2, 2) and empty[np.array([], dtype=int)].shape == (0, 3, 2, 2)


def test_errors_match_numpy(base):
    mm, arr = base
    view, ref = RowView(mm, ROWS), arr[ROWS]
    for bad in (len(ROWS), -len(ROWS) - 1, np.array([0, len(ROWS)])):
        with pytest.raises(IndexError):
            ref[bad]
        with pytest.raises(IndexError):
            view[bad]
    with pytest.raises(IndexError):
        view[np.ones(len(ROWS) + 1, dtype=bool)]
    with pytest.raises(IndexError):
        view[np.array([0.5])]
    with pytest.raises(ValueError, match="sorted and distinct"):
        RowView(mm, [3, 1])
    with pytest.raises(ValueError, match="sorted and distinct"):
        RowView(mm, [1, 1])
    with pytest.raises(IndexError):
        RowView(mm, [0, 200])
    with pytest.raises(IndexError):
        RowView(view, [len(view)])
    with pytest.raises(ValueError):
        np.asarray(view, copy=False)


def test_reads_are_fresh_writeable_copies(base):
    mm, arr = base
    view = RowView(mm, ROWS)
    got = view[:5]
    assert got.flags.writeable
    got[...] = 0
    np.testing.assert_array_equal(view[:5], arr[ROWS[:5]])  # the view is unchanged
    rows = ROWS.copy()
    v2 = RowView(mm, rows)
    rows[0] = 199  # the caller's index array is not shared
    np.testing.assert_array_equal(v2[0], arr[ROWS[0]])
    assert not v2.rows.flags.writeable


class CountingArray(np.ndarray):
    """Counts the slices read from it."""

    reads: list = []

    def __getitem__(self, key):
        CountingArray.reads.append(key)
        return np.asarray(super().__getitem__(key))


def test_consecutive_runs_are_read_as_one_slice_each():
    arr = np.arange(100 * 4, dtype=np.uint8).reshape(100, 4, 1, 1).view(CountingArray)
    view = RowView(arr, np.concatenate([np.arange(10, 40), np.arange(50, 90)]))
    CountingArray.reads = []
    idx = np.concatenate([np.arange(5, 30), np.arange(30, 60)])  # base rows 15..39 and 50..79
    got = view[idx]
    assert CountingArray.reads == [slice(15, 40), slice(50, 80)]
    np.testing.assert_array_equal(got, np.asarray(arr)[np.r_[15:40, 50:80]])
    CountingArray.reads = []
    np.testing.assert_array_equal(view[np.arange(3, 20)], np.asarray(arr)[13:30])  # one user's rows
    assert CountingArray.reads == [slice(13, 30)]


def test_select_on_a_memmapped_dataset_is_a_view_equal_to_the_copy(tmp_path):
    ds = make_tiny_dataset()
    ds.save(tmp_path / "d")
    mm = UserDataset.load(tmp_path / "d")
    mem = UserDataset.load(tmp_path / "d", mmap=False)
    assert isinstance(mm.images, np.memmap)
    mask = np.random.default_rng(0).random(mm.num_examples) < 0.6
    for relabel in (False, True):
        a, b = mm.select(mask, relabel=relabel), mem.select(mask, relabel=relabel)
        assert isinstance(a.images, RowView) and a.images.base is mm.images
        assert isinstance(b.images, np.ndarray) and not isinstance(b.images, RowView)
        np.testing.assert_array_equal(np.asarray(a.images), b.images)
        np.testing.assert_array_equal(a.labels, b.labels)
        np.testing.assert_array_equal(a.offsets, b.offsets)
        assert a.user_names == b.user_names and a.label_names == b.label_names
        for u in range(a.num_users):
            np.testing.assert_array_equal(a.user_examples(u)[0], b.user_examples(u)[0])
        # a subset of the subset: still one view over the memmap
        aa = a.select(a.labels % 2 == 0)
        assert isinstance(aa.images, RowView) and aa.images.base is mm.images
        np.testing.assert_array_equal(np.asarray(aa.images), b.select(b.labels % 2 == 0).images)
    # selecting everything keeps a lazy view too; in memory, the array itself (as before)
    assert isinstance(mm.select(np.ones(mm.num_examples, bool)).images, RowView)
    assert mem.select(np.ones(mem.num_examples, bool)).images is mem.images


def test_splits_of_a_loaded_dataset_are_not_materialised(tmp_path):
    make_tiny_dataset().save(tmp_path / "d")
    ds = UserDataset.load(tmp_path / "d")
    ref = UserDataset.load(tmp_path / "d", mmap=False).split()
    sp = ds.split()
    for name in ("train", "public", "train_and_public", "eval"):
        part = sp.get(name)
        assert isinstance(part.images, RowView), name
        assert part.images.base is ds.images  # the one memmap, shared by every split
        assert part.images.nbytes == ref.get(name).images.nbytes
        np.testing.assert_array_equal(np.asarray(part.images), ref.get(name).images)
    train, ref_train = sp.train, ref.train
    # what the federated loop does: each client's rows, gathered on their own
    for users in ([0], [3, 1], list(range(train.num_users))):
        idx = client_example_indices(train.offsets, np.array(users))
        np.testing.assert_array_equal(train.images[idx], ref_train.images[idx])


def test_saving_a_split_writes_what_np_save_writes(tmp_path):
    make_tiny_dataset().save(tmp_path / "d")
    lazy = UserDataset.load(tmp_path / "d").split().train
    copy = UserDataset.load(tmp_path / "d", mmap=False).split().train
    assert isinstance(lazy.images, RowView)
    lazy.save(tmp_path / "lazy")
    copy.save(tmp_path / "copy")
    for f in ("images.npy", "labels.npy", "offsets.npy", "meta.json"):
        assert (tmp_path / "lazy" / f).read_bytes() == (tmp_path / "copy" / f).read_bytes(), f
    back = UserDataset.load(tmp_path / "lazy")
    np.testing.assert_array_equal(back.images, copy.images)


def test_the_dataset_validates_a_row_view(tmp_path):
    ds = make_tiny_dataset()
    ds.save(tmp_path / "d")
    mm = UserDataset.load(tmp_path / "d")
    with pytest.raises(DataError, match="uint8"):
        UserDataset(images=RowView(mm.images.astype(np.int16), np.arange(mm.num_examples)),
                    labels=mm.labels, offsets=mm.offsets, user_names=mm.user_names,
                    label_names=mm.label_names)
    with pytest.raises(DataError, match="has shape"):
        UserDataset(images=RowView(mm.images, np.arange(3)), labels=mm.labels, offsets=mm.offsets,
                    user_names=mm.user_names, label_names=mm.label_names)
    with pytest.raises(DataError, match="numpy array"):
        UserDataset(images=list(ds.images), labels=ds.labels, offsets=ds.offsets,
                    user_names=ds.user_names, label_names=ds.label_names)


def test_pickling_reopens_the_file_instead_of_copying(base, tmp_path):
    mm, arr = base
    view = RowView(mm, ROWS)
    blob = pickle.dumps(view)
    assert len(blob) < ROWS.nbytes + 1000 < arr[ROWS].nbytes * 2  # the index, not the rows
    back = pickle.loads(blob)
    assert isinstance(back.base, np.memmap) and back.releases_pages
    np.testing.assert_array_equal(np.asarray(back), arr[ROWS])
    mem = pickle.loads(pickle.dumps(RowView(arr, ROWS)))
    np.testing.assert_array_equal(np.asarray(mem), arr[ROWS])


def test_iter_batches_and_row_view_helpers(base):
    mm, arr = base
    for images in (mm, arr, RowView(mm, ROWS)):
        ref = np.asarray(images)
        got = list(iter_batches(images, 33))
        assert [s for s, _ in got] == list(range(0, len(ref), 33))
        np.testing.assert_array_equal(np.concatenate([b for _, b in got]), ref)
    assert isinstance(row_view(mm), RowView) and row_view(arr) is arr
    np.testing.assert_array_equal(row_view(arr, ROWS), arr[ROWS])
    np.testing.assert_array_equal(np.asarray(row_view(RowView(mm, ROWS), [0, 2])), arr[ROWS[[0, 2]]])


def _rss_file_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_reads_drop_the_pages_they_touched(tmp_path):
    """A whole pass over a 24 MB memmap through a RowView leaves (almost) none of its
    pages mapped; the same pass without releasing maps all of them."""
    n = 24 * 1024
    f = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.uint8, shape=(n, 32, 32, 1))
    f[:] = 1
    f.flush()
    del f
    for release, lo, hi in ((True, None, 6 * 1024), (False, 20 * 1024, None)):
        mm = np.load(tmp_path / "big.npy", mmap_mode="r")
        view = RowView(mm, np.arange(n), release_pages=release)
        before = _rss_file_kb()
        total = sum(int(b[:, 0, 0, 0].sum()) for b in view.batches(1000))
        grew = _rss_file_kb() - before
        assert total == n
        assert (lo is None or grew >= lo) and (hi is None or grew <= hi), (release, grew)
        del view, mm


def test_evaluation_on_a_memmapped_dataset_equals_in_memory(tmp_path):
    make_tiny_dataset(num_users=30, per_user=8).save(tmp_path / "d")
    lazy = UserDataset.load(tmp_path / "d").split().eval
    mem = UserDataset.load(tmp_path / "d", mmap=False).split().eval
    assert isinstance(lazy.images, RowView)
    torch.manual_seed(0)
    model = build_backbone("lenet", in_channels=1, image_size=28, embedding_dim=16)
    for bs in (7, 512):
        a = embed_images(model, lazy.images, batch_size=bs)
        b = embed_images(model, mem.images, batch_size=bs)
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    ma, _ = evaluate_backbone(model, lazy, batch_size=16)
    mb, _ = evaluate_backbone(model, mem, batch_size=16)
    assert ma == mb


def test_centralized_training_on_a_memmapped_dataset_equals_in_memory(tmp_path):
    from dpemb.training.centralized import train_centralized
    from dpemb.training.config import ModelConfig, OptimConfig, RunConfig

    make_tiny_dataset(num_users=30, per_user=8).save(tmp_path / "d")
    reports = []
    for mmap in (True, False):
        sp = UserDataset.load(tmp_path / "d", mmap=mmap).split()
        assert isinstance(sp.train.images, RowView) == mmap
        rep = train_centralized(sp.train, sp.eval, ModelConfig(backbone="lenet", embedding_dim=16),
                                OptimConfig(steps=6, batch_size=16, lr=0.05),
                                RunConfig(out=str(tmp_path / f"r{mmap}"), eval_every=6, progress=False))
        reports.append(rep["final"])
    assert reports[0] == reports[1]

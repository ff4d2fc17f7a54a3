"""Data fingerprints recognise the same users by content, and nothing else."""

import numpy as np

from dpemb.data.dataset import UserDataset
from dpemb.data.fingerprint import dataset_fingerprint, shared_users, user_fingerprints


def _ds(images: np.ndarray, sizes: list[int], labels: np.ndarray | None = None) -> UserDataset:
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    labels = np.zeros(len(images), dtype=np.int64) if labels is None else labels
    return UserDataset(images=images, labels=labels, offsets=offsets,
                       user_names=[f"u{i}" for i in range(len(sizes))],
                       label_names=[str(i) for i in range(int(labels.max()) + 1)])


def test_users_are_recognised_after_a_reimport_that_renames_relabels_and_reorders():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (10, 6, 6, 1), dtype=np.uint8)
    a = _ds(img, [3, 3, 4])
    b = _ds(np.concatenate([img[6:], img[:6]]), [4, 3, 3], labels=np.arange(10) % 2)  # users reordered
    fa, fb = user_fingerprints(a), user_fingerprints(b)
    assert fa.dtype == np.uint64 and len(set(fa.tolist())) == 3
    assert sorted(fa.tolist()) == sorted(fb.tolist())
    assert shared_users(fa, fb) == 3
    assert dataset_fingerprint(a) != dataset_fingerprint(b)  # order and labels differ


def test_the_dataset_fingerprint_changes_with_one_pixel_one_label_or_one_boundary():
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (8, 5, 5, 3), dtype=np.uint8)
    base = dataset_fingerprint(_ds(img, [4, 4]))
    assert dataset_fingerprint(_ds(img.copy(), [4, 4])) == base
    px = img.copy()
    px[7, 4, 4, 2] ^= 1
    lab = np.zeros(8, dtype=np.int64)
    lab[3] = 1
    assert len({base, dataset_fingerprint(_ds(px, [4, 4])), dataset_fingerprint(_ds(img, [4, 4], lab)),
                dataset_fingerprint(_ds(img, [3, 5]))}) == 4
    # one changed user changes only that user's fingerprint
    f0, f1 = user_fingerprints(_ds(img, [4, 4])), user_fingerprints(_ds(px, [4, 4]))
    assert f0[0] == f1[0] and f0[1] != f1[1]


def test_large_users_are_hashed_in_chunks_with_the_same_result(monkeypatch):
    import dpemb.data.fingerprint as fp

    img = np.random.default_rng(2).integers(0, 256, (50, 8, 8, 1), dtype=np.uint8)
    ds = _ds(img, [20, 30])
    whole = user_fingerprints(ds)
    monkeypatch.setattr(fp, "_CHUNK", 64 * 3)  # 3 rows a read
    assert np.array_equal(user_fingerprints(ds), whole)

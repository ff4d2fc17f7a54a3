"""Feature files and feature extraction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.tensors import resize_square
from dpemb.transfer.features import (
    FeatureSet,
    extract_features,
    load_backbone,
    load_features,
    load_image_dataset,
    save_features,
)


def _dataset(n: int = 10, channels: int = 1, seed: int = 0) -> UserDataset:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28, channels), dtype=np.uint8)
    labels = rng.integers(0, 3, n)
    users = np.arange(n) // 2
    return UserDataset.from_arrays(images, labels, users, label_names=["a", "b", "c"])


def test_save_load_roundtrip(tmp_path):
    fs = FeatureSet(np.arange(12, dtype=np.float32).reshape(4, 3), np.array([0, 1, 1, 0]), ("x", "y"),
                    users=np.array([3, 3, 5, 6]), meta={"backbone": "b", "image_size": 64})
    path = save_features(tmp_path / "f.npz", fs)
    back = load_features(path)
    np.testing.assert_array_equal(back.features, fs.features)
    np.testing.assert_array_equal(back.labels, fs.labels)
    np.testing.assert_array_equal(back.users, fs.users)
    assert back.label_names == ("x", "y") and back.meta == {"backbone": "b", "image_size": 64}
    no_users = save_features(tmp_path / "g.npz", FeatureSet(fs.features, fs.labels, fs.label_names))
    assert load_features(no_users).users is None


def test_bad_feature_files_are_named(tmp_path):
    with pytest.raises(DataError, match="no such feature file"):
        load_features(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(DataError, match=r"other.npz: not a feature file: it holds a; expected either features, "
                                        r"labels, label_names, meta .* or X and y"):
        load_features(tmp_path / "other.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="junk.npz"):
        load_features(tmp_path / "junk.npz")


def test_featureset_validation_names_the_row():
    x = np.ones((3, 2), dtype=np.float32)
    x[2, 0] = np.inf
    with pytest.raises(DataError, match="row 2"):
        FeatureSet(x, np.zeros(3, dtype=np.int64), ("a",))
    with pytest.raises(DataError, match="row 1"):
        FeatureSet(np.ones((3, 2), dtype=np.float32), np.array([0, 4, 0]), ("a", "b"))


def test_extract_features_batched_equals_one_batch_and_keeps_users():
    from dpemb.models.registry import build_backbone

    torch.manual_seed(0)
    model = build_backbone("lenet", in_channels=1, image_size=28).eval()
    ds = _dataset(10)
    a = extract_features(ds, model, batch_size=3, progress=False, device="cpu")
    b = extract_features(ds, model, batch_size=100, progress=False, device="cpu")
    np.testing.assert_allclose(a.features, b.features, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        from dpemb.data.tensors import to_float_tensor

        direct = model.forward_features(to_float_tensor(ds.images)).numpy()
    np.testing.assert_allclose(a.features, direct, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(a.users, ds.user_of_example())
    np.testing.assert_array_equal(a.labels, ds.labels)
    assert a.meta["num_users"] == 5


def test_extract_features_refuses_a_channel_mismatch():
    from dpemb.models.registry import build_backbone

    model = build_backbone("lenet", in_channels=1, image_size=28)
    with pytest.raises(DataError, match="3-channel"):
        extract_features(_dataset(4, channels=3), model, progress=False)


def test_resize_batch_shapes():
    x = torch.rand(2, 1, 28, 28)
    assert resize_square(x, 64).shape == (2, 1, 64, 64)
    assert resize_square(x, 14).shape == (2, 1, 14, 14)
    assert resize_square(x, 28) is x


def test_backbone_from_a_release_artifact(tmp_path):
    from dpemb.models.registry import build_backbone
    from dpemb.training.artifact import ArtifactError, make_card, write_artifact

    torch.manual_seed(1)
    kwargs = {"in_channels": 1, "image_size": 28}
    model = build_backbone("lenet", **kwargs)
    card = make_card(backbone_name="lenet", backbone_kwargs=kwargs, embedding_dim=model.embedding_dim,
                     trainable="all", algorithm="centralized", progress={"steps": 0},
                     provenance={"train_split": "public", "private_training": False, "init": "random"},
                     privacy="not private")
    write_artifact(tmp_path / "art", model, card)
    for where in (tmp_path / "art", tmp_path / "art" / "model_card.json"):
        loaded, desc = load_backbone(model=where)
        assert desc["backbone_name"] == "lenet" and desc["image_size"] == 28
        x = torch.rand(2, 1, 28, 28)
        with torch.no_grad():
            torch.testing.assert_close(loaded.forward_features(x), model.eval().forward_features(x))
    # a torch pickle (a training checkpoint, or any .pt) is refused with the way out
    torch.save({"backbone_name": "lenet", "backbone_kwargs": kwargs, "backbone": model.state_dict()},
               tmp_path / "ckpt.pt")
    with pytest.raises(ArtifactError, match="dpemb export"):
        load_backbone(model=tmp_path / "ckpt.pt")


def test_imagenet_backbone_features_when_weights_are_installed():
    from dpemb.models.pretrained import imagenet_weights_available

    if not imagenet_weights_available():
        pytest.skip("ImageNet MobileNetV2 weights not installed (make weights)")
    model, desc = load_backbone("imagenet-mobilenetv2", in_channels=1, image_size=32)
    fs = extract_features(_dataset(4), model, progress=False, device="cpu")
    assert fs.features.shape == (4, 1280) and desc["feature_dim"] == 1280
    assert np.all(fs.features >= 0)  # pooled after ReLU6


def test_dataset_specs(tmp_path):
    ds = _dataset(6)
    ds.save(tmp_path / "ds")
    got, spec = load_image_dataset(str(tmp_path / "ds"))
    assert got.num_examples == 6 and spec == str(tmp_path / "ds")
    with pytest.raises(ValueError, match="fashion-mnist:train or fashion-mnist:test"):
        load_image_dataset("fashion-mnist")
    with pytest.raises(ValueError, match="neither a built-in"):
        load_image_dataset(str(tmp_path / "nowhere"))


def _raw_feature_file(path, features, labels, label_names=("a", "b")):
    import json

    np.savez(path, features=features, labels=labels, label_names=np.asarray(label_names),
             meta=np.asarray(json.dumps({"format": 1})))
    return path


def test_bad_contents_of_a_feature_file_name_the_file_and_the_fix(tmp_path):
    x = np.ones((4, 3), dtype=np.float32)
    bad_count = _raw_feature_file(tmp_path / "count.npz", x, np.array([0, 1, 0]))
    with pytest.raises(DataError, match=r"count\.npz: 4 feature rows need 4 integer labels.*dpemb features"):
        load_features(bad_count)
    x_nan = x.copy()
    x_nan[2, 1] = np.nan
    with pytest.raises(DataError, match=r"nan\.npz: row 2 .*non-finite.*re-extract"):
        load_features(_raw_feature_file(tmp_path / "nan.npz", x_nan, np.array([0, 1, 0, 1])))
    fs = load_features(_raw_feature_file(tmp_path / "ok.npz", x, np.array([0, 1, 0, 1])))
    assert fs.source == str(tmp_path / "ok.npz") and fs.subset(np.array([0, 1])).source == fs.source


def test_plain_feature_files(tmp_path):
    """Your own features: X and y (users, label_names optional), no meta; X alone for prediction."""
    from dpemb.transfer.features import read_feature_rows

    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.savez(tmp_path / "xy.npz", X=x, y=np.array([0, 2, 1, 2]), users=np.array([5, 5, 6, 7]))
    fs = load_features(tmp_path / "xy.npz")
    assert fs.label_names == ("0", "1", "2") and fs.meta == {} and fs.users.tolist() == [5, 5, 6, 7]
    np.testing.assert_array_equal(fs.features, x)
    np.savez(tmp_path / "named.npz", X=x, y=np.array([0, 1, 0, 1]), label_names=np.array(["no", "yes"]))
    assert load_features(tmp_path / "named.npz").label_names == ("no", "yes")

    np.savez(tmp_path / "x.npz", X=x)
    rows = read_feature_rows(tmp_path / "x.npz")
    assert rows.labels is None and rows.label_names is None and rows.features.shape == (4, 3)
    with pytest.raises(DataError, match=r"x\.npz: no labels .*needs y next to X"):
        load_features(tmp_path / "x.npz")
    bad = {"ints.npz": (dict(X=np.ones((4, 3), dtype=np.int64), y=np.zeros(4, dtype=int)),
                        r"X must be a float array.*astype"),
           "fy.npz": (dict(X=x, y=np.zeros(4)), r"y must be integers, one per row of X \(4\)"),
           "short.npz": (dict(X=x, y=np.zeros(3, dtype=int)), r"y must be integers, one per row"),
           "extra.npz": (dict(X=x, y=np.zeros(4, dtype=int), ids=np.arange(4)), r"also holds ids"),
           "names.npz": (dict(X=x, label_names=np.array(["a"])), r"label_names without labels y"),
           "range.npz": (dict(X=x, y=np.array([0, 1, 0, 3]), label_names=np.array(["a", "b"])), r"row 3: label 3")}
    for name, (arrays, message) in bad.items():
        np.savez(tmp_path / name, **arrays)
        with pytest.raises(DataError, match=name.replace(".", r"\.") + ": .*" + message):
            load_features(tmp_path / name)

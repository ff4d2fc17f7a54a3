"""`dpemb features` and `dpemb transfer` end to end on small inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpemb.cli.main import main
from dpemb.data.dataset import UserDataset
from dpemb.transfer.features import FeatureSet, load_features, save_features

K, D = 3, 10


def _write_features(tmp_path, n, seed, name):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    x = rng.normal(size=(n, D)) + 4.0 * np.eye(K, D)[y] + 1.0
    fs = FeatureSet(x.astype(np.float32), y.astype(np.int64), ("a", "b", "c"), users=np.arange(n) // 2)
    return str(save_features(tmp_path / name, fs))


@pytest.fixture()
def feature_files(tmp_path):
    return _write_features(tmp_path, 600, 0, "train.npz"), _write_features(tmp_path, 200, 1, "test.npz")


def test_transfer_every_method_prints_top1_epsilon_and_split(feature_files, capsys):
    train, test = feature_files
    for method in ("dp-ls", "dp-sgd", "dp-newton", "dp-fc"):
        argv = ["transfer", "--train", train, "--test", test, "--method", method, "--epsilon", "2",
                "--accountant", "rdp"]
        if method in ("dp-sgd", "dp-fc"):
            argv += ["--steps", "3"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert f"method {method}: top-1" in out
        # default delta 1/(10 N) for the N = 600 training examples
        assert "epsilon = " in out and "delta = 0.000167" in out and "RDP" in out and "example-level" in out and "add/remove" in out
        assert "budget split: equal over" in out
        assert "noise sampler: secure" in out  # the default without --seed


def test_transfer_sweep_json_plot_and_baseline(feature_files, tmp_path, capsys):
    train, test = feature_files
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    rc = main(["transfer", "--train", train, "--test", test, "--method", "non-private,dp-ls,dp-fc",
               "--sweep-epsilon", "0.5,4", "--steps", "2", "--accountant", "rdp", "--json", str(out_json), "--plot", str(out_png),
               "--unit", "user", "--seed", "3"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| dp-ls |" in text and "| non-private (no DP) |" in text and "sum of their epsilons" in text
    runs = json.loads(out_json.read_text())["runs"]
    assert [r["method"] for r in runs] == ["non-private", "dp-ls", "dp-ls", "dp-fc", "dp-fc"]
    dp = [r for r in runs if r["method"] != "non-private"]
    for r in dp:
        assert r["unit"] == "user" and r["seeded"] and r["epsilon"] == pytest.approx(r["target_epsilon"], rel=0.02)
        assert r["releases"] and 0 <= r["top1"] <= 1
    assert out_png.stat().st_size > 1000
    assert "seeded" in text


def test_transfer_refuses_missing_or_zero_noise(feature_files, capsys):
    train, test = feature_files
    base = ["transfer", "--train", train, "--test", test, "--method", "dp-ls"]
    for extra in ([], ["--epsilon", "0"], ["--noise-multiplier", "0"], ["--epsilon", "inf"]):
        with pytest.raises(SystemExit) as e:
            main(base + extra)
        assert e.value.code == 2, extra
    capsys.readouterr()
    assert main(base + ["--non-private"]) == 0
    assert "not private: no noise (explicitly requested)" in capsys.readouterr().out


def test_transfer_holdout_and_bad_flags(feature_files, capsys):
    train, _ = feature_files
    assert main(["transfer", "--train", train, "--holdout", "0.25", "--method", "dp-newton", "--epsilon", "1"]) == 0
    assert "top-1" in capsys.readouterr().out
    for argv in (["--method", "dp-xx", "--epsilon", "1"], ["--method", "dp-ls", "--epsilon", "1", "--holdout", "2"],
                 ["--method", "dp-ls", "--sweep-epsilon", "1,-2"], ["--method", "dp-ls", "--epsilon", "1", "--plot", "x.png"]):
        with pytest.raises(SystemExit) as e:
            main(["transfer", "--train", train, "--holdout", "0.2"] + argv[:] if "--holdout" not in argv
                 else ["transfer", "--train", train] + argv)
        assert e.value.code == 2, argv


def test_transfer_bad_feature_file_exits_1(tmp_path, capsys):
    (tmp_path / "bad.npz").write_bytes(b"junk")
    assert main(["transfer", "--train", str(tmp_path / "bad.npz"), "--holdout", "0.2", "--method", "dp-ls",
                 "--epsilon", "1"]) == 1
    assert "bad.npz" in capsys.readouterr().err


def test_features_command_on_a_dataset_directory(tmp_path, capsys):
    from dpemb.models.pretrained import imagenet_weights_available

    if not imagenet_weights_available():
        pytest.skip("ImageNet MobileNetV2 weights not installed (make weights)")
    rng = np.random.default_rng(0)
    ds = UserDataset.from_arrays(rng.integers(0, 256, size=(6, 28, 28, 1), dtype=np.uint8),
                                 np.array([0, 1, 2, 0, 1, 2]), np.array([0, 0, 1, 1, 2, 2]),
                                 label_names=["a", "b", "c"])
    ds.save(tmp_path / "ds")
    out = tmp_path / "f.npz"
    assert main(["features", "--data", str(tmp_path / "ds"), "--image-size", "32", "--out", str(out),
                 "--limit", "4", "--quiet"]) == 0
    fs = load_features(out)
    assert fs.features.shape == (4, 1280)
    assert fs.meta["backbone"] == "imagenet-mobilenetv2" and fs.meta["image_size"] == 32
    assert len(fs.users) == 4 and set(fs.users.tolist()) <= {0, 1, 2}
    assert fs.meta["num_users"] == len(set(fs.users.tolist()))
    assert "wrote 4 x 1280 features" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["features", "--data", "fashion-mnist", "--out", str(out)])
    assert e.value.code == 2


def _raw(path, x, y, names):
    np.savez(path, features=x.astype(np.float32), labels=y, label_names=np.asarray(names),
             meta=np.asarray(json.dumps({"format": 1})))
    return str(path)


def test_transfer_names_the_file_for_an_empty_class_one_class_or_mismatched_test(tmp_path, feature_files, capsys):
    train, test = feature_files
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, D))
    cases = {
        "empty.npz": _raw(tmp_path / "empty.npz", x, np.arange(40) % 2, ["a", "b", "c"]),
        "one.npz": _raw(tmp_path / "one.npz", x, np.zeros(40, dtype=np.int64), ["a"]),
    }
    for name, path in cases.items():
        assert main(["transfer", "--train", path, "--holdout", "0.2", "--method", "dp-ls", "--epsilon", "1"]) == 1
        err = capsys.readouterr().err
        assert name in err and ("no training example" in err or "at least two" in err), err
    wide = _raw(tmp_path / "wide.npz", rng.normal(size=(20, D + 1)), np.arange(20) % K, ["a", "b", "c"])
    assert main(["transfer", "--train", train, "--test", wide, "--method", "dp-ls", "--epsilon", "1"]) == 1
    err = capsys.readouterr().err
    assert "wide.npz" in err and "train.npz" in err and "same backbone" in err


def test_transfer_sweep_table_names_accountant_delta_unit_relation(feature_files, capsys):
    train, test = feature_files
    assert main(["transfer", "--train", train, "--test", test, "--method", "dp-ls", "--sweep-epsilon", "1,2",
                 "--accountant", "rdp", "--delta", "1e-6"]) == 0
    out = capsys.readouterr().out
    caption = [line for line in out.splitlines() if line.startswith("(columns: target epsilon")]
    assert caption and all(w in caption[0] for w in ("RDP", "delta = 1e-06", "example-level", "add/remove")), out


def test_several_dp_runs_state_their_total_cost(feature_files, capsys):
    train, test = feature_files
    assert main(["transfer", "--train", train, "--test", test, "--method", "dp-ls,dp-newton",
                 "--epsilon", "1.5"]) == 0
    out = capsys.readouterr().out
    assert "these 2 DP runs" in out and "up to 3 in total" in out
    assert main(["transfer", "--train", train, "--test", test, "--method", "dp-ls", "--epsilon", "1.5"]) == 0
    assert "DP runs each spend" not in capsys.readouterr().out
    # a sweep is several runs on the same data too
    assert main(["transfer", "--train", train, "--test", test, "--method", "dp-ls", "--sweep-epsilon", "1,2"]) == 0
    assert "these 2 DP runs" in capsys.readouterr().out


def test_transfer_json_is_released_and_exact_counts_go_to_a_private_file(feature_files, tmp_path, capsys):
    import os
    import stat

    train, test = feature_files
    out_json = tmp_path / "res.json"
    assert main(["transfer", "--train", train, "--test", test, "--method", "non-private,dp-ls", "--epsilon", "1",
                 "--accountant", "rdp", "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    released = out_json.read_text()
    for key in ("num_train_examples", "num_train_units", "num_clipped_features"):
        assert key not in released, key
    runs = json.loads(released)["runs"]
    assert [r["method"] for r in runs] == ["non-private", "dp-ls"] and runs[1]["top1"] is not None
    assert runs[1]["noise_sampler"].startswith("noise sampler: secure")
    private = tmp_path / "res.private.json"
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    diag = json.loads(private.read_text())
    assert diag["private"].startswith("private: un-noised statistics of the training data")
    assert [r["num_train_examples"] for r in diag["runs"]] == [600, 600]
    assert all("num_clipped_features" in r and r["num_train_units"] == 600 for r in diag["runs"])
    assert "res.private.json (PRIVATE" in text


def test_transfer_delta_rule_and_secure_noise_flags(feature_files, capsys):
    train, test = feature_files
    base = ["transfer", "--train", train, "--test", test, "--method", "dp-ls", "--epsilon", "1", "--accountant", "rdp"]
    with pytest.raises(SystemExit) as e:
        main(base + ["--delta", "0.002"])  # >= 1/600
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "delta must be well below 1/N" in err and "got delta=0.002 >= 1/600" in err
    assert main(base + ["--delta", "0.002", "--allow-large-delta"]) == 0
    assert "delta = 0.002" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(base + ["--secure-noise", "--seed", "3"])
    assert e.value.code == 2 and "--secure-noise cannot be combined with --seed" in capsys.readouterr().err
    assert main(base + ["--seed", "3"]) == 0
    assert "noise sampler: SEEDED" in capsys.readouterr().out
    assert main(base + ["--no-secure-noise"]) == 0
    assert "noise sampler: plain" in capsys.readouterr().out

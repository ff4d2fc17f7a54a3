"""`dpemb transfer --out` releases the classifier it trains, `dpemb predict` applies it,
and features computed elsewhere (plain X / y arrays) work end to end (issue #34.7)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from dpemb.cli.main import main
from dpemb.transfer.classifier import CLASSIFIER_CARD, CLASSIFIER_WEIGHTS, load_classifier
from dpemb.transfer.features import FeatureSet, save_features

K, D = 3, 10
DOCS = Path(__file__).resolve().parents[2] / "docs" / "TRANSFER.md"
FAST = ["--steps", "2", "--accountant", "rdp"]


def _xy(n: int, seed: int, dim: int = D) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    return (rng.normal(size=(n, dim)) + 4.0 * np.eye(K, dim)[y] + 1.0).astype(np.float32), y.astype(np.int64)


@pytest.fixture()
def files(tmp_path):
    out = {}
    for name, n, seed in (("train", 400, 0), ("test", 150, 1)):
        x, y = _xy(n, seed)
        out[name] = str(save_features(tmp_path / f"{name}.npz", FeatureSet(x, y, ("a", "b", "c"),
                                                                            users=np.arange(n) // 2)))
    return out


def usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def printed_top1(text: str) -> str:
    return re.search(r"top-1 (\d\.\d{4})", text).group(1)


def test_out_writes_weights_and_card_and_predict_reproduces_the_printed_top1(files, tmp_path, capsys):
    out = tmp_path / "clf"
    assert main(["transfer", "--train", files["train"], "--test", files["test"], "--method", "dp-fc", *FAST,
                 "--epsilon", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [CLASSIFIER_WEIGHTS, CLASSIFIER_CARD]
    card = json.loads((out / CLASSIFIER_CARD).read_text())
    statement = next(l for l in text.splitlines() if l.startswith("epsilon = "))
    assert card["privacy"]["statement"] == statement and card["privacy"]["private"] is True
    assert "RDP" in statement and "delta = " in statement and "example-level" in statement
    assert card["method"] == "dp-fc" and card["label_names"] == ["a", "b", "c"] and card["feature_dim"] == D
    assert card["hyperparameters"]["steps"] == 2 and card["preprocessing"]["clip_norm"] == 1.0
    assert card["features"]["backbone"].startswith("none recorded")
    raw = (out / CLASSIFIER_CARD).read_text()
    for private in ("num_train", "num_clipped", "train_seconds", '"seed"'):  # exact counts, timing, the seed
        assert private not in raw

    # predict on the same held-out file: the very number transfer printed (and stored)
    pred_csv, pred_npz = tmp_path / "p.csv", tmp_path / "p.npz"
    assert main(["predict", str(out), files["test"], "--out", str(pred_csv)]) == 0
    shown = capsys.readouterr().out
    assert printed_top1(shown) == printed_top1(text) and statement in shown
    assert main(["predict", str(out), files["test"], "--out", str(pred_npz)]) == 0
    capsys.readouterr()
    z = np.load(pred_npz)
    labels = np.load(files["test"])["labels"]
    assert float((z["label"] == labels).mean()) == card["evaluation"]["top1"]
    assert z["scores"].shape == (150, K) and list(z["label_name"][:3]) == [("a", "b", "c")[i] for i in z["label"][:3]]
    rows = pred_csv.read_text().splitlines()
    assert rows[0] == "row,label,label_name,score:a,score:b,score:c" and len(rows) == 151
    assert [int(r.split(",")[1]) for r in rows[1:]] == z["label"].tolist()


def test_plain_xy_features_end_to_end_as_documented(tmp_path, monkeypatch, capsys):
    """docs/TRANSFER.md's "Your own features" code and commands, run as they stand."""
    section = DOCS.read_text().split("## Your own features", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    commands = re.search(r"```sh\n(.*?)```", section, re.S).group(1).strip().splitlines()
    assert len(code.strip().splitlines()) <= 6 and [c.split()[:2] for c in commands] == [["dpemb", "transfer"],
                                                                                         ["dpemb", "predict"]]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/TRANSFER.md", "exec"), {})
    assert "meta" not in np.load("mine.npz").files
    for cmd in commands:
        assert main(shlex.split(cmd)[1:]) == 0, cmd
    text = capsys.readouterr().out
    assert float(printed_top1(text)) > 0.8  # the documented features are learnable at epsilon 1
    assert "predicted 200 rows of new.npz (no labels" in text
    out_of = lambda cmd: shlex.split(cmd)[shlex.split(cmd).index("--out") + 1]  # noqa: E731
    rows = (tmp_path / out_of(commands[1])).read_text().splitlines()
    assert rows[0].endswith("score:cat,score:dog,score:fox") and len(rows) == 201
    card = json.loads((tmp_path / out_of(commands[0]) / CLASSIFIER_CARD).read_text())
    assert card["label_names"] == ["cat", "dog", "fox"] and card["features"]["train_file"] == "mine.npz"


def test_a_file_of_neither_format_names_the_keys_found_and_expected(tmp_path, capsys):
    np.savez(tmp_path / "odd.npz", feats=np.ones((4, 2)), labs=np.zeros(4, dtype=int))
    assert main(["transfer", "--train", str(tmp_path / "odd.npz"), "--holdout", "0.2", "--method", "dp-ls",
                 "--epsilon", "1"]) == 1
    err = capsys.readouterr().err
    assert "odd.npz" in err and "it holds feats, labs" in err and "X and y" in err and "features, labels" in err
    assert err.count("\n") == 1
    # a dpemb-style file without meta's format: the error points at the plain format
    np.savez(tmp_path / "nometa.npz", features=np.ones((4, 2), dtype=np.float32), labels=np.zeros(4, dtype=int),
             label_names=np.array(["a", "b"]), meta=np.asarray("{}"))
    assert main(["transfer", "--train", str(tmp_path / "nometa.npz"), "--holdout", "0.2", "--method", "dp-ls",
                 "--epsilon", "1"]) == 1
    err = capsys.readouterr().err
    assert "format None" in err and "plain X and y" in err


def test_predict_refuses_features_of_another_dimension_then_takes_matching_ones(files, tmp_path, capsys):
    out = tmp_path / "clf"
    assert main(["transfer", "--train", files["train"], "--test", files["test"], "--method", "dp-ls",
                 "--epsilon", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    x, y = _xy(50, 2, dim=D + 2)
    np.savez(tmp_path / "wide.npz", X=x, y=y)
    assert main(["predict", str(out), str(tmp_path / "wide.npz")]) == 1
    err = capsys.readouterr().err
    assert f"wide.npz: {D + 2}-dimensional features, the classifier takes {D}" in err
    assert f"your own {D}-dimensional features" in err
    np.savez(tmp_path / "ok.npz", X=x[:, :D], y=y)  # the fix: features of the classifier's dimension
    assert main(["predict", str(out), str(tmp_path / "ok.npz")]) == 0
    assert "top-1" in capsys.readouterr().out


def test_an_existing_out_is_refused_then_overwrite_replaces_it(files, tmp_path, capsys):
    out = tmp_path / "clf"
    argv = ["transfer", "--train", files["train"], "--test", files["test"], "--method", "dp-ls", "--epsilon", "1",
            "--out", str(out)]
    assert main(argv + ["--seed", "1"]) == 0
    before = (out / CLASSIFIER_WEIGHTS).read_bytes()
    capsys.readouterr()
    err = usage_error(argv + ["--epsilon", "4"], capsys)
    assert "already holds a classifier" in err and "--overwrite" in err and err.count("\n") == 1
    assert (out / CLASSIFIER_WEIGHTS).read_bytes() == before  # nothing was written
    # the message's advice: --overwrite; the new classifier replaces the old one
    assert main(argv + ["--epsilon", "4", "--overwrite"]) == 0
    assert (out / CLASSIFIER_WEIGHTS).read_bytes() != before
    assert json.loads((out / CLASSIFIER_CARD).read_text())["config"]["epsilon"] == 4.0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".clf")]  # no staging left behind
    # a folder that holds something else is never written into, even with --overwrite
    other = tmp_path / "notes"
    other.mkdir()
    (other / "a.txt").write_text("mine")
    err = usage_error(argv[:-1] + [str(other), "--overwrite"], capsys)
    assert "holds no dpemb classifier" in err and [p.name for p in other.iterdir()] == ["a.txt"]


def test_non_private_and_several_runs(files, tmp_path, capsys):
    out = tmp_path / "np"
    assert main(["transfer", "--train", files["train"], "--test", files["test"], "--method", "dp-fc", *FAST,
                 "--non-private", "--out", str(out)]) == 0
    capsys.readouterr()
    priv = json.loads((out / CLASSIFIER_CARD).read_text())["privacy"]
    assert priv["private"] is False and "not private" in priv["statement"] and priv["epsilon"] is None
    clf = load_classifier(out)
    assert clf.card["method"] == "dp-fc" and clf.model.weights.shape == (K, D)

    # a sweep of two methods and the baseline: one subdirectory each, every card states the joint cost
    out = tmp_path / "sweep"
    assert main(["transfer", "--train", files["train"], "--test", files["test"], "--method", "dp-ls,non-private",
                 "--sweep-epsilon", "1,2", *FAST, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    names = sorted(p.name for p in out.iterdir())
    assert names == ["dp-ls-eps1", "dp-ls-eps2", "non-private"]
    note = next(l for l in text.splitlines() if l.startswith("note: these 2 DP runs"))
    for n in names:
        together = json.loads((out / n / CLASSIFIER_CARD).read_text())["privacy"]["released_with"]
        assert together["classifiers"] == names
        assert together["statement"].startswith(note) and "non-private is not private" in together["statement"]
    assert main(["predict", str(out), files["test"]]) == 1  # several: name one
    assert "dp-ls-eps1, dp-ls-eps2, non-private" in capsys.readouterr().err
    assert main(["predict", str(out / "dp-ls-eps2"), files["test"]]) == 0


def test_predict_refuses_features_of_another_backbone(files, tmp_path, capsys):
    """Backbones compared as the feature files record them (kind, architecture, image
    size); features that record none are the data itself and match only each other."""
    def imagenet(name: str, size: int) -> str:
        x, y = _xy(120, 3)
        meta = {"backbone": "imagenet-mobilenetv2", "backbone_name": "mobilenetv2-bn",
                "backbone_kwargs": {"in_channels": 1, "image_size": size}, "image_size": size, "num_users": 120}
        return str(save_features(tmp_path / name, FeatureSet(x, y, ("a", "b", "c"), meta=meta)))

    at64, at96 = imagenet("in64.npz", 64), imagenet("in96.npz", 96)
    plain = tmp_path / "clf_plain"
    assert main(["transfer", "--train", files["train"], "--holdout", "0.2", "--method", "dp-ls", "--epsilon", "1",
                 "--out", str(plain)]) == 0
    assert main(["predict", str(plain), at64]) == 1
    assert "backbone imagenet-mobilenetv2 (mobilenetv2-bn, 64 px), the classifier's training features recorded " \
           "none" in capsys.readouterr().err

    clf = tmp_path / "clf_in"
    assert main(["transfer", "--train", at64, "--holdout", "0.2", "--method", "dp-ls", "--epsilon", "1",
                 "--out", str(clf)]) == 0
    card = json.loads((clf / CLASSIFIER_CARD).read_text())
    assert card["features"]["backbone"]["image_size"] == 64 and "num_users" not in json.dumps(card)
    capsys.readouterr()
    for other, says in ((at96, "they differ in architecture settings, image size"),
                        (files["test"], "no recorded backbone, the classifier's is imagenet-mobilenetv2")):
        assert main(["predict", str(clf), other]) == 1
        err = capsys.readouterr().err
        assert says in err and "`dpemb features --data DATA --backbone imagenet-mobilenetv2 --image-size 64" in err
    assert main(["predict", str(clf), at64]) == 0

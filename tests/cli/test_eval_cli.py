"""`dpemb eval`: the full Recall@FAR table with bootstrap intervals, several models in one
table and one ROC plot, and a one-line error (or --resize) when the model's input size
differs from the data's (shared with `dpemb embed`)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from PIL import Image

from dpemb.cli.main import main as dpemb
from tests.conftest import make_tiny_dataset

FAR_LABELS = ["1e-6", "1e-5", "1e-4", "1e-3", "1e-2", "1e-1"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """28-px and 32-px datasets, a short centralized run on the 28-px one and a second
    (untrained) artifact of the same backbone."""
    from dpemb.models import build_backbone
    from dpemb.training.artifact import load_artifact, make_card, write_artifact

    d = tmp_path_factory.mktemp("eval")
    make_tiny_dataset(num_users=30).save(d / "data28")
    make_tiny_dataset(num_users=30, size=32).save(d / "data32")
    assert dpemb(["train", "--data", str(d / "data28"), "--out", str(d / "central"), "--algorithm",
                  "centralized", "--steps", "4", "--batch-size", "16", "--eval-every", "4",
                  "--embedding-dim", "16", "--no-progress"]) == 0
    _, card = load_artifact(d / "central")
    kwargs = card["backbone"]["kwargs"]
    fresh = build_backbone(card["backbone"]["name"], **kwargs)
    write_artifact(d / "fresh", fresh, make_card(
        backbone_name=card["backbone"]["name"], backbone_kwargs=kwargs, embedding_dim=fresh.embedding_dim,
        trainable="all", algorithm="centralized", progress={"steps": 0}, provenance={},
        privacy="not private"))
    return d


def run(args, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            rc = dpemb(args)
        except SystemExit as e:
            rc = e.code
    out = capsys.readouterr()
    assert not [w for w in caught if "below 1/#negative pairs" in str(w.message)]
    return rc, out.out, out.err


def test_eval_prints_the_full_table(work, tmp_path, capsys):
    rc, out, err = run(["eval", str(work / "central"), "--data", str(work / "data28"),
                        "--roc", str(tmp_path / "roc.png")], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("FAR"))
    assert lines[head].split() == ["FAR", "TAR", "(recall)", "95%", "CI", "supported", "threshold"]
    rows = [ln.split() for ln in lines[head + 1 : head + 7]]
    assert [r[0] for r in rows] == FAR_LABELS
    # the eval split of the tiny set has a few hundred negatives: 1e-6..1e-3 unsupported
    assert all(r[2] == "-" and r[3:5] == ["no", "*"] for r in rows[:4])
    assert all(r[2].startswith("[") and "yes" in r for r in rows[4:])
    assert "positive /" in out and "negative pairs (exact: all pairs)" in out
    assert any(ln.startswith("* unsupported") for ln in lines)
    assert "95% CI: percentile bootstrap over identities, 200 resamples" in out
    assert "stricter than insightface" in out
    assert "roc_auc" in out and "map_at_r" in out
    with Image.open(tmp_path / "roc.png") as im:
        assert im.format == "PNG"


def test_eval_json_holds_the_table(work, capsys):
    rc, out, _ = run(["eval", str(work / "central"), "--data", str(work / "data28"), "--json",
                      "--bootstrap", "40", "--bootstrap-seed", "5"], capsys)
    assert rc == 0
    d = json.loads(out)
    table = d["table"]
    assert [r["far"] for r in table["rows"]] == [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]
    for r in table["rows"]:
        assert d[f"recall_at_far_{r['far']:g}"] == r["recall"]
        assert (r["ci_low"] is not None) == r["supported"]
    assert table["bootstrap"]["resamples"] == 40 and table["bootstrap"]["seed"] == 5
    assert table["num_negative_pairs"] == d["eval_negative_pairs"]
    assert "recall_at_far_0.001" in d and "roc_auc" in d and "precision_at_1" in d  # the keys as before

    rc, out, _ = run(["eval", str(work / "central"), "--data", str(work / "data28"), "--json",
                      "--bootstrap", "0"], capsys)
    assert rc == 0
    t0 = json.loads(out)["table"]
    assert t0["bootstrap"] is None and all(r["ci_low"] is None for r in t0["rows"])
    assert [r["recall"] for r in t0["rows"]] == [r["recall"] for r in table["rows"]]


@pytest.mark.parametrize("form", ["compare", "positional"])
def test_compare_puts_models_in_one_table_and_one_plot(work, tmp_path, capsys, form):
    models = [str(work / "central"), str(work / "fresh")]
    extra = ["--compare", models[1]] if form == "compare" else [models[1]]
    roc = tmp_path / "cmp.png"
    rc, out, err = run(["eval", models[0], *extra, "--data", str(work / "data28"), "--roc", str(roc),
                        "--bootstrap", "20"], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    heads = [ln for ln in lines if ln.startswith("FAR")]
    assert len(heads) == 1 and heads[0].split() == ["FAR", "central", "fresh"]
    head = lines.index(heads[0])
    rows = lines[head + 1 : head + 7]
    assert [r.split()[0].rstrip("*") for r in rows] == FAR_LABELS
    assert all(r.count("[") == 2 for r in rows[4:])  # an interval per model
    assert "ROC curves:" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp.png"]
    with Image.open(roc) as im:
        assert im.format == "PNG"

    rc, out, _ = run(["eval", models[0], *extra, "--data", str(work / "data28"), "--json",
                      "--bootstrap", "0"], capsys)
    d = json.loads(out)
    assert [m["name"] for m in d["models"]] == ["central", "fresh"]
    assert all(len(m["table"]["rows"]) == 6 for m in d["models"])


def test_run_names_are_directory_names_made_distinct(tmp_path):
    from dpemb.cli.evaluate import run_names

    assert run_names(["runs/central", "runs/fedemb/"]) == ["central", "fedemb"]
    assert run_names(["a/final", "b/final"]) == ["a/final", "b/final"]
    assert run_names(["runs/x/model_card.json"]) == ["x"]


@pytest.mark.parametrize("cmd", ["eval", "embed"])
def test_size_mismatch_is_one_line_and_resize_fixes_it(work, tmp_path, capsys, cmd):
    def args(*extra):
        if cmd == "eval":
            return ["eval", str(work / "central"), "--data", str(work / "data32"), "--bootstrap", "0", *extra]
        return ["embed", str(work / "central"), str(work / "data32"), "--out", str(tmp_path / "e.npy"), *extra]

    rc, out, err = run(args(), capsys)
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "28x28x1" in lines[0] and "32x32x1" in lines[0]
    assert "--image-size 28" in lines[0] and "--resize" in lines[0]
    assert "Traceback" not in err

    rc, out, err = run(args("--resize"), capsys)
    assert rc == 0, err
    assert "resizing" in out and "32x32x1" in out and "28x28x1" in out
    if cmd == "embed":
        emb = np.load(tmp_path / "e.npy")
        assert emb.shape[0] == make_tiny_dataset(num_users=30, size=32).num_examples
        assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    else:
        assert "FAR" in out


def test_resize_of_a_matching_size_changes_nothing(work, tmp_path, capsys):
    a = tmp_path / "a.npy"
    b = tmp_path / "b.npy"
    assert dpemb(["embed", str(work / "central"), str(work / "data28"), "--out", str(a)]) == 0
    assert dpemb(["embed", str(work / "central"), str(work / "data28"), "--out", str(b), "--resize"]) == 0
    assert "resizing" not in capsys.readouterr().out
    assert np.array_equal(np.load(a), np.load(b))


def test_bad_bootstrap_value_is_a_usage_error(work, capsys):
    rc, _, err = run(["eval", str(work / "central"), "--data", str(work / "data28"), "--bootstrap", "-1"],
                     capsys)
    assert rc == 2 and "--bootstrap must be >= 0" in err

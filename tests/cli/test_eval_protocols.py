"""`dpemb eval --pairs` / `--templates` end to end: a tiny trained model, image files in
tmp_path, and the metrics recomputed independently from `dpemb embed`'s embeddings of
the same files (mirrored files written with PIL for --flip) with numpy and
scikit-learn."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps
from sklearn.metrics import roc_auc_score, roc_curve

from dpemb.cli.main import main as dpemb
from tests.conftest import make_tiny_dataset


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A 4-step model on the tiny 28-px set; its 3 evaluation identities as LFW-style
    JPEG folders (c9/c9_0001.jpg ...) and mirrored copies (flipped/...)."""
    d = tmp_path_factory.mktemp("protocols")
    ds = make_tiny_dataset(num_users=30)
    ds.save(d / "data")
    assert dpemb(["train", "--data", str(d / "data"), "--out", str(d / "model"), "--algorithm", "centralized",
                  "--steps", "4", "--batch-size", "16", "--eval-every", "4", "--embedding-dim", "16",
                  "--no-progress"]) == 0
    people = {}
    for lab in ds.eval_labels:
        name = ds.label_names[lab]
        imgs = ds.images[np.asarray(ds.labels) == lab][:8]
        (d / "lfw" / name).mkdir(parents=True)
        (d / "flipped" / name).mkdir(parents=True)
        for k, img in enumerate(imgs, start=1):
            jpg = d / "lfw" / name / f"{name}_{k:04d}.jpg"
            Image.fromarray(img[:, :, 0]).save(jpg, quality=95)
            with Image.open(jpg) as im:  # the mirror of the decoded JPEG, stored losslessly
                ImageOps.mirror(im).save(d / "flipped" / name / f"{name}_{k:04d}.png")
        people[name] = len(imgs)
    return d, people


def lfw_pairs(people, k=10, n=3, seed=0):
    """A pairs.txt body: k folds of n matched and n mismatched pairs."""
    rng = np.random.default_rng(seed)
    names = sorted(people)
    lines = [f"{k}\t{n}"]
    for _ in range(k):
        for _ in range(n):
            a = names[rng.integers(len(names))]
            i, j = rng.choice(np.arange(1, people[a] + 1), 2, replace=False)
            lines.append(f"{a}\t{i}\t{j}")
        for _ in range(n):
            a, b = rng.choice(names, 2, replace=False)
            lines.append(f"{a}\t{rng.integers(1, people[a] + 1)}\t{b}\t{rng.integers(1, people[b] + 1)}")
    return "\n".join(lines) + "\n"


def parse(text):
    """(path1, path2, same, fold) rows of a pairs.txt, written independently of dpemb."""
    lines = text.splitlines()
    k, n = map(int, lines[0].split())
    rows = []
    for r, ln in enumerate(lines[1:]):
        p = ln.split("\t")
        if len(p) == 3:
            rows.append((f"{p[0]}/{p[0]}_{int(p[1]):04d}", f"{p[0]}/{p[0]}_{int(p[2]):04d}", True, r // (2 * n)))
        else:
            rows.append((f"{p[0]}/{p[0]}_{int(p[1]):04d}", f"{p[2]}/{p[2]}_{int(p[3]):04d}", False, r // (2 * n)))
    return rows


def embeddings(d, root, tmp_path, capsys):
    """{relative path without suffix: embedding} from `dpemb embed`."""
    out = tmp_path / f"{root}.npy"
    assert dpemb(["embed", str(d / "model"), str(d / root), "--out", str(out)]) == 0
    capsys.readouterr()
    names = out.with_suffix(".txt").read_text().splitlines()
    x = np.load(out).astype(np.float64)
    return {str(Path(n).relative_to(d / root).with_suffix("")): v for n, v in zip(names, x)}


def independent(rows, emb):
    s = np.array([emb[a] @ emb[b] for a, b, _, _ in rows])
    m = np.array([r[2] for r in rows])
    folds = np.array([r[3] for r in rows])
    accs = []
    for f in np.unique(folds):
        tr, te = folds != f, folds == f
        cuts = np.concatenate([np.unique(s[tr]), [np.inf]])
        train_acc = [np.mean((s[tr] >= c) == m[tr]) for c in cuts]
        i = int(np.argmax(train_acc))
        u = np.unique(s[tr])
        t = np.inf if i == len(u) else (u[0] if i == 0 else (u[i - 1] + u[i]) / 2)
        accs.append(np.mean((s[te] >= t) == m[te]))
    fpr, tpr, _ = roc_curve(m, s, drop_intermediate=False)
    return np.array(accs), {f: tpr[fpr <= f].max() for f in (1e-3, 1e-2, 1e-1)}, roc_auc_score(m, s)


def run(args, capsys):
    try:
        rc = dpemb(args)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("flip", [False, True])
def test_lfw_pairs_match_an_independent_computation(work, tmp_path, capsys, flip):
    d, people = work
    text = lfw_pairs(people)
    (tmp_path / "pairs.txt").write_text(text)
    rc, out, err = run(["eval", str(d / "model"), "--pairs", str(tmp_path / "pairs.txt"), "--images",
                        str(d / "lfw"), "--json"] + (["--flip"] if flip else []), capsys)
    assert rc == 0, err
    got = json.loads(out)
    emb = embeddings(d, "lfw", tmp_path, capsys)
    if flip:  # the embedding of the mirrored file, summed and re-normalised
        mirrored = embeddings(d, "flipped", tmp_path, capsys)
        emb = {k: (v + mirrored[k]) / np.linalg.norm(v + mirrored[k]) for k, v in emb.items()}
    accs, tar, auc = independent(parse(text), emb)
    assert got["format"] == "lfw" and got["folds"] == 10 and got["flip"] == flip
    assert (got["genuine_pairs"], got["impostor_pairs"]) == (30, 30)
    np.testing.assert_allclose(got["accuracy"]["accuracies"], accs, atol=1e-12)
    assert got["accuracy"]["mean"] == pytest.approx(accs.mean()) and got["accuracy"]["std"] == pytest.approx(accs.std())
    for row in got["tar_at_far"]:
        assert row["tar"] == pytest.approx(tar[row["far"]], abs=1e-9)
        assert row["measurable"] == (row["far"] >= 1 / 30)
    assert got["roc_auc"] == pytest.approx(auc, abs=1e-6)


def test_csv_pairs_without_folds_and_the_text_report(work, tmp_path, capsys):
    d, people = work
    rows = parse(lfw_pairs(people, seed=3))
    csv = tmp_path / "pairs.csv"
    csv.write_text("path1,path2,same\n" + "".join(f"{a}.jpg,{b}.jpg,{int(s)}\n" for a, b, s, _ in rows))
    rc, out, err = run(["eval", str(d / "model"), "--pairs", str(csv), "--images", str(d / "lfw"),
                        "--roc", str(tmp_path / "roc.png")], capsys)
    assert rc == 0, err
    with Image.open(tmp_path / "roc.png") as im:
        assert im.format == "PNG"
    assert f"ROC curve: {tmp_path / 'roc.png'}" in out
    assert "30 genuine / 30 impostor pairs" in out
    assert "folds: 10, assigned: genuine and impostor pairs dealt round robin" in out
    assert "10-fold accuracy: " in out and " ± " in out
    assert "* not measurable: FAR below 1/30 impostor pairs" in out
    rc, js, _ = run(["eval", str(d / "model"), "--pairs", str(csv), "--images", str(d / "lfw"), "--json"], capsys)
    got = json.loads(js)
    # the independent computation with the documented assignment: round robin per kind
    folds = np.empty(len(rows), dtype=int)
    for kind in (True, False):
        idx = [i for i, r in enumerate(rows) if r[2] == kind]
        folds[idx] = np.arange(len(idx)) % 10
    accs, _, auc = independent([(a, b, s, f) for (a, b, s, _), f in zip(rows, folds)],
                               embeddings(d, "lfw", tmp_path, capsys))
    np.testing.assert_allclose(got["accuracy"]["accuracies"], accs, atol=1e-12)
    assert got["roc_auc"] == pytest.approx(auc, abs=1e-6)


def test_templates_match_an_independent_pooling(work, tmp_path, capsys):
    d, people = work
    names = sorted(people)
    rng = np.random.default_rng(0)
    templates = {}  # template -> (subject, [image paths])
    for name in names:
        for t in range(2):
            templates[f"{name}-t{t}"] = (name, [f"{name}/{name}_{k:04d}" for k in rng.choice(np.arange(1, 9), 3, replace=False)])
    (tmp_path / "t.csv").write_text("template_id,path,subject\n" + "".join(
        f"{t},{p}.jpg,{s}\n" for t, (s, ps) in templates.items() for p in ps))
    tids = list(templates)
    pairs = [(a, b) for i, a in enumerate(tids) for b in tids[i + 1 :]]
    (tmp_path / "p.csv").write_text("template1,template2,same\n" + "".join(
        f"{a},{b},{int(templates[a][0] == templates[b][0])}\n" for a, b in pairs))
    rc, out, err = run(["eval", str(d / "model"), "--templates", str(tmp_path / "t.csv"), "--template-pairs",
                        str(tmp_path / "p.csv"), "--images", str(d / "lfw"), "--json"], capsys)
    assert rc == 0, err
    got = json.loads(out)
    emb = embeddings(d, "lfw", tmp_path, capsys)
    feat = {}
    for t, (_, ps) in templates.items():
        v = sum(emb[p] / np.linalg.norm(emb[p]) for p in ps) / len(ps)
        feat[t] = v / np.linalg.norm(v)
    s = np.array([feat[a] @ feat[b] for a, b in pairs])
    m = np.array([templates[a][0] == templates[b][0] for a, b in pairs])
    fpr, tpr, _ = roc_curve(m, s, drop_intermediate=False)
    assert (got["genuine_pairs"], got["impostor_pairs"], got["num_templates"]) == (3, 12, 6)
    assert [r["far"] for r in got["tar_at_far"]] == [1e-4, 1e-3, 1e-2, 1e-1]
    for row in got["tar_at_far"]:
        assert row["tar"] == pytest.approx(tpr[fpr <= row["far"]].max(), abs=1e-9)
        assert row["measurable"] == (row["far"] >= 1 / 12)  # 12 impostor pairs resolve no FAR below 1/12
    assert got["roc_auc"] == pytest.approx(roc_auc_score(m, s), abs=1e-6)

    # a media column where every image is its own medium pools exactly as without one
    (tmp_path / "tm.csv").write_text("template_id,path,media\n" + "".join(
        f"{t},{p}.jpg,{p}\n" for t, (s, ps) in templates.items() for p in ps))
    rc, out, err = run(["eval", str(d / "model"), "--templates", str(tmp_path / "tm.csv"), "--template-pairs",
                        str(tmp_path / "p.csv"), "--images", str(d / "lfw"), "--json"], capsys)
    assert rc == 0, err
    media = json.loads(out)
    assert media["pooling"] == "media, then template" and got["pooling"] == "template"
    assert media["tar_at_far"] == got["tar_at_far"] and media["roc_auc"] == pytest.approx(got["roc_auc"])

    # a subject contradicting `same` is refused, naming the line
    (tmp_path / "bad.csv").write_text(f"template1,template2,same\n{tids[0]},{tids[1]},0\n")
    rc, _, err = run(["eval", str(d / "model"), "--templates", str(tmp_path / "t.csv"), "--template-pairs",
                      str(tmp_path / "bad.csv"), "--images", str(d / "lfw")], capsys)
    assert rc == 1 and f"bad.csv line 2: same=0 but" in err


def test_errors_name_the_file_and_line_and_the_advice_works(work, tmp_path, capsys):
    d, people = work
    text = lfw_pairs(people)
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(text)
    rc, _, err = run(["eval", str(d / "model"), "--pairs", str(pairs)], capsys)
    assert rc == 2 and "need --images ROOT" in err
    rc, _, err = run(["eval", str(d / "model"), "--pairs", str(pairs), "--images", str(d / "lfw")], capsys)
    assert rc == 0, err  # as the message advised

    lines = text.splitlines()
    lines[2] = "c9\t1\t99"  # a matched pair with an image that does not exist
    pairs.write_text("\n".join(lines) + "\n")
    rc, _, err = run(["eval", str(d / "model"), "--pairs", str(pairs), "--images", str(d / "lfw")], capsys)
    assert rc == 1 and "c9_0099.jpg: file not found" in err and f"{pairs} line 3" in err
    errors = [ln for ln in err.splitlines() if "error" in ln]  # (besides the progress lines)
    assert len(errors) == 1 and errors[0].startswith("dpemb eval: error: ")

    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,same\nx.jpg,y.jpg,1\n")
    rc, _, err = run(["eval", str(d / "model"), "--pairs", str(bad), "--images", str(d / "lfw")], capsys)
    assert rc == 1 and "line 1: the header must name path1,path2,same" in err
    rc, _, err = run(["eval", str(d / "model"), "--pairs", str(pairs), "--data", str(d / "data")], capsys)
    assert rc == 2 and "give exactly one of --data" in err
    rc, _, err = run(["eval", str(d / "model"), "--pairs", str(pairs), "--images", str(d / "lfw"),
                      "--bootstrap", "50"], capsys)
    assert rc == 2 and "--bootstrap goes with --data, not --pairs" in err
    rc, _, err = run(["eval", str(d / "model"), "--data", str(d / "data"), "--flip"], capsys)
    assert rc == 2 and "--flip goes with --pairs or --templates, not --data" in err


@pytest.mark.slow  # 12 s: the sharded embedding is eval's (test_distributed_commands); the protocol is tested in one process
def test_pairs_under_torchrun_equal_one_process(work, tmp_path, capsys):
    from tests.cli.test_distributed_commands import torchrun

    d, people = work
    (tmp_path / "pairs.txt").write_text(lfw_pairs(people))
    flags = ["eval", str(d / "model"), "--pairs", str(tmp_path / "pairs.txt"), "--images", str(d / "lfw"),
             "--json", "--device", "cpu", "--batch-size", "5", "--flip"]
    rc, out, err = run(flags, capsys)
    assert rc == 0, err
    one, two = json.loads(out), json.loads(torchrun(flags).stdout)  # rank 0 alone prints
    assert two["accuracy"]["accuracies"] == pytest.approx(one["accuracy"]["accuracies"])
    assert [r["tar"] for r in two["tar_at_far"]] == pytest.approx([r["tar"] for r in one["tar_at_far"]])
    assert two["roc_auc"] == pytest.approx(one["roc_auc"], abs=1e-6)

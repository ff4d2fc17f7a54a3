"""The CLI side of the release artifact: downstream commands read the artifact and refuse
private checkpoints, `dpemb export` writes one for an existing run (and refuses a
pre-release one), and
`dpemb train --init` refuses a non-private init unless --allow-nonprivate-init."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from dpemb.cli.main import main as dpemb
from tests.conftest import make_tiny_dataset

TINY = ["--embedding-dim", "16", "--no-progress"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A dataset, a centralized run on the private users (the default split) and one on
    the public users."""
    d = tmp_path_factory.mktemp("release")
    make_tiny_dataset(num_users=30).save(d / "data")
    for name, split in (("central", "private"), ("public", "public")):
        assert dpemb(["train", "--data", str(d / "data"), "--out", str(d / name), "--algorithm", "centralized",
                      "--steps", "4", "--batch-size", "16", "--eval-every", "4", "--train-split", split,
                      *TINY]) == 0
    return d


def dp_train(work, out, *extra):
    return dpemb(["train", "--data", str(work / "data"), "--out", str(work / out), "--algorithm", "dp-fedemb",
                  "--rounds", "2", "--clients-per-round", "3", "--users-per-client", "2", "--local-batch-size", "4",
                  "--noise-multiplier", "0.5", "--clip-norm", "0.5", "--eval-every", "2", *TINY, *extra])


def embed(model, work, out):
    # on CPU like the library calls it is compared with (on a GPU, auto picks CUDA)
    rc = dpemb(["embed", str(model), str(work / "data"), "--out", str(out), "--device", "cpu"])
    assert rc == 0
    return np.load(out)


def test_train_writes_artifact_apart_from_private_state(work):
    d = work / "central"
    assert (d / "model.safetensors").is_file() and (d / "model_card.json").is_file()
    assert (d / "private" / "checkpoint.pt").is_file() and not (d / "checkpoint.pt").exists()
    card = json.loads((d / "model_card.json").read_text())
    assert card["provenance"]["train_split"] == "private" and card["provenance"]["dataset"] == "data"
    assert card["privacy"]["private"] is False and "not private" in card["privacy"]["statement"]


@pytest.mark.parametrize("cmd", ["embed", "eval", "features"])
def test_downstream_refuses_a_private_checkpoint(work, tmp_path, capsys, cmd):
    ckpt = work / "central" / "private" / "checkpoint.pt"
    args = {
        "embed": ["embed", str(ckpt), str(work / "data"), "--out", str(tmp_path / "e.npy")],
        "eval": ["eval", str(ckpt), "--data", str(work / "data")],
        "features": ["features", "--data", str(work / "data"), "--backbone-model", str(ckpt),
                     "--out", str(tmp_path / "f.npz"), "--quiet"],
    }[cmd]
    try:
        rc = dpemb(args)
    except SystemExit as e:
        rc = e.code
    assert rc != 0
    err = capsys.readouterr().err
    assert "private training state" in err and "dpemb export" in err
    assert not any(tmp_path.iterdir())


def test_downstream_reads_the_run_directory_and_the_artifact(work, tmp_path, capsys):
    a = embed(work / "central", work, tmp_path / "a.npy")
    b = embed(work / "central" / "model_card.json", work, tmp_path / "b.npy")
    assert np.array_equal(a, b)
    assert dpemb(["eval", str(work / "central"), "--data", str(work / "data"), "--json"]) == 0
    assert dpemb(["features", "--data", str(work / "data"), "--backbone-checkpoint", str(work / "central"),
                  "--out", str(tmp_path / "f.npz"), "--quiet"]) == 0  # the old flag name still works


def test_a_pre_release_run_is_refused_by_export_and_downstream(work, tmp_path, capsys):
    """A run written by a pre-release dpemb (checkpoint.pt at the top, no provenance, no
    artifact): `dpemb export`, `embed` and `train --init` refuse it with one line saying
    so and what to do (train again); nothing is written."""
    assert dp_train(work, "old", "--init", str(work / "public")) == 0
    old = work / "old"
    state = torch.load(old / "private" / "checkpoint.pt", weights_only=False)
    for k in ("provenance", "model_card", "init_provenance", "init_caveats"):
        state.pop(k, None)
    torch.save(state, old / "checkpoint.pt")
    for f in ("private/checkpoint.pt", "model.safetensors", "model_card.json"):
        os.remove(old / f)
    capsys.readouterr()
    for argv in (["export", str(old), "--out", str(tmp_path / "art")],
                 ["embed", str(old), str(work / "data"), "--out", str(tmp_path / "x.npy")]):
        try:
            rc = dpemb(argv)
        except SystemExit as e:
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 1, argv
        assert f"{old} was written by a pre-release dpemb" in err and "train the model again" in err, argv
        assert err.count("\n") == 1, err
    assert not (tmp_path / "art").exists() and not (tmp_path / "x.npy").exists()


def test_export_of_a_new_run_reproduces_its_card(work, tmp_path):
    assert dpemb(["export", str(work / "public"), "--out", str(tmp_path / "art")]) == 0
    assert json.loads((tmp_path / "art" / "model_card.json").read_text()) == \
        json.loads((work / "public" / "model_card.json").read_text())


def test_dp_run_from_a_private_nonprivate_init_is_refused_then_qualified(work, capsys):
    with pytest.raises(SystemExit) as e:
        dp_train(work, "refused", "--init", str(work / "central"))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "trained without differential privacy on the private users" in err
    assert "--train-split public" in err and "--allow-nonprivate-init" in err
    assert not (work / "refused" / "model.safetensors").exists()

    assert dp_train(work, "allowed", "--init", str(work / "central"), "--allow-nonprivate-init") == 0
    out = capsys.readouterr().out
    eps_lines = [ln for ln in out.splitlines() if "epsilon = " in ln]
    assert eps_lines and all("does NOT cover the initialisation" in ln for ln in eps_lines)
    card = json.loads((work / "allowed" / "model_card.json").read_text())
    assert all("does NOT cover" in ex["statement"] for ex in card["privacy"]["extrapolated"])
    assert card["provenance"]["init"]["train_split"] == "private"


def test_calibrated_epsilon_line_carries_the_caveat(work, capsys):
    args = ["train", "--data", str(work / "data"), "--out", str(work / "cal"), "--algorithm", "dp-fedemb",
            "--rounds", "1", "--clients-per-round", "3", "--users-per-client", "2", "--local-batch-size", "4",
            "--target-epsilon", "20", "--clip-norm", "0.5", "--eval-every", "1", *TINY,
            "--init", str(work / "central"), "--allow-nonprivate-init"]
    assert dpemb(args) == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("calibrated noise multiplier"))
    assert "does NOT cover the initialisation" in lines[i + 1]


def test_the_model_card_names_datasets_and_inits_never_local_paths(tmp_path):
    """An imported dataset records where its manifest and images were; the card (a
    release) names the dataset and the init by their own names only."""
    ds = make_tiny_dataset(num_users=30)
    ds.source = {"format": "manifest", "path": str(tmp_path / "private" / "m.csv"), "root": str(tmp_path / "img"),
                 "image_size": 12, "rows_skipped": 0}
    ds.save(tmp_path / "mine")
    for name, extra in (("pre", ["--train-split", "public"]), ("run", ["--init", str(tmp_path / "pre")])):
        assert dpemb(["train", "--data", str(tmp_path / "mine"), "--out", str(tmp_path / name), "--algorithm",
                      "centralized", "--steps", "2", "--batch-size", "8", "--eval-every", "2", *TINY, *extra]) == 0
    card_text = (tmp_path / "run" / "model_card.json").read_text()
    card = json.loads(card_text)
    assert str(tmp_path) not in card_text and "m.csv" not in card_text
    assert card["provenance"]["dataset"] == "mine" and card["provenance"]["init"]["model"] == "pre"
    assert card["provenance"]["source"] == {"format": "manifest", "image_size": 12, "rows_skipped": 0}
    assert card["provenance"]["init"]["source"]["format"] == "manifest"

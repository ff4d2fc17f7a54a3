"""The release artifact (model.safetensors + model_card.json) apart from the private
training state (private/checkpoint.pt): contents, bit-identical embeddings, file modes,
the refusal of a pre-release run layout."""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest
import torch

import dpemb.training.centralized as central
import dpemb.training.federated as fed
from dpemb.algorithms.config import FederatedConfig
from dpemb.privacy import PrivacySpec
from dpemb.training.checkpoint import backbone_from_checkpoint, load_checkpoint
from dpemb.training.config import ModelConfig, OptimConfig, RunConfig
from dpemb.training.evaluate import embed_images
from tests.conftest import make_tiny_dataset

MODEL = ModelConfig(backbone="lenet", embedding_dim=16)
NOISE_SEED = 987654321  # must never appear in anything released

# checkpoint entries (and words for them) that must never reach the artifact
PRIVATE_KEYS = {
    "sampler", "noise", "ledger", "optimizer", "server_optimizer", "scheduler", "client_randomness",
    "data_rng", "head_gen", "torch_rng", "batch_order", "prev_prefix", "global_head", "head",
    "seed", "noise_seed", "config", "privacy_fingerprint", "tree", "tree_state", "generator", "state",
    "data_fingerprint", "user_fingerprints", "backbone_shared_users",
}
CARD_KEYS = {"format", "format_version", "weights", "backbone", "embedding_dim", "trainable", "algorithm",
             "provenance", "privacy", "input", "intended_use", "limitations"}


def splits():
    s = make_tiny_dataset(num_users=30).split()
    return s.train, s.eval


def fed_run(tmp_path, name="fed", algorithm="dp-ftrl-fedemb", rounds=2, **kw):
    train, ev = splits()
    spec = PrivacySpec(population=train.num_users, clients_per_round=3, users_per_client=2,
                       noise_multiplier=0.5, clip_norm=0.5, rounds=rounds,
                       mechanism="tree" if algorithm == "dp-ftrl-fedemb" else "gaussian")
    cfg = FederatedConfig(algorithm=algorithm, local_batch_size=4)
    run = RunConfig(out=str(tmp_path / name), eval_every=rounds, progress=False)
    rep = fed.train_federated(train, ev, kw.pop("model", MODEL), cfg, spec, run, noise_seed=NOISE_SEED, **kw)
    return tmp_path / name, rep


def central_run(tmp_path, name="central", **kw):
    train, ev = splits()
    run = RunConfig(out=str(tmp_path / name), eval_every=4, progress=False)
    rep = central.train_centralized(train, ev, kw.pop("model", MODEL), OptimConfig(steps=4, batch_size=16), run,
                                    **kw)
    return tmp_path / name, rep


def walk_keys(obj):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from walk_keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk_keys(v)


@pytest.mark.parametrize("algorithm", ["dp-ftrl-fedemb", "dp-fedavg"])
def test_artifact_holds_no_private_state(tmp_path, algorithm):
    from safetensors import safe_open

    d, _ = fed_run(tmp_path, algorithm=algorithm)
    state = load_checkpoint(d / "private" / "checkpoint.pt")
    with safe_open(str(d / "model.safetensors"), framework="pt") as f:
        keys, meta = set(f.keys()), f.metadata() or {}
    # the weights file holds the backbone's state dict, nothing else (no head, no optimizer)
    assert keys == set(state["backbone"])
    assert not any(k.split(".")[0] in PRIVATE_KEYS for k in keys)
    assert str(NOISE_SEED) not in json.dumps(meta)
    card = json.loads((d / "model_card.json").read_text())
    assert set(card) == CARD_KEYS | {"rounds", "planned_rounds", "status", "loss", "evaluation"}
    found = set(walk_keys(card)) & PRIVATE_KEYS
    assert not found, found
    text = (d / "model_card.json").read_text()
    assert str(NOISE_SEED) not in text and "generator" not in text
    assert card["loss"] == {"kind": "softmax", "scale": None, "margin": None}  # what the heads were trained with
    # what the card must say
    assert card["backbone"] == {"name": "lenet", "kwargs": state["backbone_kwargs"]}
    assert card["embedding_dim"] == 16 and card["rounds"] == 2 and card["algorithm"] == algorithm
    priv = card["privacy"]
    assert priv["private"] is True and priv["unit"] == "user" and priv["delta"] > 0
    assert priv["statement_rdp"].startswith("epsilon = ") and "delta = " in priv["statement_rdp"]
    assert all("extrapolated" in ex["label"] for ex in priv["extrapolated"])
    assert priv["note"].startswith("noise and sampling were seeded")


def test_embeddings_from_artifact_equal_checkpoint_bit_for_bit(tmp_path):
    from dpemb.training.artifact import load_artifact

    _, ev = splits()
    for d in (fed_run(tmp_path, algorithm="dp-fedemb")[0], central_run(tmp_path)[0]):
        from_ckpt = backbone_from_checkpoint(d / "private" / "checkpoint.pt")
        from_art, card = load_artifact(d)
        a = embed_images(from_ckpt, ev.images)
        b = embed_images(from_art, ev.images)
        assert torch.equal(a, b)
        assert card["backbone"]["kwargs"] == load_checkpoint(d)["backbone_kwargs"]


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(p):
    return stat.S_IMODE(p.stat().st_mode)


def test_file_modes_private_state_0600_released_files_follow_umask(tmp_path, umask_022):
    d, _ = central_run(tmp_path)
    assert mode(d / "private") == 0o700
    assert mode(d / "private" / "checkpoint.pt") == 0o600
    for f in ("config.json", "metrics.jsonl", "report.json", "roc.png", "training.png",
              "model.safetensors", "model_card.json"):
        assert mode(d / f) == 0o644, f
    assert not (d / "checkpoint.pt").exists()

    from dpemb.training.rundir import RunDir

    run = RunDir(tmp_path / "r2")
    run.append_diagnostics({"round": 1, "train_loss": 0.5})
    run.append_metrics({"round": 1})
    assert mode(run.private_dir) == 0o700 and mode(run.diagnostics) == 0o600
    assert mode(run.metrics) == 0o644
    os.umask(0o027)
    run.write_report({"x": 1})
    assert mode(run.report) == 0o640


def test_a_pre_release_run_layout_is_refused_on_resume(tmp_path, monkeypatch):
    """A run written by a pre-release dpemb (checkpoint.pt at the top, before private/
    existed) is refused on resume with the one pre-release error; nothing is moved."""
    from dpemb.training.errors import PreReleaseError

    train, ev = splits()
    opt = OptimConfig(steps=8, batch_size=16)
    run = RunConfig(out=str(tmp_path / "old"), eval_every=4, progress=False)
    real, calls = central.evaluate_backbone, {"n": 0}

    def crash_on_third_eval(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated crash")
        return real(*a, **k)

    monkeypatch.setattr(central, "evaluate_backbone", crash_on_third_eval)
    with pytest.raises(RuntimeError):
        central.train_centralized(train, ev, MODEL, opt, run)
    monkeypatch.setattr(central, "evaluate_backbone", real)
    old = tmp_path / "old"
    os.replace(old / "private" / "checkpoint.pt", old / "checkpoint.pt")  # the pre-release layout
    shutil.rmtree(old / "private")  # (it holds only the configuration now)
    with pytest.raises(PreReleaseError, match="was written by a pre-release dpemb.*train the model again"):
        central.train_centralized(train, ev, MODEL, opt, run, resume=True)
    assert (old / "checkpoint.pt").is_file() and not (old / "private").exists()
    with pytest.raises(PreReleaseError):
        load_checkpoint(old)


def test_the_weights_file_is_byte_identical_for_the_same_weights(tmp_path):
    """Identical runs release identical files: safetensors serialises its metadata from a
    hash map seeded per map, so with two keys their order (and the bytes) varied from one
    save to the next, in one process as across processes."""
    from dpemb.models import build_backbone
    from dpemb.training.artifact import write_artifact

    torch.manual_seed(0)
    model = build_backbone("lenet", in_channels=1, image_size=28, embedding_dim=8, width=0.25)
    files = set()
    for i in range(12):  # two orders of two keys: 12 saves all alike by chance with probability 2^-11
        write_artifact(tmp_path / f"a{i}", model, {"format": "dpemb-model-card"})
        files.add((tmp_path / f"a{i}" / "model.safetensors").read_bytes())
    assert len(files) == 1

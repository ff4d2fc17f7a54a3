"""Centralized training: run directory contents, learning signal, exact resume."""

from __future__ import annotations

import json

import pytest
import torch

import dpemb.training.centralized as central
from dpemb.training.checkpoint import CheckpointError, load_checkpoint
from dpemb.training.config import ModelConfig, OptimConfig, RunConfig
from tests.conftest import make_tiny_dataset

MODEL = ModelConfig(backbone="lenet", embedding_dim=16)


def data():
    s = make_tiny_dataset(num_users=30, per_user=10).split()
    return s.train, s.eval


def test_run_directory_and_report(tmp_path):
    train, ev = data()
    rep = central.train_centralized(train, ev, MODEL, OptimConfig(steps=30, batch_size=32, lr=0.05),
                                    RunConfig(out=str(tmp_path / "r"), eval_every=15, progress=False))
    d = tmp_path / "r"
    for f in ("config.json", "metrics.jsonl", "private/checkpoint.pt", "report.json", "roc.png", "training.png",
              "model.safetensors", "model_card.json"):
        assert (d / f).is_file(), f
    assert not (d / "checkpoint.pt").exists()  # private state lives in private/ only
    recs = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 15, 30]
    assert all("not private" in r["epsilon"] for r in recs)
    assert "not private" in rep["privacy"]
    assert recs[-1]["train_loss"] < 2.0  # 9 training classes: ln 9 = 2.2 at chance
    assert 0 <= rep["final"]["recall_at_far_0.001"] <= 1
    for released in ("report.json", "model_card.json"):  # no local path of the curator's
        assert str(tmp_path) not in (d / released).read_text(), released


def test_resume_equals_uninterrupted(tmp_path, monkeypatch):
    train, ev = data()
    opt = OptimConfig(steps=20, batch_size=16, cosine=True)
    central.train_centralized(train, ev, MODEL, opt, RunConfig(out=str(tmp_path / "a"), eval_every=10,
                                                               progress=False))
    run_b = RunConfig(out=str(tmp_path / "b"), eval_every=10, progress=False)
    real, calls = central.evaluate_backbone, {"n": 0}

    def crash_on_third_eval(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:  # evaluations at steps 0, 10, then crash at 20
            raise RuntimeError("simulated crash")
        return real(*a, **k)

    monkeypatch.setattr(central, "evaluate_backbone", crash_on_third_eval)
    with pytest.raises(RuntimeError):
        central.train_centralized(train, ev, MODEL, opt, run_b)
    monkeypatch.setattr(central, "evaluate_backbone", real)
    assert load_checkpoint(tmp_path / "b")["step"] == 10
    central.train_centralized(train, ev, MODEL, opt, run_b, resume=True)
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for k in a["backbone"]:
        assert torch.equal(a["backbone"][k], b["backbone"][k]), k
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == (tmp_path / "b" / "metrics.jsonl").read_text()


def test_resume_with_different_flags_is_refused(tmp_path):
    train, ev = data()
    run = RunConfig(out=str(tmp_path / "r"), eval_every=5, progress=False)
    central.train_centralized(train, ev, MODEL, OptimConfig(steps=5), run)
    with pytest.raises(CheckpointError):
        central.train_centralized(train, ev, MODEL, OptimConfig(steps=5, lr=0.2), run, resume=True)


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    p = tmp_path / "checkpoint.pt"
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="checkpoint"):
        load_checkpoint(p)

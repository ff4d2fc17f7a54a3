"""Centralized training with a margin loss: the loss is part of the config a resume
checks, and a run written before the loss setting existed is refused as pre-release."""

from __future__ import annotations

import json
import math

import pytest

import dpemb.training.centralized as central
from dpemb.models.margin import LossConfig
from dpemb.training.checkpoint import CheckpointError
from dpemb.training.config import OptimConfig, RunConfig, config_differences, config_json, unset_settings
from dpemb.training.errors import PreReleaseError
from dpemb.training.checkpoint import check_same_config
from dpemb.training.rundir import RunDir
from tests.training.test_centralized import MODEL, data


def test_arcface_run_then_resume_with_another_loss_is_refused(tmp_path):
    train, ev = data()
    run = RunConfig(out=str(tmp_path / "r"), eval_every=4, progress=False)
    rep = central.train_centralized(train, ev, MODEL, OptimConfig(steps=4, batch_size=16, loss="arcface"), run)
    assert rep["loss"] == {"kind": "arcface", "scale": 30.0, "margin": 0.5}
    recs = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(recs[-1]["train_loss"])
    longer = OptimConfig(steps=6, batch_size=16, loss=LossConfig("cosface"))
    with pytest.raises(CheckpointError, match=r"optim\.loss\.kind: 'arcface' -> 'cosface'"):
        central.train_centralized(train, ev, MODEL, longer, run, resume=True)


def test_a_config_written_before_the_loss_setting_existed_is_refused_as_pre_release(tmp_path):
    now = config_json(algorithm="centralized", optim=OptimConfig())
    old = json.loads(now)
    del old["optim"]["loss"]
    assert unset_settings(json.dumps(old), now) == ["optim.loss.kind", "optim.loss.margin", "optim.loss.scale"]
    assert unset_settings(now, now) == [] and config_differences(now, now) == []
    with pytest.raises(PreReleaseError, match="written by a pre-release dpemb.*train the model again"):
        check_same_config(RunDir(tmp_path / "run"), json.dumps(old), now)


def test_optim_config_validates_the_loss():
    assert OptimConfig(loss="cosface").loss == LossConfig("cosface", 30.0, 0.35)
    with pytest.raises(ValueError, match="unknown loss"):
        OptimConfig(loss="triplet")

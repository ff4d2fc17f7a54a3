"""Stopping and resuming (issue #12.2): SIGTERM/SIGINT checkpoint before the run exits,
checkpoints on a time interval, --resume without a checkpoint is an error, a refusal
names each changed flag, performance-only flags may change."""

from __future__ import annotations

import dataclasses
import json
import signal

import pytest
import torch

import dpemb.training.centralized as central
import dpemb.training.federated as fed
import dpemb.training.server_state as server_state
from dpemb.training.checkpoint import CheckpointError, load_checkpoint
from dpemb.training.config import OptimConfig
from dpemb.training.interrupt import TrainingInterrupted
from tests.training.test_federated import MODEL, setup


def _signal_in_round(monkeypatch, module, n, signum=signal.SIGTERM):
    real, calls = module.server_step, {"n": 0}

    def step(*a, **k):
        out = real(*a, **k)
        calls["n"] += 1
        if calls["n"] == n:
            signal.raise_signal(signum)  # as `kill -TERM` would, in the middle of training
        return out

    monkeypatch.setattr(module, "server_step", step)
    return real


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_checkpoints_then_resume_equals_uninterrupted(tmp_path, monkeypatch, signum):
    train, ev, spec, cfg, run_a = setup(tmp_path, "a", rounds=6)
    run_a = dataclasses.replace(run_a, eval_every=100)  # no evaluation checkpoint before the end
    fed.train_federated(train, ev, MODEL, cfg, spec, run_a, noise_seed=3)

    run_b = dataclasses.replace(run_a, out=str(tmp_path / "b"))
    real = _signal_in_round(monkeypatch, server_state, 3, signum)
    with pytest.raises(TrainingInterrupted) as e:
        fed.train_federated(train, ev, MODEL, cfg, spec, run_b, noise_seed=3)
    assert e.value.exit_code == 128 + signum and "--resume" in str(e.value)
    assert load_checkpoint(tmp_path / "b")["round"] == 3  # written on the signal, not at an evaluation
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    # the half-trained release says so, in its card and in a report (#34.6)
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    card = json.loads((tmp_path / "b" / "model_card.json").read_text())
    assert report["status"] == card["status"] == "incomplete: stopped at round 3 of 6"
    assert report["rounds"] == card["rounds"] == 3 and report["planned_rounds"] == 6
    assert report["privacy"]["rounds_composed"] == 3 and "stopped by" in report["stopped_because"]
    assert report["last_evaluated"]["round"] == 0  # only the initial evaluation ran (eval_every=100)

    monkeypatch.setattr(server_state, "server_step", real)
    fed.train_federated(train, ev, MODEL, cfg, spec, run_b, noise_seed=3, resume=True)
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for k in a["backbone"]:
        assert torch.equal(a["backbone"][k], b["backbone"][k]), k
    assert (tmp_path / "a" / "metrics.jsonl").read_text() == (tmp_path / "b" / "metrics.jsonl").read_text()
    assert json.loads((tmp_path / "b" / "report.json").read_text())["status"] == "complete"


def test_centralized_signal_checkpoints(tmp_path, monkeypatch):
    train, ev, _, _, run = setup(tmp_path, "c")
    run = dataclasses.replace(run, eval_every=1000)
    opt = OptimConfig(batch_size=8, steps=20)
    real_backward, calls = torch.Tensor.backward, {"n": 0}

    def backward(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            signal.raise_signal(signal.SIGTERM)
        return real_backward(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "backward", backward)
    with pytest.raises(TrainingInterrupted):
        central.train_centralized(train, ev, MODEL, opt, run)
    assert load_checkpoint(tmp_path / "c")["step"] == 5
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    card = json.loads((tmp_path / "c" / "model_card.json").read_text())
    assert report["status"] == card["status"] == "incomplete: stopped at step 5 of 20"
    assert "not private" in report["privacy"]


def test_time_interval_checkpoints_every_round_when_due(tmp_path, monkeypatch):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=6)
    run = dataclasses.replace(run, eval_every=100, checkpoint_interval_s=1e-9)  # always due
    real, calls = server_state.server_step, {"n": 0}

    def crash(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("killed")
        return real(*a, **k)

    monkeypatch.setattr(server_state, "server_step", crash)
    with pytest.raises(RuntimeError):
        fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3)
    assert load_checkpoint(tmp_path / "run")["round"] == 4


def test_resume_without_checkpoint_is_an_error_unless_auto(tmp_path):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=2)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3, resume=True)
    rep = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3, resume="auto")
    assert rep["rounds"] == 2


def test_refusal_names_each_changed_flag_and_performance_flags_may_change(tmp_path):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=4)
    run = dataclasses.replace(run, eval_every=2)
    spec2 = dataclasses.replace(spec, rounds=2)
    fed.train_federated(train, ev, MODEL, cfg, spec2, run, noise_seed=3)  # stops at round 2
    changed = dataclasses.replace(cfg, client_lr=cfg.client_lr * 2, local_epochs=2)
    with pytest.raises(CheckpointError) as e:
        fed.train_federated(train, ev, MODEL, changed, spec2, run, noise_seed=3, resume=True)
    assert "federated.client_lr" in str(e.value) and "federated.local_epochs" in str(e.value)
    # performance-only flags: progress, threads, device, eval batch size, checkpoint cadence
    perf = dataclasses.replace(run, progress=True, threads=1, device="cpu", eval_batch_size=7,
                               checkpoint_every=1, checkpoint_interval_s=0)
    rep = fed.train_federated(train, ev, MODEL, cfg, spec2, perf, noise_seed=3, resume=True)
    assert rep["rounds"] == 2
    assert json.loads((tmp_path / "run" / "config.json").read_text())["run"]["progress"] is False


def test_resuming_a_finished_run_keeps_one_summary_record(tmp_path):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=2)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3, resume=True)
    recs = [json.loads(l) for l in (tmp_path / "run" / "private" / "diagnostics.jsonl").read_text().splitlines()]
    assert sum(1 for r in recs if r.get("summary")) == 1
    assert [r["round"] for r in recs if not r.get("summary")] == [1, 2]


def test_federated_resume_on_other_data_is_refused(tmp_path):
    """Issue #33: the same number of users, other images: the epsilon and the model card
    would name the wrong data. The original data resumes."""
    from tests.conftest import make_tiny_dataset

    train, ev, spec, cfg, run = setup(tmp_path, rounds=2)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3)
    other = make_tiny_dataset(num_users=30, seed=7).split().train
    assert other.num_users == train.num_users  # the accountant's population is the same
    with pytest.raises(CheckpointError, match="was trained on other data.*original --data"):
        fed.train_federated(other, ev, MODEL, cfg, spec, run, noise_seed=3, resume=True)
    state = load_checkpoint(tmp_path / "run")
    assert len(state["data_fingerprint"]) == 32 and len(state["user_fingerprints"][0]) == train.num_users
    assert fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3, resume=True)["rounds"] == 2


def test_more_rounds_for_a_finished_run_names_init_and_the_composed_total(tmp_path):
    """#34.6: a finished run is not extended in place; the refusal gives the command that
    trains it further (a new run from its release) and the total epsilon of both runs,
    which for the same mechanism equals one run of all the rounds."""
    import dp_accounting

    from dpemb.privacy.events import training_event

    train, ev, spec, cfg, run = setup(tmp_path, rounds=2)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3)
    longer = dataclasses.replace(spec, rounds=5)
    with pytest.raises(CheckpointError) as e:
        fed.train_federated(train, ev, MODEL, cfg, longer, run, noise_seed=3, resume=True)
    msg = str(e.value)
    assert "not extended in place" in msg and f"--init {tmp_path / 'run'}" in msg and "--rounds 3" in msg
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(training_event(longer, 5))
    expected = acc.get_epsilon(spec.resolved_delta)
    stated = float(msg.split("total with the initialisation: epsilon = ")[1].split()[0])
    assert stated == pytest.approx(expected, rel=5e-3)  # printed to 3 significant digits
    # the same run still resumes (and re-reports) with its own rounds
    assert fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3, resume=True)["rounds"] == 2

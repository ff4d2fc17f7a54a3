"""The server optimizer (SGD + momentum, FedAdam) and the server lr schedule
(constant, cosine, linear warmup): against independent formulas, the SGD default
bit-identical to the old server step, validation, old configs, and the CLI flags."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from dpemb.algorithms.config import FederatedConfig
from dpemb.algorithms.round import server_step
from dpemb.algorithms.server import check_server_schedule, make_server_optimizer, server_lr_at
from dpemb.training.config import config_differences, config_json, unset_settings


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3, 4, generator=g)), torch.nn.Parameter(torch.randn(5, generator=g))]


def _sums(rounds, n=17, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=g) * 3.0 for _ in range(rounds)]


def _flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params])


def test_adam_server_step_equals_fedadam_formulas_over_three_rounds():
    cfg = FederatedConfig(server_optimizer="adam", server_lr=0.1, server_lr_schedule="cosine")
    rounds, normaliser = 3, 8.0
    params = _params()
    x = _flat(params).double().numpy().copy()
    opt = make_server_optimizer(params, cfg)
    assert isinstance(opt, torch.optim.Adam)
    b1, b2, tau = 0.9, 0.99, 1e-3  # the paper's defaults
    assert (cfg.server_adam_beta1, cfg.server_adam_beta2, cfg.server_adam_eps) == (b1, b2, tau)
    m, v = np.zeros_like(x), np.zeros_like(x)
    for t, s in enumerate(_sums(rounds), start=1):
        lr = 0.1 * 0.5 * (1 + math.cos(math.pi * (t - 1) / rounds))  # cosine, written out
        server_step(params, opt, s, normaliser, lr=server_lr_at(cfg, t - 1, rounds))
        g = s.double().numpy() / normaliser  # pseudo-gradient: the averaged noised delta (start - end)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        x = x - lr * m_hat / (np.sqrt(v_hat) + tau)
        np.testing.assert_allclose(_flat(params).double().numpy(), x, rtol=1e-5, atol=1e-6)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 * (1 + math.cos(math.pi * 2 / 3)))


def test_sgd_default_is_bit_identical_to_the_old_server_step():
    cfg = FederatedConfig()
    assert (cfg.server_optimizer, cfg.server_lr_schedule, cfg.server_lr_warmup) == ("sgd", "constant", 0)
    new, old = _params(), _params()
    new_opt = make_server_optimizer(new, cfg)
    old_opt = torch.optim.SGD(old, lr=cfg.server_lr, momentum=cfg.server_momentum)  # the code before
    for rnd, s in enumerate(_sums(5)):
        server_step(new, new_opt, s, 8, lr=server_lr_at(cfg, rnd, 5))
        server_step(old, old_opt, s.clone(), 8)
        for a, b in zip(new, old):
            assert torch.equal(a, b)
    for a, b in zip(new, old):
        assert torch.equal(new_opt.state[a]["momentum_buffer"], old_opt.state[b]["momentum_buffer"])


def test_sgd_with_a_schedule_uses_the_round_lr():
    cfg = FederatedConfig(server_lr=1.0, server_momentum=0.0, server_lr_schedule="cosine", server_lr_warmup=1)
    p = torch.nn.Parameter(torch.zeros(2))
    opt = make_server_optimizer([p], cfg)
    expected = torch.zeros(2)
    for rnd in range(4):
        lr = server_lr_at(cfg, rnd, 4)
        server_step([p], opt, torch.ones(2), 2, lr=lr)
        expected -= lr * 0.5
        assert torch.allclose(p.detach(), expected)


@pytest.mark.parametrize("rounds,warmup", [(10, 0), (11, 3)])
def test_cosine_schedule_values(rounds, warmup):
    base = 0.5
    cfg = FederatedConfig(server_lr=base, server_lr_schedule="cosine", server_lr_warmup=warmup)
    lrs = [server_lr_at(cfg, r, rounds) for r in range(rounds)]
    for r in range(warmup):  # linear warmup: base (r + 1) / (W + 1), then base on round W
        assert lrs[r] == pytest.approx(base * (r + 1) / (warmup + 1))
    assert all(a < b for a, b in zip(lrs[:warmup + 1], lrs[1:warmup + 1]))
    span = rounds - warmup
    assert lrs[warmup] == pytest.approx(base)  # first cosine round: the full lr
    assert lrs[warmup + span // 2] == pytest.approx(base / 2)  # half way: half the lr
    for r in range(warmup, rounds):
        assert lrs[r] == pytest.approx(base * 0.5 * (1 + math.cos(math.pi * (r - warmup) / span)))
    last = base * 0.5 * (1 + math.cos(math.pi * (span - 1) / span))  # small but > 0; 0 after the last round
    assert lrs[-1] == pytest.approx(last) and 0 < lrs[-1] < 0.05 * base
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))  # decreasing after warmup


def test_constant_schedule_with_and_without_warmup():
    assert [server_lr_at(FederatedConfig(server_lr=0.3), r, 4) for r in range(4)] == [0.3] * 4
    cfg = FederatedConfig(server_lr=0.4, server_lr_warmup=2)
    assert [server_lr_at(cfg, r, 5) for r in range(5)] == pytest.approx([0.4 / 3, 0.8 / 3, 0.4, 0.4, 0.4])


@pytest.mark.parametrize("kw,message", [
    (dict(server_optimizer="adagrad"), "server_optimizer must be one of"),
    (dict(server_lr_schedule="linear"), "server_lr_schedule must be one of"),
    (dict(server_lr_warmup=-1), "server_lr_warmup must be >= 0"),
    (dict(server_optimizer="adam", server_adam_eps=0.0), "server_adam_eps must be positive"),
    (dict(server_optimizer="adam", server_adam_beta2=1.0), "server_adam_beta2 must lie in [0, 1)"),
    (dict(server_adam_beta1=-0.1), "server_adam_beta1 must lie in [0, 1)"),
    (dict(algorithm="dp-ftrl-fedemb", server_optimizer="adam"), "dp-ftrl-fedemb supports server_optimizer 'sgd'"),
])
def test_invalid_server_knobs_are_refused(kw, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(")", r"\)")):
        FederatedConfig(**kw)


def test_dp_ftrl_accepts_sgd_with_a_schedule():
    cfg = FederatedConfig(algorithm="dp-ftrl-fedemb", server_lr_schedule="cosine", server_lr_warmup=2)
    assert cfg.server_optimizer == "sgd"


def test_warmup_must_end_before_the_last_round():
    cfg = FederatedConfig(server_lr_schedule="cosine", server_lr_warmup=4)
    check_server_schedule(cfg, 5)
    with pytest.raises(ValueError, match=r"server_lr_warmup \(4\) must be smaller than the number of rounds \(4\)"):
        check_server_schedule(cfg, 4)
    with pytest.raises(ValueError, match="outside"):
        server_lr_at(cfg, 5, 5)


def test_a_config_from_before_the_server_knobs_is_refused_as_pre_release(tmp_path):
    from dpemb.training.errors import PreReleaseError
    from dpemb.training.checkpoint import check_same_config
    from dpemb.training.rundir import RunDir

    current = config_json(federated=FederatedConfig())
    saved = json.loads(current)
    knobs = ("server_optimizer", "server_adam_beta1", "server_adam_beta2", "server_adam_eps",
             "server_lr_schedule", "server_lr_warmup")
    for k in knobs:
        del saved["federated"][k]
    saved = json.dumps(saved)
    assert unset_settings(saved, current) == sorted(f"federated.{k}" for k in knobs)
    with pytest.raises(PreReleaseError, match="written by a pre-release dpemb.*train the model again"):
        check_same_config(RunDir(tmp_path / "run"), saved, current)
    adam = config_json(federated=FederatedConfig(server_optimizer="adam", server_lr_schedule="cosine"))
    assert config_differences(current, adam) == ["federated.server_lr_schedule", "federated.server_optimizer"]


# --- the CLI flags -----------------------------------------------------------------------------

FED = ["--algorithm", "dp-fedemb", "--rounds", "3", "--clients-per-round", "3", "--users-per-client", "2",
       "--embedding-dim", "16", "--local-batch-size", "4", "--eval-every", "3", "--no-progress",
       "--non-private"]


def test_cli_flags_reach_config_json(tiny_data_dir, tmp_path):
    from dpemb.cli.main import main

    out = tmp_path / "adam"
    assert main(["train", "--data", tiny_data_dir, "--out", str(out), *FED, "--server-optimizer", "adam",
                 "--server-adam-eps", "0.01", "--server-lr-schedule", "cosine", "--server-lr-warmup", "1",
                 "--server-lr", "0.05", "--server-ema", "0.9"]) == 0
    fed = json.loads((out / "config.json").read_text())["federated"]
    assert (fed["server_optimizer"], fed["server_adam_eps"], fed["server_lr_schedule"], fed["server_lr_warmup"],
            fed["server_lr"], fed["server_adam_beta1"], fed["server_adam_beta2"], fed["server_ema"]) == (
        "adam", 0.01, "cosine", 1, 0.05, 0.9, 0.99, 0.9)
    assert json.loads((out / "model_card.json").read_text())["weight_average"]["decay"] == 0.9


def test_cli_defaults_are_sgd_and_constant(tiny_data_dir, tmp_path, monkeypatch):
    import dpemb.training.federated as fed
    from dpemb.cli.main import main

    seen = {}

    class Stop(Exception):
        pass

    def stub(train, eval_ds, model_cfg, fed_cfg, spec, run_cfg, **kw):
        seen["fed"] = fed_cfg
        raise Stop

    monkeypatch.setattr(fed, "train_federated", stub)
    with pytest.raises(Stop):
        main(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "d"), *FED])
    cfg = seen["fed"]
    assert (cfg.server_optimizer, cfg.server_lr_schedule, cfg.server_lr_warmup, cfg.server_adam_eps,
            cfg.server_ema) == ("sgd", "constant", 0, 1e-3, 0.0)


@pytest.mark.parametrize("flags,message", [
    (["--algorithm", "dp-ftrl-fedemb", "--server-optimizer", "adam"],
     "dp-ftrl-fedemb supports server_optimizer 'sgd' only"),
    (["--server-lr-warmup", "3"], "server_lr_warmup (3) must be smaller than the number of rounds (3)"),
    (["--server-optimizer", "adam", "--server-adam-eps", "0"], "server_adam_eps must be positive"),
    (["--server-ema", "1"], "server_ema must lie in [0, 1)"),
])
def test_invalid_server_flags_are_usage_errors(tiny_data_dir, tmp_path, capsys, flags, message):
    from dpemb.cli.main import main

    out = tmp_path / "bad"
    with pytest.raises(SystemExit) as e:
        main(["train", "--data", tiny_data_dir, "--out", str(out), *FED, *flags])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()

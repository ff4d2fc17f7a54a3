"""The federated run loop: exact resume, refusing changed privacy knobs, budget stop,
non-finite deltas, population checks, epsilon tracked every round."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import dpemb.training.federated as fed
import dpemb.training.server_state as server_state
from dpemb.training.errors import TrainingDiverged
from dpemb.algorithms.config import FederatedConfig
from dpemb.algorithms.server import server_lr_at
from dpemb.privacy import PrivacyLedger, PrivacySpec
from dpemb.training.checkpoint import CheckpointError, load_checkpoint
from dpemb.training.config import ModelConfig, RunConfig
from tests.conftest import make_tiny_dataset

MODEL = ModelConfig(backbone="lenet", embedding_dim=16)


PRIVATE_STATS = {"train_loss", "clients", "users", "examples", "preclip_norm_mean", "fraction_clipped",
                 "nonfinite_deltas", "train_examples", "train_identities", "images_per_second", "rounds_per_second",
                 "unclipped_clients", "seconds", "processes", "collective_seconds", "client_seconds"}


def diagnostics(run_dir):
    """The per-round records of the PRIVATE diagnostics file."""
    path = run_dir / "private" / "diagnostics.jsonl"
    return [r for r in map(json.loads, path.read_text().splitlines()) if not r.get("summary")]


def setup(tmp_path, name="run", rounds=4, clip=0.5, z=0.5, algorithm="dp-fedemb", adaptive=None, secure=False,
          bands=None, mechanism="bandmf", **fed_kw):
    """A tiny run; ``bands``: DP-FTRL-FedEmb with ``mechanism`` (BandMF or BLT) noise of that b
    (else tree)."""
    splits = make_tiny_dataset(num_users=30).split()
    train, ev = splits.train, splits.eval
    spec = PrivacySpec(population=train.num_users, clients_per_round=3, users_per_client=2,
                       noise_multiplier=z, clip_norm=clip, rounds=rounds,
                       mechanism=mechanism if bands else "tree" if algorithm == "dp-ftrl-fedemb" else "gaussian",
                       bands=bands or 1, adaptive_clipping=adaptive, secure_noise=secure)
    cfg = FederatedConfig(algorithm=algorithm, local_batch_size=4, **fed_kw)  # >= 2 local steps
    run = RunConfig(out=str(tmp_path / name), eval_every=2, progress=False)
    return train, ev, spec, cfg, run


def crash_in_round_3(monkeypatch, train, ev, cfg, spec, run, step=None) -> dict:
    """Run until the server step of round 3 raises (after the round-2 checkpoint), restore
    ``step`` (default: the real server step) and return the private checkpoint left behind."""
    real_step, calls = step or server_state.server_step, {"n": 0}

    def crashing_step(*a, **k):
        if calls["n"] == 3:
            raise RuntimeError("simulated crash")
        calls["n"] += 1
        return real_step(*a, **k)

    monkeypatch.setattr(server_state, "server_step", crashing_step)
    with pytest.raises(RuntimeError):
        fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=7)
    monkeypatch.setattr(server_state, "server_step", real_step)
    return load_checkpoint(run.out)


ALGORITHMS = ["dp-fedemb", "dp-fedavg", "dp-ftrl-fedemb",  # (algorithm, b, mechanism)
              pytest.param(("dp-ftrl-fedemb", 2, "bandmf"), id="dp-ftrl-fedemb-bandmf"),
              pytest.param(("dp-ftrl-fedemb", 2, "blt"), id="dp-ftrl-fedemb-blt")]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resume_equals_uninterrupted(tmp_path, monkeypatch, algorithm):
    algorithm, bands, mech = algorithm if isinstance(algorithm, tuple) else (algorithm, None, None)
    train, ev, spec, cfg, run_a = setup(tmp_path, "a", algorithm=algorithm, bands=bands, mechanism=mech)
    rep_a = fed.train_federated(train, ev, MODEL, cfg, spec, run_a, noise_seed=7)

    _, _, _, _, run_b = setup(tmp_path, "b", algorithm=algorithm, bands=bands, mechanism=mech)
    assert crash_in_round_3(monkeypatch, train, ev, cfg, spec, run_b)["round"] == 2
    rep_b = fed.train_federated(train, ev, MODEL, cfg, spec, run_b, noise_seed=7, resume=True)

    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for k in a["backbone"]:
        assert torch.equal(a["backbone"][k], b["backbone"][k]), k
    assert rep_a["privacy"]["epsilon_rdp"] == rep_b["privacy"]["epsilon_rdp"]
    assert rep_a["final"] == rep_b["final"]
    lines_a = (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()
    lines_b = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert len(lines_a) == len(lines_b) == 5  # round 0 + 4 rounds
    strip = lambda l: {k: v for k, v in json.loads(l).items()}  # noqa: E731
    assert [strip(l) for l in lines_a] == [strip(l) for l in lines_b]


def test_resume_with_other_privacy_knobs_is_refused(tmp_path):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=2)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    _, _, spec2, _, _ = setup(tmp_path, rounds=2, clip=0.9)
    with pytest.raises(CheckpointError, match="privacy"):
        fed.train_federated(train, ev, MODEL, cfg, spec2, run, noise_seed=1, resume=True)


def test_epsilon_every_round_matches_ledger(tmp_path):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=3)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    recs = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    ledger = PrivacyLedger(spec)
    for rec in recs[1:]:
        ledger.step()
        assert rec["epsilon_rdp"] == pytest.approx(ledger.epsilon("rdp"))
        if rec["epsilon_pld"] is not None or "recall_at_far_0.001" in rec:  # PLD: cheap or eval round
            assert rec["epsilon_pld"] == pytest.approx(ledger.epsilon("pld"))
    for rec in diagnostics(tmp_path / "run"):
        assert 0 <= rec["fraction_clipped"] <= 1 and rec["preclip_norm_mean"] > 0


def test_budget_stop_never_exceeds_budget(tmp_path):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=50, z=0.8)
    ledger = PrivacyLedger(spec)
    ledger.step(3)
    budget = ledger.epsilon("rdp") * 1.0001  # affords exactly 3 rounds
    rep = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1, epsilon_budget=budget)
    assert rep["stopped_by_epsilon_budget"] and rep["rounds"] == 3
    assert rep["privacy"]["epsilon_rdp"] <= budget


def test_nonfinite_deltas_are_zeroed_and_counted(tmp_path, monkeypatch):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=2, z=0.5)
    real = fed.ClientTrainer.update

    def poisoned(self, *a, **k):
        res = real(self, *a, **k)
        res.delta[0] = float("nan")
        return res

    monkeypatch.setattr(fed.ClientTrainer, "update", poisoned)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    recs = diagnostics(tmp_path / "run")
    assert recs and all(r["nonfinite_deltas"] == r["clients"] for r in recs)
    state = load_checkpoint(tmp_path / "run")
    assert all(torch.isfinite(v).all() for v in state["backbone"].values() if v.is_floating_point())


def test_too_few_users_or_wrong_population_fail_before_training(tmp_path):
    train, ev, spec, cfg, run = setup(tmp_path)
    with pytest.raises(ValueError, match="exceeds 1"):
        PrivacySpec(population=train.num_users, clients_per_round=20, users_per_client=2,
                    noise_multiplier=1.0, clip_norm=1.0, rounds=2)
    wrong = PrivacySpec(population=train.num_users + 100, clients_per_round=3, noise_multiplier=1.0,
                        clip_norm=1.0, rounds=2)
    with pytest.raises(ValueError, match="population"):
        fed.train_federated(train, ev, MODEL, cfg, wrong, run)
    assert not (tmp_path / "run" / "private" / "checkpoint.pt").exists()
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_zero_noise_without_nonprivate_flag_is_refused():
    with pytest.raises(ValueError):
        PrivacySpec(population=100, clients_per_round=4, noise_multiplier=0.0, clip_norm=1.0, rounds=2)


def test_all_zero_deltas_are_reported(tmp_path, capsys):
    # a zero-initialised head and one local step per client: the backbone cannot move
    from dataclasses import replace

    train, ev, spec, cfg, run = setup(tmp_path, rounds=1)
    cfg = replace(cfg, head_init="zeros", local_batch_size=1000)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    err = capsys.readouterr().err
    assert "every client's backbone delta was exactly zero" in err and "--local-batch-size" in err


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_released_outputs_hold_no_unnoised_statistics(tmp_path, algorithm):
    algorithm, bands, mech = algorithm if isinstance(algorithm, tuple) else (algorithm, None, None)
    train, ev, spec, cfg, run = setup(tmp_path, rounds=3, algorithm=algorithm, bands=bands, mechanism=mech)
    rep = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    out = tmp_path / "run"
    for rec in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()):
        assert not PRIVATE_STATS & set(rec), f"metrics.jsonl releases {PRIVATE_STATS & set(rec)}"
    on_disk = json.loads((out / "report.json").read_text())
    for report in (rep, on_disk):
        assert not PRIVATE_STATS & set(report), f"report releases {PRIVATE_STATS & set(report)}"
    for released in ("report.json", "model_card.json"):  # no local path of the curator's
        assert str(tmp_path) not in (out / released).read_text(), released
    # the diagnostics are kept, in the private file, one record per round
    recs = diagnostics(out)
    assert [r["round"] for r in recs] == [1, 2, 3]
    assert all({"train_loss", "fraction_clipped", "users"} <= set(r) for r in recs)
    if mech == "blt":  # BLT's buffers are in the private checkpoint only; one Gaussian, no amplification
        state = load_checkpoint(out)["mechanism"]
        assert state["kind"] == "blt" and len(state["buffers"]) == len(state["theta"]) and state["rounds"] == 3
        released = [p for p in out.rglob("*") if p.is_file() and "private" not in p.relative_to(out).parts]
        assert released and not any(b'"buffers"' in p.read_bytes() for p in released)
        schedule = "; BLT, min-separation b = 2, no amplification, cyclic Poisson participation)"
        assert on_disk["privacy"]["statement_rdp"].endswith(schedule)
        assert on_disk["privacy"]["dp_event"]["class_name"] == "GaussianDpEvent"
    elif bands:  # BandMF's noise state (b - 1 past noise vectors) is in the private checkpoint only
        state = load_checkpoint(out)["mechanism"]
        assert state["kind"] == "bandmf" and len(state["past"]) == bands - 1 and state["rounds"] == 3
        released = [p for p in out.rglob("*") if p.is_file() and "private" not in p.relative_to(out).parts]
        assert released and not any(b'"past"' in p.read_bytes() or b"bandmf_state" in p.read_bytes()
                                    for p in released)
        schedule = "; BandMF, 2 bands, cyclic Poisson participation)"  # every epsilon names the schedule
        assert on_disk["privacy"]["statement_rdp"].endswith(schedule)
        assert on_disk["privacy"]["dp_event"]["count"] == 2  # ceil(3 / 2) participations


def test_nonfinite_model_stops_with_round_cause_and_remedy(tmp_path, monkeypatch):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=6, z=0.5)
    real_step, calls = server_state.server_step, {"n": 0}

    def exploding_step(params, opt, noised, normaliser):
        calls["n"] += 1
        if calls["n"] == 3:  # round 3: the noised update overflows
            noised = torch.full_like(noised, float("inf"))
        return real_step(params, opt, noised, normaliser)

    monkeypatch.setattr(server_state, "server_step", exploding_step)
    with pytest.raises(TrainingDiverged) as e:
        fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    msg = str(e.value)
    assert "round 3" in msg and "noise on the average" in msg and "--clients-per-round" in msg
    state = load_checkpoint(tmp_path / "run")  # the round-2 checkpoint is intact and finite
    assert state["round"] == 2
    assert all(torch.isfinite(v).all() for v in state["backbone"].values() if v.is_floating_point())
    # the report says what the run directory's release is: round 2's, of 6; the epsilon counts round 3
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["status"] == "incomplete: stopped at round 2 of 6" and "diverged at round 3" in report["stopped_because"]
    assert report["privacy"]["rounds_composed"] == 3 and report["last_evaluated"]["round"] == 2


# ---------------------------------------------------------------- adaptive clipping
def adaptive_cfg(gamma=0.5):
    from dpemb.privacy.adaptive_clipping import AdaptiveClipping

    return AdaptiveClipping(gamma, learning_rate=0.2, count_stddev=2.0)  # z = 0.5 < sigma_b / Delta_b = 2


def test_resume_with_adaptive_clipping_equals_uninterrupted(tmp_path, monkeypatch):
    import dp_accounting as dpa
    from dp_accounting.rdp import RdpAccountant

    train, ev, spec, cfg, run_a = setup(tmp_path, "a", adaptive=adaptive_cfg())
    rep_a = fed.train_federated(train, ev, MODEL, cfg, spec, run_a, noise_seed=7)
    _, _, _, _, run_b = setup(tmp_path, "b", adaptive=adaptive_cfg())
    mid = crash_in_round_3(monkeypatch, train, ev, cfg, spec, run_b)
    assert mid["round"] == 2 and mid["adaptive_clip"]["round"] == 2
    rep_b = fed.train_federated(train, ev, MODEL, cfg, spec, run_b, noise_seed=7, resume=True)

    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for k in a["backbone"]:
        assert torch.equal(a["backbone"][k], b["backbone"][k]), k
    assert a["adaptive_clip"] == b["adaptive_clip"] and a["adaptive_clip"]["round"] == 4
    recs_a = [json.loads(l) for l in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    recs_b = [json.loads(l) for l in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert recs_a == recs_b
    clips = [r["clip_norm"] for r in recs_a[1:]]
    assert clips[0] == 0.5 and len(set(clips)) == 4  # C0 first, then it moves every round
    ac = rep_a["privacy"]["adaptive_clipping"]
    assert ac == rep_b["privacy"]["adaptive_clipping"] and ac["final_clip_norm"] == a["adaptive_clip"]["clip_norm"]
    assert "adaptive clipping: target quantile 0.5, clip norm 0.5 -> " in ac["statement"]
    card = json.loads((tmp_path / "a" / "model_card.json").read_text())
    assert card["privacy"]["adaptive_clipping"]["final_clip_norm"] == ac["final_clip_norm"]
    assert rep_a["privacy"]["spec"]["adaptive_clipping"]["target_quantile"] == 0.5
    # epsilon: both releases as one Poisson-sampled Gaussian, from what the run used (dp_accounting directly)
    z_value = a["mechanism"]["noise_multiplier"]
    combined = (z_value**-2 + (1.0 / 2.0) ** 2) ** -0.5  # Delta_b = 1 (K = 2), sigma_b = 2
    acc = RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(3 * 2 / train.num_users, dpa.GaussianDpEvent(combined)), 4)
    assert rep_a["privacy"]["epsilon_rdp"] == rep_b["privacy"]["epsilon_rdp"]
    assert rep_a["privacy"]["epsilon_rdp"] == pytest.approx(acc.get_epsilon(spec.resolved_delta), rel=1e-9)
    assert combined == pytest.approx(0.5)


def test_adaptive_clipping_releases_one_noised_count_per_round(tmp_path, monkeypatch):
    """dp-fedavg, secure sampler: one count draw per round with std sigma_b on the CENTRED
    un-noised count; the clips follow the rule from the noised counts; nothing un-noised released."""
    import math

    import dpemb.privacy.noise as noise_mod
    from tests.conftest import spy_standard_normal

    train, ev, spec, cfg, run = setup(tmp_path, rounds=3, algorithm="dp-fedavg", adaptive=adaptive_cfg(0.9),
                                      secure=True)
    draws = spy_standard_normal(monkeypatch, noise_mod)
    counts, real = [], noise_mod.GaussianNoise.add_to_count

    def spy(self, count, std):
        out = real(self, count, std)
        counts.append((count, std, out))
        return out

    monkeypatch.setattr(noise_mod.GaussianNoise, "add_to_count", spy)
    rep = fed.train_federated(train, ev, MODEL, cfg, spec, run)
    assert draws == [True] * 6  # update noise + count noise, every round, through the secure sampler
    diag = diagnostics(tmp_path / "run")
    assert [c[0] for c in counts] == [d["unclipped_clients"] - d["clients"] / 2 for d in diag]
    assert all(c[1] == 2.0 for c in counts)
    recs = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    clip = 0.5
    for rec, (_, _, noised) in zip(recs[1:], counts):
        assert rec["clip_norm"] == pytest.approx(clip)
        clip *= math.exp(-0.2 * (noised / spec.expected_reporting_clients + 0.5 - 0.9))
    assert rep["privacy"]["adaptive_clipping"]["final_clip_norm"] == pytest.approx(clip)
    released = (tmp_path / "run" / "metrics.jsonl").read_text() + (tmp_path / "run" / "report.json").read_text() \
        + (tmp_path / "run" / "model_card.json").read_text()
    assert "unclipped" not in released and "fraction_clipped" not in released


def test_non_private_run_adapts_the_clip_without_count_noise(tmp_path):
    from dataclasses import replace

    train, ev, spec, cfg, run = setup(tmp_path, rounds=2, adaptive=adaptive_cfg())
    spec = replace(spec, noise_multiplier=0.0, nonprivate=True)
    rep = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    ac = rep["privacy"]["adaptive_clipping"]
    assert ac["count_noised"] is False and ac["final_clip_norm"] != 0.5
    assert "UN-noised" in ac["statement"]


@pytest.mark.parametrize("algorithm,server", [
    ("dp-fedemb", dict(server_optimizer="adam", server_lr=0.05, server_lr_schedule="cosine", server_lr_warmup=1,
                       server_ema=0.5)),
    ("dp-ftrl-fedemb", dict(server_lr_schedule="cosine", server_lr_warmup=1)),
])
def test_resume_with_server_adam_and_cosine_equals_uninterrupted(tmp_path, monkeypatch, algorithm, server):
    """FedAdam's moments and step count are in the checkpoint, and the schedule is a
    function of the round: a crash and resume reproduce the uninterrupted run exactly."""
    train, ev, spec, cfg, run_a = setup(tmp_path, "a", algorithm=algorithm, **server)
    lrs = []
    real_step = server_state.server_step

    def recording_step(*a, **k):
        lrs.append(a[1].param_groups[0]["lr"])  # the round's lr, set before the step
        return real_step(*a, **k)

    monkeypatch.setattr(server_state, "server_step", recording_step)
    rep_a = fed.train_federated(train, ev, MODEL, cfg, spec, run_a, noise_seed=7)
    assert lrs == [server_lr_at(cfg, r, 4) for r in range(4)]
    assert lrs[0] == cfg.server_lr / 2 and lrs[1] == cfg.server_lr > lrs[2] > lrs[3] > 0  # warmup, cosine
    _, _, _, _, run_b = setup(tmp_path, "b", algorithm=algorithm, **server)
    mid = crash_in_round_3(monkeypatch, train, ev, cfg, spec, run_b, step=real_step)
    assert mid["round"] == 2
    if cfg.server_optimizer == "adam":
        assert all(int(s["step"]) == 2 for s in mid["server_optimizer"]["state"].values())
    monkeypatch.setattr(server_state, "server_step", recording_step)
    lrs.clear()
    rep_b = fed.train_federated(train, ev, MODEL, cfg, spec, run_b, noise_seed=7, resume=True)
    assert lrs == [server_lr_at(cfg, r, 4) for r in (2, 3)]  # the schedule continues where it stopped

    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for k in a["backbone"]:
        assert torch.equal(a["backbone"][k], b["backbone"][k]), k
    if cfg.server_ema:  # the moving average of the released models continues too
        assert torch.equal(a["server_ema"], b["server_ema"])
    sa, sb = a["server_optimizer"], b["server_optimizer"]
    assert sa["param_groups"] == sb["param_groups"]
    for i in sa["state"]:
        for k in sa["state"][i]:
            assert torch.equal(torch.as_tensor(sa["state"][i][k]), torch.as_tensor(sb["state"][i][k])), (i, k)
    assert rep_a["final"] == rep_b["final"]
    recs_a = [json.loads(l) for l in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    recs_b = [json.loads(l) for l in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert recs_a == recs_b
    saved = json.loads((tmp_path / "a" / "config.json").read_text())["federated"]
    assert {k: saved[k] for k in server} == server


def test_batched_clients_and_bf16_are_performance_flags(tmp_path):
    """--client-batch trains the same model (to float rounding) as one client at a time,
    with the same epsilon; --bf16 trains with the same privacy, numbers near float32."""
    from dataclasses import replace

    train, ev, spec, cfg, run = setup(tmp_path, "one")
    # CPU: float summation order only. CUDA (run picks it when present): cuDNN runs the
    # batched (vmapped) and the single convolutions with different float32 kernels and
    # training amplifies the rounding; measured 4.8e-4 on an H100 with TF32 off. A batched
    # step that mixed up clients would be off by the size of an update.
    tol = 2e-3 if torch.cuda.is_available() else 1e-5
    rep1 = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=7)
    rep3 = fed.train_federated(train, ev, MODEL, cfg, spec, replace(run, out=str(tmp_path / "b3"), client_batch=3),
                               noise_seed=7)
    a, b = load_checkpoint(tmp_path / "one"), load_checkpoint(tmp_path / "b3")
    for k in a["backbone"]:
        gap = float((a["backbone"][k] - b["backbone"][k]).abs().max())
        assert gap <= tol, (k, gap)
    assert rep3["privacy"]["epsilon_rdp"] == rep1["privacy"]["epsilon_rdp"]
    rep_bf = fed.train_federated(train, ev, MODEL, cfg, spec, replace(run, out=str(tmp_path / "bf"), bf16=True),
                                 noise_seed=7)
    assert rep_bf["privacy"]["epsilon_rdp"] == rep1["privacy"]["epsilon_rdp"]
    c = load_checkpoint(tmp_path / "bf")
    assert any(not torch.equal(a["backbone"][k], c["backbone"][k]) for k in a["backbone"])  # bf16 ran
    start = torch.cat([v.flatten() for v in a["backbone"].values() if v.is_floating_point()])
    other = torch.cat([v.flatten() for v in c["backbone"].values() if v.is_floating_point()])
    assert float((start - other).norm() / start.norm()) < 0.05


def test_server_ema_releases_and_evaluates_the_moving_average_of_the_server_models(tmp_path, monkeypatch):
    """With server_ema d the released artifact and every evaluation hold
    e_t = d e_(t-1) + (1 - d) w_t (e_0: the initial model), computed here from the server
    models; the clients and the checkpoint's backbone keep the server model itself."""
    from safetensors.torch import load_file
    from torch.nn.utils import parameters_to_vector

    from dpemb.training.executor import LocalExecutor

    d = 0.6
    train, ev, spec, cfg, run = setup(tmp_path, rounds=4, server_ema=d)
    starts, evaluated = [], []
    real_round, real_embed = LocalExecutor.run_round, LocalExecutor.embed

    def recording_round(self, rnd, start, *a, **k):
        starts.append(start.clone())  # the server model the clients start from
        return real_round(self, rnd, start, *a, **k)

    def recording_embed(self, model, *a, **k):
        evaluated.append(parameters_to_vector([p for p in model.parameters() if p.requires_grad]).detach().clone())
        return real_embed(self, model, *a, **k)

    monkeypatch.setattr(LocalExecutor, "run_round", recording_round)
    monkeypatch.setattr(LocalExecutor, "embed", recording_embed)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=3)
    ckpt = load_checkpoint(tmp_path / "run")
    released = load_file(str(tmp_path / "run" / "model.safetensors"))
    model = fed.build_model(MODEL, train.image_shape, device=torch.device("cpu"), per_user_training=True,
                            private_run=True)[0]
    names = [k for k, p in model.named_parameters() if p.requires_grad]  # the server's parameters, in order

    def flat(state):
        return torch.cat([state[k].flatten() for k in names])

    models = starts + [flat(ckpt["backbone"])]  # w_0 .. w_4: the checkpoint keeps the server model
    ema = [models[0]]
    for w in models[1:]:
        ema.append(d * ema[-1] + (1 - d) * w)
    # evaluations at rounds 0, 2 and 4 (eval_every 2) see the average, not the server model
    assert len(evaluated) == 3
    for got, r in zip(evaluated, (0, 2, 4)):
        assert torch.allclose(got, ema[r], atol=1e-6), r
    assert not torch.allclose(ema[-1], models[-1], atol=1e-4)
    assert torch.allclose(ckpt["server_ema"], ema[-1], atol=1e-6)
    assert torch.allclose(flat(released), ema[-1], atol=1e-6)  # the artifact: the average
    card = json.loads((tmp_path / "run" / "model_card.json").read_text())
    assert card["weight_average"]["decay"] == d and card["weight_average"]["kind"] == "ema"
    assert json.loads((tmp_path / "run" / "config.json").read_text())["federated"]["server_ema"] == d


def test_server_ema_out_of_range_is_refused():
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="server_ema must lie in"):
            FederatedConfig(server_ema=bad)


def test_public_negatives_resume_equals_uninterrupted_and_the_report_names_the_public_input(tmp_path, monkeypatch):
    """The heads' public rows are a function of the round's start model: a crash and
    resume reproduce the uninterrupted run; the run needs the public split exactly when
    the config asks for it, and its report says where the rows came from."""
    splits = make_tiny_dataset(num_users=30).split()
    train, ev, spec, cfg, run_a = setup(tmp_path, "a", loss="arcface", public_negatives=True, local_epochs=2)
    with pytest.raises(ValueError, match="needs a public dataset"):
        fed.train_federated(train, ev, MODEL, cfg, spec, run_a, noise_seed=7)
    # a dataset's source records where its inputs were (glyph fonts, an import's manifest): never released
    public = dataclasses.replace(splits.public, source={"kind": "glyphs", "fonts": [{"path": "/usr/share/f.ttf"}],
                                                        "manifest": "/home/curator/faces.csv"})
    rep_a = fed.train_federated(train, ev, MODEL, cfg, spec, run_a, noise_seed=7, public=public)
    assert rep_a["public_negatives"]["identities"] == len(set(splits.public.labels.tolist()))
    assert rep_a["public_negatives"]["source"] == {"kind": "glyphs"}
    assert "/usr/share" not in (tmp_path / "a" / "report.json").read_text()
    assert json.loads((tmp_path / "a" / "config.json").read_text())["federated"]["public_negatives"] is True
    _, _, _, _, run_b = setup(tmp_path, "b")
    real_train = fed.train_federated

    def with_public(*a, **k):
        return real_train(*a, public=splits.public, **k)

    monkeypatch.setattr(fed, "train_federated", with_public)
    assert crash_in_round_3(monkeypatch, train, ev, cfg, spec, run_b)["round"] == 2
    rep_b = with_public(train, ev, MODEL, cfg, spec, run_b, noise_seed=7, resume=True)
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for k in a["backbone"]:
        assert torch.equal(a["backbone"][k], b["backbone"][k]), k
    assert rep_a["final"] == rep_b["final"]
    # without the rows the same run trains another model
    _, _, _, plain, run_c = setup(tmp_path, "c", loss="arcface", local_epochs=2)
    real_train(train, ev, MODEL, plain, spec, run_c, noise_seed=7)
    c = load_checkpoint(tmp_path / "c")
    assert not all(torch.equal(a["backbone"][k], c["backbone"][k]) for k in a["backbone"])
    with pytest.raises(ValueError, match="public_negatives is off"):
        real_train(train, ev, MODEL, plain, spec, run_c, noise_seed=7, public=splits.public)


def test_norm_growth_stops_the_run_from_the_released_model_with_the_fixes(tmp_path, monkeypatch, capsys):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=6, z=0.5)
    real_step, calls = server_state.server_step, {"n": 0}

    def swamping_step(params, opt, noised, normaliser):
        calls["n"] += 1
        if calls["n"] == 3:  # round 3: a noised update that dwarfs the model (finite)
            noised = noised + 1e3 * torch.ones_like(noised)
        return real_step(params, opt, noised, normaliser)

    monkeypatch.setattr(server_state, "server_step", swamping_step)
    with pytest.raises(TrainingDiverged) as e:
        fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    msg = str(e.value)
    assert "round 3" in msg and "norm grew to" in msg and "--divergence-norm-ratio" in msg
    assert "--clients-per-round" in msg and "intact" in msg
    assert load_checkpoint(tmp_path / "run")["round"] == 2
    # the same run with the test off goes on to the end (a finite model)
    calls["n"] = 0
    _, _, spec_off, cfg_off, run_off = setup(tmp_path, "off", rounds=4, z=0.5, divergence_norm_ratio=0)
    assert fed.train_federated(train, ev, MODEL, cfg_off, spec_off, run_off, noise_seed=1)["rounds"] == 4
    assert "the model's norm is" in capsys.readouterr().err  # the public warning came first


def test_diverged_clients_are_told_to_the_curator_only(tmp_path, capsys):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=2, client_lr=1e12, divergence_norm_ratio=0)
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=1)
    err = capsys.readouterr().err
    line = [l for l in err.splitlines() if "local training diverged" in l or "exploding" in l]
    assert line, err
    assert line[0].startswith("[private diagnostic") and "--client-lr" in line[0]
    assert "exactly zero" not in err  # a diverged client is not blamed on the zero head
    out = tmp_path / "run"
    released = "".join(p.read_text() for p in (out / "metrics.jsonl", out / "report.json", out / "model_card.json"))
    assert "local training diverged" not in released and "nonfinite" not in released
    assert any(r.get("nonfinite_deltas") or 0 for r in diagnostics(out)) or "exploding" in line[0]


def test_an_interrupted_release_says_so_and_the_resume_names_its_round(tmp_path, monkeypatch, capsys):
    train, ev, spec, cfg, run = setup(tmp_path, rounds=4)
    crash_in_round_3(monkeypatch, train, ev, cfg, spec, run)  # the round-2 checkpoint and its release
    card = json.loads((tmp_path / "run" / "model_card.json").read_text())
    assert card["rounds"] == 2 and card["status"] == "incomplete: stopped at round 2 of 4"
    capsys.readouterr()
    fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=7, resume=True)
    assert "from its checkpoint at round 2 of 4" in capsys.readouterr().out
    assert json.loads((tmp_path / "run" / "model_card.json").read_text())["status"] == "complete"

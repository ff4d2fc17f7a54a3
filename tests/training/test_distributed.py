"""torch.distributed training (2 processes, gloo on loopback) against one process.

Every test starts real processes (``tests/training/dist_ranks.py``: forked from a server
that imported torch and dpemb once, 3-5 s a test on 2 cores after the first) or real
torchrun (the restart, about 30 s); DP-FTRL and 1 -> 2 resume run in ``make test-slow``:
the same model, epsilon and metrics as one process; noise drawn once per round whatever
the world size (and a planted per-rank draw rejected); resume across world sizes; a
killed rank stops the job with a clear error and an intact checkpoint to resume from.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.utils import parameters_to_vector

import dpemb.training.federated as fed
from dpemb.training.checkpoint import load_checkpoint
from dpemb.training.executor import DistributedEnv, assign_clients, collective_backend, rank_device
from dpemb.training.modelinit import build_model
from tests.training.dist_ranks import launch
from tests.training.test_federated import MODEL, crash_in_round_3, diagnostics, setup

ATOL = 1e-5  # float summation order of the partial sums


def same_model(a_dir, b_dir, atol=ATOL) -> None:
    a, b = load_checkpoint(a_dir), load_checkpoint(b_dir)
    assert a["round"] == b["round"]
    for k in a["backbone"]:
        assert torch.allclose(a["backbone"][k], b["backbone"][k], atol=atol, rtol=0), k
    if a["global_head"] is not None:
        assert torch.allclose(a["global_head"], b["global_head"], atol=atol, rtol=0)


def test_assign_clients_balances_examples_deterministically():
    parts = assign_clients([5, 0, 9, 1, 4, 4], 2)
    # largest first onto the least-loaded rank: 9 | 5, 4 | 9+4, 1 | 5+4+1; the empty client nowhere
    assert parts == [[2, 5], [0, 3, 4]]
    assert assign_clients([3, 3], 4) == [[0], [1], [], []]
    assert sorted(i for p in assign_clients(list(range(1, 30)), 3) for i in p) == list(range(29))



def test_a_cuda_device_without_index_gets_one(monkeypatch):
    """torch.cuda.set_device refuses a plain 'cuda' (found on an H100: `dpemb train --device
    cuda` failed there); the rank's device always carries an index."""
    chosen = []

    def set_device(d):
        if torch.device(d).index is None:
            raise ValueError("Expected a torch.device with a specified index")
        chosen.append(torch.device(d))

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert rank_device(torch.device("cuda"), None) == torch.device("cuda", 0)
    assert rank_device(torch.device("cuda"), DistributedEnv(3, 4, 3, 4)) == torch.device("cuda", 1)
    assert rank_device(torch.device("cuda", 1), DistributedEnv(0, 4, 0, 4)) == torch.device("cuda", 1)
    assert chosen == [torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cuda", 1)]
    assert rank_device(torch.device("cpu"), None) == torch.device("cpu")


def test_ranks_sharing_a_gpu_use_gloo_and_environment_is_read(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert collective_backend(cpu, DistributedEnv(0, 2, 0, 2)) == "gloo"
    assert collective_backend(gpu, DistributedEnv(0, 4, 0, 2)) == "nccl"  # one GPU per rank on this node
    assert collective_backend(gpu, DistributedEnv(0, 4, 0, 4)) == "gloo"  # two ranks per GPU: NCCL refuses
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert DistributedEnv.from_environ() == DistributedEnv(5, 8, 1, 4)
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert DistributedEnv.from_environ() is None

@pytest.mark.parametrize("algorithm", ["dp-fedemb", "dp-fedavg",  # (DP-FedAvg: the global head too)
                                       pytest.param("dp-ftrl-fedemb", marks=pytest.mark.slow),
                                       pytest.param(("dp-ftrl-fedemb", "blt"), marks=pytest.mark.slow,
                                                    id="dp-ftrl-fedemb-blt")])  # correlated noise drawn once
def test_two_processes_train_the_same_model_as_one(tmp_path, algorithm):
    algorithm, kw = (algorithm[0], dict(bands=2, mechanism=algorithm[1])) if isinstance(algorithm, tuple) \
        else (algorithm, {})
    train, ev, spec, cfg, run = setup(tmp_path, "one", algorithm=algorithm, **kw)
    rep1 = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=7)
    codes, out = launch(2, tmp_path, "two", algorithm=algorithm, **kw)
    assert codes == [0, 0], out.get("traceback")
    rep2 = out["report"]
    same_model(tmp_path / "one", tmp_path / "two")
    assert rep2["privacy"]["epsilon_rdp"] == rep1["privacy"]["epsilon_rdp"]
    for k, v in rep1["final"].items():
        assert rep2["final"][k] == pytest.approx(v, abs=1e-3), k
    assert rep2["rounds"] == rep1["rounds"] == spec.rounds
    for name, ranks in (("one", 1), ("two", 2)):  # each rank's time on its clients, in the private file
        times = [r["client_seconds"] for r in diagnostics(tmp_path / name)]
        assert len(times) == spec.rounds and all(len(t) == ranks and min(t) > 0 for t in times), times


def _noise_of_one_round(tmp_path, name, plant=None) -> tuple[torch.Tensor, float]:
    """One round with z = 100 (the clipped sum is negligible beside the noise), server SGD
    at lr 1 without momentum: (start - end) x M is the noise on the sum."""
    codes, out = launch(2, tmp_path, name, rounds=1, z=100.0, server_lr=1.0, server_momentum=0.0,
                         divergence_norm_ratio=0, plant=plant)  # a noise-only round: the norm stop is off
    assert codes == [0, 0], out.get("traceback")
    train, _, spec, _, _ = setup(tmp_path, "unused", rounds=1, z=100.0)
    torch.manual_seed(0)
    model, _ = build_model(MODEL, train.image_shape, per_user_training=True, private_run=True)
    start = parameters_to_vector([p for p in model.parameters() if p.requires_grad]).detach()
    end = torch.cat([v.flatten() for v in load_checkpoint(tmp_path / name)["backbone"].values()
                     if v.is_floating_point()])
    return (start - end) * spec.clients_per_round, spec.noise_multiplier * spec.sensitivity


def _variance_ratio_ok(noise: torch.Tensor, std: float) -> bool:
    """Sample variance / std^2 within 6 standard errors of 1 (chi-square, n entries)."""
    n = noise.numel()
    ratio = float(noise.double().var()) / std**2
    return abs(ratio - 1.0) < 6 * math.sqrt(2.0 / n)


def test_noise_is_added_once_per_round_whatever_the_world_size(tmp_path):
    noise, std = _noise_of_one_round(tmp_path, "once")
    assert noise.numel() > 5000
    assert _variance_ratio_ok(noise, std)
    assert not _variance_ratio_ok(noise, std * math.sqrt(2))  # the test tells the scales apart
    planted, _ = _noise_of_one_round(tmp_path, "twice", plant="noise_per_rank")
    assert not _variance_ratio_ok(planted, std)  # a second draw (on the worker) is caught
    assert _variance_ratio_ok(planted, std * math.sqrt(2))


@pytest.mark.slow
def test_resume_one_process_then_two_equals_uninterrupted(tmp_path, monkeypatch):
    train, ev, spec, cfg, run_a = setup(tmp_path, "a")
    fed.train_federated(train, ev, MODEL, cfg, spec, run_a, noise_seed=7)
    _, _, _, _, run_b = setup(tmp_path, "b")
    assert crash_in_round_3(monkeypatch, train, ev, cfg, spec, run_b)["round"] == 2
    codes, out = launch(2, tmp_path, "b", resume=True)
    assert codes == [0, 0], out.get("traceback")
    same_model(tmp_path / "a", tmp_path / "b")
    assert out["report"]["privacy"]["epsilon_rdp"] == load_checkpoint(tmp_path / "a")["model_card"]["privacy"][
        "epsilon_rdp"]


def test_killed_rank_stops_with_a_clear_error_then_resumes_in_one_process(tmp_path):
    codes, out = launch(2, tmp_path, "k", plant="kill_rank1_round3")
    assert codes[1] == 3 and codes[0] != 0
    err = out["error"]
    assert err.startswith("RankFailure") and "round 3" in err and "is intact" in err and "--resume auto" in err
    ckpt = load_checkpoint(tmp_path / "k")
    assert ckpt["round"] == 2  # the round-2 checkpoint survived, nothing of round 3 was written
    # 2 -> 1 process: resume and compare with an uninterrupted single-process run
    train, ev, spec, cfg, run = setup(tmp_path, "k")
    rep = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=7, resume="auto")
    assert rep["rounds"] == spec.rounds
    _, _, _, _, run_a = setup(tmp_path, "ref")
    fed.train_federated(train, ev, MODEL, cfg, spec, run_a, noise_seed=7)
    same_model(tmp_path / "ref", tmp_path / "k")


def test_torchrun_restarts_a_job_whose_rank_died_and_it_finishes_from_the_checkpoint(tmp_path, tiny_data_dir):
    """Real torchrun, --max-restarts 3: rank 1 dies in round 3 of the first attempt; torchrun
    restarts both ranks and --resume auto continues from the round-2 checkpoint to the same
    model as an uninterrupted run (the same flags in one plain process).

    The restarted attempt joins through a store prefixed by the attempt
    (``executor.attempt_store``). Before, it read addresses of the dead attempt's ranks
    and failed in gloo's connectFullMesh ("Connection refused") in 3 of 4 tries, once
    hanging; so the first restart must now succeed, with no connectFullMesh error."""
    import subprocess
    import sys
    from pathlib import Path

    from dpemb.cli.main import main as dpemb
    from tests.conftest import subprocess_env
    from tests.training.dist_ranks import free_port

    flags = ["train", "--data", tiny_data_dir, "--algorithm", "dp-fedemb", "--backbone", "lenet",
             "--embedding-dim", "16", "--clients-per-round", "3", "--users-per-client", "2", "--rounds", "4",
             "--noise-multiplier", "0.5", "--noise-seed", "7", "--local-batch-size", "4", "--eval-every", "2",
             "--checkpoint-interval", "0", "--no-progress", "--resume", "auto", "--device", "cpu"]
    script = Path(__file__).with_name("torchrun_faulty.py")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "3",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--rdzv-id", "restart-test",
         str(script), *flags,
         "--out", str(tmp_path / "restarted")],
        capture_output=True, text=True, timeout=150, cwd=root,
        env=subprocess_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RankFailure" in done.stderr or "exitcode" in done.stderr  # the first attempt failed
    assert "connectFullMesh" not in done.stderr  # the restart joined at once
    assert dpemb(flags + ["--out", str(tmp_path / "plain")]) == 0
    same_model(tmp_path / "plain", tmp_path / "restarted")
    metrics = (tmp_path / "restarted" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 5  # round 0 + rounds 1-4, the failed round 3 not recorded twice

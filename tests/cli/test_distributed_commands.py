"""``dpemb embed / eval / features`` under torchrun (2 processes, gloo on loopback) give
what one process gives; the other commands refuse to run under torchrun."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpemb.cli.main import main as dpemb
from dpemb.data.dataset import UserDataset
from dpemb.data.rows import RowView
from dpemb.training.shards import RowShards
from tests.conftest import make_tiny_dataset, subprocess_env
from tests.training.dist_ranks import free_port

ROOT = Path(__file__).resolve().parents[2]


def torchrun(args: list[str], procs: int = 2) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs),
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "-m", "dpemb", *args],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
        env=subprocess_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("dist_cmds")
    make_tiny_dataset(num_users=30).save(d / "data")
    assert dpemb(["train", "--data", str(d / "data"), "--out", str(d / "model"), "--algorithm", "centralized",
                  "--steps", "3", "--batch-size", "8", "--embedding-dim", "16", "--no-progress",
                  "--device", "cpu"]) == 0
    return d


def test_embed_under_torchrun_equals_one_process(setup, tmp_path):
    data, model = str(setup / "data"), str(setup / "model")
    assert dpemb(["embed", model, data, "--out", str(tmp_path / "one.npy"), "--device", "cpu"]) == 0
    run = torchrun(["embed", model, data, "--out", str(tmp_path / "two.npy"), "--device", "cpu"])
    assert run.stdout.count("wrote") == 1  # rank 0 speaks for the job
    one, two = np.load(tmp_path / "one.npy"), np.load(tmp_path / "two.npy")
    assert one.shape == two.shape and one.shape[0] == UserDataset.load(data).num_examples
    np.testing.assert_allclose(two, one, atol=1e-5)
    assert (tmp_path / "two.txt").read_text() == (tmp_path / "one.txt").read_text()
    # image files: 5 files over 2 ranks at batch 2 (uneven shares, a short last batch)
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    rng = np.random.default_rng(0)
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (28, 28), dtype=np.uint8)).save(imgs / f"{i}.png")
    assert dpemb(["embed", model, str(imgs), "--out", str(tmp_path / "f1.npy"), "--batch-size", "2",
                  "--device", "cpu"]) == 0
    torchrun(["embed", model, str(imgs), "--out", str(tmp_path / "f2.npy"), "--batch-size", "2", "--device", "cpu"])
    np.testing.assert_allclose(np.load(tmp_path / "f2.npy"), np.load(tmp_path / "f1.npy"), atol=1e-5)


@pytest.mark.slow  # make test keeps embed's torchrun case: the same row sharding (training.shards)
def test_eval_under_torchrun_equals_one_process(setup, tmp_path, capsys):
    flags = ["eval", str(setup / "model"), "--data", str(setup / "data"), "--json", "--device", "cpu"]
    assert dpemb(flags) == 0
    one = json.loads(capsys.readouterr().out)
    two = json.loads(torchrun(flags).stdout)  # only rank 0 printed: one JSON document
    assert two["eval_positive_pairs"] == one["eval_positive_pairs"] > 0
    for k in ("recall_at_far_0.001", "roc_auc", "precision_at_1", "map_at_r"):
        assert two[k] == pytest.approx(one[k], abs=1e-6), k
    # several models: every rank embeds its share of each in turn, rank 0 scores each
    shutil.copytree(setup / "model", tmp_path / "again")
    both = json.loads(torchrun([*flags, "--compare", str(tmp_path / "again")]).stdout)["models"]
    assert len(both) == 2
    for m in both:
        assert m["recall_at_far_0.001"] == pytest.approx(one["recall_at_far_0.001"], abs=1e-6)


@pytest.mark.slow  # as eval's
def test_features_under_torchrun_equal_one_process(setup, tmp_path):
    from dpemb.transfer.features import load_features

    flags = ["features", "--data", f"{setup / 'data'}:train", "--backbone-model", str(setup / "model"),
             "--device", "cpu", "--quiet", "--batch-size", "16"]
    assert dpemb([*flags, "--out", str(tmp_path / "one.npz")]) == 0
    torchrun([*flags, "--out", str(tmp_path / "two.npz")], procs=3)
    one, two = load_features(tmp_path / "one.npz"), load_features(tmp_path / "two.npz")
    np.testing.assert_allclose(two.features, one.features, atol=1e-5)
    assert (two.labels == one.labels).all() and (two.users == one.users).all()


def test_commands_that_run_in_one_process_refuse_torchrun(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(SystemExit) as e:
        dpemb(["account", "--population", "1000", "--clients-per-round", "10", "--rounds", "5",
               "--noise-multiplier", "1"])
    assert e.value.code == 2
    assert "runs in one process; start it without torchrun" in capsys.readouterr().err


def test_row_shards_cover_every_row_once_and_stay_lazy(tmp_path):
    for world in (1, 2, 3, 7):
        spans = [RowShards(r, world).span(10) for r in range(world)]
        assert [i for lo, hi in spans for i in range(lo, hi)] == list(range(10))
    arr = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.uint8, shape=(10, 2, 2, 1))
    arr[:] = np.arange(10)[:, None, None, None]
    arr.flush()
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    share = RowShards(1, 3).share_of(mm)
    assert isinstance(share, RowView) and np.asarray(share)[:, 0, 0, 0].tolist() == [3, 4, 5]
    assert RowShards(2, 3).share_of(np.asarray(mm))[:, 0, 0, 0].tolist() == [6, 7, 8, 9]

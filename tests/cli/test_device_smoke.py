"""Every computing command on every device present (issue #12.3).

On the CPU always; on CUDA too whenever a GPU is present (the same code path). Trains
each algorithm a few rounds, evaluates, embeds, extracts features and fits a DP
classifier, each with --device. Also: --device names that do not exist are a usage
error, and a CPU generator never meets a GPU tensor (Glorot heads)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpemb.cli.main import main as dpemb
from tests.conftest import make_tiny_dataset

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TINY = ["--embedding-dim", "16", "--no-progress", "--eval-every", "2"]
FED = ["--rounds", "2", "--clients-per-round", "3", "--users-per-client", "2", "--local-batch-size", "4",
       "--noise-multiplier", "0.5", "--clip-norm", "0.5", "--noise-seed", "1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("smoke")
    make_tiny_dataset(num_users=30).save(d / "data")
    return d


@pytest.mark.parametrize("device", DEVICES)
def test_every_command_runs_on_device(data, tmp_path, device, capsys):
    d = str(data / "data")
    runs = {}
    assert dpemb(["train", "--data", d, "--out", str(tmp_path / "pub"), "--algorithm", "centralized",
                  "--train-split", "public", "--steps", "4", "--batch-size", "8", "--device", device, *TINY]) == 0
    for algo, extra in [("dp-fedemb", ["--head-init", "glorot"]), ("dp-fedavg", []), ("dp-ftrl-fedemb", [])]:
        out = tmp_path / algo
        assert dpemb(["train", "--data", d, "--out", str(out), "--algorithm", algo, "--device", device,
                      "--init", str(tmp_path / "pub"), *FED, *TINY, *extra]) == 0, algo
        rep = json.loads((out / "report.json").read_text())
        assert rep["rounds"] == 2 and np.isfinite(rep["final"]["recall_at_far_0.001"])
        runs[algo] = out
    model = str(runs["dp-fedemb"])
    assert dpemb(["eval", model, "--data", d, "--device", device, "--json"]) == 0
    assert dpemb(["embed", model, d, "--out", str(tmp_path / "e.npy"), "--device", device]) == 0
    emb = np.load(tmp_path / "e.npy")
    assert emb.shape[1] == 16 and np.isfinite(emb).all()
    assert dpemb(["features", "--data", f"{d}:train", "--backbone-model", model, "--device", device,
                  "--out", str(tmp_path / "train.npz"), "--quiet"]) == 0
    # the 3136-d LeNet features make DP-LS's eigendecompositions slow on 2 CPU cores
    methods = ("dp-ls", "dp-fc", "dp-sgd") if device != "cpu" else ("dp-sgd",)
    for method in methods:  # a smoke test: scored on its own training features
        assert dpemb(["transfer", "--train", str(tmp_path / "train.npz"), "--test", str(tmp_path / "train.npz"),
                      "--method", method, "--epsilon", "1", "--device", device]) == 0


def test_unknown_or_absent_device_is_a_usage_error(data, tmp_path, capsys):
    d = str(data / "data")
    base = ["train", "--data", d, "--out", str(tmp_path / "x"), "--algorithm", "centralized", "--steps", "2"]
    with pytest.raises(SystemExit) as e:
        dpemb(base + ["--device", "tpu"])
    assert e.value.code == 2 and "device" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as e:
            dpemb(base + ["--device", "cuda"])
        assert e.value.code == 2 and "no CUDA device" in capsys.readouterr().err

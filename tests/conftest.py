"""Shared fixtures: tiny synthetic user-partitioned datasets (no fonts, no downloads)."""

from __future__ import annotations

import os
from pathlib import Path

import dpemb  # noqa: F401  (before torch: dpemb sets the OpenMP wait policy, dpemb.openmp)
import numpy as np
import pytest
import torch

from dpemb.data.dataset import UserDataset

if torch.cuda.is_available():
    # Tests compare computations to float32 tolerances (batched vs one client at a time,
    # 2 processes vs 1). cuDNN convolutions default to TF32, which rounds at about 1e-3
    # (measured: batched LeNet updates 5e-3 apart on an H100, 8e-6 on CPU).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    # Resume-equals-uninterrupted and 2-vs-1-process tests compare runs: deterministic
    # kernels where CUDA has them (cuBLAS needs its workspace fixed before first use).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)

# Under pytest-xdist every worker starts torch's default threads (one per core). `make test`
# runs 2 workers: on 2 cores that is 4 threads, which sleep when idle (dpemb.openmp), and
# the suite took 263 s against 260 s with 1 thread per worker, so the workers keep the
# default threads that users run with. Many workers on many cores (15 x 16 = 240 threads
# on the GPU machine hit the timeouts) are held to cores // workers threads each.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers * torch.get_num_threads() > 2 * (os.cpu_count() or 1):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _workers))


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a test's child process (torchrun, a fresh interpreter): this
    checkout's src/ and root put first on PYTHONPATH, the caller's PYTHONPATH kept after
    them (a machine whose dependencies live on PYTHONPATH still finds them)."""
    root = Path(__file__).resolve().parents[1]
    path = os.pathsep.join([str(root / "src"), str(root)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return {**os.environ, "PYTHONPATH": path, **extra}


def make_tiny_dataset(
    num_users: int = 24, num_labels: int = 12, per_user: int = 6, size: int = 28, seed: int = 0
) -> UserDataset:
    """Each label has a fixed random prototype; images are noisy copies, so a model can
    learn something in a few steps. Labels 0..num_labels-4 train, the last 3 evaluate.
    Users 0..num_users-1 write any label (users 0 and 1 are public); num_users // 4 more
    test users (drawn from their own stream) write only the 3 evaluation labels."""
    rng = np.random.default_rng(seed)
    protos = rng.integers(0, 256, size=(num_labels, size, size, 1))
    users, labels, images = [], [], []
    n_eval = max(2, num_users // 4)
    eval_rng = np.random.default_rng([seed, 1])
    for u in range(num_users + n_eval):
        r = rng if u < num_users else eval_rng
        for i in range(per_user):
            lab = int(r.integers(num_labels)) if u < num_users else int(r.integers(num_labels - 3, num_labels))
            img = np.clip(protos[lab] + r.normal(0, 40, protos[lab].shape), 0, 255)
            users.append(u)
            labels.append(lab)
            images.append(img.astype(np.uint8))
    ds = UserDataset.from_arrays(np.stack(images), np.array(labels), np.array(users),
                                 label_names=[f"c{i}" for i in range(num_labels)],
                                 user_names=[f"u{i}" for i in range(num_users + n_eval)])
    ds.eval_labels = list(range(num_labels - 3, num_labels))
    ds.eval_users = list(range(num_users, num_users + n_eval))
    ds.public_users = [0, 1]
    return ds


@pytest.fixture
def tiny_dataset() -> UserDataset:
    return make_tiny_dataset()


@pytest.fixture(scope="module")
def tiny_data_dir(tmp_path_factory) -> str:
    """A 30-user ``make_tiny_dataset`` saved once per test module (for the CLI)."""
    path = tmp_path_factory.mktemp("tiny") / "ds"
    make_tiny_dataset(num_users=30).save(path)
    return str(path)


def spy_standard_normal(monkeypatch, module) -> list[bool]:
    """Record the ``secure`` flag of every ``standard_normal`` draw made through
    ``module`` (which imported it), still drawing the real noise."""
    calls: list[bool] = []
    real = module.standard_normal

    def spy(like, generator, *, secure=False):
        calls.append(secure)
        return real(like, generator, secure=secure)

    monkeypatch.setattr(module, "standard_normal", spy)
    return calls

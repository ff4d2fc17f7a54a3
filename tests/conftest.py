"""Shared fixtures: tiny synthetic user-partitioned datasets (no fonts, no downloads)."""

from __future__ import annotations

import numpy as np
import pytest

from dpemb.data.dataset import UserDataset


def make_tiny_dataset(
    num_users: int = 24, num_labels: int = 12, per_user: int = 6, size: int = 28, seed: int = 0
) -> UserDataset:
    """Each label has a fixed random prototype; images are noisy copies, so a model can
    learn something in a few steps. Labels 0..num_labels-4 train, the last 3 evaluate."""
    rng = np.random.default_rng(seed)
    protos = rng.integers(0, 256, size=(num_labels, size, size, 1))
    users, labels, images = [], [], []
    for u in range(num_users):
        for i in range(per_user):
            lab = int(rng.integers(num_labels))
            img = np.clip(protos[lab] + rng.normal(0, 40, protos[lab].shape), 0, 255)
            users.append(u)
            labels.append(lab)
            images.append(img.astype(np.uint8))
    ds = UserDataset.from_arrays(np.stack(images), np.array(labels), np.array(users),
                                 label_names=[f"c{i}" for i in range(num_labels)],
                                 user_names=[f"u{i}" for i in range(num_users)])
    ds.eval_labels = list(range(num_labels - 3, num_labels))
    ds.public_users = [0, 1]
    return ds


@pytest.fixture
def tiny_dataset() -> UserDataset:
    return make_tiny_dataset()

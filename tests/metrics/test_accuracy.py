from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.data.dataset import DataError
from dpemb.metrics import top1_accuracy


def test_matches_numpy_and_breaks_ties_to_first_class():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(200, 7))
    labels = rng.integers(0, 7, 200)
    assert top1_accuracy(logits, labels) == pytest.approx(np.mean(logits.argmax(1) == labels))
    assert top1_accuracy(torch.from_numpy(logits), torch.from_numpy(labels)) == pytest.approx(
        np.mean(logits.argmax(1) == labels)
    )
    tied = np.zeros((3, 4))
    assert top1_accuracy(tied, np.array([0, 0, 1])) == pytest.approx(2 / 3)


def test_errors_name_the_row():
    logits = np.zeros((4, 3))
    with pytest.raises(DataError, match="row 2 is 3"):
        top1_accuracy(logits, np.array([0, 1, 3, 0]))
    logits[1, 2] = np.nan
    with pytest.raises(DataError, match="row 1"):
        top1_accuracy(logits, np.array([0, 1, 2, 0]))
    with pytest.raises(DataError, match="integers"):
        top1_accuracy(np.zeros((2, 2)), np.array([0.0, 1.0]))
    with pytest.raises(DataError, match="shape"):
        top1_accuracy(np.zeros((2, 2)), np.array([0, 1, 1]))

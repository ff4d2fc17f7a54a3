"""The reference code's in-batch Recall@FAR: a rough APPROXIMATION, for comparison only.

The public DP-FedEmb code's ``PairwiseRecallAtFAR``: pairs only within consecutive batches
of 256, score ``(1 + cos) / 2``, 200 fixed thresholds, largest recall with specificity >=
``1 - far`` (steps and bias: docs/EVALUATION.md, "dpemb.metrics.in_batch"). Use
:func:`dpemb.metrics.verification.verification_metrics` for the exact value; this exists
to compare with the paper's "approx" numbers. Computed in float64 (the reference: float32).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dpemb.metrics.verification import prepare_inputs

__all__ = ["in_batch_recall_at_far", "reference_thresholds"]


def reference_thresholds(num_thresholds: int = 200) -> np.ndarray:
    """Keras ``SensitivitySpecificityBase`` thresholds on the (1 + cos)/2 scale."""
    if num_thresholds < 1:
        raise ValueError(f"num_thresholds must be >= 1; got {num_thresholds}")
    if num_thresholds == 1:
        return np.array([0.5])
    inner = [(i + 1) * 1.0 / (num_thresholds - 1) for i in range(num_thresholds - 2)]
    return np.array([0.0] + inner + [1.0])


def in_batch_recall_at_far(
    embeddings: Any,
    labels: Any,
    *,
    far: float = 1e-3,
    batch_size: int = 256,
    num_thresholds: int = 200,
) -> float:
    """The reference's in-batch Recall@FAR estimate (an approximation; see module doc).

    The result depends on the order of the examples (batches are consecutive slices).
    Returns 0.0 when no grid threshold meets the FAR (as the reference does).
    """
    far = float(far)
    if not 0.0 < far < 1.0:
        raise ValueError(f"far must lie in (0, 1); got {far}")
    if int(batch_size) < 2:
        raise ValueError(f"batch_size must be >= 2; got {batch_size}")
    thresholds = reference_thresholds(int(num_thresholds))
    x, y = prepare_inputs(embeddings, labels, normalize=True, device="cpu")
    n = x.shape[0]
    tp = np.zeros(thresholds.size, dtype=np.int64)
    fp = np.zeros_like(tp)
    n_pos = n_neg = 0
    with torch.no_grad():
        for a in range(0, n, int(batch_size)):
            xb, yb = x[a : a + int(batch_size)], y[a : a + int(batch_size)]
            sim = ((1.0 + xb @ xb.T) / 2.0).numpy()
            same = (yb[:, None] == yb[None, :]).numpy()
            lower = np.tril(np.ones(same.shape, dtype=bool), k=-1)
            pos = np.sort(sim[lower & same])
            neg = np.sort(sim[lower & ~same])
            # number of scores strictly above each threshold
            tp += pos.size - np.searchsorted(pos, thresholds, side="right")
            fp += neg.size - np.searchsorted(neg, thresholds, side="right")
            n_pos += pos.size
            n_neg += neg.size
    # TN + FP = n_neg and TP + FN = n_pos at every threshold (0 when there are none)
    specificity = (n_neg - fp) / n_neg if n_neg else np.zeros(thresholds.size)
    sensitivity = tp / n_pos if n_pos else np.zeros(thresholds.size)
    feasible = specificity >= 1.0 - far
    if not feasible.any():
        return 0.0
    return float(sensitivity[feasible].max())

"""The LFW-style k-fold verification accuracy of a list of scored pairs.

The protocol, the threshold rule and what is reported: docs/EVALUATION.md, "What is
reported". A pair is predicted *same* when ``score >= threshold``; the threshold accepts
exactly the training pairs its cut point does (``+inf`` when none is accepted). The standard
deviation over folds is ``numpy.std``'s (ddof 0). Pure numpy; no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dpemb.data.dataset import DataError

__all__ = ["FoldAccuracy", "assign_folds", "best_threshold", "kfold_accuracy"]


@dataclass(frozen=True)
class FoldAccuracy:
    """Held-out accuracy and threshold of each fold, their mean and (ddof 0) std."""

    accuracies: tuple[float, ...]
    thresholds: tuple[float, ...]
    fold_sizes: tuple[int, ...]

    @property
    def mean(self) -> float:
        return float(np.mean(self.accuracies))

    @property
    def std(self) -> float:
        return float(np.std(self.accuracies))

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean,
            "std": self.std,
            "folds": len(self.accuracies),
            "accuracies": list(self.accuracies),
            "thresholds": [t if np.isfinite(t) else None for t in self.thresholds],
            "fold_sizes": list(self.fold_sizes),
            "definition": "threshold of each fold chosen on the other folds (max accuracy, "
                          "accept score >= threshold); mean and population std over folds",
        }


def assign_folds(same: Any, k: int = 10) -> np.ndarray:
    """Fold index (0..k-1) of each pair: genuine and impostor pairs dealt round robin
    separately, in list order. Deterministic; every fold gets pairs when there are at
    least k of each kind."""
    m = np.asarray(same, dtype=bool)
    if k < 2:
        raise ValueError(f"k must be at least 2; got {k}")
    folds = np.empty(m.size, dtype=np.int64)
    for kind in (True, False):
        idx = np.flatnonzero(m == kind)
        folds[idx] = np.arange(idx.size) % k
    return folds


def best_threshold(scores: np.ndarray, same: np.ndarray) -> float:
    """The threshold maximising the accuracy of ``score >= t`` on these pairs (the
    lowest best cut point, moved halfway down to the next lower score; see the module
    docstring)."""
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(same, dtype=bool)
    u, inv = np.unique(s, return_inverse=True)
    pos = np.bincount(inv, weights=m, minlength=u.size)
    neg = np.bincount(inv, weights=~m, minlength=u.size)
    # correct(cut at u_i) = genuine pairs >= u_i + impostor pairs < u_i; cut at +inf last
    pos_ge = np.concatenate([np.cumsum(pos[::-1])[::-1], [0.0]])
    neg_lt = np.concatenate([[0.0], np.cumsum(neg)])
    i = int(np.argmax(pos_ge + neg_lt))  # argmax: the first (lowest) maximum
    if i == u.size:
        return float("inf")
    return float(u[0]) if i == 0 else float((u[i - 1] + u[i]) / 2)


def kfold_accuracy(scores: Any, same: Any, folds: Any) -> FoldAccuracy:
    """k-fold accuracy: each fold's threshold chosen on all the other folds.

    ``folds`` holds a fold label per pair (any integers; k = the number of distinct
    labels, at least 2). Raises :class:`DataError` when the lengths differ, a score is
    not finite, or there are fewer than 2 folds.
    """
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(same, dtype=bool)
    f = np.asarray(folds)
    if s.ndim != 1 or m.shape != s.shape or f.shape != s.shape:
        raise DataError(f"scores, same and folds must be 1-D of one length; got {s.shape}, {m.shape}, {f.shape}")
    if not np.isfinite(s).all():
        raise DataError(f"pair {int(np.flatnonzero(~np.isfinite(s))[0])} has a non-finite score")
    labels = np.unique(f)
    if labels.size < 2:
        raise DataError(f"k-fold accuracy needs at least 2 folds; got {labels.size}")
    accs, ths, sizes = [], [], []
    for fold in labels:
        test = f == fold
        t = best_threshold(s[~test], m[~test])
        accs.append(float(np.mean((s[test] >= t) == m[test])))
        ths.append(t)
        sizes.append(int(test.sum()))
    return FoldAccuracy(tuple(accs), tuple(ths), tuple(sizes))

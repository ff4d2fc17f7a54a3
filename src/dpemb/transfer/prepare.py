"""Per-example feature clipping and per-unit weights: the bound every release rests on.

After ``prepare_features`` every row has L2 norm <= C (``clip_norm``) and the weights of one
unit sum to at most 1 (``unit="example"``: ``w_i = 1``; ``unit="user"``: ``w_i = 1 / m_u``
for each of user u's ``m_u`` rows), so every released weighted sum ``sum_i w_i f(x_i, y_i)``
with ``||f|| <= s`` moves by at most ``s`` when one unit is added or removed; a user's
weights depend only on that user's own rows (docs/TRANSFER.md, "Units and weights").
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from dpemb.data.dataset import DataError

UNITS: tuple[str, ...] = ("example", "user")
DTYPE = torch.float64


def transform_features(
    x: np.ndarray | Tensor, clip_norm: float, normalize: bool, *, source: str | None = None
) -> tuple[Tensor, int]:
    """Rows -> float64 rows of norm <= ``clip_norm``; also the number of rows clipped.

    ``normalize``: every non-zero row is scaled to norm exactly ``clip_norm`` (the
    papers' "normalise then scale"); otherwise rows longer than ``clip_norm`` are
    scaled down to it. All-zero rows stay zero. Applied identically to test features
    (that is not a privacy matter, only consistency). Errors name ``source``.
    """
    where = f"{source}: " if source else ""
    if not (clip_norm > 0 and np.isfinite(clip_norm)):
        raise ValueError(f"clip_norm must be a positive finite number, got {clip_norm}")
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, Tensor) else x).to(DTYPE)
    if t.ndim != 2:
        raise DataError(f"{where}features must be (N, d), got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        bad = int(torch.nonzero(~torch.isfinite(t).all(dim=1))[0, 0])
        raise DataError(f"{where}feature row {bad} is not finite; re-extract the features or drop that row")
    norms = torch.linalg.vector_norm(t, dim=1)
    clipped = int((norms > clip_norm).sum())
    if normalize:
        scale = torch.where(norms > 0, clip_norm / norms.clamp_min(1e-300), torch.zeros_like(norms))
    else:
        scale = torch.clamp(clip_norm / norms.clamp_min(1e-300), max=1.0)
    out = t * scale.unsqueeze(1)
    # guard against rounding: never exceed the bound the sensitivity rests on
    over = torch.linalg.vector_norm(out, dim=1) > clip_norm
    if bool(over.any()):
        out[over] *= clip_norm / torch.linalg.vector_norm(out[over], dim=1, keepdim=True) * (1 - 1e-12)
    return out, clipped


@dataclass(frozen=True, eq=False)
class PreparedFeatures:
    """Clipped float64 features, labels and per-row weights (see the module docstring)."""

    x: Tensor  # float64 (N, d), every row norm <= clip_norm
    labels: Tensor  # int64 (N,)
    weights: Tensor  # float64 (N,), per unit sum <= 1
    num_classes: int
    clip_norm: float
    normalize: bool
    unit: str
    num_units: int
    num_clipped: int
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def num_examples(self) -> int:
        return int(self.x.shape[0])

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])

    def onehot(self) -> Tensor:
        """``(N, K)`` float64 one-hot labels."""
        y = torch.zeros(self.num_examples, self.num_classes, dtype=DTYPE, device=self.x.device)
        y[torch.arange(self.num_examples, device=self.x.device), self.labels] = 1.0
        return y

    def class_gramians(self) -> Tensor:
        """Exact ``A_l = sum_{y_i = l} w_i x_i x_i^T`` for every class, ``(K, d, d)``;
        computed once and cached (their sum is the Gramian ``G``). Never returned to a
        caller without noise by the DP methods (sensitivities: ``dpemb.transfer.statistics``);
        the cache only saves recomputation across a sweep.
        """
        if "class_gramians" not in self._cache:
            d = self.dim
            out = torch.zeros(self.num_classes, d, d, dtype=self.x.dtype, device=self.x.device)
            for l in range(self.num_classes):  # K is small; each term is one (n_l, d) matmul
                idx = torch.nonzero(self.labels == l).squeeze(1)
                if len(idx):
                    xl = self.x[idx]
                    out[l] = (xl * self.weights[idx].unsqueeze(1)).T @ xl
            self._cache["class_gramians"] = out
        return self._cache["class_gramians"]


def unit_weights(users: np.ndarray | None, n: int, unit: str) -> tuple[np.ndarray, int]:
    """Per-row weights and the number of units (see the module docstring)."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    if unit == "example":
        return np.ones(n), n
    if users is None:
        raise DataError(
            "unit='user' needs user ids, but the features carry none; extract them from "
            "a dataset with users (`dpemb features`) or use unit='example'"
        )
    users = np.asarray(users)
    if users.shape != (n,):
        raise DataError(f"users must have one entry per row ({n}), got shape {users.shape}")
    _, inverse, counts = np.unique(users, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse], len(counts)


def prepare_features(
    features: np.ndarray | Tensor,
    labels: np.ndarray | Tensor,
    *,
    num_classes: int,
    clip_norm: float,
    normalize: bool = True,
    unit: str = "example",
    users: np.ndarray | None = None,
    device: torch.device | str | None = None,
    source: str | None = None,
) -> PreparedFeatures:
    """Clip rows to ``clip_norm`` and attach per-unit weights (module docstring).

    Refuses (``DataError`` naming ``source``, e.g. the feature file) a label count that
    differs from the row count, non-finite features, labels outside ``0..K-1``, fewer
    than two classes, and a class without any training row. The last check reveals
    only that every class occurs in the training set, which the public label set is
    taken to state.
    """
    where = f"{source}: " if source else ""
    x, clipped = transform_features(features, clip_norm, normalize, source=source)
    lab = torch.as_tensor(np.asarray(labels)).to(torch.int64)
    n = x.shape[0]
    if lab.shape != (n,):
        raise DataError(f"{where}{n} feature rows but labels of shape {tuple(lab.shape)}; "
                        "re-create the feature file with `dpemb features`")
    if n == 0:
        raise DataError(f"{where}no training examples")
    if num_classes < 2:
        raise DataError(f"{where}only {num_classes} class; a classifier needs at least two "
                        "(extract features from a dataset with several labels)")
    if int(lab.min()) < 0 or int(lab.max()) >= num_classes:
        bad = int(torch.nonzero((lab < 0) | (lab >= num_classes))[0, 0])
        raise DataError(f"{where}row {bad}: label {int(lab[bad])} is outside 0..{num_classes - 1}")
    counts = torch.bincount(lab, minlength=num_classes)
    if bool((counts == 0).any()):
        empty = torch.nonzero(counts == 0).squeeze(1).tolist()
        raise DataError(
            f"{where}class(es) {', '.join(map(str, empty))} have no training example; train on a "
            "split that holds every class (e.g. a smaller --holdout) or drop those label names"
        )
    w, units = unit_weights(users, n, unit)
    dev = torch.device(device) if device is not None else x.device
    return PreparedFeatures(
        x=x.to(dev),
        labels=lab.to(dev),
        weights=torch.as_tensor(w, dtype=DTYPE, device=dev),
        num_classes=int(num_classes),
        clip_norm=float(clip_norm),
        normalize=bool(normalize),
        unit=unit,
        num_units=int(units),
        num_clipped=clipped,
    )


def with_absent_rows(prep: PreparedFeatures, absent: np.ndarray | Tensor) -> PreparedFeatures:
    """A copy of ``prep`` in which the rows marked in ``absent`` are REMOVED from every
    release while the public count of units (``num_units``, hence the default delta and
    DP-SGD's public divisor) stays as it was.

    Their weights become 0, which adds exactly nothing to any released weighted sum (module
    docstring); the example-level audit needs this (``dpemb.transfer.audit``). The
    per-class Gramian cache is NOT carried over (it holds the old weights).
    """
    mask = torch.as_tensor(np.asarray(absent), dtype=torch.bool, device=prep.weights.device)
    if mask.shape != prep.weights.shape:
        raise ValueError(f"absent must have one entry per row ({prep.num_examples}), got shape {tuple(mask.shape)}")
    weights = torch.where(mask, torch.zeros_like(prep.weights), prep.weights)
    return replace(prep, weights=weights, _cache={})

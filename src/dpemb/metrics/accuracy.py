"""Closed-set top-1 accuracy of a classification head."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dpemb.data.dataset import DataError

__all__ = ["top1_accuracy"]


def _to_tensor(a: Any, name: str) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a.detach()
    try:
        return torch.from_numpy(np.asarray(a))
    except TypeError as exc:
        raise DataError(f"{name} must be a numeric array: {exc}") from exc


def top1_accuracy(logits: Any, labels: Any) -> float:
    """Fraction of rows whose largest logit is at the true label index.

    ``logits`` is ``(N, C)`` (probabilities work too), ``labels`` ``(N,)`` integers in
    ``[0, C)``. Ties go to the smallest class index (``argmax``). Raises DataError
    naming the first bad row.
    """
    z = _to_tensor(logits, "logits")
    y = _to_tensor(labels, "labels")
    if z.ndim != 2 or z.shape[0] == 0 or z.shape[1] == 0:
        raise DataError(f"logits must have shape (N, C) with N, C >= 1; got {tuple(z.shape)}")
    if y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
        raise DataError(f"labels must be integers; got {y.dtype}")
    if y.shape != (z.shape[0],):
        raise DataError(f"labels must have shape ({z.shape[0]},); got {tuple(y.shape)}")
    y = y.to(device=z.device, dtype=torch.int64)
    bad = (y < 0) | (y >= z.shape[1])
    if bool(bad.any()):
        row = int(torch.nonzero(bad)[0])
        raise DataError(
            f"labels row {row} is {int(y[row])}, outside the {z.shape[1]} classes of the "
            "logits; closed-set accuracy needs the head's classes to match the labels"
        )
    if z.dtype.is_floating_point:
        finite = torch.isfinite(z).all(dim=1)
        if not bool(finite.all()):
            row = int(torch.nonzero(~finite)[0])
            raise DataError(f"logits row {row} has a non-finite value (NaN or inf)")
    return float((z.argmax(dim=1) == y).to(torch.float64).mean())

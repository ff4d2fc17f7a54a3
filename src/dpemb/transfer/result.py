"""A trained linear classifier on features, and its top-1 accuracy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass(frozen=True, eq=False)
class LinearModel:
    """Scores ``x W^T + b``: ``weights`` (K, d), ``bias`` (K,). Prediction: argmax."""

    weights: Tensor
    bias: Tensor

    def __post_init__(self) -> None:
        if self.weights.ndim != 2 or self.bias.shape != (self.weights.shape[0],):
            raise ValueError(
                f"weights must be (K, d) and bias (K,); got {tuple(self.weights.shape)} and "
                f"{tuple(self.bias.shape)}"
            )

    @classmethod
    def with_fixed_bias(cls, weights: Tensor, bias: float) -> "LinearModel":
        """``weights`` with the same public logit bias for every class."""
        return cls(weights=weights, bias=torch.full((weights.shape[0],), float(bias), dtype=weights.dtype,
                                                      device=weights.device))

    def scores(self, x: Tensor) -> Tensor:
        return x.to(self.weights.dtype) @ self.weights.T + self.bias.to(self.weights.dtype)

    def top1(self, x: Tensor, labels: np.ndarray | Tensor) -> float:
        """Fraction of rows whose highest score is their label."""
        lab = torch.as_tensor(np.asarray(labels)).to(torch.int64)
        if len(lab) == 0:
            raise ValueError("no examples to evaluate")
        return float((self.scores(x).argmax(dim=1).cpu() == lab).double().mean())

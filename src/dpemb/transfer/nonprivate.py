"""Non-private baseline: multinomial (softmax) logistic regression with a learned bias.

Full batch, L-BFGS (torch, float64), loss ``mean_i CE(x_i W^T + b, y_i) +
reg/2 ||W||^2`` (the bias is not regularised, as in scikit-learn). No privacy
guarantee whatsoever: it is the reference the DP methods are compared against, run
only when explicitly asked for (``--method non-private``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .prepare import PreparedFeatures
from .result import LinearModel


@dataclass(frozen=True)
class NonprivateParams:
    reg: float = 1e-6
    max_iter: int = 500
    tol: float = 1e-7

    def __post_init__(self) -> None:
        if not (self.reg >= 0 and math.isfinite(self.reg)):
            raise ValueError(f"non-private: reg must be >= 0, got {self.reg}")
        if not (isinstance(self.max_iter, int) and self.max_iter >= 1):
            raise ValueError(f"non-private: max_iter must be a positive integer, got {self.max_iter!r}")


def fit_nonprivate(prep: PreparedFeatures, params: NonprivateParams, progress: bool = False) -> LinearModel:
    """Fit softmax regression by L-BFGS (module docstring). Unit weights are ignored."""
    x, y = prep.x, prep.labels
    k, d = prep.num_classes, prep.dim
    w = torch.zeros(k, d, dtype=x.dtype, device=x.device, requires_grad=True)
    b = torch.zeros(k, dtype=x.dtype, device=x.device, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=params.max_iter, tolerance_grad=params.tol,
                            tolerance_change=1e-12, history_size=20, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(x @ w.T + b, y) + 0.5 * params.reg * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return LinearModel(weights=w.detach(), bias=b.detach())

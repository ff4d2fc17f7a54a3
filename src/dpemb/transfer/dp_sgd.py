"""DP-SGD / DP-Adam on the last layer: full-batch, one-vs-all sigmoid loss (Mehta et al.).

Start at ``W = 0`` with a FIXED logit bias (default -10: every class starts near
probability 0, matching the one-vs-all label prior). Each of the T steps:

1. every example's gradient ``g_i = r_i x_i^T`` (exact, rank one; see
   ``dpemb.transfer.statistics``) is clipped to Frobenius norm ``grad_clip``;
2. ``S = sum_i w_i clip(g_i)`` (K, d) is released with Gaussian noise of std
   ``z * grad_clip`` on every entry (sensitivity ``grad_clip`` per unit);
3. the noisy sum is divided by ``public_size`` (a public constant: by default the
   training-set size, which is then treated as public) and ``reg * W`` (weight
   decay, data-independent) is added; SGD or Adam takes a step.

Privacy: (epsilon, delta)-DP for add/remove of one unit, from the T-fold
composition of the Gaussian mechanism (full batch: no sampling amplification).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .budget import ReleaseMechanism
from .prepare import PreparedFeatures
from .result import LinearModel
from .statistics import clipped_gradient_sum

OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")


@dataclass(frozen=True)
class DpSgdParams:
    steps: int
    lr: float
    grad_clip: float
    bias: float = -10.0
    optimizer: str = "adam"
    reg: float = 0.0
    public_size: float | None = None
    momentum: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8

    def __post_init__(self) -> None:
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"dp-sgd: steps must be a positive integer, got {self.steps!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"dp-sgd: lr must be positive, got {self.lr}")
        if not (self.grad_clip > 0 and math.isfinite(self.grad_clip)):
            raise ValueError(f"dp-sgd: grad_clip must be positive and finite, got {self.grad_clip}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"dp-sgd: optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if not self.reg >= 0:
            raise ValueError(f"dp-sgd: reg must be >= 0, got {self.reg}")
        if self.public_size is not None and not (self.public_size > 0 and math.isfinite(self.public_size)):
            raise ValueError(f"dp-sgd: public_size must be positive and finite, got {self.public_size}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"dp-sgd: momentum must lie in [0, 1), got {self.momentum}")


def num_releases(steps: int) -> int:
    """One clipped gradient sum per step."""
    return steps


class _Optimizer:
    """SGD (with optional heavy-ball momentum) or Adam on one tensor; no autograd."""

    def __init__(self, params: DpSgdParams, like: torch.Tensor) -> None:
        self.p = params
        self.m = torch.zeros_like(like)
        self.v = torch.zeros_like(like)
        self.t = 0

    def step(self, w: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
        self.t += 1
        p = self.p
        if p.optimizer == "sgd":
            self.m = p.momentum * self.m + grad
            return w - p.lr * self.m
        b1, b2 = p.betas
        self.m = b1 * self.m + (1 - b1) * grad
        self.v = b2 * self.v + (1 - b2) * grad * grad
        mhat = self.m / (1 - b1**self.t)
        vhat = self.v / (1 - b2**self.t)
        return w - p.lr * mhat / (vhat.sqrt() + p.adam_eps)


def fit_dp_sgd(prep: PreparedFeatures, params: DpSgdParams, mech: ReleaseMechanism,
               progress: bool = False) -> LinearModel:
    """Fit full-batch DP-SGD / DP-Adam (module docstring)."""
    k, d = prep.num_classes, prep.dim
    w = torch.zeros(k, d, dtype=prep.x.dtype, device=prep.x.device)
    opt = _Optimizer(params, w)
    scale = 1.0 / float(params.public_size or prep.num_units)
    for t in tqdm(range(params.steps), desc="dp-sgd", disable=not progress, leave=False):
        noisy = mech.release(f"gradient[{t}]", clipped_gradient_sum(prep, w, params.bias, params.grad_clip),
                             kind="gradient")
        grad = noisy * scale + params.reg * w  # division by a public constant, after the noise
        w = opt.step(w, grad)
    return LinearModel.with_fixed_bias(w, params.bias)

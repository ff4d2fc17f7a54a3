"""DP-FC: DP-SGD preconditioned by a privatised feature covariance (Mehta et al. 2022).

Releases (equal budget): the feature second-moment matrix ``S = sum_i w_i x_i x_i^T``
ONCE (sensitivity ``C^2``; it depends on neither labels nor parameters, so one
release serves every class and every step), then T clipped gradient sums exactly as
in ``dpemb.transfer.dp_sgd`` (sensitivity ``grad_clip`` each). Post-processing: the
noisy ``S`` is symmetrised, projected to the PSD cone and factorised once; each step
is ``W <- W - lr (S + lambda I)^{-1} G_t`` with the noisy gradient sum ``G_t``
(one row per class). Both ``S`` and ``G_t`` are sums over examples, so no division
by a count is needed: the step is scale-free, like a Newton step (lr = 1 on a least-
squares loss would be exact). Zero initialisation, fixed logit bias (default -10).

Privacy: (epsilon, delta)-DP for add/remove of one unit, from the (1 + T)-fold
composition of the Gaussian mechanism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .budget import ReleaseMechanism
from .prepare import PreparedFeatures
from .psd import Preconditioner, project_psd
from .result import LinearModel
from .statistics import clipped_gradient_sum, gramian


@dataclass(frozen=True)
class DpFcParams:
    steps: int
    lr: float
    reg: float
    grad_clip: float
    bias: float = -10.0

    def __post_init__(self) -> None:
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"dp-fc: steps must be a positive integer, got {self.steps!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"dp-fc: lr must be positive, got {self.lr}")
        if not (self.reg > 0 and math.isfinite(self.reg)):
            raise ValueError(f"dp-fc: reg must be positive (it makes the preconditioner invertible), got {self.reg}")
        if not (self.grad_clip > 0 and math.isfinite(self.grad_clip)):
            raise ValueError(f"dp-fc: grad_clip must be positive and finite, got {self.grad_clip}")


def num_releases(steps: int) -> int:
    """The feature covariance once, then one clipped gradient sum per step."""
    return 1 + steps


def fit_dp_fc(prep: PreparedFeatures, params: DpFcParams, mech: ReleaseMechanism,
              progress: bool = False) -> LinearModel:
    """Fit DP-FC (module docstring)."""
    k, d = prep.num_classes, prep.dim
    cov_noisy = mech.release("covariance", gramian(prep))
    precond = Preconditioner(project_psd(cov_noisy), params.reg)
    w = torch.zeros(k, d, dtype=prep.x.dtype, device=prep.x.device)
    for t in tqdm(range(params.steps), desc="dp-fc", disable=not progress, leave=False):
        noisy = mech.release(f"gradient[{t}]", clipped_gradient_sum(prep, w, params.bias, params.grad_clip),
                             kind="gradient")
        w = w - params.lr * precond.apply(noisy)
    return LinearModel.with_fixed_bias(w, params.bias)

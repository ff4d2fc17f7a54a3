"""DP-Newton: Newton steps on the one-vs-all sigmoid loss with noisy per-class statistics.

Per step, two Gaussian releases (equal budget with every other release):

1. the K per-class Hessians ``H_l = sum_i w_i c_il p_il (1 - p_il) x_i x_i^T``,
   released together (K, d, d);
2. the K per-class gradients ``g_l = sum_i w_i c_il (p_il - y_il) x_i`` (K, d);

with ``c_il`` = 1 for the own class and ``neg_weight`` otherwise. Sensitivities from
``statistics.newton_sensitivities``: at the public starting point ``W = 0`` the
probabilities are the constant ``sigmoid(bias)``, giving tight bounds; later steps
use ``p (1 - p) <= 1/4`` and ``|p - y| <= 1``. Noise is independent on every entry
of every class. Post-processing: each noisy Hessian is symmetrised and projected
to the PSD cone; the step is ``W_l <- W_l - lr (H_l + lambda I)^{-1} (g_l + lambda
W_l)`` (the Newton step of the loss plus ``lambda/2 ||W||^2``). By default a single
step from zero with bias 0.

Privacy: (epsilon, delta)-DP for add/remove of one unit, from the 2T-fold
composition of the Gaussian mechanism.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from .budget import ReleaseMechanism
from .prepare import PreparedFeatures
from .psd import project_psd, solve_regularized
from .result import LinearModel
from .statistics import newton_statistics


@dataclass(frozen=True)
class DpNewtonParams:
    reg: float
    steps: int = 1
    lr: float = 1.0
    neg_weight: float = 1.0
    bias: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.steps, int) and self.steps >= 1):
            raise ValueError(f"dp-newton: steps must be a positive integer, got {self.steps!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"dp-newton: lr must be positive, got {self.lr}")
        if not self.reg >= 0:
            raise ValueError(f"dp-newton: reg must be >= 0, got {self.reg}")
        if not self.neg_weight >= 0:
            raise ValueError(f"dp-newton: neg_weight (alpha) must be >= 0, got {self.neg_weight}")
        if not math.isfinite(self.bias):
            raise ValueError(f"dp-newton: bias must be finite, got {self.bias}")


def num_releases(steps: int) -> int:
    """Per step, the stack of Hessians and the stack of gradients."""
    return 2 * steps


def fit_dp_newton(prep: PreparedFeatures, params: DpNewtonParams, mech: ReleaseMechanism,
                  progress: bool = False) -> LinearModel:
    """Fit DP-Newton (module docstring)."""
    k, d = prep.num_classes, prep.dim
    w = torch.zeros(k, d, dtype=prep.x.dtype, device=prep.x.device)
    for t in tqdm(range(params.steps), desc="dp-newton", disable=not progress, leave=False):
        hess, grad = newton_statistics(prep, w, params.bias, params.neg_weight)
        h_noisy = mech.release(f"hessians[{t}]", hess, kind="hessians")
        g_noisy = mech.release(f"gradients[{t}]", grad, kind="gradients")
        h_psd = project_psd(h_noisy)
        step = solve_regularized(h_psd, g_noisy + params.reg * w, params.reg)
        w = w - params.lr * step
    return LinearModel.with_fixed_bias(w, params.bias)

"""The DP transfer methods (Mehta et al. 2022) and the non-private baseline: each a
parameter dataclass (validated on construction) and a fit function.

A DP method's fit function sees the data only through ``mech.release`` (a
``ReleaseMechanism``) of the ``ClippedSum`` statistics of ``dpemb.transfer.statistics``,
and makes exactly ``DP_METHODS[method][0](steps)`` releases (public, data-independent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .budget import ReleaseMechanism
from .prepare import PreparedFeatures
from .psd import Preconditioner, project_psd, solve_regularized
from .result import LinearModel
from .statistics import class_gramians, class_sums, clipped_gradient_sum, gramian, newton_statistics

OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")


@dataclass(frozen=True)
class DpLsParams:
    """``reg``: lambda (absolute, in the units of summed squared features);
    ``alpha``: weight of the Gramian (the target-0 term for every example)."""

    reg: float
    alpha: float = 1.0

    def __post_init__(self) -> None:
        if not self.reg >= 0:
            raise ValueError(f"dp-ls: reg must be >= 0, got {self.reg}")
        if not self.alpha >= 0:
            raise ValueError(f"dp-ls: alpha must be >= 0, got {self.alpha}")


def fit_dp_ls(prep: PreparedFeatures, params: DpLsParams, mech: ReleaseMechanism,
              progress: bool = False) -> LinearModel:
    """DP-LS: differentially private least squares on clipped features.

    Three Gaussian releases at equal budget: the Gramian G (sensitivity ``C^2``), the per-class
    Gramians ``A_l`` as one stack (``C^2``), the per-class sums ``b_l`` (``C``); then solve
    ``(A_l + alpha G + lambda I) theta_l = b_l`` on the PSD-projected Gramians and predict
    ``argmax_l theta_l . x`` (docs/TRANSFER.md, "The methods and their sensitivities").

    Privacy: (epsilon, delta)-DP for add/remove of one unit (example or user) with
    rows clipped to C, from the 3-fold composition of the Gaussian mechanism.
    """
    g_noisy = mech.release("gramian", gramian(prep))
    a_noisy = mech.release("class_gramians", class_gramians(prep))
    b_noisy = mech.release("class_sums", class_sums(prep))
    lhs = project_psd(a_noisy) + params.alpha * project_psd(g_noisy).unsqueeze(0)
    theta = solve_regularized(lhs, b_noisy, params.reg)
    return LinearModel.with_fixed_bias(theta, 0.0)


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
    """DP-SGD / DP-Adam on the last layer: full-batch, one-vs-all sigmoid loss.

    From ``W = 0`` with a FIXED logit bias (default -10: near the one-vs-all label prior),
    each of the T steps releases ``sum_i w_i clip(g_i)`` (K, d), every exact rank-one
    gradient ``g_i = r_i x_i^T`` clipped to Frobenius norm ``grad_clip`` (the sensitivity per
    unit), divides it by ``public_size`` (public: by default the training-set size, then
    treated as public), adds ``reg * W`` and takes an SGD or Adam step.

    Privacy: (epsilon, delta)-DP for add/remove of one unit, from the T-fold
    composition of the Gaussian mechanism (full batch: no sampling amplification).
    """
    w = prep.x.new_zeros(prep.num_classes, prep.dim)
    opt = _Optimizer(params, w)
    scale = 1.0 / float(params.public_size or prep.num_units)
    for t in tqdm(range(params.steps), desc="dp-sgd", disable=not progress, leave=False):
        noisy = mech.release(f"gradient[{t}]", clipped_gradient_sum(prep, w, params.bias, params.grad_clip),
                             kind="gradient")
        grad = noisy * scale + params.reg * w  # division by a public constant, after the noise
        w = opt.step(w, grad)
    return LinearModel.with_fixed_bias(w, params.bias)


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


def fit_dp_newton(prep: PreparedFeatures, params: DpNewtonParams, mech: ReleaseMechanism,
                  progress: bool = False) -> LinearModel:
    """DP-Newton: Newton steps on the one-vs-all sigmoid loss with noisy per-class statistics.

    Per step, two Gaussian releases (equal budget): the K per-class Hessians as one stack and
    the K per-class gradients (sensitivities: ``statistics.newton_sensitivities``, tight at
    the public start ``W = 0``); then ``W_l <- W_l - lr (H_l + lambda I)^{-1} (g_l + lambda
    W_l)`` on PSD-projected Hessians. By default a single step from zero with bias 0
    (docs/TRANSFER.md, "The methods and their sensitivities").

    Privacy: (epsilon, delta)-DP for add/remove of one unit, from the 2T-fold
    composition of the Gaussian mechanism.
    """
    w = prep.x.new_zeros(prep.num_classes, prep.dim)
    for t in tqdm(range(params.steps), desc="dp-newton", disable=not progress, leave=False):
        hess, grad = newton_statistics(prep, w, params.bias, params.neg_weight)
        h_noisy = mech.release(f"hessians[{t}]", hess, kind="hessians")
        g_noisy = mech.release(f"gradients[{t}]", grad, kind="gradients")
        h_psd = project_psd(h_noisy)
        step = solve_regularized(h_psd, g_noisy + params.reg * w, params.reg)
        w = w - params.lr * step
    return LinearModel.with_fixed_bias(w, params.bias)


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


def fit_dp_fc(prep: PreparedFeatures, params: DpFcParams, mech: ReleaseMechanism,
              progress: bool = False) -> LinearModel:
    """DP-FC: DP-SGD preconditioned by a privatised feature covariance.

    Releases (equal budget): ``S = sum_i w_i x_i x_i^T`` ONCE (sensitivity ``C^2``), then T
    clipped gradient sums as in ``fit_dp_sgd``; each step is ``W <- W - lr (S + lambda I)^{-1}
    G_t`` with the noisy ``S`` PSD-projected and factorised once. No count divides (both are
    sums). Zero initialisation, fixed logit bias (default -10) (docs/TRANSFER.md, "The
    methods and their sensitivities").

    Privacy: (epsilon, delta)-DP for add/remove of one unit, from the (1 + T)-fold
    composition of the Gaussian mechanism.
    """
    cov_noisy = mech.release("covariance", gramian(prep))
    precond = Preconditioner(project_psd(cov_noisy), params.reg)
    w = prep.x.new_zeros(prep.num_classes, prep.dim)
    for t in tqdm(range(params.steps), desc="dp-fc", disable=not progress, leave=False):
        noisy = mech.release(f"gradient[{t}]", clipped_gradient_sum(prep, w, params.bias, params.grad_clip),
                             kind="gradient")
        w = w - params.lr * precond.apply(noisy)
    return LinearModel.with_fixed_bias(w, params.bias)


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
    """Non-private baseline: multinomial (softmax) logistic regression with a learned bias.

    Full batch, L-BFGS (torch, float64), loss ``mean_i CE(x_i W^T + b, y_i) +
    reg/2 ||W||^2`` (the bias is not regularised, as in scikit-learn). No privacy
    guarantee whatsoever: it is the reference the DP methods are compared against, run
    only when explicitly asked for (``--method non-private``).
    """
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


#: each DP method: its number of Gaussian releases for ``steps`` (3 for DP-LS, T for
#: DP-SGD, 2T for DP-Newton, 1 + T for DP-FC) and its fit function
DP_METHODS: dict[str, tuple[Callable[[int], int], Callable[..., LinearModel]]] = {
    "dp-ls": (lambda steps: 3, fit_dp_ls),
    "dp-sgd": (lambda steps: steps, fit_dp_sgd),
    "dp-newton": (lambda steps: 2 * steps, fit_dp_newton),
    "dp-fc": (lambda steps: 1 + steps, fit_dp_fc),
}

"""Every statistic a DP transfer method releases, each with its L2 sensitivity.

Each function returns a ``dpemb.privacy.clipping.ClippedSum``: the exact weighted sum and
how far adding or removing ONE unit can move it, in L2 (Frobenius, over the whole stack of
classes), computed here next to the value from the bound ``dpemb.transfer.prepare``
guarantees (a sum with ``||f|| <= s`` per row moves by at most ``s``; checked, tightness
included, in ``tests/transfer/test_sensitivity.py``). ``ReleaseMechanism.release`` noises
it at std ``z x`` this sensitivity, never re-derived by a method. Nothing here adds noise.

The one-vs-all sigmoid loss, its per-example gradient (rank one, so per-example clipping is
exact) and Hessians: docs/TRANSFER.md, "dpemb.transfer.statistics".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dpemb.privacy.clipping import ClippedSum

from .budget import RELATION  # add/remove one unit: every sensitivity here is stated under it
from .prepare import PreparedFeatures

#: relative safety margin when scaling to a clip bound (float64 rounding)
_MARGIN = 8 * torch.finfo(torch.float64).eps


def _sum(value: Tensor, sensitivity: float, prep: PreparedFeatures, num_clipped: int = 0) -> ClippedSum:
    return ClippedSum(value=[value], sensitivity=float(sensitivity), relation=RELATION,
                      count=prep.num_units, num_clipped=int(num_clipped))


def gramian(prep: PreparedFeatures) -> ClippedSum:
    """``G = sum_i w_i x_i x_i^T`` (d, d). Per row ``||x x^T||_F = ||x||^2 <= C^2``: sensitivity ``C^2``."""
    return _sum(prep.class_gramians().sum(0), prep.clip_norm**2, prep)


def class_gramians(prep: PreparedFeatures) -> ClippedSum:
    """``A_l = sum_{y_i = l} w_i x_i x_i^T`` as one (K, d, d) stack.

    A row touches only its own class's block, by ``||x||^2 <= C^2``: sensitivity ``C^2``
    for the whole stack (not ``C^2 sqrt(K)``: the classes are released together)."""
    return _sum(prep.class_gramians(), prep.clip_norm**2, prep)


def class_sums(prep: PreparedFeatures) -> ClippedSum:
    """``b_l = sum_{y_i = l} w_i x_i`` as one (K, d) matrix: sensitivity ``C``."""
    b = (prep.onehot() * prep.weights.unsqueeze(1)).T @ prep.x
    return _sum(b, prep.clip_norm, prep)


def probabilities(x: Tensor, weights: Tensor, bias: float) -> Tensor:
    """``sigmoid(x W^T + b)``: ``(N, K)``."""
    return torch.sigmoid(x @ weights.T + bias)


def clipped_gradient_sum(prep: PreparedFeatures, weights: Tensor, bias: float, grad_clip: float) -> ClippedSum:
    """``sum_i w_i clip(g_i, grad_clip)`` (K, d), ``g_i`` the example's one-vs-all gradient
    (``neg_weight`` 1) at ``weights``, scaled to Frobenius norm <= ``grad_clip``:
    sensitivity ``grad_clip``. ``num_clipped`` counts the rows that were scaled down."""
    if not (grad_clip > 0 and math.isfinite(grad_clip)):
        raise ValueError(f"grad_clip must be positive and finite, got {grad_clip}")
    r = probabilities(prep.x, weights, bias) - prep.onehot()
    norms = torch.linalg.vector_norm(r, dim=1) * torch.linalg.vector_norm(prep.x, dim=1)
    over = norms > grad_clip
    factor = torch.where(over, grad_clip * (1 - _MARGIN) / norms.clamp_min(1e-300), torch.ones_like(norms))
    coef = r * (factor * prep.weights).unsqueeze(1)
    return _sum(coef.T @ prep.x, grad_clip, prep, int(over.sum()))


def newton_sensitivities(
    clip_norm: float, num_classes: int, neg_weight: float, bias: float, at_zero: bool
) -> tuple[float, float]:
    """L2 sensitivities of (all K per-class Hessians, all K per-class gradients).

    Bounds for one row with ``||x|| <= C``, summed over the K classes (c = 1 for the own class,
    ``neg_weight`` for the others); tight at the public start ``W = 0``, where ``p =
    sigmoid(bias)`` for every example (derivation: docs/TRANSFER.md, "dpemb.transfer.statistics").
    """
    a2 = neg_weight**2 * (num_classes - 1)
    if at_zero:
        p = 1.0 / (1.0 + math.exp(-bias))
        q = p * (1 - p)
        return clip_norm**2 * q * math.sqrt(1 + a2), clip_norm * math.sqrt((1 - p) ** 2 + a2 * p**2)
    return clip_norm**2 * 0.25 * math.sqrt(1 + a2), clip_norm * math.sqrt(1 + a2)


def newton_statistics(
    prep: PreparedFeatures, weights: Tensor, bias: float, neg_weight: float
) -> tuple[ClippedSum, ClippedSum]:
    """Per-class Hessians ``(K, d, d)`` and gradients ``(K, d)`` of the weighted one-vs-all
    loss at ``weights`` (public: zero or computed from earlier noisy releases), with the
    sensitivities of ``newton_sensitivities`` (the tight ones when ``weights`` is zero).

    At ``weights = 0`` the Hessians are ``q ((1 - neg_weight) A_l + neg_weight G)`` with
    the cached per-class Gramians ``A_l``; otherwise one weighted Gramian per class.
    """
    x, w = prep.x, prep.weights
    y = prep.onehot()
    c = y + neg_weight * (1 - y)
    at_zero = not bool(weights.any())
    if at_zero:
        p = 1.0 / (1.0 + math.exp(-bias))
        q = p * (1 - p)
        a = prep.class_gramians()
        hess = q * ((1 - neg_weight) * a + neg_weight * a.sum(0).unsqueeze(0))
        resid = c * (p - y)
    else:
        prob = probabilities(x, weights, bias)
        qw = c * prob * (1 - prob) * w.unsqueeze(1)
        hess = torch.stack([(x * qw[:, l].unsqueeze(1)).T @ x for l in range(prep.num_classes)])
        resid = c * (prob - y)
    grad = (resid * w.unsqueeze(1)).T @ x
    s_h, s_g = newton_sensitivities(prep.clip_norm, prep.num_classes, neg_weight, bias, at_zero)
    return _sum(hess, s_h, prep), _sum(grad, s_g, prep)

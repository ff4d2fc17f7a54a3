"""The one-vs-all sigmoid (logistic) loss of a linear classifier, and its clipped statistics.

Model: scores ``s = x W^T + b`` with weights ``W`` (K, d) and a FIXED, public logit
bias ``b`` (a number, not learned). Loss of one example, summed over the K classes::

    l(W; x, y) = sum_l  c_l(y) * BCE(sigmoid(s_l), y_l)

with one-hot ``y`` and class weights ``c_l(y) = 1`` for the example's own class and
``neg_weight`` for the others. Per-example gradient: ``r x^T`` with
``r_l = c_l (sigmoid(s_l) - y_l)``, a rank-one matrix of Frobenius norm
``||r|| ||x||``, so per-example clipping is exact and cheap. Per-class Hessian:
``sum_i c_il p_il (1 - p_il) x_i x_i^T``.

Functions here compute statistics; they do not add noise. Each returns the bound
on one unit's contribution (the L2 sensitivity under add/remove of one unit, given
rows clipped to C and unit weights summing to <= 1; see ``dpemb.transfer.prepare``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .prepare import PreparedFeatures


def class_weights(prep: PreparedFeatures, neg_weight: float) -> Tensor:
    """``(N, K)``: 1 for the example's own class, ``neg_weight`` for the others."""
    y = prep.onehot()
    return y + neg_weight * (1 - y)


def probabilities(x: Tensor, weights: Tensor, bias: float) -> Tensor:
    """``sigmoid(x W^T + b)``: ``(N, K)``."""
    return torch.sigmoid(x @ weights.T + bias)


def clipped_gradient_sum(
    prep: PreparedFeatures, weights: Tensor, bias: float, grad_clip: float, *, neg_weight: float = 1.0
) -> tuple[Tensor, float, int]:
    """``sum_i w_i clip(g_i, grad_clip)``: ``(K, d)``; its sensitivity; rows clipped.

    ``g_i = r_i x_i^T`` is example i's gradient of the one-vs-all loss (module
    docstring); it is scaled to Frobenius norm <= ``grad_clip``. One unit changes the
    sum by at most ``sum w_i grad_clip <= grad_clip``: sensitivity ``grad_clip``.
    """
    if not (grad_clip > 0 and math.isfinite(grad_clip)):
        raise ValueError(f"grad_clip must be positive and finite, got {grad_clip}")
    y = prep.onehot()
    r = probabilities(prep.x, weights, bias) - y
    if neg_weight != 1.0:
        r = r * (y + neg_weight * (1 - y))
    norms = torch.linalg.vector_norm(r, dim=1) * torch.linalg.vector_norm(prep.x, dim=1)
    factor = torch.clamp(grad_clip / norms.clamp_min(1e-300), max=1.0)
    num_clipped = int((norms > grad_clip).sum())
    coef = r * (factor * prep.weights).unsqueeze(1)
    return coef.T @ prep.x, float(grad_clip), num_clipped


def newton_sensitivities(
    clip_norm: float, num_classes: int, neg_weight: float, bias: float, at_zero: bool
) -> tuple[float, float]:
    """L2 sensitivities of (all K per-class Hessians, all K per-class gradients).

    One example with ``||x|| <= C`` adds ``c_l p_l (1 - p_l) x x^T`` to class l's
    Hessian and ``c_l (p_l - y_l) x`` to class l's gradient. Over the K classes::

        Hessians:  ||x||^2 sqrt(sum_l c_l^2 q_l^2)   q_l = p_l (1 - p_l)
        gradients: ||x||   sqrt(sum_l c_l^2 (p_l - y_l)^2)

    with c = 1 for the own class and ``neg_weight`` for the K-1 others. In general
    ``q <= 1/4`` and ``|p - y| <= 1``; at ``W = 0`` (public) ``p = sigmoid(bias)``
    exactly for every example, which gives the tighter values used for a first step
    from zero. Unit weights summing to <= 1 keep the same bounds for a user.
    """
    a2 = neg_weight**2 * (num_classes - 1)
    if at_zero:
        p = 1.0 / (1.0 + math.exp(-bias))
        q = p * (1 - p)
        s_h = clip_norm**2 * q * math.sqrt(1 + a2)
        s_g = clip_norm * math.sqrt((1 - p) ** 2 + a2 * p**2)
    else:
        s_h = clip_norm**2 * 0.25 * math.sqrt(1 + a2)
        s_g = clip_norm * math.sqrt(1 + a2)
    return s_h, s_g


def newton_statistics(
    prep: PreparedFeatures, weights: Tensor, bias: float, neg_weight: float
) -> tuple[Tensor, Tensor]:
    """Per-class Hessians ``(K, d, d)`` and gradients ``(K, d)`` of the weighted loss at ``weights``.

    When ``weights`` is all zeros, ``p = sigmoid(bias)`` everywhere and the Hessians are
    ``q ((1 - neg_weight) A_l + neg_weight G)`` with the per-class Gramians ``A_l``
    (cached on ``prep``); otherwise one weighted Gramian per class.
    """
    x, w = prep.x, prep.weights
    y = prep.onehot()
    c = y + neg_weight * (1 - y)
    if not bool(weights.any()):
        p = 1.0 / (1.0 + math.exp(-bias))
        q = p * (1 - p)
        a = prep.class_gramians()
        g_all = a.sum(0)
        hess = q * ((1 - neg_weight) * a + neg_weight * g_all.unsqueeze(0))
        resid = c * (p - y)
    else:
        prob = probabilities(x, weights, bias)
        q = c * prob * (1 - prob)
        hess = torch.stack([(x * (w * q[:, l]).unsqueeze(1)).T @ x for l in range(prep.num_classes)])
        resid = c * (prob - y)
    grad = (resid * w.unsqueeze(1)).T @ x
    return hess, grad


def weighted_class_sums(prep: PreparedFeatures) -> Tensor:
    """``b_l = sum_{i: y_i = l} w_i x_i``: ``(K, d)``. Per unit: L2 change <= C."""
    return (prep.onehot() * prep.weights.unsqueeze(1)).T @ prep.x


def ova_loss(prep: PreparedFeatures, weights: Tensor, bias: float, neg_weight: float = 1.0) -> Tensor:
    """The weighted one-vs-all loss ``sum_i w_i l(W; x_i, y_i)`` (a scalar; for tests and logs)."""
    s = prep.x @ weights.T + bias
    y = prep.onehot()
    c = y + neg_weight * (1 - y)
    per = torch.nn.functional.binary_cross_entropy_with_logits(s, y, weight=c, reduction="none").sum(1)
    return (per * prep.weights).sum()

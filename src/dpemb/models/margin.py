"""The training loss on (embedding, head weight, label): softmax cross-entropy over
linear logits, or a cosine-margin loss (CosFace, ArcFace).

``softmax``: logits ``e @ W.T``, cross-entropy. Exactly the computation of
``F.cross_entropy(F.linear(e, W), y)`` (the head is a bias-free linear layer).

``cosface`` (Wang et al. 2018, "CosFace: Large Margin Cosine Loss"): with the
embedding and every class row L2-normalised, ``cos_j = <e/|e|, W_j/|W_j|>`` and the
logits are ``s * (cos_j - m [j == y])``. Defaults s = 30, m = 0.35.

``arcface`` (Deng et al. 2019, "ArcFace: Additive Angular Margin Loss"): the target
logit is ``s * cos(theta_y + m)`` with ``theta_y = acos(cos_y)``, the others
``s * cos_j``. Defaults s = 30, m = 0.5.

The margins are the papers' defaults (CosFace m = 0.35, ArcFace m = 0.5). Both papers
use s = 64 for face recognition over ~10^4-10^5 identities; the default s = 30 is the
common open-source choice for smaller problems (e.g. arcface-pytorch's ArcMarginProduct
and AddMarginProduct). Override either with ``scale`` / ``margin``.

ArcFace's ``cos(theta + m)`` is not monotone once ``theta + m > pi``: it would rise
again and reward a larger angle. We use the THRESHOLD fallback of the reference
implementation (insightface, ``easy_margin=False``; not the easy-margin variant): for
``theta_y > pi - m`` the target is the CosFace-like ``cos_y - m sin(m)``. The target logit is then decreasing in ``theta_y`` over all of
[0, pi] (with a downward step at ``pi - m``), so the loss always pulls towards the
class.

Numerics: rows are normalised by ``x / |x|`` only where ``|x| > EPS``; a row whose norm
is at most ``EPS`` (a zero head row, a zero embedding) has no direction: its unit
vector is 0 (cosine 0 with everything) and it receives a zero gradient, never NaN or
the ``1/eps`` blow-up of ``F.normalize``. ``cos`` is clamped to
``[-1 + CLAMP, 1 - CLAMP]`` before ``acos``. Cosine logits are computed in at least
float32.

A zero-initialised head has no direction under a cosine loss (every row would stay
inert), so ``--head-init zeros`` with a margin loss means an IMPRINTED head: each row
is the normalised mean of the normalised embeddings of its class in the client's data
(weight imprinting, Qi et al. 2018; ``imprint_``). Like a zero softmax head, whose
first step moves each row towards its class's mean embedding, it adds no random
classifier for the backbone to chase. Rows of classes absent from the client stay
zero: inert negatives with logit 0.

This module imports torch lazily, so ``LossConfig`` loads without it (the command line).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: the losses ``LossConfig.kind`` accepts
LOSSES: tuple[str, ...] = ("softmax", "cosface", "arcface")
#: kind -> (default scale s, default margin m): the papers' margins, see the module doc
DEFAULTS: dict[str, tuple[float, float]] = {"cosface": (30.0, 0.35), "arcface": (30.0, 0.5)}
#: kind -> largest margin accepted (cosface: on the cosine; arcface: radians)
MAX_MARGIN: dict[str, float] = {"cosface": 1.0, "arcface": math.pi / 2}
#: rows with an L2 norm at most this have no direction (unit vector 0, zero gradient)
EPS = 1e-6
#: cos is clamped to [-1 + CLAMP, 1 - CLAMP] before acos (acos' is infinite at +-1)
CLAMP = 1e-6


@dataclass(frozen=True)
class LossConfig:
    """Which loss trains the head and backbone. ``scale`` and ``margin`` apply to the
    margin losses only and default to ``DEFAULTS[kind]`` (the resolved values are
    stored, so a config records the numbers used); softmax takes neither."""

    kind: str = "softmax"
    scale: float | None = None
    margin: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in LOSSES:
            raise ValueError(f"unknown loss {self.kind!r}; choose from {LOSSES}")
        if self.kind == "softmax":
            if self.scale is not None or self.margin is not None:
                raise ValueError("loss scale and margin apply to cosface and arcface only; the softmax "
                                 "loss (linear logits) has neither")
            return
        s_default, m_default = DEFAULTS[self.kind]
        scale = float(s_default if self.scale is None else self.scale)
        margin = float(m_default if self.margin is None else self.margin)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"loss scale must be positive and finite, got {scale!r}")
        hi = MAX_MARGIN[self.kind]
        if not 0 <= margin <= hi:
            unit = " radians" if self.kind == "arcface" else ""
            raise ValueError(f"{self.kind} margin must lie in [0, {hi:.4g}]{unit}, got {margin!r}")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "margin", margin)

    @property
    def cosine(self) -> bool:
        """Whether the logits are cosines (a margin loss): the head's norm is ignored."""
        return self.kind != "softmax"


def as_loss_config(value: LossConfig | str) -> LossConfig:
    """A ``LossConfig`` from itself or a kind name (with the kind's defaults)."""
    if isinstance(value, LossConfig):
        return value
    if isinstance(value, str):
        return LossConfig(value)
    raise TypeError(f"loss must be a LossConfig or one of {LOSSES}, got {type(value).__name__}")


def unit_rows(x: "torch.Tensor", eps: float = EPS) -> "torch.Tensor":
    """Rows of ``x`` divided by their L2 norm; rows with norm <= ``eps`` become 0 with a
    zero gradient (no NaN, no ``1/eps`` factor)."""
    import torch

    sq = (x * x).sum(dim=1, keepdim=True)
    inv = torch.where(sq > eps * eps, sq.clamp_min(eps * eps).rsqrt(), torch.zeros_like(sq))
    return x * inv


def cosine_logits(embeddings: "torch.Tensor", weight: "torch.Tensor") -> "torch.Tensor":
    """``cos(theta_j)`` between each embedding and each class row, (N, C), in at least float32."""
    import torch

    dtype = torch.promote_types(embeddings.dtype, torch.float32)
    return unit_rows(embeddings.to(dtype)) @ unit_rows(weight.to(dtype)).T


def logits(embeddings: "torch.Tensor", weight: "torch.Tensor", labels: "torch.Tensor",
           cfg: LossConfig) -> "torch.Tensor":
    """The logits the cross-entropy is taken over (with the margin on each target)."""
    import torch
    import torch.nn.functional as F

    if not cfg.cosine:
        return F.linear(embeddings, weight)
    assert cfg.scale is not None and cfg.margin is not None
    cos = cosine_logits(embeddings, weight)
    y = labels.view(-1, 1)
    cos_y = cos.gather(1, y)
    m = cfg.margin
    if cfg.kind == "cosface":
        target = cos_y - m
    else:  # arcface, threshold fallback (insightface easy_margin=False)
        theta = torch.acos(cos_y.clamp(-1 + CLAMP, 1 - CLAMP))
        target = torch.where(cos_y >= math.cos(math.pi - m),  # theta + m <= pi
                             torch.cos(theta + m), cos_y - m * math.sin(m))
    return cos.scatter(1, y, target) * cfg.scale


def head_loss(embeddings: "torch.Tensor", weight: "torch.Tensor", labels: "torch.Tensor",
              cfg: LossConfig) -> "torch.Tensor":
    """Mean cross-entropy of ``logits`` (softmax: exactly ``F.cross_entropy(F.linear(e, W), y)``)."""
    import torch.nn.functional as F

    return F.cross_entropy(logits(embeddings, weight, labels, cfg), labels)


def imprint_(weight: "torch.Tensor", embeddings: "torch.Tensor", labels: "torch.Tensor") -> "torch.Tensor":
    """Weight imprinting in place: row c = unit(sum of unit(e_i) over examples of class c);
    rows of classes without examples (or whose embeddings are all zero) become 0."""
    import torch

    with torch.no_grad():
        sums = torch.zeros(weight.shape, dtype=torch.promote_types(embeddings.dtype, torch.float32),
                           device=weight.device)
        sums.index_add_(0, labels.to(weight.device), unit_rows(embeddings.to(sums.dtype)).to(weight.device))
        return weight.copy_(unit_rows(sums))

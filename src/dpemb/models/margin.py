"""The training loss on (embedding, head weight, label): softmax cross-entropy over
linear logits, or a cosine-margin loss (CosFace, ArcFace).

The logits of each kind, the defaults and their sources, ArcFace's threshold fallback
(the target logit keeps falling over all of [0, pi]), the numerics (``unit_rows``, ``EPS``,
``CLAMP``) and the imprinted head (``imprint_``) that ``--head-init zeros`` means under a
margin loss: docs/MODELS.md, "Loss on the head".

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
#: kind -> (default scale s, default margin m): the papers' margins, docs/MODELS.md
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


def logits(embeddings: "torch.Tensor", weight: "torch.Tensor", labels: "torch.Tensor",
           cfg: LossConfig) -> "torch.Tensor":
    """The logits the cross-entropy is taken over (with the margin on each target)."""
    import torch
    import torch.nn.functional as F

    if not cfg.cosine:
        return F.linear(embeddings, weight)
    assert cfg.scale is not None and cfg.margin is not None
    dtype = torch.promote_types(embeddings.dtype, torch.float32)  # cosines in at least float32
    cos = unit_rows(embeddings.to(dtype)) @ unit_rows(weight.to(dtype)).T
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

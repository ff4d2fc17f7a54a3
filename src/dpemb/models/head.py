"""The classification head trained jointly with a backbone: Linear, no bias, Glorot init."""

from __future__ import annotations

import math

import torch
from torch import nn


def make_head(embedding_dim: int, num_classes: int, *, generator: torch.Generator | None = None,
              device: torch.device | str | None = None) -> nn.Linear:
    """A fresh ``Linear(embedding_dim, num_classes, bias=False)`` with Glorot-uniform weights.

    As in the reference (Keras ``glorot_uniform``; docs/MODELS.md, "Head"). ``generator``
    draws the weights (e.g. a virtual client's own); None: torch's global RNG.
    """
    if not isinstance(embedding_dim, int) or embedding_dim < 1:
        raise ValueError(f"embedding_dim must be a positive integer, got {embedding_dim!r}")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    head = nn.Linear(embedding_dim, num_classes, bias=False, device=device)
    bound = math.sqrt(6.0 / (embedding_dim + num_classes))
    gen_device = generator.device if generator is not None else head.weight.device
    with torch.no_grad():
        w = torch.rand(head.weight.shape, generator=generator, device=gen_device)
        head.weight.copy_(w.mul_(2 * bound).sub_(bound))
    return head

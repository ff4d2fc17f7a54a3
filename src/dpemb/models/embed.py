"""Inference: images -> L2-normalised embeddings."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from .base import Backbone


def embed(model: Backbone, x: Tensor, *, batch_size: int = 512) -> Tensor:
    """L2-normalised embeddings ``(N, embedding_dim)`` of images ``x`` ``(N, C, H, W)`` in [0, 1].

    Runs in eval mode without gradients, ``batch_size`` images at a time on the
    model's device, and returns float32 on ``x``'s device. Every module's train/eval
    flag is restored afterwards (frozen BatchNorm layers stay in eval).
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(x, Tensor) or x.ndim != 4:
        raise ValueError("embed: expected a float tensor of shape (N, C, H, W)")
    param = next(model.parameters(), None)
    device = param.device if param is not None else x.device
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        out = []
        with torch.no_grad():
            for start in range(0, len(x), batch_size):
                batch = x[start:start + batch_size].to(device, non_blocking=True)
                out.append(F.normalize(model(batch).float(), dim=1).to(x.device))
        if not out:
            return torch.empty(0, model.embedding_dim, device=x.device)
        return torch.cat(out)
    finally:
        for m, mode in modes:
            m.training = mode


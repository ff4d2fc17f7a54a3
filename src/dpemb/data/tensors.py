"""Packed uint8 images -> model input tensors.

The single convention of dpemb: a model takes float32 ``(N, C, H, W)`` in [0, 1].
Backbones do their own normalisation (e.g. ImageNet mean/std for pretrained weights).
"""

from __future__ import annotations

import numpy as np
import torch


def to_float_tensor(images: np.ndarray, device: torch.device | str | None = None) -> torch.Tensor:
    """uint8 ``(N, H, W, C)`` (or ``(N, H, W)``) -> float32 ``(N, C, H, W)`` in [0, 1]."""
    arr = np.asarray(images)
    if arr.ndim == 3:
        arr = arr[..., None]
    if arr.dtype != np.uint8:
        raise TypeError(f"expected uint8 images, got {arr.dtype}")
    t = torch.from_numpy(np.ascontiguousarray(arr)).to(device=device)
    return t.permute(0, 3, 1, 2).float().div_(255.0).contiguous()


def default_device() -> torch.device:
    """CUDA when present, CPU otherwise."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")

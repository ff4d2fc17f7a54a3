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
    t = numpy_to_tensor(arr).to(device=device)
    return t.permute(0, 3, 1, 2).float().div_(255.0).contiguous()


def resize_square(x: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear resize of float ``(N, C, H, W)`` to ``(N, C, size, size)``, antialiased
    when shrinking; ``x`` itself when it already has that size."""
    if tuple(x.shape[-2:]) == (size, size):
        return x
    shrink = size < max(x.shape[-2:])
    return torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                                           antialias=shrink)


def numpy_to_tensor(arr: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` for any array: a read-only one (a memory-mapped dataset) is
    copied first, since torch cannot share read-only memory and warns about it."""
    arr = np.ascontiguousarray(arr)
    if not arr.flags.writeable:
        arr = arr.copy()
    return torch.from_numpy(arr)


DEVICE_CHOICES_HELP = "auto (CUDA when present, else CPU), cpu, cuda or cuda:N"


def resolve_device(name: str | torch.device | None = "auto") -> torch.device:
    """``auto``/None -> CUDA when present, else CPU; ``cpu``; ``cuda`` or ``cuda:N``
    (an error naming the devices there are when CUDA or that index is missing)."""
    if isinstance(name, torch.device):
        return name
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}: use {DEVICE_CHOICES_HELP}") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count()
        if n == 0:
            raise ValueError(f"--device {name}: no CUDA device is available here; use --device cpu or auto")
        if dev.index is not None and dev.index >= n:
            raise ValueError(f"--device {name}: this machine has {n} CUDA device(s), cuda:0-cuda:{n - 1}")
    elif dev.type != "cpu":
        raise ValueError(f"unsupported device {name!r}: use {DEVICE_CHOICES_HELP}")
    return dev

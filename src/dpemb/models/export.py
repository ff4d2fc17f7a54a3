"""Portable copies of a backbone's inference path: ONNX and TorchScript.

Both export :class:`Embedder`, exactly what ``dpemb embed`` computes on a batch: float32
``(N, C, H, W)`` pixels in [0, 1] -> the backbone -> L2-normalised embeddings. Exporting is
post-processing of the released weights: the files carry the same privacy as the artifact
they come from. The exporters chosen (TorchScript-based ONNX, ``torch.jit.script``) and
which input checks each file keeps: docs/MODELS.md, "Export: ONNX and TorchScript".
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .base import Backbone

#: the ONNX opset written (supported by onnx >= 1.12 and onnxruntime >= 1.12)
ONNX_OPSET = 17
INPUT_NAME = "images"
OUTPUT_NAME = "embeddings"
#: the largest |difference| to ``dpemb embed`` an export may show on its check batch
MAX_ABS_DIFFERENCE = 1e-4


class Embedder(nn.Module):
    """``dpemb embed``'s computation as one module: L2-normalised embeddings of float
    ``(N, C, H, W)`` images in [0, 1]."""

    def __init__(self, backbone: Backbone):
        super().__init__()
        self.backbone = backbone

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(self.backbone(x).float(), dim=1)


def example_images(backbone: Backbone, n: int = 8, seed: int = 0) -> Tensor:
    """``n`` random 8-bit images as the model's float input (what decoded files give)."""
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (n, backbone.in_channels, backbone.image_size, backbone.image_size), generator=g)
    return pixels.float().div(255.0)


def export_onnx(backbone: Backbone, path: str | os.PathLike) -> Path:
    """Write ``backbone``'s :class:`Embedder` as ONNX to ``path`` (input ``images``,
    output ``embeddings``, both with a dynamic batch axis)."""
    path = Path(path)
    model = Embedder(backbone).cpu().eval()
    with warnings.catch_warnings():  # the legacy exporter's deprecation and tracer notes
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (example_images(backbone, 2),), str(path), dynamo=False, opset_version=ONNX_OPSET,
            input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
        )
    return path


def export_torchscript(backbone: Backbone, path: str | os.PathLike) -> Path:
    """Write ``torch.jit.script`` of ``backbone``'s :class:`Embedder` to ``path``."""
    path = Path(path)
    with warnings.catch_warnings():  # torch.jit's deprecation note
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.script(Embedder(backbone).cpu().eval()), str(path))
    return path


def run_onnx(path: str | os.PathLike, images: Tensor) -> np.ndarray:
    """The ONNX model at ``path`` run by onnxruntime (CPU) on float images."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([OUTPUT_NAME], {INPUT_NAME: images.cpu().numpy().astype(np.float32)})[0]


def run_torchscript(path: str | os.PathLike, images: Tensor) -> np.ndarray:
    """The TorchScript model at ``path`` (``torch.jit.load``, CPU) on float images."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.jit.load(str(path), map_location="cpu")
    with torch.no_grad():
        return model(images.cpu()).numpy()


def max_difference(backbone: Backbone, run, path: str | os.PathLike, images: Tensor) -> float:
    """max |exported(images) - dpemb.models.embed(backbone, images)| (``run``:
    :func:`run_onnx` or :func:`run_torchscript`)."""
    from .embed import embed

    want = embed(backbone, images.to(next(backbone.parameters()).device)).cpu().numpy()
    got = run(path, images)
    if got.shape != want.shape:
        raise ValueError(f"{path}: output shape {got.shape}, expected {want.shape}")
    return float(np.abs(got - want).max())

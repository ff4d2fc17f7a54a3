"""The backbone base class and small building blocks shared by the architectures (the
input and output convention: docs/MODELS.md, "Input and output").
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

NormFactory = Callable[[int], nn.Module]


class Backbone(nn.Module):
    """Base class: image ``(N, C, H, W)`` in [0, 1] -> embedding ``(N, embedding_dim)``.

    Subclasses set ``self.embedding = nn.Linear(feature_dim, embedding_dim)`` and
    implement ``_features`` (normalised input -> pooled features).
    """

    name = "backbone"
    #: minimum input side length in pixels; subclasses may raise it
    min_image_size = 8
    #: True when the input side must equal ``image_size`` (a dense layer on the flattened map)
    fixed_input_size = False
    #: what the model does to its [0, 1] input before the first layer (for the model card)
    input_normalisation = "2x - 1: pixels in [0, 1] to [-1, 1], inside the model"
    # what the input check reads, fixed when ``torch.jit.script`` compiles the forward
    __constants__ = ["name", "in_channels", "image_size", "fixed_input_size"]

    def __init__(self, *, in_channels: int, image_size: int, embedding_dim: int, width: float):
        super().__init__()
        check_common_args(in_channels=in_channels, image_size=image_size,
                          embedding_dim=embedding_dim, width=width,
                          min_image_size=self.min_image_size, name=self.name)
        self.in_channels = int(in_channels)
        self.image_size = int(image_size)
        self.embedding_dim = int(embedding_dim)
        self.width = float(width)
        self.groups: int | None = None  # GroupNorm groups, set by GroupNorm subclasses
        self.feature_dim = 0  # set by subclasses

    # -------------------------------------------------------------------- interface
    def forward_features(self, x: Tensor) -> Tensor:
        """Pooled features ``(N, feature_dim)`` before the embedding layer."""
        self._check_input(x)
        return self._features(self.normalize_input(x))

    def forward(self, x: Tensor) -> Tensor:
        """Raw (un-normalised) embedding ``(N, embedding_dim)``."""
        return self.embedding(self.forward_features(x))

    def normalize_input(self, x: Tensor) -> Tensor:
        """[0, 1] pixels -> the range the first layer expects. Default: centre to [-1, 1]."""
        return x.sub(0.5).mul(2.0)

    def _features(self, x: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---------------------------------------------------------------------- helpers
    def _check_input(self, x: Tensor) -> None:
        """Shape, dtype and channel checks; written in the subset of Python that
        ``torch.jit.script`` compiles (no ``super()``, no tuple of a runtime shape), so a
        scripted backbone refuses the same inputs with the same messages."""
        convert = "; convert uint8 images with dpemb.data.tensors.to_float_tensor"
        expected = f"{self.name}: expected a float tensor (N, C, H, W), got "
        if not torch.jit.is_scripting() and not isinstance(x, Tensor):
            raise ValueError(expected + type(x).__name__ + convert)
        if x.dim() != 4:
            raise ValueError(expected + _shape_text(x) + convert)
        if not x.is_floating_point():
            dtype = "an integer dtype" if torch.jit.is_scripting() else f"dtype {x.dtype}"  # script prints a code
            raise ValueError(f"{self.name}: expected float pixels in [0, 1], got {dtype}{convert}")
        if x.shape[1] != self.in_channels:
            raise ValueError(
                f"{self.name}: built for {self.in_channels}-channel input, got "
                f"{x.shape[1]} channels (input shape {_shape_text(x)}); rebuild the "
                "backbone with the dataset's channel count"
            )
        if self.fixed_input_size and (x.shape[2] != self.image_size or x.shape[3] != self.image_size):
            raise ValueError(
                f"{self.name}: built for {self.image_size}x{self.image_size} images (its dense "
                f"layer has a fixed input size), got ({x.shape[2]}, {x.shape[3]}); rebuild with "
                "image_size matching the dataset"
            )

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, image_size={self.image_size}, "
                f"feature_dim={self.feature_dim}, embedding_dim={self.embedding_dim}, "
                f"width={self.width}")


def _shape_text(x: Tensor) -> str:
    """``(2, 3, 28)``: a tensor's shape as Python prints a tuple, in TorchScript too."""
    dims = [str(d) for d in x.shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def check_common_args(*, in_channels: int, image_size: int, embedding_dim: int, width: float,
                      min_image_size: int, name: str) -> None:
    """Validate the constructor arguments every backbone shares (ValueError if bad)."""
    if in_channels not in (1, 3):
        raise ValueError(f"{name}: in_channels must be 1 (grayscale) or 3 (RGB), got {in_channels}")
    if not isinstance(image_size, int) or image_size < min_image_size:
        raise ValueError(f"{name}: image_size must be an integer >= {min_image_size}, got {image_size!r}")
    if not isinstance(embedding_dim, int) or embedding_dim < 1:
        raise ValueError(f"{name}: embedding_dim must be a positive integer, got {embedding_dim!r}")
    if not (isinstance(width, (int, float)) and 0 < float(width) <= 8):
        raise ValueError(f"{name}: width must be a number in (0, 8], got {width!r}")


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round a channel count to the nearest multiple of ``divisor`` (never down by >10%)."""
    new = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if new < 0.9 * value:
        new += divisor
    return new


class StridedPointwiseConv2d(nn.Conv2d):
    """A 1x1 convolution with a stride, computed as a stride-1 1x1 convolution of the
    strided pixels ``x[:, :, ::s, ::s]``: the same numbers (a 1x1 kernel without
    padding reads exactly those pixels), the same parameter (``weight`` of shape
    ``(cout, cin, 1, 1)``, so state dicts are unchanged), and no strided 1x1 convolution
    ever reaches PyTorch's CPU backend. Why: oneDNN's strided 1x1 backward_weights
    corrupts the heap on channels-last input with few channels (uxlfoundation/oneDNN#6035;
    docs/SCALE.md, "oneDNN's strided 1x1 backward corrupts the heap").
    """

    def __init__(self, cin: int, cout: int, stride: int, *, bias: bool = False):
        super().__init__(cin, cout, 1, stride=stride, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        sh, sw = self.stride
        return F.conv2d(x[:, :, ::sh, ::sw], self.weight, self.bias)


def group_norm_factory(groups: int, where: str) -> NormFactory:
    """A GroupNorm constructor with a fixed number of groups; errors name the layer width."""
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{where}: groups must be a positive integer, got {groups!r}")

    def make(channels: int) -> nn.Module:
        if channels % groups:
            raise ValueError(
                f"{where}: groups={groups} does not divide a layer of {channels} channels; "
                "channel counts are multiples of 8, so use 1, 2, 4 or 8 groups"
            )
        return nn.GroupNorm(groups, channels)

    return make


NORM_TYPES: tuple[type[nn.Module], ...] = (
    nn.GroupNorm, nn.LayerNorm, nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm,
)


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters (trainable or not)."""
    return sum(p.numel() for p in module.parameters())

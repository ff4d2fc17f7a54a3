"""The backbone registry: a name -> a freshly initialised backbone."""

from __future__ import annotations

from .base import Backbone
from .lenet import LeNet
from .mobilenetv2 import MobileNetV2
from .names import BACKBONES
from .resnet_gn import ResNetGN


def build_backbone(name: str, *, in_channels: int, image_size: int, embedding_dim: int = 128,
                   width: float = 1.0, groups: int | None = None) -> Backbone:
    """Build a randomly initialised backbone (on the CPU; move it with ``.to(device)``).

    ``width``, ``groups`` (refused by ``lenet`` and ``mobilenetv2-bn``) and seeding with
    torch's global RNG: docs/MODELS.md, "Backbones".
    """
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; choose one of {', '.join(BACKBONES)}")
    common = dict(in_channels=in_channels, image_size=image_size,
                  embedding_dim=embedding_dim, width=width)
    if name == "lenet":
        if groups is not None:
            raise ValueError("lenet has no normalisation layers; pass groups=None")
        return LeNet(**common)
    if name == "resnet-gn":
        return ResNetGN(**common, groups=groups)
    if name == "mobilenetv2-gn":
        return MobileNetV2(**common, norm="gn", groups=groups)
    return MobileNetV2(**common, norm="bn", groups=groups)


_CLASSES: dict[str, type[Backbone]] = {"lenet": LeNet, "resnet-gn": ResNetGN, "mobilenetv2-gn": MobileNetV2,
                                       "mobilenetv2-bn": MobileNetV2}


def input_normalisation(name: str) -> str:
    """What backbone ``name`` does to its [0, 1] input before its first layer."""
    if name not in _CLASSES:
        raise ValueError(f"unknown backbone {name!r}; choose one of {', '.join(BACKBONES)}")
    return _CLASSES[name].input_normalisation

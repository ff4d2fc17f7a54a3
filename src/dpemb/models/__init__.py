"""dpemb.models: backbones, embedding layer, classification head and its loss (softmax,
CosFace, ArcFace), pretrained weights, and which parameters train.

Every model takes float32 ``(N, C, H, W)`` in [0, 1] (C = 1 or 3) and normalises its
own input. See docs/MODELS.md.

Imports are lazy (PEP 562): ``from dpemb.models import BACKBONES`` does not load
torch, so the command line starts quickly.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> submodule that defines it
_WHERE = {
    "Backbone": "base", "count_parameters": "base", "embed": "embed", "make_head": "head",
    "LeNet": "lenet", "MobileNetV2": "mobilenetv2", "ResNetGN": "resnet_gn",
    "WeightsNotInstalledError": "pretrained",
    "imagenet_weights_available": "pretrained", "imagenet_weights_path": "pretrained",
    "load_imagenet_mobilenet_v2": "pretrained", "BACKBONES": "names", "build_backbone": "registry",
    "input_normalisation": "registry",
    "TRAINABLE_CHOICES": "names", "batchnorm_stats_frozen": "trainable",
    "freeze_batchnorm_stats": "trainable", "set_trainable": "trainable",
    "LOSSES": "margin", "LossConfig": "margin", "head_loss": "margin", "imprint_": "margin",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'dpemb.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__

"""dpemb.models: backbones, embedding layer, classification head, pretrained weights,
and which parameters train.

Every model takes float32 ``(N, C, H, W)`` in [0, 1] (C = 1 or 3) and normalises its
own input. See docs/MODELS.md.
"""

from .base import Backbone, count_parameters
from .embed import embed
from .head import make_head
from .lenet import LeNet
from .mobilenetv2 import MobileNetV2
from .pretrained import (
    WeightsNotInstalledError,
    imagenet_classifier,
    imagenet_weights_available,
    imagenet_weights_path,
    load_imagenet_mobilenet_v2,
)
from .registry import BACKBONES, build_backbone
from .resnet_gn import ResNetGN
from .trainable import TRAINABLE_CHOICES, batchnorm_stats_frozen, freeze_batchnorm_stats, set_trainable

__all__ = [
    "BACKBONES",
    "Backbone",
    "LeNet",
    "MobileNetV2",
    "ResNetGN",
    "TRAINABLE_CHOICES",
    "WeightsNotInstalledError",
    "batchnorm_stats_frozen",
    "build_backbone",
    "count_parameters",
    "embed",
    "freeze_batchnorm_stats",
    "imagenet_classifier",
    "imagenet_weights_available",
    "imagenet_weights_path",
    "load_imagenet_mobilenet_v2",
    "make_head",
    "set_trainable",
]

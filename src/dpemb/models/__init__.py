"""dpemb.models: backbones, embedding layer, classification head and its loss (softmax,
CosFace, ArcFace), pretrained weights, and which parameters train. See docs/MODELS.md.

Imports are lazy (PEP 562): ``from dpemb.models import BACKBONES`` does not load
torch, so the command line starts quickly.
"""

from __future__ import annotations

from dpemb.lazy import lazy_exports

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
__all__, __getattr__, __dir__ = lazy_exports(__name__, _WHERE)

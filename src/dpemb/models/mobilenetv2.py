"""``mobilenetv2-gn`` and ``mobilenetv2-bn``: MobileNetV2 (Sandler et al. 2018).

The module tree and parameter names follow torchvision's ``mobilenet_v2`` (``features.0.0.weight``
to ``features.18.1.bias``) so that its ImageNet state dict loads by name
(``dpemb.models.pretrained``); torchvision itself is never imported. The ImageNet classifier
is replaced by the embedding layer ``Linear(1280, embedding_dim)`` on the globally
average-pooled features. Normalisation, input and the stem stride: docs/MODELS.md, "Input and
output" and "Backbones". Private training needs ``mobilenetv2-gn`` or ``mobilenetv2-bn`` with
frozen statistics (``dpemb.models.freeze_batchnorm_stats``; the ImageNet loader's default).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .base import Backbone, NormFactory, group_norm_factory, make_divisible

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: (expansion t, output channels c, repeats n, first stride s), as in the paper
INVERTED_RESIDUAL_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
DEFAULT_GN_GROUPS = 2
LAST_CHANNEL = 1280


class ConvNormAct(nn.Sequential):
    """Conv2d (no bias) -> norm -> ReLU6; children named 0, 1, 2 as in torchvision."""

    def __init__(self, cin: int, cout: int, norm: NormFactory, *, kernel_size: int = 3,
                 stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, kernel_size, stride=stride, padding=(kernel_size - 1) // 2,
                      groups=groups, bias=False),
            norm(cout),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    """Expand 1x1 -> depthwise 3x3 -> linear 1x1 projection; residual when shapes match."""

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int, norm: NormFactory):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvNormAct(cin, hidden, norm, kernel_size=1))
        layers += [
            ConvNormAct(hidden, hidden, norm, stride=stride, groups=hidden),
            nn.Conv2d(hidden, cout, 1, bias=False),
            norm(cout),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv(x)
        return x + out if self.use_res_connect else out


class MobileNetV2(Backbone):
    """MobileNetV2 backbone with a GroupNorm (``norm="gn"``) or BatchNorm (``"bn"``) body."""

    input_normalisation = (f"grey repeated to 3 channels, then (x - mean) / std with the ImageNet mean "
                           f"{IMAGENET_MEAN} and std {IMAGENET_STD}, inside the model")

    def __init__(self, *, in_channels: int, image_size: int, embedding_dim: int = 128,
                 width: float = 1.0, norm: str = "gn", groups: int | None = None,
                 stem_stride: int | None = None):
        if norm not in ("gn", "bn"):
            raise ValueError(f"mobilenetv2: norm must be 'gn' or 'bn', got {norm!r}")
        self.name = f"mobilenetv2-{norm}"
        super().__init__(in_channels=in_channels, image_size=image_size,
                         embedding_dim=embedding_dim, width=width)
        self.norm_kind = norm
        # lists, not the module's tuples: attributes torch.jit.script can read (not weights)
        self.input_mean = list(IMAGENET_MEAN)
        self.input_std = list(IMAGENET_STD)
        if norm == "bn":
            if groups is not None:
                raise ValueError("mobilenetv2-bn: BatchNorm has no groups; pass groups=None")
            self.groups = None
            make_norm: NormFactory = nn.BatchNorm2d  # torchvision's eps 1e-5, momentum 0.1
        else:
            self.groups = DEFAULT_GN_GROUPS if groups is None else groups
            make_norm = group_norm_factory(self.groups, self.name)
        if stem_stride is None:
            stem_stride = 2 if image_size >= 64 else 1
        if stem_stride not in (1, 2):
            raise ValueError(f"{self.name}: stem_stride must be 1 or 2, got {stem_stride!r}")
        self.stem_stride = stem_stride

        cin = make_divisible(32 * width, 8)
        last = make_divisible(LAST_CHANNEL * max(1.0, width), 8)
        layers: list[nn.Module] = [ConvNormAct(3, cin, make_norm, stride=stem_stride)]
        for t, c, n, s in INVERTED_RESIDUAL_SETTING:
            cout = make_divisible(c * width, 8)
            for i in range(n):
                layers.append(InvertedResidual(cin, cout, s if i == 0 else 1, t, make_norm))
                cin = cout
        layers.append(ConvNormAct(cin, last, make_norm, kernel_size=1))
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.feature_dim = last
        self.embedding = nn.Linear(last, embedding_dim)
        # torchvision's initialisation for the body; default init for the embedding layer
        for m in self.features.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def normalize_input(self, x: Tensor) -> Tensor:
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        mean = torch.tensor(self.input_mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.input_std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
        return (x - mean) / std

    def _features(self, x: Tensor) -> Tensor:
        return self.pool(self.features(x)).flatten(1)

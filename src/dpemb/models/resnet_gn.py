"""``resnet-gn``: a small ResNet with GroupNorm for 28-64 px images (stages, widths and the
stem's stride: docs/MODELS.md, "Backbones"). GroupNorm normalises each example on its own,
so outputs never depend on the rest of the batch.
"""

from __future__ import annotations

from torch import Tensor, nn

from .base import Backbone, NormFactory, StridedPointwiseConv2d, group_norm_factory, make_divisible

STAGE_WIDTHS = (32, 64, 128, 256)
STAGE_STRIDES = (1, 2, 2, 2)
DEFAULT_GROUPS = 8


class BasicBlock(nn.Module):
    """conv3x3-norm-relu-conv3x3-norm plus a (projected when needed) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int, norm: NormFactory):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.norm1 = norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = norm(cout)
        self.act = nn.ReLU()
        # a projection, not nn.Conv2d(cin, cout, 1, stride=stride): see StridedPointwiseConv2d
        self.shortcut = (nn.Sequential(StridedPointwiseConv2d(cin, cout, stride), norm(cout))
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: Tensor) -> Tensor:
        out = self.act(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.act(out + self.shortcut(x))


class ResNetGN(Backbone):
    """Small GroupNorm ResNet; ``blocks`` gives the number of blocks per stage."""

    name = "resnet-gn"

    def __init__(self, *, in_channels: int, image_size: int, embedding_dim: int = 128,
                 width: float = 1.0, groups: int | None = None,
                 blocks: tuple[int, int, int, int] = (1, 1, 1, 1)):
        super().__init__(in_channels=in_channels, image_size=image_size,
                         embedding_dim=embedding_dim, width=width)
        if len(blocks) != len(STAGE_WIDTHS) or any(int(b) < 1 for b in blocks):
            raise ValueError(f"resnet-gn: blocks must be {len(STAGE_WIDTHS)} positive integers, got {blocks}")
        self.groups = DEFAULT_GROUPS if groups is None else groups
        norm = group_norm_factory(self.groups, "resnet-gn")
        widths = [make_divisible(c * width, 8) for c in STAGE_WIDTHS]
        self.stem_stride = 1 if image_size < 48 else 2
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, widths[0], 3, stride=self.stem_stride, padding=1, bias=False),
            norm(widths[0]),
            nn.ReLU(),
        )
        stages = []
        cin = widths[0]
        for cout, stride, n in zip(widths, STAGE_STRIDES, blocks):
            layers = [BasicBlock(cin, cout, stride, norm)]
            layers += [BasicBlock(cout, cout, 1, norm) for _ in range(int(n) - 1)]
            stages.append(nn.Sequential(*layers))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.feature_dim = cin
        self.embedding = nn.Linear(self.feature_dim, embedding_dim)

    def _features(self, x: Tensor) -> Tensor:
        return self.pool(self.stages(self.stem(x))).flatten(1)

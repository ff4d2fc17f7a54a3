"""``lenet``: the reference EMNIST model of DP-FedEmb (its layers: docs/MODELS.md,
"Backbones"). There are no normalisation layers, hence no cross-example interaction at
all; "norm-only" training of this model trains the embedding layer alone.
"""

from __future__ import annotations

from torch import Tensor, nn

from .base import Backbone, make_divisible


class LeNet(Backbone):
    """Two 5x5 convolutions with max pooling, then the dense embedding layer."""

    name = "lenet"
    min_image_size = 4
    fixed_input_size = True

    def __init__(self, *, in_channels: int, image_size: int, embedding_dim: int = 128,
                 width: float = 1.0):
        super().__init__(in_channels=in_channels, image_size=image_size,
                         embedding_dim=embedding_dim, width=width)
        c1 = make_divisible(32 * width, 8)
        c2 = make_divisible(64 * width, 8)
        self.conv1 = nn.Conv2d(in_channels, c1, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(c1, c2, kernel_size=5, padding=2)
        self.pool = nn.MaxPool2d(2)
        self.act = nn.ReLU()
        side = (image_size // 2) // 2
        self.feature_dim = c2 * side * side
        self.embedding = nn.Linear(self.feature_dim, embedding_dim)

    def _features(self, x: Tensor) -> Tensor:
        x = self.pool(self.act(self.conv1(x)))
        x = self.pool(self.act(self.conv2(x)))
        return x.flatten(1)

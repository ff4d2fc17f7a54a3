"""Backbone and trainable-set names, importable without torch (the CLI's choices)."""

#: every backbone name ``build_backbone`` accepts
BACKBONES: tuple[str, ...] = ("lenet", "resnet-gn", "mobilenetv2-gn", "mobilenetv2-bn")

#: every trainable set ``set_trainable`` accepts
TRAINABLE_CHOICES: tuple[str, ...] = ("all", "norm-only", "features")

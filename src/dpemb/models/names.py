"""Backbone and trainable-set names, importable without torch (the CLI's choices)."""

#: every backbone name ``build_backbone`` accepts
BACKBONES: tuple[str, ...] = ("lenet", "resnet-gn", "mobilenetv2-gn", "mobilenetv2-bn")

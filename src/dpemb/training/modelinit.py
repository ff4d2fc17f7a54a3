"""Build the backbone a run starts from: random, ImageNet weights, or a checkpoint."""

from __future__ import annotations

from typing import Any

import torch

from dpemb.models import Backbone, build_backbone, freeze_batchnorm_stats, load_imagenet_mobilenet_v2, set_trainable
from dpemb.training.checkpoint import CheckpointError, load_checkpoint
from dpemb.training.config import ModelConfig


def build_model(
    cfg: ModelConfig,
    image_shape: tuple[int, int, int],
    *,
    device: torch.device | str = "cpu",
    per_user_training: bool = False,
) -> tuple[Backbone, dict[str, Any]]:
    """Returns the backbone (trainable set applied) and the metadata a checkpoint
    needs to rebuild it (``backbone_name``, ``backbone_kwargs``).

    ``per_user_training`` (the federated algorithms): BatchNorm running statistics
    would carry data across users, so a BatchNorm backbone must start from trained
    weights and keeps its statistics frozen."""
    h, w, c = image_shape
    if h != w:
        raise ValueError(f"images must be square, got {h}x{w}")
    kwargs = {"in_channels": c, "image_size": h, "embedding_dim": cfg.embedding_dim, "width": cfg.width}
    model = build_backbone(cfg.backbone, **kwargs)
    if cfg.init == "imagenet":
        load_imagenet_mobilenet_v2(model)
    elif cfg.init != "random":
        state = load_checkpoint(cfg.init)
        if state["backbone_name"] != cfg.backbone or state["backbone_kwargs"] != kwargs:
            raise CheckpointError(
                f"--init {cfg.init} holds a {state['backbone_name']} {state['backbone_kwargs']}, "
                f"but this run builds a {cfg.backbone} {kwargs}; match --backbone/--width/"
                "--embedding-dim and the image size"
            )
        model.load_state_dict(state["backbone"])
    if cfg.backbone == "mobilenetv2-bn" and cfg.init == "random" and per_user_training:
        raise ValueError(
            "mobilenetv2-bn from a random start cannot be trained per user: BatchNorm "
            "statistics would mix users' data. Use --backbone mobilenetv2-gn, or start from "
            "trained weights (--init imagenet or a checkpoint), whose statistics stay frozen"
        )
    if cfg.backbone == "mobilenetv2-bn" and (cfg.init != "random" or per_user_training):
        freeze_batchnorm_stats(model)
    set_trainable(model, cfg.trainable)
    return model.to(device), {"backbone_name": cfg.backbone, "backbone_kwargs": kwargs}

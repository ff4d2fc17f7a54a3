"""Build the backbone a run starts from: random, ImageNet weights, or a trained model
(a release artifact or run directory; a checkpoint is refused: ``dpemb export`` writes
the artifact), and the provenance of that start (see ``dpemb.training.provenance``)."""

from __future__ import annotations

import os
from typing import Any

import torch

from dpemb.models import Backbone, build_backbone, freeze_batchnorm_stats, load_imagenet_mobilenet_v2, set_trainable
from dpemb.training.artifact import init_provenance, load_artifact, read_card, resolve_model
from dpemb.training.checkpoint import CheckpointError, read_lineage
from dpemb.training.config import ModelConfig
from dpemb.training.provenance import check_init


def read_init_card(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(provenance, the card's privacy section) of the artifact at ``path``, from its model
    card alone (the checks before training need no weights)."""
    return _card_record(read_card(resolve_model(path)), path)


def _card_record(card: dict[str, Any], path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any] | None]:
    privacy = card.get("privacy") if isinstance(card.get("privacy"), dict) else None
    return init_provenance(card, path), privacy


def build_model(
    cfg: ModelConfig,
    image_shape: tuple[int, int, int],
    *,
    device: torch.device | str = "cpu",
    per_user_training: bool = False,
    private_run: bool = False,
    allow_nonprivate_init: bool = False,
) -> tuple[Backbone, dict[str, Any]]:
    """The backbone (trainable set applied) and the metadata a checkpoint needs: how to
    rebuild it, the init's provenance and caveats, the card privacy of a trained init and,
    PRIVATE, the init chain's training users when the init is a run directory whose
    checkpoint is readable (``init_lineage``: the checkpoint keeps it, nothing released does).

    ``private_run`` (a DP run): an init that saw private users without DP is refused
    (``InitProvenanceError``) unless ``allow_nonprivate_init``; see
    ``dpemb.training.provenance.check_init``.

    ``per_user_training`` (the federated algorithms): BatchNorm running statistics
    would carry data across users, so a BatchNorm backbone must start from trained
    weights and keeps its statistics frozen."""
    h, w, c = image_shape
    if h != w:
        raise ValueError(f"images must be square, got {h}x{w}")
    kwargs = {"in_channels": c, "image_size": h, "embedding_dim": cfg.embedding_dim, "width": cfg.width}
    model = build_backbone(cfg.backbone, **kwargs)
    init_prov: Any = cfg.init
    init_lineage = init_privacy = None
    if cfg.init == "imagenet":
        load_imagenet_mobilenet_v2(model)
    elif cfg.init != "random":
        init_model, card = load_artifact(cfg.init)  # a checkpoint: ArtifactError (`dpemb export`)
        name, init_kwargs = card["backbone"]["name"], card["backbone"]["kwargs"]
        init_prov, init_privacy = _card_record(card, cfg.init)
        if name != cfg.backbone or init_kwargs != kwargs:
            raise CheckpointError(
                f"--init {cfg.init} holds a {name} {init_kwargs}, "
                f"but this run builds a {cfg.backbone} {kwargs}; match --backbone/--width/"
                "--embedding-dim and the image size"
            )
        model.load_state_dict(init_model.state_dict())
        init_lineage = read_lineage(cfg.init)  # private: the init run's users, when its checkpoint is readable
    caveats = check_init(init_prov, private_run=private_run, allow_nonprivate_init=allow_nonprivate_init,
                         init_name=str(cfg.init))
    if cfg.backbone == "mobilenetv2-bn" and cfg.init == "random" and per_user_training:
        raise ValueError(
            "mobilenetv2-bn from a random start cannot be trained per user: BatchNorm "
            "statistics would mix users' data. Use --backbone mobilenetv2-gn, or start from "
            "trained weights (--init imagenet or a checkpoint), whose statistics stay frozen"
        )
    if cfg.backbone == "mobilenetv2-bn" and (cfg.init != "random" or per_user_training):
        freeze_batchnorm_stats(model)
    set_trainable(model, cfg.trainable)
    return model.to(device), {"backbone_name": cfg.backbone, "backbone_kwargs": kwargs,
                              "init_provenance": init_prov, "init_caveats": caveats, "init_privacy": init_privacy,
                              "init_lineage": init_lineage}

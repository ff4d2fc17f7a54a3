"""Checkpoints: one file, written atomically, that carries everything a resume needs.

A checkpoint is a dict saved with ``torch.save``. Every checkpoint has::

    format          1
    kind            "centralized" | "dp-fedavg" | "dp-fedemb" | "dp-ftrl-fedemb"
    backbone_name   registry name, and backbone_kwargs to rebuild it
    backbone        the backbone's state dict
    step            optimizer steps (centralized) or rounds (federated) completed

plus the optimizer, RNG, sampler, noise and privacy-ledger states that the kind needs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from dpemb.models import Backbone, build_backbone
from dpemb.training.atomic import atomic_write

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    pass


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    state = {"format": FORMAT_VERSION, **state}
    return atomic_write(path, lambda p: torch.save(state, p))


def read_state(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> tuple[Path, Any]:
    """The object ``torch.save`` wrote to ``path`` (a run directory means its
    ``checkpoint.pt``) and the resolved file path; ``CheckpointError`` naming the file
    when it is missing or unreadable. Checks nothing about the content."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.pt"
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: give a run directory or a checkpoint.pt")
    try:
        return path, torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # torch raises several types for a truncated/corrupt file
        raise CheckpointError(f"{path} is not a readable dpemb checkpoint ({e})") from e


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path, state = read_state(path, map_location)
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not a dpemb checkpoint (format {FORMAT_VERSION})")
    return state


def backbone_from_checkpoint(
    path_or_state: str | os.PathLike | dict[str, Any], device: torch.device | str = "cpu"
) -> Backbone:
    """Rebuild the backbone a checkpoint (or run directory) holds, weights loaded."""
    state = path_or_state if isinstance(path_or_state, dict) else load_checkpoint(path_or_state)
    model = build_backbone(state["backbone_name"], **state["backbone_kwargs"])
    model.load_state_dict(state["backbone"])
    return model.to(device)

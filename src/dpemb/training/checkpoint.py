"""Checkpoints: PRIVATE training state, one file written atomically (mode 0600, in the
run's 0700 ``private/`` directory), that carries everything a resume needs.

It is as sensitive as the training data (what it holds: docs/PRIVACY.md, the
``private/checkpoint.pt`` row) and never needed downstream: the release is the artifact
(``dpemb.training.artifact``), which ``dpemb export`` writes from a checkpoint.

A checkpoint is a dict saved with ``torch.save``. Every checkpoint has::

    format          1
    kind            "centralized" | "dp-fedavg" | "dp-fedemb" | "dp-ftrl-fedemb"
    backbone_name   registry name, and backbone_kwargs to rebuild it
    backbone        the backbone's state dict
    step / round    optimizer steps (centralized) or rounds (federated) completed
    provenance      training data, split, privacy and the initialisation's provenance
    model_card      the card of the release artifact written with this checkpoint

plus ``config``, ``model_config``, the training data's fingerprints
(``dpemb.training.lineage``) and the optimizer, RNG, sampler, noise and privacy-ledger
states that the kind needs. A checkpoint without one of ``REQUIRED`` (a federated one:
also ``REQUIRED_FEDERATED``) was written by a pre-release dpemb and is refused
(``dpemb.training.errors.pre_release``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from dpemb.models import Backbone, build_backbone
from dpemb.atomic import atomic_write, make_private_dir
from dpemb.training.errors import RETRAIN, pre_release
from dpemb.training.rundir import checkpoint_in

FORMAT_VERSION = 1
#: what every checkpoint holds (a pre-release dpemb wrote checkpoints without some)
REQUIRED = ("kind", "backbone_name", "backbone_kwargs", "backbone", "config", "model_config", "provenance",
            "model_card", "data_fingerprint", "user_fingerprints")
#: what every federated checkpoint holds besides (``PrivacyPlan.state_dict``, the spec)
REQUIRED_FEDERATED = ("privacy_spec", "sampler", "mechanism", "ledger", "client_randomness")


class CheckpointError(ValueError):
    pass


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``path`` atomically with mode 0600 (a missing directory is
    created with mode 0700; a run's is ``RunDir.private_dir``)."""
    state = {"format": FORMAT_VERSION, **state}
    if not Path(path).parent.exists():
        make_private_dir(Path(path).parent)
    return atomic_write(path, lambda p: torch.save(state, p), private=True)


def read_state(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> tuple[Path, Any]:
    """The object ``torch.save`` wrote to ``path`` (a run directory means its
    ``private/checkpoint.pt``) and the resolved file path; ``CheckpointError`` naming the
    file when it is missing or unreadable. Checks nothing about the content."""
    path = Path(path)
    if path.is_dir():
        found = checkpoint_in(path)
        if found is None:
            raise CheckpointError(f"no checkpoint in {path} (looked for private/checkpoint.pt)")
        path = found
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: give a run directory or its private/checkpoint.pt")
    try:
        return path, torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # torch raises several types for a truncated/corrupt file
        raise CheckpointError(f"{path} is not a readable dpemb checkpoint ({e})") from e


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint at ``path`` (a run directory or the file), every ``REQUIRED``
    entry present: ``CheckpointError`` for anything else, ``PreReleaseError`` for a
    checkpoint of a pre-release dpemb."""
    path, state = read_state(path, map_location)
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not a dpemb checkpoint (format {FORMAT_VERSION})")
    required = REQUIRED if state.get("kind") == "centralized" else REQUIRED + REQUIRED_FEDERATED
    if any(k not in state for k in required):
        raise pre_release(path, RETRAIN)
    return state


def backbone_from_checkpoint(
    path_or_state: str | os.PathLike | dict[str, Any], device: torch.device | str = "cpu"
) -> Backbone:
    """Rebuild the backbone a checkpoint (or run directory) holds, weights loaded."""
    state = path_or_state if isinstance(path_or_state, dict) else load_checkpoint(path_or_state)
    model = build_backbone(state["backbone_name"], **state["backbone_kwargs"])
    model.load_state_dict(state["backbone"])
    return model.to(device)

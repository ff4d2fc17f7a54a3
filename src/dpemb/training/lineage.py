"""Which data a run and its ancestors trained on, recognised by content: PRIVATE state.

A training checkpoint (``private/checkpoint.pt``) holds::

    data_fingerprint         dataset_fingerprint of the training split (a resume on other
                             data is refused: ``dpemb.training.checkpoint.check_same_data``)
    user_fingerprints        [this run's training users, its init's, the init's init's, ...]:
                             a uint64 array per model of the chain, None (or the list
                             ending) where not known: an init given as a bare artifact.
                             A random or ImageNet start ends the list (no model of ours)

These digests are deterministic functions of the private data (``dpemb.data.fingerprint``)
and are never written to what is released: they stay in the checkpoint, and in a
curator-side feature file only as counts of shared users (``shared_with``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from dpemb.data.dataset import UserDataset
from dpemb.data.fingerprint import dataset_fingerprint, shared_users, user_fingerprints
from dpemb.training.checkpoint import CheckpointError, read_state
from dpemb.training.errors import RETRAIN, pre_release
from dpemb.training.rundir import checkpoint_in

Lineage = list[np.ndarray | None]


def training_record(train: UserDataset, init_lineage: Lineage | None) -> dict[str, Any]:
    """The checkpoint entries of a run on ``train`` (see the module docstring)."""
    users = user_fingerprints(train)
    return {"data_fingerprint": dataset_fingerprint(train, users),
            "user_fingerprints": [users, *(init_lineage or [])]}


def read_lineage(model: str | os.PathLike) -> Lineage | None:
    """``user_fingerprints`` of the run at ``model`` (a run directory whose private
    checkpoint this process can read), else None (a bare release artifact).
    ``PreReleaseError`` for a checkpoint of a pre-release dpemb (none recorded)."""
    path = checkpoint_in(model) if Path(model).is_dir() else None
    if path is None:
        return None
    try:
        _, state = read_state(path)
    except (CheckpointError, OSError):  # not readable by this user: the split rule decides
        return None
    if not isinstance(state, dict):
        return None
    if not isinstance(state.get("user_fingerprints"), list):
        raise pre_release(path, RETRAIN)
    return list(state["user_fingerprints"])


def shared_with(lineage: Lineage | None, users: np.ndarray) -> list[int | None] | None:
    """Per model of the chain: how many of ``users`` (fingerprints) it trained on (None:
    not known). PRIVATE counts."""
    if lineage is None:
        return None
    return [None if fp is None else shared_users(users, fp) for fp in lineage]

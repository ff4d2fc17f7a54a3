"""Checkpoints: PRIVATE training state, one file written atomically (mode 0600, in the
run's 0700 ``private/`` directory), that carries everything a resume needs.

It is as sensitive as the training data and never needed downstream: the release is the
artifact (``dpemb.training.artifact``), which ``dpemb export`` writes from a checkpoint.
A checkpoint is a dict saved with ``torch.save``; its keys: docs/PRIVACY.md, "The
checkpoint file". One without a key of ``REQUIRED`` (a federated one: also
``REQUIRED_FEDERATED``) was written by a pre-release dpemb and is refused
(``dpemb.training.errors.pre_release``). The data fingerprints (``dpemb.data.fingerprint``)
are functions of the private data, never released: they stay here, and in a curator-side
feature file only as counts of shared users (``shared_with``).

Resuming (``resume_from_checkpoint``) loads a checkpoint only when its settings are the
run's, apart from the performance-only ones (``check_same_config``), and its training
data the run's (``check_same_data``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dpemb.data.dataset import UserDataset
from dpemb.data.fingerprint import dataset_fingerprint, shared_users, user_fingerprints
from dpemb.models import Backbone, build_backbone
from dpemb.atomic import atomic_write, make_private_dir
from dpemb.training.config import (PERFORMANCE_ONLY, config_differences, describe_differences,
                                   unset_settings)
from dpemb.training.errors import RETRAIN, pre_release
from dpemb.training.rundir import RunDir, checkpoint_in

if TYPE_CHECKING:
    from dpemb.privacy import PrivacySpec

FORMAT_VERSION = 1
#: what every checkpoint holds (a pre-release dpemb wrote checkpoints without some)
REQUIRED = ("kind", "backbone_name", "backbone_kwargs", "backbone", "config", "model_config", "provenance",
            "model_card", "data_fingerprint", "user_fingerprints")
#: what every federated checkpoint holds besides (``PrivacyPlan.state_dict``, the spec)
REQUIRED_FEDERATED = ("privacy_spec", "sampler", "mechanism", "ledger", "client_randomness")


Lineage = list[np.ndarray | None]


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


#: ``resume`` values: False (start fresh), True (a checkpoint must exist), "auto"
#: (resume when a checkpoint exists, else start fresh: for restarts by torchrun or a
#: job scheduler)
RESUME_CHOICES = (False, True, "auto")


def resume_from_checkpoint(run: RunDir, resume: bool | str) -> bool:
    """Whether to load ``run``'s checkpoint; an error when ``resume`` is True and there
    is none (the run never reached its first checkpoint)."""
    if resume not in RESUME_CHOICES:
        raise ValueError(f"resume must be one of {RESUME_CHOICES}, got {resume!r}")
    if not resume:
        return False
    if run.checkpoint.exists():
        return True
    if resume == "auto":
        return False
    raise CheckpointError(
        f"--resume: there is no checkpoint in {run.checkpoint.parent} (the run stopped before its first "
        "checkpoint). Start it again without --resume, or with --resume auto to resume only when a "
        "checkpoint exists."
    )


def check_same_config(run: RunDir, saved: str, current: str) -> None:
    """Refuse to resume when a setting other than a performance-only one changed,
    naming each one; ``PreReleaseError`` when the saved config lacks a setting (a
    pre-release dpemb wrote it)."""
    if saved == current:
        return
    if unset_settings(saved, current):
        raise pre_release(run.checkpoint, RETRAIN)
    diff = describe_differences(saved, current)
    if diff:
        raise CheckpointError(
            f"{run.checkpoint} was written with other settings: {diff}. Resume with the original flags "
            f"(only {', '.join(PERFORMANCE_ONLY)} may change on resume)."
        )


def check_same_data(run: RunDir, saved: str, current: str) -> None:
    """Refuse to resume a checkpoint written on other training data
    (``data_fingerprint``): the epsilon and the model card would name the wrong
    data."""
    if saved == current:
        return
    raise CheckpointError(
        f"{run.checkpoint} was trained on other data (other examples, users or labels); resuming would mix "
        "two datasets under one epsilon and model card. "
        "Resume with the original --data and --train-split, or start a new run with another --out."
    )


def more_rounds_refusal(run: RunDir, saved_config: str | None, current_config: str,
                        saved_spec: dict | None, done: int, current_spec: "PrivacySpec") -> str | None:
    """When the only privacy setting that changed on resume is the number of rounds: why a
    run is not extended in place, the command that trains it further (a new run started
    from its release, ``--init``), and the epsilon of both together, composed by
    dp_accounting (RDP). None for any other change (the caller states the differences)."""
    import dp_accounting

    from dpemb.privacy import PrivacySpec, compute_epsilon, describe_epsilon
    from dpemb.privacy.statements import describe_schedule
    from dpemb.privacy.events import training_event

    if saved_config is None or not isinstance(saved_spec, dict):
        return None
    diffs = [d for d in config_differences(saved_config, current_config) if d.startswith("privacy.")]
    if diffs != ["privacy.rounds"]:
        return None
    saved = PrivacySpec(**saved_spec)
    planned, wanted = saved.rounds, current_spec.rounds
    head = (f"{run.path} was planned for {planned} rounds and ran {done}; a run is not extended in place: its "
            f"epsilon, schedule and model card are those of its planned rounds.")
    if done < planned:
        return f"{head} Resume it with its own --rounds {planned}; to train on after that, start a new run from it."
    if wanted <= done or saved.nonprivate:
        return f"{head} To train it further, start a new run from it: `dpemb train --init {run.path} --out NEW_DIR ...`."
    extra = wanted - done
    event = dp_accounting.ComposedDpEvent([training_event(saved, done),
                                          training_event(replace(current_spec, rounds=extra), extra)])
    delta = saved.resolved_delta
    eps = compute_epsilon(event, delta, "rdp", relation=saved.relation)
    return (f"{head} To train it for {extra} more rounds, start a new run from its release with the same flags and "
            f"`--init {run.path} --out NEW_DIR --rounds {extra}`. That run's epsilon composes with this one's: "
            "total with the initialisation: " + describe_epsilon(eps, accountant="rdp", delta=delta, unit=saved.unit,
                                                                 relation=saved.relation,
                                                                 schedule=describe_schedule(saved))
            + f" for both runs together ({done} + {extra} rounds; the new run prints it too).")


def training_record(train: UserDataset, init_lineage: Lineage | None) -> dict[str, Any]:
    """The checkpoint entries of a run on ``train`` (see the module docstring: PRIVATE)."""
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

"""Resuming a run: whether to, and refusing one whose settings changed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpemb.training.checkpoint import CheckpointError
from dpemb.training.config import PERFORMANCE_ONLY, describe_differences, unset_settings
from dpemb.training.errors import RETRAIN, pre_release

if TYPE_CHECKING:
    from dpemb.training.rundir import RunDir

#: ``resume`` values: False (start fresh), True (a checkpoint must exist), "auto"
#: (resume when a checkpoint exists, else start fresh: for restarts by torchrun or a
#: job scheduler)
RESUME_CHOICES = (False, True, "auto")


def resume_from_checkpoint(run: "RunDir", resume: bool | str) -> bool:
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


def check_same_config(run: "RunDir", saved: str, current: str) -> None:
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


def check_same_data(run: "RunDir", saved: str, current: str) -> None:
    """Refuse to resume a checkpoint written on other training data
    (``dpemb.training.lineage``): the epsilon and the model card would name the wrong
    data."""
    if saved == current:
        return
    raise CheckpointError(
        f"{run.checkpoint} was trained on other data (other examples, users or labels); resuming would mix "
        "two datasets under one epsilon and model card. "
        "Resume with the original --data and --train-split, or start a new run with another --out."
    )

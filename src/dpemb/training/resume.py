"""Resuming a run: whether to, and refusing one whose settings changed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpemb.training.checkpoint import CheckpointError
from dpemb.training.config import PERFORMANCE_ONLY, config_differences, describe_differences, unset_settings
from dpemb.training.errors import RETRAIN, pre_release

if TYPE_CHECKING:
    from dpemb.privacy.accounting import PrivacySpec
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


def more_rounds_refusal(run: "RunDir", saved_config: str | None, current_config: str,
                        saved_spec: dict | None, done: int, current_spec: "PrivacySpec") -> str | None:
    """When the only privacy setting that changed on resume is the number of rounds: why a
    run is not extended in place, the command that trains it further (a new run started
    from its release, ``--init``), and the epsilon of both together, composed by
    dp_accounting (RDP). None for any other change (the caller states the differences)."""
    from dataclasses import replace

    import dp_accounting

    from dpemb.privacy.accounting import PrivacySpec, compute_epsilon, describe_epsilon
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

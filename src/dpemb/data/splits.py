"""Choosing evaluation identities and public users of a UserDataset.

Evaluation identities are held out entirely (no user trains on them), so training
and evaluation identities are disjoint, as in the paper's EMNIST protocol (train on
classes 0-35, verify on unseen 36-61). Public users are users whose data may be
used for non-private pretraining; ``UserDataset.split`` excludes them from the
private training set. Public users are data *about which no privacy claim is made*:
choosing them is a data-handling decision, not a private computation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from dpemb.data.dataset import DataError, UserDataset


def _check_fraction(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value < 1.0):
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def _count(fraction: float, available: int) -> int:
    """round(fraction * available), at least 1 when fraction > 0."""
    if fraction <= 0:
        return 0
    return max(1, int(round(fraction * available)))


def parse_label_spec(spec: str) -> list[int]:
    """``"36-61"``, ``"1,2,5"`` or ``"0-3,7"`` -> sorted unique label indices."""
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if a > b:
                    raise ValueError
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(
                f"bad label list {spec!r}: use indices and ranges such as 36-61 or 1,2,5"
            ) from None
    if not out:
        raise ValueError(f"bad label list {spec!r}: no label given")
    if min(out) < 0:
        raise ValueError(f"bad label list {spec!r}: label indices are >= 0")
    return sorted(out)


def assign_splits(
    ds: UserDataset,
    *,
    eval_identity_fraction: float = 0.0,
    eval_labels: Sequence[int] | None = None,
    public_user_fraction: float = 0.0,
    seed: int = 0,
) -> UserDataset:
    """Return ``ds`` with ``eval_labels`` and ``public_users`` set (arrays are shared).

    Evaluation identities: ``eval_labels`` (label indices) when given, else a
    ``eval_identity_fraction`` share of the identities that have examples, chosen
    uniformly. Public users: a ``public_user_fraction`` share of the users that hold
    at least one non-evaluation example, chosen uniformly. Any previous
    ``eval_labels``/``public_users`` are replaced. Deterministic given ``seed``; the
    two choices use independent random streams. Raises ``ValueError`` for a bad
    fraction, :class:`DataError` when a label index does not exist or when no
    training identity or private user would remain.
    """
    _check_fraction("eval_identity_fraction", eval_identity_fraction)
    _check_fraction("public_user_fraction", public_user_fraction)
    if eval_labels is not None and eval_identity_fraction > 0:
        raise ValueError("give eval_labels or eval_identity_fraction, not both")

    counts = np.bincount(ds.labels, minlength=ds.num_classes)
    present = np.flatnonzero(counts > 0)
    if eval_labels is not None:
        chosen = sorted({int(x) for x in eval_labels})
        outside = [x for x in chosen if x < 0 or x >= ds.num_classes]
        if outside:
            raise DataError(
                f"eval label index {outside[0]} does not exist: the dataset has "
                f"{ds.num_classes} identities (indices 0-{ds.num_classes - 1}); see "
                "`dpemb data inspect`"
            )
    else:
        k = _count(eval_identity_fraction, len(present))
        rng = np.random.default_rng([seed, 0])
        chosen = sorted(int(x) for x in rng.permutation(present)[:k])
    if chosen and len(np.setdiff1d(present, chosen)) == 0:
        raise DataError(
            f"all {len(present)} identities with examples would be held out for "
            "evaluation; lower the evaluation share"
        )

    is_eval = np.zeros(ds.num_classes, dtype=bool)
    is_eval[chosen] = True
    train_per_user = np.bincount(
        ds.user_of_example(),
        weights=(~is_eval[ds.labels]).astype(np.float64),
        minlength=ds.num_users,
    )
    train_users = np.flatnonzero(train_per_user > 0)
    n_public = _count(public_user_fraction, len(train_users))
    if n_public and n_public >= len(train_users):
        raise DataError(
            f"{n_public} public user(s) would leave no private training user among "
            f"{len(train_users)}; lower the public share"
        )
    rng = np.random.default_rng([seed, 1])
    public = sorted(int(u) for u in rng.permutation(train_users)[:n_public])

    source = dict(ds.source)
    source["splits"] = {
        "eval_identity_fraction": eval_identity_fraction,
        "eval_labels_given": eval_labels is not None,
        "public_user_fraction": public_user_fraction,
        "seed": seed,
    }
    return dataclasses.replace(ds, eval_labels=chosen, public_users=public, source=source)

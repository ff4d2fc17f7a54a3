"""Choosing the roles of a UserDataset's identities and users (the roles, and the splits
they make, are described in :mod:`dpemb.data.dataset`). Validation is for choosing
hyperparameters, test for the numbers that are reported. Public users' data may be used
for non-private pretraining: it is data *about which no privacy claim is made*. Choosing
any of these roles is a data-handling decision made before training, not a private
computation.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from dpemb.data.dataset import (TEST, TRAIN, VALIDATION, DataError, UserDataset, role_arrays,
                                split_counts)

# held out by `dpemb data make` and assign_splits unless told otherwise
DEFAULT_EVAL_IDENTITY_FRACTION = 0.1
DEFAULT_VALIDATION_IDENTITY_FRACTION = 0.1


def _check_fraction(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value < 1.0):
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")


def _count(fraction: float, available: int, at_least: int = 1) -> int:
    """round(fraction * available), at least ``at_least`` when fraction > 0."""
    if fraction <= 0:
        return 0
    return max(at_least, int(round(fraction * available)))


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


def _labels_given(ds: UserDataset, labels: Sequence[int], what: str) -> list[int]:
    chosen = sorted({int(x) for x in labels})
    outside = [x for x in chosen if x < 0 or x >= ds.num_classes]
    if outside:
        raise DataError(
            f"{what} label index {outside[0]} does not exist: the dataset has "
            f"{ds.num_classes} identities (indices 0-{ds.num_classes - 1}); see "
            "`dpemb data inspect`"
        )
    return chosen


def _draw_labels(
    candidates: np.ndarray, fraction: float, n_present: int, stream: list[int]
) -> list[int]:
    """A ``fraction`` share of ``n_present`` identities (at least 2) drawn uniformly from
    ``candidates``."""
    picked = np.random.default_rng(stream).permutation(candidates)[: _count(fraction, n_present, 2)]
    return sorted(int(x) for x in picked)


def _pick_users(
    role: int,
    count: int,
    free: np.ndarray,
    held: dict[int, np.ndarray],
    total: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """``count`` of the ``free`` users for a held-out ``role``: first the users whose
    examples are all of that role's identities, then users holding some, then users
    holding none (users holding only the other held-out role's identities last);
    uniformly at random within each tier."""
    other = VALIDATION if role == TEST else TEST
    pure = (held[role] == total) & (total > 0)
    tier = np.where(
        pure, 0, np.where(held[role] > 0, 1, np.where(held[other] == total, 3, 2))
    )
    cand = rng.permutation(np.flatnonzero(free))
    cand = cand[np.argsort(tier[cand], kind="stable")]
    return np.sort(cand[:count])


def assign_splits(
    ds: UserDataset,
    *,
    eval_identity_fraction: float | None = None,
    eval_labels: Sequence[int] | None = None,
    validation_identity_fraction: float | None = None,
    validation_labels: Sequence[int] | None = None,
    eval_user_fraction: float | None = None,
    validation_user_fraction: float | None = None,
    public_user_fraction: float = 0.0,
    seed: int = 0,
) -> UserDataset:
    """Return ``ds`` with its identity and user roles set (arrays are shared).

    How test, validation and public identities and users are chosen, with the defaults, the
    two-identity minimum and the per-choice random streams: docs/DATA.md, "How the roles are
    chosen". Examples whose user and identity roles differ are in no split; previous roles are
    replaced; deterministic given ``seed``. Raises ``ValueError`` for a bad fraction,
    :class:`DataError` when a label index does not exist, when test and validation identities
    overlap, or when no training identity, private training user or held-out example would
    remain.
    """
    for name, value in (
        ("eval_identity_fraction", eval_identity_fraction),
        ("validation_identity_fraction", validation_identity_fraction),
        ("eval_user_fraction", eval_user_fraction),
        ("validation_user_fraction", validation_user_fraction),
    ):
        if value is not None:
            _check_fraction(name, value)
    _check_fraction("public_user_fraction", public_user_fraction)
    if eval_labels is not None and eval_identity_fraction is not None:
        raise ValueError("give eval_labels or eval_identity_fraction, not both")
    if validation_labels is not None and validation_identity_fraction is not None:
        raise ValueError("give validation_labels or validation_identity_fraction, not both")

    counts = np.bincount(ds.labels, minlength=ds.num_classes)
    present = np.flatnonzero(counts > 0)
    # identities
    if eval_labels is not None:
        test_ids = _labels_given(ds, eval_labels, "eval")
    else:
        if eval_identity_fraction is None:
            eval_identity_fraction = DEFAULT_EVAL_IDENTITY_FRACTION
        test_ids = _draw_labels(present, eval_identity_fraction, len(present), [seed, 0])
    if validation_labels is not None:
        val_ids = _labels_given(ds, validation_labels, "validation")
        both = sorted(set(val_ids) & set(test_ids))
        if both:
            raise DataError(
                f"label index {both[0]} ({ds.label_names[both[0]]!r}) is given as both a "
                "test (eval) and a validation identity; the groups must be disjoint"
            )
    else:
        if validation_identity_fraction is None:
            validation_identity_fraction = DEFAULT_VALIDATION_IDENTITY_FRACTION
        rest = np.setdiff1d(present, test_ids)
        val_ids = _draw_labels(rest, validation_identity_fraction, len(present), [seed, 2])
    held_out = set(test_ids) | set(val_ids)
    if held_out and len(np.setdiff1d(present, sorted(held_out))) == 0:
        raise DataError(
            f"all {len(present)} identities with examples would be held out for "
            f"validation ({len(val_ids)}) and test ({len(test_ids)}); lower the held-out "
            "shares (CLI: --eval-identity-fraction / --validation-identity-fraction, 0 holds "
            "out none)"
        )

    label_role = np.full(ds.num_classes, TRAIN, dtype=np.int8)
    label_role[val_ids] = VALIDATION
    label_role[test_ids] = TEST
    ex_user = ds.user_of_example()
    ex_role = label_role[ds.labels]
    total = np.bincount(ex_user, minlength=ds.num_users)
    held = {
        r: np.bincount(ex_user[ex_role == r], minlength=ds.num_users)
        for r in (TRAIN, VALIDATION, TEST)
    }
    n_present = max(len(present), 1)
    free = np.ones(ds.num_users, dtype=bool)
    chosen_users: dict[int, np.ndarray] = {}
    for role, ids, frac, stream, what in (
        (TEST, test_ids, eval_user_fraction, 3, "eval_user_fraction"),
        (VALIDATION, val_ids, validation_user_fraction, 4, "validation_user_fraction"),
    ):
        present_ids = int(np.sum(counts[ids] > 0)) if ids else 0
        if frac is None:
            pure = int(np.sum((held[role] == total) & (total > 0) & free))
            holders = int(np.sum((held[role] > 0) & free))
            share = _count(present_ids / n_present, ds.num_users)
            k = min(max(share, pure), holders) if present_ids else 0
        else:
            k = _count(frac, ds.num_users)
            if present_ids and k == 0:
                raise DataError(
                    f"{what}=0 holds out no user for the {len(ids)} held-out identities, so "
                    "their split would be empty; give a share > 0"
                )
        users = _pick_users(role, k, free, held, total, np.random.default_rng([seed, stream]))
        if present_ids and held[role][users].sum() == 0:
            raise DataError(
                f"none of the {len(users)} users held out ({what}) holds an example of the "
                f"{len(ids)} held-out identities; raise the user share"
            )
        free[users] = False
        chosen_users[role] = users

    train_users = np.flatnonzero(free & (held[TRAIN] > 0))
    n_public = _count(public_user_fraction, len(train_users))
    if len(train_users) == 0 or (n_public and n_public >= len(train_users)):
        raise DataError(
            f"{n_public} public user(s) would leave no private training user among "
            f"{len(train_users)} users holding training identities (after "
            f"{len(chosen_users[TEST])} test and {len(chosen_users[VALIDATION])} validation "
            "users); lower the public share or the held-out shares (CLI: "
            "--eval-identity-fraction / --validation-identity-fraction, 0 holds out none)"
        )
    rng = np.random.default_rng([seed, 1])
    public = sorted(int(u) for u in rng.permutation(train_users)[:n_public])

    source = dict(ds.source)
    source["splits"] = {
        "eval_identity_fraction": eval_identity_fraction,
        "eval_labels_given": eval_labels is not None,
        "validation_identity_fraction": validation_identity_fraction,
        "validation_labels_given": validation_labels is not None,
        "eval_user_fraction": eval_user_fraction,  # None: automatic (see assign_splits)
        "validation_user_fraction": validation_user_fraction,
        "test_users": len(chosen_users[TEST]),
        "validation_users": len(chosen_users[VALIDATION]),
        "public_user_fraction": public_user_fraction,
        "seed": seed,
    }
    out = dataclasses.replace(
        ds,
        eval_labels=list(test_ids),
        validation_labels=list(val_ids),
        eval_users=[int(u) for u in chosen_users[TEST]],
        validation_users=[int(u) for u in chosen_users[VALIDATION]],
        public_users=public,
        source=source,
    )
    parts = split_counts(out)
    if isinstance(parts, dict) and parts["train"]["examples"] == 0:
        raise DataError("no private training example would remain; lower the held-out shares")
    return out


def subsample_training_users(ds: UserDataset, users: int, seed: int = 0) -> UserDataset:
    """``ds`` with ``users`` of its private training users, drawn uniformly at random, and
    every test, validation and public user kept as they are.

    This is the DP-FedEmb paper's simulation protocol on a population one holds: train on a
    subsample, then state epsilon for the whole population by extrapolation (docs/PRIVACY.md,
    "Calibration and extrapolation"), scored on the same held-out people and pretrained on
    the same public users as a run on everyone. The draw (``numpy.random.default_rng([seed,
    3])`` over the training users' indices) looks at which users hold the role, never at
    their data. The subsample is recorded in ``source["subsample"]``.
    """
    _, user_role = role_arrays(ds)
    train_users = np.flatnonzero(user_role == TRAIN)
    if not 0 < users <= len(train_users):
        raise DataError(
            f"{ds.origin or 'the dataset'} has {len(train_users):,} private training users; "
            f"ask for 1 to {len(train_users):,} of them (got {users:,})"
        )
    keep = user_role != TRAIN
    keep[np.random.default_rng([seed, 3]).choice(train_users, users, replace=False)] = True
    out = ds.select(keep[ds.user_of_example()])
    out.source["subsample"] = {"training_users": users, "of": len(train_users), "seed": seed}
    return out


def held_out_subsets(splits: Any, max_examples: int | None, seed: int = 0) -> tuple[Any, Any]:
    """(validation, test) of ``splits``, each cut to ``max_examples`` examples drawn at
    random (None: whole). The draw is fixed: one ``numpy.random.default_rng(seed)``,
    validation first, then test, examples kept in order and the labels renumbered; so
    ``dpemb train --eval-max-examples N``, ``dpemb eval --max-examples N`` and the
    experiments score the same images. Held-out identities only: nothing of the
    training split is involved."""
    if max_examples is not None and max_examples < 2:
        raise ValueError(f"--eval-max-examples must be at least 2, got {max_examples}")
    rng = np.random.default_rng(seed)

    def capped(part: Any) -> Any:
        if max_examples is None or part.num_examples <= max_examples:
            return part
        keep = np.zeros(part.num_examples, dtype=bool)
        keep[rng.choice(part.num_examples, max_examples, replace=False)] = True
        return part.select(keep, relabel=True)

    validation = capped(splits.validation)
    return validation, capped(splits.eval)

"""Neighbouring relations and the L2 sensitivity of a sum of clipped client vectors.

The unit of privacy is a user (or an example, when every "user" holds one example). Two datasets
are neighbours when they differ in one unit, in one of three ways:

- ``ADD_REMOVE``: one user's data is added or removed (the population count changes).
- ``REPLACE_ONE``: one user's data is replaced by any other user's data (the count is public and
  fixed).
- ``REPLACE_SPECIAL``: one user's data is replaced by a "null" user that contributes nothing
  (Kairouz et al. 2021, Definition 1.1); the count is public and fixed. Tree aggregation
  (DP-FTRL) is accounted under it.

Sensitivity of S = sum over virtual clients of clip_C(Delta_client), each sampled user in exactly
ONE client of K users (``sampling``): C for K = 1 under add/remove or replace-special, else 2C
(table and reasons: docs/PRIVACY.md, "Conventions"). The noise multiplier z used everywhere in
dpemb is RELATIVE TO THIS SENSITIVITY (noise std = z x sensitivity) and is what the accountant
sees; a DP-FedEmb paper z_paper at K > 1 is our z_paper / 2 (same section).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from dpemb.privacy._checks import positive_finite, positive_int
from dpemb.privacy.dependency import accountant_missing

if TYPE_CHECKING:
    from dp_accounting import NeighboringRelation


class Relation(str, Enum):
    """The neighbouring relation a guarantee is stated under."""

    ADD_REMOVE = "add-remove"
    REPLACE_ONE = "replace-one"
    REPLACE_SPECIAL = "replace-special"


def parse_relation(value: "Relation | str") -> Relation:
    """``Relation`` from itself or its string value; a clear ValueError otherwise."""
    if isinstance(value, Relation):
        return value
    try:
        return Relation(str(value))
    except ValueError:
        names = ", ".join(r.value for r in Relation)
        raise ValueError(f"unknown neighbouring relation {value!r}; use one of {names}") from None


def user_sensitivity(clip_norm: float, users_per_client: int, relation: Relation) -> float:
    """L2 sensitivity of a sum of per-virtual-client vectors clipped to ``clip_norm``.

    Assumes each user contributes to at most ONE virtual client per round (the
    grouping of ``dpemb.privacy.sampling`` guarantees it). See the module docstring
    for the derivation: C for K = 1 under add/remove or replace-special, 2C otherwise.
    """
    relation = parse_relation(relation)
    clip_norm = positive_finite("clip norm", clip_norm)
    users_per_client = positive_int("users per client (K)", users_per_client)
    if relation is Relation.REPLACE_ONE:
        return 2.0 * clip_norm
    return clip_norm if users_per_client == 1 else 2.0 * clip_norm


def to_dp_accounting(relation: Relation) -> "NeighboringRelation":
    """The dp_accounting ``NeighboringRelation`` with the same meaning."""
    try:  # imported here: a spec (and a non-accounting caller) does not need dp_accounting
        from dp_accounting import NeighboringRelation
    except ImportError as e:
        raise accountant_missing(e) from None
    return {
        Relation.ADD_REMOVE: NeighboringRelation.ADD_OR_REMOVE_ONE,
        Relation.REPLACE_ONE: NeighboringRelation.REPLACE_ONE,
        Relation.REPLACE_SPECIAL: NeighboringRelation.REPLACE_SPECIAL,
    }[parse_relation(relation)]


def describe_relation(relation: Relation, unit: str = "user") -> str:
    """Short human name, e.g. ``add/remove-one-user``."""
    relation = parse_relation(relation)
    return {
        Relation.ADD_REMOVE: f"add/remove-one-{unit}",
        Relation.REPLACE_ONE: f"replace-one-{unit}",
        Relation.REPLACE_SPECIAL: f"replace-one-{unit}-by-null",
    }[relation]

"""Sensitivity table of relations.user_sensitivity and the relation names."""

import math

import pytest
from dp_accounting import NeighboringRelation

from dpemb.privacy.relations import (
    Relation,
    describe_relation,
    parse_relation,
    to_dp_accounting,
    user_sensitivity,
)


@pytest.mark.parametrize(
    "k, relation, factor",
    [
        (1, Relation.ADD_REMOVE, 1.0),
        (1, Relation.REPLACE_SPECIAL, 1.0),
        (1, Relation.REPLACE_ONE, 2.0),
        (2, Relation.ADD_REMOVE, 2.0),
        (4, Relation.REPLACE_SPECIAL, 2.0),
        (8, Relation.REPLACE_ONE, 2.0),
    ],
)
def test_sensitivity_table(k, relation, factor):
    assert user_sensitivity(0.3, k, relation) == pytest.approx(factor * 0.3)


def test_relation_strings_parse():
    assert parse_relation("add-remove") is Relation.ADD_REMOVE
    assert user_sensitivity(1.0, 3, "replace-one") == 2.0
    with pytest.raises(ValueError, match="add-remove"):
        parse_relation("add-one")


@pytest.mark.parametrize("clip", [0.0, -1.0, math.inf, math.nan, "1"])
def test_bad_clip_norm(clip):
    with pytest.raises(ValueError, match="clip norm"):
        user_sensitivity(clip, 1, Relation.ADD_REMOVE)


@pytest.mark.parametrize("k", [0, -2, 1.5, True])
def test_bad_users_per_client(k):
    with pytest.raises(ValueError, match="users per client"):
        user_sensitivity(1.0, k, Relation.ADD_REMOVE)


def test_dp_accounting_mapping_and_names():
    assert to_dp_accounting(Relation.ADD_REMOVE) is NeighboringRelation.ADD_OR_REMOVE_ONE
    assert to_dp_accounting(Relation.REPLACE_ONE) is NeighboringRelation.REPLACE_ONE
    assert to_dp_accounting(Relation.REPLACE_SPECIAL) is NeighboringRelation.REPLACE_SPECIAL
    assert describe_relation(Relation.ADD_REMOVE) == "add/remove-one-user"
    assert describe_relation(Relation.REPLACE_ONE, "example") == "replace-one-example"

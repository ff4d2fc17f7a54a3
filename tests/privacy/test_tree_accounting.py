"""S (worst-case sum of squared participations over tree nodes) and the DP-FTRL epsilon."""

import itertools
import math

import dp_accounting as dpa
import pytest
from dp_accounting import NeighboringRelation
from dp_accounting.rdp import RdpAccountant

from dpemb.privacy import PrivacySpec, compute_epsilon, epsilon_for, training_event
from dpemb.privacy.tree_accounting import TreeParticipation, tree_depth


def complete_nodes(t):
    """All dyadic blocks [a, b) inside [0, t), independently of the implementation."""
    nodes, size = [], 1
    while size <= t:
        nodes += [(a, a + size) for a in range(0, t - size + 1, size)]
        size *= 2
    return nodes


def brute_force(t, r):
    nodes = complete_nodes(t)
    epochs = [range(e * r, min((e + 1) * r, t)) for e in range(math.ceil(t / r))]
    best = 0
    for choice in itertools.product(*[[None, *ep] for ep in epochs]):
        rounds = [c for c in choice if c is not None]
        best = max(best, sum(sum(a <= x < b for x in rounds) ** 2 for a, b in nodes))
    return best


@pytest.mark.parametrize("r", [1, 2, 3, 4, 5])
def test_dynamic_programme_equals_brute_force(r):
    tp = TreeParticipation(r)
    for t in range(1, 15):
        if math.ceil(t / r) <= 7:
            assert tp.sum_of_squares(t) == brute_force(t, r), (t, r)


def test_single_participation_is_tree_depth():
    tp = TreeParticipation(10_000)
    for t in (1, 2, 3, 4, 7, 8, 100, 1023, 1024):
        assert tp.sum_of_squares(t) == tree_depth(t) == math.ceil(math.log2(t + 1))


def test_restarts_sum_depth_per_tree():
    tp = TreeParticipation(6, restart=True)
    assert tp.sum_of_squares(15) == 2 * tree_depth(6) + tree_depth(3)
    # one tree without restarts is never cheaper
    assert TreeParticipation(6).sum_of_squares(15) >= tp.sum_of_squares(15)


def test_paper_conversion_rho_to_epsilon():
    """Xu et al. 2022: DP-FTRL-FedEmb rho = 1.28 zCDP is epsilon ~ 9.67 at delta = 1e-7."""
    eps = compute_epsilon(dpa.ZCDpEvent(1.28), 1e-7, "rdp")
    assert eps == pytest.approx(9.67, abs=0.02)


def test_tree_epsilon_without_restarts_is_zcdp_with_s():
    spec = PrivacySpec(population=1000, clients_per_round=10, users_per_client=2, rounds=400,
                       noise_multiplier=3.0, mechanism="tree")
    assert spec.sampling == "epoch" and spec.rounds_per_epoch == 50
    big_s = TreeParticipation(50).sum_of_squares(400)
    acc = RdpAccountant()
    acc.compose(dpa.ZCDpEvent(big_s / (2 * 3.0**2)))
    assert epsilon_for(spec, "rdp") == pytest.approx(acc.get_epsilon(spec.resolved_delta), rel=1e-12)
    # the PLD form is the Gaussian mechanism with multiplier z / sqrt(S): same RDP curve, tighter epsilon
    assert isinstance(training_event(spec, accountant="pld"), dpa.GaussianDpEvent)
    assert epsilon_for(spec, "pld") <= epsilon_for(spec, "rdp")


def test_tree_with_restarts_matches_dp_accounting_single_epoch_events():
    spec = PrivacySpec(population=1000, clients_per_round=10, users_per_client=2, rounds=230,
                       noise_multiplier=2.0, mechanism="tree", tree_restarts=True)
    acc = RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_SPECIAL)
    acc.compose(dpa.SingleEpochTreeAggregationDpEvent(2.0, 50), 4)
    acc.compose(dpa.SingleEpochTreeAggregationDpEvent(2.0, 30))
    assert epsilon_for(spec, "rdp") == pytest.approx(acc.get_epsilon(1e-4), rel=1e-12)

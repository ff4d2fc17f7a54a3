"""Epsilon from dp_accounting events: pinned, cross-checked with Opacus, ordered, monotone."""

import math
from dataclasses import replace

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import NeighboringRelation
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

from dpemb.privacy import (
    EpsilonCurve,
    PrivacySpec,
    PrivacySpecError,
    Relation,
    UnsupportedAccountantError,
    compute_epsilon,
    describe_epsilon,
    epsilon_for,
    gaussian_releases_event,
    round_event,
    supported_accountants,
    training_event,
)


def spec_q(q_num, n, z, t, delta=None, **kw):
    return PrivacySpec(population=n, clients_per_round=q_num, noise_multiplier=z, rounds=t, delta=delta, **kw)


def fresh_pld(spec, interval=None):
    """dp_accounting's Poisson PLD epsilon for ``spec``, computed afresh: at dpemb's chosen
    interval and truncation (the same computation), or at ``interval`` with dp_accounting's
    defaults (an independent reference)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from dpemb.privacy.events import epsilon_curve, pld_truncation_bound

    if interval is None:
        pld = pld_lib.from_gaussian_mechanism(
            spec.noise_multiplier, value_discretization_interval=epsilon_curve(spec, "pld").pld_interval(spec.rounds),
            sampling_prob=spec.sampling_rate,
            log_mass_truncation_bound=pld_truncation_bound(spec.resolved_delta, spec.rounds))
        return pld.self_compose(spec.rounds).get_epsilon_for_delta(spec.resolved_delta)
    acc = PLDAccountant(value_discretization_interval=interval)
    acc.compose(dpa.PoissonSampledDpEvent(spec.sampling_rate, dpa.GaussianDpEvent(spec.noise_multiplier)), spec.rounds)
    return acc.get_epsilon(spec.resolved_delta)


def test_measured_reference_values():
    """MEASURED.md: sigma 1, q 0.01, 1000 steps, delta 1e-5: RDP 2.1014, PLD 1.8289."""
    spec = spec_q(100, 10_000, 1.0, 1000, delta=1e-5)
    assert epsilon_for(spec, "rdp") == pytest.approx(2.1014, abs=1e-4)
    assert 1.8287 <= epsilon_for(spec, "pld") <= 1.01 * 1.8287  # an upper bound within the promised 1%


@pytest.mark.parametrize("n, m, k, z, t", [(10_000, 100, 1, 1.0, 1000), (100_000, 64, 4, 0.6, 3000)])
def test_poisson_pinned_against_dp_accounting(n, m, k, z, t):
    spec = PrivacySpec(population=n, clients_per_round=m, users_per_client=k, noise_multiplier=z, rounds=t)
    q, delta = m * k / n, 1 / (10 * n)  # the default delta, 1/(10 N)
    rdp = RdpAccountant()
    rdp.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), t)
    assert epsilon_for(spec, "rdp") == pytest.approx(rdp.get_epsilon(delta), rel=1e-12)
    assert epsilon_for(spec, "pld") == fresh_pld(spec)  # dp_accounting at dpemb's interval and truncation
    fine = fresh_pld(spec, 1e-4)  # dp_accounting's own defaults, a finer grid
    assert fine <= epsilon_for(spec, "pld") <= 1.01 * fine


def test_virtual_clients_use_half_the_paper_noise_multiplier():
    """K > 1: sensitivity 2C, so a paper z (relative to C) is accounted as z / 2."""
    paper_z = 1.28
    spec = PrivacySpec(population=10_000_000, clients_per_round=4096, users_per_client=4,
                       noise_multiplier=paper_z / 2, rounds=2000)
    assert spec.sensitivity == 2 * spec.clip_norm
    assert spec.noise_std == pytest.approx(paper_z * spec.clip_norm)
    rdp = RdpAccountant()
    rdp.compose(dpa.PoissonSampledDpEvent(4096 * 4 / 1e7, dpa.GaussianDpEvent(paper_z / 2)), 2000)
    assert epsilon_for(spec) == pytest.approx(rdp.get_epsilon(1e-8), rel=1e-12)  # default delta 1/(10 N)


@pytest.mark.parametrize("m, n, z, t, delta", [(100, 10_000, 1.0, 1000, 1e-5), (4096, 10_000_000, 1.0, 10_000, 1e-8),
                                               (200, 10_000, 1.5, 500, 1e-6)])
def test_cross_check_with_opacus_rdp(m, n, z, t, delta):
    from opacus.accountants.analysis import rdp as opacus_rdp

    orders = list(DEFAULT_RDP_ORDERS)
    q = m / n
    spec = PrivacySpec(population=n, clients_per_round=m, noise_multiplier=z, rounds=t, delta=delta)
    curve = opacus_rdp.compute_rdp(q=q, noise_multiplier=z, steps=t, orders=orders)
    ours = RdpAccountant(orders)
    ours.compose(round_event(spec), t)
    # integer orders: both libraries evaluate the same closed form (fractional orders differ
    # in method, and the largest orders in numerical care)
    a = np.array(orders)
    integer = (a == np.round(a)) & (a <= 64)
    assert np.allclose(ours.rdp[integer], np.asarray(curve)[integer], rtol=1e-6)
    eps_opacus, _ = opacus_rdp.get_privacy_spent(orders=orders, rdp=curve, delta=delta)
    assert epsilon_for(spec, "rdp") == pytest.approx(eps_opacus, rel=1e-4)


def test_fixed_size_sampling_is_replace_one_and_rdp_only():
    spec = PrivacySpec(population=5000, clients_per_round=50, users_per_client=2, noise_multiplier=1.1,
                       rounds=300, sampling="fixed")
    assert spec.relation is Relation.REPLACE_ONE and spec.sensitivity == 2 * spec.clip_norm
    acc = RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    acc.compose(dpa.SampledWithoutReplacementDpEvent(5000, 100, dpa.GaussianDpEvent(1.1)), 300)
    assert epsilon_for(spec) == pytest.approx(acc.get_epsilon(1 / 50_000), rel=1e-12)
    assert supported_accountants(spec) == ("rdp",)
    with pytest.raises(UnsupportedAccountantError):
        epsilon_for(spec, "pld")
    with pytest.raises(UnsupportedAccountantError):
        compute_epsilon(training_event(spec), 1e-5, "pld")


def test_epoch_gaussian_composes_once_per_epoch_touched():
    spec = PrivacySpec(population=1000, clients_per_round=100, noise_multiplier=2.0, rounds=25,
                       sampling="epoch")
    assert spec.relation is Relation.REPLACE_SPECIAL and spec.rounds_per_epoch == 10
    acc = RdpAccountant()
    acc.compose(dpa.GaussianDpEvent(2.0), 3)  # rounds 1-25 touch 3 epochs
    assert epsilon_for(spec) == pytest.approx(acc.get_epsilon(1e-4), rel=1e-12)


@pytest.mark.parametrize("kw", [
    {}, {"users_per_client": 3}, {"sampling": "epoch"},
    {"mechanism": "tree", "users_per_client": 2}, {"mechanism": "tree", "tree_restarts": True},
])
def test_rdp_is_above_pld_and_both_monotone(kw):
    base = PrivacySpec(population=20_000, clients_per_round=200, noise_multiplier=1.2, rounds=400, **kw)
    prev = {"rdp": 0.0, "pld": 0.0}
    for t in (50, 100, 200, 400):
        e = {a: epsilon_for(base, a, rounds=t) for a in ("rdp", "pld")}
        assert e["pld"] <= e["rdp"]
        assert all(e[a] >= prev[a] for a in e)  # monotone in rounds
        prev = e
    for a in ("rdp", "pld"):
        more_noise = epsilon_for(replace(base, noise_multiplier=1.8), a)
        assert more_noise < epsilon_for(base, a)  # monotone in noise


@pytest.mark.parametrize("kw", [
    {}, {"sampling": "fixed"}, {"sampling": "epoch"}, {"mechanism": "tree"},
    {"mechanism": "tree", "tree_restarts": True},
])
def test_fast_curve_equals_full_computation(kw):
    spec = PrivacySpec(population=5000, clients_per_round=50, noise_multiplier=0.9, rounds=300, **kw)
    for acc in supported_accountants(spec):
        curve = EpsilonCurve(spec, acc)
        for t in (1, 7, 64, 101, 300):
            if acc == "rdp":
                assert curve(t) == pytest.approx(epsilon_for(spec, acc, rounds=t), rel=1e-9), (acc, t)
            else:  # the whole run composed by dp_accounting's PLD accountant at the curve's interval
                full = compute_epsilon(training_event(spec, t, accountant="pld"), spec.resolved_delta, "pld",
                                       relation=spec.relation, pld_discretization=curve.pld_interval(t))
                assert curve(t) == pytest.approx(full, rel=1e-6), (acc, t)  # truncation: ~1e-9
        assert curve(0) == 0.0


def test_nonprivate_is_infinite_and_described():
    spec = PrivacySpec(population=100, clients_per_round=10, noise_multiplier=0.0, nonprivate=True)
    assert math.isinf(epsilon_for(spec, "rdp")) and math.isinf(epsilon_for(spec, "pld"))
    assert isinstance(training_event(spec), dpa.NonPrivateDpEvent)
    assert describe_epsilon(None, accountant="rdp", delta=1e-5, unit="user",
                            relation=Relation.ADD_REMOVE) == "not private (epsilon = inf)"


def test_describe_epsilon_names_everything():
    assert describe_epsilon(3.9, accountant="rdp", delta=1e-7, unit="user", relation=Relation.ADD_REMOVE) == (
        "epsilon = 3.90 (RDP accountant, delta = 1e-07, user-level, add/remove-one-user)")
    s = describe_epsilon(0.3, accountant="pld", delta=1e-5, unit="example", relation=Relation.REPLACE_ONE)
    assert s == "epsilon = 0.300 (PLD accountant, delta = 1e-05, example-level, replace-one-example)"


def test_gaussian_releases_match_the_exact_gaussian_mechanism():
    """k releases at multiplier z are one Gaussian at z / sqrt(k); compare with the analytic formula."""
    z, k, delta = 12.0, 9, 1e-6
    exact = dpa.get_epsilon_gaussian(z / math.sqrt(k), delta)
    assert compute_epsilon(gaussian_releases_event(z, k), delta, "pld") == pytest.approx(exact, rel=2e-3)
    assert compute_epsilon(gaussian_releases_event(z, k), delta, "rdp") >= exact
    with pytest.raises(ValueError):
        gaussian_releases_event(0.0, 3)
    with pytest.raises(ValueError):
        gaussian_releases_event(1.0, 0)


@pytest.mark.parametrize("kw, match", [
    ({"population": 0}, "population"),
    ({"clients_per_round": 200}, "exceeds 1"),
    ({"users_per_client": 0}, "users per client"),
    ({"noise_multiplier": 0.0}, "noise multiplier"),
    ({"noise_multiplier": -1.0}, "noise multiplier"),
    ({"noise_multiplier": math.nan}, "noise multiplier"),
    ({"noise_multiplier": math.inf}, "noise multiplier"),
    ({"rounds": 0}, "rounds"),
    ({"delta": 1.0}, "delta"),
    ({"delta": 0.0}, "delta"),
    ({"clip_norm": 0.0}, "clip norm"),
    ({"mechanism": "tree", "sampling": "poisson"}, "epoch"),
    ({"sampling": "fixed", "relation": Relation.ADD_REMOVE}, "replace-one"),
    ({"nonprivate": True}, "non-private"),
    ({"tree_restarts": True}, "tree"),
    ({"unit": "device"}, "unit"),
])
def test_spec_validation(kw, match):
    args = {"population": 100, "clients_per_round": 10, **kw}
    with pytest.raises(PrivacySpecError, match=match):
        PrivacySpec(**args)
    assert issubclass(PrivacySpecError, ValueError)


def test_spec_defaults_and_fingerprint():
    a = PrivacySpec(population=1000, clients_per_round=10)
    assert (a.sampling, a.relation, a.resolved_delta, a.sampling_rate) == ("poisson", Relation.ADD_REMOVE, 1e-4, 0.01)
    t = PrivacySpec(population=1000, clients_per_round=10, mechanism="tree")
    assert (t.sampling, t.relation) == ("epoch", Relation.REPLACE_SPECIAL)
    assert a.fingerprint() == PrivacySpec(population=1000, clients_per_round=10, relation="add-remove").fingerprint()
    for change in ({"noise_multiplier": 1.1}, {"clip_norm": 2.0}, {"rounds": 2}, {"delta": 1e-4},
                   {"users_per_client": 2}, {"sampling": "fixed", "relation": None}):
        assert replace(a, **change).fingerprint() != a.fingerprint()


def test_memoised_epsilons_equal_a_fresh_dp_accounting_computation():
    """compute_epsilon and the shared curves memoise on their exact inputs: a repeated
    question gets dp_accounting's own answer, a changed one is computed anew."""
    from dpemb.privacy.events import epsilon_curve

    spec = spec_q(40, 5_000, 0.9, 300, delta=1e-6)
    q = spec.sampling_rate
    rdp = RdpAccountant(list(DEFAULT_RDP_ORDERS))
    rdp.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(0.9)), 300))
    for accountant, want in (("rdp", rdp.get_epsilon(1e-6)), ("pld", fresh_pld(spec))):
        assert epsilon_for(spec, accountant) == epsilon_for(spec, accountant) == pytest.approx(want, rel=1e-9)
        assert epsilon_for(replace(spec, noise_multiplier=0.99), accountant) < want  # not served from the memo
        assert epsilon_for(replace(spec, delta=1e-5), accountant) < want
    assert epsilon_curve(spec, "rdp") is epsilon_curve(replace(spec), "rdp")  # equal specs share one curve
    assert epsilon_curve(spec, "rdp") is not epsilon_curve(replace(spec, rounds=301), "rdp")
    assert epsilon_curve(spec, "rdp")(300) == pytest.approx(epsilon_for(spec, "rdp"), rel=1e-9)
    # a composed event holds a list (unhashable): computed each time, still right
    composed = dpa.ComposedDpEvent([dpa.GaussianDpEvent(1.0), dpa.GaussianDpEvent(2.0)])
    single = dpa.GaussianDpEvent(1.0 / math.sqrt(1.0 + 0.25))  # the same Gaussian mechanism
    assert compute_epsilon(composed, 1e-5, "pld") == pytest.approx(compute_epsilon(single, 1e-5, "pld"), rel=1e-3)

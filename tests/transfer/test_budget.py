"""Budget planning: epsilon from the privacy layer, explicit non-private runs, the ledger."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import norm

from dpemb.privacy import compute_epsilon, gaussian_releases_event
from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.relations import Relation
from dpemb.transfer.budget import NoisePlan, PrivacyConfigError, PrivacyRequest, ReleaseMechanism, plan_noise
from dpemb.transfer.config import TransferConfig


def _stat(shape, sensitivity: float = 1.0, relation: Relation = Relation.ADD_REMOVE) -> ClippedSum:
    return ClippedSum([torch.zeros(shape, dtype=torch.float64)], sensitivity, relation)


def _exact_gaussian_delta(eps: float, mu: float) -> float:
    """delta(eps) of a Gaussian mechanism with sensitivity/std ratio mu (Balle & Wang 2018)."""
    return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize("releases", [1, 3, 11])
def test_calibrated_epsilon_agrees_with_the_privacy_layer_and_the_exact_gaussian(releases):
    plan = plan_noise(PrivacyRequest(epsilon=1.0, delta=1e-5, accountant="pld"), releases)
    z = plan.noise_multiplier
    assert plan.epsilon == pytest.approx(
        compute_epsilon(gaussian_releases_event(z, releases), 1e-5, accountant="pld"), rel=1e-12
    )
    assert plan.epsilon == pytest.approx(1.0, rel=0.02)
    # R Gaussian releases with multiplier z compose exactly to one with multiplier z / sqrt(R)
    mu = math.sqrt(releases) / z
    assert _exact_gaussian_delta(plan.epsilon, mu) == pytest.approx(1e-5, rel=0.1)
    # more releases at the same epsilon need more noise per release
    if releases > 1:
        assert z > plan_noise(PrivacyRequest(epsilon=1.0, delta=1e-5), 1).noise_multiplier


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_equal_split_composes_to_the_target_by_an_independent_dp_accounting_composition(accountant):
    """R separately composed Gaussian events (built here, straight from dp_accounting) at the
    plan's z give the target epsilon; so does the plan's own statement."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    for releases in (3, 7):
        plan = plan_noise(PrivacyRequest(epsilon=2.0, delta=1e-6, accountant=accountant), releases)
        if accountant == "pld":
            acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        else:
            acc = rdp_privacy_accountant.RdpAccountant()
        for _ in range(releases):
            acc.compose(dp_accounting.GaussianDpEvent(plan.noise_multiplier))
        eps = acc.get_epsilon(1e-6)
        assert eps == pytest.approx(2.0, rel=0.02), (releases, eps)
        assert plan.epsilon == pytest.approx(eps, rel=0.01)
        assert plan.epsilon <= 2.0 * 1.001  # calibration never overshoots the target
        # and the release count matters: the same z over one more release exceeds the target
        acc.compose(dp_accounting.GaussianDpEvent(plan.noise_multiplier))
        assert acc.get_epsilon(1e-6) > 2.0 * 1.05


def test_plan_refuses_inconsistent_noise_and_privacy_flags():
    with pytest.raises(PrivacyConfigError):
        NoisePlan(3, 0.0, 1.0, 1e-5, "pld", "example", False)  # private plan without noise
    with pytest.raises(PrivacyConfigError):
        NoisePlan(3, math.nan, 1.0, 1e-5, "pld", "example", False)
    with pytest.raises(PrivacyConfigError):
        NoisePlan(3, 1.0, math.inf, 1e-5, "pld", "example", True)  # "non-private" plan with noise


def test_given_noise_multiplier_reports_the_accountants_epsilon():
    for acc in ("pld", "rdp"):
        plan = plan_noise(PrivacyRequest(noise_multiplier=3.0, delta=1e-6, accountant=acc), 4)
        assert plan.noise_multiplier == 3.0
        assert plan.epsilon == pytest.approx(compute_epsilon(gaussian_releases_event(3.0, 4), 1e-6, accountant=acc))


@pytest.mark.parametrize("kw", [
    dict(noise_multiplier=0.0), dict(noise_multiplier=math.inf), dict(noise_multiplier=math.nan),
    dict(epsilon=0.0), dict(epsilon=math.inf), dict(epsilon=math.nan), dict(),
    dict(epsilon=1.0, noise_multiplier=2.0), dict(nonprivate=True, epsilon=1.0),
])
def test_no_noise_without_the_explicit_flag_is_an_error(kw):
    with pytest.raises(PrivacyConfigError):
        PrivacyRequest(**kw)


@pytest.mark.parametrize("method", ["dp-ls", "dp-sgd", "dp-newton", "dp-fc"])
def test_config_refuses_a_dp_method_without_noise(method):
    with pytest.raises(ValueError, match="non-private|epsilon"):
        TransferConfig(method=method)
    with pytest.raises(ValueError):
        TransferConfig(method=method, noise_multiplier=0.0)
    assert not TransferConfig(method=method, nonprivate=True).is_private


def test_non_private_method_takes_no_epsilon():
    with pytest.raises(ValueError, match="no noise"):
        TransferConfig(method="non-private", epsilon=1.0)


def test_pld_refuses_a_tiny_noise_multiplier_with_advice():
    with pytest.raises(PrivacyConfigError, match="RDP"):
        plan_noise(PrivacyRequest(noise_multiplier=1e-3, accountant="pld"), 3, num_units=1000)
    assert plan_noise(PrivacyRequest(noise_multiplier=1e-3, accountant="rdp"), 3, num_units=1000).epsilon > 1e5


def test_sentence_names_accountant_delta_unit_relation():
    plan = plan_noise(PrivacyRequest(epsilon=2.0, delta=1e-5, unit="user", accountant="rdp"), 3)
    text = plan.sentence().lower()
    for word in ("rdp", "1e-05", "user", "add"):
        assert word in text, (word, text)
    np_plan = plan_noise(PrivacyRequest(nonprivate=True), 3, num_units=1000)
    assert math.isinf(np_plan.epsilon) and np_plan.noise_multiplier == 0.0
    assert np_plan.sentence().startswith("not private: no noise (explicitly requested)")


def test_mechanism_refuses_more_releases_than_planned_and_checks_completion():
    mech = ReleaseMechanism(plan_noise(PrivacyRequest(noise_multiplier=1.0), 2, num_units=1000), seed=1)
    mech.release("a", _stat(3))
    with pytest.raises(PrivacyConfigError, match="1 of 2"):
        mech.check_complete()
    mech.release("b", _stat(3))
    mech.check_complete()
    with pytest.raises(PrivacyConfigError, match="exceeds"):
        mech.release("c", _stat(3))


def test_mechanism_takes_only_a_clipped_sum_under_add_remove():
    mech = ReleaseMechanism(plan_noise(PrivacyRequest(noise_multiplier=1.0), 2, num_units=1000))
    with pytest.raises(TypeError, match="ClippedSum"):
        mech.release("x", torch.zeros(3))  # a bare tensor has no sensitivity
    with pytest.raises(PrivacyConfigError, match="replace-one"):
        mech.release("x", _stat(3, relation=Relation.REPLACE_ONE))
    with pytest.raises(ValueError, match="sensitivity"):
        _stat(3, sensitivity=0.0)
    assert not mech.records


def test_ledger_and_split_sentence_record_every_release():
    plan = plan_noise(PrivacyRequest(noise_multiplier=2.0), 3, num_units=1000)
    mech = ReleaseMechanism(plan, seed=0)
    mech.release("gramian", _stat((4, 4), 0.25))
    mech.release("g[0]", _stat(4), kind="gradient")
    mech.release("g[1]", _stat(4), kind="gradient")
    stds = [r.noise_std for r in mech.records]
    assert stds == [0.5, 2.0, 2.0]
    text = plan.split_sentence(mech.records)
    assert "equal over 3" in text and "gradient x2" in text and "gramian" in text
    assert mech.seeded
    assert not ReleaseMechanism(plan).seeded


def test_non_private_mechanism_adds_nothing_and_says_so():
    plan = plan_noise(PrivacyRequest(nonprivate=True), 1, num_units=1000)
    mech = ReleaseMechanism(plan)
    out = mech.release("a", _stat(5))
    assert torch.equal(out, torch.zeros(5, dtype=torch.float64))
    assert "not private" in plan.sentence() and "none" in plan.split_sentence(mech.records)

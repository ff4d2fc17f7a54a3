"""Budget planning: epsilon from the privacy layer, explicit non-private runs, the ledger."""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import norm

from dpemb.privacy.accounting import compute_epsilon, gaussian_releases_event
from dpemb.transfer.budget import PrivacyConfigError, PrivacyRequest, ReleaseMechanism, plan_noise
from dpemb.transfer.config import TransferConfig


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


def test_given_noise_multiplier_reports_the_accountants_epsilon():
    for acc in ("pld", "rdp"):
        plan = plan_noise(PrivacyRequest(noise_multiplier=3.0, delta=1e-6, accountant=acc), 4)
        assert plan.noise_multiplier == 3.0
        assert plan.epsilon == pytest.approx(compute_epsilon(gaussian_releases_event(3.0, 4), 1e-6, accountant=acc))


@pytest.mark.parametrize("kw", [
    dict(noise_multiplier=0.0), dict(noise_multiplier=math.inf), dict(noise_multiplier=math.nan),
    dict(epsilon=0.0), dict(epsilon=math.inf), dict(epsilon=math.nan), dict(),
    dict(epsilon=1.0, noise_multiplier=2.0), dict(non_private=True, epsilon=1.0),
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
    assert not TransferConfig(method=method, non_private=True).is_private


def test_non_private_method_takes_no_epsilon():
    with pytest.raises(ValueError, match="no noise"):
        TransferConfig(method="non-private", epsilon=1.0)


def test_pld_refuses_a_tiny_noise_multiplier_with_advice():
    with pytest.raises(PrivacyConfigError, match="RDP"):
        plan_noise(PrivacyRequest(noise_multiplier=1e-3, accountant="pld"), 3)
    assert plan_noise(PrivacyRequest(noise_multiplier=1e-3, accountant="rdp"), 3).epsilon > 1e5


def test_sentence_names_accountant_delta_unit_relation():
    plan = plan_noise(PrivacyRequest(epsilon=2.0, delta=1e-5, unit="user", accountant="rdp"), 3)
    text = plan.sentence().lower()
    for word in ("rdp", "1e-05", "user", "add"):
        assert word in text, (word, text)
    np_plan = plan_noise(PrivacyRequest(non_private=True), 3)
    assert math.isinf(np_plan.epsilon) and np_plan.noise_multiplier == 0.0
    assert "non-private" in np_plan.sentence().lower()


def test_mechanism_refuses_more_releases_than_planned_and_checks_completion():
    mech = ReleaseMechanism(plan_noise(PrivacyRequest(noise_multiplier=1.0), 2), seed=1)
    mech.release("a", torch.zeros(3, dtype=torch.float64), 1.0)
    with pytest.raises(PrivacyConfigError, match="1 of 2"):
        mech.check_complete()
    mech.release("b", torch.zeros(3, dtype=torch.float64), 1.0)
    mech.check_complete()
    with pytest.raises(PrivacyConfigError, match="exceeds"):
        mech.release("c", torch.zeros(3, dtype=torch.float64), 1.0)
    with pytest.raises(PrivacyConfigError, match="sensitivity"):
        ReleaseMechanism(plan_noise(PrivacyRequest(noise_multiplier=1.0), 2)).release("x", torch.zeros(1), 0.0)


def test_ledger_and_split_sentence_record_every_release():
    plan = plan_noise(PrivacyRequest(noise_multiplier=2.0), 3)
    mech = ReleaseMechanism(plan, seed=0)
    mech.release("gramian", torch.zeros(4, 4, dtype=torch.float64), 0.25)
    mech.release("g[0]", torch.zeros(4, dtype=torch.float64), 1.0, kind="gradient")
    mech.release("g[1]", torch.zeros(4, dtype=torch.float64), 1.0, kind="gradient")
    stds = [r.noise_std for r in mech.records]
    assert stds == [0.5, 2.0, 2.0]
    text = plan.split_sentence(mech.records)
    assert "equal over 3" in text and "gradient x2" in text and "gramian" in text
    assert mech.seeded
    assert not ReleaseMechanism(plan).seeded

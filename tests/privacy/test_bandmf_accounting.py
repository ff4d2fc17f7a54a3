"""Amplified BandMF accounting: b = 1 is DP-FedEmb exactly, an independent computation of the
paper's event with dp_accounting, monotonicity, calibration, and no torch on the path."""

import math
import subprocess
import sys

import pytest
from dp_accounting import dp_event as dpe
from dp_accounting import NeighboringRelation
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dataclasses import replace

from dpemb.privacy.calibration import calibrate_noise_multiplier
from dpemb.privacy.events import amplified_bandmf_event, bandmf_equivalent_spec, epsilon_for, training_event
from dpemb.privacy.spec import PrivacySpec


def bandmf_spec(spec, bands, **kw):
    """The bandmf spec of a gaussian + poisson ``spec`` (N, M, K, z, T, delta, relation)."""
    return replace(spec, mechanism="bandmf", sampling="cyclic-poisson", bands=bands, **kw)


def bandmf_epsilon(spec, bands, accountant="rdp", rounds=None):
    return epsilon_for(bandmf_spec(spec, bands, rounds=rounds or spec.rounds), accountant)


def bandmf_event(spec, bands):
    return training_event(bandmf_spec(spec, bands))

SPECS = [
    PrivacySpec(population=10_000, clients_per_round=50, noise_multiplier=1.0, rounds=200),
    PrivacySpec(population=50_000, clients_per_round=40, users_per_client=3, noise_multiplier=0.8, rounds=300),
    PrivacySpec(population=5_000, clients_per_round=20, noise_multiplier=1.5, rounds=100,
                relation="replace-special", delta=1e-6),
]


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("spec", SPECS)
def test_one_band_is_dp_fedemb_exactly(spec, accountant):
    assert bandmf_epsilon(spec, 1, accountant) == epsilon_for(spec, accountant)
    assert bandmf_event(spec, 1) == dpe.SelfComposedDpEvent(
        dpe.PoissonSampledDpEvent(spec.sampling_rate, dpe.GaussianDpEvent(spec.noise_multiplier)), spec.rounds)


# (N, M, K, z, T, b): the independent check's settings (T not a multiple of b in the last two)
SETTINGS = [
    (10_000, 50, 1, 1.0, 200, 4),
    (100_000, 100, 2, 0.8, 1000, 10),
    (5_000, 20, 1, 2.0, 100, 16),
]


def _by_hand(n, m, k, z, t, b, delta, accountant):
    """The paper's amplified BandMF bound built directly with dp_accounting: a user's group is
    sampled in ceil(T / b) rounds, each a Poisson-sampled Gaussian with rate b M K / N (the rate
    within a group) and noise multiplier z (normalised strategy), add/remove."""
    q = b * m * k / n
    event = dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(z)), -(-t // b))
    if accountant == "rdp":
        acc = rdp_privacy_accountant.RdpAccountant(neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    else:
        acc = pld_privacy_accountant.PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE,
                                                   value_discretization_interval=1e-4)
    acc.compose(event)
    return event, acc.get_epsilon(delta)


@pytest.mark.parametrize("setting", SETTINGS)
def test_independent_computation(setting):
    n, m, k, z, t, b = setting
    spec = PrivacySpec(population=n, clients_per_round=m, users_per_client=k, noise_multiplier=z, rounds=t)
    delta = spec.resolved_delta
    event, rdp = _by_hand(n, m, k, z, t, b, delta, "rdp")
    assert bandmf_event(spec, b) == event == amplified_bandmf_event(z, t, bands=b, sampling_rate=b * m * k / n)
    assert bandmf_epsilon(spec, b, "rdp") == pytest.approx(rdp, rel=1e-12)
    _, pld = _by_hand(n, m, k, z, t, b, delta, "pld")
    # dpemb's PLD picks its grid (within 1% of a finer one) and truncates the tails differently:
    # both are upper bounds of the same privacy loss
    assert bandmf_epsilon(spec, b, "pld") == pytest.approx(pld, rel=0.02)
    assert bandmf_epsilon(spec, b, "pld") <= bandmf_epsilon(spec, b, "rdp")


def test_the_equivalent_spec():
    spec = SPECS[1]
    eq = bandmf_equivalent_spec(bandmf_spec(spec, 7))
    assert eq.sampling_rate == pytest.approx(7 * spec.sampling_rate, rel=1e-15) and eq.rounds == math.ceil(300 / 7)
    assert (eq.population, eq.users_per_client, eq.noise_multiplier, eq.resolved_delta, eq.relation) == (
        spec.population, spec.users_per_client, spec.noise_multiplier, spec.resolved_delta, spec.relation)
    with pytest.raises(ValueError, match="fewer bands"):
        bandmf_spec(spec, 500)  # b M K = 60,000 > N
    with pytest.raises(ValueError, match="bandmf PrivacySpec"):
        bandmf_equivalent_spec(PrivacySpec(population=100, clients_per_round=5, mechanism="tree"))
    nonprivate = PrivacySpec(population=100, clients_per_round=5, noise_multiplier=0.0, nonprivate=True)
    assert bandmf_epsilon(nonprivate, 2) == math.inf


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_epsilon_falls_as_the_noise_grows(accountant):
    base = SPECS[0]
    zs = [0.6, 0.8, 1.0, 1.5, 2.5, 4.0]
    eps = [bandmf_epsilon(PrivacySpec(population=base.population, clients_per_round=base.clients_per_round,
                                      noise_multiplier=z, rounds=base.rounds), 4, accountant) for z in zs]
    assert all(a > b for a, b in zip(eps, eps[1:])), eps
    # and the rounds counted are ceil(T / b): T = 197..200 with b = 4 are the same 50 participations
    assert len({bandmf_epsilon(base, 4, accountant, rounds=t) for t in (197, 198, 199, 200)}) == 1
    assert bandmf_epsilon(base, 4, accountant, rounds=201) > bandmf_epsilon(base, 4, accountant, rounds=200)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibration_hits_the_target(accountant):
    spec = PrivacySpec(population=20_000, clients_per_round=40, rounds=400)
    target, b = 2.0, 8
    z = calibrate_noise_multiplier(bandmf_spec(spec, b), target, accountant)
    at = lambda z_: bandmf_epsilon(PrivacySpec(population=20_000, clients_per_round=40, rounds=400,  # noqa: E731
                                               noise_multiplier=z_), b, accountant)
    assert at(z) <= target
    assert at(z / (1 + 1.5e-4)) > target  # the smallest such z, to the search's relative 1e-4
    assert at(z) == pytest.approx(target, rel=0.01)


def test_accounting_does_not_import_torch():
    code = ("import sys; from dpemb.privacy.events import epsilon_for; "
            "from dpemb.privacy import PrivacySpec; "
            "epsilon_for(PrivacySpec(population=100, clients_per_round=5, mechanism='bandmf', bands=4), 'rdp'); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

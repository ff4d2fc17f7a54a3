"""BLT noise: the strategy's coefficients, its min-separation sensitivity against every
participation pattern, the streamed noise equals scale x C^{-1} Z with the covariance that
implies (a test that rejects a wrong scale or strategy), the sensitivity with real local
training, epsilon against an independent computation, fail-closed rules and the spec."""

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import optimize, stats

from dpemb.privacy import PrivacySpec, calibrate_noise_multiplier, epsilon_for
from dpemb.privacy.blt import BLTNoise
from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.events import EpsilonCurve, training_event
from dpemb.privacy.plan import make_noise
from dpemb.privacy.relations import Relation
from dpemb.privacy.spec import PrivacySpecError
from dpemb.privacy.statements import describe_schedule
from dpemb.privacy.strategy import (banded_sqrt_coefficients, blt_polynomials, blt_strategy,
                                    minsep_sensitivity, prefix_noise_rms)

P_FALSE = 1e-7


def coefficients(theta, omega, n):
    """c_0 = 1, c_k = sum_i omega_i theta_i^(k-1), from the definition (not from the polynomials)."""
    return np.array([1.0] + [sum(w * t ** (k - 1) for t, w in zip(theta, omega)) for k in range(1, n)])


def toeplitz(c):
    n = len(c)
    return np.array([[c[i - j] if i >= j else 0.0 for j in range(n)] for i in range(n)])


def brute_force_sensitivity(c_matrix, b, k):
    """max ||C u|| over EVERY 0/1 vector u with at most k ones, pairwise at least b apart."""
    n = len(c_matrix)
    best = 0.0
    for size in range(1, k + 1):
        for pattern in itertools.combinations(range(n), size):
            if all(v - u >= b for u, v in zip(pattern, pattern[1:])):
                best = max(best, float(np.linalg.norm(c_matrix[:, list(pattern)].sum(axis=1))))
    return best


STRATEGIES = [((0.9,), (0.5,)), ((0.3, 0.95), (0.2, 0.4)), ((0.0, 0.99), (0.1, 0.85)), blt_strategy(40, 3)]


@pytest.mark.parametrize("theta, omega", STRATEGIES)
def test_polynomials_are_the_definition(theta, omega):
    p, q = blt_polynomials(theta, omega)
    from scipy.signal import lfilter
    impulse = np.eye(1, 50).ravel()
    assert np.allclose(lfilter(p, q, impulse), coefficients(theta, omega, 50), rtol=1e-12, atol=1e-15)
    inverse = lfilter(q, p, impulse)  # C^{-1}'s coefficients
    assert np.allclose(toeplitz(coefficients(theta, omega, 50)) @ toeplitz(inverse), np.eye(50), atol=1e-10)


@pytest.mark.parametrize("theta, omega", STRATEGIES)
@pytest.mark.parametrize("n, b", [(11, 1), (12, 2), (13, 3), (12, 5)])
def test_minsep_sensitivity_is_the_worst_participation_pattern(theta, omega, n, b):
    """The closed form (participations 0, b, 2b, ...) equals the maximum over every pattern,
    for each cap on the participations."""
    p, q = blt_polynomials(theta, omega)
    cm = toeplitz(coefficients(theta, omega, n))
    for k in range(1, math.ceil(n / b) + 1):
        assert minsep_sensitivity(p, n, b, k, denominator=q) == pytest.approx(brute_force_sensitivity(cm, b, k),
                                                                              rel=1e-12)


def test_minsep_sensitivity_of_bands_and_refusals():
    c = banded_sqrt_coefficients(3)  # separated participations do not overlap: sqrt(k) x column norm
    assert minsep_sensitivity(c, 30, 3) == pytest.approx(math.sqrt(10), rel=1e-12)
    with pytest.raises(ValueError, match="non-increasing"):
        minsep_sensitivity([1.0, 1.5], 10, 2)  # increasing: the closed form would understate it
    with pytest.raises(ValueError, match="non-negative"):
        minsep_sensitivity([1.0, -0.5], 10, 2)


@pytest.mark.parametrize("rounds, b, at_most", [(60, 1, 1 + 1e-9), (60, 4, 0.65), (300, 35, 0.3), (1200, 8, 0.4)])
def test_the_chosen_strategy_is_valid_deterministic_and_beats_independent_noise(rounds, b, at_most):
    """Model noise at equal epsilon against C = I accounted the same way (no amplification):
    measured 1.0 (b = 1: every round, no gain), 0.603, 0.273, 0.386."""
    theta, omega = blt_strategy(rounds, b)
    assert all(0 <= t < 1 for t in theta) and all(w >= 0 for w in omega) and sum(omega) < 1
    assert blt_strategy.__wrapped__(rounds, b) == (theta, omega)  # recomputed: the same, bit for bit
    p, q = blt_polynomials(theta, omega)
    blt = minsep_sensitivity(p, rounds, b, denominator=q) * prefix_noise_rms(p, rounds, tuple(q))
    independent = math.sqrt(math.ceil(rounds / b)) * prefix_noise_rms([1.0], rounds)  # C = I, same accounting
    assert blt <= at_most * independent


def _sum(value, sensitivity=2.0):
    return ClippedSum(value, sensitivity, Relation.ADD_REMOVE)


def _noise(mech, rounds, like):
    return torch.stack([torch.cat([v.flatten() for v in mech.release(_sum([torch.zeros_like(x) for x in like]))])
                        for _ in range(rounds)])


def _mechanism(theta, omega, rounds, b, z=1.0, seed=0, scale=None):
    p, q = blt_polynomials(theta, omega)
    scale = minsep_sensitivity(p, rounds, b, denominator=q) if scale is None else scale
    return BLTNoise(z, theta=theta, omega=omega, scale=scale, rounds=rounds, seed=seed)


def test_streamed_noise_is_the_scaled_inverse_strategy_applied_to_iid_draws():
    """C x noise / (sigma x scale) gives back the generator's own standard normal draws: the
    released C' X + Z (C' = C / scale) has Z iid with std sigma = z x sensitivity."""
    theta, omega = (0.2, 0.9), (0.1, 0.6)
    z, sens, rounds, b = 1.3, 2.0, 15, 2
    mech = _mechanism(theta, omega, rounds, b, z=z, seed=5)
    w = _noise(mech, rounds, [torch.zeros(2, 3, dtype=torch.float64)]).numpy()
    gen = torch.Generator().manual_seed(5)
    draws = torch.stack([torch.randn((2, 3), generator=gen, dtype=torch.float64).flatten()
                         for _ in range(rounds)]).numpy()
    c = toeplitz(coefficients(theta, omega, rounds))
    assert np.allclose(c @ w / (z * sens * mech.scale), draws, atol=1e-12)
    assert mech.rounds == rounds and len(mech.state_dict()["buffers"]) == 2  # memory: d x the model


def test_covariance_matches_the_strategy_and_rejects_wrong_ones():
    """The statistical test of tests/privacy/test_bandmf.py: whiten with the claimed strategy,
    Y = (C / scale) X / sigma must be iid N(0, 1) over rounds; max over the entries i <= j of
    |S_ij - I_ij| / se_ij below tau = Phi^-1(1 - P / (2 x entries)), P = 1e-7. A wrong scale
    (10% off), the unscaled strategy and independent noise are rejected."""
    n, coords, b, sens = 12, 20_000, 3, 2.0
    theta, omega = blt_strategy(n, b)
    p, q = blt_polynomials(theta, omega)
    scale = minsep_sensitivity(p, n, b, denominator=q)
    c = toeplitz(coefficients(theta, omega, n)) / scale
    entries = n * (n + 1) // 2
    tau = stats.norm.isf(P_FALSE / (2 * entries))
    eye = np.eye(n)
    se = np.where(eye > 0, math.sqrt(2.0 / coords), math.sqrt(1.0 / coords))

    def statistic(mech):
        x = _noise(mech, n, [torch.zeros(coords, dtype=torch.float64)]).numpy()
        y = c @ x / sens
        return float((np.abs(y @ y.T / coords - eye) / se).max())

    assert statistic(_mechanism(theta, omega, n, b)) < tau
    for wrong in (_mechanism(theta, omega, n, b, scale=1.1 * scale), _mechanism(theta, omega, n, b, scale=1.0),
                  _mechanism((0.5,), (0.0,), n, b, scale=scale)):
        assert statistic(wrong) > 2 * tau


def test_fails_closed_state_round_trip_and_refusals():
    theta, omega = blt_strategy(6, 2)
    mech = _mechanism(theta, omega, 6, 2, seed=3)
    value = [torch.zeros(5)]
    for _ in range(3):
        mech.release(_sum(value))
    state = mech.state_dict()
    other = _mechanism(theta, omega, 6, 2, seed=99)
    other.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(mech.release(_sum(value)), other.release(_sum(value))))
    with pytest.raises(ValueError, match="theta, omega"):
        _mechanism(theta, omega, 7, 2).load_state_dict(state)  # another plan: another strategy and scale
    with pytest.raises(ValueError, match="sensitivity changed"):
        mech.release(_sum(value, sensitivity=3.0))
    mech.release(_sum(value)), mech.release(_sum(value))
    with pytest.raises(ValueError, match="scaled for 6 rounds"):
        mech.release(_sum(value))  # round 7 of a strategy scaled for 6
    with pytest.raises(ValueError, match="adaptive clipping is not supported with BLT noise; use a fixed clip norm"):
        mech.add_to_count(1.0, 1.0)
    with pytest.raises(ValueError, match="noise multiplier"):
        BLTNoise(0.0, theta=theta, omega=omega, scale=1.0, rounds=6)


# ---------------------------------------------------------------------- spec and accounting
def blt(b=4, **kw):
    fields = dict(population=10_000, clients_per_round=50, users_per_client=2, noise_multiplier=3.0, clip_norm=1.0,
                  rounds=200, delta=1e-6, mechanism="blt", bands=b)
    return PrivacySpec(**{**fields, **kw})


def test_spec_defaults_refusals_and_schedule():
    s = blt(4)
    assert (s.sampling, s.relation, s.sensitivity) == ("cyclic-poisson", Relation.ADD_REMOVE, 2.0)
    assert describe_schedule(s) == "BLT, min-separation b = 4, no amplification, cyclic Poisson participation"
    assert PrivacySpec(**s.to_dict()) == s and s.fingerprint() != blt(5).fingerprint()
    for bad, message in ((dict(sampling="poisson"), "cyclic-poisson"), (dict(bands=101), "fewer bands"),
                         (dict(relation="replace-one"), "add-remove or replace-special")):
        with pytest.raises(PrivacySpecError, match=message):
            blt(**bad)
    from dpemb.privacy.adaptive_clipping import AdaptiveClipping
    with pytest.raises(PrivacySpecError, match="blt noise"):
        blt(adaptive_clipping=AdaptiveClipping(0.5))
    mech = make_noise(s, seed=0)
    assert isinstance(mech, BLTNoise) and mech.planned_rounds == 200
    assert (mech.theta, mech.omega) == blt_strategy(200, 4)


def analytic_gaussian_epsilon(sigma, delta):
    """The exact (epsilon, delta) of one Gaussian mechanism with std sigma over sensitivity 1
    (Balle and Wang 2018, Theorem 8), solved for epsilon: no dp_accounting involved."""
    def delta_at(eps):
        return stats.norm.cdf(-eps * sigma + 1 / (2 * sigma)) - math.exp(eps) * stats.norm.cdf(-eps * sigma - 1 / (2 * sigma))
    return optimize.brentq(lambda e: delta_at(e) - delta, 1e-6, 200)


@pytest.mark.parametrize("b, z", [(1, 30.0), (4, 5.0), (35, 2.5)])
def test_epsilon_against_an_independent_computation(b, z):
    """epsilon after t rounds = that of one Gaussian with std z over the sensitivity of the first
    t rounds' participations relative to the whole run's, computed here from the dense matrix C
    and the worst pattern found by enumeration-free closed form AND checked at T by brute force
    elsewhere; PLD within its 1% of the exact analytic Gaussian, RDP above it."""
    rounds = 140
    s = blt(b, noise_multiplier=z, rounds=rounds, population=100_000)
    theta, omega = blt_strategy(rounds, b)
    c = toeplitz(coefficients(theta, omega, rounds))
    for t in (1, b + 1, rounds // 2, rounds):
        k = math.ceil(t / b)
        ratio = np.linalg.norm(c[:, [j * b for j in range(k)]].sum(axis=1)) / np.linalg.norm(
            c[:, [j * b for j in range(math.ceil(rounds / b))]].sum(axis=1))
        exact = analytic_gaussian_epsilon(z / ratio, s.resolved_delta)
        pld = epsilon_for(s, "pld", rounds=t)
        assert exact <= pld <= exact * 1.01 + 1e-3  # 1e-3: the PLD grid at epsilon near 0.01
        assert epsilon_for(s, "rdp", rounds=t) >= exact
        assert training_event(s, t).noise_multiplier == pytest.approx(z / ratio, rel=1e-10)
    curve = EpsilonCurve(s, "pld")
    values = [curve(t) for t in (*range(1, rounds, 9), rounds)]
    # grows with t, up to the PLD grid (each value an upper bound at its own interval)
    assert all(a <= b_ * 1.01 for a, b_ in zip(values, values[1:])) and values[-1] == epsilon_for(s, "pld")


def test_calibration_hits_the_target_and_needs_no_population():
    """No amplification: the calibrated z is the same at every population (the rate is not used)."""
    z = calibrate_noise_multiplier(blt(35, population=100_000, delta=1e-7), 1.0, "pld")
    assert epsilon_for(blt(35, population=100_000, delta=1e-7, noise_multiplier=z), "pld") == pytest.approx(1.0,
                                                                                                          rel=0.01)
    assert calibrate_noise_multiplier(blt(35, population=1_000_000, delta=1e-7), 1.0, "pld") == pytest.approx(z, rel=1e-6)


def test_sensitivity_with_real_local_training_and_the_cyclic_sampler():
    """Adding one user (K = 2, sensitivity 2C) with real local training and the cyclic sampler
    (``test_bandmf.one_user_sum_differences``: only the user's client changes, in its rounds,
    b apart): the released C' X (C' the scaled BLT strategy of ``make_noise``) moves by at most
    the stated sensitivity 2C, over three or more participations."""
    from tests.privacy.test_bandmf import one_user_sum_differences

    b, m, k, clip, rounds = 3, 2, 2, 0.002, 12
    diff, mine, sens = one_user_sum_differences(b, m, k, clip, rounds, min_participations=3)
    spec = PrivacySpec(population=30, clients_per_round=m, users_per_client=k, clip_norm=clip, rounds=rounds,
                       mechanism="blt", bands=b, noise_multiplier=1.0)
    assert spec.sensitivity == sens
    mech = make_noise(spec, seed=0)
    c = toeplitz(coefficients(mech.theta, mech.omega, rounds)) / mech.scale
    assert np.linalg.norm(c @ diff.numpy()) <= sens * (1 + 1e-9)
    assert np.linalg.norm(c @ diff.numpy()) > 0.5 * sens  # near the bound: the test can fail

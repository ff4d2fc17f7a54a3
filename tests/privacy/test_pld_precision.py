"""PLD precision: dpemb's PLD epsilon is never below a finer dp_accounting PLD and within 1%
of it, on a sample of the grid of bench/bench_pld_precision.py (epsilon 0.05 to 10,
N 1e4 to 1e7, 100 to 10,000 rounds; Poisson sampling, delta = 1/(10 N))."""

import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import PLDAccountant

from dpemb.privacy import PrivacySpec, epsilon_for
from dpemb.privacy.events import PLD_TOLERANCE, epsilon_curve, refined_pld_epsilon


def dp_pld(spec: PrivacySpec, interval: float) -> float:
    acc = PLDAccountant(value_discretization_interval=interval)
    acc.compose(dpa.PoissonSampledDpEvent(spec.sampling_rate, dpa.GaussianDpEvent(spec.noise_multiplier)), spec.rounds)
    return acc.get_epsilon(spec.resolved_delta)


def check_point(n: int, m: int, rounds: int, z: float) -> None:
    spec = PrivacySpec(population=n, clients_per_round=m, rounds=rounds, noise_multiplier=z)
    ours = epsilon_for(spec, "pld")
    interval = epsilon_curve(spec, "pld").pld_interval(rounds)
    finer = dp_pld(spec, min(1e-4, interval) / 4)  # every PLD here is pessimistic: finer is tighter
    assert finer <= ours <= 1.01 * finer, (ours, finer, interval)
    ref = dp_pld(spec, 1e-4)  # the reference, itself above the finer grid at small epsilon
    assert ours <= 1.01 * ref
    if interval >= 1e-4:  # same or coarser grid: not below it (dpemb's truncated support moves ~1e-9)
        assert ours >= ref * (1 - 1e-6)


@pytest.mark.parametrize("n, m, rounds, z", [
    (10_000, 100, 10_000, 66.0),   # epsilon 0.043 at the most rounds (the 1e-4 grid is 3.7% high here)
    (100_000, 1000, 1000, 5.0),    # epsilon 0.25
    (1_000_000, 1000, 10_000, 2.0),  # epsilon 0.23, 10,000 rounds
])
def test_pld_within_one_percent_above_a_finer_grid(n, m, rounds, z):
    check_point(n, m, rounds, z)


@pytest.mark.slow
@pytest.mark.parametrize("n, m, rounds, z", [
    (10_000_000, 100, 10_000, 0.6613),   # epsilon 0.052, q = 1e-5: the widest privacy-loss support
    (10_000_000, 1000, 10_000, 1.434),   # epsilon 0.036 (the 1e-4 grid is 13% high here)
    (10_000, 1000, 100, 1.0),            # epsilon 7.0 (q = 0.1: the finer reference takes seconds)
])
def test_pld_precision_at_ten_million_users(n, m, rounds, z):
    check_point(n, m, rounds, z)


def test_refinement_stops_where_halving_no_longer_matters():
    """On a synthetic error law e(h) = 1 + c h^2 the accepted interval has an error within
    the tolerance and twice it would not; a value that does not shrink stops at once."""
    c = 1e6
    eps, interval = refined_pld_epsilon(lambda h: 1.0 + c * h * h, 1)
    assert eps - 1.0 <= 1.01 * PLD_TOLERANCE
    assert c * (2 * interval) ** 2 > PLD_TOLERANCE / 4  # not needlessly fine
    flat, _ = refined_pld_epsilon(lambda h: 2.5, 100)
    assert flat == 2.5
    assert refined_pld_epsilon(lambda h: math.inf, 10)[0] == math.inf

"""Gaussian noise on a clipped sum: scale, freshness, seeding, resume, refusal of z <= 0."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dpemb.privacy.clipping import ClipAndSum, ClippedSum
from dpemb.privacy.noise import GaussianNoise
from dpemb.privacy.relations import Relation
from dpemb.privacy.spec import PrivacySpec
from dpemb.privacy.statements import describe_mechanism

P_FALSE = 1e-7  # per two-sided check, so several checks per test stay below 1e-6


def std_matches(samples: np.ndarray, expected_std: float, p: float = P_FALSE) -> bool:
    """Accept iff sum(x^2) / sigma^2 lies in the central chi2(n) band (known mean 0).

    A correct mechanism fails with probability p; used by the tree tests too.
    """
    x = np.asarray(samples, dtype=np.float64).ravel()
    t = float((x * x).sum()) / expected_std**2
    return stats.chi2.ppf(p / 2, x.size) <= t <= stats.chi2.isf(p / 2, x.size)


def mean_is_zero(samples: np.ndarray, std: float, p: float = P_FALSE) -> bool:
    x = np.asarray(samples, dtype=np.float64).ravel()
    return abs(x.mean()) <= stats.norm.isf(p / 2) * std / math.sqrt(x.size)


N = 200_000  # entries per draw: the accept band is about +-1.3% of the std


def zero_sum(sensitivity, n=N, dtype=torch.float32):
    return ClippedSum(value=[torch.zeros(n, dtype=dtype)], sensitivity=sensitivity, relation=Relation.ADD_REMOVE)


@pytest.mark.parametrize("z, sensitivity", [(1.0, 1.0), (0.3, 2.0), (2.5, 0.7)])
def test_right_std_accepted_wrong_std_rejected(z, sensitivity):
    noise = GaussianNoise(z, seed=11)
    draws = noise.add(zero_sum(sensitivity))[0].numpy()
    std = z * sensitivity
    assert std_matches(draws, std)
    assert mean_is_zero(draws, std)
    # the same decision rule rejects a mechanism with 2/3 or 3/2 of the right scale
    for wrong in (2 / 3, 3 / 2):
        bad = GaussianNoise(z * wrong, seed=12).add(zero_sum(sensitivity))[0].numpy()
        assert not std_matches(bad, std)


def test_virtual_clients_k4_noise_uses_2c():
    """K > 1: the accumulator carries sensitivity 2C and the noise std is z x 2C."""
    acc = ClipAndSum.for_users([torch.zeros(N)], 0.5, 4, Relation.ADD_REMOVE)
    clipped = acc.result()
    assert clipped.sensitivity == 1.0
    draws = GaussianNoise(0.8, seed=3).add(clipped)[0].numpy()
    assert std_matches(draws, 0.8 * 1.0)
    assert not std_matches(draws, 0.8 * 0.5)  # the K = 1 scale would be wrong


def test_noise_is_added_to_the_value():
    value = torch.arange(N, dtype=torch.float64)
    clipped = ClippedSum(value=[value], sensitivity=1.0, relation=Relation.ADD_REMOVE)
    out = GaussianNoise(0.5, seed=1).add(clipped)[0]
    assert out.dtype == torch.float64
    assert std_matches((out - value).numpy(), 0.5)


def test_fresh_draws_every_call_and_seeding():
    a = GaussianNoise(1.0, seed=5)
    x, y = a.add(zero_sum(1.0, 100))[0], a.add(zero_sum(1.0, 100))[0]
    assert not torch.equal(x, y)
    assert torch.equal(x, GaussianNoise(1.0, seed=5).add(zero_sum(1.0, 100))[0])
    assert a.seeded
    u, v = GaussianNoise(1.0), GaussianNoise(1.0)
    assert not u.seeded
    assert not torch.equal(u.add(zero_sum(1.0, 100))[0], v.add(zero_sum(1.0, 100))[0])


def test_state_dict_resumes_exactly():
    a = GaussianNoise(0.7, seed=8)
    a.add(zero_sum(1.0, 50))
    state = a.state_dict()
    expected = a.add(zero_sum(1.0, 50))[0]
    b = GaussianNoise(0.7)
    b.load_state_dict(state)
    assert torch.equal(b.add(zero_sum(1.0, 50))[0], expected)
    with pytest.raises(ValueError, match="noise multiplier"):
        GaussianNoise(0.8).load_state_dict(state)


@pytest.mark.parametrize("z", [0.0, -1.0, math.nan, math.inf, -math.inf])
def test_invalid_multiplier_is_refused(z):
    with pytest.raises(ValueError, match="noise multiplier"):
        GaussianNoise(z)


def test_nonprivate_only_when_asked_and_only_with_zero():
    mech = GaussianNoise(0.0, allow_nonprivate=True)
    spec = PrivacySpec(population=100, clients_per_round=5, noise_multiplier=0.0, nonprivate=True)
    assert not mech.private and describe_mechanism(spec).startswith("not private")
    value = torch.randn(10)
    clipped = ClippedSum(value=[value], sensitivity=1.0, relation=Relation.ADD_REMOVE)
    assert torch.equal(mech.add(clipped)[0], value)
    for z in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            GaussianNoise(z, allow_nonprivate=True)
    assert GaussianNoise(0.5, allow_nonprivate=True).private


def test_secure_mode_scale_and_rules():
    mech = GaussianNoise(1.3, secure=True)
    draws = mech.add(zero_sum(1.0))[0].numpy()
    assert std_matches(draws, 1.3)
    assert not std_matches(GaussianNoise(1.3 * 1.5, secure=True).add(zero_sum(1.0))[0].numpy(), 1.3)
    with pytest.raises(ValueError, match="cannot be seeded"):
        GaussianNoise(1.0, seed=1, secure=True)
    # secure noise does not repeat the generator state between calls
    x, y = mech.add(zero_sum(1.0, 64))[0], mech.add(zero_sum(1.0, 64))[0]
    assert not torch.equal(x, y)


def test_only_clipped_sums_are_noised():
    with pytest.raises(TypeError, match="ClippedSum"):
        GaussianNoise(1.0).add([torch.zeros(3)])  # type: ignore[arg-type]


def test_std_rule_has_power_and_size():
    """Sanity of the decision rule itself on numpy draws of known scale."""
    rng = np.random.default_rng(0)
    x = rng.normal(scale=2.0, size=N)
    assert std_matches(x, 2.0)
    assert not std_matches(x, 2.0 * 2 / 3) and not std_matches(x, 2.0 * 3 / 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_secure_sampler_std_is_right_and_rejects_ten_percent_off(dtype):
    """The hardened sampler (sum of two draws, normalised) has exactly the scale z x sensitivity."""
    draws = GaussianNoise(0.8, secure=True).add(zero_sum(1.5, dtype=dtype))[0]
    assert draws.dtype == dtype
    x = draws.numpy()
    assert std_matches(x, 1.2) and mean_is_zero(x, 1.2)
    assert not std_matches(x, 1.2 * 0.9) and not std_matches(x, 1.2 * 1.1)


def test_secure_sampler_keys_a_fresh_generator_from_the_os_for_every_draw(monkeypatch):
    import dpemb.privacy.noise as noise_mod

    keys = [1, 7, 7, 8]
    calls = iter(keys)
    monkeypatch.setattr(noise_mod, "secure_seed", lambda: next(calls))
    mech = GaussianNoise(1.0, secure=True)  # key 1: its own generator, which secure draws do not use
    a, b, c = (mech.add(zero_sum(1.0, 64))[0] for _ in range(3))
    assert torch.equal(a, b) and not torch.equal(a, c)  # each draw is keyed by a fresh OS key
    assert next(calls, None) is None  # one key per draw, all used

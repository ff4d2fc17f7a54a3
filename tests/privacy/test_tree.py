"""Tree aggregation noise (DP-FTRL): exact sums, variance against theory, resume."""

import math

import pytest
import torch

from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.noise import describe_sampler
from dpemb.privacy.relations import Relation
from dpemb.privacy.tree import TreeAggregationNoise, node_variances
from tests.conftest import spy_standard_normal

from .test_noise import std_matches

N = 50_000  # independent coordinates: each is one independent run of the tree


def prefix_noise_variance(t: int, efficient: bool = True, restart_every: int | None = None) -> float:
    """Per-entry noise variance (units of sigma^2) of the noisy prefix sum after t rounds:
    the theory the tree's noise is checked against."""
    total = 0.0
    if restart_every:
        full, t = divmod(t, restart_every)
        total += full * prefix_noise_variance(restart_every, efficient) if full else 0.0
        if t == 0:
            return total
    v = node_variances(t.bit_length(), efficient)
    return total + sum(v[h] for h in range(t.bit_length()) if (t >> h) & 1)


def clipped(value, sensitivity=1.0):
    return ClippedSum(value=[value], sensitivity=sensitivity, relation=Relation.REPLACE_SPECIAL)


@pytest.mark.parametrize("efficient", [False, True])
@pytest.mark.parametrize("restart", [None, 3])
def test_nonprivate_tree_gives_exact_prefix_sums(efficient, restart):
    tree = TreeAggregationNoise(0.0, efficient=efficient, allow_nonprivate=True, restart_every=restart)
    xs = [torch.randn(6, dtype=torch.float64) for _ in range(11)]
    total = torch.zeros(6, dtype=torch.float64)
    for x in xs:
        total = total + x
        assert torch.allclose(tree.noisy_prefix_sum(clipped(x))[0], total)


def test_efficient_variances_match_hand_computation():
    # level 1: own value (var 1) with two leaves (var 2): 1/(1 + 1/2) = 2/3
    # level 2: own value with two level-1 estimates (var 4/3): 1/(1 + 3/4) = 4/7
    assert node_variances(3, True) == pytest.approx([1.0, 2 / 3, 4 / 7])
    assert node_variances(3, False) == [1.0, 1.0, 1.0]
    assert prefix_noise_variance(7, efficient=False) == 3  # popcount(7)
    assert prefix_noise_variance(7, efficient=True) == pytest.approx(1 + 2 / 3 + 4 / 7)
    assert prefix_noise_variance(5, efficient=False, restart_every=3) == 1 + 2  # [1..3] then [4,5]


@pytest.mark.parametrize("efficient", [False, True])
@pytest.mark.parametrize("restart", [None, 5])
def test_prefix_noise_variance_matches_theory(efficient, restart):
    z, sens = 0.9, 2.0
    sigma = z * sens
    tree = TreeAggregationNoise(z, efficient=efficient, seed=21, restart_every=restart)
    total = torch.zeros(N, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    for t in range(1, 13):
        x = torch.randn(N, generator=g, dtype=torch.float64)
        total += x
        noise = (tree.noisy_prefix_sum(clipped(x, sens))[0] - total).numpy()
        std = sigma * math.sqrt(prefix_noise_variance(t, efficient, restart))
        assert std_matches(noise, std, p=1e-8), t
        if t in (4, 8):  # a wrong estimator (plain vs efficient) is rejected at a power of two
            other = sigma * math.sqrt(prefix_noise_variance(t, not efficient, restart))
            assert not std_matches(noise, other, p=1e-8)


def test_round_updates_are_differences_of_prefix_sums():
    tree = TreeAggregationNoise(1.0, seed=2)
    prev = torch.zeros(4)
    outs = []
    for _ in range(6):
        p = tree.noisy_prefix_sum(clipped(torch.ones(4)))[0]
        outs.append(p - prev)
        prev = p
    assert tree.rounds == 6
    assert torch.allclose(sum(outs), prev)


@pytest.mark.parametrize("efficient", [False, True])
def test_state_dict_resumes_exactly(efficient):
    def feed(tree, n, start):
        return [tree.noisy_prefix_sum(clipped(torch.full((5,), float(start + i))))[0] for i in range(n)]

    a = TreeAggregationNoise(0.6, efficient=efficient, seed=4, restart_every=4)
    feed(a, 7, 0)
    state = a.state_dict()
    expected = feed(a, 9, 7)
    b = TreeAggregationNoise(0.6, efficient=efficient, restart_every=4)
    b.load_state_dict(state)
    assert all(torch.equal(x, y) for x, y in zip(feed(b, 9, 7), expected))
    with pytest.raises(ValueError, match="restart_every"):
        TreeAggregationNoise(0.6, efficient=efficient).load_state_dict(state)


def test_refusals():
    for z in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="noise multiplier"):
            TreeAggregationNoise(z)
    tree = TreeAggregationNoise(1.0, seed=0)
    tree.noisy_prefix_sum(clipped(torch.zeros(3), 1.0))
    with pytest.raises(ValueError, match="sensitivity changed"):
        tree.noisy_prefix_sum(clipped(torch.zeros(3), 2.0))
    with pytest.raises(TypeError):
        tree.noisy_prefix_sum(torch.zeros(3))  # type: ignore[arg-type]
    assert TreeAggregationNoise(1.0, seed=1).seeded and not TreeAggregationNoise(1.0).seeded


def test_secure_tree_draws_with_the_hardened_sampler_at_the_right_scale(monkeypatch):
    """secure=True: every node's noise comes from noise.standard_normal(secure=True), std as theory."""
    import dpemb.privacy.tree as tree_mod

    calls = spy_standard_normal(monkeypatch, tree_mod)
    z, sens = 0.9, 2.0
    tree = TreeAggregationNoise(z, efficient=True, secure=True)
    assert tree.secure and "secure" in describe_sampler(tree.secure, tree.seeded)  # what the report prints
    for t in range(1, 5):
        noise = tree.noisy_prefix_sum(clipped(torch.zeros(N, dtype=torch.float64), sens))[0].numpy()
        std = z * sens * math.sqrt(prefix_noise_variance(t, True))
        assert std_matches(noise, std, p=1e-8)
        assert not std_matches(noise, 0.9 * std, p=1e-8) and not std_matches(noise, 1.1 * std, p=1e-8)
    assert calls and all(calls)
    with pytest.raises(ValueError, match="cannot be seeded"):
        TreeAggregationNoise(1.0, seed=3, secure=True)
    with pytest.raises(ValueError, match="secure"):
        TreeAggregationNoise(1.0).load_state_dict(tree.state_dict())

"""Adaptive clipping: the split of z, epsilon against an independent dp_accounting
computation, convergence to the target quantile, the count's noise and sensitivity,
refusals, and the state's exact resume."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.rdp import RdpAccountant

from dpemb.privacy.adaptive_clipping import (
    AdaptiveClippingError,
    AdaptiveClipping,
    AdaptiveClipState,
    count_sensitivity,
    expected_reporting_clients,
    release_count,
    split_noise_multiplier,
)
from dpemb.privacy.clipping import ClipAndSum
from dpemb.privacy.plan import make_noise
from dpemb.privacy.ledger import PrivacyLedger
from dpemb.privacy.noise import GaussianNoise
from dpemb.privacy.relations import Relation, user_sensitivity
from dpemb.privacy.sampling import VirtualClientSampler
from dpemb.privacy.spec import PrivacySpec, PrivacySpecError
from tests.privacy.test_neighbouring import ADVERSARIES, client_update, honest_data
from tests.privacy.test_noise import std_matches


def spec_of(z=1.0, m=32, k=1, n=2000, sigma_b=None, gamma=0.5, **kw):
    return PrivacySpec(population=n, clients_per_round=m, users_per_client=k, noise_multiplier=z, rounds=50,
                       adaptive_clipping=AdaptiveClipping(gamma, count_stddev=sigma_b), **kw)


# ------------------------------------------------------------------ the split
@pytest.mark.parametrize("z, sigma_b, delta_b", [(1.0, 1.6, 0.5), (0.62, 1.6, 1.0), (3.0, 40.0, 0.5), (0.3, 0.31, 1.0)])
def test_split_keeps_the_total_noise_multiplier(z, sigma_b, delta_b):
    z_value, z_count = split_noise_multiplier(z, sigma_b, delta_b)
    assert z_count == pytest.approx(sigma_b / delta_b)
    assert 1 / z**2 == pytest.approx(1 / z_value**2 + (delta_b / sigma_b) ** 2, rel=1e-12)
    assert z_value > z  # the update gets less privacy per query, the pair exactly z


@pytest.mark.parametrize("z, sigma_b, delta_b", [(3.2, 1.6, 0.5), (4.0, 1.6, 0.5), (1.0, 1.0, 1.0), (2.0, 1.0, 1.0)])
def test_split_refuses_a_count_that_would_spend_the_whole_budget(z, sigma_b, delta_b):
    with pytest.raises(AdaptiveClippingError, match="clip-count-stddev"):
        split_noise_multiplier(z, sigma_b, delta_b)


def test_count_sensitivity_follows_k_and_relation():
    assert count_sensitivity(1, Relation.ADD_REMOVE) == 0.5  # centred bit: a client appears or not
    assert count_sensitivity(2, Relation.ADD_REMOVE) == 1.0  # one client's bit flips
    assert count_sensitivity(8, "add-remove") == 1.0
    assert count_sensitivity(1, Relation.REPLACE_ONE) == 1.0
    assert count_sensitivity(1, Relation.REPLACE_SPECIAL) == 1.0  # conservative (null user reports b = 1)
    # K = 1: TFF's formula z_value = (z^-2 - (2 sigma_b)^-2)^(-1/2), default sigma_b = M / 20
    s = spec_of(z=1.0, m=32)
    assert s.count_stddev == pytest.approx(32 / 20)
    assert s.value_noise_multiplier == pytest.approx((1.0 - (2 * 1.6) ** -2) ** -0.5, rel=1e-12)
    assert make_noise(s, seed=0).noise_multiplier == s.value_noise_multiplier
    assert s.noise_std == pytest.approx(s.value_noise_multiplier * s.sensitivity)
    s4 = spec_of(z=1.0, m=32, k=4, sigma_b=4.0)
    assert s4.count_sensitivity == 1.0
    assert s4.value_noise_multiplier == pytest.approx((1.0 - 4.0**-2) ** -0.5, rel=1e-12)


def test_spec_refusals():
    with pytest.raises(PrivacySpecError, match="not below sigma_b / Delta_b"):
        spec_of(z=3.3, m=32)  # 3.3 >= 1.6 / 0.5
    spec_of(z=3.1, m=32)  # just below: allowed
    with pytest.raises(PrivacySpecError, match="tree aggregation"):
        PrivacySpec(population=2000, clients_per_round=32, mechanism="tree",
                    adaptive_clipping=AdaptiveClipping(0.5, count_stddev=10.0))
    for bad in (dict(target_quantile=0.0), dict(target_quantile=1.0), dict(target_quantile=float("nan")),
                dict(target_quantile=0.5, learning_rate=0.0), dict(target_quantile=0.5, count_stddev=-1.0)):
        with pytest.raises(AdaptiveClippingError):
            AdaptiveClipping(**bad)
    # non-private: no split, the count is used un-noised
    nonpriv = PrivacySpec(population=2000, clients_per_round=32, noise_multiplier=0.0, nonprivate=True,
                          adaptive_clipping=AdaptiveClipping(0.5))
    assert nonpriv.value_noise_multiplier == 0.0
    assert GaussianNoise(0.0, allow_nonprivate=True).add_to_count(3.5, 1.0) == 3.5


def test_adaptive_knobs_are_hashed_and_round_trip():
    a, b = spec_of(gamma=0.5), spec_of(gamma=0.9)
    fixed = PrivacySpec(population=2000, clients_per_round=32, noise_multiplier=1.0, rounds=50)
    assert len({a.fingerprint(), b.fingerprint(), fixed.fingerprint()}) == 3
    assert "adaptive_clipping" not in fixed.to_dict()  # fixed-clip fingerprints are unchanged
    assert PrivacySpec(**a.to_dict()) == a and PrivacySpec(**a.to_dict()).fingerprint() == a.fingerprint()


def test_expected_reporting_clients_is_the_mean_number_of_non_empty_clients():
    assert expected_reporting_clients(32, 1, 1000, "poisson") == 32.0
    n, m, k = 300, 10, 3
    sampler = VirtualClientSampler(n, clients_per_round=m, users_per_client=k, seed=0)
    counts = [sum(len(c) > 0 for c in sampler.sample_round()) for _ in range(4000)]
    assert np.mean(counts) == pytest.approx(expected_reporting_clients(m, k, n, "poisson"), rel=0.01)
    fixed = VirtualClientSampler(n, clients_per_round=m, users_per_client=k, sampling="fixed", seed=0)
    counts = [sum(len(c) > 0 for c in fixed.sample_round()) for _ in range(4000)]
    assert np.mean(counts) == pytest.approx(expected_reporting_clients(m, k, n, "fixed"), rel=0.01)


# ------------------------------------------------------------------ accounting
def independent_epsilon(q, z_value, sigma_b, delta_b, rounds, delta):
    """dp_accounting directly: the pair (sum, count) per round as ONE Poisson-sampled Gaussian."""
    combined = (z_value**-2 + (delta_b / sigma_b) ** 2) ** -0.5
    acc = RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(combined)), rounds)
    return acc.get_epsilon(delta)


def composed_inside_one_sample(q, z_value, sigma_b, delta_b, rounds, delta):
    """TF Privacy's form: one Poisson sample per round, the two Gaussians composed inside it."""
    acc = RdpAccountant()
    both = dpa.ComposedDpEvent([dpa.GaussianDpEvent(z_value), dpa.GaussianDpEvent(sigma_b / delta_b)])
    acc.compose(dpa.PoissonSampledDpEvent(q, both), rounds)
    return acc.get_epsilon(delta)


def separate_events(q, z_value, sigma_b, delta_b, rounds, delta, *, amplified):
    """The two queries as two separate events per round: unamplified (a valid, loose bound),
    or each with its OWN Poisson sample (NOT valid here: both queries see one sample)."""
    acc = RdpAccountant()
    events = [dpa.GaussianDpEvent(z_value), dpa.GaussianDpEvent(sigma_b / delta_b)]
    if amplified:
        events = [dpa.PoissonSampledDpEvent(q, e) for e in events]
    acc.compose(dpa.ComposedDpEvent(events), rounds)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("k, sigma_b, z", [(1, None, 0.8), (3, 6.0, 1.1)])
def test_epsilon_equals_independent_dp_accounting_of_both_releases(k, sigma_b, z):
    m, n, t = 32, 2000, 50
    spec = spec_of(z=z, m=m, k=k, n=n, sigma_b=sigma_b)
    # what the run uses: the update noise's multiplier and the count's std
    z_value = make_noise(spec, seed=0).noise_multiplier
    sigma = spec.count_stddev if sigma_b is None else sigma_b
    delta_b = 0.5 if k == 1 else 1.0  # typed here, not taken from dpemb
    q, delta = m * k / n, 1 / (10 * n)
    ledger = PrivacyLedger(spec)
    ledger.step(t)
    ours = ledger.epsilon("rdp")
    assert ours == pytest.approx(independent_epsilon(q, z_value, sigma, delta_b, t, delta), rel=1e-9)
    assert ours == pytest.approx(composed_inside_one_sample(q, z_value, sigma, delta_b, t, delta), rel=1e-9)
    assert separate_events(q, z_value, sigma, delta_b, t, delta, amplified=False) >= ours
    # two separately sampled events would UNDER-state epsilon: they assume independent samples
    assert separate_events(q, z_value, sigma, delta_b, t, delta, amplified=True) < ours
    # and the total z alone gives the same number (the split is exact)
    fixed = PrivacySpec(population=n, clients_per_round=m, users_per_client=k, noise_multiplier=z, rounds=t)
    fixed_ledger = PrivacyLedger(fixed)
    fixed_ledger.step(t)
    assert fixed_ledger.epsilon("rdp") == pytest.approx(ours, rel=1e-12)


def test_calibration_to_a_target_epsilon_is_unchanged_and_then_split():
    from dataclasses import replace

    from dpemb.privacy.calibration import calibrate_noise_multiplier

    spec = spec_of(z=1.0, m=32, n=2000)
    z = calibrate_noise_multiplier(spec, 4.0)
    assert z == calibrate_noise_multiplier(replace(spec, adaptive_clipping=None), 4.0)
    tuned = replace(spec, noise_multiplier=z)
    assert tuned.value_noise_multiplier > z


# ------------------------------------------------------------------ the rule
def run_rule(gamma, *, rounds=300, m=100, sigma_b=1.0, c0=0.05, seed=0):
    """Lognormal(0, 1) client norms, the real ClipAndSum, the real noise; returns the clips."""
    rng = np.random.default_rng(seed)
    state = AdaptiveClipState(AdaptiveClipping(gamma, learning_rate=0.2, count_stddev=sigma_b), c0)
    noise = GaussianNoise(1.0, seed=seed)
    clips = []
    for _ in range(rounds):
        acc = ClipAndSum.for_users([torch.zeros(1, dtype=torch.float64)], state.clip_norm, 1, Relation.ADD_REMOVE)
        for norm in rng.lognormal(0.0, 1.0, size=m):
            acc.add([torch.tensor([norm], dtype=torch.float64)])
        state.update(release_count(acc.result(), noise, sigma_b), m)
        clips.append(state.clip_norm)
    return np.asarray(clips)


@pytest.mark.parametrize("gamma", [0.5, 0.9])
def test_clip_converges_to_the_target_quantile(gamma):
    from scipy import stats

    clips = run_rule(gamma)
    target = math.exp(stats.norm.ppf(gamma))  # the gamma-quantile of lognormal(0, 1)
    settled = float(np.exp(np.log(clips[-150:]).mean()))
    assert settled == pytest.approx(target, rel=0.08)
    assert stats.norm.cdf(math.log(settled)) == pytest.approx(gamma, abs=0.03)
    assert clips[0] < 0.1 * target  # it started far away


def test_state_resumes_exactly_and_refuses_other_knobs():
    cfg = AdaptiveClipping(0.7, count_stddev=2.0)
    a = AdaptiveClipState(cfg, 0.5)
    for c in (3.0, -1.0, 10.2):
        a.update(c, 20)
    b = AdaptiveClipState(cfg, 0.5)
    b.load_state_dict(a.state_dict())
    assert (b.clip_norm, b.round) == (a.clip_norm, a.round) == (b.clip_norm, 3)
    assert a.update(1.0, 20) == b.update(1.0, 20)
    with pytest.raises(ValueError, match="adaptive clipping state"):
        AdaptiveClipState(AdaptiveClipping(0.5, count_stddev=2.0), 0.5).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="adaptive clipping state"):
        AdaptiveClipState(cfg, 0.4).load_state_dict(a.state_dict())


def test_update_rule_is_the_geometric_step():
    s = AdaptiveClipState(AdaptiveClipping(0.9, learning_rate=0.2), 1.0)
    # 20 expected clients, centred noised count 4 -> b_hat = 4 / 20 + 1/2 = 0.7
    assert s.update(4.0, 20) == pytest.approx(math.exp(-0.2 * (0.7 - 0.9)))


# ------------------------------------------------------------------ the count's noise
def test_count_noise_has_std_sigma_b_and_is_one_draw():
    noise = GaussianNoise(0.7, seed=3)
    x = np.array([noise.add_to_count(0.0, 1.6) for _ in range(50_000)])
    assert std_matches(x, 1.6) and not std_matches(x, 2 * 1.6) and not std_matches(x, 1.6 / 2)
    assert abs(x.mean()) < 5 * 1.6 / math.sqrt(x.size)
    y = noise.add_to_count(7.0, 1e-9)
    assert y == pytest.approx(7.0, abs=1e-6)  # noise goes on the count itself (a sum)


def test_count_noise_secure_sampler(monkeypatch):
    import dpemb.privacy.noise as noise_mod
    from tests.conftest import spy_standard_normal

    calls = spy_standard_normal(monkeypatch, noise_mod)
    noise = GaussianNoise(0.7, secure=True)
    x = np.array([noise.add_to_count(0.0, 2.0) for _ in range(20_000)])
    assert calls == [True] * 20_000  # one draw per count, through the secure sampler
    assert std_matches(x, 2.0) and not std_matches(x, 4.0)


def test_count_noise_resumes_with_the_noise_state():
    a = GaussianNoise(1.0, seed=5)
    a.add_to_count(0.0, 1.0)
    b = GaussianNoise(1.0, seed=6)
    b.load_state_dict(a.state_dict())
    assert a.add_to_count(2.0, 1.0) == b.add_to_count(2.0, 1.0)


def test_released_count_is_the_centred_count_plus_noise():
    acc = ClipAndSum.for_users([torch.zeros(2)], 1.0, 1, Relation.ADD_REMOVE)
    for v in ([0.1, 0.0], [3.0, 0.0], [0.0, 0.9], [float("nan"), 0.0], [1.0, 0.0]):
        acc.add([torch.tensor(v)])
    clipped = acc.result()
    assert (clipped.count, clipped.num_unclipped, clipped.num_clipped, clipped.num_nonfinite) == (5, 3, 1, 1)

    class Exact:
        def add_to_count(self, count, std):
            return count

    assert release_count(clipped, Exact(), 1.0) == 3 - 5 / 2


# ------------------------------------------------------------------ sensitivity of the count
C = 0.7
DIM = 5


def centred_count(clients, data):
    acc = ClipAndSum([torch.zeros(DIM, dtype=torch.float64)], C, 2 * C, Relation.ADD_REMOVE)
    for users in clients:
        acc.add([client_update([data[u] for u in users if data[u] is not None])])
    res = acc.result()
    return res.num_unclipped - res.count / 2


@pytest.mark.parametrize("k", [1, 3])
def test_adding_one_user_moves_the_count_by_at_most_delta_b(k):
    n, m = 120, 8
    q = m * k / n
    bound = count_sensitivity(k, Relation.ADD_REMOVE)
    data = honest_data(n, 0)
    worst = 0.0
    for seed in range(3):
        a = VirtualClientSampler(n, clients_per_round=m, users_per_client=k, seed=seed, sampling_rate=q)
        b = VirtualClientSampler(n + 1, clients_per_round=m, users_per_client=k, seed=seed, sampling_rate=q)
        for _ in range(40):
            ca, cb = a.sample_round(), b.sample_round()
            s1 = centred_count(ca, data)
            for adversary in ADVERSARIES.values():
                worst = max(worst, abs(centred_count(cb, data + [adversary]) - s1))
    assert worst <= bound
    assert worst == bound  # attained: with K > 1, 1/2 would be WRONG


@pytest.mark.parametrize("k", [1, 4])
def test_replacing_one_user_moves_the_count_by_at_most_one(k):
    n, m = 60, 5
    data = honest_data(n, 1)
    worst = 0.0
    for victim in (0, 17, 59):
        sampler = VirtualClientSampler(n, clients_per_round=m, users_per_client=k, sampling="fixed", seed=victim)
        for _ in range(40):
            clients = sampler.sample_round()
            for adversary in ADVERSARIES.values():
                replaced = list(data)
                replaced[victim] = adversary
                worst = max(worst, abs(centred_count(clients, replaced) - centred_count(clients, data)))
    assert worst <= count_sensitivity(k, Relation.REPLACE_ONE) == 1.0


def test_adding_one_user_with_real_local_training_k2():
    """Several local steps per client (K = 2): the centred count moves by at most 1."""
    from dpemb.algorithms.client import ClientTrainer
    from dpemb.algorithms.config import FederatedConfig
    from dpemb.algorithms.round import ClientData, map_clients
    from dpemb.privacy.client_keys import ClientRandomness, client_keys
    from dpemb.training.config import ModelConfig
    from dpemb.training.modelinit import build_model
    from tests.conftest import make_tiny_dataset

    big = make_tiny_dataset(num_users=30).split().train
    last = big.num_users - 1
    small = big.select(big.user_of_example() != last)
    assert small.num_users == last and small.num_classes == big.num_classes
    torch.manual_seed(0)
    model, _ = build_model(ModelConfig(backbone="lenet", embedding_dim=16), big.image_shape, per_user_training=True)
    trainer = ClientTrainer(model, big.num_classes, FederatedConfig(local_batch_size=2))  # >= 3 local steps
    start = torch.nn.utils.parameters_to_vector([p for p in model.parameters() if p.requires_grad]).detach()
    randomness = ClientRandomness(seed=11)
    m, k = 3, 2
    q = m * k / big.num_users
    sa = VirtualClientSampler(small.num_users, clients_per_round=m, users_per_client=k, seed=4, sampling_rate=q)
    sb = VirtualClientSampler(big.num_users, clients_per_round=m, users_per_client=k, seed=4, sampling_rate=q)

    def deltas(ds, slots, rnd):
        results = map_clients(trainer, start, slots, client_keys(slots, k), ClientData.of(ds), randomness, rnd)
        return [r.delta for r, _ in results]

    checked, rnd = 0, 0
    while checked < 2 and rnd < 40:
        ca, cb = sa.sample_round(), sb.sample_round()
        if any(last in c for c in cb):
            da, db = deltas(small, ca, rnd), deltas(big, cb, rnd)
            norms = sorted(float(d.norm()) for d in da + db)
            for clip in norms:  # every threshold: each client's bit may flip
                counts = []
                for ds_deltas in (da, db):
                    acc = ClipAndSum.for_users([torch.zeros_like(da[0])], clip * (1 + 1e-9), k, Relation.ADD_REMOVE)
                    for d in ds_deltas:
                        acc.add([d])
                    r = acc.result()
                    counts.append(r.num_unclipped - r.count / 2)
                assert abs(counts[0] - counts[1]) <= count_sensitivity(k, Relation.ADD_REMOVE)
            checked += 1
        rnd += 1
    assert checked == 2
    assert user_sensitivity(1.0, k, Relation.ADD_REMOVE) == 2.0  # and the sum's sensitivity is 2C there

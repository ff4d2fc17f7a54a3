"""User sampling and virtual-client grouping."""

import numpy as np
import pytest
from scipy import stats

from dpemb.privacy.sampling import VirtualClientSampler

P_FALSE = 1e-7  # per statistical check


def test_poisson_count_matches_rate():
    n, m, rounds = 2000, 20, 300
    s = VirtualClientSampler(n, clients_per_round=m, seed=3)
    counts = np.array([sum(len(c) for c in s.sample_round()) for _ in range(rounds)])
    total = counts.sum()  # ~ Binomial(rounds * n, q)
    q = s.sampling_rate
    assert q == pytest.approx(m / n)
    lo, hi = stats.binom.ppf(P_FALSE, rounds * n, q), stats.binom.isf(P_FALSE, rounds * n, q)
    assert lo <= total <= hi
    # the realised count varies (it is not fixed-size sampling)
    assert counts.std() > 0


def test_poisson_inclusion_is_uniform_over_users():
    n, m, rounds = 200, 20, 500
    s = VirtualClientSampler(n, clients_per_round=m, seed=5)
    hits = np.zeros(n)
    for _ in range(rounds):
        for c in s.sample_round():
            hits[c] += 1
    # each user's count ~ Binomial(rounds, q); chi-square on the sum of standardised squares
    q = m / n
    chi = (((hits - rounds * q) ** 2) / (rounds * q * (1 - q))).sum()
    assert chi < stats.chi2.isf(P_FALSE, n)
    assert chi > stats.chi2.ppf(P_FALSE, n)


@pytest.mark.parametrize("sampling", ["poisson", "fixed", "epoch"])
def test_k_greater_than_one_gives_m_disjoint_slots(sampling):
    n, m, k = 500, 10, 4
    s = VirtualClientSampler(n, clients_per_round=m, users_per_client=k, sampling=sampling, seed=1)
    for _ in range(20):
        clients = s.sample_round()
        assert len(clients) == m
        users = np.concatenate(clients)
        assert len(np.unique(users)) == len(users)  # a user lands in at most one client
        assert users.min() >= 0 and users.max() < n
        if sampling == "fixed":
            assert len(users) == m * k


def test_slot_assignment_is_uniform():
    n, m, k = 400, 8, 5
    s = VirtualClientSampler(n, clients_per_round=m, users_per_client=k, sampling="fixed", seed=2)
    occupancy = np.zeros(m)
    for _ in range(400):
        occupancy += [len(c) for c in s.sample_round()]
    expected = occupancy.sum() / m
    chi = ((occupancy - expected) ** 2 / expected).sum()
    assert chi < stats.chi2.isf(P_FALSE, m - 1)


def test_k_one_clients_are_singletons():
    s = VirtualClientSampler(100, clients_per_round=10, sampling="fixed", seed=0)
    clients = s.sample_round()
    assert len(clients) == 10 and all(len(c) == 1 for c in clients)
    assert len(np.unique(np.concatenate(clients))) == 10


def test_epoch_sampling_visits_every_user_once_per_epoch():
    n, m, k = 103, 5, 2  # 10 users per round, R = 11 rounds, last round 3 users
    s = VirtualClientSampler(n, clients_per_round=m, users_per_client=k, sampling="epoch", seed=4)
    assert s.rounds_per_epoch == 11
    for _ in range(3):
        seen = [np.concatenate(s.sample_round()) for _ in range(11)]
        assert [len(x) for x in seen] == [10] * 10 + [3]
        assert sorted(np.concatenate(seen).tolist()) == list(range(n))


@pytest.mark.parametrize("k", [1, 3])
def test_appending_one_user_changes_at_most_one_client(k):
    """Same seed and rate: the population with one extra user differs in <= 1 client per round."""
    n, m = 300, 12
    q = m * k / n
    changed_rounds = 0
    for seed in range(5):
        a = VirtualClientSampler(n, clients_per_round=m, users_per_client=k, seed=seed, sampling_rate=q)
        b = VirtualClientSampler(n + 1, clients_per_round=m, users_per_client=k, seed=seed, sampling_rate=q)
        for _ in range(60):
            ca = [tuple(c) for c in a.sample_round()]
            cb = [tuple(c) for c in b.sample_round()]
            if k == 1:
                assert set(cb) - set(ca) <= {(n,)} and set(ca) <= set(cb)
                changed_rounds += set(cb) != set(ca)
            else:
                diff = [i for i, (x, y) in enumerate(zip(ca, cb)) if x != y]
                assert len(diff) <= 1
                if diff:
                    assert set(cb[diff[0]]) - set(ca[diff[0]]) == {n}
                changed_rounds += bool(diff)
    assert changed_rounds > 0  # the extra user was sampled sometimes: the test can see a change


def test_chunking_would_break_the_property():
    """Why slots: cutting a shuffled list into groups of K moves many users when one is added."""
    rng = np.random.default_rng(0)
    users = np.sort(rng.choice(1000, size=40, replace=False))
    chunks = [tuple(users[i:i + 4]) for i in range(0, 40, 4)]
    with_extra = np.insert(users, 3, 1000)  # one extra user early in the list
    chunks2 = [tuple(with_extra[i:i + 4]) for i in range(0, 41, 4)]
    assert sum(x != y for x, y in zip(chunks, chunks2)) > 1


def test_state_dict_resumes_exactly():
    for sampling in ("poisson", "fixed", "epoch"):
        a = VirtualClientSampler(97, clients_per_round=4, users_per_client=3, sampling=sampling, seed=9)
        for _ in range(13):
            a.sample_round()
        state = a.state_dict()
        rest = [a.sample_round() for _ in range(15)]
        b = VirtualClientSampler(97, clients_per_round=4, users_per_client=3, sampling=sampling)
        b.load_state_dict(state)
        again = [b.sample_round() for _ in range(15)]
        assert all(all(np.array_equal(x, y) for x, y in zip(r1, r2)) for r1, r2 in zip(rest, again))
        assert b.seeded
    other = VirtualClientSampler(98, clients_per_round=4, users_per_client=3, sampling="epoch")
    with pytest.raises(ValueError, match="saved for"):
        other.load_state_dict(state)


def test_unseeded_samplers_differ_and_say_so():
    a = VirtualClientSampler(10_000, clients_per_round=50)
    b = VirtualClientSampler(10_000, clients_per_round=50)
    assert not a.seeded
    assert [tuple(c) for c in a.sample_round()] != [tuple(c) for c in b.sample_round()]


def test_public_normaliser_and_errors():
    s = VirtualClientSampler(100, clients_per_round=7, users_per_client=2)
    assert s.expected_clients == 7
    with pytest.raises(ValueError, match="exceed 1"):
        VirtualClientSampler(10, clients_per_round=6, users_per_client=2)
    with pytest.raises(ValueError, match="sampling must be"):
        VirtualClientSampler(10, clients_per_round=2, sampling="chunks")
    with pytest.raises(ValueError, match="clients per round"):
        VirtualClientSampler(10, clients_per_round=0)
    with pytest.raises(ValueError, match="sampling rate"):
        VirtualClientSampler(10, clients_per_round=2, sampling_rate=1.5)

"""Cyclic Poisson participation: b-min-separation, keyed groups, rates, b = 1, resume."""

import numpy as np
import pytest
from scipy import stats

from dpemb.privacy.cyclic_sampling import CyclicPoissonSampler, check_assignment, group_assignment
from dpemb.privacy.relations import Relation
from dpemb.privacy.sampling import VirtualClientSampler

P_FALSE = 1e-7  # per statistical check


def _rounds(sampler, rounds):
    return [sampler.sample_round() for _ in range(rounds)]


@pytest.mark.parametrize("assignment", ["independent", "balanced"])
@pytest.mark.parametrize("bands,users_per_client", [(1, 1), (2, 1), (3, 2), (5, 1), (8, 3)])
def test_no_user_twice_in_any_b_consecutive_rounds(bands, users_per_client, assignment):
    n, m, rounds = 600, 10, 2000
    s = CyclicPoissonSampler(n, bands=bands, clients_per_round=m, users_per_client=users_per_client,
                             seed=11, assignment=assignment)
    last = np.full(n, -10**9)
    seen = np.zeros(n, dtype=int)
    for t in range(rounds):
        clients = s.sample_round()
        users = np.concatenate(clients) if clients else np.zeros(0, dtype=np.int64)
        assert len(np.unique(users)) == len(users)  # one client per user per round
        assert (s.groups[users] == t % bands).all()  # only the round's group
        assert (t - last[users] >= bands).all()  # the separation, directly
        last[users] = t
        seen[users] += 1
    assert seen.max() <= -(-rounds // bands)  # at most ceil(T / b) participations
    assert (seen > 0).mean() > 0.9  # and users do take part


@pytest.mark.parametrize("bands", [1, 4])
def test_rate_within_the_group(bands):
    n, m, k, rounds = 1000, 10, 2, 400
    s = CyclicPoissonSampler(n, bands=bands, clients_per_round=m, users_per_client=k, seed=4)
    q = s.sampling_rate
    assert q == pytest.approx(bands * m * k / n)
    total = 0
    trials = 0
    for t in range(rounds):
        total += sum(len(c) for c in s.sample_round())
        trials += len(s.members(t % bands))
    # the total count is Binomial(sum of the sampled groups' sizes, q)
    assert stats.binom.ppf(P_FALSE, trials, q) <= total <= stats.binom.isf(P_FALSE, trials, q)


def test_one_band_is_poisson_sampling_exactly():
    for k in (1, 3):
        cyc = CyclicPoissonSampler(500, bands=1, clients_per_round=8, users_per_client=k, seed=9)
        poi = VirtualClientSampler(500, clients_per_round=8, users_per_client=k, seed=9)
        assert cyc.sampling_rate == poi.sampling_rate
        for _ in range(50):
            a, b = cyc.sample_round(), poi.sample_round()
            assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def test_groups_are_keyed_by_the_run_key_only():
    n, b = 1000, 7
    for assignment in ("independent", "balanced"):
        g1 = CyclicPoissonSampler(n, bands=b, clients_per_round=5, seed=1, assignment=assignment).groups
        g1b = CyclicPoissonSampler(n, bands=b, clients_per_round=5, seed=1, assignment=assignment).groups
        g2 = CyclicPoissonSampler(n, bands=b, clients_per_round=5, seed=2, assignment=assignment).groups
        assert np.array_equal(g1, g1b)  # same key, same groups
        assert (g1 != g2).mean() > 0.5  # another key, other groups (about 1 - 1/b differ)
        # the rate and grouping parameters do not enter the assignment: only (key, N, b)
        g1c = CyclicPoissonSampler(n, bands=b, clients_per_round=9, users_per_client=2, seed=1,
                                   assignment=assignment).groups
        assert np.array_equal(g1, g1c)
        unseeded = CyclicPoissonSampler(n, bands=b, clients_per_round=5, assignment=assignment)
        assert not unseeded.seeded and (unseeded.groups != g1).mean() > 0.5  # OS-keyed


def test_balanced_assignment_is_a_keyed_permutation_cut_mod_b():
    n, b = 1003, 8
    rng = np.random.Generator(np.random.PCG64(5))
    groups = group_assignment(n, b, rng, "balanced")
    perm = np.random.Generator(np.random.PCG64(5)).permutation(n)
    assert np.array_equal(groups[perm], np.arange(n) % b)  # position p of the permutation -> group p mod b
    sizes = np.bincount(groups, minlength=b)
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == n


def test_independent_assignment_is_uniform_and_stable_when_users_are_appended():
    n, b = 4000, 5
    s = CyclicPoissonSampler(n, bands=b, clients_per_round=20, seed=3)
    sizes = np.bincount(s.groups, minlength=b)
    chi = ((sizes - n / b) ** 2 / (n / b)).sum()
    assert chi < stats.chi2.isf(P_FALSE, b - 1)
    # one more user appended: every other user keeps its group and, with a pinned rate, its rounds
    q = s.sampling_rate
    a = CyclicPoissonSampler(n, bands=b, clients_per_round=20, seed=3, sampling_rate=q)
    c = CyclicPoissonSampler(n + 1, bands=b, clients_per_round=20, seed=3, sampling_rate=q)
    assert np.array_equal(a.groups, c.groups[:n])
    for _ in range(60):
        ra, rc = np.concatenate(a.sample_round()), np.concatenate(c.sample_round())
        assert np.array_equal(ra, rc[rc < n])


def test_balanced_assignment_is_refused_under_add_remove():
    assert check_assignment("independent", Relation.ADD_REMOVE) == "independent"
    assert check_assignment("balanced", "replace-special") == "balanced"
    with pytest.raises(ValueError, match="replace-special"):
        check_assignment("balanced", Relation.ADD_REMOVE)
    with pytest.raises(ValueError, match="assignment must be one of"):
        check_assignment("sorted", Relation.REPLACE_SPECIAL)


def test_invalid_configurations_name_the_fix():
    with pytest.raises(ValueError, match="fewer bands"):
        CyclicPoissonSampler(100, bands=6, clients_per_round=20)  # b*M = 120 > N
    with pytest.raises(ValueError, match="bands"):
        CyclicPoissonSampler(100, bands=0, clients_per_round=2)
    with pytest.raises(ValueError, match="assignment"):
        CyclicPoissonSampler(100, bands=2, clients_per_round=2, assignment="by-label")


def test_resume_equals_uninterrupted():
    kw = dict(bands=4, clients_per_round=6, users_per_client=2, seed=21)
    full = CyclicPoissonSampler(800, **kw)
    expected = _rounds(full, 30)
    first = CyclicPoissonSampler(800, **kw)
    head = _rounds(first, 13)
    state = first.state_dict()
    resumed = CyclicPoissonSampler(800, bands=4, clients_per_round=6, users_per_client=2, seed=999)
    resumed.load_state_dict(state)
    tail = _rounds(resumed, 17)
    for a, b in zip(expected, head + tail):
        assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    other = CyclicPoissonSampler(800, bands=5, clients_per_round=6, users_per_client=2, seed=21)
    with pytest.raises(ValueError, match="saved for"):
        other.load_state_dict(state)


def test_the_separation_check_has_teeth():
    """Plain Poisson sampling at the same per-round rate puts users in rounds closer than b."""
    n, m, b, rounds = 600, 10, 5, 2000
    s = VirtualClientSampler(n, clients_per_round=m, seed=11)
    last, closest = np.full(n, -10**9), 10**9
    for t in range(rounds):
        users = np.concatenate(s.sample_round())
        closest = min(closest, int((t - last[users]).min(initial=10**9)))
        last[users] = t
    assert closest < b

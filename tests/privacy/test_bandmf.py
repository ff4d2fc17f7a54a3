"""BandMF noise: the strategy's coefficients and column norms, the streamed noise equals
C^{-1} Z, its covariance (a test that rejects wrong strategies), the sensitivity under
b-min-separation, b = 1 is Gaussian noise, fail-closed rules and resume."""

import io
import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from dpemb.privacy.bandmf import BandMFNoise
from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.cyclic_sampling import CyclicPoissonSampler
from dpemb.privacy.noise import GaussianNoise
from dpemb.privacy.relations import Relation
from dpemb.privacy.strategy import banded_sqrt_coefficients, prefix_noise_rms

P_FALSE = 1e-7  # per statistical check


def strategy_matrix(coefficients, rounds):
    """C (rounds x rounds, float64): lower-triangular Toeplitz, C[i, j] = c_{i-j} for
    0 <= i - j < len(coefficients) (the mechanism never forms it)."""
    c = torch.zeros(rounds, rounds, dtype=torch.float64)
    for k, ck in enumerate(coefficients[:rounds]):
        c += ck * torch.diag(torch.ones(rounds - k, dtype=torch.float64), -k)
    return c


def max_column_norm(coefficients, rounds=None):
    """Column 0's norm, sqrt(sum of the first min(b, rounds) c_k^2): the largest (a test
    checks it against the matrix), the sensitivity factor of one participation."""
    return math.sqrt(sum(c * c for c in coefficients[:rounds]))


def _sum(value, sensitivity=2.0):
    return ClippedSum(value, sensitivity, Relation.ADD_REMOVE)


def _noise_sequence(mech, rounds, like):
    """The noise of ``rounds`` releases of zero sums shaped like ``like`` (rounds x entries)."""
    return torch.stack([torch.cat([v.flatten() for v in mech.release(_sum([torch.zeros_like(x) for x in like]))])
                        for _ in range(rounds)])


# ---------------------------------------------------------------------- the strategy
def test_coefficients_are_those_of_the_inverse_square_root():
    c = banded_sqrt_coefficients(6, normalize=False)
    assert c == pytest.approx([1, 1 / 2, 3 / 8, 5 / 16, 35 / 128, 63 / 256], abs=0, rel=1e-15)
    # c_k = binom(2k, k) / 4^k, and the full series is the inverse square root of the prefix-sum
    # matrix: C C = A (lower-triangular ones) when b >= n
    assert c == pytest.approx([special.comb(2 * k, k) / 4**k for k in range(6)], rel=1e-14)
    n = 9
    full = strategy_matrix(banded_sqrt_coefficients(n, normalize=False), n)
    assert torch.allclose(full @ full, torch.tril(torch.ones(n, n, dtype=torch.float64)), atol=1e-12)
    # rounds < bands keeps min(b, n) terms; normalised: the largest column norm is 1
    assert len(banded_sqrt_coefficients(8, 3)) == 3
    for b in (1, 2, 5, 17):
        assert max_column_norm(banded_sqrt_coefficients(b)) == pytest.approx(1.0, rel=1e-14)
    assert banded_sqrt_coefficients(1) == [1.0]


@pytest.mark.parametrize("bands,rounds", [(1, 5), (3, 10), (4, 4), (6, 3), (8, 20)])
def test_max_column_norm_is_the_largest_column_of_the_matrix(bands, rounds):
    c = banded_sqrt_coefficients(bands, normalize=False)
    dense = strategy_matrix(c, rounds)
    assert max_column_norm(c, rounds) == pytest.approx(dense.norm(dim=0).max().item(), rel=1e-14)
    band = [(i, j) for i in range(rounds) for j in range(rounds) if 0 <= i - j < bands]
    assert all(dense[i, j] != 0 for i, j in band)
    assert torch.count_nonzero(dense) == len(band)  # lower-triangular, b bands


# ---------------------------------------------------------------------- the streamed noise
@pytest.mark.parametrize("bands", [1, 2, 4, 7])
def test_streamed_noise_is_the_inverse_strategy_applied_to_iid_draws(bands):
    """sigma^-1 x noise = C^{-1} Z: C times the released noise gives back the generator's own
    standard normal draws (float64, so exactly up to rounding)."""
    z, sens, rounds = 1.3, 2.0, 15
    mech = BandMFNoise(z, bands=bands, seed=5)
    w = _noise_sequence(mech, rounds, [torch.zeros(2, 3, dtype=torch.float64)]) / (z * sens)
    gen = torch.Generator().manual_seed(5)
    draws = torch.stack([torch.randn((2, 3), generator=gen, dtype=torch.float64).flatten() for _ in range(rounds)])
    c = strategy_matrix(banded_sqrt_coefficients(bands), rounds)
    assert torch.allclose(c @ w, draws, atol=1e-12)
    assert mech.rounds == rounds and len(mech.state_dict()["past"]) == min(bands - 1, rounds)


def test_one_band_is_gaussian_noise_bit_for_bit():
    value = [torch.randn(4, 3), torch.randn(7)]
    band = BandMFNoise(0.9, bands=1, seed=123)
    gauss = GaussianNoise(0.9, seed=123)
    for _ in range(6):
        a, b = band.release(_sum(value)), gauss.release(_sum(value))
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert band.state_dict()["past"] == []  # no buffer: memory (b - 1) x model size


def test_covariance_matches_the_strategy_and_rejects_wrong_ones():
    """The statistical test. n = 12 rounds, b = 4, N = 20,000 independent coordinates (each a
    noise sequence of length 12), z = 1, per-round sensitivity 2 (sigma = 2). Whitening with the
    claimed strategy, Y = C X / sigma, must give iid N(0, 1) across rounds; the statistic is
    max over the 78 entries i <= j of |S_ij - I_ij| / se_ij, S = Y Y^T / N, se = sqrt(2/N) on the
    diagonal and 1/sqrt(N) off it. We accept when it is below tau = Phi^-1(1 - P / (2 x 78)),
    P = 1e-7: each entry is (up to the CLT) normal with that se under the right strategy, so the
    false-failure probability is at most about 1e-7 (union bound). The expected covariance of the
    noise itself is sigma^2 C^{-1} C^{-T}, checked too with the same tolerances."""
    n, coords, b, sens = 12, 20_000, 4, 2.0
    c = strategy_matrix(banded_sqrt_coefficients(b), n)
    entries = n * (n + 1) // 2
    tau = stats.norm.isf(P_FALSE / (2 * entries))
    eye = torch.eye(n, dtype=torch.float64)
    se = torch.where(eye.bool(), torch.tensor(2.0 / coords).sqrt(), torch.tensor(1.0 / coords).sqrt())

    def statistic(mech):
        x = _noise_sequence(mech, n, [torch.zeros(coords, dtype=torch.float64)])  # n x coords
        y = c @ x / sens
        return float(((y @ y.T / coords - eye).abs() / se).max()), x

    right, x = statistic(BandMFNoise(1.0, bands=b, seed=0))
    assert right < tau
    # the noise's own covariance against sigma^2 C^{-1} C^{-T}, entry by entry (tolerance in the
    # same units: the whitened test above is the sharp one)
    cinv = torch.linalg.inv(c)
    expected = sens**2 * cinv @ cinv.T
    empirical = x @ x.T / coords
    scale = torch.sqrt(torch.outer(expected.diag(), expected.diag()) + expected**2)
    assert float(((empirical - expected).abs() / (scale * torch.tensor(1.0 / coords).sqrt())).max()) < tau
    # wrong strategies are rejected: independent noise, the wrong number of bands, the wrong scale
    for wrong in (BandMFNoise(1.0, bands=1, seed=0), BandMFNoise(1.0, bands=3, seed=0),
                  BandMFNoise(1.0, bands=5, seed=0), BandMFNoise(1.1, bands=b, seed=0)):
        assert statistic(wrong)[0] > 2 * tau
    assert tau == pytest.approx(6.07, abs=0.05)


# ---------------------------------------------------------------------- sensitivity
@pytest.mark.parametrize("bands", [1, 2, 4, 7])
def test_sensitivity_under_separation(bands):
    """One user added in the rounds the cyclic sampler gave it (at most once in any b rounds),
    with a contribution of norm <= Delta per round: ||C (x - x')||_F^2 = sum of its columns'
    squared norms x its squared contributions <= (participations) x (max column norm x Delta)^2,
    and each participation moves C x by at most max column norm x Delta (the amplified
    accounting's per-participation sensitivity)."""
    rounds, dim, delta = 40, 5, 2.0
    coeffs = banded_sqrt_coefficients(bands)
    c = strategy_matrix(coeffs, rounds)
    cn = max_column_norm(coeffs, rounds)
    sampler = CyclicPoissonSampler(60, bands=bands, clients_per_round=4, sampling_rate=0.7, seed=bands)
    history = [np.concatenate(sampler.sample_round()) for _ in range(rounds)]
    rng = np.random.Generator(np.random.PCG64(bands))
    checked = 0
    for user in range(60):
        mine = [t for t, users in enumerate(history) if user in users]
        if len(mine) < 2:
            continue
        assert all(b - a >= bands for a, b in zip(mine, mine[1:]))
        diff = torch.zeros(rounds, dim, dtype=torch.float64)
        for t in mine:
            d = torch.as_tensor(rng.standard_normal(dim))
            diff[t] = delta * d / d.norm() * (1.0 if rng.random() < 0.5 else rng.random())
        moved = c @ diff
        per_column = sum(float(c[:, t].norm() ** 2 * diff[t].norm() ** 2) for t in mine)
        assert float(moved.norm() ** 2) == pytest.approx(per_column, rel=1e-12)  # disjoint supports
        assert float(moved.norm()) <= math.sqrt(len(mine)) * cn * delta * (1 + 1e-12)
        for t in mine:
            assert float((c[:, t:t + 1] @ diff[t:t + 1]).norm()) <= cn * delta * (1 + 1e-12)
        checked += 1
    assert checked > 10


def test_without_separation_the_bound_fails():
    """Two participations closer than b rounds (same direction) exceed sqrt(2) x max column
    norm x Delta: the separation is what the sensitivity rests on."""
    b, rounds = 4, 10
    coeffs = banded_sqrt_coefficients(b)
    c = strategy_matrix(coeffs, rounds)
    diff = torch.zeros(rounds, 1, dtype=torch.float64)
    diff[2], diff[3] = 1.0, 1.0
    assert float((c @ diff).norm()) > math.sqrt(2) * max_column_norm(coeffs) * 1.2


# ---------------------------------------------------------------------- rules and state
def test_fails_closed_and_refuses_what_it_cannot_account():
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            BandMFNoise(bad, bands=3)
    with pytest.raises(ValueError, match="exactly 0"):
        BandMFNoise(float("nan"), bands=3, allow_nonprivate=True)
    off = BandMFNoise(0.0, bands=3, allow_nonprivate=True)
    v = [torch.randn(5)]
    assert not off.private and torch.equal(off.release(_sum(v))[0], v[0])
    with pytest.raises(ValueError, match="cannot be seeded"):
        BandMFNoise(1.0, bands=2, seed=1, secure=True)
    with pytest.raises(ValueError, match="bands"):
        BandMFNoise(1.0, bands=0)
    mech = BandMFNoise(1.0, bands=3, seed=1)
    mech.release(_sum([torch.zeros(3)]))
    with pytest.raises(ValueError, match="sensitivity changed"):
        mech.release(_sum([torch.zeros(3)], sensitivity=1.0))
    with pytest.raises(ValueError, match="shape"):
        mech.release(_sum([torch.zeros(4)]))
    with pytest.raises(ValueError, match="adaptive clipping"):
        mech.add_to_count(3.0, 1.0)
    with pytest.raises(TypeError):
        mech.release([torch.zeros(3)])
    assert mech.seeded and not BandMFNoise(1.0, bands=2).seeded


def test_secure_sampler_runs_and_is_not_replayable():
    a, b = BandMFNoise(1.0, bands=3, secure=True), BandMFNoise(1.0, bands=3, secure=True)
    va = _noise_sequence(a, 4, [torch.zeros(50)])
    vb = _noise_sequence(b, 4, [torch.zeros(50)])
    assert torch.isfinite(va).all() and not torch.equal(va, vb)


def test_resume_equals_uninterrupted():
    values = [[torch.randn(3, 2), torch.randn(4)] for _ in range(12)]
    full = BandMFNoise(0.8, bands=5, seed=42)
    expected = [full.release(_sum(v)) for v in values]
    first = BandMFNoise(0.8, bands=5, seed=42)
    head = [first.release(_sum(v)) for v in values[:7]]
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    resumed = BandMFNoise(0.8, bands=5, seed=7)
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    tail = [resumed.release(_sum(v)) for v in values[7:]]
    for a, b in zip(expected, head + tail):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert resumed.rounds == 12 and resumed.seeded
    for other in (BandMFNoise(0.8, bands=4, seed=42), BandMFNoise(0.9, bands=5, seed=42)):
        with pytest.raises(ValueError, match="saved with"):
            other.load_state_dict(first.state_dict())
    with pytest.raises(ValueError, match="noise state cannot be loaded"):
        BandMFNoise(0.8, bands=5).load_state_dict(GaussianNoise(0.8, seed=1).state_dict())


def one_user_sum_differences(b, m, k, clip, rounds, min_participations=2):
    """Adding one user to a DP-FTRL-FedEmb population (add/remove, sensitivity 2C for K > 1),
    with real local training (several local steps per client) and the cyclic Poisson sampler
    keyed alike on both sides: (the rounds x parameters differences of the clipped sums, the
    user's rounds, the sensitivity). Checks that only the user's virtual client changes, in
    its rounds only, at least b apart, and moves the sum visibly. The model each round starts
    from is the same on both sides (the released outputs the adversary conditions on)."""
    from dpemb.algorithms.client import ClientTrainer
    from dpemb.algorithms.config import FederatedConfig
    from dpemb.algorithms.round import ClientData, map_clients
    from dpemb.privacy.client_keys import ClientRandomness, client_keys
    from dpemb.privacy.clipping import ClipAndSum
    from dpemb.privacy.relations import user_sensitivity
    from dpemb.training.config import ModelConfig
    from dpemb.training.modelinit import build_model
    from tests.conftest import make_tiny_dataset

    big = make_tiny_dataset(num_users=30).split().train
    last = big.num_users - 1
    small = big.select(big.user_of_example() != last)
    torch.manual_seed(0)
    model, _ = build_model(ModelConfig(backbone="lenet", embedding_dim=16), big.image_shape, per_user_training=True)
    trainer = ClientTrainer(model, big.num_classes, FederatedConfig(algorithm="dp-ftrl-fedemb",
                                                                    local_batch_size=2))  # >= 3 local steps
    params = [p for p in model.parameters() if p.requires_grad]
    start = torch.nn.utils.parameters_to_vector(params).detach()
    sens = user_sensitivity(clip, k, Relation.ADD_REMOVE)
    for seed in range(20):
        sa = CyclicPoissonSampler(small.num_users, bands=b, clients_per_round=m, users_per_client=k, seed=seed,
                                  sampling_rate=0.6)
        sb = CyclicPoissonSampler(big.num_users, bands=b, clients_per_round=m, users_per_client=k, seed=seed,
                                  sampling_rate=0.6)
        slots = [(sa.sample_round(), sb.sample_round()) for _ in range(rounds)]
        mine = [t for t, (_, cb) in enumerate(slots) if any(last in cl for cl in cb)]
        if len(mine) >= min_participations:
            break
    assert len(mine) >= min_participations and all(v - u >= b for u, v in zip(mine, mine[1:]))
    randomness = ClientRandomness(seed=11)

    def clipped_sum(ds, cl, rnd):
        acc = ClipAndSum([torch.zeros_like(start)], clip, sens, Relation.ADD_REMOVE)
        for r, _ in map_clients(trainer, start, cl, client_keys(cl, k), ClientData.of(ds), randomness, rnd):
            acc.add([r.delta])
        return acc.result().value[0].double()

    diff = torch.zeros(rounds, start.numel(), dtype=torch.float64)
    for t, (ca, cb) in enumerate(slots):
        changed = [i for i, (x, y) in enumerate(zip(ca, cb)) if list(x) != list(y)]
        assert len(ca) == len(cb) and len(changed) == (t in mine)  # one virtual client, in its rounds only
        if t in mine:  # elsewhere the same clients with the same keys: the same sum
            diff[t] = clipped_sum(big, cb, t) - clipped_sum(small, ca, t)
    assert all(float(diff[t].norm()) > 0.25 * sens for t in mine)  # the user's client moved the sum visibly
    return diff, mine, sens


def test_sensitivity_with_real_local_training_and_the_cyclic_sampler():
    """K = 2 (sensitivity 2C), several local steps (``one_user_sum_differences``): the
    strategy's output C x moves by at most sqrt(participations) x (max column norm) x 2C, by
    at most (max column norm) x 2C per participation."""
    b, m, k, clip, rounds = 3, 2, 2, 0.002, 12  # deltas of norm ~0.01: clipped
    diff, mine, sens = one_user_sum_differences(b, m, k, clip, rounds)
    assert sens == 2 * clip
    coeffs = banded_sqrt_coefficients(b)
    c, cn = strategy_matrix(coeffs, rounds), max_column_norm(coeffs, rounds)
    moved = c @ diff
    assert float(moved.norm()) <= math.sqrt(len(mine)) * cn * sens * (1 + 1e-9)
    for t in mine:
        assert float((c[:, t:t + 1] @ diff[t:t + 1]).norm()) <= cn * sens * (1 + 1e-9)


@pytest.mark.parametrize("bands", [1, 2, 4, 8])
def test_prefix_noise_is_the_workload_times_the_inverse_strategy(bands):
    """prefix_noise_rms = RMS over t of ||row t of A C^{-1}|| (A: prefix sums), from the
    streamed recurrence's impulse response; one band: sqrt((T + 1) / 2), the Gaussian's."""
    rounds = 60
    coeffs = banded_sqrt_coefficients(bands)
    a = torch.tril(torch.ones(rounds, rounds, dtype=torch.float64))
    by_matrix = (a @ torch.linalg.inv(strategy_matrix(coeffs, rounds))).norm(dim=1).pow(2).mean().sqrt()
    assert prefix_noise_rms(coeffs, rounds) == pytest.approx(float(by_matrix), rel=1e-10)
    if bands == 1:
        assert prefix_noise_rms(coeffs, rounds) == pytest.approx(math.sqrt((rounds + 1) / 2), rel=1e-12)
    # and it is the noise the mechanism streams: the empirical std of its prefix sums
    mech = BandMFNoise(1.0, bands=bands, seed=bands)
    noise = _noise_sequence(mech, rounds, [torch.zeros(40_000)])  # sigma = z x sensitivity = 2; rel. sd < 0.4%
    empirical = noise.cumsum(0).pow(2).mean(1).mean().sqrt() / 2.0
    assert float(empirical) == pytest.approx(prefix_noise_rms(coeffs, rounds), rel=0.03)

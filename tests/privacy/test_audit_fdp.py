"""The f-DP one-run analysis (dpemb.privacy.audit.fdp_*): its pieces against independent
computations, its validity on mechanisms with a known answer, and its power on the
planted bug the (eps, delta) bound cannot see (a factor 2 in the noise)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import optimize, stats

from dpemb.privacy.audit import (
    GaussianTradeOff,
    ProfileTradeOff,
    fdp_one_run_audit,
    fdp_one_run_mass,
    fdp_one_run_rejects,
    gaussian_delta,
    gaussian_epsilon,
    one_run_lower_bound_grid,
)
from dpemb.privacy.audit import accounted_poisson_tradeoff, fdp_k_grid, k_grid
from dpemb.training.audit_run import round_scores


def approx_dp(eps, delta):
    """(eps, delta)-DP as a trade-off function (one member per epsilon): a privacy
    profile of one pair, the kind of curve an audit's claim is."""
    e = np.atleast_1d(np.asarray(eps, dtype=float))
    return ProfileTradeOff(e[:, None], np.full((e.size, 1), float(delta)))


def _max_exceed(reps: int, alpha: float) -> int:
    return int(stats.binom.ppf(0.999, reps, alpha))


# ------------------------------------------------------------ trade-off functions


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.5])
def test_gaussian_inverse_blow_up_against_mpmath(mu):
    """inverse_blow_up(y) = least P-probability of an event of Q-probability y, for
    P = N(0, 1), Q = N(mu, 1): the event {x > t} with Q-probability y has
    P-probability 1 - Phi(t) where t = mu + Phi^{-1}(1 - y)."""
    ys = np.array([1e-9, 1e-4, 0.01, 0.2, 0.5, 0.9, 0.999])
    got = GaussianTradeOff(mu).inverse_blow_up(ys)
    with mpmath.workdps(30):
        for y, g in zip(ys, got):
            t = mu + mpmath.sqrt(2) * mpmath.erfinv(2 * (1 - mpmath.mpf(y)) - 1)
            want = float(1 - mpmath.ncdf(t))
            assert g == pytest.approx(want, rel=1e-8, abs=1e-300)
    assert GaussianTradeOff(0.0).inverse_blow_up(ys) == pytest.approx(ys)
    assert GaussianTradeOff(mu).inverse_blow_up(np.array([0.0, 1.0, 1.5])).tolist() == [0.0, 1.0, 1.0]


def _blow_from_f(eps: np.ndarray, deltas: np.ndarray, x: np.ndarray) -> np.ndarray:
    f = np.max(np.maximum.reduce([np.zeros((x.size, eps.size)), 1 - deltas - np.exp(eps) * x[:, None],
                                  np.exp(-eps) * (1 - deltas - x[:, None])]), axis=1)
    return 1 - f


def test_profile_inverse_against_brute_force():
    rng = np.random.default_rng(3)
    eps = np.sort(rng.uniform(0, 4, 6))
    deltas = np.sort(rng.uniform(0, 0.05, 6))[::-1]
    t = ProfileTradeOff(eps, deltas)
    xs = np.linspace(0, 1, 200001)
    blow = _blow_from_f(eps, deltas, xs)
    for y in (0.0, 1e-3, 0.02, 0.1, 0.4, 0.77, 0.99, 1.0):
        brute = xs[np.argmax(blow >= y - 1e-15)]  # inf{x : blow(x) >= y} on the grid
        assert t.inverse_blow_up(np.array([y]))[0] == pytest.approx(brute, abs=1e-5)


def test_profile_of_a_gaussian_is_a_conservative_gaussian():
    """f from (eps, delta_mu(eps)) at finitely many eps lies below the mu-GDP curve (so its
    inverse blow-up lies below: fewer rejections) and close to it on a fine grid."""
    mu = 0.8
    eps = np.linspace(0, 8, 400)
    prof = ProfileTradeOff(eps, [gaussian_delta(mu, float(e)) for e in eps])
    ys = np.linspace(0, 1, 1001)
    a, b = prof.inverse_blow_up(ys), GaussianTradeOff(mu).inverse_blow_up(ys)
    assert np.all(a <= b + 1e-12) and np.max(b - a) < 0.01


def test_accounted_curve_of_q1_is_gaussian_and_of_q_below_1_is_the_pld_profile():
    c1 = accounted_poisson_tradeoff(2.0, 1.0, 4, "add-remove")
    assert c1.mu == pytest.approx(1.0) and isinstance(c1.tradeoff, GaussianTradeOff)
    c = accounted_poisson_tradeoff(2.0, 0.5, 4, "add-remove")
    assert c.mu is None and isinstance(c.tradeoff, ProfileTradeOff)
    # subsampling only helps: the subsampled curve is above the q = 1 one (smaller inverse blow-up)
    ys = np.linspace(0.01, 0.99, 50)
    assert np.all(c.tradeoff.inverse_blow_up(ys) >= GaussianTradeOff(1.0).inverse_blow_up(ys) - 1e-9)


def test_accounted_curve_of_a_vacuous_mechanism_is_an_rdp_profile_computed_at_once():
    """z = 0.005 (the README's toy DP-FedEmb run, audited with `--audit-canaries`): the PLD
    curve ran for many minutes (its cost grows like 1/z^2); beyond an RDP epsilon of
    PLD_MAX_RDP_EPSILON the RDP accountant's profile replaces it: a valid curve that here
    allows nearly everything, as the mechanism does."""
    import time

    start = time.perf_counter()
    c = accounted_poisson_tradeoff(0.005, 0.1778, 2, "add-remove")
    assert time.perf_counter() - start < 10
    assert isinstance(c.tradeoff, ProfileTradeOff) and "vacuous" in c.description and c.mu is None
    assert np.all(np.abs(c.tradeoff.inverse_blow_up(np.linspace(0.01, 0.99, 9))) < 1e-6)
    assert "PLD curve" in accounted_poisson_tradeoff(2.0, 0.5, 4, "add-remove").description  # not vacuous


# ------------------------------------------------------------ the recursion


def _lp_min_total(m, r, v, eps, delta, alpha, upto):
    """min sum_l x_l subject to (*) for j = 1..upto, tail sum_{l >= v} x_l >= alpha / m, x >= 0
    (x_l = P[W = l] / m), with f = f_{eps, delta} (piecewise linear: an LP), by HiGHS. Solved
    in y = m x (values of order 1: HiGHS's absolute tolerances are then negligible)."""
    levels = np.arange(r + 1)
    rows, rhs = [], []
    for j in range(1, upto + 1):
        rj = np.where(levels >= j, levels, 0.0)
        hj = np.where(levels >= j - 1, r - levels, 0.0)
        rows += [rj - math.exp(eps) * hj, rj - math.exp(-eps) * hj, rj]
        rhs += [delta * m, (1 - math.exp(-eps) * (1 - delta)) * m, float(m)]
    rows.append(-(levels >= v).astype(float))
    rhs.append(-alpha)
    res = optimize.linprog(np.ones(r + 1), A_ub=np.array(rows), b_ub=np.array(rhs), bounds=(0, None),
                           method="highs")
    assert res.status in (0, 2)  # solved, or infeasible: no distribution at all (the least mass is inf)
    return res.fun / m if res.status == 0 else math.inf


@pytest.mark.parametrize("m,r,v,eps,delta,alpha", [
    (40, 12, 9, 0.5, 0.0, 0.05), (40, 12, 11, 1.0, 1e-3, 0.1), (100, 30, 25, 1.5, 1e-2, 0.05),
    (60, 60, 45, 0.7, 0.0, 0.2), (200, 20, 20, 2.0, 1e-4, 0.01), (300, 40, 26, 0.3, 1e-3, 0.05),
])
def test_recursion_is_the_least_feasible_mass(m, r, v, eps, delta, alpha):
    """The recursion's total (r_0 + h_0) / r is the LP minimum of the mass any distribution
    of W needs under the constraints of the proof, solved independently by HiGHS; with the
    constraints above v added (the real W satisfies them too) the minimum can only grow."""
    greedy = fdp_one_run_mass(m, r, v, approx_dp(eps, delta), alpha, exact=True)[0] / r
    lp = _lp_min_total(m, r, v, eps, delta, alpha, v)
    if math.isinf(lp):  # no distribution of W at all (some R_j > 1 needed): the recursion rejects too
        assert greedy > 1 / m
    else:
        assert greedy == pytest.approx(lp, rel=1e-8)
    assert _lp_min_total(m, r, v, eps, delta, alpha, r) >= greedy * (1 - 1e-6)


def test_recursion_family_equals_members_one_by_one():
    mus = np.array([0.0, 0.3, 0.9, 2.0])
    fam = fdp_one_run_mass(500, 60, 48, GaussianTradeOff(mus), 0.05, exact=True)
    one = [fdp_one_run_mass(500, 60, 48, GaussianTradeOff(float(u)), 0.05, exact=True)[0] for u in mus]
    assert fam == pytest.approx(one)
    assert np.all(np.diff(fam) <= 1e-15)  # a weaker hypothesis (larger mu) needs less mass


def _top_k_correct(rng, mu, m, k, reps):
    inc = rng.random((reps, m)) < 0.5
    s = mu * inc + rng.standard_normal((reps, m))
    top = np.argpartition(-s, k, axis=1)[:, :k]
    return np.take_along_axis(inc, top, axis=1).sum(axis=1)


@pytest.mark.parametrize("mu,m,k,alpha", [(1.0, 400, 20, 0.05), (0.5, 400, 40, 0.1), (2.0, 300, 60, 0.05)])
def test_theorem_at_the_simulated_quantile(mu, m, k, alpha):
    """The theorem itself: for a mu-GDP mechanism (scores mu x included + N(0, 1)) no v with
    P[W >= v] >= alpha may be rejected. W's law is simulated (4000 runs); every v whose
    estimated tail is clearly above alpha must pass, and the v that is rejected first
    must have a tail at most about alpha."""
    rng = np.random.default_rng(int(mu * 100) + m)
    w = _top_k_correct(rng, mu, m, k, 4000)
    tail = np.array([(w >= v).mean() for v in range(k + 1)])
    se = np.sqrt(alpha * (1 - alpha) / 4000)
    rej = np.array([fdp_one_run_rejects(m, k, v, GaussianTradeOff(mu), alpha)[0] for v in range(k + 1)])
    assert not np.any(rej & (tail >= alpha + 4 * se))
    first = int(np.argmax(rej)) if rej.any() else k + 1
    assert first > 0 and np.all(rej[first:])  # rejection is monotone in v


def test_delta_leak_is_never_rejected_below_delta():
    """With prob delta the mechanism shows every bit (all guesses right), else randomized
    response at eps: (eps, delta)-DP for every canary. With delta = 0.1 > alpha = 0.05 an
    all-correct outcome is an event of probability >= delta: the test must not reject it
    (nor any eps above it)."""
    m, r, eps, delta = 500, 50, 1.0, 0.1
    assert not fdp_one_run_rejects(m, r, r, approx_dp(eps, delta), 0.05)[0]
    assert not np.any(fdp_one_run_rejects(m, r, r, approx_dp(np.linspace(eps, 20, 40), delta), 0.05))
    # a rarer leak (delta = 1e-3 < alpha) can show all-correct outcomes are impossible at small eps
    assert fdp_one_run_rejects(m, r, r, approx_dp(0.5, 1e-3), 0.05)[0]


# ------------------------------------------------------------ coverage of the bounds


def test_gdp_lower_bound_coverage():
    """P[mu_lower > mu] <= 1 - confidence for a mu-GDP mechanism (200 runs at 80%)."""
    rng = np.random.default_rng(11)
    reps, m, mu, conf = 200, 400, 1.0, 0.8
    grid = [(10, 0), (40, 40)]
    lows = []
    for _ in range(reps):
        inc = rng.random(m) < 0.5
        lows.append(fdp_one_run_audit(mu * inc + rng.standard_normal(m), inc, grid, 1e-5, conf).mu_lower)
    lows = np.array(lows)
    assert np.sum(lows > mu) <= _max_exceed(reps, 1 - conf)
    assert np.median(lows) > 0.25  # and it sees the signal


def test_approx_dp_test_coverage_on_randomized_response():
    """Randomized response at eps0 is (eps0, 0)-DP per canary: the f-DP test of the true
    (eps0, 0) profile rejects it at most at its level (10%, over 200 runs), and the test
    detects the leak (rejects eps = 0.3 in most runs)."""
    rng = np.random.default_rng(5)
    reps, m, r, eps0, alpha = 200, 600, 60, 1.0, 0.1
    inc = rng.random((reps, m)) < 0.5
    keep = rng.random((reps, m)) < math.exp(eps0) / (1 + math.exp(eps0))
    scores = np.where(keep, inc, ~inc) + 1e-6 * rng.standard_normal((reps, m))
    top = np.argsort(-scores, axis=1)[:, :r]
    v = np.take_along_axis(inc, top, axis=1).sum(axis=1)
    rejected = np.array([fdp_one_run_rejects(m, r, int(x), approx_dp([eps0, 0.3], 0.0), alpha) for x in v])
    assert np.sum(rejected[:, 0]) <= _max_exceed(reps, alpha)
    assert np.mean(rejected[:, 1]) > 0.5


# ------------------------------------------------------------ power: the factor 2


def test_fdp_catches_a_factor_two_in_the_noise_where_eps_delta_cannot():
    """10 000 canaries, one Gaussian release: the accounted mechanism is 0.5-GDP (z = 2);
    the buggy one adds half the noise (mu = 1). The f-DP analysis rejects the accounted
    curve and puts mu above 0.5; the (eps, delta) bound stays below the accounted
    epsilon (2.25 at delta = 1e-6). The correct mechanism passes."""
    rng = np.random.default_rng(2024)
    m, delta = 10_000, 1e-6
    accounted = gaussian_epsilon(0.5, delta)
    inc = rng.random(m) < 0.5
    noise = rng.standard_normal(m)
    bug = fdp_one_run_audit(1.0 * inc + noise, inc, fdp_k_grid(m), delta, claimed=GaussianTradeOff(0.5))
    assert bug.claimed_rejected and 0.5 < bug.mu_lower < 1.0 and bug.epsilon_lower > accounted
    assert one_run_lower_bound_grid(1.0 * inc + noise, inc, k_grid(m), delta).epsilon_lower < accounted
    ok = fdp_one_run_audit(0.5 * inc + noise, inc, fdp_k_grid(m), delta, claimed=GaussianTradeOff(0.5))
    assert not ok.claimed_rejected and ok.mu_lower < 0.5 and ok.epsilon_lower < accounted


def test_fdp_audit_checks_its_arguments():
    s, inc = np.arange(10.0), np.arange(10) % 2 == 0
    with pytest.raises(ValueError):
        fdp_one_run_audit(s, inc, [], 1e-5)
    with pytest.raises(ValueError):
        fdp_one_run_audit(s, inc, [(6, 5)], 1e-5)
    with pytest.raises(ValueError):
        fdp_one_run_mass(10, 4, 5, GaussianTradeOff(1.0), 0.05)
    with pytest.raises(ValueError):
        GaussianTradeOff(-1.0)


# ------------------------------------------------------------ per-round scores


def test_round_scores():
    rng = np.random.default_rng(0)
    c = rng.normal(size=(3, 50))
    x = (c - c.mean(1, keepdims=True)) / c.std(1, keepdims=True)
    assert round_scores(c, 2.0, 1.0) == pytest.approx((0.5 * x - 0.125).sum(0))
    q = 0.3
    want = np.log(1 - q + q * np.exp(0.5 * x - 0.125)).sum(0)
    assert round_scores(c, 2.0, q) == pytest.approx(want)

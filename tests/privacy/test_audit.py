"""Tests for dpemb.privacy.audit: the empirical-privacy estimators of issue #14."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from dpemb.privacy.audit import (
    estimate_epsilon_gaussian,
    gaussian_delta,
    gaussian_epsilon,
    one_run_lower_bound,
    one_run_lower_bound_grid,
    one_run_p_value,
)

# ---------------------------------------------------------------- Gaussian DP curve


def _mp_gaussian_epsilon(mu: float, delta: float) -> float:
    """Independent: the GDP delta(eps) curve in mpmath (30 digits), bisection."""
    with mpmath.workdps(30):
        mu_, d_ = mpmath.mpf(mu), mpmath.mpf(delta)

        def dlt(e):
            return mpmath.ncdf(-e / mu_ + mu_ / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu_ - mu_ / 2)

        if dlt(mpmath.mpf(0)) <= d_:
            return 0.0
        lo, hi = mpmath.mpf(0), mpmath.mpf(1)
        while dlt(hi) > d_:
            hi *= 2
        for _ in range(120):
            mid = (lo + hi) / 2
            if dlt(mid) > d_:
                lo = mid
            else:
                hi = mid
        return float((lo + hi) / 2)


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-9])
def test_gaussian_epsilon_matches_mpmath(mu, delta):
    expected = _mp_gaussian_epsilon(mu, delta)
    got = gaussian_epsilon(mu, delta)
    assert got == pytest.approx(expected, rel=1e-8, abs=1e-10)
    if got > 0:
        assert gaussian_delta(mu, got) == pytest.approx(delta, rel=1e-6)


def test_gaussian_epsilon_zero_and_monotone():
    assert gaussian_epsilon(0.0, 1e-5) == 0.0
    # delta(0) = 2 Phi(mu/2) - 1 <= delta: eps = 0
    assert gaussian_epsilon(1e-6, 1e-5) == 0.0
    mus = np.linspace(0.05, 6, 40)
    eps = [gaussian_epsilon(float(m), 1e-5) for m in mus]
    assert all(b > a for a, b in zip(eps, eps[1:]))
    assert gaussian_delta(0.0, 1.0) == 0.0


def test_gaussian_epsilon_rejects_bad_arguments():
    for bad in (0.0, 1.0, -1e-3, True):
        with pytest.raises(ValueError):
            gaussian_epsilon(1.0, bad)
    with pytest.raises(ValueError):
        gaussian_epsilon(-1.0, 1e-5)


# ------------------------------------------------------------ one-shot estimate


def _se_mu(mu: float, n_in: int, n_out: int) -> float:
    # delta method for |mean_in - mean_out| / std_out with unit-variance Gaussians
    return math.sqrt(1 / n_in + 1 / n_out + mu * mu / (2 * (n_out - 1)))


def test_estimate_epsilon_gaussian_known_shift():
    mu, delta, reps = 1.0, 1e-5, 30
    eps_true = gaussian_epsilon(mu, delta)
    slope = (gaussian_epsilon(mu + 1e-4, delta) - gaussian_epsilon(mu - 1e-4, delta)) / 2e-4
    rng = np.random.default_rng(1234)
    mean_abs_err = []
    for n in (200, 1000, 5000):
        x_in = rng.normal(mu, 1.0, size=(reps, n))
        x_out = rng.normal(0.0, 1.0, size=(reps, n))
        se = _se_mu(mu, n, n)
        errs = []
        for a, b in zip(x_in, x_out):
            est = estimate_epsilon_gaussian(a, b, delta)
            assert est.n_in == n and est.n_out == n and est.scale == "null"
            assert abs(est.mu - mu) < 4.5 * se
            assert est.epsilon == pytest.approx(gaussian_epsilon(est.mu, delta))
            assert abs(est.epsilon - eps_true) < 4.5 * se * slope * 1.2
            errs.append(abs(est.epsilon - eps_true))
        # the spread of mu_hat over the repetitions matches the standard error
        mus = [estimate_epsilon_gaussian(a, b, delta).mu for a, b in zip(x_in, x_out)]
        assert 0.5 * se < np.std(mus, ddof=1) < 1.6 * se
        mean_abs_err.append(float(np.mean(errs)))
    assert mean_abs_err[0] > mean_abs_err[1] > mean_abs_err[2]
    assert mean_abs_err[2] < 0.05 * eps_true


def test_estimate_epsilon_gaussian_pooled_and_null_scale():
    rng = np.random.default_rng(7)
    # in scores with a larger spread: null uses the out std only
    a, b = rng.normal(2.0, 3.0, 4000), rng.normal(0.0, 1.0, 4000)
    null = estimate_epsilon_gaussian(a, b, 1e-5)
    pooled = estimate_epsilon_gaussian(a, b, 1e-5, scale="pooled")
    assert null.std == pytest.approx(np.std(b, ddof=1))
    assert null.mu == pytest.approx(abs(a.mean() - b.mean()) / np.std(b, ddof=1))
    sp = math.sqrt((np.var(a, ddof=1) * 3999 + np.var(b, ddof=1) * 3999) / 7998)
    assert pooled.mu == pytest.approx(abs(a.mean() - b.mean()) / sp)
    assert pooled.mu < null.mu
    # the shift is symmetric: swapping the sign of the shift gives the same mu
    assert estimate_epsilon_gaussian(-a, -b, 1e-5).mu == pytest.approx(null.mu)
    with pytest.raises(ValueError):
        estimate_epsilon_gaussian(a, b, 1e-5, scale="other")
    with pytest.raises(ValueError):
        estimate_epsilon_gaussian(a, np.zeros(10), 1e-5)


def test_estimate_epsilon_gaussian_bootstrap_interval():
    rng = np.random.default_rng(11)
    mu = 1.5
    a, b = rng.normal(mu, 1, 1000), rng.normal(0, 1, 1000)
    est = estimate_epsilon_gaussian(a, b, 1e-5, n_bootstrap=400, seed=3)
    lo, hi = est.mu_ci
    assert lo < est.mu < hi and lo < mu < hi
    assert hi - lo == pytest.approx(2 * 1.96 * _se_mu(mu, 1000, 1000), rel=0.35)
    elo, ehi = est.epsilon_ci
    assert elo < est.epsilon < ehi
    assert est.ci_level == 0.95
    assert estimate_epsilon_gaussian(a, b, 1e-5).mu_ci is None


# --------------------------------------------------------- one-run lower bound


def _randomized_response(rng, reps, m, eps0):
    """An (eps0, 0)-DP mechanism per canary: each inclusion bit through randomized response."""
    included = rng.random((reps, m)) < 0.5
    keep = rng.random((reps, m)) < math.exp(eps0) / (1 + math.exp(eps0))
    noisy = np.where(keep, included, ~included)
    scores = noisy + 1e-6 * rng.standard_normal((reps, m))
    return scores, included


def _max_exceed(reps: int, alpha: float) -> int:
    # allowed number of repetitions with bound > truth: the 99.9% point of Binomial(reps, alpha)
    return int(stats.binom.ppf(0.999, reps, alpha))


@pytest.mark.parametrize("eps0", [1.0, 4.0])
def test_one_run_pure_dp_coverage_and_power(eps0):
    rng = np.random.default_rng(int(eps0 * 100))
    reps, m, conf = 200, 1000, 0.95
    scores, inc = _randomized_response(rng, reps, m, eps0)
    bounds = np.array(
        [one_run_lower_bound(s, i, 100, 100, 0.0, conf).epsilon_lower for s, i in zip(scores, inc)]
    )
    assert np.sum(bounds > eps0) <= _max_exceed(reps, 1 - conf)
    # it detects the leakage: well above half of eps0 typically
    assert np.median(bounds) > 0.5 * eps0


def test_one_run_delta_coverage_on_pure_dp_mechanism():
    # an (eps0, 0)-DP mechanism is (eps0, delta)-DP: the delta > 0 bound covers too,
    # and is never above the delta = 0 bound on the same data
    rng = np.random.default_rng(5)
    reps, m, conf, eps0, delta = 200, 1000, 0.9, 1.0, 1e-5
    scores, inc = _randomized_response(rng, reps, m, eps0)
    with_d, without = [], []
    for s, i in zip(scores, inc):
        with_d.append(one_run_lower_bound(s, i, 100, 100, delta, conf).epsilon_lower)
        without.append(one_run_lower_bound(s, i, 100, 100, 0.0, conf).epsilon_lower)
    with_d, without = np.array(with_d), np.array(without)
    assert np.all(with_d <= without + 1e-9)
    assert np.sum(with_d > eps0) <= _max_exceed(reps, 1 - conf)
    assert np.median(with_d) > 0.5 * eps0


def test_one_run_no_signal_is_near_zero():
    rng = np.random.default_rng(9)
    reps, m, conf = 200, 1000, 0.95
    inc = rng.random((reps, m)) < 0.5
    scores = rng.standard_normal((reps, m))
    bounds = np.array(
        [one_run_lower_bound(s, i, 100, 100, 0.0, conf).epsilon_lower for s, i in zip(scores, inc)]
    )
    assert np.sum(bounds > 0) <= _max_exceed(reps, 1 - conf)
    assert np.median(bounds) == 0.0
    assert bounds.max() < 0.6


@pytest.mark.parametrize("mu", [1.0, 3.0])
def test_one_run_gdp_coverage(mu):
    # scores mu * included + N(0, 1): a mu-GDP mechanism per canary, hence
    # (gaussian_epsilon(mu, delta), delta)-DP for every delta
    rng = np.random.default_rng(int(mu * 10))
    reps, m, conf, delta = 100, 1000, 0.95, 1e-5
    eps_true = gaussian_epsilon(mu, delta)
    inc = rng.random((reps, m)) < 0.5
    scores = mu * inc + rng.standard_normal((reps, m))
    bounds = np.array(
        [one_run_lower_bound(s, i, 50, 50, delta, conf).epsilon_lower for s, i in zip(scores, inc)]
    )
    assert np.sum(bounds > eps_true) <= _max_exceed(reps, 1 - conf)
    assert np.median(bounds) > 0.5  # it does see the signal


def _p_value_reference(m, r, v, eps, delta):
    """Theorem 5.2 written out over the full range i = 1..m, with binomial tails."""
    q = math.exp(eps) / (1 + math.exp(eps))

    def f(x):
        return stats.binom.sf(math.ceil(x) - 1, r, q)

    extra = max((f(v - i) - f(v)) / i for i in range(1, m + 1))
    return min(f(v) + 2 * m * delta * extra, 1.0)


@pytest.mark.parametrize(
    "m,r,v,eps,delta",
    [(100, 40, 30, 0.5, 1e-3), (100, 40, 40, 2.0, 1e-4), (500, 200, 150, 1.0, 1e-5),
     (50, 50, 20, 0.0, 1e-2), (100, 60, 55, 3.0, 0.0)],
)
def test_one_run_p_value_against_reference(m, r, v, eps, delta):
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(
        _p_value_reference(m, r, v, eps, delta), rel=1e-9, abs=1e-15
    )


def test_one_run_bound_is_inverse_of_p_value():
    rng = np.random.default_rng(2)
    scores, inc = _randomized_response(rng, 1, 500, 2.0)
    for delta in (0.0, 1e-4):
        res = one_run_lower_bound(scores[0], inc[0], 60, 40, delta, 0.95)
        assert res.guesses == 100 and res.m == 500 and res.confidence == 0.95
        assert res.epsilon_lower > 0
        p = one_run_p_value(500, res.guesses, res.correct, res.epsilon_lower, delta)
        assert p <= 0.05 + 1e-9
        assert one_run_p_value(500, res.guesses, res.correct, res.epsilon_lower + 1e-6, delta) > 0.05 - 1e-6
        assert ("5.2" in res.method) == (delta > 0)


def test_one_run_counts_guesses():
    scores = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    inc = np.array([1, 0, 1, 0, 0, 1])
    res = one_run_lower_bound(scores, inc, 2, 2, 0.0, 0.95)
    # top 2 (5, 4): in, out -> 1 correct; bottom 2 (1, 0): out, in -> 1 correct
    assert (res.guesses, res.correct) == (4, 2)
    with pytest.raises(ValueError):
        one_run_lower_bound(scores, inc, 4, 3, 0.0, 0.95)
    with pytest.raises(ValueError):
        one_run_lower_bound(scores, inc, 0, 0, 0.0, 0.95)
    with pytest.raises(ValueError):
        one_run_lower_bound(scores, inc[:3], 1, 1, 0.0, 0.95)
    with pytest.raises(ValueError):
        one_run_lower_bound(scores, inc, 1, 1, 0.0, 1.0)


def test_grid_union_bound():
    rng = np.random.default_rng(4)
    scores, inc = _randomized_response(rng, 1, 1000, 2.0)
    s, i = scores[0], inc[0]
    grid = [(25, 25), (50, 50), (100, 100), (200, 200)]
    res = one_run_lower_bound_grid(s, i, grid, 0.0, 0.95)
    split = [one_run_lower_bound(s, i, a, b, 0.0, 1 - 0.05 / 4).epsilon_lower for a, b in grid]
    full = [one_run_lower_bound(s, i, a, b, 0.0, 0.95).epsilon_lower for a, b in grid]
    assert res.epsilon_lower == pytest.approx(max(split))
    assert res.epsilon_lower < max(full)  # the union bound costs something
    assert res.grid_size == 4 and res.confidence == 0.95 and "union bound" in res.method


# ------------------------------------------------------------- Clopper-Pearson


def _clopper_pearson(correct, guesses, conf):
    """Independent: eps from the one-sided Clopper-Pearson lower bound on the accuracy."""
    p_lo = stats.beta.ppf(1 - conf, correct, guesses - correct + 1) if correct else 0.0
    return math.log(p_lo / (1 - p_lo)) if p_lo > 0.5 else 0.0


@pytest.mark.parametrize("correct,guesses", [(0, 10), (5, 10), (9, 10), (10, 10), (180, 200), (950, 1000)])
@pytest.mark.parametrize("conf", [0.9, 0.95, 0.99])
def test_pure_dp_one_run_bound_is_clopper_pearson(correct, guesses, conf):
    """delta = 0: the one-run bound on ``correct`` right guesses out of ``guesses`` is the
    Clopper-Pearson bound (Steinke et al. Theorem 5.1)."""
    scores = np.arange(guesses, 0, -1, dtype=float)  # every canary guessed "in", the first `correct` are in
    inc = np.arange(guesses) < correct
    res = one_run_lower_bound(scores, inc, guesses, 0, 0.0, conf)
    assert (res.guesses, res.correct) == (guesses, correct)
    assert res.epsilon_lower == pytest.approx(_clopper_pearson(correct, guesses, conf), rel=1e-7, abs=1e-9)


def test_clopper_pearson_equals_pure_dp_one_run_bound():
    rng = np.random.default_rng(8)
    scores, inc = _randomized_response(rng, 5, 800, 1.5)
    for s, i in zip(scores, inc):
        res = one_run_lower_bound(s, i, 80, 120, 0.0, 0.95)
        cp = _clopper_pearson(res.correct, res.guesses, 0.95)
        assert res.epsilon_lower == pytest.approx(cp, rel=1e-7, abs=1e-9)

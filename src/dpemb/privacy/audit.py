"""Empirical privacy auditing: estimators that turn canary scores into an epsilon.

A run is audited ONCE (docs/AUDIT.md, "The two lower bounds"; derivations: "Estimator details"):
canaries inserted by fair coins (or fixed "in" and held-out "out" sets for the one-shot estimate)
are scored, and the scores become one of three answers, not to be confused:

- ``estimate_epsilon_gaussian`` (Andrew et al. 2023): an ESTIMATE, neither an upper nor a lower
  bound; it can be above the accounted epsilon by chance.
- ``one_run_lower_bound`` (Steinke, Nasr, Jagielski 2023): a high-confidence LOWER bound on the
  (eps, delta) epsilon.
- ``fdp_one_run_audit`` (Mahloujifar, Melis, Chaudhuri 2024): a high-confidence LOWER bound on
  the Gaussian-DP parameter mu, and the test of a claimed trade-off curve; much tighter for a
  Gaussian mechanism (docs/AUDIT.md, table 2).

Every audit of dpemb (white- and black-box ``audit_run``, ``transfer.audit``) ends in
``audit_record``: one score per canary and its secret inclusion bit go in; a JSON-ready record
comes out with the reported epsilon (naming accountant, delta, unit and relation), the three
answers above and the test of the ACCOUNTED trade-off curve (``accounted_poisson_tradeoff``,
``accounted_gaussian_tradeoff``). The warning fires when the (eps, delta) bound exceeds the
reported epsilon or the accounted curve is rejected: at most twice 1 - confidence for a correct
mechanism (docs/AUDIT.md, "What an audit can and cannot show"). The bit vector and the scores
are PRIVATE (they identify the canaries); the record holds only counts and summaries.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
from scipy import optimize, special, stats

from dpemb.privacy._checks import positive_int
from dpemb.privacy.relations import Relation, describe_relation, parse_relation, to_dp_accounting

# --------------------------------------------------------------------------- checks


def _fraction(name: str, value: object, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not ((v >= 0 if allow_zero else v > 0) and v < 1):
        raise ValueError(f"{name} must be in {'[0, 1)' if allow_zero else '(0, 1)'}, got {value!r}")
    return v


def _nonneg_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return int(value)


def _scores(name: str, x: object, *, min_len: int = 1) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or a.size < min_len:
        raise ValueError(f"{name} must be a 1-d array of at least {min_len} scores")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def _mu(mu: object) -> float:
    if isinstance(mu, bool) or not isinstance(mu, numbers.Real) or not (mu >= 0 and math.isfinite(mu)):
        raise ValueError(f"mu must be a finite number >= 0, got {mu!r}")
    return float(mu)


# ------------------------------------------------------------- Gaussian DP curve


def gaussian_delta(mu: float, eps: float) -> float:
    """delta(eps) of a mu-GDP mechanism (Dong, Roth, Su 2019, Corollary 2.13):

        delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).

    The second term is computed as exp(eps + log Phi(.)) so it stays accurate for
    large eps. mu = 0 gives delta = 0 for every eps >= 0.
    """
    mu = _mu(mu)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not eps >= 0:
        raise ValueError(f"eps must be a number >= 0, got {eps!r}")
    eps = float(eps)
    if mu == 0 or math.isinf(eps):
        return 0.0
    a = special.ndtr(-eps / mu + mu / 2)
    b = math.exp(eps + special.log_ndtr(-eps / mu - mu / 2))
    return float(max(a - b, 0.0))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The epsilon at which a mu-GDP mechanism is (epsilon, delta)-DP.

    Solves ``gaussian_delta(mu, eps) = delta`` for eps with brentq (delta(eps) is
    strictly decreasing in eps); 0 when delta(0) = 2 Phi(mu/2) - 1 <= delta already.
    """
    d = _fraction("delta", delta)
    mu = _mu(mu)
    if mu == 0 or gaussian_delta(mu, 0.0) <= d:
        return 0.0
    hi = max(1.0, mu * mu)
    while gaussian_delta(mu, hi) > d:
        hi *= 2
    return float(optimize.brentq(lambda e: gaussian_delta(mu, e) - d, 0.0, hi, xtol=1e-12, rtol=1e-12))


# ------------------------------------------------ one-shot estimate (Andrew et al.)


@dataclass(frozen=True)
class GaussianEstimate:
    """One-shot empirical epsilon ESTIMATE (``estimate_epsilon_gaussian``); not a bound.
    ``mu_ci`` / ``epsilon_ci``: None unless a bootstrap was asked for."""

    mu: float
    epsilon: float
    delta: float
    n_in: int
    n_out: int
    mean_in: float
    mean_out: float
    std: float
    scale: str
    mu_ci: tuple[float, float] | None = None
    epsilon_ci: tuple[float, float] | None = None
    ci_level: float | None = None
    method: str = "andrew-2023-one-shot-gaussian"


def _mu_hat(x_in: np.ndarray, x_out: np.ndarray, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """mu estimates along the last axis (works on bootstrap matrices too)."""
    m_in, m_out = x_in.mean(axis=-1), x_out.mean(axis=-1)
    if scale == "null":
        s = x_out.std(axis=-1, ddof=1)
    else:  # pooled
        n_in, n_out = x_in.shape[-1], x_out.shape[-1]
        ss = x_in.var(axis=-1, ddof=1) * (n_in - 1) + x_out.var(axis=-1, ddof=1) * (n_out - 1)
        s = np.sqrt(ss / (n_in + n_out - 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = np.abs(m_in - m_out) / s
    return mu, s


def estimate_epsilon_gaussian(
    in_scores: Sequence[float] | np.ndarray,
    out_scores: Sequence[float] | np.ndarray,
    delta: float,
    *,
    scale: str = "null",
    n_bootstrap: int = 0,
    ci_level: float = 0.95,
    seed: int | None = None,
) -> GaussianEstimate:
    """Estimate epsilon from inserted (in) vs held-out (out) canary scores.

    An ESTIMATE, not a bound (Andrew et al. 2023, arXiv 2302.03098): it can lie on either side
    of the true (or the accounted) epsilon. mu_hat = |mean(in) - mean(out)| / std, reported as
    ``gaussian_epsilon(mu_hat, delta)``. ``scale``: ``"null"`` (default), the sample std of the
    OUT scores; ``"pooled"``, the pooled std of both (which to use: docs/AUDIT.md,
    "estimate_epsilon_gaussian"). ``n_bootstrap > 0`` adds percentile-bootstrap intervals for
    mu and epsilon (in and out resampled independently, ``seed`` for the generator).
    """
    x_in = _scores("in_scores", in_scores, min_len=2)
    x_out = _scores("out_scores", out_scores, min_len=2)
    d = _fraction("delta", delta)
    if scale not in ("null", "pooled"):
        raise ValueError(f"scale must be 'null' or 'pooled', got {scale!r}")
    n_boot = _nonneg_int("n_bootstrap", n_bootstrap)
    level = _fraction("confidence", ci_level)
    mu, s = _mu_hat(x_in, x_out, scale)
    if not (np.isfinite(mu) and s > 0):
        raise ValueError("the scores have zero spread; mu is undefined")
    mu, s = float(mu), float(s)
    mu_ci = eps_ci = None
    if n_boot:
        rng = np.random.default_rng(seed)
        b_in = x_in[rng.integers(0, x_in.size, size=(n_boot, x_in.size))]
        b_out = x_out[rng.integers(0, x_out.size, size=(n_boot, x_out.size))]
        mus, _ = _mu_hat(b_in, b_out, scale)
        mus = mus[np.isfinite(mus)]
        q = [(1 - level) / 2, (1 + level) / 2]
        lo, hi = np.quantile(mus, q)
        mu_ci = (float(lo), float(hi))
        # gaussian_epsilon is increasing in mu, so the epsilon quantiles are the images
        # of the mu quantiles (no need for one brentq per resample).
        eps_ci = (gaussian_epsilon(float(lo), d), gaussian_epsilon(float(hi), d))
    return GaussianEstimate(
        mu=mu,
        epsilon=gaussian_epsilon(mu, d),
        delta=d,
        n_in=int(x_in.size),
        n_out=int(x_out.size),
        mean_in=float(x_in.mean()),
        mean_out=float(x_out.mean()),
        std=s,
        scale=scale,
        mu_ci=mu_ci,
        epsilon_ci=eps_ci,
        ci_level=level if n_boot else None,
    )


# --------------------------------------------- one-run lower bound (Steinke et al.)


@dataclass(frozen=True)
class OneRunBound:
    """A one-run auditing lower bound: P[epsilon_lower > true eps] <= 1 - confidence."""

    epsilon_lower: float
    guesses: int
    correct: int
    m: int
    k_pos: int
    k_neg: int
    delta: float
    confidence: float
    method: str
    grid_size: int = 1


def one_run_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Upper bound on P[W >= v] for W correct guesses out of r, under (eps, delta)-DP.

    Steinke, Nasr, Jagielski 2023, Theorem 5.2 (Theorem 5.1's binomial tail when delta = 0),
    for m canaries each included independently with probability 1/2; capped at 1. The
    formula and the range of its max: docs/AUDIT.md, "one_run_p_value".
    """
    m = positive_int("m", m)
    r = _nonneg_int("r", r)
    v = _nonneg_int("v", v)
    if not r <= m:
        raise ValueError(f"need r <= m, got r={r}, m={m}")
    if v > r:
        raise ValueError(f"need v <= r, got v={v}, r={r}")
    d = _fraction("delta", delta, allow_zero=True)
    if not (eps >= 0):
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    if v == 0:
        return 1.0
    return float(_p_values(m, r, v, np.array([eps], dtype=float), d)[0])


def _p_values(m: int, r: int, v: int, eps: np.ndarray, delta: float) -> np.ndarray:
    """``one_run_p_value`` at every eps of a 1-d array (arguments checked, v >= 1)."""
    q = special.expit(eps)
    tail = stats.binom.sf(v - 1, r, q)
    if delta == 0:
        return np.minimum(tail, 1.0)
    i = np.arange(1, v + 1)
    # P[v - i <= W < v] for i = 1..v
    partial = np.cumsum(stats.binom.pmf((v - i)[None, :], r, q[:, None]), axis=1)
    return np.minimum(tail + 2 * m * delta * np.max(partial / i, axis=1), 1.0)


def _epsilon_lower(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """inf{eps >= 0 : p(eps) > alpha}: the lower end of the confidence set for eps.

    If the mechanism is (eps_true, delta)-DP this exceeds eps_true with probability <= alpha.
    delta = 0: brentq (p increases); delta > 0: a grid of step 0.05, then bisection, which can
    miss only a non-monotone excursion narrower than 0.05 (docs/AUDIT.md, "_epsilon_lower").
    """
    if v == 0 or r == 0:
        return 0.0

    def p(e: float) -> float:
        return one_run_p_value(m, r, v, e, delta)

    if p(0.0) > alpha:
        return 0.0
    if delta == 0:
        hi = 1.0
        while p(hi) <= alpha:
            hi *= 2
            if hi > 1e4:  # pragma: no cover - p -> 1 as eps -> inf for v >= 1
                return math.inf
        return float(optimize.brentq(lambda e: p(e) - alpha, 0.0, hi, xtol=1e-10))
    step = 0.05
    start = 0.0
    while True:  # scan 64 grid points at a time, vectorised
        grid = start + step * np.arange(1, 65)
        above = np.nonzero(_p_values(m, r, v, grid, delta) > alpha)[0]
        if above.size:
            hi = float(grid[above[0]])
            lo = hi - step
            break
        start = float(grid[-1])
        if start > 1e4:  # pragma: no cover
            return math.inf
    for _ in range(36):
        mid = 0.5 * (lo + hi)
        if p(mid) > alpha:
            hi = mid
        else:
            lo = mid
    return float(lo)


def _guesses(scores: np.ndarray, included: np.ndarray, k_pos: int, k_neg: int) -> int:
    order = np.argsort(-scores, kind="stable")  # highest first; ties by position
    top = order[:k_pos]
    bottom = order[scores.size - k_neg:] if k_neg else order[:0]
    return int(included[top].sum() + (~included[bottom]).sum())


def _canaries(scores: object, included: object) -> tuple[np.ndarray, np.ndarray]:
    s = _scores("scores", scores)
    inc = np.asarray(included)
    if inc.shape != s.shape:
        raise ValueError("included must have one entry per score")
    if inc.dtype != bool:
        if not np.all((inc == 0) | (inc == 1)):
            raise ValueError("included must be boolean (or 0/1)")
        inc = inc.astype(bool)
    return s, inc


def one_run_lower_bound(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    k_pos: int,
    k_neg: int,
    delta: float = 0.0,
    confidence: float = 0.95,
) -> OneRunBound:
    """High-confidence lower bound on epsilon from one run (Steinke, Nasr, Jagielski 2023).

    ``scores[i]`` is canary i's score (higher = more likely included), ``included[i]`` whether it
    was inserted; valid only if each canary was included independently with probability 1/2 and
    the scores come from the trained model alone. With r = k_pos + k_neg guesses (the game:
    docs/AUDIT.md, "The two lower bounds"), v right, the result is the smallest eps at which
    ``one_run_p_value`` exceeds ``1 - confidence`` (docs/AUDIT.md, "one_run_p_value"): if the
    mechanism is (eps, delta)-DP, ``epsilon_lower > eps`` has probability <= ``1 - confidence``.
    k_pos and k_neg must be fixed before looking at the scores; to pick them from the data use
    ``one_run_lower_bound_grid`` (union bound).
    """
    s, inc = _canaries(scores, included)
    kp, kn = _nonneg_int("k_pos", k_pos), _nonneg_int("k_neg", k_neg)
    m = s.size
    if not 1 <= kp + kn <= m:
        raise ValueError(f"need 1 <= k_pos + k_neg <= number of canaries ({m}), got {kp} + {kn}")
    d = _fraction("delta", delta, allow_zero=True)
    c = _fraction("confidence", confidence)
    r = kp + kn
    v = _guesses(s, inc, kp, kn)
    eps = _epsilon_lower(m, r, v, d, 1 - c)
    thm = "5.1 (pure DP, binomial tail)" if d == 0 else "5.2 (exact p-value with 2 m delta term)"
    return OneRunBound(
        epsilon_lower=eps, guesses=r, correct=v, m=m, k_pos=kp, k_neg=kn,
        delta=d, confidence=c, method=f"steinke-nasr-jagielski-2023 thm {thm}",
    )


def one_run_lower_bound_grid(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    k_grid: Sequence[tuple[int, int]],
    delta: float = 0.0,
    confidence: float = 0.95,
) -> OneRunBound:
    """The best ``one_run_lower_bound`` over a grid of (k_pos, k_neg), accounted.

    Choosing k after seeing the scores is paid for by a union bound: every grid point
    is evaluated at confidence 1 - (1 - confidence) / len(k_grid), so the largest of
    the bounds exceeds the true eps with probability at most 1 - confidence.
    """
    grid = [(int(a), int(b)) for a, b in k_grid]
    if not grid:
        raise ValueError("k_grid must not be empty")
    c = _fraction("confidence", confidence)
    each = 1 - (1 - c) / len(grid)
    best = max(
        (one_run_lower_bound(scores, included, a, b, delta, each) for a, b in grid),
        key=lambda res: res.epsilon_lower,
    )
    return replace(best, confidence=c, grid_size=len(grid),
                   method=best.method + f", best of {len(grid)} (k_pos, k_neg) by union bound")


# ------------------------------- f-DP one-run analysis (Mahloujifar, Melis, Chaudhuri)
# arXiv 2410.22235 (docs/AUDIT.md, "The two lower bounds"): the recursion is theirs, the
# proof written out in docs/AUDIT.md, "fdp_one_run_mass", is ours.


class TradeOff:
    """A symmetric trade-off function f (Dong, Roth, Su 2019), by its inverse blow-up.

    ``inverse_blow_up(y)`` = inf{x : 1 - f(x) >= y}, the least probability under P of an event
    with probability y under Q (definitions: docs/AUDIT.md, "TradeOff"). Subclasses evaluate a
    FAMILY of trade-off functions at once (an array of parameters), so that a lower bound can
    scan many hypotheses in one pass.
    """

    description = "trade-off function"
    size = 1  # members of the family

    def inverse_blow_up(self, y: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


class GaussianTradeOff(TradeOff):
    """mu-GDP: f(alpha) = Phi(Phi^{-1}(1 - alpha) - mu), blow(x) = Phi(Phi^{-1}(x) + mu),
    inverse_blow_up(y) = Phi(Phi^{-1}(y) - mu). ``mu`` may be an array (a family)."""

    def __init__(self, mu: float | np.ndarray) -> None:
        mu = np.asarray(mu, dtype=float)
        if mu.ndim > 1 or not np.all(np.isfinite(mu)) or np.any(mu < 0):
            raise ValueError("mu must be a finite number >= 0 (or a 1-d array of them)")
        self.mu = mu
        self.size = int(mu.size)
        self.description = (f"{float(mu):.4g}-GDP" if mu.ndim == 0 else "mu-GDP family")

    def inverse_blow_up(self, y: np.ndarray) -> np.ndarray:
        y = np.clip(y, 0.0, 1.0)
        return special.ndtr(special.ndtri(y) - self.mu)


class ProfileTradeOff(TradeOff):
    """The trade-off function implied by a privacy profile, (eps_k, delta_k)-DP for every k
    (Dong, Roth, Su 2019, Prop. 2.12; formulas: docs/AUDIT.md, "ProfileTradeOff"). A finite
    list of pairs gives a LOWER f than the mechanism's own, so a test against it rejects less:
    conservative.

    ``epsilons`` / ``deltas``: 1-d arrays of the pairs; 2-d arrays (family, pairs) give a
    family with one profile per row (e.g. an (eps, delta) family of one pair each).
    """

    def __init__(self, epsilons: Sequence[float] | np.ndarray, deltas: Sequence[float] | np.ndarray,
                 description: str = "privacy profile") -> None:
        e = np.asarray(epsilons, dtype=float)
        d = np.asarray(deltas, dtype=float)
        if e.shape != d.shape or e.ndim not in (1, 2) or e.size == 0:
            raise ValueError("epsilons and deltas must be arrays of the same 1-d or 2-d shape")
        if np.any(~(e >= 0)) or np.any(np.isnan(e)) or np.any(~((d >= 0) & (d <= 1))):
            raise ValueError("need epsilons >= 0 and deltas in [0, 1]")
        self.epsilons, self.deltas = e, d
        self.size = int(e.shape[0]) if e.ndim == 2 else 1
        self.description = description

    def inverse_blow_up(self, y: np.ndarray) -> np.ndarray:
        y = np.clip(np.asarray(y, dtype=float), 0.0, 1.0)
        e, d = self.epsilons, self.deltas
        yy = y[..., None]  # (..., 1) against the pairs (K,) or (family, K)
        with np.errstate(over="ignore", invalid="ignore"):
            a = (yy - d) * np.exp(-e)
            b = 1.0 - d - np.exp(e) * (1.0 - yy)
        b = np.where(np.isnan(b), -np.inf, b)  # inf * 0 when y = 1 and eps = inf: no constraint
        out = np.max(np.maximum(a, b), axis=-1)
        return np.clip(out, 0.0, 1.0)


def fdp_one_run_mass(m: int, r: int, v: int, tradeoff: TradeOff, alpha: float, *,
                     exact: bool = False) -> np.ndarray:
    """The least total probability mass the one-run constraints need; > r/m rejects.

    Setting: m canaries with fair-coin inclusion bits, exactly r guesses (the rest abstain),
    v correct; ``tradeoff`` is the hypothesised symmetric f (f-DP for each bit, the others
    fixed). Guarantee: under that f, P[W >= v] >= alpha implies a return value <= r / m, so
    a value > r / m rejects f at level alpha (recursion, statement and proof: docs/AUDIT.md,
    "fdp_one_run_mass").

    Only constraints j <= v were used, so the bound holds whatever W does above v. With a
    FAMILY of trade-off functions the recursion runs for all of them at once (arrays);
    the return value has one entry per member. The totals only grow as i falls, so the
    recursion stops as soon as every member exceeds r / m (the values returned then
    certify the rejection but are not the full totals); ``exact`` runs it to i = 0.
    """
    m = positive_int("m", m)
    r = positive_int("r", r)
    v = _nonneg_int("v", v)
    if r > m or v > r:
        raise ValueError(f"need v <= r <= m, got v={v}, r={r}, m={m}")
    a = 1.0 - _fraction("confidence", 1.0 - alpha)  # alpha in (0, 1)
    rr = np.full(tradeoff.size, a * v / m)
    hh = np.full(tradeoff.size, a * (r - v) / m)
    limit = r / m
    for i in range(v - 1, -1, -1):
        hn = np.maximum(hh, tradeoff.inverse_blow_up(rr))
        rr = rr + (i / (r - i)) * (hn - hh)
        hh = hn
        if not exact and np.all(rr + hh > limit):  # every member already rejected: the total only grows
            break
    return rr + hh


def fdp_one_run_rejects(m: int, r: int, v: int, tradeoff: TradeOff, alpha: float) -> np.ndarray:
    """True where observing v correct guesses out of r (m canaries) rejects ``tradeoff``-DP
    at level ``alpha`` (``fdp_one_run_mass`` > r / m); one entry per family member. The
    comparison keeps a relative margin of 1e-9 against rounding (it can only reject less)."""
    return fdp_one_run_mass(m, r, v, tradeoff, alpha) > (r / m) * (1 + 1e-9)


@dataclass(frozen=True)
class FdpResult:
    """One-run f-DP audit over a fixed grid of guess counts (``fdp_one_run_audit``).

    ``epsilon_lower``: gaussian_epsilon(mu_lower, delta), the epsilon at ``delta`` of that
    Gaussian curve; it lower-bounds the epsilon of the smallest Gaussian-DP curve the
    mechanism satisfies, which is the mechanism's own epsilon when it IS Gaussian (one
    or more unsampled Gaussian releases) and can exceed it otherwise (subsampling).
    """

    mu_lower: float
    epsilon_lower: float
    delta: float
    confidence: float
    guesses: int
    correct: int
    m: int
    k_pos: int
    k_neg: int
    grid_size: int
    claimed: str | None = None
    claimed_rejected: bool | None = None
    claimed_guesses: tuple[int, int] | None = None
    method: str = "mahloujifar-melis-chaudhuri-2024 f-DP one-run analysis (Gaussian family), union bound over k"


MU_MAX = 30.0


def _gdp_lower_one(m: int, r: int, v: int, alpha: float) -> float:
    """The largest mu on a refining grid such that it and every grid mu below it are
    rejected (0 when mu = 0 is not rejected). Valid without assuming monotonicity in mu:
    a mu*-GDP mechanism is mu-GDP for every grid mu >= mu*, the least of which is <= the
    returned value when that exceeds mu*, so it was tested and rejected."""
    if v == 0:
        return 0.0
    lo, hi = 0.0, MU_MAX
    if not fdp_one_run_rejects(m, r, v, GaussianTradeOff(np.array([0.0])), alpha)[0]:
        return 0.0
    for _ in range(3):  # 3 passes of 64 points: resolution MU_MAX / 64^3 (about 1e-4)
        grid = np.linspace(lo, hi, 65)[1:]
        rej = fdp_one_run_rejects(m, r, v, GaussianTradeOff(grid), alpha)
        first_ok = np.nonzero(~rej)[0]
        if first_ok.size == 0:
            return float(hi)  # all rejected up to the cap: report the cap (conservative)
        k = int(first_ok[0])  # lo (rejected) and grid[:k] rejected; grid[k] not
        lo, hi = (float(grid[k - 1]) if k else lo), float(grid[k])
    return float(lo)


def fdp_one_run_audit(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    k_grid: Sequence[tuple[int, int]],
    delta: float,
    confidence: float = 0.95,
    claimed: TradeOff | None = None,
) -> FdpResult:
    """f-DP one-run audit (``fdp_one_run_mass``) of canary scores, with a lower bound on mu.

    Every (k_pos, k_neg) of ``k_grid`` (fixed before the scores are seen; the guessing game:
    docs/AUDIT.md, "The two lower bounds") is tested at level (1 - confidence) / len(k_grid):

    - ``mu_lower`` is the largest, over the grid, of ``_gdp_lower_one`` (a mu that is
      rejected with every smaller mu tested): if the mechanism is mu*-GDP,
      P[mu_lower > mu*] <= 1 - confidence.
    - ``claimed`` (optional): the claimed trade-off function (e.g. the accounted
      mechanism's); ``claimed_rejected`` is True when some grid point rejects it. If the
      mechanism satisfies ``claimed``, P[claimed_rejected] <= 1 - confidence.
    """
    s, inc = _canaries(scores, included)
    d = _fraction("delta", delta)
    c = _fraction("confidence", confidence)
    grid = [(int(a), int(b)) for a, b in k_grid]
    if not grid:
        raise ValueError("k_grid must not be empty")
    m = s.size
    alpha = (1 - c) / len(grid)
    found = []  # (mu lower bound, (k_pos, k_neg), correct guesses) per grid point
    rejected_at = None
    for kp, kn in grid:
        if kp < 0 or kn < 0 or not 1 <= kp + kn <= m:
            raise ValueError(f"need 1 <= k_pos + k_neg <= number of canaries ({m}), "
                             f"got {kp} + {kn}")
        v = _guesses(s, inc, kp, kn)
        found.append((_gdp_lower_one(m, kp + kn, v, alpha), (kp, kn), v))
        if claimed is not None and rejected_at is None and \
                bool(np.any(fdp_one_run_rejects(m, kp + kn, v, claimed, alpha))):
            rejected_at = (kp, kn)
    mu, (kp, kn), v = max(found, key=lambda t: t[0])  # the first of the largest
    return FdpResult(
        mu_lower=mu, epsilon_lower=gaussian_epsilon(mu, d), delta=d, confidence=c, guesses=kp + kn,
        correct=v, m=m, k_pos=kp, k_neg=kn, grid_size=len(grid),
        claimed=claimed.description if claimed is not None else None,
        claimed_rejected=None if claimed is None else rejected_at is not None,
        claimed_guesses=rejected_at,
    )


# ------------------------------------------------------------ the released record

CONFIDENCE = 0.95
N_BOOTSTRAP = 1000
MIN_CANARIES = 20
#: guesses of the (eps, delta) bound, as fractions of the canaries: "in" for the top k
#: only, and "in" for the top k with "out" for the bottom k (all at once, union bound)
TOP_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.45)
BOTH_FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.45)
#: guesses of the f-DP analysis: it gains most from few, confident guesses (measured in
#: tests/privacy/test_audit_fdp.py; larger fractions only cost union bound and time)
FDP_TOP_FRACTIONS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
FDP_BOTH_FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.1)
#: the accounted curve of a subsampled mechanism: (eps, delta(eps)) from the PLD
#: accountant (pessimistic) at this many epsilons
PROFILE_POINTS = 400


def _grid(n: int, top: Sequence[float], both: Sequence[float]) -> list[tuple[int, int]]:
    grid = {(max(1, int(n * f)), 0) for f in top}
    grid |= {(max(1, int(n * f)), max(1, int(n * f))) for f in both if 2 * max(1, int(n * f)) <= n}
    return sorted(grid)


def k_grid(n: int) -> list[tuple[int, int]]:
    """The (k_pos, k_neg) guess counts of the (eps, delta) bound, fixed before the scores."""
    return _grid(n, TOP_FRACTIONS, BOTH_FRACTIONS)


def fdp_k_grid(n: int) -> list[tuple[int, int]]:
    """The (k_pos, k_neg) guess counts of the f-DP analysis, fixed before the scores."""
    return _grid(n, FDP_TOP_FRACTIONS, FDP_BOTH_FRACTIONS)


# ------------------------------------------------------------ the accounted curves


@dataclass(frozen=True)
class Claim:
    """The accounted mechanism's trade-off function for one canary, and its name."""

    tradeoff: TradeOff
    description: str
    mu: float | None = None  # when the accounted mechanism is exactly mu-GDP


def accounted_gaussian_tradeoff(noise_multiplier: float, releases: int) -> Claim:
    """``releases`` Gaussian releases (no sampling), each with std = z x its sensitivity:
    exactly mu-GDP with mu = sqrt(releases) / z (Dong, Roth, Su 2019: a Gaussian release
    of sensitivity-normalised std z is (1/z)-GDP, and mu-GDP composes as the root sum of
    squares, also adaptively)."""
    if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)) or releases < 1:
        raise ValueError("need a positive noise multiplier and at least one release")
    mu = math.sqrt(releases) / noise_multiplier
    return Claim(GaussianTradeOff(mu), f"{mu:.4g}-GDP ({releases} Gaussian release(s) at z = "
                 f"{noise_multiplier:.4g})", mu)


def accounted_poisson_tradeoff(noise_multiplier: float, sampling_rate: float, rounds: int,
                               relation: Relation | str) -> Claim:
    """The trade-off curve of ``rounds`` Poisson-sampled Gaussian rounds (rate q, noise
    multiplier z): exactly (sqrt(T) / z)-GDP when q = 1; otherwise the curve implied by
    the PLD accountant's (eps, delta(eps)) at ``PROFILE_POINTS`` epsilons (dp_accounting
    discretises pessimistically, so delta(eps) is an upper bound and the curve a lower
    bound on the mechanism's: a test against it rejects less than against the exact one).
    """
    if sampling_rate >= 1.0:
        return accounted_gaussian_tradeoff(noise_multiplier, rounds)
    from dpemb.privacy.events import PLD_DISCRETIZATION  # first: a missing dp_accounting is one line

    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    vacuous = _vacuous_rdp_profile(noise_multiplier, sampling_rate, rounds, relation)
    if vacuous is not None:
        return vacuous
    pld = pld_lib.from_gaussian_mechanism(
        noise_multiplier, value_discretization_interval=PLD_DISCRETIZATION, sampling_prob=sampling_rate,
        neighboring_relation=to_dp_accounting(parse_relation(relation)),
    ).self_compose(int(rounds))
    top = float(pld.get_epsilon_for_delta(1e-12))  # beyond it the curve changes by < 1e-12
    top = min(max(top, 1e-3), 100.0) if math.isfinite(top) else 100.0
    eps = np.linspace(0.0, top, PROFILE_POINTS)
    deltas = np.clip(np.asarray(pld.get_delta_for_epsilon(eps), dtype=float), 0.0, 1.0)
    desc = (f"PLD curve of {rounds} Poisson-sampled Gaussian round(s) (q = {sampling_rate:.4g}, "
            f"z = {noise_multiplier:.4g})")
    return Claim(ProfileTradeOff(eps, deltas, description=desc), desc)


#: deltas of the RDP profile that replaces the PLD curve of a vacuous mechanism
RDP_PROFILE_DELTAS = tuple(np.logspace(-12, -1, 45))


def _vacuous_rdp_profile(noise_multiplier: float, sampling_rate: float, rounds: int,
                         relation: Relation | str) -> Claim | None:
    """For a mechanism whose RDP epsilon at delta 1e-6 exceeds ``PLD_MAX_RDP_EPSILON`` (a
    vacuous guarantee): the curve implied by the RDP accountant's (eps, delta) at
    ``RDP_PROFILE_DELTAS``, valid (every pair is an upper bound on the mechanism's
    profile) and a lower curve than the PLD's, so conservative. The PLD's cost grows like
    1/z^2: at z = 0.005 (the README's toy run) it ran for many minutes. None otherwise."""
    import dp_accounting

    from dpemb.privacy.advice import PLD_MAX_RDP_EPSILON
    from dpemb.privacy.events import make_accountant

    acc = make_accountant("rdp", parse_relation(relation))
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(sampling_rate, dp_accounting.GaussianDpEvent(noise_multiplier)),
        int(rounds)))
    if float(acc.get_epsilon(1e-6)) <= PLD_MAX_RDP_EPSILON:
        return None
    eps = np.array([float(acc.get_epsilon(d)) for d in RDP_PROFILE_DELTAS])
    desc = (f"RDP profile of {rounds} Poisson-sampled Gaussian round(s) (q = {sampling_rate:.4g}, "
            f"z = {noise_multiplier:.4g}; vacuous, RDP epsilon > {PLD_MAX_RDP_EPSILON:g} at delta 1e-6, "
            "so not the PLD curve)")
    return Claim(ProfileTradeOff(eps, np.asarray(RDP_PROFILE_DELTAS)), desc)


# ------------------------------------------------------------ the record


@dataclass(frozen=True)
class Reported:
    """The epsilon the run reports, with everything a reader needs to interpret it."""

    epsilon: float | None
    accountant: str
    delta: float
    unit: str
    relation: Relation | str
    epsilon_other: dict[str, float | None] | None = None  # e.g. {"pld": ...} beside RDP

    def describe(self) -> str:
        rel = describe_relation(parse_relation(self.relation), self.unit)
        return (f"{_f(self.epsilon)} ({self.accountant.upper()}, delta = {self.delta:.3g}, "
                f"{self.unit}-level, {rel})")


def _f(x: float | None) -> str:
    return "n/a" if x is None else ("inf" if math.isinf(x) else f"{x:.2f}")


def audit_record(
    scores: np.ndarray,
    included: np.ndarray,
    reported: Reported,
    *,
    claim: Claim | None = None,
    seed: int | None = None,
    confidence: float = CONFIDENCE,
    n_bootstrap: int = N_BOOTSTRAP,
) -> dict[str, Any]:
    """The released summary of one audit (see the module docstring). ``scores[i]``:
    canary i's score, higher = more likely inserted; ``included[i]``: its secret bit;
    ``seed``: the bootstrap's generator (derive it from the canary key)."""
    scores = np.asarray(scores, dtype=float)
    inc = np.asarray(included, dtype=bool)
    n = scores.size
    delta = reported.delta
    estimate = lower = fdp = None
    if inc.sum() >= 2 and (~inc).sum() >= 2:
        try:
            estimate = estimate_epsilon_gaussian(scores[inc], scores[~inc], delta, n_bootstrap=n_bootstrap,
                                                 ci_level=confidence, seed=seed)
        except ValueError:  # zero spread: no estimate
            estimate = None
        lower = one_run_lower_bound_grid(scores, inc, k_grid(n), delta, confidence)
        fdp = fdp_one_run_audit(scores, inc, fdp_k_grid(n), delta, confidence,
                                claimed=claim.tradeoff if claim else None)
    eps = reported.epsilon
    record: dict[str, Any] = {
        "canaries": int(n), "delta": delta, "confidence": confidence,
        "epsilon_estimate": estimate.epsilon if estimate else None,
        "epsilon_estimate_ci": list(estimate.epsilon_ci) if estimate and estimate.epsilon_ci else None,
        "mu_estimate": estimate.mu if estimate else None,
        "estimate_method": estimate.method if estimate else None,
        "epsilon_lower_bound": lower.epsilon_lower if lower else None,
        "guesses": lower.guesses if lower else None, "correct_guesses": lower.correct if lower else None,
        "lower_bound_method": lower.method if lower else None,
        "mu_lower_bound": fdp.mu_lower if fdp else None,
        "epsilon_lower_bound_fdp": fdp.epsilon_lower if fdp else None,
        "fdp_guesses": fdp.guesses if fdp else None, "fdp_correct_guesses": fdp.correct if fdp else None,
        "fdp_method": fdp.method if fdp else None,
        "accounted_curve": claim.description if claim else None,
        "mu_accounted": claim.mu if claim else None,
        "accounted_curve_rejected": fdp.claimed_rejected if fdp and claim else None,
        "epsilon_reported": eps, "epsilon_reported_accountant": reported.accountant,
        "unit": reported.unit, "relation": parse_relation(reported.relation).value,
    }
    for name, value in (reported.epsilon_other or {}).items():
        record[f"epsilon_{name}"] = value
    record["lower_bound_exceeds_reported"] = bool(
        lower is not None and eps is not None and lower.epsilon_lower > eps)
    record["warning"] = bool(record["lower_bound_exceeds_reported"] or record["accounted_curve_rejected"])
    record["statement"] = statement(record, reported)
    return record


def statement(record: dict[str, Any], reported: Reported) -> str:
    """The console and report line: estimate, lower bounds and reported epsilon side by side."""
    ci = record.get("epsilon_estimate_ci")
    pct = f"{100 * record['confidence']:g}%"
    text = (f"empirical epsilon (one-shot estimate) {_f(record['epsilon_estimate'])}"
            + (f" [{pct} bootstrap {_f(ci[0])}-{_f(ci[1])}]" if ci else "")
            + f"; lower bound {_f(record['epsilon_lower_bound'])} at {pct} confidence ((eps, delta), one run)")
    if record.get("mu_lower_bound") is not None:
        text += (f", f-DP lower bound {_f(record['epsilon_lower_bound_fdp'])} (mu >= "
                 f"{record['mu_lower_bound']:.3f}, Gaussian curve)")
        if record.get("accounted_curve") is not None:
            verdict = "REJECTED" if record["accounted_curve_rejected"] else "not rejected"
            mu = record.get("mu_accounted")
            text += f"; accounted curve{f' (mu = {mu:.3f})' if mu is not None else ''} {verdict}"
    text += f"; reported epsilon {reported.describe()}; {record['canaries']} canaries"
    if record.get("warning"):
        why = []
        if record.get("lower_bound_exceeds_reported"):
            why.append("the lower bound exceeds the reported epsilon")
        if record.get("accounted_curve_rejected"):
            why.append("the canaries' guesses are impossible under the accounted trade-off curve")
        text += (f". WARNING: {' and '.join(why)}: the mechanism does not deliver its epsilon (or an event of "
                 f"probability <= {1 - record['confidence']:.2g} happened)")
    return text

"""Calibration: the noise for a target epsilon, the rounds a budget affords, extrapolation.

Definitions: docs/PRIVACY.md, "Calibration and extrapolation". Guarantees: the z
``calibrate_noise_multiplier`` returns (rounded UP) always meets the target; ``extrapolate``
keeps the noise on the average and the sampling rate, and its default delta is 1/N' (the
paper's convention, which ``dpemb.privacy.delta`` would refuse for a real run; ``delta_note``
says so); a given delta is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from dpemb.privacy._checks import positive_finite, positive_int
from dpemb.privacy.spec import MAX_NOISE_MULTIPLIER, MIN_NOISE_MULTIPLIER
from dpemb.privacy.delta import is_large_delta
from dpemb.privacy.events import (
    _check_accountant,
    _check_delta,
    compute_epsilon,
    epsilon_curve,
    epsilon_for,
    PLD_DISCRETIZATION,
    gaussian_releases_event,
    pld_start_interval,
)
from dpemb.privacy.spec import PrivacySpec, PrivacySpecError

REL_TOL = 1e-4
_MAX_DOUBLINGS = 40  # max_rounds: doublings of the round count before giving up


class CalibrationError(ValueError):
    """No parameter value meets the requested budget."""


def _smallest_noise(eps_of_z: Callable[[float], float], target: float, what: str, start: float = 1.0,
                    step: float = 2.0) -> float:
    """Smallest z (relative tolerance REL_TOL, rounded up) with eps_of_z(z) <= target.

    Epsilon falls as z grows; the returned ``hi`` always satisfies the target, and the search
    stays within [``MIN_NOISE_MULTIPLIER``, ``MAX_NOISE_MULTIPLIER``], where the accountant is
    exact (bracketing and bisection: docs/PRIVACY.md, "Calibration and extrapolation").
    """
    hi, factor = min(max(start, MIN_NOISE_MULTIPLIER), MAX_NOISE_MULTIPLIER), step
    while eps_of_z(hi) > target:
        if hi >= MAX_NOISE_MULTIPLIER:
            raise CalibrationError(f"no noise multiplier up to {MAX_NOISE_MULTIPLIER:g} reaches {what}")
        hi = min(hi * factor, MAX_NOISE_MULTIPLIER)
        factor = min(2.0, factor * factor)
    factor = step
    lo = max(hi / factor, MIN_NOISE_MULTIPLIER)
    while eps_of_z(lo) <= target:
        if lo <= MIN_NOISE_MULTIPLIER:
            raise CalibrationError(f"{what} is met even by a noise multiplier of {MIN_NOISE_MULTIPLIER:g} "
                                   "(no guarantee at all); check the target")
        factor = min(2.0, factor * factor)
        hi, lo = lo, max(lo / factor, MIN_NOISE_MULTIPLIER)
    while (hi - lo) > REL_TOL * lo:
        mid = math.sqrt(lo * hi)
        if eps_of_z(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def calibrate_noise_multiplier(spec: PrivacySpec, target_epsilon: float, accountant: str = "rdp") -> float:
    """Smallest noise multiplier (relative to the sensitivity) giving epsilon <= target.

    All other fields of ``spec`` (population, M, K, rounds, delta, sampling, mechanism,
    relation) are kept; ``spec.noise_multiplier`` is ignored. With adaptive clipping z is
    the TOTAL multiplier (epsilon depends on it alone); whether the split leaves the update
    a finite z_value is checked when the caller builds the spec with the returned z.
    """
    target = positive_finite("target epsilon", target_epsilon)
    _check_accountant(accountant)
    if spec.nonprivate:
        raise CalibrationError("a non-private spec has no noise to calibrate")

    base = replace(spec, adaptive_clipping=None)  # no split check while searching
    what = f"epsilon {target:g} ({accountant.upper()})"

    def eps(z: float) -> float:
        return epsilon_for(replace(base, noise_multiplier=z), accountant)

    if accountant == "pld":
        z = _pld_search(base, target, what)
        if z is not None:
            return z
    return _smallest_noise(eps, target, what)


def _pld_search(base: PrivacySpec, target: float, what: str) -> float | None:
    """PLD calibration, searched at one discretisation interval at a time: the interval
    the refinement (``events.refined_pld_epsilon``) first tries at the target's scale,
    then the one it chose at the z found, until the two agree. The z returned has the
    reported (refined) epsilon <= target; None if the intervals do not settle (the
    caller then searches on the refined epsilon directly)."""
    def eps_at(z: float, h: float) -> float:
        return epsilon_curve(replace(base, noise_multiplier=z), "pld").pld_epsilon_at(base.rounds, h)

    compositions = epsilon_curve(replace(base, noise_multiplier=1.0), "pld").pld_compositions(base.rounds)
    interval = pld_start_interval(target, compositions)
    z, step = 1.0, 2.0
    if interval < PLD_DISCRETIZATION / 2:
        # a cheap first search on the coarse grid (a coarser grid gives a larger epsilon,
        # so its z is where the finer searches start: they then step from it in 2%)
        z = _smallest_noise(lambda z: eps_at(z, PLD_DISCRETIZATION), target, what)
        step = 1.02
    for _ in range(4):
        z = _smallest_noise(lambda z, h=interval: eps_at(z, h), target, what, start=z, step=step)
        step = 1.02
        found = epsilon_curve(replace(base, noise_multiplier=z), "pld")
        if found(base.rounds) <= target and found.pld_interval(base.rounds) == interval:
            return z
        interval = found.pld_interval(base.rounds)
    return None


def calibrated_spec(target_epsilon: float, accountant: str = "rdp", **fields: Any) -> PrivacySpec:
    """The ``PrivacySpec`` with ``fields`` (everything but the noise multiplier) whose z is
    the smallest giving ``target_epsilon`` (``calibrate_noise_multiplier``). Callers never
    build a spec with a made-up z first: the z searched over lives here only."""
    if "noise_multiplier" in fields:
        raise ValueError("calibrated_spec derives the noise multiplier; do not pass one")
    adaptive = fields.pop("adaptive_clipping", None)  # epsilon depends on the total z alone
    searched = PrivacySpec(noise_multiplier=1.0, **fields)  # a start for the search, never used
    z = calibrate_noise_multiplier(searched, target_epsilon, accountant)
    return replace(searched, noise_multiplier=z, adaptive_clipping=adaptive)


def check_epsilon_budget(epsilon_budget: float | None, spec: PrivacySpec) -> float | None:
    """A training run's epsilon budget: None (no budget), or positive and finite for a
    private ``spec``; a ValueError otherwise (a NaN budget would never stop the run, and a
    non-private run has no epsilon to budget)."""
    if epsilon_budget is None:
        return None
    budget = positive_finite("epsilon budget", epsilon_budget)
    if spec.nonprivate:
        raise ValueError("an epsilon budget applies to a private run: a non-private run has no epsilon to "
                         "stop at; drop the budget (--epsilon-budget)")
    return budget


def max_rounds(spec: PrivacySpec, epsilon_budget: float, accountant: str = "rdp") -> int:
    """Largest number of rounds whose epsilon stays within ``epsilon_budget`` (0 if none)."""
    budget = positive_finite("epsilon budget", epsilon_budget)
    if spec.nonprivate:
        return 0
    curve = epsilon_curve(spec, accountant)
    if curve(1) > budget:
        return 0
    lo, hi = 1, 2
    while curve(hi) <= budget:
        lo, hi = hi, hi * 2
        if hi > 2**_MAX_DOUBLINGS:
            raise CalibrationError(f"more than 2^{_MAX_DOUBLINGS} rounds fit in epsilon {budget:g}")
    while hi - lo > 1:  # curve(lo) <= budget < curve(hi)
        mid = (lo + hi) // 2
        if curve(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class Extrapolation:
    """The guarantee of the same run scaled to a larger population (same noise on the average)."""

    factor: float  # scale applied to both the noise multiplier and the clients per round
    population: int
    noise_multiplier: float
    clients_per_round: int
    epsilon: float
    delta: float = 0.0
    accountant: str = "rdp"
    spec: PrivacySpec | None = None  # the extrapolated spec
    delta_note: str = ""  # where delta comes from, e.g. "paper's convention: delta = 1/N'"


PAPER_DELTA_NOTE = "paper's convention: delta = 1/N' at the extrapolated population"


def extrapolate(spec: PrivacySpec, population: int, accountant: str = "rdp") -> Extrapolation:
    """Epsilon over ``population`` users with z and M scaled by k = population / spec.population."""
    n = positive_int("population to extrapolate to", population)
    _check_accountant(accountant)
    k = n / spec.population
    m = max(1, round(k * spec.clients_per_round))
    factor = m / spec.clients_per_round
    if spec.delta is None:
        delta, note = 1.0 / n, PAPER_DELTA_NOTE
    else:
        delta = spec.delta
        note = "delta as given" + (" (>= 1/N' at the extrapolated population)" if is_large_delta(delta, n) else "")
    try:
        new = replace(
            spec,
            population=n,
            clients_per_round=m,
            noise_multiplier=0.0 if spec.nonprivate else spec.noise_multiplier * factor,
            delta=delta,
            allow_large_delta=True,  # a what-if under the paper's convention, labelled by delta_note
            adaptive_clipping=None,  # epsilon depends on the total z only (its count noise would scale too)
        )
    except PrivacySpecError as e:  # e.g. z x k beyond the accountant's range
        raise PrivacySpecError(f"no extrapolation to {n:,} users (noise multiplier {spec.noise_multiplier:g} x "
                               f"{factor:g}): {e}") from None
    eps = math.inf if spec.nonprivate else epsilon_for(new, accountant)
    return Extrapolation(
        factor=factor, population=n, noise_multiplier=new.noise_multiplier, clients_per_round=m,
        epsilon=eps, delta=new.resolved_delta, accountant=accountant, spec=new, delta_note=note,
    )


def calibrate_extrapolated(spec: PrivacySpec, target_epsilon: float, population: int,
                           accountant: str = "rdp") -> PrivacySpec:
    """``spec`` with the smallest noise multiplier whose run, EXTRAPOLATED to ``population``
    users (``extrapolate``: z and M scaled by one factor, the same noise on the average), has
    ``target_epsilon`` by ``accountant``. The guarantee of the run itself, on
    ``spec.population`` users, is its own (much larger) epsilon: callers state both."""
    n = positive_int("population to extrapolate to", population)
    if n < spec.population:
        raise PrivacySpecError(f"{n:,} users is below the {spec.population:,} users trained on: give a larger "
                               "population, or calibrate at the real one")
    unit = extrapolate(replace(spec, noise_multiplier=1.0), n, accountant)  # its factor and M' do not depend on z
    return replace(spec, noise_multiplier=calibrate_noise_multiplier(unit.spec, target_epsilon, accountant)
                   / unit.factor)


def calibrate_gaussian_releases(
    target_epsilon: float, delta: float, count: int, accountant: str = "pld"
) -> float:
    """Smallest z such that ``count`` Gaussian releases (std z x sensitivity each) meet the target."""
    target = positive_finite("target epsilon", target_epsilon)
    delta = _check_delta(delta)
    n = positive_int("number of releases", count)
    _check_accountant(accountant)

    def eps(z: float) -> float:
        return compute_epsilon(gaussian_releases_event(z, n), delta, accountant)

    return _smallest_noise(eps, target, f"epsilon {target:g} at delta {delta:g} ({accountant.upper()})")

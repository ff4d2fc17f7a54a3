"""From canary scores to the released audit record: estimators, bounds, the sentence.

Every audit of dpemb (``audit_run``, ``blackbox_audit``, ``transfer.audit``) ends here: one score
per canary and its secret inclusion bit go in; a JSON-ready record comes out with the reported
epsilon (naming accountant, delta, unit and relation), the one-shot ESTIMATE, the (eps, delta)
and f-DP LOWER bounds (``dpemb.privacy.audit``) and the test of the ACCOUNTED trade-off curve
(``accounted_poisson_tradeoff``, ``accounted_gaussian_tradeoff``). The warning fires when the
(eps, delta) bound exceeds the reported epsilon or the accounted curve is rejected: at most
twice 1 - confidence for a correct mechanism (docs/AUDIT.md, "What an audit can and cannot show").

The bit vector and the scores are PRIVATE (they identify the canaries); the record holds only
counts and summaries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dpemb.privacy.audit import (
    GaussianTradeOff,
    ProfileTradeOff,
    TradeOff,
    estimate_epsilon_gaussian,
    fdp_one_run_audit,
    one_run_lower_bound_grid,
)
from dpemb.privacy.relations import Relation, describe_relation, parse_relation, to_dp_accounting

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

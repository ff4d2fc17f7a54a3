"""Human-readable privacy statements. Every epsilon names accountant, delta, unit, relation."""

from __future__ import annotations

import math

from dpemb.privacy.relations import Relation, describe_relation, parse_relation
from dpemb.privacy.spec import PrivacySpec

ACCOUNTANT_NAMES = {"rdp": "RDP accountant", "pld": "PLD accountant"}
#: what the privacy statement of an explicitly requested run without noise says (every
#: output of such a run says "not private")
NONPRIVATE_STATEMENT = "not private: no noise (explicitly requested)"


def format_epsilon(epsilon: float) -> str:
    """Two decimals from 1 upward, three significant digits below."""
    if epsilon >= 1:
        return f"{epsilon:.2f}"
    return f"{epsilon:#.3g}"


def describe_epsilon(
    epsilon: float | None, *, accountant: str, delta: float, unit: str, relation: Relation,
    schedule: str | None = None,
) -> str:
    """E.g. "epsilon = 3.90 (RDP accountant, delta = 1e-07, user-level, add/remove-one-user)".

    ``schedule`` (``describe_schedule``: the mechanism and participation schedule where the
    epsilon depends on more than the noise and the rate, e.g. "BandMF, 4 bands, cyclic
    Poisson participation") is appended inside the parentheses. ``None`` or an infinite
    epsilon reads "not private (epsilon = inf)".
    """
    if epsilon is None or math.isinf(epsilon):
        return "not private (epsilon = inf)"
    if math.isnan(epsilon):
        raise ValueError("epsilon is NaN: the accounting failed")
    name = ACCOUNTANT_NAMES.get(accountant)
    if name is None:
        raise ValueError(f"unknown accountant {accountant!r}; use one of {', '.join(ACCOUNTANT_NAMES)}")
    rel = describe_relation(parse_relation(relation), unit)
    from dpemb.privacy.events import rdp_floor_epsilon

    floor = rdp_floor_epsilon(delta) if accountant == "rdp" else 0.0
    note = (f"; the RDP accountant's floor at this delta (its largest order): it cannot state less, so a "
            f"larger population with a smaller delta can read higher; PLD is tighter here"
            if epsilon <= 1.1 * floor else "")
    sched = f"; {schedule}" if schedule else ""
    return f"epsilon = {format_epsilon(epsilon)} ({name}, delta = {delta:.3g}, {unit}-level, {rel}{sched}{note})"


def describe_schedule(spec: PrivacySpec) -> str | None:
    """The mechanism and participation schedule an epsilon statement of ``spec`` names: for
    BandMF "BandMF, 4 bands, cyclic Poisson participation" (its epsilon counts ceil(T / b)
    participations, which the statement must not leave implicit), for BLT "BLT, min-separation
    b = 35, no amplification, cyclic Poisson participation"; None for the other mechanisms
    (their mechanism line says it)."""
    if spec.mechanism == "blt":
        return f"BLT, min-separation b = {spec.bands}, no amplification, cyclic Poisson participation"
    if spec.mechanism != "bandmf":
        return None
    return f"BandMF, {spec.bands} band{'s' if spec.bands != 1 else ''}, cyclic Poisson participation"


def describe_mechanism(spec: PrivacySpec) -> str:
    """One line: mechanism, sampling, sensitivity, noise, K, relation."""
    if spec.nonprivate:
        return NONPRIVATE_STATEMENT
    if spec.mechanism == "bandmf":
        noise = (f"{describe_schedule(spec)}: correlated noise C^-1 Z (banded inverse-square-root strategy C, "
                 f"largest column norm 1), Z's std = {spec.noise_multiplier:g} x sensitivity")
    elif spec.mechanism == "blt":
        noise = (f"{describe_schedule(spec)}: correlated noise C^-1 Z (buffered linear Toeplitz strategy C for "
                 f"{spec.rounds:,} rounds, min-separation sensitivity 1), Z's std = {spec.noise_multiplier:g} x "
                 "sensitivity")
    elif spec.mechanism == "tree":
        noise = (f"tree aggregation (DP-FTRL), node noise std = {spec.noise_multiplier:g} x sensitivity"
                 + (", restarted every epoch" if spec.tree_restarts else ""))
    elif spec.adaptive_clipping is not None:
        noise = f"Gaussian noise, total noise multiplier z = {spec.noise_multiplier:g}"
    else:
        noise = f"Gaussian noise std = {spec.noise_multiplier:g} x sensitivity"
    sampling = {
        "poisson": f"Poisson sampling q = {spec.sampling_rate:.4g}",
        "fixed": f"fixed-size sampling of {spec.clients_per_round * spec.users_per_client:,} users",
        "epoch": f"each user once per epoch of {spec.rounds_per_epoch} rounds",
        "cyclic-poisson": (f"{spec.bands} group{'s' if spec.bands != 1 else ''} of users keyed by the run key, round t samples group t mod "
                           f"{spec.bands} at q = b*M*K/N = {spec.sampling_rate:.4g} (each user in at most "
                           f"ceil(T / {spec.bands}) = {math.ceil(spec.rounds / spec.bands):,} of the "
                           f"{spec.rounds:,} rounds)"),
    }[spec.sampling]
    factor = spec.sensitivity / spec.clip_norm
    sens = "C" if factor == 1 else f"{factor:g}C"
    return (
        f"{noise}{' (secure sampler)' if spec.secure_noise else ''}; {sampling}; {spec.clients_per_round:,} "
        f"virtual clients of K = {spec.users_per_client} {spec.unit}s per round; sensitivity {sens} = "
        f"{spec.sensitivity:g} under {describe_relation(spec.relation, spec.unit)}"
        + (f"; {describe_adaptive_clipping(spec)}" if spec.adaptive_clipping is not None else "")
    )


def describe_adaptive_clipping(spec: PrivacySpec) -> str:
    """The split of z between the update and the clip's count, and why one event covers both."""
    a = spec.adaptive_clipping
    if a is None:
        return "fixed clip norm"
    head = (f"adaptive clipping (target quantile {a.target_quantile:g}, clip lr {a.learning_rate:g}, "
            f"initial C = {spec.clip_norm:g})")
    if spec.nonprivate:
        return head + " from the UN-noised count (not private)"
    return (
        f"{head}: update noise {spec.value_noise_multiplier:.4g} x sensitivity(C_t), count noise std "
        f"sigma_b = {spec.count_stddev:.4g} on the centred count (sensitivity {spec.count_sensitivity:g}); "
        f"the pair is one Gaussian with total z = {spec.noise_multiplier:g} "
        f"(1/z^2 = 1/{spec.value_noise_multiplier:.4g}^2 + ({spec.count_sensitivity:g}/{spec.count_stddev:.4g})^2), "
        "so epsilon covers both releases"
    )

"""Warnings for configurations that give weak privacy or noise that swamps the signal.

Rules and the glyph-benchmark runs behind the thresholds: docs/PRIVACY.md, "Warnings".
Epsilon above ``WEAK_EPSILON`` (10); noise on the averaged update, z x sensitivity / (M x C)
per coordinate, above ``TRAINS_UP_TO`` (loses accuracy or stalls) or from ``DIVERGES_FROM``
(diverges), naming the population at which the same q and z put it at ``TRAINS_UP_TO``; a
delta above the default 1/(10 N) (``delta.delta_warning``).
"""

from __future__ import annotations

import math

from dpemb.privacy.delta import delta_warning
from dpemb.privacy.spec import PrivacySpec
from dpemb.privacy.statements import NONPRIVATE_STATEMENT
from dpemb.privacy.strategy import model_noise, prefix_noise_rms

WEAK_EPSILON = 10.0
#: beyond this RDP epsilon the PLD epsilon is not computed (training reports, `dpemb account`):
#: the guarantee is vacuous, and PLD's cost grows like 1/z^2 (at z = 0.01 it ran for minutes)
PLD_MAX_RDP_EPSILON = 1000.0
TRAINS_UP_TO = 0.015
DIVERGES_FROM = 0.1


def cohort_warnings(spec: PrivacySpec, epsilon: float | None = None) -> list[str]:
    """Plain-language warnings for ``spec`` (and its epsilon, when known)."""
    if spec.nonprivate:
        return [NONPRIVATE_STATEMENT]
    out = []
    relative = relative_noise(spec)
    if relative > TRAINS_UP_TO:
        out.append(noise_warning(spec, relative))
    about_delta = delta_warning(spec.resolved_delta, spec.population, spec.unit)
    if about_delta:
        out.append(about_delta)
    if epsilon is not None and not math.isnan(epsilon) and epsilon > WEAK_EPSILON:
        out.append(f"weak guarantee: epsilon {epsilon:.3g} > {WEAK_EPSILON:g} offers little protection")
    return out


def relative_noise(spec: PrivacySpec) -> float:
    """The noise on the averaged update per round in units of C; for BandMF and BLT, that of
    independent noise adding as much to the model (``model_noise`` / one band's ``prefix_noise_rms``)."""
    if spec.mechanism == "blt" or (spec.mechanism == "bandmf" and spec.bands > 1):
        return model_noise(spec) / prefix_noise_rms([1.0], spec.rounds)
    return spec.noise_on_average / spec.clip_norm


def trainable_population(spec: PrivacySpec) -> int:
    """The population N' at which ``spec``'s sampling rate and z (so about its epsilon:
    the same events, at the delta of N') give noise on the average of ``TRAINS_UP_TO`` x C,
    with M x N'/N clients per round."""
    relative = relative_noise(spec)
    return int(math.ceil(spec.population * relative / TRAINS_UP_TO))


def noise_warning(spec: PrivacySpec, relative: float) -> str:
    """The small-cohort warning: what the noise on the average does at this level
    (measured), and the population at which this epsilon would train."""
    what = (f"training diverges: from {DIVERGES_FROM:g} x C the clients' local training went non-finite within "
            "ten rounds in measured runs, and the model then moves by noise alone"
            if relative >= DIVERGES_FROM else
            f"training loses accuracy or stalls: measured runs trained up to {TRAINS_UP_TO:g} x C and lost "
            "accuracy or stalled above it, depending on the users per client, clients per round and rounds")
    n_star = trainable_population(spec)
    m_star = int(math.ceil(spec.clients_per_round * n_star / spec.population))
    return (
        f"small cohort: with {spec.clients_per_round} clients per round the noise on the averaged update is "
        f"{relative:.2g} x the clip norm per coordinate"
        + (f" (as independent noise adding what {spec.mechanism} noise adds to the model)"
           if spec.mechanism == "blt" or spec.bands > 1 else "")
        + f" (z = {spec.noise_multiplier:g}, sensitivity "
        f"{spec.sensitivity / spec.clip_norm:g}C): {what}. At about {n_star:,} users ({m_star:,} clients per "
        f"round, the same sampling rate and z, so about this epsilon) it would be {TRAINS_UP_TO:g} x C: "
        f"`dpemb account --extrapolate-to {n_star}` gives that run's epsilon"
    )

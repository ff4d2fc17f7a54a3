"""Warnings for configurations that give weak privacy or noise that swamps the signal.

Three rules (stated in docs/PRIVACY.md):

- epsilon above ``WEAK_EPSILON`` (10): the guarantee gives little protection.
- noise on the averaged update above ``MAX_NOISE_ON_AVERAGE`` (1e-3) times the clip
  norm per coordinate, i.e. z x sensitivity / (M x C) > 1e-3: the cohort is too small
  for useful privacy. A clipped update has norm <= C spread over all coordinates, so
  with much more noise per coordinate training stalls (measured on this project's
  glyph benchmark with C = 0.3: collapse at 1e-2 x C, about 3e-3 x C needed). Large
  cohorts (thousands of clients per round, the paper's regime) or the extrapolation
  to a larger population are the way out.
- a delta above the default 1/(10 N): one of 1/N or more that was forced
  (``allow_large_delta``), or one just below 1/N (``delta.delta_warning``).
"""

from __future__ import annotations

import math

from dpemb.privacy.delta import delta_warning
from dpemb.privacy.spec import PrivacySpec

WEAK_EPSILON = 10.0
#: beyond this RDP epsilon the PLD epsilon is not computed (training reports, `dpemb account`):
#: the guarantee is vacuous, and PLD's cost grows like 1/z^2 (at z = 0.01 it ran for minutes)
PLD_MAX_RDP_EPSILON = 1000.0
MAX_NOISE_ON_AVERAGE = 1e-3  # per coordinate, in units of the clip norm


def cohort_warnings(spec: PrivacySpec, epsilon: float | None = None) -> list[str]:
    """Plain-language warnings for ``spec`` (and its epsilon, when known)."""
    if spec.nonprivate:
        return ["not private: the run adds no noise (explicitly requested)"]
    out = []
    relative = spec.noise_on_average / spec.clip_norm
    if relative > MAX_NOISE_ON_AVERAGE:
        out.append(
            f"small cohort: with {spec.clients_per_round} clients per round the noise on the averaged "
            f"update is {relative:.2g} x the clip norm per coordinate (z = {spec.noise_multiplier:g}, "
            f"sensitivity {spec.sensitivity / spec.clip_norm:g}C); above {MAX_NOISE_ON_AVERAGE:g} "
            "training typically stalls. Useful privacy needs many more clients per round (see "
            "`dpemb account --extrapolate-to` for the same noise on the average at a larger population)"
        )
    about_delta = delta_warning(spec.resolved_delta, spec.population, spec.unit)
    if about_delta:
        out.append(about_delta)
    if epsilon is not None and not math.isnan(epsilon) and epsilon > WEAK_EPSILON:
        out.append(f"weak guarantee: epsilon {epsilon:.3g} > {WEAK_EPSILON:g} offers little protection")
    return out

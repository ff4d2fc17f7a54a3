"""Small argument checks shared by the privacy modules (clear ValueErrors)."""

from __future__ import annotations

import math
import numbers


def positive_finite(name: str, value: object) -> float:
    """``value`` as a float if it is a real number, finite and > 0; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return v


def positive_int(name: str, value: object) -> int:
    """``value`` as an int if it is an integer >= 1; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def check_noise_multiplier(noise_multiplier: float, allow_nonprivate: bool) -> float:
    """Validate z: > 0 and finite, or exactly 0 when a non-private run is explicitly allowed.
    The one validator of z: ``PrivacySpec`` and every noise mechanism call it."""
    if isinstance(noise_multiplier, bool) or not isinstance(noise_multiplier, numbers.Real):
        raise ValueError(f"noise multiplier must be a number, got {noise_multiplier!r}")
    z = float(noise_multiplier)
    if math.isfinite(z) and z > 0:
        return z
    if allow_nonprivate and z == 0:
        return 0.0
    if allow_nonprivate:
        raise ValueError(
            f"noise multiplier {noise_multiplier!r} is invalid: a non-private run uses exactly 0"
        )
    raise ValueError(
        f"noise multiplier must be positive and finite, got {noise_multiplier!r}; a run without noise is "
        "not private and must be requested explicitly: `dpemb train --non-private` (and no "
        "--noise-multiplier / --target-epsilon) on the command line, PrivacySpec(nonprivate=True, "
        "noise_multiplier=0) or allow_nonprivate=True in the library"
    )

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


def check_clip_norm(clip_norm: object) -> float:
    """The clip norm C at the boundary (``PrivacySpec``): a finite number > 0, or a
    ValueError naming the fix. Validated here once; a ``ClipAndSum`` checks the clip
    norm it is built with, and its per-client clipping trusts that."""
    try:
        return positive_finite("clip norm", clip_norm)
    except ValueError as e:
        raise ValueError(
            f"{e}: the clip norm C bounds every virtual client's update (L2 norm) and sets the noise "
            "(z x sensitivity, a multiple of C); give a finite C > 0: --clip-norm C on the command line, "
            "PrivacySpec(clip_norm=C) in the library"
        ) from None


def positive_int(name: str, value: object) -> int:
    """``value`` as an int if it is an integer >= 1; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


#: The range of a private noise multiplier z (relative to the sensitivity). Outside it
#: dp_accounting's arithmetic breaks down (measured with dp-accounting 0.6.0, RDP, 10
#: rounds): below about 1e-150 the RDP of a round overflows, so epsilon comes out inf, as
#: a ZeroDivisionError, or (Poisson or fixed-size sampling) as a false epsilon of 0;
#: from about 3e8 fixed-size sampling fails ("math domain error"), and above 1e154 every
#: accountant overflows. The floor keeps a wide margin: at z = 1e-6 epsilon already
#: exceeds 1e11 for a single release (no guarantee at all). The ceiling is as high as
#: the accountant allows, because an extrapolation to a larger population multiplies z
#: by N'/N; at 1e8 the noise, z x sensitivity, swamps any update yet stays finite in float32.
MIN_NOISE_MULTIPLIER = 1e-6
MAX_NOISE_MULTIPLIER = 1e8


def check_noise_multiplier(noise_multiplier: float, allow_nonprivate: bool) -> float:
    """Validate z: in [``MIN_NOISE_MULTIPLIER``, ``MAX_NOISE_MULTIPLIER``], or exactly 0 when
    a non-private run is explicitly allowed. The one validator of z: ``PrivacySpec``, the
    transfer budget and every noise mechanism call it."""
    if isinstance(noise_multiplier, bool) or not isinstance(noise_multiplier, numbers.Real):
        raise ValueError(f"noise multiplier must be a number, got {noise_multiplier!r}")
    z = float(noise_multiplier)
    if math.isfinite(z) and z > 0:
        if z < MIN_NOISE_MULTIPLIER:
            raise ValueError(
                f"noise multiplier {noise_multiplier!r} gives no usable epsilon: below "
                f"{MIN_NOISE_MULTIPLIER:g} epsilon exceeds 1e11 even for one release, and near 1e-150 the "
                "accountant's arithmetic gives inf, a division by zero or a false 0. For a run without noise "
                "use --non-private (nonprivate=True in the library); otherwise give a noise multiplier >= "
                f"{MIN_NOISE_MULTIPLIER:g} (or a target epsilon to choose it)"
            )
        if z > MAX_NOISE_MULTIPLIER:
            raise ValueError(
                f"noise multiplier {noise_multiplier!r} exceeds {MAX_NOISE_MULTIPLIER:g}: the accountant's "
                "arithmetic fails beyond it (fixed-size sampling from about 3e8, every accountant near 1e154), and "
                "such noise "
                f"swamps any update; give a noise multiplier <= {MAX_NOISE_MULTIPLIER:g}"
            )
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

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

"""delta: its default and the rule that it must be well below 1/N.

With N privacy units a delta of 1/N or more is no guarantee at all (publishing one random unit's
data in full is (0, 1/N)-DP): docs/PRIVACY.md, "Conventions" (delta). So ``default_delta(N)`` is
1 / (10 N); ``check_delta(delta, N)`` refuses a given delta >= 1/N unless ``force=True``
(``--allow-large-delta``); ``delta_warning(delta, N)`` warns about any delta above the default.
N is treated as public. This is the one place the rule lives: ``PrivacySpec`` (training,
``dpemb account``) and the transfer budget both call it.
"""

from __future__ import annotations

import numbers

DEFAULT_DELTA_FACTOR = 10  # default delta = 1 / (DEFAULT_DELTA_FACTOR * N)
DEFAULT_DELTA_RULE = "1/(10 N)"


class LargeDeltaError(ValueError):
    """A delta of at least 1/N (N privacy units) given without forcing it."""


def _units(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or int(n) < 1:
        raise ValueError(f"the number of privacy units N must be a positive integer, got {n!r}")
    return int(n)


def default_delta(n: int) -> float:
    """1 / (10 N): the delta used when none is given."""
    return 1.0 / (DEFAULT_DELTA_FACTOR * _units(n))


def is_large_delta(delta: float, n: int) -> bool:
    """True when delta >= 1/N (1/N correctly rounded, so a delta typed as 1/N counts)."""
    return float(delta) >= 1.0 / _units(n)


def check_delta(delta: float, n: int, *, force: bool = False, unit: str = "user") -> float:
    """A valid delta: strictly in (0, 1) and below 1/N unless ``force``."""
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not (0 < float(delta) < 1):
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")
    n = _units(n)
    delta = float(delta)
    if is_large_delta(delta, n) and not force:
        raise LargeDeltaError(
            f"delta must be well below 1/N, the chance that the mechanism fails for some {unit} (with "
            f"delta >= 1/N, publishing one random {unit}'s data in full meets the guarantee); got "
            f"delta={delta:g} >= 1/{n} (N = {n:,} {unit}s). Leave delta unset for the default "
            f"{DEFAULT_DELTA_RULE} = {default_delta(n):.3g}, give a smaller one, or force it with "
            "--allow-large-delta (allow_large_delta=True)"
        )
    return delta


def resolve_delta(delta: float | None, n: int, *, force: bool = False, unit: str = "user") -> float:
    """``default_delta(n)`` when ``delta`` is None, else ``check_delta(delta, n, ...)``."""
    return default_delta(n) if delta is None else check_delta(delta, n, force=force, unit=unit)


def delta_warning(delta: float, n: int, unit: str = "user") -> str | None:
    """The warning for a delta above the default 1/(10 N) (None at or below it; the module
    docstring says why); the default keeps the chance N x delta at 1/10 or less."""
    n = _units(n)
    delta = float(delta)
    if is_large_delta(delta, n):
        return (f"large delta: delta = {delta:.3g} >= 1/N = 1/{n:,} ({unit}s), accepted because "
                "it was forced; the guarantee allows the mechanism to fail for some " + unit)
    if delta <= default_delta(n):
        return None
    return (f"delta close to 1/N: delta = {delta:.3g} is above the default {DEFAULT_DELTA_RULE} = "
            f"{default_delta(n):.3g} (N = {n:,} {unit}s), so a mechanism that publishes one random {unit}'s "
            f"data in full with probability N x delta = {n * delta:.2g} meets the guarantee; leave delta "
            "unset for the default or give a smaller one")

"""The check every comparing benchmark makes before it reports a time ratio: both sides
computed the same quantity.

``same_quantity`` takes, for one comparison, the named parameters each side used
(e.g. delta, the noise multiplier, the number of examples) and the values each side
computed (e.g. epsilon, a Recall@FAR, a model's deltas). Parameters must be equal
exactly; values must agree within ``atol + rtol * |baseline|`` (for arrays: norms,
``|ours - baseline| <= atol + rtol * |baseline|``). A mismatch, or a value that is not
finite, stops the benchmark: ``SystemExit`` with a one-line message naming the
comparison, the parameter or value and both sides' figures (exit status 1), so that no
ratio between two different computations is ever printed.

Benchmarks import it as ``from _compare import same_quantity`` (``bench/`` is the
script's directory); tests as ``bench._compare``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np


def _norm(x: Any) -> float:
    return float(np.linalg.norm(np.asarray(x, dtype=np.float64).ravel()))


def same_quantity(
    what: str,
    *,
    params: Mapping[str, tuple[Any, Any]] | None = None,
    values: Mapping[str, tuple[Any, Any]] | None = None,
    rtol: float = 0.0,
    atol: float = 0.0,
    sides: tuple[str, str] = ("dpemb", "baseline"),
) -> str:
    """Check that both sides of ``what`` computed the same thing; return a one-line summary.

    ``params``: name -> (ours, baseline), compared with ``==``. ``values``: name ->
    (ours, baseline), numbers or arrays of one shape, equal within
    ``atol + rtol * |baseline|``. Raises ``SystemExit`` (status 1) naming the first
    mismatch."""
    if rtol < 0 or atol < 0 or not (math.isfinite(rtol) and math.isfinite(atol)):
        raise ValueError(f"tolerances must be finite and >= 0, got rtol={rtol!r}, atol={atol!r}")
    a, b = sides
    parts = []
    for name, (ours, base) in (params or {}).items():
        if not (ours == base):
            raise SystemExit(f"{what}: not the same computation: {a} used {name} = {ours!r}, {b} used "
                             f"{name} = {base!r}; no ratio reported")
        parts.append(f"{name} {ours!r} on both sides")
    for name, (ours, base) in (values or {}).items():
        x, y = np.asarray(ours, dtype=np.float64), np.asarray(base, dtype=np.float64)
        if x.shape != y.shape:
            raise SystemExit(f"{what}: not the same computation: {name} has shape {x.shape} in {a}, "
                             f"{y.shape} in {b}; no ratio reported")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise SystemExit(f"{what}: {name} is not finite ({a} {ours!r}, {b} {base!r}); no ratio reported")
        diff, bound = _norm(x - y), atol + rtol * _norm(y)
        shown = f"{float(x):.6g} / {float(y):.6g}" if x.ndim == 0 else f"|diff| {diff:.3g}, |{b}| {_norm(y):.3g}"
        if not diff <= bound:
            raise SystemExit(f"{what}: not the same value: {name} {a} / {b} = {shown}, |difference| {diff:.3g} > "
                             f"tolerance {bound:.3g} (atol {atol:g} + rtol {rtol:g} x |{b}|); no ratio reported")
        parts.append(f"{name} {shown} (|difference| {diff:.2g} <= {bound:.2g})")
    return f"{what}: same quantity: " + "; ".join(parts)

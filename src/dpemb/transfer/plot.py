"""Privacy-utility plot: top-1 against epsilon, one line per method."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from dpemb.atomic import atomic_write


def plot_sweep(
    rows: Sequence[Mapping[str, Any]],
    path: str | os.PathLike,
    *,
    baseline: float | None = None,
    title: str = "DP classification from features",
) -> Path:
    """Write a PNG of top-1 vs epsilon (log axis). ``rows``: dicts with ``method``,
    ``epsilon`` (or ``target_epsilon``), ``top1`` and optionally ``top1_std``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_method: dict[str, list[tuple[float, float, float]]] = {}
    for r in rows:
        eps = r.get("target_epsilon") or r.get("epsilon")
        if eps is None or r.get("top1") is None:
            continue
        by_method.setdefault(str(r["method"]), []).append((float(eps), float(r["top1"]), float(r.get("top1_std") or 0.0)))
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for method, pts in by_method.items():
        pts.sort()
        xs, ys, es = zip(*pts)
        ax.errorbar(xs, ys, yerr=es if any(es) else None, marker="o", capsize=3, label=method)
    if baseline is not None:
        ax.axhline(baseline, color="black", linestyle="--", linewidth=1,
                   label=f"non-private logistic regression ({baseline:.3f})")
    ax.set(xscale="log", xlabel="epsilon", ylabel="top-1 accuracy (held-out split)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        return atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    finally:
        plt.close(fig)

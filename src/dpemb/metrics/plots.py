"""ROC curves to PNG (matplotlib, Agg canvas: no display and no global pyplot state)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dpemb.atomic import atomic_write
from dpemb.metrics.verification import DEFAULT_FARS, VerificationResult

__all__ = ["plot_roc"]


def plot_roc(
    results: Mapping[str, VerificationResult],
    path: str | os.PathLike,
    *,
    title: str | None = None,
) -> Path:
    """Plot one ROC curve per named result (TAR against FAR on a log axis) to ``path``.

    Each requested FAR gets a dotted vertical line and each curve a marker at its Recall@FAR;
    FARs below ``1 / #negative pairs`` are shaded grey with hollow markers (docs/EVALUATION.md,
    "Which FARs the data supports"). The legend gives the AUC and the Recall@FAR at every FAR
    when there are at most three, else at those of ``DEFAULT_FARS`` present; a sampled result
    is marked "(sampled)". The PNG is written to a temporary file and moved into place, so
    readers never see a partial file. Returns the path.
    """
    if not results:
        raise ValueError("results is empty: give at least one named VerificationResult")
    for name, res in results.items():
        if not isinstance(res, VerificationResult):
            raise TypeError(f"results[{name!r}] is {type(res).__name__}, not a VerificationResult")
    path = Path(path)
    fig = Figure(figsize=(6.4, 4.8), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    lowest = min(0.5 / max(r.num_negative_pairs, 1) for r in results.values())
    fars = sorted({f for r in results.values() for f in r.recall_at_far})
    legend_fars = fars if len(fars) <= 3 else [f for f in fars if f in DEFAULT_FARS] or fars[-3:]
    left = min([lowest] + [0.5 * f for f in fars])
    resolvable = 1.0 / max(r.num_negative_pairs for r in results.values() if r.num_negative_pairs) \
        if any(r.num_negative_pairs for r in results.values()) else 1.0
    if resolvable > left:
        ax.axvspan(left, resolvable, color="0.92", zorder=0, label="FAR < 1/#negative pairs")
    for f in fars:
        ax.axvline(f, color="0.75", linestyle=":", linewidth=1)
    for name, res in results.items():
        # the log axis cannot show FAR 0: points with no false accept sit at the floor
        fpr = np.maximum(res.roc_fpr, lowest)
        tpr = res.roc_tpr
        at = ", ".join(f"{res.recall_at_far[f]:.3f}@{f:g}" for f in sorted(legend_fars) if f in res.recall_at_far)
        tag = "" if res.exact else " (sampled)"
        (line,) = ax.step(
            fpr, tpr, where="post", label=f"{name}{tag}: AUC {res.auc:.4f}" + (f"; TAR {at}" if at else "")
        )
        xs = sorted(f for f in res.recall_at_far if res.supported(f))
        ax.plot(xs, [res.recall_at_far[f] for f in xs], "o", color=line.get_color(), ms=4)
        xs = sorted(f for f in res.recall_at_far if not res.supported(f))  # at zero false accepts
        ax.plot(xs, [res.recall_at_far[f] for f in xs], "o", color=line.get_color(), ms=4, mfc="none")
    ax.set_xscale("log")
    ax.set_xlim(left, 1.0)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("false accept rate (FAR)")
    ax.set_ylabel("true accept rate (TAR, recall)")
    ax.set_title(title if title is not None else "Verification ROC")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()

    atomic_write(path, lambda p: fig.savefig(p, format="png"))  # a plot is released: umask mode
    return path

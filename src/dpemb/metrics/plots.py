"""ROC curves to PNG (matplotlib, Agg canvas: no display and no global pyplot state)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Mapping

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dpemb.metrics.verification import VerificationResult

__all__ = ["plot_roc"]


def plot_roc(
    results: Mapping[str, VerificationResult],
    path: str | os.PathLike,
    *,
    title: str | None = None,
) -> Path:
    """Plot one ROC curve per named result (TAR against FAR on a log axis) to ``path``.

    Each requested FAR gets a dotted vertical line and each curve a marker at its
    Recall@FAR. The legend gives the AUC and the Recall@FAR values; a sampled result is
    marked "(sampled)". The PNG is written to a temporary file in the target folder and
    moved into place, so readers never see a partial file. Returns the path.
    """
    if not results:
        raise ValueError("results is empty: give at least one named VerificationResult")
    for name, res in results.items():
        if not isinstance(res, VerificationResult):
            raise TypeError(f"results[{name!r}] is {type(res).__name__}, not a VerificationResult")
        if res.roc_fpr.size == 0:
            raise ValueError(
                f"results[{name!r}] holds no ROC curve (it was loaded from a dict saved "
                "without include_roc=True)"
            )
    path = Path(path)
    fig = Figure(figsize=(6.4, 4.8), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    lowest = min(0.5 / max(r.num_negative_pairs, 1) for r in results.values())
    fars = sorted({f for r in results.values() for f in r.recall_at_far})
    for f in fars:
        ax.axvline(f, color="0.75", linestyle=":", linewidth=1)
    for name, res in results.items():
        # the log axis cannot show FAR 0: points with no false accept sit at the floor
        fpr = np.maximum(res.roc_fpr, lowest)
        tpr = res.roc_tpr
        at = ", ".join(f"{v:.3f}@{f:g}" for f, v in sorted(res.recall_at_far.items()))
        tag = "" if res.exact else " (sampled)"
        (line,) = ax.step(
            fpr, tpr, where="post", label=f"{name}{tag}: AUC {res.auc:.4f}; TAR {at}"
        )
        xs = sorted(res.recall_at_far)
        ax.plot(xs, [res.recall_at_far[f] for f in xs], "o", color=line.get_color(), ms=4)
    ax.set_xscale("log")
    ax.set_xlim(lowest, 1.0)
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("false accept rate (FAR)")
    ax.set_ylabel("true accept rate (TAR, recall)")
    ax.set_title(title if title is not None else "Verification ROC")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format="png")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


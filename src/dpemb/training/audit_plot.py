"""The audit plot: empirical against reported epsilon (matplotlib, Agg backend, PNG).

One point per audit record (``AuditPoint.from_record``: white-box, black-box or example
level) at x = the reported epsilon: the estimate and the two lower bounds, beside y = x
(what each marker shows and how to read it: docs/AUDIT.md, "audit_plot").
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from dpemb.atomic import atomic_write


@dataclass(frozen=True)
class AuditPoint:
    """One audit's numbers for the plot."""

    label: str
    reported: float
    estimate: float | None = None
    estimate_ci: tuple[float, float] | None = None
    lower_bound: float | None = None
    lower_bound_fdp: float | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any], label: str) -> "AuditPoint":
        ci = record.get("epsilon_estimate_ci")
        return cls(label=label, reported=float(record["epsilon_reported"]), estimate=record.get("epsilon_estimate"),
                   estimate_ci=tuple(ci) if ci else None, lower_bound=record.get("epsilon_lower_bound"),
                   lower_bound_fdp=record.get("epsilon_lower_bound_fdp"))


def plot_audit(points: Sequence[AuditPoint], path: str | Path, *, title: str | None = None,
               confidence: float = 0.95) -> Path:
    """Write the plot of ``points`` (module docstring) to ``path`` (PNG, atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    if not points:
        raise ValueError("nothing to plot: no audit points")
    fig, ax = plt.subplots(figsize=(7.5, 5.6))
    xs = [p.reported for p in points]
    ys = [v for p in points for v in (p.estimate, p.lower_bound, p.lower_bound_fdp, *(p.estimate_ci or ()))
          if v is not None]
    top = max(xs) * 1.6
    ymax = max(top, max(ys, default=1.0)) * 1.5
    line = np.linspace(0, max(top, ymax), 400)
    ax.fill_between(line, line, ymax * 10, color="tab:red", alpha=0.06, lw=0)
    ax.plot(line, line, color="black", lw=1, label="y = x (empirical = reported)")
    groups = Counter(round(p.reported, 2) for p in points)
    seen: Counter[float] = Counter()
    colors = plt.get_cmap("tab10")
    pct = f"{100 * confidence:g}%"
    for i, p in enumerate(points):
        key = round(p.reported, 2)
        k = seen[key]
        seen[key] += 1
        x = p.reported * (1 + 0.05 * (k - (groups[key] - 1) / 2))  # spread points sharing a reported epsilon
        c = colors(i % 10)
        ax.plot([x], [p.reported], "_", color="black", ms=16, mew=2)  # the point's own reported epsilon
        if p.estimate is not None:
            err = None
            if p.estimate_ci is not None:
                err = [[max(p.estimate - p.estimate_ci[0], 0)], [max(p.estimate_ci[1] - p.estimate, 0)]]
            ax.errorbar([x], [p.estimate], yerr=err, fmt="o", color=c, ms=6, capsize=3, label=p.label)
        if p.lower_bound is not None:
            ax.plot([x], [p.lower_bound], "v", color=c, ms=8, mfc="none", mew=1.5)
        if p.lower_bound_fdp is not None:
            ax.plot([x], [p.lower_bound_fdp], "^", color=c, ms=8, mew=1.5)
    ax.plot([], [], "_", color="black", ms=12, mew=2, label="the point's reported epsilon")
    ax.plot([], [], "ko", label="one-shot estimate [bootstrap CI] (not a bound)")
    ax.plot([], [], "kv", mfc="none", label=f"(eps, delta) lower bound, {pct}")
    ax.plot([], [], "k^", label=f"f-DP (Gaussian) lower bound, {pct}")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xlim(0, top)
    ax.set_ylim(0, ymax)
    ticks = [t for t in (0, 0.5, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500) if t <= max(top, ymax)]
    for axis, lim in ((ax.xaxis, top), (ax.yaxis, ymax)):
        shown = [t for t in ticks if t <= lim]
        axis.set_ticks(shown)
        axis.set_ticklabels([f"{t:g}" for t in shown])
        axis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("reported epsilon (accountant)")
    ax.set_ylabel("empirical epsilon")
    ax.set_title(title or "Audit: empirical vs reported epsilon (shaded: a lower bound here is a bug)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    out = atomic_write(path, lambda q: fig.savefig(q, dpi=110, format="png"))
    plt.close(fig)
    return out

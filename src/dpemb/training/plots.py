"""Training curves to PNG (matplotlib, Agg backend, written atomically)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from dpemb.atomic import atomic_write


def plot_training(records: Sequence[dict[str, Any]], path: str | Path, *, x: str = "step") -> Path | None:
    """Released quantities over the run: evaluation metrics (on users never trained on)
    at every evaluation, and epsilon at every round (private runs) or the training loss
    (non-private runs, which release no guarantee). ``records`` are metrics.jsonl's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in records if "recall_at_far_0.001" in r]
    if not records:
        return None
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    xs = [r[x] for r in recs]
    for key, label in [
        ("recall_at_far_0.001", "Recall@FAR=1e-3 (exact, all pairs)"),
        ("recall_at_far_0.001_in_batch_approx", "Recall@FAR=1e-3 (in-batch approx.)"),
        ("recall_at_far_0.01", "Recall@FAR=1e-2"),
    ]:
        ax[0].plot(xs, [r.get(key) for r in recs], marker="o", ms=3, label=label)
    ax[0].set_xlabel(x)
    ax[0].set_ylabel("recall on held-out users and identities")
    ax[0].legend(fontsize=8)
    ax[0].grid(alpha=0.3)
    curves = {  # a log axis: epsilon 0 (round 0) is left out
        key: [(r[x], r[key]) for r in records if r.get(key) is not None and r[key] > 0]
        for key in ("epsilon_rdp", "epsilon_pld")
    }
    if any(curves.values()):
        every = max(len(pts) for pts in curves.values())
        for key, pts in curves.items():
            if pts:  # PLD may be computed at evaluations only: drawn as its points, not a spike
                sparse = len(pts) < every
                ax[1].plot(*zip(*pts), marker="o" if sparse else None, ms=4,
                           linestyle=":" if sparse else "-",
                           label=key.removeprefix("epsilon_").upper() + (" (at evaluations)" if sparse else ""))
        ax[1].set_ylabel("epsilon spent (user level)")
        ax[1].set_yscale("log")
        ax[1].legend(fontsize=8)
    else:
        loss = [(r[x], r["train_loss"]) for r in records if r.get("train_loss") is not None]
        if loss:
            ax[1].plot(*zip(*loss), marker="o", ms=3)
        ax[1].set_ylabel("train loss (not private)")
    ax[1].set_xlabel(x)
    ax[1].grid(alpha=0.3)
    fig.tight_layout()
    out = atomic_write(path, lambda p: fig.savefig(p, dpi=110, format="png"))
    plt.close(fig)
    return out

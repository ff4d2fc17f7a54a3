"""The public export of an experiment's run records, committed beside its results page.

A run record in the work folder (``runs/...``, never committed) also holds training
diagnostics that are un-noised statistics of the private users (training loss, pre-clip
update norms). The export keeps only what a page prints and the guarantee allows: the
job, its test (or validation) score, times and the privacy numbers. Pages are written
from the export alone, so a fresh clone rewrites a page with ``--report-only`` and a
later session's partial work folder adds runs to it without losing the earlier ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# the job, the score, times, and the privacy numbers (the noise multiplier and epsilons, and
# adaptive clipping's final clip norm, which follows from noised counts only)
PUBLIC_FIELDS = frozenset({
    "job", "final", "initial", "seconds", "seconds_this_invocation", "seconds_earlier_invocations",
    "started_at", "finished_at", "images_per_second", "z", "noise_on_average", "eps_sim", "delta_sim",
    "final_clip_norm", "perf"})
PUBLIC_PREFIXES = ("eps_", "z_", "M_")  # extrapolated epsilon, z' and M' per population


def public_record(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with the public fields only (e.g. ``final_loss``, ``preclip_norm`` dropped)."""
    return {k: v for k, v in rec.items() if k in PUBLIC_FIELDS or k.startswith(PUBLIC_PREFIXES)}


def merge(earlier: dict[str, Any], runs: dict[str, Any], timing: dict[str, Any], context: dict[str, Any],
          about: str, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The export: ``earlier``'s runs updated with ``runs`` (public fields; a run in both
    comes from ``runs``), the invocations of both (``timing["invocations"]``, one per
    start time), ``context`` (a None value keeps the earlier one) and ``base``: runs of
    another experiment the page reads (public fields, merged the same way)."""
    def runs_of(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        return dict(sorted({**old, **{k: public_record(v) for k, v in new.items()}}.items()))

    seen = {t.get("started") for t in timing.get("invocations", [])}
    inv = [t for t in earlier.get("timing", {}).get("invocations", []) if t.get("started") not in seen]
    old_ctx = earlier.get("context", {})
    return {"about": about, "runs": runs_of(earlier.get("runs", {}), runs),
            "base": runs_of(earlier.get("base", {}), base or {}),
            "timing": {**earlier.get("timing", {}), **timing,
                       "invocations": sorted(inv + timing.get("invocations", []), key=lambda t: t.get("started") or 0)},
            "context": {**old_ctx, **{k: v if v is not None else old_ctx.get(k) for k, v in context.items()}}}


def load(path: Path) -> dict[str, Any]:
    """The export at ``path`` ({} if there is none)."""
    return json.loads(Path(path).read_text()) if Path(path).exists() else {}


def write(path: Path, export: dict[str, Any]) -> Path:
    """Write the export atomically (nothing if it holds no run: an empty work folder
    never replaces an export)."""
    from dpemb.atomic import atomic_write_json

    return atomic_write_json(path, export) if export["runs"] else Path(path)

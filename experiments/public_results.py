"""The public export of an experiment's run records, committed beside its results page.

A run record in the work folder (``runs/...``, never committed) also holds training
diagnostics that are un-noised statistics of the private users (training loss, pre-clip
update norms). The export keeps only what a page prints and docs/PRIVACY.md's table of
experiment exports allows ("Experiment exports"): the job, its test (or validation) score
and the privacy numbers; the runs' times only because the data is dpemb's built-in
synthetic glyph benchmark (the timing rule); and a ``release`` statement saying that the
runs are seeded research runs, not releases. Pages are written from the export alone, so
a fresh clone rewrites a page with ``--report-only`` and a later session's partial work
folder adds runs to it without losing the earlier ones. Every merge passes the earlier
export through the same filter, so a re-export cleans an export written under older rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: a run record's fields (docs/PRIVACY.md, "Experiment exports"): the job (the run's flags, as
#: config.json), the scores on held-out users, the noise multiplier and the epsilons, adaptive
#: clipping's final clip norm (it follows from noised counts only) and the performance settings
RECORD_FIELDS = frozenset({"job", "final", "initial", "z", "noise_on_average", "eps_sim", "delta_sim",
                           "final_clip_norm", "perf"})
RECORD_PREFIXES = ("eps_", "z_", "M_")  # extrapolated epsilon, z' and M' per population
#: a run's timing: a private diagnostic of a run on private data (it depends on how many examples
#: the sampled users hold); published only for benchmark runs on built-in synthetic data, labelled
TIMING_FIELDS = frozenset({"seconds", "seconds_this_invocation", "seconds_earlier_invocations",
                           "started_at", "finished_at"})
#: an export's top-level parts (``timing``: the invocations' wall time, benchmark data only)
EXPORT_FIELDS = frozenset({"about", "release", "runs", "base", "timing", "context"})

#: what every export of these experiments is: fedemb_glyphs.run_job seeds every federated run
#: (noise, sampling and client randomness; 1234 unless the job names its ``noise_seed``)
SEEDED = ("Not a release: seeded research runs, whose noise seeds are in committed code (experiments/) and in "
          "each job's noise_seed (1234 where a federated job names none). Anyone can regenerate such a run's "
          "noise and recover its clipped sums, so no epsilon in this file protects anyone; the epsilons say what "
          "an unseeded run of the same configuration (dpemb's default: the OS's secure source) would guarantee.")
SYNTHETIC_TIMING = ("The data is dpemb's built-in synthetic glyph benchmark (generated users, no person's data), "
                    "so the runs' times are published as benchmark timing (docs/PRIVACY.md, the timing rule); "
                    "for a run on private data they are private diagnostics.")
PRIVATE_TIMING = "The runs' times are private diagnostics of runs on private data (docs/PRIVACY.md) and left out."


def release(*, synthetic: bool) -> dict[str, Any]:
    """The export's ``release`` statement: seeded research runs, not a release; on built-in
    synthetic data (``synthetic``) or not, which decides whether times are published."""
    return {"release": False, "seeded": True, "data": "synthetic" if synthetic else "private",
            "statement": f"{SEEDED} {SYNTHETIC_TIMING if synthetic else PRIVATE_TIMING}"}


def public_record(rec: dict[str, Any], *, timing: bool) -> dict[str, Any]:
    """``rec`` with the fields the export table allows (e.g. ``final_loss``, ``preclip_norm``,
    ``images_per_second`` dropped); its times only with ``timing`` (benchmark data)."""
    keep = RECORD_FIELDS | TIMING_FIELDS if timing else RECORD_FIELDS
    return {k: v for k, v in rec.items() if k in keep or k.startswith(RECORD_PREFIXES)}


def merge(earlier: dict[str, Any], runs: dict[str, Any], timing: dict[str, Any], context: dict[str, Any],
          about: str, base: dict[str, Any] | None = None, *, synthetic: bool) -> dict[str, Any]:
    """The export: ``earlier``'s runs updated with ``runs`` (a run in both comes from
    ``runs``), the invocations of both (``timing["invocations"]``, one per start time),
    ``context`` (a None value keeps the earlier one) and ``base``: runs of another
    experiment the page reads (merged the same way). Every record, earlier ones included,
    keeps the public fields only; times (records' and invocations') only when ``synthetic``
    says the runs trained on built-in synthetic data, and the export then says so
    (``release``)."""
    def runs_of(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        return dict(sorted({k: public_record(v, timing=synthetic) for k, v in {**old, **new}.items()}.items()))

    seen = {t.get("started") for t in timing.get("invocations", [])}
    inv = [t for t in earlier.get("timing", {}).get("invocations", []) if t.get("started") not in seen]
    old_ctx = earlier.get("context", {})
    out = {"about": about, "release": release(synthetic=synthetic),
           "runs": runs_of(earlier.get("runs", {}), runs), "base": runs_of(earlier.get("base", {}), base or {}),
           "context": {**old_ctx, **{k: v if v is not None else old_ctx.get(k) for k, v in context.items()}}}
    if synthetic:
        out["timing"] = {**earlier.get("timing", {}), **timing,
                         "invocations": sorted(inv + timing.get("invocations", []), key=lambda t: t.get("started") or 0)}
    return out


def load(path: Path) -> dict[str, Any]:
    """The export at ``path`` ({} if there is none)."""
    return json.loads(Path(path).read_text()) if Path(path).exists() else {}


def write(path: Path, export: dict[str, Any]) -> Path:
    """Write the export atomically (nothing if it holds no run: an empty work folder
    never replaces an export)."""
    from dpemb.atomic import atomic_write_json

    return atomic_write_json(path, export) if export["runs"] else Path(path)

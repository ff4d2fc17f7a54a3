"""The face-verification report: Recall@FAR (TAR@FAR) at FAR 1e-6 ... 1e-1 in one table,
which FARs the number of negative pairs supports, and bootstrap confidence intervals
over identities (:mod:`dpemb.metrics.bootstrap`), all from one exact all-pairs pass.

Definitions (TAR at FAR, *supported* rows: at least ``1 / f`` negative pairs, which FARs get
intervals: ``ci_max_accepts``): docs/EVALUATION.md, "The definition" to "Confidence intervals".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch

import dpemb.metrics.bootstrap as _boot
from dpemb.metrics.verification import (
    VerificationResult,
    _exact,
    _max_false_accepts,
    _sampled,
    _validate_fars,
    prepare_inputs,
)

__all__ = ["TABLE_FARS", "DEFINITION", "FarRow", "FarTable", "far_table", "format_far_tables"]

TABLE_FARS: tuple[float, ...] = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
DEFINITION = (
    "TAR at FAR f = the largest true accept rate over score thresholds whose false accept "
    "rate is <= f, exact over all pairs (stricter than insightface's IJB-B/C report, which "
    "takes the TPR at the ROC point whose FPR is nearest f)"
)
BOOTSTRAP_SCHEME = (
    "percentile bootstrap over identities: identities resampled with replacement; each copy "
    "of an identity is a distinct identity (its positive pairs count once per copy, a "
    "negative pair between identities a and b counts w_a*w_b times, pairs between two "
    "copies of one identity count as neither)"
)
DEFAULT_CI_MAX_ACCEPTS = 5_000_000


@dataclass(frozen=True)
class FarRow:
    """One FAR of the table. ``ci`` is ``(low, high)`` or None (``ci_note`` says why,
    unless no bootstrap was asked for)."""

    far: float
    recall: float
    threshold: float
    supported: bool
    max_false_accepts: int
    ci: tuple[float, float] | None = None
    ci_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "far": self.far,
            "recall": self.recall,
            "threshold": self.threshold if math.isfinite(self.threshold) else None,
            "supported": self.supported,
            "max_false_accepts": self.max_false_accepts,
            "ci_low": None if self.ci is None else self.ci[0],
            "ci_high": None if self.ci is None else self.ci[1],
            "ci_note": self.ci_note,
        }


@dataclass(frozen=True)
class BootstrapInfo:
    resamples: int
    seed: int
    level: float
    num_identities: int
    dropped: int  # replicates with no positive or no negative pair
    tail_pairs: int  # negatives kept for the replicates
    scheme: str = BOOTSTRAP_SCHEME

    def to_dict(self) -> dict[str, Any]:
        return {
            "resamples": self.resamples, "seed": self.seed, "level": self.level,
            "num_identities": self.num_identities, "dropped_resamples": self.dropped,
            "tail_pairs": self.tail_pairs, "scheme": self.scheme, "interval": "percentile",
        }


@dataclass(frozen=True, eq=False)
class FarTable:
    """Rows by ascending FAR, the full verification result (AUC, ROC, pair counts) and
    the bootstrap's settings (None when none ran; ``bootstrap_note`` says why)."""

    rows: tuple[FarRow, ...]
    result: VerificationResult
    bootstrap: BootstrapInfo | None = None
    bootstrap_note: str | None = None
    definition: str = field(default=DEFINITION)

    def to_dict(self) -> dict[str, Any]:
        res = self.result
        return {
            "definition": self.definition,
            "rows": [r.to_dict() for r in self.rows],
            "num_positive_pairs": res.num_positive_pairs,
            "num_negative_pairs": res.num_negative_pairs,
            "exact": res.exact,
            "auc": res.auc,
            "bootstrap": None if self.bootstrap is None else self.bootstrap.to_dict(),
            "bootstrap_note": self.bootstrap_note,
        }


def far_table(
    embeddings: Any,
    labels: Any,
    *,
    fars: Sequence[float] = TABLE_FARS,
    bootstrap: int = 200,
    seed: int = 0,
    level: float = 0.95,
    ci_max_accepts: int = DEFAULT_CI_MAX_ACCEPTS,
    normalize: bool = True,
    block_size: int = 4096,
    max_pairs: int | None = None,
    device: torch.device | str | None = None,
    progress: bool | None = None,
) -> FarTable:
    """Recall@FAR at every FAR in ``fars`` (exact over all pairs, one pass), each
    marked supported or not, with ``level`` bootstrap intervals over identities
    (``bootstrap`` resamples, seeded by ``seed``; 0 disables).

    No RuntimeWarning for unsupported FARs: the rows say so. ``max_pairs`` samples
    pairs as :func:`~dpemb.metrics.verification.verification_metrics` does; there is
    no bootstrap then (it needs the exact pass).
    """
    far_list = sorted(_validate_fars(fars))
    if int(bootstrap) < 0:
        raise ValueError(f"bootstrap must be >= 0 resamples; got {bootstrap}")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie in (0, 1); got {level}")
    if int(block_size) < 1:
        raise ValueError(f"block_size must be a positive integer; got {block_size}")
    x, y = prepare_inputs(embeddings, labels, normalize=normalize, device=device)
    n = x.shape[0]
    total = n * (n - 1) // 2
    notes: dict[float, str] = {}
    info: BootstrapInfo | None = None
    note: str | None = None
    intervals: dict[float, tuple[float, float]] = {}
    with torch.no_grad():
        if max_pairs is not None and int(max_pairs) < 1:
            raise ValueError(f"max_pairs must be a positive integer or None; got {max_pairs}")
        if max_pairs is not None and int(max_pairs) < total:
            res = _sampled(x, y, far_list, int(max_pairs), 0, warn=False)
            if bootstrap:
                note = "not computed: the pairs were sampled (the bootstrap needs all pairs)"
        else:
            sizes = torch.unique(y, return_counts=True)[1].cpu().numpy().astype(np.int64)
            n_pos = int((sizes * (sizes - 1) // 2).sum())
            n_neg = total - n_pos
            ci_fars: list[float] = []
            if bootstrap and n_pos and n_neg:
                for f in far_list:
                    k = _max_false_accepts(f, n_neg)
                    if k == 0:  # unsupported
                        continue
                    if k > ci_max_accepts:
                        notes[f] = (f"not bootstrapped: the budget accepts {k} negative pairs, over "
                                    f"ci_max_accepts={ci_max_accepts}")
                    else:
                        ci_fars.append(f)
            if not ci_fars:
                res = _exact(x, y, far_list, int(block_size), progress, warn=False)
                if bootstrap and note is None and not notes:
                    note = "not computed: no supported FAR"
            else:
                max_k = max(_max_false_accepts(f, n_neg) for f in ci_fars)
                keep = _boot.tail_size(max_k, n_neg)
                while True:
                    collector = _boot.TailCollector(keep)
                    res = _exact(x, y, far_list, int(block_size), progress, warn=False, observer=collector)
                    boot = collector.finish()
                    br = boot.run(ci_fars, int(bootstrap), int(seed))
                    escaped = [f for f in ci_fars if br.escaped[f]]
                    if not escaped or collector.complete or keep >= min(n_neg, _boot._MAX_TAIL):
                        break
                    keep = min(n_neg, _boot._MAX_TAIL, 8 * keep)
                lo_q, hi_q = 50.0 * (1.0 - level), 50.0 * (1.0 + level)
                for f in ci_fars:
                    if br.escaped[f]:
                        notes[f] = (f"not bootstrapped: {br.escaped[f]} resamples need more than the "
                                    f"{_boot._MAX_TAIL} highest-scoring negative pairs")
                    elif br.values[f].size < 2:
                        notes[f] = "not bootstrapped: fewer than 2 resamples hold both pair classes"
                    else:
                        lo, hi = np.percentile(br.values[f], [lo_q, hi_q])
                        intervals[f] = (float(lo), float(hi))
                info = BootstrapInfo(resamples=int(bootstrap), seed=int(seed), level=float(level),
                                     num_identities=int(sizes.size), dropped=br.dropped,
                                     tail_pairs=int(boot.tail_scores.size))
    rows = tuple(
        FarRow(far=f, recall=res.recall_at_far[f], threshold=res.thresholds[f],
               supported=res.supported(f), max_false_accepts=_max_false_accepts(f, res.num_negative_pairs),
               ci=intervals.get(f), ci_note=notes.get(f))
        for f in far_list
    )
    return FarTable(rows=rows, result=res, bootstrap=info, bootstrap_note=note)


# ------------------------------------------------------------------------- formatting
def _far(f: float) -> str:
    """``1e-6`` for one significant digit, else ``%g``."""
    s = f"{f:.0e}"
    if float(s) != f:
        return f"{f:g}"
    m, e = s.split("e")
    return f"{m}e{int(e)}" if int(e) else m


def _ci(r: FarRow) -> str:
    if r.ci is not None:
        return f"[{r.ci[0]:.4f}, {r.ci[1]:.4f}]"
    return "-" if not r.supported or r.ci_note is None else "n/a"


def format_far_tables(tables: Mapping[str, FarTable]) -> list[str]:
    """The table as text lines: for one model FAR | TAR | CI | supported | threshold,
    for several one column per model (TAR and CI); then the footnotes."""
    if not tables:
        raise ValueError("tables is empty")
    names = list(tables)
    first = tables[names[0]]
    fars = [r.far for r in first.rows]
    for name, t in tables.items():
        if [r.far for r in t.rows] != fars:
            raise ValueError(f"table {name!r} has other FARs than {names[0]!r}")
    level = next((t.bootstrap.level for t in tables.values() if t.bootstrap), 0.95)
    ci_head = f"{100 * level:g}% CI"
    unsupported = any(not r.supported for t in tables.values() for r in t.rows)
    if len(tables) == 1:
        head = ["FAR", "TAR (recall)", ci_head, "supported", "threshold"]
        body = [
            [_far(r.far), f"{r.recall:.4f}", _ci(r), "yes" if r.supported else "no *",
             f"{r.threshold:.6f}" if math.isfinite(r.threshold) else "inf"]
            for r in first.rows
        ]
    else:
        head = ["FAR"] + names
        body = []
        for i, f in enumerate(fars):
            star = "*" if any(not t.rows[i].supported for t in tables.values()) else ""
            cells = [_far(f) + star]
            for t in tables.values():
                r = t.rows[i]
                ci = _ci(r)
                cells.append(f"{r.recall:.4f}" + ("" if ci == "-" else f" {ci}"))
            body.append(cells)
    widths = [max(len(row[c]) for row in [head] + body) for c in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head] + body]
    lines.append("TAR at FAR f: the largest TAR over thresholds with FAR <= f (stricter than insightface's "
                 "IJB-B/C report, which takes the TPR at the FPR nearest f).")
    if unsupported:
        n_neg = min(t.result.num_negative_pairs for t in tables.values())
        lines.append(f"* unsupported: {n_neg} negative pairs < 1/FAR, so TAR is measured at zero false accepts.")
    boots = [t.bootstrap for t in tables.values() if t.bootstrap is not None]
    if boots:
        b = boots[0]
        dropped = max(x.dropped for x in boots)
        lines.append(f"{ci_head}: percentile bootstrap over identities, {b.resamples} resamples of "
                     f"{b.num_identities} identities, seed {b.seed}"
                     + (f" ({dropped} resamples without a positive or a negative pair dropped)" if dropped else "")
                     + ".")
    ci_notes = {r.ci_note for t in tables.values() for r in t.rows if r.ci_note}
    lines += [f"n/a: {n}." for n in sorted(ci_notes)]
    boot_notes = {t.bootstrap_note for t in tables.values() if t.bootstrap_note}
    lines += [f"{ci_head}: {n}." for n in sorted(boot_notes)]
    return lines

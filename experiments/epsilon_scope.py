"""What a results page's epsilon covers, stated beside its headline (one text for every page).

A glyph experiment's headline epsilon is the paper's extrapolation: the runs train a few
thousand simulated users, and the epsilon is that of a run over N' users with N'/N times
more clients per round and as many times more noise (docs/PRIVACY.md, "Calibration and
extrapolation"). The trained models' own epsilon, at the simulated N, is thousands. And
the knobs were chosen by DP runs on the same training users, scored on the validation
split: no epsilon accounts for that choice. ``scope_note`` says both, with the numbers
of the page's own run records, and that the seeded runs are not releases.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

#: the words every note starts with (tests find the note beside each page's headline by them)
LEAD = "**What this ε covers.**"
#: the end of every note: the runs' status, and the timing rule's label for the page's run times
SEEDED = "The runs are seeded research runs, not releases (docs/PRIVACY.md)."
TIMING = ("Run times here are benchmark timing on {data}, published under docs/PRIVACY.md's timing rule (on "
          "private data they are private diagnostics).")
GLYPHS = "dpemb's built-in synthetic glyph data"


def _eps(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def dp_runs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The noised federated runs among ``records`` (a finite simulated epsilon)."""
    return [r for r in records if r.get("job", {}).get("kind") == "fed" and r.get("eps_sim") is not None
            and math.isfinite(r["eps_sim"])]


def scope_note(records: Iterable[dict[str, Any]], *, users: int | None, headline: str, source: str,
               earlier: str = "") -> str:
    """The note beside a headline: ``headline`` (e.g. "ε 2 at 100k users") is an extrapolation
    from ``users`` simulated users; the range of ``eps_sim`` (with its ``delta_sim``) of the
    page's noised runs among ``records``; how many of them, scored on the validation split,
    chose the knobs (``earlier``: the tuning before them, said after the count); ``source``
    names where the simulated epsilons are published."""
    runs = dp_runs(records)
    chose = [r for r in runs if r["job"].get("eval_split") == "validation"]
    n = "?" if users is None else f"{users:,}"
    if runs:
        lo, hi = min(r["eps_sim"] for r in runs), max(r["eps_sim"] for r in runs)
        deltas = sorted({r["delta_sim"] for r in runs if r.get("delta_sim") is not None})
        d = " or ".join(f"{x:.2g}" for x in deltas)
        own = (f"The trained models' own ε, at their {n} users, is {_eps(lo)}" + (f" to {_eps(hi)}" if hi > lo else "")
               + f" (RDP, δ {d}; {source}): that is the ε a deployment over {n} users would have.")
    else:
        own = "No noised run has finished yet, so the trained models' own ε is not known here."
    if chose:
        tuned = (f"{len(chose)} DP run{'s' * (len(chose) > 1)} on the same training users, scored on the validation "
                 f"split, chose the knobs ({len(runs)} DP runs in all{earlier})")
    else:
        tuned = f"no run here chose a knob ({len(runs)} DP runs in all{earlier})"
    return (f"{LEAD} {headline} is an extrapolation, the paper's convention (docs/PRIVACY.md, \"Calibration and "
            f"extrapolation\"): the runs train {n} simulated users, and ε is that of a run over N' users with N'/{n} "
            f"times more clients per round and as many times more noise. {own} Hyper-parameter selection is not "
            f"accounted: {tuned}, and no ε covers that choice. {SEEDED} {TIMING.format(data=GLYPHS)}")


def own_epsilon_note(*, units: str, tuning_runs: int, tuned_on: str, data: str) -> str:
    """The note beside the headline of runs whose ε is their own (no extrapolation, e.g. DP
    classification from features): ``units`` (e.g. "the 60,000 training examples") are what
    it protects; ``tuning_runs`` DP runs on ``tuned_on`` chose the hyperparameters, unaccounted;
    ``data``: the public or built-in data the run times were measured on."""
    return (f"{LEAD} Each ε is the run's own, over {units}: no extrapolation. Hyper-parameter selection is not "
            f"accounted: {tuning_runs:,} DP runs on {tuned_on} chose the hyperparameters, and no ε covers that "
            f"choice; each (method, ε) cell is its own run, and publishing several costs the sum of their ε. {SEEDED} "
            f"{TIMING.format(data=data)}")

"""The plan of ``fedemb_long.py`` (issue #11 goal 2 with both sides trained longer): its
settings, budgets and jobs, shared by the runner (``fedemb_long.py``), its page
(``fedemb_long_report.py``) and ``fedemb_moonshot.py``, which reuses its reference."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sc = importlib.import_module("fedemb_scale")

ROUNDS = 1200  # DP-FedEmb's budget: twice part 6's 600
REF = ("arcface", 64000)  # centralized reference: twice part 6's 32000 steps
CELLS = ((10_000_000, 0.5), (1_000_000, 1.0))  # issue #11 goal 2: (N', epsilon)
# The users-per-virtual-client lever, first at the tightest goal, 10M users at epsilon 0.5, where
# the noise costs nothing and what is left is federated optimisation: issue #11's table has
# K = 32 ahead of K = 16 at equal rounds; then at 1M users, epsilon 1, where the noise costs
# +0.010 and K = 32 doubles it. The validation split chooses K per cell (seed 0, VAL_ROUNDS
# rounds). At 10M the test runs of both K are reported whichever it chooses; at a further cell
# K_LEVER's test seeds run only if validation chooses it.
K_BASE, K_LEVER = 16, 32
VAL_ROUNDS = 600  # the validation comparison's rounds (half the test budget: it must be cheap)
# Is the reference converged? It rose +0.012 (seed 0) from 32000 to 64000 steps; one more
# doubling, seed 0 (one seed: the longest run here, about an hour on one core).
REF_CHECK_FACTOR = 2
RESULTS_FILE, TIMING_FILE = "long_results.json", "long_timing.json"
REAL_DOC = ROOT / "docs" / "RESULTS_LONG.md"
QUICK_DOC = Path("/tmp/dpemb_long_quick/RESULTS_LONG.md")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """fedemb_scale's settings (same data, knobs and seeds) for this experiment."""
    ns = argparse.Namespace(quick=args.quick, K=16, rounds=None, seeds=args.seeds, with_10k=False, part="long")
    return sc.settings(ns)


def rounds(st: dict[str, Any]) -> int:
    """DP-FedEmb's rounds (twice fedemb_scale's part 6 with --quick)."""
    return 2 * sc.long_rounds(st) if st["quick"] else ROUNDS


def ref_steps(st: dict[str, Any]) -> int:
    """The centralized reference's steps (the regime's budget with --quick)."""
    return st["reg"]["central_steps"] if st["quick"] else REF[1]


def cells(st: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    """The goal cells (the first alone with --quick)."""
    return CELLS[:1] if st["quick"] else CELLS


def ref_job(st: dict[str, Any], seed: int) -> dict[str, Any]:
    """Centralized ArcFace at the reference's budget."""
    return sc.central_job(st, seed, REF[0], ref_steps(st))


def ref_check_job(st: dict[str, Any]) -> dict[str, Any]:
    """Centralized ArcFace, seed 0, at REF_CHECK_FACTOR x the reference's steps: the next
    point of its curve (is it still rising?)."""
    return sc.central_job(st, 0, REF[0], REF_CHECK_FACTOR * ref_steps(st))


def fed_job(st: dict[str, Any], seed: int, cell: tuple[int, float] | None) -> dict[str, Any]:
    """DP-FedEmb with ArcFace at ``rounds(st)`` at ``cell`` (None: no noise)."""
    return sc.long_run(st, seed, cell, rounds=rounds(st))


def k_job(st: dict[str, Any], seed: int, K: int, split: str = "test",
          cell: tuple[int, float] | None = None) -> dict[str, Any]:
    """DP-FedEmb with ArcFace and K users per virtual client at ``cell`` (default the first,
    10M users at epsilon 0.5; epsilon calibrated for K): ``rounds(st)`` rounds on test,
    ``val_rounds(st)`` on validation. K = K_BASE on test is ``fed_job``'s run."""
    R = rounds(st) if split == "test" else val_rounds(st)
    return sc.long_run({**st, "K": K}, seed, cell or cells(st)[0], split=split, rounds=R)


def val_rounds(st: dict[str, Any]) -> int:
    """The rounds of the validation runs that choose K (half the test budget)."""
    return rounds(st) // 2 if st["quick"] else VAL_ROUNDS


def k_choice(lk: Any, st: dict[str, Any], cell: tuple[int, float] | None = None) -> int | None:
    """The K with the better VALIDATION score at ``cell`` (default the first; seed 0; the
    test split is never looked at), None until both validation runs are done; a tie keeps
    K_BASE."""
    val = {K: lk.get(k_job(st, 0, K, "validation", cell)["key"]) for K in (K_BASE, K_LEVER)}
    if any(v is None for v in val.values()):
        return None
    return K_LEVER if val[K_LEVER]["final"] > val[K_BASE]["final"] else K_BASE


def jobs(st: dict[str, Any], lk: Any = None) -> list[dict[str, Any]]:
    """Seed by seed the reference and the first cell (10M users, the tightest goal), then
    every seed of each further cell (a partial run gives whole cells); then the K lever at
    the first cell: its validation runs (K_BASE and K_LEVER), its test seeds; the no-noise
    run (seed 0: what the noise costs), the reference's convergence check; then the K lever
    at each further cell: its validation runs, and K_LEVER's test seeds once ``lk`` (the
    finished runs) shows that validation chose it (every run of the plan without ``lk``)."""
    first, *rest = cells(st)
    S = range(st["headline_seeds"])
    out = [j for s in S for j in (ref_job(st, s), fed_job(st, s, first))]
    out += [fed_job(st, s, c) for c in rest for s in S]
    out += [k_job(st, 0, K, "validation") for K in (K_BASE, K_LEVER)] + [k_job(st, s, K_LEVER) for s in S]
    out += [fed_job(st, 0, None), ref_check_job(st)]
    for c in rest:
        out += [k_job(st, 0, K, "validation", c) for K in (K_BASE, K_LEVER)]
        if lk is None or k_choice(lk, st, c) == K_LEVER:
            out += [k_job(st, s, K_LEVER, "test", c) for s in S]
    return out

#!/usr/bin/env python
"""Every DP-FedEmb results page by one command, stage after stage:

1. ``fedemb_glyphs.py``: DP-FedEmb vs the baselines, privacy-utility plots (RESULTS_FEDEMB.md)
2. ``fedemb_scale.py --with-10k``: the extrapolation premise, the headline table, the
   population figure, the levers, the 100k moonshot, ArcFace at 1M and 10M, 600 rounds
   against centralized ArcFace trained up to 64000 steps (RESULTS_SCALE.md)
3. ``fedemb_vs_fedavg.py``: K tuned on validation per algorithm, both regimes, and the
   authors' EMNIST configuration (RESULTS_VS.md)
4. ``harness.py long``: issue #11 goal 2 with both sides trained longer, DP-FedEmb at 1200
   rounds against centralized ArcFace at 64000 steps, 3 seeds each (RESULTS_LONG.md; its
   runs go to ``runs/studies``, its rows to ``docs/data/long.jsonl``, which hold no times)
5. ``harness.py moonshot``: issue #11 goal 3, levers at 100k users and epsilon 2 on the
   validation split, the chosen one on test (RESULTS_MOONSHOT.md; its rows go to
   ``docs/data/moonshot.jsonl``)

    .venv/bin/python experiments/all_results.py --dry-run   # what is cached, what is left
    .venv/bin/python experiments/all_results.py --jobs 2    # everything (resumable)

Every stage caches its finished runs (``runs/fedemb_glyphs/*.json``), so a stopped
command continues where it stopped and a finished stage costs seconds. Before starting,
the command prints the process-minutes the cached runs took: on 2 cores the whole set is
hours of work, not minutes (docs/RESULTS.md, "Cost"). ``--jobs``, ``--device``,
``--client-batch`` and ``--threads`` are passed to the stages that take them; they
change no result beyond float rounding. Wall time per stage goes to
``runs/fedemb_glyphs/all_timing.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
WORK = ROOT / "runs" / "fedemb_glyphs"

#: (stage, script, its own arguments, its results cache in WORK, takes the performance flags)
STAGES: tuple[tuple[str, str, tuple[str, ...], str, bool], ...] = (
    ("glyphs", "fedemb_glyphs.py", ("--budget-minutes", "100000"), "results.json", False),
    ("scale", "fedemb_scale.py", ("--with-10k",), "scale_results.json", True),
    ("vs", "fedemb_vs_fedavg.py", ("--part", "all"), "vs_results.json", True),
    ("long", "harness.py", ("long",), "long_results.json", False),
    ("moonshot", "harness.py", ("moonshot",), "moonshot_results.json", False),
)


def stage_command(script: str, own: tuple[str, ...], perf: bool, args: argparse.Namespace) -> list[str]:
    """The command line of one stage."""
    cmd = [sys.executable, str(ROOT / "experiments" / script), *own, "--jobs", str(args.jobs)]
    if perf:
        cmd += ["--device", args.device, "--client-batch", str(args.client_batch), "--threads", str(args.threads),
                "--resume-runs"]
    return cmd


def cached(results_file: str) -> tuple[int, float]:
    """(finished runs, their process-minutes) in one stage's results cache."""
    p = WORK / results_file
    if not p.exists():
        return 0, 0.0
    recs = json.loads(p.read_text())
    return len(recs), sum(r.get("seconds", 0.0) for r in recs.values()) / 60


def longest_minutes(results_file: str) -> float:
    """The longest single run in one stage's cache, in minutes (0 if none)."""
    p = WORK / results_file
    recs = json.loads(p.read_text()).values() if p.exists() else []
    return max((r.get("seconds", 0.0) for r in recs), default=0.0) / 60


def cost_section() -> str:
    """The docs/RESULTS.md section on what the cached results took to compute."""
    rows, total = [], 0.0
    for stage, script, own, results_file, _ in STAGES:
        n, minutes = cached(results_file)
        total += minutes
        shown = " ".join([script, *(a for a in own if a not in ("--budget-minutes", "100000"))])
        rows.append(f"| `{shown}` | {n} | {minutes:.0f} | {longest_minutes(results_file):.1f} |")
    return "\n".join([
        "## What the results cost",
        "",
        "`.venv/bin/python experiments/all_results.py` runs every stage above in order; each caches its "
        "finished runs, so it resumes where it stopped (`--dry-run` prints what is cached). Process-minutes "
        "of the cached runs, each on one process with one torch thread (2 processes on the 2-core "
        "machine, so the two shared the cores):",
        "",
        "| stage | runs | process-minutes | longest run, minutes |",
        "|---|---:|---:|---:|",
        *rows,
        f"| all | | {total:.0f} | |",
        "",
        f"On 2 cores that is at least {total / 2 / 60:.1f} hours of wall time: of these stages only "
        "`fedemb_glyphs.py` fits in an hour there. More processes (`--jobs`) on more cores divide it, down "
        "to the longest run. `experiments/fedemb_hour.py` (section below) draws DP-FedEmb's privacy-utility, "
        "population and premise figures with 3 seeds from nothing in under an hour on 2 cores.",
    ])


def main() -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="parallel training processes per stage")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (performance only)")
    ap.add_argument("--client-batch", type=int, default=1, help="virtual clients trained at once (vmap; GPUs)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per process (0: cores / jobs)")
    ap.add_argument("--dry-run", action="store_true", help="print the stages and their caches, run nothing")
    ap.add_argument("--cost-only", action="store_true",
                    help="only rewrite docs/RESULTS.md's cost section from the caches")
    args = ap.parse_args()
    rc = 0 if args.cost_only else run_stages(args)
    if not args.dry_run:
        from results_page import update_section

        update_section(ROOT / "docs", "cost", cost_section())
        print("wrote docs/RESULTS.md (section cost)")
    return rc


def run_stages(args: argparse.Namespace) -> int:
    """Each stage in order (a failed stage stops the rest); returns the first failure's exit code."""
    timing_path = WORK / "all_timing.json"
    timing: list[dict[str, Any]] = json.loads(timing_path.read_text()) if timing_path.exists() else []
    for stage, script, own, results_file, perf in STAGES:
        n, minutes = cached(results_file)
        cmd = stage_command(script, own, perf, args)
        print(f"[{stage}] cached: {n} runs, {minutes:.0f} process-minutes\n  $ {' '.join(cmd)}", flush=True)
        if args.dry_run:
            continue
        t0 = time.time()
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        timing.append({"stage": stage, "jobs": args.jobs, "device": args.device, "started": t0,
                       "wall_min": (time.time() - t0) / 60, "returncode": rc})
        WORK.mkdir(parents=True, exist_ok=True)
        from dpemb.atomic import atomic_write_text

        atomic_write_text(timing_path, json.dumps(timing, indent=1))
        print(f"[{stage}] {'done' if rc == 0 else f'FAILED (exit {rc})'} in {timing[-1]['wall_min']:.1f} min",
              flush=True)
        if rc != 0:
            return rc
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

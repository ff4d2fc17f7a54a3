#!/usr/bin/env python
"""DP-FedEmb at scale (issue #11): the extrapolation premise, the headline table and
the population figure, on the face-like glyph regime of ``fedemb_glyphs.py``.

    .venv/bin/python experiments/fedemb_scale.py                 # full: docs/RESULTS_SCALE.md
    .venv/bin/python experiments/fedemb_scale.py --quick         # smoke test (a few minutes)
    .venv/bin/python experiments/fedemb_scale.py --part premise  # one part only
    .venv/bin/python experiments/fedemb_scale.py --report-only   # rewrite the page from results

Reuses the data, the public pretraining run (``face/pretrain/w0.25``) and the
centralized-from-pretraining run of ``fedemb_glyphs.py`` in its work folder
(``runs/fedemb_glyphs``; ``results.json`` there is only read). This script's runs go to
``runs/fedemb_glyphs/runs/scale/...`` and its results to ``scale_results.json`` next
to it; a re-run reuses them, so an interrupted or budget-limited run resumes. The page is
written from its public export, ``docs/data/scale_results.json`` (``public_results``: the
records without private training diagnostics, this work folder's runs merged in), so a
fresh clone rewrites it with ``--report-only``. ``--quick`` builds its own small data in
``runs/fedemb_scale_quick`` and writes its page (and export) under /tmp.

Parts:
1. premise: the paper's extrapolation assumes the utility of a run is unchanged when
   clients per round M and the noise multiplier z grow together by k, because the
   noise on the averaged update stays the same. Here N is fixed, so the sampling rate
   M K / N grows with k too: what is tested is that the average of k times more clients
   with k times more noise trains as well. Runs at k = 1, 2, 4, 8 with M = 8k and
   z = z0 k (z0: the simulation z for epsilon 8 at N' = 100k, where noise costs utility),
   and without noise at the
   smallest and largest k.
2. headline: DP-FedEmb and DP-FedAvg with the noise calibrated for N' in {100k, 1M, 10M}
   and epsilon in {8, 2, 1, 0.5}, without noise, centralized training from the same
   public start (and its convergence curve, up to 64000 steps) and the public start alone.
3. levers: one change each at epsilon 2, 100k users, chosen on the validation split.
4. moonshot: the chosen lever (ArcFace) at every epsilon at 100k users.
5. large: ArcFace at 1M and 10M users (and 10k with --with-10k).
6. long: ArcFace at 600 rounds at the goals' cells, against the centralized reference
   trained longest with 3 seeds (ArcFace, 32000 steps).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the worker processes inherit it
fg = importlib.import_module("fedemb_glyphs")  # the experiment this one extends
pub = importlib.import_module("public_results")  # the page's numbers, committed beside it

REGIME = "face"
POPS = (100_000, 1_000_000, 10_000_000)
POP_10K = 10_000
EPSILONS = (8.0, 2.0, 1.0, 0.5)
FIG_EPS = (1.0, 2.0)
PREMISE_KS = (1, 2, 4, 8)
PREMISE_EPS, PREMISE_POP = 8.0, 100_000  # where noise costs utility (2.2e-3 on the average)
M0 = 8
# part 5 (issue #11 goal 2): the moonshot's lever at the large populations, where the
# softmax runs stop at their no-noise utility: (N', epsilon) cells, the goals' first
GOAL2_CELLS = ((1_000_000, 1.0), (10_000_000, 0.5), (1_000_000, 0.5))
GOAL2_TARGET = {1_000_000: 0.95, 10_000_000: 0.97}  # x centralized at these populations
# with --with-10k, part 5 also measures the lever at 10k users (goal 4's "best utility
# reachable" at the smallest population of the population figure)
ARC_10K_CELLS = ((POP_10K, 1.0), (POP_10K, 2.0))
# part 3: levers for the 100k moonshot, at one (epsilon, N') where noise costs utility. Each
# lever: (name, label, job fields, FederatedConfig knobs). The baseline is the headline run.
LEVER_EPS, LEVER_POP = 2.0, 100_000
LEVERS = (
    ("clip0.1", "clip norm 0.1", {"clip": 0.1}, {}),
    ("clip0.05", "clip norm 0.05", {"clip": 0.05}, {}),
    ("clip0.1-cosine", "clip norm 0.1, cosine server lr", {"clip": 0.1}, {"server_lr_schedule": "cosine"}),
    ("adaptive-q0.5", "adaptive clip, target quantile 0.5", {"adaptive_quantile": 0.5}, {}),
    ("adaptive-q0.1", "adaptive clip, target quantile 0.1", {"adaptive_quantile": 0.1}, {}),
    ("arcface", "ArcFace loss (s 30, m 0.5)", {}, {"loss": "arcface"}),
    ("cosface", "CosFace loss (s 30, m 0.35)", {}, {"loss": "cosface"}),
    ("local-head", "local head over the client's own identities", {}, {"local_head": "local"}),
    ("arcface-local-head", "ArcFace loss, local head over the client's own identities", {},
     {"loss": "arcface", "local_head": "local"}),
)
# DP-FedEmb's knobs (MEASURED.md "Users per virtual client decide DP-FedEmb's utility"
# and fedemb_glyphs' validation tuning: zero head, local batch 8, server lr 0.5)
KNOBS = {"local_batch_size": 8, "client_lr": 0.05, "server_lr": 0.5, "server_momentum": 0.9,
         "head_init": "zeros", "head_lr_scale": 1.0}
NOISE_SEED0, SEED_STRIDE = 1234, 1000  # seed s: noise/sampling/client randomness 1234 + 1000 s
# cost of a federated run on 1 thread: overhead + c x rounds x M x K (probe on the full data,
# K = 16, M = 8, 2 vs 20 rounds: 11.6 s and 19.9 s, load ~2 on 2 cores)
US_PER_USER_ROUND = 3.6e-3  # s per (user x round)
RUN_OVERHEAD_S = 11.0  # data loading and two evaluations on 2,000 test images
ALGOS = ("dp-fedemb", "dp-fedavg", "dp-ftrl-fedemb")
RESULTS_FILE, TIMING_FILE = "scale_results.json", "scale_timing.json"
EXPORT_ABOUT = ("Public numbers of docs/RESULTS_SCALE.md (experiments/fedemb_scale.py): run records without the "
                "private training diagnostics; `fedemb_scale.py --with-10k --report-only` rewrites the page from it.")
PARTS = ("premise", "headline", "levers", "moonshot", "large", "long")
REAL_DOC = ROOT / "docs" / "RESULTS_SCALE.md"
QUICK_DOC = Path("/tmp/dpemb_scale_quick/RESULTS_SCALE.md")


# ----------------------------------------------------------------------------- settings


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """Everything the plan depends on, from the command line (quick or full)."""
    q = args.quick
    reg = fg.regimes(q)[REGIME]
    return {
        "quick": q, "reg": reg, "K": args.K, "rounds": args.rounds or (6 if q else 150),
        "premise_seeds": args.seeds or (1 if q else 2), "headline_seeds": args.seeds or (1 if q else 3),
        "ks": (1, 2) if q else PREMISE_KS, "pops": (PREMISE_POP,) if q else POPS,
        "eps": (PREMISE_EPS,) if q else EPSILONS, "with_10k": args.with_10k,
        "lever_seeds": args.seeds or 1, "levers": LEVERS[:2] if q else LEVERS,
        "parts": PARTS if args.part == "all" else (args.part,),
    }


def pop_range(pops: Any) -> str:
    """The smallest to the largest of ``pops``, e.g. "10k to 10M" (one population alone)."""
    lo, hi = min(pops), max(pops)
    return _pop(lo) if lo == hi else f"{_pop(lo)} to {_pop(hi)}"


def _pop(n: int) -> str:
    """100000 -> '100k', 1000000 -> '1M'."""
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"


# ----------------------------------------------------------------------------- jobs


def fed_run(st: dict[str, Any], algo: str, seed: int, *, M: int = M0, eps: float | None = None,
            pop: int | None = None, z: float | None = None, tag: str = "",
            lever: tuple[str, str, dict[str, Any], dict[str, Any]] | None = None,
            split: str = "test", rounds: int | None = None) -> dict[str, Any]:
    """A federated job in fedemb_glyphs' job format (run by ``fg.run_job``).

    ``eps`` + ``pop``: z calibrated so that the run extrapolated to ``pop`` has epsilon
    ``eps``; ``z``: an explicit noise multiplier (``tag`` names it in the key); neither:
    no noise. ``split``: where the run is scored ("validation" for choices, which the key
    names). ``rounds``: other than the plan's (part 6; epsilon is calibrated for them).
    Identical configurations get identical keys (so they run once)."""
    rounds = rounds or st["rounds"]
    fed = {**fg.BASE_FED, **KNOBS, "algorithm": algo, "M": M, "K": st["K"],
           "max_examples_per_client": None}
    noise = "np" if eps is None and z is None else (tag if z is not None else f"e{eps:g}@{_pop(pop)}")
    if lever is not None:  # one of LEVERS: job fields (clip, adaptive clipping) and client/server knobs
        noise += f"/{lever[0]}"
        fed = {**fed, **lever[3]}
    key = f"scale/{algo}/K{st['K']}/M{M}/r{rounds}/{noise}/s{seed}" + ("" if split == "test" else f"/{split}")
    return fg.seeded_fed_job(key, REGIME, rounds, fed, KNOBS, eps, seed=seed, eval_split=split,
                             noise_seed=NOISE_SEED0 + SEED_STRIDE * seed, population=pop,
                             **({"z": z} if z is not None else {}), **(lever[2] if lever is not None else {}))


MOONSHOT_LEVER = next(lv for lv in LEVERS if lv[0] == "arcface")


def moonshot_jobs(st: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """The best lever of part 3 (ArcFace) at every epsilon at 100k users, and centralized
    training with the same loss (the fair reference)."""
    return [central_job(st, seed, "arcface")] + [
        fed_run(st, "dp-fedemb", seed, eps=e, pop=LEVER_POP, lever=MOONSHOT_LEVER) for e in st["eps"]]


def large_jobs(st: dict[str, Any]) -> list[dict[str, Any]]:
    """Part 5: DP-FedEmb with the moonshot's lever (ArcFace) at 1M and 10M users, every
    seed of a cell before the next cell."""
    return [fed_run(st, "dp-fedemb", s, eps=e, pop=n, lever=MOONSHOT_LEVER)
            for n, e in large_cells(st) for s in range(st["headline_seeds"])]


def large_cells(st: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    """(N', epsilon) of part 5: the goals' cells, then 10k users with --with-10k."""
    return (GOAL2_CELLS[:1] if st["quick"] else GOAL2_CELLS) + (ARC_10K_CELLS if st["with_10k"] else ())


def lever_jobs(st: dict[str, Any], seed: int, split: str = "test") -> list[dict[str, Any]]:
    """DP-FedEmb at (LEVER_EPS, LEVER_POP): the baseline (a headline run) and every lever,
    scored on ``split`` (the validation runs choose the moonshot's lever)."""
    return [fed_run(st, "dp-fedemb", seed, eps=LEVER_EPS, pop=LEVER_POP, split=split)] + [
        fed_run(st, "dp-fedemb", seed, eps=LEVER_EPS, pop=LEVER_POP, lever=lv, split=split) for lv in st["levers"]]


def central_job(st: dict[str, Any], seed: int, loss: str = "softmax", steps: int | None = None) -> dict[str, Any]:
    """Centralized non-private training from the public start; seed 0 is fedemb_glyphs' own
    ``face/central-pre`` job (reused), others differ in data order and head initialisation.
    ``loss``: the head's loss (the reference for a loss lever); ``steps``: a step budget other
    than the regime's (the cosine schedule ends at the budget: the convergence check)."""
    key = f"scale/central-pre/w{fg.WIDTH_MAIN:g}/s{seed}" if seed else f"{REGIME}/central-pre/w{fg.WIDTH_MAIN:g}"
    if loss != "softmax":
        key = f"scale/central-pre/w{fg.WIDTH_MAIN:g}/{loss}/s{seed}"
    default = st["reg"]["central_steps"]
    if steps is not None and steps != default:
        key = f"scale/central-pre/w{fg.WIDTH_MAIN:g}/{loss}/steps{steps}/s{seed}"
    job = {"key": key, "kind": "central", "regime": REGIME, "width": fg.WIDTH_MAIN,
           "steps": steps or default, "init": fg.pre_key(REGIME, fg.WIDTH_MAIN), "seed": seed}
    return job | ({"loss": loss} if loss != "softmax" else {})


# steps of batch 128 per loss (1000: the regime's budget); softmax is flat from 1000 steps on,
# ArcFace still rose at 8000 (0.899), 16000 (0.919) and 32000 (0.933)
CENTRAL_BUDGETS = {"softmax": (250, 500, 1000, 2000, 4000, 8000),
                   "arcface": (250, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000)}
# the centralized reference of parts 4-6 (issue #11: "trained to convergence"): every seed of
# the headline at this (loss, budget); the largest budget 3 seeds fit in on 2 cores (19 min a
# run), the curve above shows how far it is from flat
CONVERGED = ("arcface", 32000)


def central_budgets(st: dict[str, Any], loss: str) -> tuple[int, ...]:
    """The step budgets of the convergence curve for ``loss`` (the regime's alone with --quick)."""
    return (st["reg"]["central_steps"],) if st["quick"] else CENTRAL_BUDGETS[loss]


def central_curve_jobs(st: dict[str, Any]) -> list[dict[str, Any]]:
    """Centralized training, seed 0, softmax and ArcFace, at every step budget."""
    return [central_job(st, 0, loss, b) for loss in CENTRAL_BUDGETS for b in central_budgets(st, loss)]


def converged_jobs(st: dict[str, Any]) -> list[dict[str, Any]]:
    """The converged centralized reference at every headline seed (the regime's budget with --quick)."""
    steps = st["reg"]["central_steps"] if st["quick"] else CONVERGED[1]
    return [central_job(st, s, CONVERGED[0], steps) for s in range(st["headline_seeds"])]


# part 6: DP-FedEmb with ArcFace at LONG_ROUNDS rounds (4x the plan's 150; epsilon calibrated for
# them) at the goals' cells, scored on validation at the moonshot's cell to choose the budget
LONG_ROUNDS = 600
LONG_CELLS = ((10_000_000, 0.5), (1_000_000, 1.0), (LEVER_POP, LEVER_EPS))
LONG_CURVE = (150, 300)  # no-noise runs at fewer rounds (seed 0): DP-FedEmb's own budget curve
GOALS = {**GOAL2_TARGET, LEVER_POP: 0.95}  # x centralized per N' (issue #11 goals 2 and 3)


def long_rounds(st: dict[str, Any]) -> int:
    """Part 6's rounds (twice the plan's with --quick)."""
    return 2 * st["rounds"] if st["quick"] else LONG_ROUNDS


def long_cells(st: dict[str, Any]) -> tuple[tuple[int, float], ...]:
    """(N', epsilon) of part 6 (the first alone with --quick)."""
    return LONG_CELLS[:1] if st["quick"] else LONG_CELLS


def long_run(st: dict[str, Any], seed: int, cell: tuple[int, float] | None, split: str = "test",
             rounds: int | None = None) -> dict[str, Any]:
    """DP-FedEmb with ArcFace at part 6's rounds (or ``rounds``), at (N', epsilon) ``cell``
    (None: no noise)."""
    n, e = cell or (None, None)
    return fed_run(st, "dp-fedemb", seed, eps=e, pop=n, lever=MOONSHOT_LEVER, rounds=rounds or long_rounds(st),
                   split=split)


def long_curve(st: dict[str, Any]) -> tuple[int, ...]:
    """Rounds of the no-noise budget curve (seed 0), part 6's own last."""
    return tuple(r for r in ((st["rounds"],) if st["quick"] else LONG_CURVE) if r < long_rounds(st)) \
        + (long_rounds(st),)


def long_jobs(st: dict[str, Any]) -> list[dict[str, Any]]:
    """Part 6 and its centralized reference: seed 0's reference, no-noise run and goal cells,
    the other seeds' references (the longest runs, early), the no-noise runs at fewer rounds,
    the validation run at the moonshot's cell (which chooses the rounds), the other seeds'
    cells, their no-noise runs last."""
    conv, cells, seeds = converged_jobs(st), long_cells(st), range(1, st["headline_seeds"])
    jobs = [conv[0], long_run(st, 0, None)] + [long_run(st, 0, c) for c in cells] + conv[1:]
    jobs += [long_run(st, 0, None, rounds=r) for r in long_curve(st)[:-1]]
    jobs.append(long_run(st, 0, (LEVER_POP, LEVER_EPS), "validation"))
    jobs += [long_run(st, s, c) for s in seeds for c in cells]
    return jobs + [long_run(st, s, None) for s in seeds]


def z0_for(st: dict[str, Any], n_train: int) -> float:
    """The simulation z of DP-FedEmb (M = 8) for PREMISE_EPS extrapolated to PREMISE_POP users."""
    spec = fg.make_spec(n_train, {"algorithm": "dp-fedemb", "M": M0, "K": st["K"]}, st["rounds"])
    return fg.calibrate(spec, PREMISE_EPS, PREMISE_POP)


def premise_jobs(st: dict[str, Any], z0: float, seed: int) -> list[dict[str, Any]]:
    """Noisy runs at every k (M = 8k, z = z0 k), then no-noise runs at the smallest and largest k."""
    jobs = []
    for k in st["ks"]:
        if k == 1:  # the same configuration as the headline run at PREMISE_EPS, PREMISE_POP
            jobs.append(fed_run(st, "dp-fedemb", seed, eps=PREMISE_EPS, pop=PREMISE_POP))
        else:
            jobs.append(fed_run(st, "dp-fedemb", seed, M=M0 * k, z=z0 * k,
                                tag=f"e{PREMISE_EPS:g}@{_pop(PREMISE_POP)}x{k}"))
    for k in (st["ks"][0], st["ks"][-1]):
        jobs.append(fed_run(st, "dp-fedemb", seed, M=M0 * k))
    return jobs


def headline_jobs(st: dict[str, Any], algo: str, seed: int, pops: tuple[int, ...] | None = None,
                  eps: tuple[float, ...] | None = None, with_np: bool = True) -> list[dict[str, Any]]:
    """One algorithm at every (population, epsilon) and without noise."""
    jobs = [fed_run(st, algo, seed, eps=e, pop=n) for n in (pops or st["pops"]) for e in (eps or st["eps"])]
    return jobs + ([fed_run(st, algo, seed)] if with_np else [])


def plan(st: dict[str, Any], z0: float) -> dict[str, list[dict[str, Any]]]:
    """Jobs per part, each list in priority order (most important first)."""
    parts: dict[str, list[dict[str, Any]]] = {"premise": [], "headline": [], "levers": [], "moonshot": [],
                                              "large": large_jobs(st), "long": long_jobs(st)}
    for s in range(st["headline_seeds"]):
        parts["moonshot"] += moonshot_jobs(st, s)
    for s in range(st["lever_seeds"]):
        parts["levers"] += lever_jobs(st, s, "validation") + lever_jobs(st, s)
    for s in range(st["premise_seeds"]):
        parts["premise"] += premise_jobs(st, z0, s)
    for s in range(st["headline_seeds"]):
        for a in ALGOS:
            parts["headline"] += headline_jobs(st, a, s)
        parts["headline"].append(central_job(st, s))
    parts["headline"] += central_curve_jobs(st)
    if st["with_10k"]:
        for s in range(st["headline_seeds"]):
            for a in ALGOS:
                parts["headline"] += headline_jobs(st, a, s, (POP_10K,), FIG_EPS, with_np=False)
    return parts


def ordered(st: dict[str, Any], parts: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One queue, deduplicated: per seed the premise first, then the headline (DP-FedEmb,
    DP-FedAvg, centralized), so a partial run already fills whole table columns; the
    10k runs last."""
    def seed_of(j: dict[str, Any]) -> int:
        return j.get("seed", 0)

    queue = []
    for s in range(max(st["premise_seeds"], st["headline_seeds"])):
        for name in ("premise", "headline"):
            if name in st["parts"]:
                queue += [j for j in parts[name] if seed_of(j) == s and j.get("population") != POP_10K]
    if "headline" in st["parts"]:
        queue += [j for j in parts["headline"] if j.get("population") == POP_10K]
    if "levers" in st["parts"]:
        queue += parts["levers"]
    if "moonshot" in st["parts"]:
        queue += parts["moonshot"]
    for name in ("large", "long"):
        if name in st["parts"]:
            queue += parts[name]
    seen: set[str] = set()
    return [j for j in queue if not (j["key"] in seen or seen.add(j["key"]))]


# ----------------------------------------------------------------------------- runtime


def run_cost(job: dict[str, Any], c: float, ref: dict[str, float]) -> float:
    """Rough seconds for one job on one thread: user-rounds x local epochs x c for
    federated jobs, the reference run's time (scaled by steps) for centralized ones."""
    if job["kind"] == "fed":
        fed = job["fed"]
        return RUN_OVERHEAD_S + c * job["rounds"] * fed["M"] * fed["K"] * fed.get("local_epochs", 1)
    return ref.get(job["kind"], 50.0) * job["steps"] / ref.get(job["kind"] + "_steps", 1000)


def cost_model(done: dict[str, Any]) -> tuple[float, dict[str, float], str]:
    """Seconds per user-round (per local epoch) from this script's finished federated runs (the probe's 3.6 ms
    if none), reference times of centralized / pretraining runs, and where c came from."""
    per = [(v["seconds"] - RUN_OVERHEAD_S) / (j["rounds"] * j["fed"]["M"] * j["fed"]["K"]
                                            * j["fed"].get("local_epochs", 1))
           for k, v in done.items()
           if k.startswith("scale/") and (j := v["job"])["kind"] == "fed" and v.get("seconds")]
    ref: dict[str, float] = {}
    for v in done.values():
        j = v["job"]
        if j["kind"] in ("central", "pretrain") and v.get("seconds"):
            ref[j["kind"]], ref[j["kind"] + "_steps"] = v["seconds"], j["steps"]
    if per:
        return max(1e-4, float(np.median(per))), ref, f"{len(per)} finished runs"
    return US_PER_USER_ROUND, ref, "a probe run"


def estimate(todo: list[dict[str, Any]], done: dict[str, Any], nproc: int) -> str:
    """A printable runtime estimate: jobs, process-minutes, wall minutes on ``nproc``."""
    c, ref, src = cost_model(done)
    costs = sorted((run_cost(j, c, ref) for j in todo), reverse=True)
    lanes = [0.0] * max(1, nproc)
    for t in costs:  # longest first onto the least loaded process
        lanes[lanes.index(min(lanes))] += t
    return (f"{len(todo)} runs to do, about {sum(costs) / 60:.0f} process-minutes -> about "
            f"{max(lanes) / 60:.0f} min wall on {nproc} processes ({c * 1e3:.1f} ms per user-round "
            f"from {src}; more if the cores are shared)")


# ----------------------------------------------------------------------------- statistics


def stats(recs: list[dict[str, Any] | None]) -> tuple[float, float, int]:
    """(mean, sample std, n) of the finished runs' final Recall@FAR=1e-3 (nan if none)."""
    xs = [r["final"] for r in recs if r is not None]
    if not xs:
        return math.nan, math.nan, 0
    return float(np.mean(xs)), (float(np.std(xs, ddof=1)) if len(xs) > 1 else math.nan), len(xs)


def cell(m: float, s: float, n: int, planned: int) -> str:
    """'0.812 ± 0.004', with '[n=1]' when fewer seeds finished than planned."""
    if n == 0:
        return "n/a (not run)"
    txt = f"{m:.3f}" + (f" ± {s:.3f}" if n > 1 else "")
    return txt + (f" [n={n}]" if n < planned else "")


def gap(m: float, ref: float) -> str:
    """Percent difference to the centralized reference, e.g. '-3.9%'."""
    return "" if math.isnan(m) or math.isnan(ref) or ref == 0 else f" ({100 * (m / ref - 1):+.1f}%)"


class Lookup:
    """Finished runs: this script's results first, then fedemb_glyphs' (read only)."""

    def __init__(self, mine: dict[str, Any], base: dict[str, Any]):
        self.mine, self.base = mine, base

    def get(self, key: str) -> dict[str, Any] | None:
        return self.mine.get(key) or self.base.get(key)

    def seeds(self, make: Any, n: int) -> list[dict[str, Any] | None]:
        """The records of ``make(seed)`` for seeds 0..n-1 (None where not run)."""
        return [self.get(make(s)["key"]) for s in range(n)]


# ----------------------------------------------------------------------------- running


def load_json(p: Path) -> dict[str, Any]:
    """The JSON object in ``p``, or {} if the file does not exist."""
    return json.loads(p.read_text()) if p.exists() else {}


def work_dir(args: argparse.Namespace) -> Path:
    """The quick mode's own folder, else --work (fedemb_glyphs' folder by default)."""
    return ROOT / "runs" / "fedemb_scale_quick" if args.quick else Path(args.work)


def doc_path(args: argparse.Namespace, real: Path = REAL_DOC, quick: Path = QUICK_DOC) -> Path:
    """--doc, else the ``real`` page (full) or the ``quick`` /tmp page (--quick, which never
    writes the real one)."""
    p = Path(args.doc) if args.doc else (quick if args.quick else real)
    if args.quick and p.resolve() == real.resolve():
        sys.exit(f"--quick never writes {real}; pass another --doc")
    return p


def save_invocation(path: Path, timing: dict[str, Any], ran: dict[str, Any]) -> None:
    """Append one invocation's record to ``timing`` and write it (atomically) to ``path``."""
    from dpemb.atomic import atomic_write_json

    timing["invocations"].append(ran)
    atomic_write_json(path, timing)


def execute(args: argparse.Namespace, st: dict[str, Any], work: Path, results: dict[str, Any],
            base: dict[str, Any], jobs: Any = None, results_file: str = RESULTS_FILE,
            done_elsewhere: Any = ()) -> dict[str, Any]:
    """Data, pretraining, then the planned runs in priority order (``jobs(info)``: another
    experiment's queue, saved to its ``results_file``); returns the timing record.
    ``done_elsewhere``: keys of runs finished in an earlier checkout (the page's public
    export), which a fresh work folder does not run again."""
    t0 = time.time()
    deadline = t0 + 60 * args.budget_min if args.budget_min else math.inf
    info = fg.build_data(work, REGIME, st["reg"], args.font_dir)
    print(f"data: train {info['train']}, test {info['eval']} ({time.time() - t0:.0f} s)", flush=True)
    pre = fg.pre_key(REGIME, fg.WIDTH_MAIN)
    if pre not in base and pre not in results:  # this invocation's results may hold it already
        print("public pretraining", flush=True)
        fg.run_all([fg.pretrain_job(REGIME, st["reg"])], results, work, args.jobs, deadline, results_file,
                   perf_of(args))
    queue = jobs(info) if jobs else ordered(st, plan(st, z0_for(st, info["train"]["users"])))
    todo = pending(queue, results, base, done_elsewhere)
    print(f"plan: {len(queue)} runs ({len(queue) - len(todo)} finished already); "
          + estimate(todo, {**base, **results}, args.jobs), flush=True)
    fg.run_all(todo, results, work, args.jobs, deadline, results_file, perf_of(args))
    return {"wall_s": time.time() - t0, "started": t0, "finished_at": time.time(),
            "finished": time.strftime("%Y-%m-%d %H:%M"), "parts": list(st["parts"]),
            "runs_done": sum(1 for j in todo if j["key"] in results), "runs_planned": len(todo)}


def pending(queue: list[dict[str, Any]], *done: Any) -> list[dict[str, Any]]:
    """The jobs of ``queue`` (in order) whose key is in none of ``done`` (containers of keys)."""
    return [j for j in queue if not any(j["key"] in d for d in done)]


def add_run_flags(ap: argparse.ArgumentParser) -> None:
    """The flags every experiment built on fedemb_glyphs' runner takes."""
    ap.add_argument("--jobs", type=int, default=2, help="parallel training processes")
    ap.add_argument("--budget-min", type=float, help="start no run after this many minutes")
    ap.add_argument("--quick", action="store_true", help="tiny smoke-test version")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the page from the results")
    ap.add_argument("--font-dir", action="append", default=[], help="extra font files/directories")
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (performance only)")
    ap.add_argument("--client-batch", type=int, default=1,
                    help="virtual clients trained at once (vmap; for GPUs; performance only: results agree "
                         "to float rounding)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per process (0: cores / jobs)")
    ap.add_argument("--checkpoint-every", type=int, default=0, help="checkpoint every N rounds (0: on a timer)")
    ap.add_argument("--resume-runs", action="store_true",
                    help="a run whose folder holds a checkpoint (an interrupted attempt) continues from it")


def perf_of(args: argparse.Namespace) -> dict[str, Any]:
    """The performance-only run settings of ``add_run_flags`` (``fedemb_glyphs.run_job``)."""
    return {"device": args.device, "client_batch": args.client_batch, "checkpoint_every": args.checkpoint_every,
            "resume": args.resume_runs, "threads": args.threads}


def main() -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=(*PARTS, "all"), default="all")
    ap.add_argument("--work", default=str(ROOT / "runs" / "fedemb_glyphs"),
                    help="fedemb_glyphs' work folder (data, pretraining; ignored with --quick)")
    ap.add_argument("--doc", help=f"results page (default {REAL_DOC.relative_to(ROOT)}; --quick: {QUICK_DOC})")
    ap.add_argument("--K", type=int, default=16, help="users per virtual client")
    ap.add_argument("--rounds", type=int, help="rounds per run (default 150; --quick 6)")
    ap.add_argument("--seeds", type=int, help="seeds for every part (default: premise 2, headline 3; --quick 1)")
    ap.add_argument("--with-10k", action="store_true", help="add N' = 10k (eps 1 and 2) to the population figure")
    add_run_flags(ap)
    args = ap.parse_args()
    st, work, doc = settings(args), work_dir(args), doc_path(args)
    work.mkdir(parents=True, exist_ok=True)
    results = load_json(work / RESULTS_FILE)
    base = load_json(work / "results.json")  # fedemb_glyphs' runs, never written here
    timing = load_json(work / TIMING_FILE) or {"invocations": []}
    if not args.report_only:
        ran = execute(args, st, work, results, base)
        if ran["runs_planned"]:  # an invocation that found every run cached adds no row to the wall time
            save_invocation(work / TIMING_FILE, timing, ran)
    # the page comes from the public export beside it, with this work folder's runs merged in
    export = doc.parent / "data" / RESULTS_FILE
    reused_keys = (fg.pre_key(REGIME, fg.WIDTH_MAIN), central_job(st, 0)["key"])
    info = load_json(work / "data" / REGIME / "info.json") or None
    data = pub.merge(pub.load(export), results, timing, {"info": info}, EXPORT_ABOUT,
                     base={k: base[k] for k in reused_keys if k in base}, synthetic=True)  # the glyph benchmark
    if not data["runs"] or not data["context"].get("info"):
        sys.exit(f"no finished runs in {work} nor in {export}: run without --report-only first")
    pub.write(export, data)
    write_report(st, Lookup(data["runs"], data["base"]), data["context"]["info"], data["timing"], doc, work, args)
    print(f"wrote {doc} and {export}")
    return 0


# ----------------------------------------------------------------------------- report


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces the page."""
    flags = [f"--{k.replace('_', '-')} {v}" for k, v in (("K", args.K), ("rounds", args.rounds),
                                                       ("seeds", args.seeds)) if v not in (None, 16)]
    flags += ["--quick"] * args.quick + ["--with-10k"] * args.with_10k
    flags += [f"--part {args.part}"] * (args.part != "all")
    return " ".join([".venv/bin/python experiments/fedemb_scale.py", *flags])


def part_wall(lk: Lookup, jobs: list[dict[str, Any]], since: float, until: float) -> float:
    """Seconds during which at least one of ``jobs`` finished within [``since``, ``until``] ran
    (the time it ran before ``since``, in an interrupted earlier invocation, is not counted)."""
    iv = sorted((max(r["started_at"], since), r["finished_at"]) for j in jobs
                if (r := lk.get(j["key"])) and since <= r.get("finished_at", -math.inf) <= until)
    total, end = 0.0, -math.inf
    for a, b in iv:
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


def protocol(st: dict[str, Any], info: dict[str, Any], lk: Lookup, z0: float) -> list[str]:
    """The protocol section: data, knobs, seeds, epsilon convention."""
    from dpemb.privacy.accounting import describe_mechanism, extrapolate

    n = info["train"]["users"]
    spec = replace(fg.make_spec(n, {"algorithm": "dp-fedemb", "M": M0, "K": st["K"]}, st["rounds"]),
                   noise_multiplier=z0)
    ex = extrapolate(spec, PREMISE_POP)
    pre = lk.get(fg.pre_key(REGIME, fg.WIDTH_MAIN))
    g = st["reg"]["glyph"]
    return [
        "## Protocol\n",
        (f"- **Data**: the face-like regime of `experiments/fedemb_glyphs.py` (glyph identities "
        f"owned by one user each, {g['images_per_identity']} images per identity, occlusion "
        f"{g['occlusion']}): {n:,} private training users, {info['public']['users']:,} public users "
        f"(pretraining), test split {info['eval']['users']} users / {info['eval']['examples']} images "
        f"of identities never trained on. The validation split (validation users of validation "
        "identities) only scores part 3's levers, which choose the lever of parts 4 and 5."),
        "- **Utility**: Recall@FAR=1e-3 (exact, all pairs) on the TEST split, at the last round.",
        f"- **Start**: width-{fg.WIDTH_MAIN:g} LeNet, embedding {fg.EMB}, from the public pretraining "
        f"({st['reg']['pretrain_steps']} steps; public-only score {pre['final']:.3f})."
        if pre else "- **Start**: public pretraining (not run yet).",
        (f"- **Knobs** (not tuned here): K = {st['K']} users per virtual client, M = {M0} clients per "
        f"round, {st['rounds']} rounds, local batch {KNOBS['local_batch_size']}, one local epoch, client "
        f"lr {KNOBS['client_lr']}, server lr {KNOBS['server_lr']} momentum {KNOBS['server_momentum']}, "
        f"clip C = {fg.CLIP}, DP-FedEmb head: zeros, head lr scale {KNOBS['head_lr_scale']:g}; "
        "DP-FedAvg the same knobs with its global (aggregated, clipped and noised) head. They come "
        "from the measurement in docs/DEFAULTS.md (\"Users per virtual client decide DP-FedEmb's utility\": "
        "K = 16-32 closes most of the gap to centralized) and fedemb_glyphs' tuning (zero head, "
        "local batch 8, server lr 0.5, chosen there on its validation split); nothing was "
        "selected on this page's runs."),
        (f"- **Seeds**: seed s sets the noise, client-sampling and client-randomness seed "
        f"{NOISE_SEED0} + {SEED_STRIDE} s and the run seed s (DP-FedAvg's head initialisation; "
        f"centralized: data order and head). Seeds: premise {st['premise_seeds']}, headline "
        f"{st['headline_seeds']}; tables show mean ± sample std."),
        (f"- **Privacy**: {describe_mechanism(spec).rstrip('.')}. RDP accountant, user-level, "
        "add/remove-one-user relation. Epsilon is the paper's extrapolated one "
        "(`dpemb.privacy.accounting.extrapolate`): the simulated run (N users, M clients, z) is "
        "reported as a run over N' users with M' = round(kM) clients per round and z' = z M'/M, "
        "k = N'/N, so the noise on the averaged update (z x 2C / M) is the same, and delta = 1/N' "
        "(1e-5 at 100k, 1e-6 at 1M, 1e-7 at 10M). The simulation z is calibrated "
        "(`calibrate_noise_multiplier`, RDP) so that the extrapolated run has the target "
        f"epsilon. Example: epsilon {PREMISE_EPS:g} at {_pop(PREMISE_POP)}: z = {z0:.5f} in simulation, M' = "
        f"{ex.clients_per_round:,}, z' = {ex.noise_multiplier:.3f}, epsilon {ex.epsilon:.3f} at "
        f"delta {ex.delta:.0e}. At the simulated N = {n:,} the same runs have no meaningful guarantee."),
        "",
    ]


def premise_section(st: dict[str, Any], lk: Lookup, z0: float, img: Path) -> tuple[list[str], dict]:
    """The premise table and plot; returns its lines and the numbers the findings use."""
    S = st["premise_seeds"]
    noisy, clean = {}, {}
    rows = ["## Part 1: the extrapolation premise\n",
            (f"DP-FedEmb with M = {M0}k clients per round and z = z0 k (z0 = {z0:.5f}: epsilon "
            f"{PREMISE_EPS:g} at N' = {_pop(PREMISE_POP)} for k = 1), so the noise on the averaged "
            "update is the same at every k; the no-noise runs separate the effect of averaging more "
            "clients (less sampling variance, a higher sampling rate M K / N) from the noise. "
             f"k = 1 is the headline's DP-FedEmb run at ε {PREMISE_EPS:g}, {_pop(PREMISE_POP)} "
             "(and its no-noise run).\n"),
            "| k | M | z | noise on average | R@1e-3 with noise | R@1e-3 no noise | s per run (noise / no noise) |",
            "|---|---|---|---|---|---|---|"]
    sens = fg.make_spec(10**6, {"algorithm": "dp-fedemb", "M": M0, "K": st["K"]}, 1).sensitivity
    for i, k in enumerate(st["ks"]):
        rn = lk.seeds(lambda s, i=i: premise_jobs(st, z0, s)[i], S)
        noisy[k] = stats(rn)
        rc = lk.seeds(lambda s, k=k: fed_run(st, "dp-fedemb", s, M=M0 * k), S) \
            if k in (st["ks"][0], st["ks"][-1]) else []
        clean[k] = stats(rc) if rc else None
        secs = [_secs(rn), _secs(rc) if rc else "-"]
        rows.append(f"| {k} | {M0 * k} | {z0 * k:.5f} | {z0 * sens / M0:.2e} | {cell(*noisy[k], S)} | "
                    f"{cell(*clean[k], S) if clean[k] else '-'} | {' / '.join(secs)} |")
    _plot_premise(st, noisy, clean, img / "scale_premise.png")
    rows += ["", f"![premise]({img.name}/scale_premise.png)", ""]
    return rows, {"noisy": noisy, "clean": clean}


def _secs(recs: list[dict[str, Any] | None]) -> str:
    """Mean wall seconds of the finished runs, or 'n/a'."""
    xs = [r["seconds"] for r in recs if r and r.get("seconds")]
    return f"{np.mean(xs):.0f}" if xs else "n/a"


def _plt() -> Any:
    """matplotlib.pyplot with the file-only backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    """Write a figure atomically as PNG."""
    from dpemb.atomic import atomic_write

    atomic_write(path, lambda p: fig.savefig(p, dpi=110, format="png"))


def _errorbar(ax: Any, xs: list[float], st3: list[tuple[float, float, int]], **kw: Any) -> None:
    """Plot mean ± std where a point has runs (std 0 where one seed)."""
    pts = [(x, m, 0.0 if math.isnan(s) else s) for x, (m, s, n) in zip(xs, st3, strict=False) if n]
    if pts:
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    marker="o", capsize=3, **kw)


def _plot_premise(st: dict[str, Any], noisy: dict, clean: dict, path: Path,
                  at: tuple[float, int] = (PREMISE_EPS, PREMISE_POP)) -> None:
    """Utility versus k, with noise (z0: epsilon ``at[0]`` at ``at[1]`` users for k = 1) and without."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    ks = list(st["ks"])
    _errorbar(ax, ks, [noisy[k] for k in ks], label=f"z = z0 k (eps {at[0]:g} at {_pop(at[1])} for k = 1)")
    ck = [k for k in ks if clean.get(k)]
    _errorbar(ax, ck, [clean[k] for k in ck], ls="--", label="no noise")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    _style(ax, f"k (M = {M0}k clients per round, noise multiplier z0 k)",
           f"Extrapolation premise, DP-FedEmb K = {st['K']}, {st['rounds']} rounds")
    _finish(plt, fig, path)


def _style(ax: Any, xlabel: str, title: str) -> None:
    """Labels, grid and legend of one utility panel."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel("Recall@FAR=1e-3 (test)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def _finish(plt: Any, fig: Any, path: Path) -> None:
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


ALGO = {"dp-fedemb": "DP-FedEmb", "dp-fedavg": "DP-FedAvg", "dp-ftrl-fedemb": "DP-FTRL-FedEmb"}


def headline_section(st: dict[str, Any], lk: Lookup, img: Path) -> tuple[list[str], dict]:
    """The headline table and the population plot; returns lines and numbers."""
    S = st["headline_seeds"]
    cen = stats(lk.seeds(lambda s: central_job(st, s), S))
    pre = lk.get(fg.pre_key(REGIME, fg.WIDTH_MAIN))
    grid: dict[tuple[str, int, float | None], tuple[float, float, int]] = {}
    pops = ((POP_10K,) if st["with_10k"] else ()) + tuple(st["pops"])
    for a in ALGOS:
        grid[(a, 0, None)] = stats(lk.seeds(lambda s, a=a: fed_run(st, a, s), S))
        for n in pops:
            for e in (FIG_EPS if n == POP_10K else st["eps"]):
                grid[(a, n, e)] = stats(lk.seeds(lambda s, a=a, n=n, e=e: fed_run(st, a, s, eps=e, pop=n), S))
    L = ["## Part 2: headline\n",
         ("Recall@FAR=1e-3 on the test split, mean ± std over seeds, in brackets the difference to "
         f"centralized training from the same public start with the same softmax loss, "
         f"{st['reg']['central_steps']} steps ({cell(*cen, S)}; flat from there: see the convergence section, where "
         "centralized ArcFace goes much higher, the reference of parts 4-6); epsilon of the run "
         "extrapolated to N' (delta = 1/N'). The no-noise column is the same runs for every N'.\n"),
         "| algorithm | N' | " + " | ".join(f"ε {e:g}" for e in st["eps"]) + " | no noise |",
         "|---|---|" + "---|" * (len(st["eps"]) + 1)]
    for a in ALGOS:
        for n in st["pops"]:
            cells = [cell(*grid[(a, n, e)], S) + gap(grid[(a, n, e)][0], cen[0]) for e in st["eps"]]
            npc = cell(*grid[(a, 0, None)], S) + gap(grid[(a, 0, None)][0], cen[0])
            L.append(f"| {ALGO[a]} | {_pop(n)} | " + " | ".join(cells) + f" | {npc} |")
    blank = " |" * len(st["eps"])
    L.append(f"| centralized, non-private, from the public start | - |{blank} {cell(*cen, S)} |")
    pre_txt = f"{pre['final']:.3f}" if pre else "n/a (not run)"
    L.append(f"| public pretraining only | - |{blank} {pre_txt} |")
    arc = {(n, e): stats(lk.seeds(lambda s, n=n, e=e: fed_run(st, "dp-fedemb", s, eps=e, pop=n,
                                                             lever=MOONSHOT_LEVER), S))
           for n in pops for e in FIG_EPS}
    _plot_population(st, grid, pops, cen, pre, img / "scale_population.png", arc)
    L += ["", f"![population]({img.name}/scale_population.png)", ""]
    return L, {"grid": grid, "cen": cen, "pre": pre["final"] if pre else math.nan, "pops": pops}


def central_curve_section(st: dict[str, Any], lk: Lookup, img: Path) -> tuple[list[str], list[str]]:
    """Centralized training at every step budget (seed 0): is the reference converged?"""
    budgets = sorted({b for loss in CENTRAL_BUDGETS for b in central_budgets(st, loss)})
    L = ["## Centralized training to convergence\n",
         (f"The centralized reference (non-private, from the same public start, batch {fg.CENTRAL_BATCH}, lr 0.05 "
          "with a "
          "cosine schedule that ends at the budget), seed 0, at each step budget; the tables above use "
          f"{st['reg']['central_steps']} steps. Recall@FAR=1e-3 on the test split.\n"),
         "| loss | " + " | ".join(f"{b} steps" for b in budgets) + " |", "|---|" + "---|" * len(budgets)]
    curves, found = {}, []
    for loss in CENTRAL_BUDGETS:
        mine = central_budgets(st, loss)
        recs = [lk.get(central_job(st, 0, loss, b)["key"]) if b in mine else None for b in budgets]
        curves[loss] = [(b, r["final"]) for b, r in zip(budgets, recs, strict=True) if r]
        L.append(f"| {loss} | " + " | ".join(f"{r['final']:.3f}" if r else ("n/a" if b in mine else "-")
                                             for b, r in zip(budgets, recs, strict=True)) + " |")
        ref = next((m for b, m in curves[loss] if b == st["reg"]["central_steps"]), None)
        if len(curves[loss]) > 1 and ref is not None:
            b, m = max(curves[loss], key=lambda x: x[1])
            found.append(f"{loss}: best {m:.3f} at {b} steps, the regime's {st['reg']['central_steps']} "
                         f"steps {ref:.3f} ({m - ref:+.3f} to the best)")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for loss, pts in curves.items():
        if pts:
            ax.plot([b for b, _ in pts], [m for _, m in pts], marker="o", label=f"centralized, {loss}")
    fed = [(equal_examples_steps(st, r), v["final"]) for r in long_curve(st)
           if (v := lk.get(long_run(st, 0, None, rounds=r)["key"]))]
    if fed:  # part 6's no-noise budget curve, placed by the examples it sees
        ax.plot([b for b, _ in fed], [m for _, m in fed], marker="s", ls="--",
                label="DP-FedEmb, ArcFace, no noise (150-600 rounds)")
    ax.set_xscale("log", base=2)
    _style(ax, f"step budget (batch {fg.CENTRAL_BATCH}; DP-FedEmb: examples seen / {fg.CENTRAL_BATCH})",
           "Training length, from the public start (seed 0)")
    _finish(plt, fig, img / "scale_central_curve.png")
    L += ["", ("The plot adds DP-FedEmb with ArcFace and no noise (part 6) at the centralized budget that sees as "
               "many examples as its rounds."), "", f"![centralized curve]({img.name}/scale_central_curve.png)", ""]
    return L, ([f"- **Centralized convergence** (seed 0): {'; '.join(found)}."] if found else [])


def central_reference(st: dict[str, Any], lk: Lookup) -> dict[str, Any]:
    """The centralized runs parts 4-6 compare with: softmax and ArcFace at the regime's budget
    (every headline seed), the converged run (CONVERGED, every headline seed), and ``ref``,
    the mean the ratios use: the converged run's once it has a seed, else the better of the
    other two (the page then says that the reference is not converged)."""
    S = st["headline_seeds"]
    cen = stats(lk.seeds(lambda s: central_job(st, s), S))
    cen_arc = stats(lk.seeds(lambda s: central_job(st, s, "arcface"), S))
    jobs = converged_jobs(st)
    recs = [lk.get(j["key"]) for j in jobs]
    conv = stats(recs)
    short = max(cen[0], cen_arc[0]) if cen_arc[2] else cen[0]
    ref = conv[0] if conv[2] else short
    label = (f"centralized {CONVERGED[0]} at {jobs[0]['steps']} steps, {cell(*conv, S)}" if conv[2] else
             f"the better centralized run at {st['reg']['central_steps']} steps, {ref:.3f} (NOT converged)")
    return {"softmax": cen, "arcface": cen_arc, "converged": conv, "ref": ref, "label": label,
            "steps": jobs[0]["steps"], "seed0": recs[0]}


def rising_reference(st: dict[str, Any], lk: Lookup, cr: dict[str, Any]) -> dict[str, Any] | None:
    """Is the reference ``cr`` (``central_reference``) of parts 4-6 still rising? If a longer run
    of the convergence curve (seed 0) beats the reference's own seed 0 by more than 0.005: its
    budget, the gain, and the estimate ``ref`` + gain of the reference at that budget (seed 0's
    gain added to the mean); else None. Without the reference's seed 0, the best curve run
    against ``ref`` itself."""
    conv = cr["seed0"]
    base_steps = cr["steps"] if conv else st["reg"]["central_steps"]
    base = conv["final"] if conv else cr["ref"]
    runs = [(r["final"], j) for j in central_curve_jobs(st) if (r := lk.get(j["key"])) and j["steps"] > base_steps]
    if not runs:
        return None
    best, job = max(runs, key=lambda x: x[0])
    if best <= base + 0.005:
        return None
    gain = best - base if conv else 0.0
    return {"steps": job["steps"], "loss": job.get("loss", "softmax"), "best": best, "base": base,
            "base_steps": base_steps, "gain": gain, "estimate": cr["ref"] + gain if conv else best}


def equal_examples_steps(st: dict[str, Any], rounds: int) -> float:
    """Centralized steps that see as many examples as DP-FedEmb's ``rounds`` rounds (M0 clients
    of K users, every user's images once per round)."""
    g = st["reg"]["glyph"]
    per_user = g["images_per_identity"] * g.get("identities_per_user", 1)
    return rounds * M0 * st["K"] * per_user / fg.CENTRAL_BATCH


def reference_warning(st: dict[str, Any], lk: Lookup) -> list[str]:
    """If the reference of parts 4-6 is still rising (``rising_reference``), the cells' ratios
    against its estimate at the longer budget (the goals are read against a converged model)."""
    S = st["headline_seeds"]
    cr = central_reference(st, lk)
    ref, up = cr["ref"], rising_reference(st, lk, cr)
    if up is None:
        return []
    est = up["estimate"]
    cells = [(LEVER_POP, e, st["rounds"]) for e in st["eps"]] + [(n, e, st["rounds"]) for n, e in large_cells(st)]
    cells += [(n, e, long_rounds(st)) for n, e in long_cells(st)]
    got = []
    for n, e, R in cells:
        m = stats(lk.seeds(lambda s, n=n, e=e, R=R: long_run(st, s, (n, e), rounds=R), S))
        if m[2]:
            got.append(f"{_pop(n)} ε {e:g} {m[0] / est:.3f}x" + (f" ({R} rounds)" if R != st["rounds"] else ""))
    how = (f"seed 0 gains {up['gain']:+.3f} from {up['base_steps']} to {up['steps']} steps ({up['base']:.3f} -> "
           f"{up['best']:.3f}); added to the {ref:.3f} the ratios of parts 4-6 use, that estimates the reference at "
           f"{up['steps']} steps at {est:.3f}" if up["gain"] else
           f"{up['loss']} at {up['steps']} steps scores {est:.3f} (seed 0), above the {ref:.3f} the ratios use")
    return [f"- **The centralized reference is not converged**: {how}. Against {est:.3f} DP-FedEmb with ArcFace "
            f"reaches ({st['rounds']} rounds unless marked): {', '.join(got)}."]


def lever_section(st: dict[str, Any], lk: Lookup) -> tuple[list[str], list[str]]:
    """Part 3: each lever against the baseline at (LEVER_EPS, LEVER_POP), on the validation
    split (which chooses) and the test split; returns its lines and its findings line."""
    S = st["lever_seeds"]

    def runs(lv: Any, split: str) -> list[dict[str, Any] | None]:
        return lk.seeds(lambda s: fed_run(st, "dp-fedemb", s, eps=LEVER_EPS, pop=LEVER_POP, lever=lv,
                                          split=split), S)

    base = {sp: stats(runs(None, sp)) for sp in ("validation", "test")}
    L = [f"## Part 3: levers at ε {LEVER_EPS:g}, N' = {_pop(LEVER_POP)}\n",
         ("DP-FedEmb with the knobs above and ONE change each, at the same epsilon (the noise multiplier "
          "is the same in every row: clipping, adaptive clipping with its count noise taken out of the same "
          "total z, the server schedule and the loss do not change epsilon). Recall@FAR=1e-3 on the "
          "VALIDATION split (validation users of validation identities, which chooses the moonshot's "
          "lever) and on the test split, each with the difference to the baseline.\n"),
         "| lever | validation | vs baseline | test | vs baseline | final clip norm | s per run (test) |",
         "|---|---|---|---|---|---|---|",
         f"| baseline (clip norm {fg.CLIP}, constant server lr, softmax) | {cell(*base['validation'], S)} | - | "
         f"{cell(*base['test'], S)} | - | - | {_secs(runs(None, 'test'))} |"]
    measured: dict[str, list[tuple[float, str, str]]] = {"validation": [], "test": []}
    for lv in st["levers"]:
        recs = runs(lv, "test")
        m = {"validation": stats(runs(lv, "validation")), "test": stats(recs)}
        diff = {}
        for sp in m:
            ok = m[sp][2] and base[sp][2]
            diff[sp] = f"{m[sp][0] - base[sp][0]:+.3f}" if ok else "n/a"
            if ok:
                measured[sp].append((m[sp][0] - base[sp][0], lv[1], lv[0]))
        clips = [r.get("final_clip_norm") for r in recs if r and r.get("final_clip_norm") is not None]
        clip = f"{np.mean(clips):.3g}" if clips else "-"
        L.append(f"| {lv[1]} | {cell(*m['validation'], S)} | {diff['validation']} | {cell(*m['test'], S)} | "
                 f"{diff['test']} | {clip} | {_secs(recs)} |")
    found = []
    if measured["validation"]:
        d, name, _ = max(measured["validation"])
        test_best = max(measured["test"])[1] if measured["test"] else "n/a"
        found = [f"- **Levers** at ε {LEVER_EPS:g}, N' = {_pop(LEVER_POP)} (baseline: validation "
                 f"{base['validation'][0]:.3f}, test {base['test'][0]:.3f}): {len(measured['validation'])} measured "
                 f"on validation; the best there is {name} ({d:+.3f}), the best on test {test_best}; "
                 f"{sum(x > 0 for x, _, _ in measured['validation'])} improve on the baseline on validation."]
    elif measured["test"]:
        d, name, _ = max(measured["test"])
        found = [f"- **Levers** at ε {LEVER_EPS:g}, N' = {_pop(LEVER_POP)} (test only, validation not run): "
                 f"the best is {name} ({d:+.3f})."]
    return L + [""], found


def lever_choice(st: dict[str, Any], lk: Lookup) -> str:
    """How the moonshot's lever was chosen, from the validation runs of part 3."""
    S = st["lever_seeds"]
    val = [(stats(lk.seeds(lambda s, lv=lv: fed_run(st, "dp-fedemb", s, eps=LEVER_EPS, pop=LEVER_POP, lever=lv,
                                                      split="validation"), S))[0], lv) for lv in st["levers"]]
    val = [(m, lv) for m, lv in val if m == m]
    if not val:
        return "chosen on the test split of part 3: its validation runs have not run yet"
    best = max(val, key=lambda x: x[0])[1]
    if best[0] == MOONSHOT_LEVER[0]:
        return "the best lever of part 3 on the validation split"
    return (f"chosen on part 3's test split; the validation split ranks {best[1]} first, so this choice "
            "saw the test split")


def moonshot_section(st: dict[str, Any], lk: Lookup) -> tuple[list[str], list[str]]:
    """Part 4: the best lever (ArcFace) at every epsilon at 100k users, against centralized
    training with softmax and with the same loss; returns lines and a findings line."""
    S = st["headline_seeds"]
    cr = central_reference(st, lk)
    ref = cr["ref"]
    L = [f"## Part 4: the moonshot, N' = {_pop(LEVER_POP)} users (delta = 1/N')\n",
         (f"DP-FedEmb with the {MOONSHOT_LEVER[1]} ({lever_choice(st, lk)}), {st['rounds']} rounds, other "
          f"knobs as above. The ratio is to {cr['label']} (from the same public start; at "
          f"{st['reg']['central_steps']} steps softmax {cell(*cr['softmax'], S)}, ArcFace "
          f"{cell(*cr['arcface'], S)}).\n"),
         "| ε | DP-FedEmb, ArcFace | x centralized | DP-FedEmb, softmax (part 2) |", "|---|---|---|---|"]
    hits = []
    for e in st["eps"]:
        m = stats(lk.seeds(lambda s, e=e: fed_run(st, "dp-fedemb", s, eps=e, pop=LEVER_POP,
                                                   lever=MOONSHOT_LEVER), S))
        soft = stats(lk.seeds(lambda s, e=e: fed_run(st, "dp-fedemb", s, eps=e, pop=LEVER_POP), S))
        ratio = f"{m[0] / ref:.3f}" if m[2] and ref == ref else "n/a"
        L.append(f"| {e:g} | {cell(*m, S)} | {ratio} | {cell(*soft, S)} |")
        if m[2]:
            hits.append((e, m[0] / ref, m[2]))
    found = []
    if hits:
        ok = [f"ε {e:g} ({r:.3f}x, n={n})" for e, r, n in hits if r >= 0.95]
        found = [f"- **Moonshot** (100k users, ≥ 0.95x centralized ({ref:.3f}) at ε ≤ 2, {st['rounds']} rounds): "
                 + (f"reached at {', '.join(ok)}" if ok else "not reached")
                 + f"; measured at {len(hits)} epsilon(s), seeds as marked."]
    return L + [""], found


def large_section(st: dict[str, Any], lk: Lookup) -> tuple[list[str], list[str]]:
    """Part 5: the moonshot's lever at 1M and 10M users against the goals of issue #11
    (>= 0.95x centralized at 1M and epsilon <= 1, >= 0.97x at 10M and epsilon <= 0.5)."""
    S = st["headline_seeds"]
    cr = central_reference(st, lk)
    ref = cr["ref"]
    pre = lk.get(fg.pre_key(REGIME, fg.WIDTH_MAIN))
    L = ["## Part 5: the moonshot's lever at 1M and 10M users" + (" (and 10k)" if st["with_10k"] else "") + "\n",
         (f"DP-FedEmb with the {MOONSHOT_LEVER[1]}, other knobs as above, where the softmax runs of part 2 "
          "stop at their no-noise utility. The goal is >= 0.95x centralized at 1M users and "
          f"epsilon <= 1, and >= 0.97x at 10M users and epsilon <= 0.5. {st['rounds']} rounds. The ratio "
          f"is to {cr['label']} (the centralized optimiser's settings, not tuned for the margin loss).\n"),
         "| N' | ε | DP-FedEmb, ArcFace | x centralized | goal | DP-FedEmb, softmax (part 2) |",
         "|---|---|---|---|---|---|"]
    found = []
    small = []
    for n, e in large_cells(st):
        m = stats(lk.seeds(lambda s, n=n, e=e: fed_run(st, "dp-fedemb", s, eps=e, pop=n, lever=MOONSHOT_LEVER), S))
        soft = stats(lk.seeds(lambda s, n=n, e=e: fed_run(st, "dp-fedemb", s, eps=e, pop=n), S))
        goal = GOAL2_TARGET.get(n, math.nan)
        ratio = m[0] / ref if m[2] else math.nan
        L.append(f"| {_pop(n)} | {e:g} | {cell(*m, S)} | {'n/a' if ratio != ratio else f'{ratio:.3f}'} | "
                 f"{'-' if goal != goal else f'{goal:.2f}x'} | {cell(*soft, S)} |")
        if m[2] and goal != goal:
            small.append(f"{_pop(n)} ε {e:g}: {cell(*m, S)} ({ratio:.3f}x; softmax {cell(*soft, S)})"
                         + (f", BELOW the public start alone ({pre['final']:.3f}): at this N' private training "
                            "does not pay, the public model is the better one" if pre and m[0] < pre["final"] else ""))
        elif m[2]:
            verdict = "reached" if ratio >= goal else "not reached"
            found.append(f"{_pop(n)} ε {e:g}: {ratio:.3f}x (goal {goal:.2f}x, {verdict}, n={m[2]})")
    out = [f"- **Large populations with ArcFace** ({st['rounds']} rounds, against {ref:.3f}): "
           f"{'; '.join(found)}."] if found else []
    out += [f"- **10k users with ArcFace** (no goal; the population figure's smallest N'): {'; '.join(small)}."] \
        if small else []
    return L + [""], out


def long_section(st: dict[str, Any], lk: Lookup) -> tuple[list[str], list[str]]:
    """Part 6: the goals' cells at part 6's rounds against the converged reference, DP-FedEmb's
    no-noise budget curve, and the validation run that chooses the rounds."""
    S, R = st["headline_seeds"], long_rounds(st)
    cr = central_reference(st, lk)
    ref = cr["ref"]
    up = rising_reference(st, lk, cr)
    est, est_txt = (up["estimate"], f"estimated reference at {up['steps']} steps ({up['estimate']:.3f})") if up \
        else (ref, "reference")
    val_short = lk.get(fed_run(st, "dp-fedemb", 0, eps=LEVER_EPS, pop=LEVER_POP, lever=MOONSHOT_LEVER,
                               split="validation")["key"])
    val_long = lk.get(long_run(st, 0, (LEVER_POP, LEVER_EPS), "validation")["key"])
    choice = (f"on the validation split at {_pop(LEVER_POP)} ε {LEVER_EPS:g} (seed 0) {R} rounds score "
              f"{val_long['final']:.3f} against {val_short['final']:.3f} at {st['rounds']}, so "
              f"{R if val_long['final'] > val_short['final'] else st['rounds']} rounds is the validation's choice"
              if val_short and val_long else "the validation runs that choose the rounds have not run yet")
    L = ["## Part 6: more rounds, against the longest-trained centralized reference\n",
         (f"DP-FedEmb with the {MOONSHOT_LEVER[1]} at {R} rounds instead of {st['rounds']} (epsilon is "
          f"calibrated for {R} rounds, so each round gets more noise), other knobs as above; {choice}. "
          f"The ratio is to {cr['label']}.\n"),
         (f"| N' | ε | {st['rounds']} rounds (parts 4-5) | {R} rounds | x centralized ({ref:.3f}) | "
          f"x {est_txt} | goal |"), "|---|---|---|---|---|---|---|"]
    got = {c: stats(lk.seeds(lambda s, c=c: long_run(st, s, c), S)) for c in (None, *long_cells(st))}
    found = []
    for c, m in got.items():
        n, e = c or (None, None)
        short = stats(lk.seeds(lambda s, c=c: long_run(st, s, c, rounds=st["rounds"]), S))
        goal = GOALS.get(n, math.nan)
        ratio = m[0] / ref if m[2] and ref == ref else math.nan
        L.append(f"| {'-' if n is None else _pop(n)} | {'no noise' if e is None else f'{e:g}'} | {cell(*short, S)} | "
                 f"{cell(*m, S)} | {'n/a' if ratio != ratio else f'{ratio:.3f}'} | "
                 f"{f'{m[0] / est:.3f}' if m[2] else 'n/a'} | {'-' if goal != goal else f'{goal:.2f}x'} |")
        if m[2] and goal == goal:
            found.append(f"{_pop(n)} ε {e:g} {cell(*m, S)} = {ratio:.3f}x (goal {goal:.2f}x, "
                         f"{'reached' if ratio >= goal else 'not reached'}; against the {est_txt} "
                         f"{m[0] / est:.3f}x, {'reached' if m[0] >= goal * est else 'not reached'}; "
                         f"{st['rounds']} rounds {short[0]:.3f})")
    curve = [(r, lk.get(long_run(st, 0, None, rounds=r)["key"])) for r in long_curve(st)]
    pts = [f"{r['final']:.3f} at {n} ({equal_examples_steps(st, n):,.0f})" for n, r in curve if r]
    L += ["", (f"No noise, seed 0, DP-FedEmb with ArcFace by rounds (in brackets the centralized steps of "
               f"batch {fg.CENTRAL_BATCH} that see as many examples): {', '.join(pts) or 'not run yet'}; centralized "
               "ArcFace by steps: the convergence table above."), ""]
    out = [f"- **More rounds** ({R}, against {ref:.3f}): {'; '.join(found)}."] if found else []
    nn = got[None]
    if nn[2] and found:
        eq = equal_examples_steps(st, R)
        arc = [(b, r["final"]) for b in central_budgets(st, "arcface")
               if (r := lk.get(central_job(st, 0, "arcface", b)["key"]))]
        below, above = [x for x in arc if x[0] <= eq][-1:], [x for x in arc if x[0] > eq][:1]
        near = " and ".join(f"{m:.3f} at {b} steps" for b, m in below + above) or "n/a"
        if above and nn[0] >= above[0][1]:
            verdict = (f"DP-FedEmb without noise is ahead even of the {above[0][0]}-step run, which sees "
                       f"{above[0][0] / eq:.1f}x as many examples: what separates it from the longest centralized "
                       "runs is training length, which both sides are still converting into utility")
        elif below and nn[0] >= below[0][1]:
            verdict = "DP-FedEmb without noise is between them: at equal examples it keeps up with centralized"
        else:
            verdict = "DP-FedEmb without noise is behind centralized at equal examples seen"
        out.append(f"- **Where the gap to centralized is** ({R} rounds): without noise DP-FedEmb reaches "
                   f"{cell(*nn, S)} = {nn[0] / ref:.3f}x; the noise adds "
                   + ", ".join(f"{got[c][0] - nn[0]:+.3f} at {_pop(c[0])} ε {c[1]:g}"
                               for c in long_cells(st) if got[c][2])
                   + f". {R} rounds see as many examples as {eq:,.0f} centralized steps; centralized ArcFace scores "
                   f"{near} (seed 0): {verdict}.")
    return L + [""], out


def _plot_population(st: dict[str, Any], grid: dict, pops: tuple[int, ...], cen: tuple,
                     pre: dict[str, Any] | None, path: Path, arc: dict | None = None) -> None:
    """Utility at epsilon 1 and 2 versus the extrapolated population; ``arc``: DP-FedEmb with
    the moonshot's lever where it was measured, (N', epsilon) -> stats."""
    plt = _plt()
    eps = [e for e in FIG_EPS if any((a, n, e) in grid for a in ALGOS for n in pops)]
    fig, axes = plt.subplots(1, max(1, len(eps)), figsize=(5.5 * max(1, len(eps)), 4), squeeze=False)
    for ax, e in zip(axes[0], eps, strict=False):
        for a in ALGOS:
            ns = [n for n in pops if (a, n, e) in grid]
            _errorbar(ax, ns, [grid[(a, n, e)] for n in ns], label=ALGO[a])
        got = [n for n in pops if arc and arc.get((n, e), (0, 0, 0))[2]]
        if got:
            _errorbar(ax, got, [arc[(n, e)] for n in got], ls="--", label="DP-FedEmb, ArcFace")
        if cen[2]:
            ax.axhline(cen[0], color="k", lw=1, label="centralized (non-private)")
        if pre:
            ax.axhline(pre["final"], color="gray", ls=":", lw=1, label="public pretraining only")
        ax.set_xscale("log")
        _style(ax, "population N' (extrapolated; delta = 1/N')", f"epsilon {e:g} (RDP, user-level)")
    _finish(plt, fig, path)


def privacy_table(st: dict[str, Any], lk: Lookup, n_train: int) -> list[str]:
    """Per (N', epsilon): the simulation z (recorded by the runs, else calibrated), the noise
    on the average and the extrapolated run that has the target epsilon."""
    from dpemb.privacy.accounting import extrapolate

    spec = fg.make_spec(n_train, {"algorithm": "dp-fedemb", "M": M0, "K": st["K"]}, st["rounds"])
    L = [("<details><summary>noise per (N', epsilon) (same for both algorithms: same M, K, "
         "rounds)</summary>\n"), "| N' | ε | z (simulation) | noise on average | M' | z' | ε check | δ |",
         "|---|---|---|---|---|---|---|---|"]
    pops = ((POP_10K,) if st["with_10k"] else ()) + tuple(st["pops"])
    for n in pops:
        for e in (FIG_EPS if n == POP_10K else st["eps"]):
            r = lk.get(fed_run(st, "dp-fedemb", 0, eps=e, pop=n)["key"])
            z = r["z"] if r else fg.calibrate(spec, e, n)
            ex = extrapolate(replace(spec, noise_multiplier=z), n)
            L.append(f"| {_pop(n)} | {e:g} | {z:.5f} | {z * spec.sensitivity / M0:.2e} | "
                     f"{ex.clients_per_round:,} | {ex.noise_multiplier:.3f} | {ex.epsilon:.3f} | {ex.delta:.0e} |")
    return L + ["\n</details>\n"]


def timing_section(st: dict[str, Any], lk: Lookup, timing: dict[str, Any], parts: dict) -> list[str]:
    """Wall time of every invocation and per part (time during which a part's run was running)."""
    inv = timing.get("invocations", [])
    if not inv:
        return ["## Wall time\n", "Not recorded (only --report-only so far).\n"]
    total = sum(i["wall_s"] for i in inv)
    L = ["## Wall time\n", (f"{len(inv)} invocation(s), {total / 60:.1f} min in all on 2 cores "
         "(shared with other work), data and pretraining included:\n"),
         "| finished | parts | runs done / to do | wall min | premise runs busy min | headline runs busy min |",
         "|---|---|---|---|---|---|"]
    for i in inv:
        pw = {p: part_wall(lk, parts[p], i["started"], i["started"] + i["wall_s"]) / 60 for p in parts}
        L.append(f"| {i['finished']} | {', '.join(i['parts'])} | {i['runs_done']} / {i['runs_planned']} | "
                 f"{i['wall_s'] / 60:.1f} | {pw['premise']:.1f} | {pw['headline']:.1f} |")
    return L + ["", ("'busy' = time during which at least one run of that part was in progress (the "
                "parts share runs and run interleaved, so the two need not add up)."), ""]


def findings(st: dict[str, Any], prem: dict, head: dict, levers: list[str]) -> list[str]:
    """The FINDINGS paragraph, generated from the numbers."""
    L = ["## Findings (generated from the numbers above)\n"]
    L.append(_premise_finding(st, prem))
    L.append(_headline_finding(st, head))
    L.append(_compare_finding(st, head))
    L.append(_population_finding(st, head))
    return L + levers + [""]


def _premise_finding(st: dict[str, Any], prem: dict) -> str:
    """Does utility stay within seed spread from k = 1 to the largest k?"""
    k1, kx = st["ks"][0], st["ks"][-1]
    (m1, s1, n1), (mx, sx, nx) = prem["noisy"][k1], prem["noisy"][kx]
    if not (n1 and nx):
        return f"- **Premise**: not measured yet (k = {k1} or k = {kx} missing)."
    d = mx - m1
    txt = f"- **Premise**: k = {kx} minus k = {k1} with noise: {d:+.3f}"
    c1, cx = prem["clean"].get(k1), prem["clean"].get(kx)
    if n1 > 1 and nx > 1:
        pooled = math.sqrt((s1 ** 2 + sx ** 2) / 2)
        verdict = "holds within seed spread" if abs(d) <= 2 * pooled else "does NOT hold within seed spread"
        txt += (f", pooled seed std {pooled:.3f} (|difference| = {abs(d) / max(pooled, 1e-9):.1f} pooled "
                f"std; criterion 2): the premise {verdict}.")
    else:
        txt += " (one seed: no seed spread to compare with)."
    if c1 and cx and c1[2] and cx[2]:
        txt += (f" Without noise k = {kx} minus k = {k1}: {cx[0] - c1[0]:+.3f} (the effect of averaging "
                f"more clients alone); the noise costs {c1[0] - m1:+.3f} at k = {k1} and "
                f"{cx[0] - mx:+.3f} at k = {kx}.")
        if n1 > 1 and nx > 1 and c1[2] > 1 and cx[2] > 1 and abs(d) > 2 * pooled:
            txt += " " + _premise_reading(d, (c1[0] - m1, cx[0] - mx), (s1, sx, c1[1], cx[1]), k1, kx)
    return txt


def _premise_reading(d: float, costs: tuple[float, float], stds: tuple[float, ...], k1: int, kx: int) -> str:
    """What a change of utility with k means for the extrapolated epsilons: the premise is about
    the NOISE (same noise on the average -> same cost); averaging more clients is a separate effect."""
    pooled = math.sqrt(sum(v ** 2 for v in stds) / len(stds))
    same_cost = abs(costs[1] - costs[0]) <= 2 * pooled
    cost = (f"The noise's cost changes by {costs[1] - costs[0]:+.3f} from k = {k1} to k = {kx} (pooled seed "
            f"std of the four cells {pooled:.3f}): ")
    if not same_cost:
        return cost + ("the noise's cost itself depends on k, so an epsilon extrapolated from k = "
                       f"{k1} does not carry its utility; the headline cells should be read with this.")
    if d >= 0:
        return cost + ("the same noise on the average costs the same, as the premise says; the rise comes from "
                       "more clients per round (less sampling variance, more users seen per round), with or "
                       "without noise, which the extrapolated run has too. The headline cells, measured "
                       f"at k = {k1}, therefore UNDERSTATE what the extrapolated run (k far above {kx}) reaches: "
                       "a conservative reading of every extrapolated epsilon.")
    return cost + ("the same noise costs the same, but utility falls with more clients per round; the "
                   f"headline cells, measured at k = {k1}, OVERSTATE what the extrapolated run reaches.")


def _headline_finding(st: dict[str, Any], head: dict) -> str:
    """Which cells reach 0.95x centralized."""
    ref = head["cen"][0]
    if math.isnan(ref):
        return "- **Versus centralized**: centralized reference not run yet."
    ok = [f"{ALGO[a]} {_pop(n)} ε {e:g} ({m / ref:.2f}x)" for (a, n, e), (m, _, k) in head["grid"].items()
          if e is not None and k and m >= 0.95 * ref]
    done = sum(1 for (a, n, e), v in head["grid"].items() if e is not None and v[2])
    return (f"- **Versus centralized** ({ref:.3f}; public start alone {head['pre']:.3f}): "
            f"{len(ok)} of {done} measured DP cells reach ≥ 0.95x centralized"
            + (": " + "; ".join(ok) + "." if ok else "."))


def _compare_finding(st: dict[str, Any], head: dict) -> str:
    """DP-FedEmb versus DP-FedAvg cell by cell (difference beyond 2 pooled std, or 0.02 with one seed)."""
    g, wins = head["grid"], {"DP-FedEmb": [], "DP-FedAvg": [], "tie": []}
    for (a, n, e), (m, s, k) in g.items():
        if a != "dp-fedemb" or not k or not g.get(("dp-fedavg", n, e), (0, 0, 0))[2]:
            continue
        m2, s2, _ = g[("dp-fedavg", n, e)]
        thr = 0.02 if math.isnan(s) or math.isnan(s2) else 2 * math.sqrt((s ** 2 + s2 ** 2) / 2)
        who = "tie" if abs(m - m2) <= thr else ("DP-FedEmb" if m > m2 else "DP-FedAvg")
        wins[who].append(f"{'no noise' if e is None else _pop(n) + ' ε ' + format(e, 'g')} ({m - m2:+.3f})")
    if not any(wins.values()):
        return "- **DP-FedEmb vs DP-FedAvg**: no cell has both yet."
    return ("- **DP-FedEmb vs DP-FedAvg** (ahead when the difference exceeds 2 pooled seed std, "
            "0.02 with one seed): " + "; ".join(f"{w}{'' if w == 'tie' else ' ahead'} in {len(v)}"
                                                 + (f" [{', '.join(v)}]" if v else "")
                                                 for w, v in wins.items()) + ".")


def _population_finding(st: dict[str, Any], head: dict) -> str:
    """Utility at epsilon 1 and 2 as the population grows."""
    parts = []
    for a in ALGOS:
        for e in FIG_EPS:
            pts = [(n, head["grid"][(a, n, e)][0]) for n in head["pops"]
                   if (a, n, e) in head["grid"] and head["grid"][(a, n, e)][2]]
            if len(pts) > 1:
                parts.append(f"{ALGO[a]} ε {e:g}: " + " -> ".join(f"{m:.3f} ({_pop(n)})" for n, m in pts))
    return ("- **Population** (same runs' utility as N' grows, noise shrinking): " + "; ".join(parts) + "."
            if parts else "- **Population**: fewer than two populations measured yet.")


def reused(lk: Lookup, st: dict[str, Any], wk: Path) -> str:
    """' (... are fedemb_glyphs' runs in ...)' for the runs taken from its results.json."""
    names = {fg.pre_key(REGIME, fg.WIDTH_MAIN): "the public pretraining",
             central_job(st, 0)["key"]: "centralized seed 0"}
    got = [v for k, v in names.items() if k in lk.base and k not in lk.mine]
    return f" ({' and '.join(got)}: fedemb_glyphs' runs in `{wk}/results.json`)" if got else ""


def write_report(st: dict[str, Any], lk: Lookup, info: dict[str, Any], timing: dict[str, Any],
                 doc: Path, work: Path, args: argparse.Namespace) -> None:
    """Write the results page (atomically) and its two PNGs next to it in img/."""
    from dpemb.atomic import atomic_write_text

    img = doc.parent / "img"
    img.mkdir(parents=True, exist_ok=True)
    z0 = z0_for(st, info["train"]["users"])
    parts = plan(st, z0)
    wk = work.relative_to(ROOT) if work.is_relative_to(ROOT) else work
    L = ["# DP-FedEmb at scale: extrapolation premise and headline (face-like glyphs)\n",
         (f"Produced by `{command(args)}` from the repository root (issue #11). Runs are cached "
         f"in `{wk}/{RESULTS_FILE}`{reused(lk, st, wk)}; a re-run resumes. The page's numbers, without the "
         f"runs' private training diagnostics, are in `data/{RESULTS_FILE}` beside it, from which "
         "`--report-only` rewrites it in a fresh clone. Cells of runs that "
         "have not finished read 'n/a (not run)'; '[n=1]' marks fewer seeds than planned.\n")]
    note = scope(st, lk, parts, info["train"]["users"])
    L += [note + "\n", *protocol(st, info, lk, z0)]
    prem = premise_section(st, lk, z0, img)
    head = headline_section(st, lk, img)
    lev, moon, large = lever_section(st, lk), moonshot_section(st, lk), large_section(st, lk)
    curve, long = central_curve_section(st, lk, img), long_section(st, lk)
    L += (prem[0] + head[0] + curve[0] + lev[0] + moon[0] + large[0] + long[0]
          + privacy_table(st, lk, info["train"]["users"]))
    found = findings(st, prem[1], head[1],
                     curve[1] + reference_warning(st, lk) + lev[1] + moon[1] + large[1] + long[1])
    L += timing_section(st, lk, timing, parts) + found
    atomic_write_text(doc, "\n".join(L) + "\n")
    if doc.resolve() == REAL_DOC.resolve():  # the real page: its headline too
        from results_page import update_section

        update_section(ROOT / "docs", "scale", "\n".join(summary(args, head[0], found, note)))


def scope(st: dict[str, Any], lk: Lookup, parts: dict[str, list[dict[str, Any]]], users: int) -> str:
    """What the page's ε covers (epsilon_scope), from the records of its planned runs."""
    from epsilon_scope import scope_note

    recs = {j["key"]: r for jobs in parts.values() for j in jobs if (r := lk.get(j["key"]))}
    pops = sorted({j["population"] for jobs in parts.values() for j in jobs if j.get("population")})
    return scope_note(recs.values(), users=users,
                      headline=f"Every ε on this page (N' = {pop_range(pops)} users)" if pops else "Every ε on this page",
                      source="each run's `eps_sim`, `fedemb_glyphs.privacy_numbers`",
                      earlier="; the knobs came from fedemb_glyphs' tuning and docs/DEFAULTS.md")


def summary(args: argparse.Namespace, head: list[str], found: list[str], note: str) -> list[str]:
    """The docs/RESULTS.md section: the headline table and the generated findings."""
    table = [ln for ln in head if ln.startswith("|")]
    return ["## DP-FedEmb at scale: populations 100k-10M, the extrapolation premise\n",
            (f"`{command(args)}`. Recall@FAR=1e-3 on the TEST split (mean ± std over seeds, in brackets "
             "the difference to centralized training from the same public start with the same softmax loss, "
             "1000 steps, flat from there; centralized ArcFace trained far longer is the higher reference of "
             "parts 4-6 below); epsilon by the paper's "
             "extrapolation (RDP, user-level, add/remove, delta = 1/N'). The premise test, the population "
             "figure, the protocol and the run times: [RESULTS_SCALE.md](RESULTS_SCALE.md).\n"),
            note + "\n", *table, "", "![population](img/scale_population.png)", "", *found[1:]]


if __name__ == "__main__":
    raise SystemExit(main())

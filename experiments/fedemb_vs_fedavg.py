"""DP-FedEmb vs DP-FedAvg at equal epsilon, each with its users per virtual client (K)
tuned on the VALIDATION split, in both glyph regimes (issue #11, goal 5).

    .venv/bin/python experiments/fedemb_vs_fedavg.py                 # everything (resumes)
    .venv/bin/python experiments/fedemb_vs_fedavg.py --part select test  # without the published row
    .venv/bin/python experiments/fedemb_vs_fedavg.py --quick         # smoke test, /tmp

Protocol. Each algorithm keeps the knobs fedemb_glyphs selected for it on validation
(its GRID at K = 4; `fedemb_glyphs.best_knobs`). Here only K varies, over K_GRID, at
M = 8 clients per round. K is chosen separately for every (regime, algorithm, cell) on
the validation split (one seed), where a cell is an extrapolated population N' and an
epsilon (RDP, user-level, add/remove-one-user, delta = 1/N'; z calibrated so that the
run reported as N' users has that epsilon, as in fedemb_scale). The chosen K is then
run with 3 seeds on the TEST split. The handwriting table also gets the authors'
published EMNIST configuration (shared/REFERENCE.md part D) as a row, with their knobs
and the same epsilon (part "published": 13.1M local images per run, 41 to 49 minutes
each on one of the 2 cores, two at a time).

Runs reuse fedemb_glyphs' data and public pretraining in its work folder and are cached
in ``<work>/vs_results.json``; the page is docs/RESULTS_VS.md.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the worker processes inherit it
fg = importlib.import_module("fedemb_glyphs")
sc = importlib.import_module("fedemb_scale")  # statistics, cost model, cache helpers

ALGOS = ("dp-fedemb", "dp-fedavg")
REGIMES = ("face", "hand")
K_GRID = (4, 16, 32)
CELLS = ((100_000, 2.0), (1_000_000, 2.0))  # (N', epsilon)
M = 8
SEEDS = 3
NOISE_SEED0, SEED_STRIDE = 4321, 1000
# the authors' published EMNIST command (shared/REFERENCE.md part D): K 8, M 32, 8 local
# epochs of batch 32, Nmax 2048, client SGD lr 5e-3 momentum 0.9, head lr x100, server
# lr 0.02 (SGD, momentum 0.9), clip 1, 200 rounds; their fresh head is Glorot-initialised
PUBLISHED = dict(K=8, M=32, rounds=200, clip=1.0,
                 fed=dict(local_epochs=8, local_batch_size=32, max_examples_per_client=2048, client_lr=5e-3,
                          client_momentum=0.9, head_lr_scale=100.0, server_lr=0.02, server_momentum=0.9,
                          head_init="glorot"))
RESULTS_FILE = "vs_results.json"
REAL_DOC = ROOT / "docs" / "RESULTS_VS.md"
QUICK_DOC = Path("/tmp/dpemb_vs_quick/RESULTS_VS.md")


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the plan depends on (quick: one regime, two K, one cell, one seed, few rounds)."""
    q = args.quick
    regs = fg.regimes(q)
    return {"quick": q, "regs": regs, "regimes": ("hand",) if q else REGIMES, "ks": (4, 16) if q else K_GRID,
            "cells": CELLS[:1] if q else CELLS, "seeds": 1 if q else SEEDS,
            "rounds": {r: (6 if q else regs[r]["rounds"]) for r in REGIMES},
            "parts": ("select", "test", "published") if "all" in args.part else tuple(args.part)}


def knobs_of(base: dict[str, Any], st: dict[str, Any], regime: str, algo: str) -> dict[str, Any]:
    """fedemb_glyphs' validation-selected knobs of this algorithm in this regime."""
    return fg.best_knobs(base, regime, st["regs"][regime], algo)


def job(st: dict[str, Any], base: dict[str, Any], regime: str, algo: str, K: int, cell: tuple[int, float] | None,
        seed: int, split: str) -> dict[str, Any]:
    """One federated run in fedemb_glyphs' job format; ``cell`` None: no noise."""
    reg, knobs = st["regs"][regime], knobs_of(base, st, regime, algo)
    fed = {**fg.BASE_FED, "algorithm": algo, "M": M, "K": K, "max_examples_per_client": reg["max_examples"], **knobs}
    noise = "np" if cell is None else f"e{cell[1]:g}@{sc._pop(cell[0])}"
    ks = "-".join(f"{k}{v}" for k, v in sorted(knobs.items())) or "base"
    key = f"vs/{regime}/{algo}/K{K}/M{M}/r{st['rounds'][regime]}/{noise}/{ks}/s{seed}@{split}"
    return fg.seeded_fed_job(key, regime, st["rounds"][regime], fed, knobs, None if cell is None else cell[1],
                             seed=seed, noise_seed=NOISE_SEED0 + SEED_STRIDE * seed,
                             population=None if cell is None else cell[0], eval_split=split)


def published_job(st: dict[str, Any], cell: tuple[int, float], seed: int) -> dict[str, Any]:
    """The authors' EMNIST configuration on the handwriting regime at ``cell``."""
    p = PUBLISHED
    rounds = 2 if st["quick"] else p["rounds"]
    fed = {**fg.BASE_FED, "algorithm": "dp-fedemb", "M": p["M"], "K": p["K"], **p["fed"],
           **({"local_epochs": 1} if st["quick"] else {})}  # quick: a smoke test of the wiring
    key = f"vs/hand/published/K{p['K']}/M{p['M']}/r{rounds}/e{cell[1]:g}@{sc._pop(cell[0])}/s{seed}@test"
    return fg.seeded_fed_job(key, "hand", rounds, fed, p["fed"], cell[1], seed=seed,
                             noise_seed=NOISE_SEED0 + SEED_STRIDE * seed, population=cell[0], clip=p["clip"])


def chosen_k(st: dict[str, Any], lk: sc.Lookup, base: dict[str, Any], regime: str, algo: str,
             cell: tuple[int, float]) -> int | None:
    """The K with the best VALIDATION score at ``cell`` (None until every K has run)."""
    scores = [(lk.get(job(st, base, regime, algo, K, cell, 0, "validation")["key"]), K) for K in st["ks"]]
    if any(r is None for r, _ in scores):
        return None
    return max(scores, key=lambda s: s[0]["final"])[1]


def plan(st: dict[str, Any], lk: sc.Lookup, base: dict[str, Any]) -> list[dict[str, Any]]:
    """Selection runs first (every K, every cell), then the test runs of the chosen K (known
    only once its selection has run: call again), then the published configuration."""
    jobs = []
    for regime in st["regimes"]:
        for cell in st["cells"]:
            for algo in ALGOS:
                if "select" in st["parts"]:
                    jobs += [job(st, base, regime, algo, K, cell, 0, "validation") for K in st["ks"]]
                K = chosen_k(st, lk, base, regime, algo, cell)
                if "test" in st["parts"] and K is not None:
                    jobs += [job(st, base, regime, algo, K, cell, s, "test") for s in range(st["seeds"])]
    if "published" in st["parts"]:
        jobs += [published_job(st, c, s) for c in st["cells"][::-1] for s in range(st["seeds"])]
    return jobs


def execute(args: argparse.Namespace, st: dict[str, Any], work: Path, results: dict[str, Any],
            base: dict[str, Any]) -> None:
    """Data and pretraining (fedemb_glyphs'), then the plan until nothing is left to run."""
    deadline = time.time() + 60 * args.budget_min if args.budget_min else math.inf
    for regime in st["regimes"]:
        fg.build_data(work, regime, st["regs"][regime], args.font_dir)
        pre = fg.pretrain_job(regime, st["regs"][regime])
        if pre["key"] not in base:
            fg.run_all([pre], results, work, args.jobs, deadline, RESULTS_FILE, sc.perf_of(args))
    while time.time() < deadline:
        lk = sc.Lookup(results, base)
        todo = [j for j in plan(st, lk, base) if lk.get(j["key"]) is None]
        if not todo:
            return
        # run the selection first: the test runs it unlocks join the next pass
        batch = [j for j in todo if j["eval_split"] == "validation"] or todo
        print(f"plan: {sc.estimate(batch, {**base, **results}, args.jobs)}", flush=True)
        fg.run_all(batch, results, work, args.jobs, deadline, RESULTS_FILE, sc.perf_of(args))


# ----------------------------------------------------------------------------- report


def head_backbone_ratio(info: dict[str, Any]) -> float:
    """DP-FedAvg's global head (identities x embedding) over the backbone's parameters."""
    return info["train"]["identities"] * fg.EMB / fg._backbone_params(fg.WIDTH_MAIN)


def regime_scope(st: dict[str, Any], lk: sc.Lookup, base: dict[str, Any], regime: str, users: int) -> str:
    """What one regime's ε covers (epsilon_scope), from the records of its planned runs."""
    from epsilon_scope import scope_note

    cells = " and ".join(f"{e:g} at {sc._pop(n)} users" for n, e in st["cells"])
    return scope_note([r for j in plan(st, lk, base) if j["regime"] == regime and (r := lk.get(j["key"]))],
                      users=users, headline=f"Every ε of this regime (ε {cells})",
                      source="each run's `eps_sim`, `fedemb_glyphs.privacy_numbers`",
                      earlier="; the other knobs came from fedemb_glyphs' tuning")


def regime_section(st: dict[str, Any], lk: sc.Lookup, base: dict[str, Any], regime: str,
                   info: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The selection and test tables of one regime, and its findings."""
    S, ratio = st["seeds"], head_backbone_ratio(info)
    L = [f"## {st['regs'][regime]['title']}\n", regime_scope(st, lk, base, regime, info["train"]["users"]) + "\n",
         (f"{info['train']['users']:,} training users, {info['train']['identities']:,} training identities. "
          f"DP-FedAvg aggregates a global head of {info['train']['identities']:,} x {fg.EMB} parameters, "
          f"{ratio:.1f}x the backbone's {fg._backbone_params(fg.WIDTH_MAIN):,}: clipped and noised with it. "
          f"{st['rounds'][regime]} rounds, M = {M}"
          + (f"; a client trains on at most {st['regs'][regime]['max_examples']} examples (Nmax), so a larger K "
             "spreads the same number of examples over more users" if st["regs"][regime]["max_examples"] else
             "; a client trains on all its users' examples, so a larger K means more examples and more "
             "identities per client")
          + ".\n"),
         "Knobs (fedemb_glyphs' validation selection): "
         + "; ".join(f"{fg.ALGO_NAME[a]}: {fg._knobs(knobs_of(base, st, regime, a))}" for a in ALGOS) + ".\n",
         *([f"The public pretraining alone, every run's start, scores {pre['final']:.3f} on the test split.\n"]
           if (pre := lk.get(fg.pre_key(regime, fg.WIDTH_MAIN))) else []),
         "| N' | ε | algorithm | validation R@1e-3 by K | chosen K | TEST R@1e-3 (chosen K) |",
         "|---|---|---|---|---|---|"]
    found = []
    for cell in st["cells"]:
        res = {}
        for algo in ALGOS:
            val = []
            for K in st["ks"]:
                r = lk.get(job(st, base, regime, algo, K, cell, 0, "validation")["key"])
                val.append(f"K {K}: " + ("n/a" if r is None else f"{r['final']:.3f}"))
            K = chosen_k(st, lk, base, regime, algo, cell)
            m = sc.stats(lk.seeds(lambda s, K=K, algo=algo: job(st, base, regime, algo, K, cell, s, "test"), S)) \
                if K is not None else (math.nan, math.nan, 0)
            res[algo] = (m, K)
            L.append(f"| {sc._pop(cell[0])} | {cell[1]:g} | {fg.ALGO_NAME[algo]} | {', '.join(val)} | "
                     f"{K if K is not None else 'n/a'} | {sc.cell(*m, S)} |")
        if regime == "hand" and "published" in st["parts"]:
            m = sc.stats(lk.seeds(lambda s: published_job(st, cell, s), S))
            L.append(f"| {sc._pop(cell[0])} | {cell[1]:g} | DP-FedEmb, the authors' EMNIST configuration "
                     f"(K {PUBLISHED['K']}, M {PUBLISHED['M']}, {published_job(st, cell, 0)['rounds']} rounds) | - | "
                     f"{PUBLISHED['K']} | {sc.cell(*m, S)} |")
            found.append(published_verdict(cell, m, res))
        found.append(verdict(regime, cell, res))
    if regime == "hand":
        L.append("\n" + published_cost(st, info))
    return L + [""], [f for f in found if f]


def published_cost(st: dict[str, Any], info: dict[str, Any]) -> str:
    """What one run of the authors' configuration costs here, in local images (their Nmax
    caps a client's whole stream of ``local_epochs`` passes, as ``client_batches`` does)."""
    p, per_user = PUBLISHED, info["train"]["examples"] / info["train"]["users"]
    j = published_job(st, CELLS[0], 0)
    rounds, epochs = j["rounds"], j["fed"]["local_epochs"]
    client = min(p["K"] * per_user * epochs, p["fed"]["max_examples_per_client"])
    images = rounds * p["M"] * client
    k16 = st["rounds"]["hand"] * M * min(16 * per_user, st["regs"]["hand"]["max_examples"] or math.inf)
    return (f"The authors' configuration trains {images / 1e6:.1f}M local images per run ({rounds} rounds x "
            f"{p['M']} clients x {client:.0f} images: {epochs} passes over {p['K'] * per_user:.0f} examples, cut at "
            f"their Nmax {p['fed']['max_examples_per_client']}), {images / k16:.0f}x a K = 16 run of this table.")


def published_verdict(cell: tuple[int, float], m: tuple[float, float, int], res: dict[str, Any]) -> str:
    """The authors' configuration against the better of the two tuned algorithms at ``cell``
    (by more than 2 pooled seed std, as ``verdict``)."""
    best = max(((r, K, a) for a, (r, K) in res.items() if r[2]), key=lambda x: x[0][0], default=None)
    if not m[2] or best is None:
        return ""
    (b, K, algo), sd = best, math.sqrt(((m[1] if m[2] > 1 else 0.01) ** 2
                                         + (best[0][1] if best[0][2] > 1 else 0.01) ** 2) / 2)
    d = m[0] - b[0]
    who = "ahead of" if d > 2 * sd else "behind" if -d > 2 * sd else "level with"
    return (f"hand, {sc._pop(cell[0])} ε {cell[1]:g}: the authors' EMNIST configuration {m[0]:.3f} "
            f"(n = {m[2]}) is {who} the better tuned run, {fg.ALGO_NAME[algo]} K {K} {b[0]:.3f} "
            f"({d:+.3f}); it trains {PUBLISHED['M']} clients per round on up to "
            f"{PUBLISHED['fed']['max_examples_per_client']} local images each")


def verdict(regime: str, cell: tuple[int, float], res: dict[str, Any]) -> str:
    """Who is ahead at this cell: by more than 2 pooled seed std (0.02 with one seed)."""
    (a, ka), (b, kb) = res["dp-fedemb"], res["dp-fedavg"]
    if not (a[2] and b[2]):
        return ""
    sd = math.sqrt(((a[1] if a[2] > 1 else 0.01) ** 2 + (b[1] if b[2] > 1 else 0.01) ** 2) / 2)
    d = a[0] - b[0]
    who = "DP-FedEmb ahead" if d > 2 * sd else "DP-FedAvg ahead" if -d > 2 * sd else "tie"
    return (f"{regime}, {sc._pop(cell[0])} ε {cell[1]:g}: {who} ({d:+.3f}; DP-FedEmb K {ka} "
            f"{a[0]:.3f}, DP-FedAvg K {kb} {b[0]:.3f}, n = {a[2]}/{b[2]})")


READING = """## What separates the regimes (the mechanism the findings point to)

DP-FedAvg sends its global head with the backbone, so the head is clipped and noised with
it. In the face-like regime every identity belongs to one user: the head is {face:.1f}x the
backbone, a client's K users touch only K of its rows, and the clip budget and the noise
are spread over parameters the client barely trained; DP-FedEmb sends the backbone alone.
In the handwriting-like regime every user writes the same identities: the head is
{hand:.1f}x the backbone, its rows are trained by every client, and what it learns is
kept from round to round, while DP-FedEmb's fresh head starts again in every client.
There neither algorithm gets far from the public start at ε 2, and the authors'
configuration (32 clients per round of up to 2048 images each) does not either."""


def write_report(st: dict[str, Any], lk: sc.Lookup, base: dict[str, Any], work: Path, doc: Path,
                 args: argparse.Namespace) -> None:
    """The results page, atomically."""
    from dpemb.atomic import atomic_write_text

    L = ["# DP-FedEmb vs DP-FedAvg with K tuned on validation (issue #11, goal 5)\n",
         f"Produced by `.venv/bin/python experiments/fedemb_vs_fedavg.py{' --quick' if st['quick'] else ''}`; "
         f"runs cached in `{RESULTS_FILE}` of the work folder; a re-run resumes. "
         f"{__doc__.split('Protocol. ')[1].split('Runs reuse')[0].strip()}\n",
         f"Seeds: selection 1 (seed 0, validation split), test {st['seeds']}; seed s sets the noise, sampling "
         f"and client randomness {NOISE_SEED0} + {SEED_STRIDE} s. Cells read 'n/a' until their runs finish.\n"]
    found: list[str] = []
    notes: list[str] = []
    for regime in st["regimes"]:
        info = sc.load_json(work / "data" / regime / "info.json")
        sec, f = regime_section(st, lk, base, regime, info)
        L += sec
        found += f
        notes.append(f"*{st['regs'][regime]['title']}*: {sec[1]}")
    L += ["## Findings (generated)\n"] + ([f"- {f}" for f in found] or ["- no cell has both algorithms' test runs yet"])
    ratios = {r: head_backbone_ratio(i) for r in st["regimes"] if (i := sc.load_json(work / "data" / r / "info.json"))}
    if len(ratios) == 2:
        L += ["", READING.format(face=ratios["face"], hand=ratios["hand"])]
    atomic_write_text(doc, "\n".join(L) + "\n")
    if doc.resolve() == REAL_DOC.resolve():  # the real page: its findings in docs/RESULTS.md too
        from results_page import update_section

        update_section(ROOT / "docs", "vs", "\n".join([
            "## DP-FedEmb vs DP-FedAvg, K tuned on validation per algorithm\n",
            "`.venv/bin/python experiments/fedemb_vs_fedavg.py`: both regimes, K in "
            f"{', '.join(map(str, st['ks']))} chosen on the validation split for each algorithm and (N', ε), "
            f"{st['seeds']} seeds on the test split; tables in [RESULTS_VS.md](RESULTS_VS.md).\n",
            *notes, *([f"- {f}" for f in found] or ["- no cell has both algorithms' test runs yet"])]))


def main() -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", nargs="+", choices=("select", "test", "published", "all"), default=["all"],
                    help="parts to run (test runs need the selection's results)")
    ap.add_argument("--work", default=str(ROOT / "runs" / "fedemb_glyphs"), help="fedemb_glyphs' work folder")
    ap.add_argument("--doc", help=f"results page (default {REAL_DOC.relative_to(ROOT)}; --quick: {QUICK_DOC})")
    sc.add_run_flags(ap)
    args = ap.parse_args()
    st = settings(args)
    work = Path("/tmp/dpemb_vs_quick/work") if args.quick else Path(args.work)
    doc = Path(args.doc) if args.doc else (QUICK_DOC if args.quick else REAL_DOC)
    work.mkdir(parents=True, exist_ok=True)
    doc.parent.mkdir(parents=True, exist_ok=True)
    results = sc.load_json(work / RESULTS_FILE)
    base = sc.load_json(work / "results.json")  # fedemb_glyphs' runs (tuning, pretraining), read only
    if not args.report_only:
        execute(args, st, work, results, base)
    write_report(st, sc.Lookup(results, base), base, work, doc, args)
    print(f"wrote {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

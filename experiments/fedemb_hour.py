#!/usr/bin/env python
"""Issue #11's figures from nothing in under an hour on 2 cores: DP-FedEmb's
privacy-utility curve with error bars, the population figure and the extrapolation
premise, on the face-like glyph regime of ``fedemb_glyphs.py``.

    .venv/bin/python experiments/fedemb_hour.py                # docs/RESULTS_HOUR.md
    .venv/bin/python experiments/fedemb_hour.py --quick        # smoke test (a few minutes)
    .venv/bin/python experiments/fedemb_hour.py --report-only  # rewrite the page from results

It builds its own data and public pretraining in ``runs/fedemb_hour`` (``--work``), so
its wall time is the whole cost. A re-run resumes from ``hour_results.json`` there.

What makes it fit the hour is the fastest configuration that keeps DP-FedEmb's utility,
measured in part 3 of docs/RESULTS_SCALE.md: the ArcFace loss with the local head over
the client's own identities (0.818 at epsilon 2 / 100k users, against 0.823 with the head
over all identities, in 106 s instead of about 200 s a run). The premise is tested at
the curve's noisiest cell (epsilon 0.5 at 100k) and stops at k = 4 (k = 8 is a 13-minute
run alone); the population figure leaves out 10k users.
The full study, with DP-FedAvg, DP-FTRL-FedEmb, softmax, k = 8, 10k users and the levers,
is ``fedemb_scale.py`` (about 5 h on 2 cores).

Privacy: as in fedemb_scale.py. User-level (epsilon, delta)-DP under add/remove-one-user,
Gaussian noise on the clipped sum of the M virtual clients' backbone updates (sensitivity
2C), Poisson sampling, RDP accountant, epsilon of the run extrapolated to N' users by
the paper's convention, delta = 1/N'. The local head never leaves its client.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the worker processes inherit it
fg = importlib.import_module("fedemb_glyphs")
sc = importlib.import_module("fedemb_scale")  # jobs, statistics, plots and findings shared with it

LEVER = next(lv for lv in sc.LEVERS if lv[0] == "arcface-local-head")
CURVE_POP = 100_000  # the privacy-utility curve: every epsilon at this population
POPS = (100_000, 1_000_000, 10_000_000)  # the population figure: sc.FIG_EPS at each
# the premise at the smallest epsilon of the curve: with ArcFace the noise of epsilon 8 at
# 100k costs almost nothing (0.003), so a premise tested there could not fail
PREMISE_EPS, PREMISE_POP = 0.5, 100_000
RESULTS_FILE, TIMING_FILE = "hour_results.json", "hour_timing.json"
REAL_DOC = ROOT / "docs" / "RESULTS_HOUR.md"
QUICK_DOC = Path("/tmp/dpemb_hour_quick/RESULTS_HOUR.md")


def settings(quick: bool) -> dict[str, Any]:
    """The plan's knobs (``sc.fed_run`` and ``sc.central_job`` read K, rounds and reg)."""
    return {"quick": quick, "reg": fg.regimes(quick)[sc.REGIME], "K": 16, "rounds": 6 if quick else 150,
            "ks": (1, 2) if quick else (1, 2, 4), "premise_seeds": 1 if quick else 2,
            "headline_seeds": 1 if quick else 3, "eps": (8.0, 2.0) if quick else sc.EPSILONS,
            "pops": (CURVE_POP,) if quick else POPS}


# ----------------------------------------------------------------------------- jobs


def dp_run(st: dict[str, Any], seed: int, eps: float | None = None, pop: int | None = None,
           k: int = 1, z0: float | None = None) -> dict[str, Any]:
    """DP-FedEmb with ArcFace and the local head: calibrated to (eps, pop); or M = 8k with
    z = z0 k (the premise); or without noise."""
    if z0 is not None and k > 1:
        return sc.fed_run(st, "dp-fedemb", seed, M=sc.M0 * k, z=z0 * k, lever=LEVER,
                          tag=f"e{PREMISE_EPS:g}@{sc._pop(PREMISE_POP)}x{k}")
    if z0 is not None:  # k = 1 is the curve's run at the premise's (epsilon, N')
        return dp_run(st, seed, PREMISE_EPS, PREMISE_POP)
    return sc.fed_run(st, "dp-fedemb", seed, M=sc.M0 * k, eps=eps, pop=pop, lever=LEVER)


def cells(st: dict[str, Any]) -> list[tuple[int, float]]:
    """(N', epsilon) of the curve, the population figure and issue #11's goals at 1M and 10M."""
    out = [(CURVE_POP, e) for e in st["eps"]]
    out += [(n, e) for n in st["pops"] for e in sc.FIG_EPS if (n, e) not in out]
    return out + [c for c in sc.GOAL2_CELLS if c[0] in st["pops"] and c not in out]


def z0_for(st: dict[str, Any], n_train: int) -> float:
    """The simulation z (M = 8) of PREMISE_EPS at PREMISE_POP."""
    spec = fg.make_spec(n_train, {"algorithm": "dp-fedemb", "M": sc.M0, "K": st["K"]}, st["rounds"])
    return fg.calibrate(spec, PREMISE_EPS, PREMISE_POP)


def plan(st: dict[str, Any], z0: float) -> list[dict[str, Any]]:
    """Every run, deduplicated, the longest first (so 2 processes finish together)."""
    jobs = []
    for s in range(st["headline_seeds"]):
        jobs += [sc.central_job(st, s), sc.central_job(st, s, "arcface"), dp_run(st, s)]
        jobs += [dp_run(st, s, e, n) for n, e in cells(st)]
    for s in range(st["premise_seeds"]):
        jobs += [dp_run(st, s, k=k, z0=z0) for k in st["ks"]] + [dp_run(st, s, k=st["ks"][-1])]
    seen: set[str] = set()
    jobs = [j for j in jobs if not (j["key"] in seen or seen.add(j["key"]))]
    return sorted(jobs, key=lambda j: -sc.run_cost(j, sc.US_PER_USER_ROUND, {"central": 50.0,
                                                                               "central_steps": j.get("steps", 1)}))


def execute(args: argparse.Namespace, st: dict[str, Any], work: Path, results: dict[str, Any]) -> dict[str, Any]:
    """Data, public pretraining and every planned run; returns the timing record."""
    t0 = time.time()
    deadline = t0 + 60 * args.budget_min if args.budget_min else math.inf
    fresh = not (work / "data" / sc.REGIME / "info.json").exists()
    info = fg.build_data(work, sc.REGIME, st["reg"], args.font_dir)
    print(f"data: train {info['train']}, test {info['eval']} ({time.time() - t0:.0f} s)", flush=True)
    perf = sc.perf_of(args)
    fg.run_all([fg.pretrain_job(sc.REGIME, st["reg"])], results, work, args.jobs, deadline, RESULTS_FILE, perf)
    todo = [j for j in plan(st, z0_for(st, info["train"]["users"])) if j["key"] not in results]
    print("plan: " + sc.estimate(todo, results, args.jobs), flush=True)
    fg.run_all(todo, results, work, args.jobs, deadline, RESULTS_FILE, perf)
    return {"wall_s": time.time() - t0, "started": t0, "finished": time.strftime("%Y-%m-%d %H:%M"),
            "from_nothing": fresh, "runs_done": sum(1 for j in todo if j["key"] in results),
            "runs_planned": len(todo), "jobs": args.jobs, "device": args.device}


def main() -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", help="work folder (default runs/fedemb_hour; --quick runs/fedemb_hour_quick)")
    ap.add_argument("--doc", help=f"results page (default {REAL_DOC.relative_to(ROOT)}; --quick: {QUICK_DOC})")
    sc.add_run_flags(ap)
    args = ap.parse_args()
    st = settings(args.quick)
    work = Path(args.work) if args.work else ROOT / "runs" / ("fedemb_hour_quick" if args.quick else "fedemb_hour")
    doc = sc.doc_path(args, REAL_DOC, QUICK_DOC)
    work.mkdir(parents=True, exist_ok=True)
    results = sc.load_json(work / RESULTS_FILE)
    timing = sc.load_json(work / TIMING_FILE) or {"invocations": []}
    if not args.report_only:
        ran = execute(args, st, work, results)
        if ran["runs_planned"] or ran["from_nothing"]:
            sc.save_invocation(work / TIMING_FILE, timing, ran)
    info = sc.load_json(work / "data" / sc.REGIME / "info.json")
    if not info:
        sys.exit(f"no data in {work}: run without --report-only first")
    write_report(st, sc.Lookup(results, {}), info, timing, doc, work, args)
    print(f"wrote {doc}")
    return 0


# ----------------------------------------------------------------------------- report


def curve_section(st: dict[str, Any], lk: sc.Lookup, img: Path) -> tuple[list[str], dict[str, Any]]:
    """Centralized references, the curve at CURVE_POP and the population table, with both plots."""
    S = st["headline_seeds"]
    cen = {loss: sc.stats(lk.seeds(lambda s, loss=loss: sc.central_job(st, s, loss), S))
           for loss in ("softmax", "arcface")}
    ref = max(m for m, _, n in cen.values() if n) if any(n for _, _, n in cen.values()) else math.nan
    pre = lk.get(fg.pre_key(sc.REGIME, fg.WIDTH_MAIN))
    grid = {c: sc.stats(lk.seeds(lambda s, c=c: dp_run(st, s, c[1], c[0]), S)) for c in cells(st)}
    clean = sc.stats(lk.seeds(lambda s: dp_run(st, s), S))
    cols = sorted({e for _, e in cells(st)}, reverse=True)
    L = ["## Privacy-utility curve and population\n",
         ("Recall@FAR=1e-3 on the test split, mean ± std over seeds; the ratio is to the BETTER "
          f"centralized run from the same public start at {st['reg']['central_steps']} steps ({ref:.3f}: softmax "
          f"{sc.cell(*cen['softmax'], S)}, ArcFace {sc.cell(*cen['arcface'], S)}), which is NOT converged (see "
          "the protocol: the goals are judged in RESULTS_SCALE.md part 6); public pretraining alone "
          f"{pre['final']:.3f}.\n" if pre else "public pretraining not run yet.\n"),
         "| N' | δ | " + " | ".join(f"ε {e:g}" for e in cols) + " | no noise |",
         "|---|---|" + "---|" * (len(cols) + 1)]
    ratio = (lambda m: f" ({m / ref:.3f}x)" if m == m and ref == ref else "")
    for n in st["pops"]:
        row = [sc.cell(*grid[(n, e)], S) + ratio(grid[(n, e)][0]) if (n, e) in grid else "-" for e in cols]
        L.append(f"| {sc._pop(n)} | {1 / n:.0e} | " + " | ".join(row) + f" | {sc.cell(*clean, S)}{ratio(clean[0])} |")
    _plot_curve(st, grid, clean, ref, pre, img / "hour_privacy_utility.png")
    L += ["", "![privacy-utility and population](img/hour_privacy_utility.png)", ""]
    return L, {"grid": grid, "clean": clean, "ref": ref, "pre": pre["final"] if pre else math.nan}


def _plot_curve(st: dict[str, Any], grid: dict, clean: tuple, ref: float, pre: dict | None, path: Path) -> None:
    """Left: utility versus epsilon at CURVE_POP; right: versus N' at epsilon 1 and 2."""
    plt = sc._plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    eps = sorted(e for n, e in grid if n == CURVE_POP)
    sc._errorbar(a1, eps, [grid[(CURVE_POP, e)] for e in eps], label=f"DP-FedEmb, N' = {sc._pop(CURVE_POP)}")
    a1.set_xscale("log")
    a1.set_xticks(eps, [f"{e:g}" for e in eps])
    a1.minorticks_off()
    for ax in (a1, a2):
        if clean[2]:
            ax.axhline(clean[0], color="tab:purple", ls="--", lw=1, label="DP-FedEmb without noise")
        if ref == ref:
            ax.axhline(ref, color="k", lw=1, label="centralized (non-private)")
        if pre:
            ax.axhline(pre["final"], color="gray", ls=":", lw=1, label="public pretraining only")
    for e in sc.FIG_EPS:
        ns = [n for n in st["pops"] if (n, e) in grid]
        sc._errorbar(a2, ns, [grid[(n, e)] for n in ns], label=f"DP-FedEmb, ε {e:g}")
    a2.set_xscale("log")
    sc._style(a1, "epsilon (RDP, user-level, add/remove, δ = 1/N')", "Privacy-utility, ArcFace + local head")
    sc._style(a2, "population N' (extrapolated; δ = 1/N')", "Population")
    sc._finish(plt, fig, path)


def premise_section(st: dict[str, Any], lk: sc.Lookup, z0: float, img: Path) -> tuple[list[str], dict]:
    """The premise table and plot (sc's plot); returns lines and the numbers its finding reads."""
    S = st["premise_seeds"]
    noisy = {k: sc.stats(lk.seeds(lambda s, k=k: dp_run(st, s, k=k, z0=z0), S)) for k in st["ks"]}
    ends = (st["ks"][0], st["ks"][-1])
    clean = {k: sc.stats(lk.seeds(lambda s, k=k: dp_run(st, s, k=k), S)) for k in ends}
    sens = fg.make_spec(10**6, {"algorithm": "dp-fedemb", "M": sc.M0, "K": st["K"]}, 1).sensitivity
    L = ["## The extrapolation premise\n",
         (f"M = {sc.M0}k clients per round and z = z0 k (z0 = {z0:.5f}: epsilon {PREMISE_EPS:g} at "
          f"N' = {sc._pop(PREMISE_POP)} for k = 1, the curve's noisiest cell), so the noise on the averaged update "
          f"({z0 * sens / sc.M0:.2e}) is the same at every k; the no-noise runs at k = {ends[0]} and "
          f"{ends[1]} separate the effect of more clients per round from the noise.\n"),
         "| k | M | z | R@1e-3 with noise | R@1e-3 no noise |", "|---|---|---|---|---|"]
    for k in st["ks"]:
        c = sc.cell(*clean[k], S) if k in clean else "-"
        L.append(f"| {k} | {sc.M0 * k} | {z0 * k:.5f} | {sc.cell(*noisy[k], S)} | {c} |")
    sc._plot_premise(st, noisy, clean, img / "hour_premise.png", (PREMISE_EPS, PREMISE_POP))
    return L + ["", "![premise](img/hour_premise.png)", ""], {"noisy": noisy, "clean": clean}


def timing_section(timing: dict[str, Any]) -> list[str]:
    """Every invocation's wall time; the total is the cost from nothing."""
    inv = timing.get("invocations", [])
    if not inv:
        return ["## Wall time\n", "Not recorded (only --report-only so far).\n"]
    total = sum(i["wall_s"] for i in inv)
    L = ["## Wall time\n", (f"{total / 60:.1f} min in {len(inv)} invocation(s), data and public pretraining "
                            "included; the first invocation started from an empty work folder: "
                            f"{'yes' if inv[0].get('from_nothing') else 'no'}.\n"),
         "| finished | processes | device | runs done / to do | wall min |", "|---|---|---|---|---|"]
    L += [f"| {i['finished']} | {i['jobs']} | {i['device']} | {i['runs_done']} / {i['runs_planned']} | "
          f"{i['wall_s'] / 60:.1f} |" for i in inv]
    return L + [""]


def findings(st: dict[str, Any], cur: dict[str, Any], prem: dict) -> list[str]:
    """Generated from the numbers: the goals of issue #11 that this configuration reaches."""
    ref, out = cur["ref"], ["## Findings (generated from the numbers above)\n"]
    goals = ((CURVE_POP, (2.0, 1.0, 0.5), 0.95), (1_000_000, (1.0, 0.5), 0.95), (10_000_000, (0.5,), 0.97))
    for n, es, g in goals:
        got = [(e, cur["grid"][(n, e)]) for e in es if (n, e) in cur["grid"] and cur["grid"][(n, e)][2]]
        if got and ref == ref:
            best = min(e for e, (m, _, _) in got if m >= g * ref) if any(m >= g * ref for _, (m, _, _) in got) else None
            txt = ", ".join(f"ε {e:g} {m / ref:.3f}x" for e, (m, _, _) in got)
            out.append(f"- **{sc._pop(n)} users** (goal ≥ {g:.2f}x centralized; here against the "
                       f"{st['reg']['central_steps']}-step run, not the converged one): {txt}; "
                       + (f"≥ {g:.2f}x of it down to ε {best:g}." if best is not None else f"below {g:.2f}x of it."))
    out.append(sc._premise_finding(st, prem))
    return out + [""]


def scope(st: dict[str, Any], lk: sc.Lookup, z0: float, users: int) -> str:
    """What the page's ε covers (epsilon_scope), from the records of its planned runs."""
    from epsilon_scope import scope_note

    return scope_note([r for j in plan(st, z0) if (r := lk.get(j["key"]))], users=users,
                      headline=f"Every ε on this page (N' = {sc.pop_range(st['pops'])} users)",
                      source="each run's `eps_sim`, `fedemb_glyphs.privacy_numbers`",
                      earlier="; the knobs and the ArcFace local head came from RESULTS_SCALE.md's levers, DP runs "
                              "on the same training users scored on validation")


def write_report(st: dict[str, Any], lk: sc.Lookup, info: dict[str, Any], timing: dict[str, Any], doc: Path,
                 work: Path, args: argparse.Namespace) -> None:
    """The page (atomically), its two PNGs in img/ next to it and, for the real page, its
    section of docs/RESULTS.md."""
    from dpemb.atomic import atomic_write_text
    from dpemb.privacy.accounting import describe_mechanism

    img = doc.parent / "img"
    img.mkdir(parents=True, exist_ok=True)
    n = info["train"]["users"]
    z0 = z0_for(st, n)
    spec = replace(fg.make_spec(n, {"algorithm": "dp-fedemb", "M": sc.M0, "K": st["K"]}, st["rounds"]),
                   noise_multiplier=z0)
    cmd = ".venv/bin/python experiments/fedemb_hour.py" + " --quick" * args.quick
    note = scope(st, lk, z0, n)
    wk = work.relative_to(ROOT) if work.is_relative_to(ROOT) else work
    L = ["# DP-FedEmb in one hour: privacy-utility, population and premise (face-like glyphs)\n",
         (f"Produced by `{cmd}` from the repository root (issue #11), from an empty work folder "
          f"(`{wk}`: data, public pretraining and every run; `{RESULTS_FILE}` there caches them, so a "
          "re-run resumes). The full study, with the baselines: [RESULTS_SCALE.md](RESULTS_SCALE.md).\n"),
         note + "\n",
         "## Protocol\n",
         (f"- **Data and utility**: as in RESULTS_SCALE.md: {n:,} private training users, one identity "
          f"each; Recall@FAR=1e-3 (exact, all pairs) on the TEST split ({info['eval']['users']} users of "
          "identities never trained on), at the last round. Nothing was tuned on this page's runs."),
         (f"- **DP-FedEmb**: K = {st['K']} users per virtual client, M = {sc.M0} per round, {st['rounds']} "
          f"rounds, knobs of RESULTS_SCALE.md, with the {LEVER[1]}: the configuration part 3 there "
          "measured as fast and as good as ArcFace with the head over all identities."),
         (f"- **Centralized**: non-private training on the same users from the same public start, softmax "
          f"and ArcFace, same optimiser settings, {st['reg']['central_steps']} steps of batch {fg.CENTRAL_BATCH}; "
          "ratios are to "
          "the better one. This reference is NOT converged (centralized ArcFace keeps rising with more steps: "
          "RESULTS_SCALE.md, 'Centralized training to convergence'), so the ratios here overstate how close "
          "DP-FedEmb comes; issue #11's goals are judged against the converged run in RESULTS_SCALE.md, part 6."),
         (f"- **Seeds**: curve and population {st['headline_seeds']}, premise {st['premise_seeds']}; seed s "
          f"sets the noise, sampling and client-randomness seed {sc.NOISE_SEED0} + {sc.SEED_STRIDE} s."),
         (f"- **Privacy**: {describe_mechanism(spec).rstrip('.')} (for ε {PREMISE_EPS:g} at "
          f"{sc._pop(PREMISE_POP)}; every cell calibrates its own z). RDP accountant, user-level, "
          "add/remove-one-user; epsilon of the run extrapolated to N' (M and z scaled by N'/N, the noise "
          "on the average unchanged), δ = 1/N'. At the simulated N the runs have no meaningful guarantee."),
         ""]
    cur = curve_section(st, lk, img)
    prem = premise_section(st, lk, z0, img)
    found = findings(st, cur[1], prem[1])
    L += cur[0] + prem[0] + timing_section(timing) + found
    atomic_write_text(doc, "\n".join(L) + "\n")
    if doc.resolve() == REAL_DOC.resolve():
        from results_page import update_section

        table = [ln for ln in cur[0] if ln.startswith("|")]
        update_section(ROOT / "docs", "hour", "\n".join(
            ["## DP-FedEmb in one hour (ArcFace, local head)\n",
             f"`{cmd}`; {timing_section(timing)[1].strip()} Details: [RESULTS_HOUR.md](RESULTS_HOUR.md).\n",
             note + "\n",
             *cur[0][1:2], *table, "", "![privacy-utility](img/hour_privacy_utility.png)", "", *found[1:]]))


if __name__ == "__main__":
    raise SystemExit(main())

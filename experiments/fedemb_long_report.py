"""The page of ``fedemb_long.py``: issue #11 goal 2 with both sides trained longer,
written from its public export (``public_results``: no private training diagnostics),
so that a fresh clone rewrites it (``--report-only``)."""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
fg = importlib.import_module("fedemb_glyphs")
sc = importlib.import_module("fedemb_scale")
fl = importlib.import_module("fedemb_long_plan")
pub = importlib.import_module("public_results")
scope_note = importlib.import_module("epsilon_scope").scope_note

ABOUT = ("Public numbers of docs/RESULTS_LONG.md (experiments/fedemb_long.py): run records without the "
         "private training diagnostics. `fedemb_long.py --report-only` rewrites the page from it.")


def context_of(results: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """Training users (the data's info) and the public start's score (its pretraining run)."""
    pre = results.get(fg.pre_key(sc.REGIME, fg.WIDTH_MAIN))
    return {"train_users": (info.get("train") or {}).get("users"), "public_start": pre and pre["final"]}


def ratio(m: float, ref: float) -> float:
    """m / ref (nan when either is missing)."""
    return m / ref if ref and not (math.isnan(m) or math.isnan(ref)) else math.nan


def goal_rows(st: dict[str, Any], lk: sc.Lookup, ref: tuple[float, float, int]) -> list[dict[str, Any]]:
    """Per goal cell: DP-FedEmb's stats, the ratio to the reference's mean (``ref``: the
    reference's ``sc.stats``), the goal, reached."""
    S = st["headline_seeds"]
    rows = []
    for n, e in fl.cells(st):
        fed = sc.stats(lk.seeds(lambda s, c=(n, e): fl.fed_job(st, s, c), S))
        rows.append(row_of(n, e, st["K"], fed, ref))
    return rows


def row_of(n: int, e: float, K: int, fed: tuple[float, float, int], ref: tuple[float, float, int]) -> dict[str, Any]:
    """A goal row: DP-FedEmb's stats at (N' = ``n``, ``e``) with ``K``, its ratio to the
    reference's mean, the goal, reached (None: not run)."""
    r = ratio(fed[0], ref[0])
    return {"pop": n, "eps": e, "K": K, "fed": fed, "ratio": r, "goal": sc.GOAL2_TARGET[n],
            "reached": None if math.isnan(r) else r >= sc.GOAL2_TARGET[n]}


def verdict(label: str, fed: tuple[float, float, int], goal: float, ref: tuple[float, float, int]) -> str:
    """A finding: DP-FedEmb's mean (``fed``: its ``sc.stats``) against ``goal`` x the
    reference's mean, by how much, and whether that is inside the seeds' spread."""
    m, s, n = fed
    r, margin = m / ref[0], m - goal * ref[0]
    txt = (f"- **{label}**: {m:.3f} = {r:.3f}x centralized (goal {goal:.2f}x, which needs {goal * ref[0]:.3f}): "
           f"{'reached' if r >= goal else 'NOT reached'}, by {margin:+.4f}")
    if n > 1 and ref[2] > 1:
        spread = math.hypot(s, ref[1])
        txt += (f" against a seed spread of {spread:.3f} (the two stds combined)"
                + ("; within it, so not a firm result either way" if abs(margin) < spread else ""))
    else:
        txt += " (one seed on a side: no spread to judge it by)"
    return txt + "."


def _reached(row: dict[str, Any]) -> str:
    return "not run" if row["reached"] is None else ("**yes**" if row["reached"] else "no")


def goal_section(st: dict[str, Any], lk: sc.Lookup, img: Path, ref_recs: list[dict[str, Any] | None],
                 ref: tuple[float, float, int], rows: list[dict[str, Any]],
                 levers: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The goal-2 table (``rows``: ``goal_rows``), the noise's cost, the plot (with the K
    lever's ``levers`` rows); and the findings. ``ref_recs``: the reference's records, ``ref``:
    their ``sc.stats``."""
    S, R, steps = st["headline_seeds"], fl.rounds(st), fl.ref_steps(st)
    L = ["## Goal 2: DP-FedEmb at 10M and 1M users against centralized training\n",
         (f"Recall@FAR=1e-3 on the test split, mean ± sample std over seeds. Reference: centralized ArcFace at "
          f"{steps} steps, {sc.cell(*ref, S)} (seeds: "
          + (", ".join("-" if r is None else f"{r['final']:.3f}" for r in ref_recs)) + ").\n"),
         f"| N' | ε | DP-FedEmb, ArcFace, {R} rounds | x centralized ({ref[0]:.3f}) | goal | reached |",
         "|---|---|---|---|---|---|"]
    for row in rows:
        r = "-" if math.isnan(row["ratio"]) else f"{row['ratio']:.3f}"
        L.append(f"| {sc._pop(row['pop'])} | {row['eps']:g} | {sc.cell(*row['fed'], S)} | {r} | "
                 f"{row['goal']:.2f}x | {_reached(row)} |")
    nn = lk.get(fl.fed_job(st, 0, None)["key"])
    found = []
    for row in rows:
        if row["reached"] is None:
            continue
        found.append(verdict(f"{sc._pop(row['pop'])} users, ε {row['eps']:g}, K = {row['K']}", row["fed"],
                             row["goal"], ref))
    cost = []
    for row in rows:
        r0 = lk.get(fl.fed_job(st, 0, (row["pop"], row["eps"]))["key"])
        if nn and r0:
            cost.append(f"{nn['final'] - r0['final']:+.3f} at {sc._pop(row['pop'])} ε {row['eps']:g}")
    L += ["", (f"No noise (seed 0, {R} rounds): {nn['final']:.3f}; what the noise costs at seed 0: "
               f"{', '.join(cost) or 'n/a'}." if nn else f"No noise ({R} rounds, seed 0): not run yet."), ""]
    if cost:
        found.append(f"- **The noise's cost** at {R} rounds (seed 0, no noise minus noise): {', '.join(cost)}.")
    shown = [r for r in (*rows, *levers) if r["reached"] is not None]
    if shown:
        _plot(st, shown, ref, img / "long_goal2.png")
        L += ["![goal 2](img/long_goal2.png)", ""]
    return L, found


def _plot(st: dict[str, Any], rows: list[dict[str, Any]], ref: tuple[float, float, int], path: Path) -> None:
    """DP-FedEmb per cell with seed std, the reference's mean and band, each cell's goal."""
    plt = sc._plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = range(len(rows))
    ax.bar(xs, [r["fed"][0] for r in rows], yerr=[r["fed"][1] if r["fed"][2] > 1 else 0 for r in rows],
           color="tab:blue", alpha=0.8, capsize=6, label=f"DP-FedEmb, {fl.rounds(st)} rounds")
    ax.axhline(ref[0], color="black", label=f"centralized ArcFace, {fl.ref_steps(st)} steps")
    if ref[2] > 1:
        ax.axhspan(ref[0] - ref[1], ref[0] + ref[1], color="gray", alpha=0.2, label="centralized ± std")
    for x, r in zip(xs, rows):
        ax.hlines(r["goal"] * ref[0], x - 0.4, x + 0.4, colors="tab:red", linestyles="--",
                  label="goal (x centralized)" if x == 0 else None)
    ax.set_xticks(list(xs), [f"{sc._pop(r['pop'])} users, ε {r['eps']:g}\nK = {r['K']}" for r in rows])
    lo = min([r["fed"][0] for r in rows if r["fed"][2]] + [ref[0] * 0.9]) - 0.05
    ax.set_ylim(max(0.0, lo), 1.04)  # headroom for the legend above the bars
    sc._style(ax, "issue #11 goal 2 cell",
              f"DP-FedEmb against centralized, both trained longer ({st['headline_seeds']} seeds)")
    ax.legend(fontsize=8, ncol=2, loc="upper center")
    sc._finish(plt, fig, path)


def lever_rows(st: dict[str, Any], lk: sc.Lookup, ref: tuple[float, float, int],
               cell: tuple[int, float] | None = None) -> dict[int, tuple[list[dict[str, Any] | None], dict[str, Any]]]:
    """Per K of the lever: its test runs' records at ``cell`` (default the first) and their
    goal row."""
    (n, e), S = cell or fl.cells(st)[0], st["headline_seeds"]
    out = {}
    for K in (fl.K_BASE, fl.K_LEVER):
        recs = lk.seeds(lambda s, K=K: fl.k_job(st, s, K, "test", (n, e)), S)
        out[K] = (recs, row_of(n, e, K, sc.stats(recs), ref))
    return out


def lever_section(st: dict[str, Any], lk: sc.Lookup, ref: tuple[float, float, int],
                  rows: dict[int, tuple[list[dict[str, Any] | None], dict[str, Any]]],
                  cell: tuple[int, float] | None = None) -> tuple[list[str], list[str]]:
    """The users-per-virtual-client lever at ``cell`` (default the first): validation scores
    (seed 0), the K they choose, each K's test runs (``rows``: ``lever_rows``) against the
    goal; and the findings."""
    first = cell is None or cell == fl.cells(st)[0]
    (n, e), S, R = cell or fl.cells(st)[0], st["headline_seeds"], fl.rounds(st)
    goal = sc.GOAL2_TARGET[n]
    ks = tuple(rows)
    val = {K: lk.get(fl.k_job(st, 0, K, "validation", (n, e))["key"]) for K in ks}
    chosen = fl.k_choice(lk, st, (n, e))
    why = ("At this cell the noise costs next to nothing, so what is left between DP-FedEmb and centralized is "
           f"federated optimisation; issue #11's table has K = {fl.K_LEVER} ahead of K = {fl.K_BASE} at equal "
           "rounds." if first else
           f"Here the noise costs more than at {sc._pop(fl.cells(st)[0][0])} users (the goal section's no-noise "
           f"run), and K = {fl.K_LEVER} needs more of it; whether its optimisation gain outweighs that is "
           "measured, not assumed.")
    shown = (f"the test runs ({R} rounds, ε calibrated for K and {R} rounds) of both K are shown whichever it "
             "chooses" if first else f"K = {fl.K_LEVER}'s test runs ({R} rounds) run only if it chooses K = {fl.K_LEVER}")
    L = [f"## Users per virtual client at {sc._pop(n)} users, ε {e:g}\n",
         (f"{why} The VALIDATION split chooses K (seed 0, {fl.val_rounds(st)} rounds, ε calibrated for them); "
          f"{shown}. Per round K = {fl.K_LEVER} trains twice the users, so the sampling rate of virtual clients "
          "doubles and the same ε needs more noise.\n"),
         f"| K | validation, seed 0, {fl.val_rounds(st)} rounds | z (simulation) | test, {R} rounds | "
         f"x centralized ({ref[0]:.3f}) | goal {goal:.2f}x |", "|---|---|---|---|---|---|"]
    found = []
    for K, (recs, row) in rows.items():
        r = row["ratio"]
        z = next((x["z"] for x in [*recs, val[K]] if x), None)
        v = "not run" if val[K] is None else f"{val[K]['final']:.3f}"
        L.append(f"| {K}{' (chosen)' if K == chosen else ''} | {v} | {'-' if z is None else f'{z:.5f}'} | "
                 f"{sc.cell(*row['fed'], S)} | {'-' if math.isnan(r) else f'{r:.3f}'} | {_reached(row)} |")
        if K != chosen:
            continue
        others = ", ".join(f"K = {k} {val[k]['final']:.3f}" for k in ks if k != K)
        if row["reached"] is None:
            found.append(f"- **K at {sc._pop(n)} users, ε {e:g}**: the validation split chose K = {K} "
                         f"({val[K]['final']:.3f}, {others}); its test runs have not finished.")
            continue
        found.append(verdict(f"{sc._pop(n)} users, ε {e:g}, with the K the validation split chose (K = {K}: "
                             f"{val[K]['final']:.3f} on validation, {others})", row["fed"], goal, ref))
    if chosen is None:
        found.append(f"- **K at {sc._pop(n)} users, ε {e:g}**: the validation runs have not finished; no K chosen.")
    return L + [""], found


def reference_section(st: dict[str, Any], lk: sc.Lookup, ref_recs: list[dict[str, Any] | None],
                      ref: tuple[float, float, int], rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Is the reference converged? Seed 0 at the reference's steps and at REF_CHECK_FACTOR
    times them; the goal ``rows`` against the reference's mean plus seed 0's gain (an
    estimate of the longer reference: one seed, one more point); and the findings."""
    check = fl.ref_check_job(st)
    steps, more = fl.ref_steps(st), check["steps"]
    r0, r1 = ref_recs[0], lk.get(check["key"])
    L = [f"## Is the reference converged? Centralized ArcFace at {more} steps\n",
         (f"Seed 0 of the reference trained {fl.REF_CHECK_FACTOR}x longer (cosine schedule to {more} steps; "
          "one seed: it is the longest run here, about an hour on one core). The earlier points of the curve "
          "(250 to 32000 steps) are in [RESULTS_SCALE.md](RESULTS_SCALE.md)'s convergence table.\n")]
    if r0 is None or r1 is None:
        return L + ["Not run yet.", ""], []
    gain = r1["final"] - r0["final"]
    est = (ref[0] + gain, ref[1], ref[2])
    L += [f"| steps | seed 0 | reference (mean ± std over {ref[2]} seeds) |", "|---|---|---|",
          f"| {steps} | {r0['final']:.3f} | {sc.cell(*ref, st['headline_seeds'])} |",
          f"| {more} | {r1['final']:.3f} ({gain:+.4f}) | estimated {est[0]:.3f} (mean + seed 0's gain) |", "",
          f"| N' | ε | K | DP-FedEmb | x reference at {steps} ({ref[0]:.3f}) | x estimate at {more} ({est[0]:.3f}) "
          "| goal | reached against the estimate |", "|---|---|---|---|---|---|---|---|"]
    trend = "still rising" if gain >= 0.005 else "a doubling of the steps now gains less than 0.005"
    found = [f"- **The reference at {more} steps** (seed 0): {r1['final']:.3f}, {gain:+.4f} from {steps} steps "
             f"({trend}); the reference's mean plus that gain: {est[0]:.3f}."]
    for row in rows:
        if row["reached"] is None:
            continue
        e_row = row_of(row["pop"], row["eps"], row["K"], row["fed"], est)
        L.append(f"| {sc._pop(row['pop'])} | {row['eps']:g} | {row['K']} | {sc.cell(*row['fed'], st['headline_seeds'])} "
                 f"| {row['ratio']:.3f} | {e_row['ratio']:.3f} | {row['goal']:.2f}x | {_reached(e_row)} |")
        found.append(verdict(f"{sc._pop(row['pop'])} users, ε {row['eps']:g}, K = {row['K']}, against the estimated "
                             f"reference at {more} steps", row["fed"], row["goal"], est))
    return L + [""], found


def privacy_table(st: dict[str, Any], lk: sc.Lookup) -> list[str]:
    """Per cell (seed 0's record): the simulation z, the noise on the average and the
    extrapolated run (the epsilon the page reports)."""
    L = [f"## Privacy (epsilon calibrated for {fl.rounds(st)} rounds)\n",
         (f"Gaussian noise on the clipped sum of {sc.M0} virtual clients of K users per round "
          "(sensitivity 2C "
          "under add/remove-one-user); RDP accountant, user-level; the paper's extrapolation: the run is "
          "reported as one over N' users with M' clients per round and noise multiplier z' = z M'/M (same "
          "noise on the average), delta = 1/N'.\n"),
         "| N' | K | target ε | z (simulation) | noise on average | M' | z' | ε (RDP) | δ |",
         "|---|---|---|---|---|---|---|---|---|"]
    first = fl.cells(st)[0]
    # (K, cell, seed 0's job, shown when not run): a further cell's K_LEVER runs only if validation chose it
    rows = [(st["K"], c, fl.fed_job(st, 0, c), True) for c in fl.cells(st)]
    rows += [(fl.K_LEVER, c, fl.k_job(st, 0, fl.K_LEVER, "test", c), c == first) for c in fl.cells(st)]
    for K, (n, e), job, always in rows:
        r = lk.get(job["key"])
        if r is None and not always:
            continue
        if r is None:
            L.append(f"| {sc._pop(n)} | {K} | {e:g} | not run | | | | | |")
            continue
        L.append(f"| {sc._pop(n)} | {K} | {e:g} | {r['z']:.5f} | {r['noise_on_average']:.2e} | {r[f'M_{n}']:,} | "
                 f"{r[f'z_{n}']:.3f} | {r[f'eps_{n}']:.3f} | {1 / n:.0e} |")
    return L + [""]


def busy_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the (start, end) ``spans``: wall time with at least one run
    going, which counts runs at the same time once and the gaps between sessions not at all."""
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def times_table(st: dict[str, Any], lk: sc.Lookup) -> list[str]:
    """Process-minutes and the span of the finished runs; seconds per run, with its threads
    and device (a run resumed from a checkpoint counts its earlier invocations too)."""
    recs = [r for j in fl.jobs(st) if (r := lk.get(j["key"]))]
    L = ["## Run times\n"]
    if recs:
        busy = busy_seconds([(r["started_at"] - r.get("seconds_earlier_invocations", 0), r["finished_at"])
                             for r in recs])
        L.append(f"{len(recs)} runs, {sum(r['seconds'] for r in recs) / 60:.0f} process-minutes, {busy / 60:.0f} min "
                 "of wall time with a run going (the time between sessions not counted), on a 2-core machine without "
                 "GPU (up to 2 runs at a time, one torch thread each).\n")
    L += ["| run | s | threads | device |", "|---|---|---|---|"]
    for j in fl.jobs(st):
        r = lk.get(j["key"])
        if r:
            p = r.get("perf", {})
            L.append(f"| `{j['key']}` | {r['seconds']:.0f} | {p.get('threads', '?')} | {p.get('device_name', '?')} |")
    return L + [""]


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces the page."""
    return " ".join([".venv/bin/python experiments/fedemb_long.py", *(["--quick"] * args.quick),
                     *([f"--seeds {args.seeds}"] if args.seeds else [])])


def knobs_text(st: dict[str, Any]) -> str:
    """DP-FedEmb's knobs, from the constants the runs use."""
    k = {**fg.BASE_FED, **sc.KNOBS}
    return (f"K = {st['K']} users per virtual client, M = {sc.M0} clients per round, local batch "
            f"{k['local_batch_size']}, local epochs {k['local_epochs']}, client lr {k['client_lr']:g}, server lr "
            f"{k['server_lr']:g} momentum {k['server_momentum']:g}, clip C = {fg.CLIP:g}, local head initialised "
            f"to {k['head_init']}, head lr scale {k['head_lr_scale']:g}, {sc.MOONSHOT_LEVER[1]}")


def scope(st: dict[str, Any], lk: sc.Lookup, users: int | None) -> str:
    """What the page's ε covers (epsilon_scope), from the records it reads."""
    cells = " and ".join(f"{e:g} at {sc._pop(n)} users" for n, e in fl.cells(st))
    return scope_note([*lk.mine.values(), *lk.base.values()], users=users,
                      headline=f"Every ε here (ε {cells})", source="`eps_sim` in docs/data/long_results.json",
                      earlier="; the other knobs came from the tuning of RESULTS_SCALE.md and RESULTS_FEDEMB.md")


def page(st: dict[str, Any], lk: sc.Lookup, context: dict[str, Any], img: Path,
         args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The page's lines and its findings."""
    R, steps = fl.rounds(st), fl.ref_steps(st)
    users, pub = context.get("train_users"), context.get("public_start")
    L = ["# DP-FedEmb trained longer, against centralized trained longer (issue #11, goal 2)\n",
         (f"Produced by `{command(args)}` from the repository root. The public numbers are in "
          "`docs/data/long_results.json` (a fresh clone rewrites this page from them with `--report-only`); "
          "the full run records, with private training diagnostics, stay in the work folder.\n"),
         scope(st, lk, users) + "\n",
         "## Protocol\n",
         ("- **Same as [RESULTS_SCALE.md](RESULTS_SCALE.md)**: the face-like glyph data "
          f"({'?' if users is None else f'{users:,}'} private training users), the public start (width-0.25 "
          f"LeNet, public-only score {'?' if pub is None else f'{pub:.3f}'}), DP-FedEmb's knobs "
          f"({knobs_text(st)}) and the seeds (seed s: noise, sampling and client randomness "
          f"{sc.NOISE_SEED0} + {sc.SEED_STRIDE} s)."),
         (f"- **Budgets, fixed before any run**: DP-FedEmb {R} rounds (RESULTS_SCALE.md part 6: "
          f"{sc.long_rounds(st)}, which the validation split chose over {st['rounds']}); centralized ArcFace "
          f"{steps} steps of batch {fg.CENTRAL_BATCH} (lr 0.05, momentum 0.9, cosine to the budget; part 6: "
          f"{sc.converged_jobs(st)[0]['steps']}). Nothing here was chosen on the test split. {R} rounds see as "
          f"many examples as {sc.equal_examples_steps(st, R):,.0f} centralized steps."),
         f"- **Privacy**: epsilon is calibrated for {R} rounds, so every round gets more noise than in part 6.",
         "- **Utility**: Recall@FAR=1e-3 (exact, all pairs) on the TEST split at the last round/step.\n"]
    ref_recs = lk.seeds(lambda s: fl.ref_job(st, s), st["headline_seeds"])
    ref = sc.stats(ref_recs)  # computed once: every section's ratios use it
    rows, cs = goal_rows(st, lk, ref), fl.cells(st)
    krows = {c: lever_rows(st, lk, ref, c) for c in cs}
    chosen = {c: fl.k_choice(lk, st, c) for c in cs}
    goal, found = goal_section(st, lk, img, ref_recs, ref, rows, [krows[c][fl.K_LEVER][1] for c in cs])
    lever, lever_found = [], []
    for c in cs:
        lines, fnd = lever_section(st, lk, ref, krows[c], c)
        lever, lever_found = lever + lines, lever_found + fnd
    # against the longer reference: the goal cells and the K the validation split chose
    conv, conv_found = reference_section(st, lk, ref_recs, ref, rows + [
        krows[c][k][1] for c, k in chosen.items() if k is not None and k != st["K"]])
    found += lever_found + conv_found
    L += goal + lever + conv + privacy_table(st, lk) + times_table(st, lk)
    L += ["## Findings (generated from the numbers above)\n", *(found or ["- No goal cell has finished yet."])]
    return L, found


def table_blocks(lines: list[str]) -> list[list[str]]:
    """The page's tables in order, each its consecutive ``|`` lines."""
    blocks: list[list[str]] = []
    prev = False
    for ln in lines:
        is_row = ln.startswith("|")
        if is_row and not prev:
            blocks.append([])
        if is_row:
            blocks[-1].append(ln)
        prev = is_row
    return blocks


def write_outputs(st: dict[str, Any], results: dict[str, Any], timing: dict[str, Any], info: dict[str, Any],
                  doc: Path, export: Path, args: argparse.Namespace) -> None:
    """Write the public export (the work folder's records merged into it), then, from the
    export's numbers alone, the page and, for the real page, its docs/RESULTS.md section."""
    from dpemb.atomic import atomic_write_text

    keys = {j["key"] for j in fl.jobs(st)}
    data = pub.merge(pub.load(export), {k: v for k, v in results.items() if k in keys}, timing,
                     context_of(results, info), ABOUT, synthetic=True)  # the glyph benchmark
    pub.write(export, data)
    img = doc.parent / "img"
    img.mkdir(parents=True, exist_ok=True)
    lk = sc.Lookup(data["runs"], {})
    L, found = page(st, lk, data["context"], img, args)
    atomic_write_text(doc, "\n".join(L) + "\n")
    print(f"wrote {doc}")
    if doc.resolve() == fl.REAL_DOC.resolve():
        from results_page import update_section

        goal_table, *blocks = table_blocks(L)
        lever_tables = []
        for (n, e), table in zip(fl.cells(st), [b for b in blocks if b[0].startswith("| K |")]):
            lever_tables += ["", f"Users per virtual client at {sc._pop(n)} users, ε {e:g} (K chosen on validation):\n",
                             *table]
        update_section(doc.parent, "long", "\n".join([
            "## Issue #11 goal 2, both sides trained longer\n",
            (f"`{command(args)}`: DP-FedEmb (ArcFace) at {fl.rounds(st)} rounds against centralized ArcFace at "
             f"{fl.ref_steps(st)} steps, {st['headline_seeds']} seeds each; Recall@FAR=1e-3 on the test split; "
             "epsilon RDP, extrapolated, user-level, add/remove, delta = 1/N'. "
             "Details: [RESULTS_LONG.md](RESULTS_LONG.md).\n"),
            scope(st, lk, data["context"].get("train_users")) + "\n", *goal_table, *lever_tables, "", *found]))

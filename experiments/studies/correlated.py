"""Issue #36: DP-FTRL-FedEmb's correlated noise (tree aggregation, BandMF, BLT) beside
DP-FedEmb at 100,000 users and epsilon 1, 0.5 and 2 (PLD, delta 1e-6), on one shared cheaper
configuration: the recipe face-100k-eps2 (goal 3's winner) at 200 rounds. In each epsilon
cell, each mechanism's b is chosen on the validation split (BandMF: 1 or 4 bands; BLT:
min-separation 16 or 35, 35 the largest with b M K <= N), then 3 test seeds
(docs/RESULTS_CORRELATED.md).

    .venv/bin/python experiments/harness.py correlated --work runs/studies --jobs 2
    # 16 runs of about 10 minutes (one thread each) per cell: about 80 minutes on 2 cores

The face-like glyph data needs the CJK fonts (``make cjk-fonts``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from harness import (METRIC, ROOT, Run, by_seed, choose, choose_then_test, figure, mean_std, select, setting, stats,
                     table)

from dpemb.training.recipes import load_recipe
from dpemb.training.run_config import TrainConfig, with_settings
from studies import long

NAME = "correlated"
PAGES = (ROOT / "docs" / "RESULTS_CORRELATED.md",)
RECIPE, PRETRAIN = "face-100k-eps2", "face-pretrain"
DATA, INIT = "data/faces", "runs/face-pretrain"  # the recipes' own paths, under the work folder
SEEDS = (0, 1, 2)
EPSILONS, ROUNDS = (1.0, 0.5, 2.0), 200  # the cells at 100,000 users, in the order trained
MECHANISMS = ("gaussian", "tree", "bandmf", "blt")  # gaussian: DP-FedEmb; the others DP-FTRL-FedEmb's
BANDS = {"bandmf": (1, 4), "blt": (35, 16)}  # the candidates for b, scored on validation
LABEL = {"gaussian": "DP-FedEmb (Gaussian)", "tree": "DP-FTRL-FedEmb, tree", "bandmf": "DP-FTRL-FedEmb, BandMF",
         "blt": "DP-FTRL-FedEmb, BLT"}


def run(epsilon: float, mechanism: str, seed: int, split: str = "test", bands: int | None = None) -> Run:
    """The recipe at ``epsilon``, 200 rounds, with ``mechanism`` noise (and its b), as
    `dpemb train --recipe face-100k-eps2 --data data/faces --init runs/face-pretrain
    --target-epsilon E --rounds 200 --eval-every 200 --eval-split SPLIT --seed S
    [--algorithm dp-ftrl-fedemb --mechanism M [--bands B]]` configures it."""
    settings: dict[str, Any] = {"data.path": DATA, "model.init": INIT, "privacy.target_epsilon": epsilon,
                                "privacy.rounds": ROUNDS, "eval_every": ROUNDS, "data.eval_split": split, "seed": seed}
    if mechanism != "gaussian":
        settings.update({"algorithm": "dp-ftrl-fedemb", "privacy.mechanism": mechanism})
    if bands is not None:
        settings["privacy.bands"] = bands
    b = "" if bands is None else f"/b{bands}"
    return Run(f"eps{epsilon:g}/{mechanism}{b}/{split}/s{seed}", with_settings(load_recipe(RECIPE)[0], settings))


def candidates(epsilon: float, mechanism: str) -> dict[int, Run]:
    return {b: run(epsilon, mechanism, 0, "validation", b) for b in BANDS[mechanism]}


def prepare(work: Path) -> None:
    """The face-like data (the study long's, at the recipes' path) and the recipes' public
    start (the recipe face-pretrain, trained once into ``work``/runs/face-pretrain)."""
    from dpemb.data.glyphs import GlyphConfig, make_glyphs
    from dpemb.training.runner import train

    if not (work / DATA / "meta.json").exists():
        make_glyphs(GlyphConfig(**long.GLYPHS), progress=False).save(work / DATA)
    if not (work / INIT / "report.json").exists():
        pre = with_settings(load_recipe(PRETRAIN)[0], {"data.path": str(work / DATA)})
        train(pre, str(work / INIT), resume="auto")


def plan(rows: list[dict[str, Any]]) -> list[Run]:
    runs = []
    for eps in EPSILONS:
        runs += [run(eps, m, s) for m in ("gaussian", "tree") for s in SEEDS]
        for m in BANDS:
            runs += choose_then_test(rows, candidates(eps, m),
                                     lambda b, m=m, e=eps: [run(e, m, s, bands=b) for s in SEEDS])
    return runs


def _tests(rows: list[dict[str, Any]], epsilon: float, mechanism: str) -> list[dict[str, Any]]:
    cell = select(rows, data__eval_split="test", privacy__target_epsilon=epsilon)
    return [r for r in cell if (setting(r, "privacy.mechanism") or "gaussian") == mechanism]


def _model_noise(row: dict[str, Any]) -> str:
    """The noise the run's extrapolated release leaves on the model (``strategy.model_noise``
    at 100,000 users), x C per coordinate; the tree's is not modelled."""
    from dpemb.privacy import PrivacySpec
    from dpemb.privacy.strategy import model_noise

    spec = PrivacySpec(**row["privacy"]["spec"])
    if spec.mechanism == "tree":
        return "n/a"
    ex = next(e for e in row["privacy"]["extrapolated"] if e["population"] == 100_000)
    at = dataclasses.replace(spec, population=ex["population"], noise_multiplier=ex["noise_multiplier"],
                             clients_per_round=ex["clients_per_round"])
    return f"{model_noise(at):.3f}"


def sections(rows: list[dict[str, Any]]) -> dict[str, str]:
    by_key = {r["key"]: r for r in rows}
    val, test = [], []
    for eps in EPSILONS:
        for m in BANDS:
            cand, chosen = candidates(eps, m), choose(rows, candidates(eps, m))
            val += [(f"{eps:g}", LABEL[m], b, f"{by_key[c.key]['metrics'][METRIC]:.4f}" if c.key in by_key else "-",
                     "chosen" if b == chosen else "") for b, c in cand.items()]
        for m in MECHANISMS:
            rs = _tests(rows, eps, m)
            if not rs:
                continue
            r0 = rs[0]
            ex = next(e for e in r0["privacy"]["extrapolated"] if e["population"] == 100_000)
            b = setting(r0, "privacy.bands") if m in BANDS else ""
            test.append((f"{eps:g}", LABEL[m], b, f"{r0['privacy']['spec']['noise_multiplier']:.4f}",
                         f"{ex['noise_multiplier']:.3f}", f"{ex['epsilon_pld']:.3f}",
                         f"{min(r['privacy']['epsilon_rdp'] for r in rs):,.0f}", _model_noise(r0), by_seed(rs),
                         mean_std(rs)))
    return {
        "correlated-validation": table(["ε (100,000)", "mechanism", "b", f"validation {METRIC} (seed 0)", ""], val),
        "correlated-test": table(["ε (100,000)", "mechanism", "b", "z (4,590 users)", "z' (100,000)",
                                  "ε' PLD (100,000)", "own ε RDP (4,590)", "model noise (x C)",
                                  f"test {METRIC} by seed", "mean ± std [n]"], test),
    }


def figures(rows: list[dict[str, Any]], img: Path) -> None:
    """Grouped bars: per epsilon (x), one bar per mechanism, mean ± std over the test seeds."""
    tests = {(e, m): _tests(rows, e, m) for e in sorted(EPSILONS) for m in MECHANISMS}
    cells = [e for e in sorted(EPSILONS) if any(tests[e, m] for m in MECHANISMS)]
    if not cells:
        return
    bars = {(e, m): stats(rs) for (e, m), rs in tests.items() if rs and e in cells}
    width = 0.8 / len(MECHANISMS)
    with figure(img / "correlated.png", "100,000 users (PLD, δ 1e-6), 200 rounds, test split",
                "Recall@FAR=1e-3") as ax:
        for i, m in enumerate(MECHANISMS):
            got = [(x, bars[e, m]) for x, e in enumerate(cells) if (e, m) in bars]
            ax.bar([x + (i - (len(MECHANISMS) - 1) / 2) * width for x, _ in got], [st[0] for _, st in got], width,
                   yerr=[st[1] if st[2] > 1 else 0 for _, st in got], capsize=3, alpha=0.85,
                   label=LABEL[m].replace("DP-FTRL-FedEmb, ", "FTRL ").replace(" (Gaussian)", ""))
        start = [r["initial"][METRIC] for r in select(rows, data__eval_split="test") if r["initial"]]
        if start:  # every run starts from the same public model (scored on the test split)
            ax.axhline(sum(start) / len(start), color="black", linestyle="--", linewidth=1, label="public start")
        seeds = [max(len(tests[e, m]) for m in MECHANISMS) for e in cells]
        ax.set_xticks(range(len(cells)), [f"ε {e:g} ({n} seed{'s' * (n > 1)})" for e, n in zip(cells, seeds)])
        ax.set_ylim(max(0.0, min(st[0] for st in bars.values()) - 0.1), 1.0)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, ncol=2, loc="upper left")

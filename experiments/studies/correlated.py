"""Issue #36: DP-FTRL-FedEmb's correlated noise (tree aggregation, BandMF, BLT) beside
DP-FedEmb at 100,000 users and epsilon 1 (PLD, delta 1e-6), on one shared cheaper
configuration: the recipe face-100k-eps2 (goal 3's winner) at 200 rounds. Each mechanism's b
is chosen on the validation split (BandMF: 1 or 4 bands; BLT: min-separation 16 or 35, 35 the
largest with b M K <= N), then 3 test seeds (docs/RESULTS_CORRELATED.md).

    .venv/bin/python experiments/harness.py correlated --work runs/studies --jobs 2
    # 16 runs of about 10 minutes (one thread each): about 80 minutes on 2 cores

The face-like glyph data needs the CJK fonts (``make cjk-fonts``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from harness import (METRIC, ROOT, Run, bar_plot, by_seed, choose, choose_then_test, mean_std, select, setting,
                     stats, table)

from dpemb.training.recipes import load_recipe
from dpemb.training.run_config import TrainConfig, with_settings
from studies import long

NAME = "correlated"
PAGES = (ROOT / "docs" / "RESULTS_CORRELATED.md",)
RECIPE, PRETRAIN = "face-100k-eps2", "face-pretrain"
DATA, INIT = "data/faces", "runs/face-pretrain"  # the recipes' own paths, under the work folder
SEEDS = (0, 1, 2)
EPSILON, ROUNDS = 1.0, 200
MECHANISMS = ("gaussian", "tree", "bandmf", "blt")  # gaussian: DP-FedEmb; the others DP-FTRL-FedEmb's
BANDS = {"bandmf": (1, 4), "blt": (35, 16)}  # the candidates for b, scored on validation
LABEL = {"gaussian": "DP-FedEmb (Gaussian)", "tree": "DP-FTRL-FedEmb, tree", "bandmf": "DP-FTRL-FedEmb, BandMF",
         "blt": "DP-FTRL-FedEmb, BLT"}


def run(mechanism: str, seed: int, split: str = "test", bands: int | None = None) -> Run:
    """The recipe at epsilon 1, 200 rounds, with ``mechanism`` noise (and its b), as
    `dpemb train --recipe face-100k-eps2 --data data/faces --init runs/face-pretrain
    --target-epsilon 1 --rounds 200 --eval-every 200 --eval-split SPLIT --seed S
    [--algorithm dp-ftrl-fedemb --mechanism M [--bands B]]` configures it."""
    settings: dict[str, Any] = {"data.path": DATA, "model.init": INIT, "privacy.target_epsilon": EPSILON,
                                "privacy.rounds": ROUNDS, "eval_every": ROUNDS, "data.eval_split": split, "seed": seed}
    if mechanism != "gaussian":
        settings.update({"algorithm": "dp-ftrl-fedemb", "privacy.mechanism": mechanism})
    if bands is not None:
        settings["privacy.bands"] = bands
    b = "" if bands is None else f"/b{bands}"
    return Run(f"{mechanism}{b}/{split}/s{seed}", with_settings(load_recipe(RECIPE)[0], settings))


def candidates(mechanism: str) -> dict[int, Run]:
    return {b: run(mechanism, 0, "validation", b) for b in BANDS[mechanism]}


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
    runs = [run(m, s) for m in ("gaussian", "tree") for s in SEEDS]
    for m in BANDS:
        runs += choose_then_test(rows, candidates(m), lambda b, m=m: [run(m, s, bands=b) for s in SEEDS])
    return runs


def _tests(rows: list[dict[str, Any]], mechanism: str) -> list[dict[str, Any]]:
    mech = select(rows, data__eval_split="test")
    return [r for r in mech if (setting(r, "privacy.mechanism") or "gaussian") == mechanism]


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
    val = []
    for m in BANDS:
        cand, chosen = candidates(m), choose(rows, candidates(m))
        by_key = {r["key"]: r for r in rows}
        val += [(LABEL[m], b, f"{by_key[c.key]['metrics'][METRIC]:.4f}" if c.key in by_key else "-",
                 "chosen" if b == chosen else "") for b, c in cand.items()]
    test = []
    for m in MECHANISMS:
        rs = _tests(rows, m)
        if not rs:
            continue
        r0 = rs[0]
        ex = next(e for e in r0["privacy"]["extrapolated"] if e["population"] == 100_000)
        b = setting(r0, "privacy.bands") if m in BANDS else ""
        test.append((LABEL[m], b, f"{r0['privacy']['spec']['noise_multiplier']:.4f}", f"{ex['noise_multiplier']:.3f}",
                     f"{ex['epsilon_pld']:.3f}", f"{min(r['privacy']['epsilon_rdp'] for r in rs):,.0f}",
                     _model_noise(r0), by_seed(rs), mean_std(rs)))
    return {
        "correlated-validation": table(["mechanism", "b", f"validation {METRIC} (seed 0)", ""], val),
        "correlated-test": table(["mechanism", "b", "z (4,590 users)", "z' (100,000)", "ε' PLD (100,000)",
                                  "own ε RDP (4,590)", "model noise (x C)", f"test {METRIC} by seed",
                                  "mean ± std [n]"], test),
    }


def figures(rows: list[dict[str, Any]], img: Path) -> None:
    bars = {LABEL[m].replace("DP-FTRL-FedEmb, ", "FTRL ").replace(" (Gaussian)", ""): stats(_tests(rows, m))
            for m in MECHANISMS if _tests(rows, m)}
    if bars:
        bar_plot(img / "correlated.png", bars, "100,000 users, ε 1 (PLD, δ 1e-6), 200 rounds, test split")

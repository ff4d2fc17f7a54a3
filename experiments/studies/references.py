"""The handwriting-like benchmark's centralized reference, trained to its plateau
(docs/RESULTS.md, "The handwriting-like benchmark").

Non-private centralized softmax from scratch on the private training users of the
`hand-*` recipes' data; the budget chosen on the VALIDATION split (seed 0 at 1000 to 16000
steps; a tie keeps the shorter), then 3 seeds of it on test (the protocol: that section).

    .venv/bin/python experiments/harness.py references --jobs 2
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import (ROOT, Run, by_seed, choose, choose_then_test, figure, mean_std, select,
                     setting, stats, table)

from dpemb.training.config import ModelConfig, OptimConfig
from dpemb.training.run_config import DataConfig, TrainConfig

NAME = "references"
PAGES = (ROOT / "docs" / "RESULTS.md",)
DATA = "data/hand"
#: the handwriting-like glyph data: the data_command of the hand-* recipes
GLYPHS = dict(regime="shared", num_users=2000, identities_per_user=40, images_per_identity=2,
              eval_identity_fraction=0.2, validation_identity_fraction=0.1, eval_user_fraction=0.05,
              validation_user_fraction=0.05, public_user_fraction=0.1, seed=0)
EVAL_CAP = 2000
SEEDS = (0, 1, 2)
BUDGETS = (1000, 2000, 4000, 8000, 16000)
MODEL = ModelConfig(backbone="lenet", embedding_dim=128, width=0.25)


def prepare(work: Path) -> None:
    """The handwriting-like dataset (held-out splits cut to EVAL_CAP by the runs)."""
    from dpemb.data.glyphs import GlyphConfig, make_glyphs

    if not (work / DATA / "meta.json").exists():
        make_glyphs(GlyphConfig(**GLYPHS), progress=False).save(work / DATA)


def hand_reference(seed: int, steps: int, split: str = "test") -> Run:
    """Centralized softmax from scratch on the private users, cosine to ``steps``."""
    return Run(f"hand/centralized/{steps}/{split}/s{seed}", TrainConfig(
        data=DataConfig(DATA, eval_split=split, eval_max_examples=EVAL_CAP), model=MODEL,
        optim=OptimConfig(steps=steps, cosine=True), seed=seed, eval_every=steps))


def candidates() -> dict[int, Run]:
    """The budgets' validation runs (seed 0)."""
    return {steps: hand_reference(0, steps, "validation") for steps in BUDGETS}


def plan(rows: list[dict[str, Any]]) -> list[Run]:
    """The budgets on validation, then the chosen budget's test seeds."""
    return choose_then_test(rows, candidates(), lambda steps: [hand_reference(s, steps) for s in SEEDS])


def sections(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The curve on validation and the chosen budget on test."""
    chosen = choose(rows, candidates())
    curve = []
    for steps, run in candidates().items():
        rs = [r for r in rows if r["key"] == run.key]
        curve.append([steps, mean_std(rs), "**chosen**" if steps == chosen else ""])
    test = select(rows, data__eval_split="test")
    ref = [[setting(test[0], "optim.steps"), by_seed(test), mean_std(test)]] if test else []
    return {"hand-reference-curve": table(["steps (cosine to the budget)", "validation, seed 0", ""], curve),
            "hand-reference": table(["steps", "test, by seed", "test"], ref)}


def figures(rows: list[dict[str, Any]], img: Path) -> None:
    """docs/img/hand_reference_curve.png: validation score by budget, the test mean ± std."""
    pts = [(steps, r["metrics"]) for steps, run in candidates().items() for r in rows if r["key"] == run.key]
    if not pts:
        return
    title = "handwriting-like: centralized softmax from scratch, by budget"
    with figure(img / "hand_reference_curve.png", title, "Recall@FAR=1e-3") as ax:
        ax.plot([p[0] for p in pts], [p[1]["recall_at_far_0.001"] for p in pts], "o-",
                label="validation, seed 0")
        test = select(rows, data__eval_split="test")
        if test:
            m, s, n = stats(test)
            ax.errorbar([setting(test[0], "optim.steps")], [m], yerr=[s if n > 1 else 0], fmt="s",
                        color="black", capsize=6, label=f"test, mean ± std [{n}]")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("steps of batch 128 (cosine schedule to the budget)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)

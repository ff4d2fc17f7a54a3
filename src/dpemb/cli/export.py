"""`dpemb export`: write the release artifact of an existing run from its checkpoint."""

from __future__ import annotations

import argparse

from dpemb.cli.common import guarded


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a run's release artifact (model.safetensors + model_card.json)",
        description=(
            "Write the release artifact of a training run: model.safetensors (the backbone's "
            "weights only) and model_card.json (backbone, provenance, every privacy "
            "statement). It is what `dpemb embed`, `eval`, `features --backbone-model` and "
            "`train --init` read. The run's checkpoint is private training state (noise "
            "generator, sampler, optimizer, tree state) and stays where it is. Works for runs "
            "written by older versions (checkpoint.pt at the top of the run directory)."
        ),
    )
    p.add_argument("run", help="run directory (or its checkpoint file)")
    p.add_argument("--out", required=True,
                   help="directory to write the artifact to (may be the run directory itself)")
    p.set_defaults(func=guarded(run, "export"))


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dpemb.training.artifact import export_run
    from dpemb.training.rundir import ARTIFACT_WEIGHTS, CHECKPOINT, MODEL_CARD

    out, card, ckpt = export_run(args.run, args.out)
    done = f"{card['rounds']} rounds" if "rounds" in card else f"{card.get('steps', '?')} steps"
    print(f"wrote {out / ARTIFACT_WEIGHTS} and {out / MODEL_CARD} ({card['algorithm']}, {done}; "
          f"from the private checkpoint {ckpt})")
    priv = card["privacy"]
    for k in sorted(priv):
        if k == "statement" or k.startswith("statement_"):
            print(f"privacy: {priv[k]}")
    for ex in priv.get("extrapolated", []):
        print(f"extrapolated: {ex['statement']}")
    if priv.get("note"):
        print(f"note: {priv['note']}")
    legacy = Path(args.run) / CHECKPOINT
    if Path(args.run).is_dir() and legacy.is_file():
        print(f"warning: {legacy} is private training state at the top of the run directory; move it "
              f"out of anything you share (`mkdir -m 700 {Path(args.run) / 'private'} && mv {legacy} "
              f"{Path(args.run) / 'private'}/`)")
    return 0

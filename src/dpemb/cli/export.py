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
            "generator, sampler, optimizer, tree state) and stays where it is. "
            "--format onnx or torchscript writes, instead of model.safetensors, model.onnx "
            "(onnxruntime; opset 17) or model.torchscript.pt (torch.jit.load), each beside a "
            "copy of the model card: input float32 (N, C, H, W) pixels in [0, 1] as the card's "
            "`input` section says, output the L2-normalised embeddings of `dpemb embed`. The "
            "export is run on a check batch against `dpemb embed`'s computation and the largest "
            "difference printed; over 1e-4 it is an error."
        ),
    )
    p.add_argument("run", help="run directory (or its checkpoint file)")
    p.add_argument("--out", required=True,
                   help="directory to write the artifact to (may be the run directory itself)")
    p.add_argument("--format", choices=("safetensors", "onnx", "torchscript"), default="safetensors",
                   help="safetensors: the release artifact (default); onnx: model.onnx; "
                        "torchscript: model.torchscript.pt (each with model_card.json)")
    p.set_defaults(func=guarded(run, "export"))


def run(args: argparse.Namespace) -> int:
    from dpemb.training.artifact import export_run
    from dpemb.models.export import MAX_ABS_DIFFERENCE
    from dpemb.training.rundir import MODEL_CARD

    out, card, ckpt, written = export_run(args.run, args.out, fmt=args.format)
    done = f"{card['rounds']} rounds" if "rounds" in card else f"{card.get('steps', '?')} steps"
    print(f"wrote {written.path} and {out / MODEL_CARD} ({card['algorithm']}, {done}; "
          f"from the private checkpoint {ckpt})")
    if written.max_difference is not None:
        print(f"checked: {written.runtime} vs dpemb embed on {written.checked} random 8-bit images: "
              f"max |difference| = {written.max_difference:.2e} (limit {MAX_ABS_DIFFERENCE:.0e})")
    priv = card["privacy"]
    for k in sorted(priv):
        if k == "statement" or k.startswith("statement_"):
            print(f"privacy: {priv[k]}")
    for ex in priv.get("extrapolated", []):
        print(f"extrapolated: {ex['statement']}")
    if priv.get("note"):
        print(f"note: {priv['note']}")
    return 0

"""`dpemb eval`: score a trained backbone on a dataset's held-out identities."""

from __future__ import annotations

import argparse
from pathlib import Path

from dpemb.cli.common import fmt, guarded, load_dataset, print_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a trained backbone (Recall@FAR, ROC, retrieval)",
        description=(
            "Embed the evaluation split of a dataset with a trained backbone and report "
            "Recall@FAR at 1e-3, 1e-4 and 1e-2 (exact over all pairs unless --max-pairs), "
            "the reference's in-batch approximation, ROC AUC, precision@1 and MAP@R."
        ),
    )
    p.add_argument("checkpoint", help="run directory or checkpoint.pt")
    p.add_argument("--data", required=True, help="dataset directory (from `dpemb data make`)")
    p.add_argument("--split", choices=("eval", "train", "public", "all"), default="eval",
                   help="which examples to score (default: held-out identities)")
    p.add_argument("--max-pairs", type=int, default=None,
                   help="sample this many pairs instead of all pairs (says so in the output)")
    p.add_argument("--roc", default=None, help="write the ROC curve to this PNG")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--batch-size", type=int, default=512, help="embedding batch size (speed only)")
    p.set_defaults(func=guarded(run, "eval"))


def run(args: argparse.Namespace) -> int:
    from dpemb.data.tensors import default_device
    from dpemb.metrics import plot_roc
    from dpemb.training.checkpoint import backbone_from_checkpoint
    from dpemb.training.evaluate import evaluate_backbone

    device = default_device()
    model = backbone_from_checkpoint(args.checkpoint, device)
    ds = load_dataset(args.data)
    if args.split == "all":
        part = ds
    else:
        part = getattr(ds.split(), {"eval": "eval", "train": "train", "public": "public"}[args.split])
    if part.num_examples < 2:
        print(f"dpemb eval: error: the {args.split} split of {args.data} has fewer than 2 examples")
        return 1
    metrics, ver = evaluate_backbone(model, part, batch_size=args.batch_size,
                                     max_pairs=args.max_pairs, device=device)
    if args.roc:
        plot_roc({Path(args.checkpoint).name: ver}, args.roc, title=f"ROC ({args.split} split)")
    if args.json:
        print_json({"checkpoint": args.checkpoint, "split": args.split, **metrics})
        return 0
    print(f"{args.split} split: {part.num_examples} examples, {part.num_classes} identities, "
          f"{metrics['eval_positive_pairs']} positive / {metrics['eval_negative_pairs']} negative pairs"
          + ("" if metrics["eval_pairs_exact"] else " (SAMPLED pairs, not exact)"))
    for k, v in metrics.items():
        if not k.startswith("eval_"):
            print(f"  {k:40s} {fmt(v)}")
    if args.roc:
        print(f"ROC curve: {args.roc}")
    return 0

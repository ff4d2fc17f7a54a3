"""`dpemb eval`: score one or several trained backbones on a dataset's held-out identities."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dpemb.cli.common import UsageError, add_device_flag, device_from, fmt, guarded, print_json
from dpemb.cli.model_input import add_resize_flag


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate trained backbones (Recall@FAR table with CIs, ROC, retrieval)",
        description=(
            "Embed the evaluation split of a dataset with each trained backbone and report "
            "the verification table: Recall@FAR (TAR) at FAR 1e-6, 1e-5, 1e-4, 1e-3, 1e-2 and "
            "1e-1, exact over all pairs unless --max-pairs, each marked where the number of "
            "negative pairs is below 1/FAR (the value is then measured at zero false accepts), "
            "with bootstrap confidence intervals over identities; then ROC AUC, the "
            "reference's in-batch approximation, precision@1 and MAP@R. TAR at FAR f is the "
            "largest TAR over thresholds whose FAR is <= f: stricter than insightface's "
            "IJB-B/C report, which takes the TPR at the FPR nearest f. Several models "
            "(listed, or given to --compare) share one table, one column each, and one ROC "
            "plot. With --pairs or --templates instead of --data: the LFW-style pair-list "
            "protocol (k-fold accuracy) or IJB-style template 1:1 verification on image files. "
            "See docs/EVALUATION.md."
        ),
    )
    p.add_argument("model", nargs="+",
                   help="trained model(s): a run directory or a release artifact (a directory holding "
                        "model.safetensors + model_card.json, from `dpemb train` or `dpemb export`); "
                        "a private checkpoint is refused. Several: compared in one table, named by "
                        "their directory names")
    p.add_argument("--compare", nargs="+", default=[], metavar="MODEL",
                   help="more models for the same table and ROC plot (the same as listing them "
                        "after the first)")
    p.add_argument("--data", default=None,
                   help="dataset directory (from `dpemb data make`): score all pairs of a split")
    p.add_argument("--pairs", default=None, metavar="FILE",
                   help="instead of --data: a pair list (LFW pairs.txt, or CSV path1,path2,same[,fold]) "
                        "of images under --images: k-fold accuracy (mean ± std), TAR at FAR 1e-3..1e-1, AUC")
    p.add_argument("--templates", default=None, metavar="CSV",
                   help="instead of --data: IJB-style templates (template_id,path[,subject][,media]) "
                        "scored on --template-pairs: TAR at FAR 1e-4..1e-1, AUC")
    p.add_argument("--template-pairs", default=None, metavar="CSV",
                   help="template pairs to score (template1,template2,same), with --templates")
    p.add_argument("--images", default=None, metavar="ROOT",
                   help="folder the image paths of --pairs / --templates are relative to")
    p.add_argument("--flip", action="store_true",
                   help="with --pairs: an image's embedding is the normalised sum of the embeddings "
                        "of the image and its horizontal mirror")
    p.add_argument("--split", choices=("test", "validation", "eval", "train", "public", "all"), default=None,
                   help="which examples to score: test (default; held-out users and identities, = eval), "
                        "validation (held-out users and identities for choosing hyperparameters), or the "
                        "train/public/all examples (statistics of training users: not for release)")
    p.add_argument("--max-examples", type=int, default=None, metavar="N",
                   help="--split test or validation: score the fixed random subset of N examples that "
                        "`dpemb train --eval-max-examples N` evaluates on (a recipe's subset)")
    p.add_argument("--max-pairs", type=int, default=None,
                   help="sample this many pairs instead of all pairs (says so in the output; no "
                        "bootstrap then)")
    p.add_argument("--bootstrap", type=int, default=None, metavar="N",
                   help="resamples of the identities for the 95%% confidence intervals "
                        "(default: 200; 0: none)")
    p.add_argument("--bootstrap-seed", type=int, default=None, metavar="S",
                   help="seed of the bootstrap's resampling (default: 0)")
    p.add_argument("--roc", default=None, help="write the ROC curve(s) to this PNG (log-scale FAR axis)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--batch-size", type=int, default=512, help="embedding batch size (speed only)")
    add_resize_flag(p)
    add_device_flag(p)
    p.set_defaults(func=guarded(run, "eval"))


def run_names(paths: list[str]) -> list[str]:
    """Display names: the run (artifact) directory's name; the shortest distinct path
    tail where two share a name."""
    parts = []
    for p in paths:
        path = Path(p)
        if path.is_file() or path.suffix in (".json", ".safetensors"):
            path = path.parent
        path = Path(path.resolve().as_posix()) if path.name in ("", ".", "..") else path
        parts.append(path.parts or (str(path),))
    for depth in range(1, max(len(x) for x in parts) + 1):
        names = ["/".join(x[-depth:]) for x in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def _other_metrics(embeddings: Any, labels: Any) -> dict[str, float]:
    """The retrieval metrics and the reference's in-batch approximation (as
    `dpemb.training.evaluate.evaluate_embeddings` reports them)."""
    import numpy as np
    import torch

    from dpemb.metrics import in_batch_recall_at_far, map_at_r, precision_at_1

    labels_t = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    perm = torch.from_numpy(np.random.default_rng(0).permutation(len(labels_t)))
    return {
        "recall_at_far_0.001_in_batch_approx": in_batch_recall_at_far(embeddings[perm], labels_t[perm], far=1e-3),
        "precision_at_1": precision_at_1(embeddings, labels_t),
        "map_at_r": map_at_r(embeddings, labels_t),
    }


def _flat(table: Any, other: dict[str, float]) -> dict[str, Any]:
    res = table.result
    d: dict[str, Any] = {f"recall_at_far_{r.far:g}": r.recall for r in table.rows}
    d["roc_auc"] = res.auc
    d.update(other)
    d.update({"eval_pairs_exact": res.exact, "eval_positive_pairs": res.num_positive_pairs,
              "eval_negative_pairs": res.num_negative_pairs, "table": table.to_dict()})
    return d


def run(args: argparse.Namespace) -> int:
    from dpemb.cli.model_input import check_input, resize_note
    import torch

    from dpemb.training.evaluate import embed_images
    from dpemb.training.shards import RowShards
    from dpemb.metrics import plot_roc
    from dpemb.metrics.far_table import far_table, format_far_tables
    from dpemb.training.artifact import load_artifact
    from dpemb.data.dataset import UserDataset

    modes = [m for m, v in (("--data", args.data), ("--pairs", args.pairs), ("--templates", args.templates))
             if v is not None]
    if len(modes) != 1:
        raise UsageError("give exactly one of --data DIR (all pairs of a split), --pairs FILE --images ROOT "
                         "(a pair list) or --templates T.csv --template-pairs P.csv --images ROOT"
                         + (f"; got {' and '.join(modes)}" if modes else ""))
    if args.data is None:
        from dpemb.cli.eval_protocols import run_pairs, run_templates

        for flag, value in (("--split", args.split), ("--max-pairs", args.max_pairs), ("--max-examples", args.max_examples),
                            ("--bootstrap", args.bootstrap), ("--bootstrap-seed", args.bootstrap_seed),
                            ("--resize", args.resize or None)):
            if value is not None:
                raise UsageError(f"{flag} goes with --data, not {modes[0]} (image files are decoded at "
                                 "the model's size; listed pairs are all scored, without a bootstrap)")

        return run_pairs(args) if args.pairs is not None else run_templates(args)
    for flag, value in (("--images", args.images), ("--template-pairs", args.template_pairs),
                        ("--flip", args.flip or None)):
        if value is not None:
            raise UsageError(f"{flag} goes with --pairs or --templates, not --data")
    args.split = args.split or "test"
    args.bootstrap = 200 if args.bootstrap is None else args.bootstrap
    args.bootstrap_seed = 0 if args.bootstrap_seed is None else args.bootstrap_seed
    if args.bootstrap < 0:
        raise UsageError(f"--bootstrap must be >= 0 (0: no intervals); got {args.bootstrap}")
    if args.max_pairs is not None and args.max_pairs < 1:
        raise UsageError(f"--max-pairs must be a positive integer; got {args.max_pairs}")
    paths = list(args.model) + list(args.compare)
    names = run_names(paths)
    shards, device = RowShards.join(device_from(args))  # under torchrun: each rank embeds a share
    ds = UserDataset.load(args.data)
    part = ds if args.split == "all" else ds.split().get(args.split)
    if args.max_examples is not None:
        from dpemb.data.splits import held_out_subsets

        if args.split not in ("test", "eval", "validation"):
            raise UsageError("--max-examples applies to --split test or validation (the held-out splits)")
        try:
            validation, test = held_out_subsets(ds.split(), args.max_examples)
        except ValueError as e:
            raise UsageError(str(e).replace("--eval-max-examples", "--max-examples")) from e
        part = validation if args.split == "validation" else test
    if part.num_examples < 2:
        print(f"dpemb eval: error: the {args.split} split of {args.data} has fewer than 2 examples",
              file=sys.stderr)
        return 1
    # every model is loaded and checked before the first (long) evaluation
    loaded = []
    for path in paths:
        model, card = load_artifact(path, device)
        loaded.append((model, card, check_input(model, card, part, args.data, resize=args.resize)))
    notes = sys.stderr if args.json else sys.stdout
    tables, flats = {}, {}
    for name, path, (model, card, size) in zip(names, paths, loaded):
        if size is not None and shards.is_main:
            print(resize_note(model, card, part, args.data) + (f" for {name}" if len(paths) > 1 else ""),
                  file=notes)
        share = embed_images(model, shards.share_of(part.images), batch_size=args.batch_size, device=device,
                             resize_to=size)
        emb = shards.gather(share.numpy())
        if emb is None:  # a worker rank: its share is delivered; rank 0 computes the metrics
            continue
        emb = torch.from_numpy(emb)
        table = far_table(emb, part.labels, bootstrap=args.bootstrap, seed=args.bootstrap_seed,
                          max_pairs=args.max_pairs, device=device)
        tables[name] = table
        flats[name] = {"model": path, "name": name, "split": args.split,
                       "resized_to": size, **_flat(table, _other_metrics(emb, part.labels))}
    shards.finish()  # a worker rank exits here
    if args.roc:
        plot_roc({n: t.result for n, t in tables.items()}, args.roc,
                 title=f"ROC ({args.split} split of {Path(args.data).name})")
    if args.json:
        if len(paths) == 1:
            print_json(flats[names[0]])
        else:
            print_json({"data": args.data, "split": args.split, "models": list(flats.values())})
        return 0
    first = next(iter(tables.values())).result
    print(f"{args.split} split of {args.data}: {part.num_examples} examples, {part.num_classes} identities, "
          f"{first.num_positive_pairs} positive / {first.num_negative_pairs} negative pairs"
          + (" (exact: all pairs)" if first.exact else " (SAMPLED pairs, not exact)"))
    print()
    for line in format_far_tables(tables):
        print(line)
    print()
    keys = ["roc_auc", "recall_at_far_0.001_in_batch_approx", "precision_at_1", "map_at_r"]
    if len(paths) == 1:
        for k in keys:
            print(f"  {k:40s} {fmt(flats[names[0]][k])}")
    else:
        width = max(12, *(len(n) for n in names))
        print(f"  {'':40s} " + "  ".join(n.ljust(width) for n in names).rstrip())
        for k in keys:
            print(f"  {k:40s} " + "  ".join(fmt(flats[n][k]).ljust(width) for n in names).rstrip())
    if args.roc:
        print(f"ROC curve{'s' if len(paths) > 1 else ''}: {args.roc}")
    return 0

"""`dpemb eval`: score one or several trained backbones on a dataset's held-out identities,
or one on image files by the field's verification protocols (`--pairs`: LFW-style pair
lists with k-fold accuracy; `--templates`: IJB-style template 1:1)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dpemb.cli.common import (
    UsageError, add_device_flag, add_resize_flag, check_input, device_from, fmt, guarded,
    print_json,
)
from dpemb.data.dataset import DataError

PAIR_FARS = (1e-3, 1e-2, 1e-1)
TEMPLATE_FARS = (1e-4, 1e-3, 1e-2, 1e-1)


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
        raise DataError(f"the {args.split} split of {args.data} has fewer than 2 examples")
    # every model is loaded and checked before the first (long) evaluation
    loaded = []
    for path in paths:
        model, card = load_artifact(path, device)
        fit = check_input(model, card, part, args.data, resize=args.resize)
        loaded.append((model, fit or (None, "")))
    notes = sys.stderr if args.json else sys.stdout
    tables, flats = {}, {}
    for name, path, (model, (size, note)) in zip(names, paths, loaded):
        if note and shards.is_main:
            print(note + (f" for {name}" if len(paths) > 1 else ""), file=notes)
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


# ------------------------------------------------------ --pairs and --templates (image files)
def embed_files(model: Any, card: dict, paths: list[Path], where: list[str], *, flip: bool,
                batch_size: int, device: Any, show_progress: bool = True,
                on_bad: Callable[[int, DataError], None] | None = None) -> np.ndarray:
    """L2-normalised float64 embeddings of image files, decoded at the model card's image
    size and channels. With ``flip``: the normalised sum of the embeddings of the image
    and of its horizontal mirror. A missing or corrupt file is a DataError naming it and
    the protocol file line that named it; with ``on_bad``, ``on_bad(index, error)`` raises
    or returns, and then the file has no row."""
    import torch

    from dpemb.data.images import decode_image
    from dpemb.data.tensors import to_float_tensor
    from dpemb.models import embed
    from dpemb.progress import progress

    kw = card["backbone"]["kwargs"]
    rows = [np.zeros((0, model.embedding_dim), dtype=np.float64)]
    bar = progress(total=len(paths), desc="embedding images", unit="img", enabled=show_progress)
    with bar:
        for lo in range(0, len(paths), batch_size):
            batch = []
            for i in range(lo, min(lo + batch_size, len(paths))):
                try:
                    batch.append(decode_image(paths[i], image_size=kw["image_size"], channels=kw["in_channels"]))
                except DataError as e:
                    if on_bad is None:
                        raise DataError(f"{e} (named at {where[i]})") from e
                    on_bad(i, e)
            bar.update(min(batch_size, len(paths) - lo))
            if not batch:
                continue
            arr = np.stack(batch)  # (B, H, W, C)
            with torch.no_grad():
                e = embed(model, to_float_tensor(arr, device)).double().cpu().numpy()
                if flip:
                    mirrored = np.ascontiguousarray(arr[:, :, ::-1, :])
                    e = e + embed(model, to_float_tensor(mirrored, device)).double().cpu().numpy()
                    e /= np.linalg.norm(e, axis=1, keepdims=True)
            rows.append(e)
    return np.concatenate(rows)


def _cosines(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", x[a], x[b])


def _print_far_rows(record: dict[str, Any], roc: str | None) -> None:
    """The TAR at FAR table, the AUC and where the ROC went, of ``_verification``'s record."""
    rows = record["tar_at_far"]
    print("FAR   TAR     threshold  measurable")
    for r in rows:
        th = f"{r['threshold']:.6f}" if r["threshold"] is not None else "inf"
        far = f"{r['far']:.0e}".replace("e-0", "e-")
        print(f"{far:<5} {r['tar']:.4f}  {th:<10} {'yes' if r['measurable'] else 'no *'}")
    print("TAR at FAR f: the largest TAR over thresholds with FAR <= f (accept score >= threshold).")
    if not all(r["measurable"] for r in rows):
        print(f"* not measurable: FAR below 1/{record['impostor_pairs']} impostor pairs; the TAR "
              "shown is at zero false accepts.")
    print()
    print(f"  {'roc_auc':40s} {fmt(record['roc_auc'])}")
    if roc:
        print(f"ROC curve: {roc}")


def _embed_listed(args: argparse.Namespace, read: Callable[[], Any], *,
                  flip: bool) -> tuple[Any, Any]:
    """Check the flags, load the one model, read the protocol's files (``read()``) and embed
    every image they name: (what ``read`` returned, the embeddings). Under torchrun each
    rank embeds a share and a worker rank exits here once it is delivered."""
    from dpemb.training.artifact import load_artifact
    from dpemb.training.shards import RowShards

    models = list(args.model) + list(args.compare)
    if len(models) != 1:
        raise UsageError("--pairs and --templates evaluate one model at a time; run them once per model")
    if args.images is None:
        raise UsageError("--pairs and --templates need --images ROOT (the folder the image paths "
                         "are relative to)")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be a positive integer; got {args.batch_size}")
    shards, device = RowShards.join(device_from(args))
    model, card = load_artifact(models[0], device)
    lists = read()
    lo, hi = shards.span(len(lists.images.paths))
    part = embed_files(model, card, lists.images.paths[lo:hi], lists.images.where[lo:hi], flip=flip,
                       batch_size=args.batch_size, device=device,
                       show_progress=shards.is_main and not args.json)
    x = shards.gather(part)
    shards.finish()
    return lists, x


def _verification(args: argparse.Namespace, scores: np.ndarray, same: np.ndarray,
                  fars: tuple[float, ...], title: str) -> dict[str, Any]:
    """TAR at each FAR of ``fars`` and the AUC of the listed pairs' ``scores`` (the ROC
    drawn to --roc): the record --json prints, less the protocol's own fields."""
    from dpemb.metrics.verification import listed_pair_metrics

    res = listed_pair_metrics(scores, same, fars=fars, warn=False)
    if args.roc:
        from dpemb.metrics import plot_roc

        plot_roc({Path(args.model[0]).name: res}, args.roc, title=title)
    t = res.thresholds
    return {"model": args.model[0],
            "genuine_pairs": int(same.sum()), "impostor_pairs": int((~same).sum()),
            "tar_at_far": [{"far": f, "tar": res.recall_at_far[f],
                            "threshold": t[f] if np.isfinite(t[f]) else None,
                            "measurable": res.supported(f)} for f in fars],
            "roc_auc": res.auc}


def run_pairs(args: argparse.Namespace) -> int:
    from dpemb.data.pair_lists import read_pairs
    from dpemb.metrics.pairs import assign_folds, kfold_accuracy

    pl, x = _embed_listed(args, lambda: read_pairs(args.pairs, args.images), flip=args.flip)
    folds, folds_note = pl.folds, "given in the file"
    if folds is None:
        folds = assign_folds(pl.same, 10)
        folds_note = "assigned: genuine and impostor pairs dealt round robin in file order (no fold column)"
    k = int(np.unique(folds).size)
    scores = _cosines(x, pl.first, pl.second)
    acc = kfold_accuracy(scores, pl.same, folds)
    rec = _verification(args, scores, pl.same, PAIR_FARS, f"ROC (pairs of {Path(args.pairs).name})")
    if args.json:
        print_json({**rec, "protocol": "pairs", "pairs": str(args.pairs), "format": pl.format,
                    "images": len(pl.images.paths), "flip": args.flip, "folds": k,
                    "folds_source": folds_note, "accuracy": acc.to_dict()})
        return 0
    fmt_name = "LFW pairs.txt" if pl.format == "lfw" else "CSV"
    print(f"{args.pairs} ({fmt_name}): {rec['genuine_pairs']} genuine / {rec['impostor_pairs']} "
          f"impostor pairs of {len(pl.images.paths)} images"
          + (", flip: embeddings of image + mirror image" if args.flip else ""))
    print(f"folds: {k}, {folds_note}")
    print()
    print(f"{k}-fold accuracy: {acc.mean:.4f} ± {acc.std:.4f} (mean ± std over folds; each fold's "
          f"threshold chosen on the other {k - 1} to maximise their accuracy)")
    print("  per fold: " + " ".join(f"{a:.4f}" for a in acc.accuracies))
    print()
    _print_far_rows(rec, args.roc)
    return 0


def run_templates(args: argparse.Namespace) -> int:
    from dpemb.data.pair_lists import read_templates
    from dpemb.metrics.templates import pool_templates

    if args.template_pairs is None:
        raise UsageError("--templates needs --template-pairs P.csv (template1,template2,same)")
    if args.flip:
        raise UsageError("--flip applies to --pairs only")
    tp, x = _embed_listed(
        args, lambda: read_templates(args.templates, args.template_pairs, args.images), flip=False)
    feats = pool_templates(x[tp.image_of], tp.template_of, tp.media_of)
    rec = _verification(args, _cosines(feats, tp.first, tp.second), tp.same, TEMPLATE_FARS,
                        f"ROC (template pairs of {Path(args.template_pairs).name})")
    pooling = "media, then template" if tp.media_of is not None else "template"
    if args.json:
        print_json({**rec, "protocol": "templates", "templates": str(args.templates),
                    "template_pairs": str(args.template_pairs), "num_templates": len(tp.template_names),
                    "images": len(tp.images.paths), "pooling": pooling})
        return 0
    print(f"{args.templates}: {len(tp.template_names)} templates of {len(tp.images.paths)} images "
          f"(feature: mean of L2-normalised embeddings per {pooling}, re-normalised; score: cosine)")
    print(f"{args.template_pairs}: {rec['genuine_pairs']} genuine / {rec['impostor_pairs']} "
          "impostor template pairs")
    print()
    _print_far_rows(rec, args.roc)
    return 0

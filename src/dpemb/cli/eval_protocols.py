"""`dpemb eval --pairs` and `dpemb eval --templates`: the field's verification protocols
on image files (LFW-style pair lists with k-fold accuracy; IJB-style template 1:1)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from dpemb.cli.common import UsageError, device_from, fmt, print_json
from dpemb.data.dataset import DataError

PAIR_FARS = (1e-3, 1e-2, 1e-1)
TEMPLATE_FARS = (1e-4, 1e-3, 1e-2, 1e-1)


def embed_files(model: Any, card: dict, paths: list[Path], where: list[str], *, flip: bool,
                batch_size: int, device: Any, show_progress: bool = True) -> np.ndarray:
    """L2-normalised float64 embeddings of image files, decoded at the model card's image
    size and channels. With ``flip``: the normalised sum of the embeddings of the image
    and of its horizontal mirror. A missing or corrupt file is a DataError naming it and
    the protocol file line that named it."""
    import torch

    from dpemb.data.images import decode_image
    from dpemb.data.tensors import to_float_tensor
    from dpemb.models import embed
    from dpemb.progress import progress

    kw = card["backbone"]["kwargs"]
    out = np.zeros((len(paths), model.embedding_dim), dtype=np.float64)
    bar = progress(total=len(paths), desc="embedding images", unit="img", enabled=show_progress)
    with bar:
        for lo in range(0, len(paths), batch_size):
            batch = []
            for i in range(lo, min(lo + batch_size, len(paths))):
                try:
                    batch.append(decode_image(paths[i], image_size=kw["image_size"], channels=kw["in_channels"]))
                except DataError as e:
                    raise DataError(f"{e} (named at {where[i]})") from e
            arr = np.stack(batch)  # (B, H, W, C)
            with torch.no_grad():
                e = embed(model, to_float_tensor(arr, device)).double().cpu().numpy()
                if flip:
                    mirrored = np.ascontiguousarray(arr[:, :, ::-1, :])
                    e = e + embed(model, to_float_tensor(mirrored, device)).double().cpu().numpy()
                    e /= np.linalg.norm(e, axis=1, keepdims=True)
            out[lo : lo + len(batch)] = e
            bar.update(len(batch))
    return out


def _cosines(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", x[a], x[b])


def _far_rows(result: Any, fars: tuple[float, ...]) -> list[dict[str, Any]]:
    return [{"far": f, "tar": result.recall_at_far[f], "threshold": result.thresholds[f],
             "measurable": result.supported(f)} for f in fars]


def _print_far_rows(rows: list[dict[str, Any]], n_imp: int) -> None:
    print("FAR   TAR     threshold  measurable")
    for r in rows:
        th = f"{r['threshold']:.6f}" if np.isfinite(r["threshold"]) else "inf"
        far = f"{r['far']:.0e}".replace("e-0", "e-")
        print(f"{far:<5} {r['tar']:.4f}  {th:<10} {'yes' if r['measurable'] else 'no *'}")
    print("TAR at FAR f: the largest TAR over thresholds with FAR <= f (accept score >= threshold).")
    if not all(r["measurable"] for r in rows):
        print(f"* not measurable: FAR below 1/{n_imp} impostor pairs; the TAR shown is at zero false accepts.")


def _json_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "threshold": r["threshold"] if np.isfinite(r["threshold"]) else None} for r in rows]


def _roc(args: argparse.Namespace, result: Any, title: str) -> None:
    if args.roc:
        from dpemb.metrics import plot_roc

        plot_roc({Path(args.model[0]).name: result}, args.roc, title=title)


def _load(args: argparse.Namespace) -> tuple[Any, dict, Any, Any]:
    from dpemb.training.artifact import load_artifact
    from dpemb.training.shards import RowShards

    models = list(args.model) + list(args.compare)
    if len(models) != 1:
        raise UsageError("--pairs and --templates evaluate one model at a time; run them once per model")
    if args.images is None:
        raise UsageError("--pairs and --templates need --images ROOT (the folder the image paths are relative to)")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be a positive integer; got {args.batch_size}")
    shards, device = RowShards.join(device_from(args))  # under torchrun: each rank embeds a share
    model, card = load_artifact(models[0], device)
    return model, card, device, shards


def _embed_all(model: Any, card: dict, images: Any, args: argparse.Namespace, device: Any, shards: Any,
               flip: bool) -> np.ndarray | None:
    """Every image's embedding on rank 0 (None on the other ranks of a torchrun job,
    which have then delivered their share)."""
    lo, hi = shards.span(len(images.paths))
    part = embed_files(model, card, images.paths[lo:hi], images.where[lo:hi], flip=flip,
                       batch_size=args.batch_size, device=device,
                       show_progress=shards.is_main and not args.json)
    return shards.gather(part)


def run_pairs(args: argparse.Namespace) -> int:
    from dpemb.data.pair_lists import read_pairs
    from dpemb.metrics.pairs import assign_folds, kfold_accuracy
    from dpemb.metrics.verification import listed_pair_metrics

    model, card, device, shards = _load(args)
    pl = read_pairs(args.pairs, args.images)
    folds, folds_note = pl.folds, "given in the file"
    if folds is None:
        folds = assign_folds(pl.same, 10)
        folds_note = "assigned: genuine and impostor pairs dealt round robin in file order (no fold column)"
    k = int(np.unique(folds).size)
    x = _embed_all(model, card, pl.images, args, device, shards, args.flip)
    shards.finish()  # a worker rank exits here
    scores = _cosines(x, pl.first, pl.second)
    acc = kfold_accuracy(scores, pl.same, folds)
    res = listed_pair_metrics(scores, pl.same, fars=PAIR_FARS, warn=False)
    rows = _far_rows(res, PAIR_FARS)
    n_gen, n_imp = int(pl.same.sum()), int((~pl.same).sum())
    _roc(args, res, f"ROC (pairs of {Path(args.pairs).name})")
    if args.json:
        print_json({"model": args.model[0], "protocol": "pairs", "pairs": str(args.pairs),
                    "format": pl.format, "images": len(pl.images.paths), "flip": args.flip,
                    "genuine_pairs": n_gen, "impostor_pairs": n_imp, "folds": k, "folds_source": folds_note,
                    "accuracy": acc.to_dict(), "tar_at_far": _json_rows(rows), "roc_auc": res.auc})
        return 0
    fmt_name = "LFW pairs.txt" if pl.format == "lfw" else "CSV"
    print(f"{args.pairs} ({fmt_name}): {n_gen} genuine / {n_imp} impostor pairs of {len(pl.images.paths)} images"
          + (", flip: embeddings of image + mirror image" if args.flip else ""))
    print(f"folds: {k}, {folds_note}")
    print()
    print(f"{k}-fold accuracy: {acc.mean:.4f} ± {acc.std:.4f} (mean ± std over folds; each fold's "
          f"threshold chosen on the other {k - 1} to maximise their accuracy)")
    print("  per fold: " + " ".join(f"{a:.4f}" for a in acc.accuracies))
    print()
    _print_far_rows_auc(rows, n_imp, res.auc, args.roc)
    return 0


def _print_far_rows_auc(rows, n_imp: int, auc: float, roc: str | None) -> None:
    _print_far_rows(rows, n_imp)
    print()
    print(f"  {'roc_auc':40s} {fmt(auc)}")
    if roc:
        print(f"ROC curve: {roc}")


def run_templates(args: argparse.Namespace) -> int:
    from dpemb.data.pair_lists import read_templates
    from dpemb.metrics.templates import pool_templates
    from dpemb.metrics.verification import listed_pair_metrics

    if args.template_pairs is None:
        raise UsageError("--templates needs --template-pairs P.csv (template1,template2,same)")
    if args.flip:
        raise UsageError("--flip applies to --pairs only")
    model, card, device, shards = _load(args)
    tp = read_templates(args.templates, args.template_pairs, args.images)
    x = _embed_all(model, card, tp.images, args, device, shards, False)
    shards.finish()  # a worker rank exits here
    feats = pool_templates(x[tp.image_of], tp.template_of, tp.media_of)
    scores = _cosines(feats, tp.first, tp.second)
    res = listed_pair_metrics(scores, tp.same, fars=TEMPLATE_FARS, warn=False)
    rows = _far_rows(res, TEMPLATE_FARS)
    n_gen, n_imp = int(tp.same.sum()), int((~tp.same).sum())
    pooling = "media, then template" if tp.media_of is not None else "template"
    _roc(args, res, f"ROC (template pairs of {Path(args.template_pairs).name})")
    if args.json:
        print_json({"model": args.model[0], "protocol": "templates", "templates": str(args.templates),
                    "template_pairs": str(args.template_pairs), "num_templates": len(tp.template_names),
                    "images": len(tp.images.paths), "pooling": pooling,
                    "genuine_pairs": n_gen, "impostor_pairs": n_imp,
                    "tar_at_far": _json_rows(rows), "roc_auc": res.auc})
        return 0
    print(f"{args.templates}: {len(tp.template_names)} templates of {len(tp.images.paths)} images "
          f"(feature: mean of L2-normalised embeddings per {pooling}, re-normalised; score: cosine)")
    print(f"{args.template_pairs}: {n_gen} genuine / {n_imp} impostor template pairs")
    print()
    _print_far_rows_auc(rows, n_imp, res.auc, args.roc)
    return 0

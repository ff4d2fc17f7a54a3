"""`dpemb embed`: images in, L2-normalised embeddings out (.npy)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from dpemb.cli.common import (
    add_device_flag, add_resize_flag, check_input, device_from, guarded,
)
from dpemb.data.images import IMAGE_EXTENSIONS

SPLITS = ("train", "public", "validation", "test")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "embed",
        help="compute embeddings of images with a trained backbone",
        description=(
            "Embed image files (or a directory of them, searched recursively, or a dpemb "
            "dataset directory) with a trained backbone. Writes an (N, D) float32 .npy of "
            "L2-normalised embeddings and, beside it, a .txt listing the input of each row. "
            "Image files are decoded at the model's input size; a dataset's images must have "
            "it (else an error says how to fix it) unless --resize. --split embeds one part of a "
            "dataset; --skip-bad skips (and names) image files that cannot be decoded."
        ),
    )
    p.add_argument("model", help="trained model: a run directory or a release artifact (a directory holding "
                        "model.safetensors + model_card.json, from `dpemb train` or `dpemb export`); "
                        "a private checkpoint is refused")
    p.add_argument("inputs", nargs="+", help="image files, directories of images, or a dataset dir")
    p.add_argument("--out", required=True, help="output .npy path")
    p.add_argument("--batch-size", type=int, default=256, help="speed only")
    p.add_argument("--split", choices=SPLITS, default=None,
                   help="with a dataset directory: embed only this part (train = the private users; "
                        "test = the evaluation users); default: every example")
    p.add_argument("--skip-bad", action="store_true",
                   help="with image files: skip a file that cannot be decoded (named, and counted in a "
                        "summary line) instead of stopping; the .txt lists the files embedded")
    add_resize_flag(p)
    add_device_flag(p)
    p.set_defaults(func=guarded(run, "embed"))


def _collect(inputs: list[str]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS))
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path} does not exist")
    return files


def run(args: argparse.Namespace) -> int:
    from dpemb.cli.evaluate import embed_files
    from dpemb.data.dataset import DataError, UserDataset
    from dpemb.training.artifact import load_artifact
    from dpemb.training.evaluate import embed_images
    from dpemb.training.shards import RowShards
    from dpemb.atomic import atomic_write, atomic_write_text

    shards, device = RowShards.join(device_from(args))  # under torchrun: each rank embeds a share
    model, card = load_artifact(args.model, device)
    if len(args.inputs) == 1 and (Path(args.inputs[0]) / "meta.json").is_file():
        if args.skip_bad:
            raise DataError("--skip-bad is for image files; a dataset directory's images are already decoded")
        ds = UserDataset.load(args.inputs[0])
        if args.split is not None:
            ds = ds.split().get(args.split)
            if ds.num_examples == 0:
                raise DataError(f"the {args.split} split of {args.inputs[0]} is empty; choose another --split "
                                f"({', '.join(SPLITS)}) or none")
        size, note = check_input(model, card, ds, args.inputs[0], resize=args.resize) or (None, "")
        if note:
            print(note)
        emb = shards.gather(embed_images(model, shards.share_of(ds.images), batch_size=args.batch_size,
                                         device=device, resize_to=size).numpy())
        skipped = None
        names = [f"{ds.user_names[u]}\t{ds.label_names[l]}" for u, l in zip(ds.user_of_example(), ds.labels)]
    else:
        if args.split is not None:
            raise DataError(f"--split is for a dataset directory (one with meta.json); {' '.join(args.inputs)} "
                            "is not one: leave --split out to embed image files")
        files = _collect(args.inputs)
        if not files:
            raise FileNotFoundError("no image files found in the inputs")
        lo, hi = shards.span(len(files))
        bad: set[int] = set()

        def skip(i: int, e: DataError) -> None:
            if not args.skip_bad:
                raise DataError(f"{e} (or pass --skip-bad to skip the files that cannot be "
                                "decoded)") from e
            print(f"skipped: {e}", file=sys.stderr)
            bad.add(i)

        share = embed_files(model, card, files[lo:hi], [], flip=False, batch_size=args.batch_size,
                            device=device, show_progress=False, on_bad=skip)
        emb = shards.gather(share.astype(np.float32))
        rows = [str(f) for i, f in enumerate(files[lo:hi]) if i not in bad]  # in order
        names = shards.gather(np.array(rows, dtype=object))
        skipped = shards.gather(np.array([str(files[lo + i]) for i in sorted(bad)], dtype=object))
    shards.finish()  # a worker rank exits here
    if skipped is not None and args.skip_bad:
        print(f"skipped {len(skipped)} of {len(skipped) + len(names)} image files that could not be decoded"
              + (f": {', '.join(skipped)}" if len(skipped) else ""))
    if not len(names):
        raise DataError("no image could be decoded; nothing to embed")
    out = Path(args.out)
    def write(p: Path) -> None:
        with open(p, "wb") as f:
            np.save(f, emb.astype(np.float32))

    atomic_write(out, write)
    atomic_write_text(out.with_suffix(".txt"), "".join(n + "\n" for n in names))
    print(f"wrote {emb.shape[0]} embeddings of dimension {emb.shape[1]} to {out} "
          f"(rows listed in {out.with_suffix('.txt')})")
    return 0

"""`dpemb embed`: images in, L2-normalised embeddings out (.npy)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from dpemb.cli.common import add_device_flag, device_from, guarded
from dpemb.cli.model_input import add_resize_flag

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "embed",
        help="compute embeddings of images with a trained backbone",
        description=(
            "Embed image files (or a directory of them, searched recursively, or a dpemb "
            "dataset directory) with a trained backbone. Writes an (N, D) float32 .npy of "
            "L2-normalised embeddings and, beside it, a .txt listing the input of each row. "
            "Image files are decoded at the model's input size; a dataset's images must have "
            "it (else an error says how to fix it) unless --resize."
        ),
    )
    p.add_argument("model", help="trained model: a run directory or a release artifact (a directory holding "
                        "model.safetensors + model_card.json, from `dpemb train` or `dpemb export`); "
                        "a private checkpoint is refused")
    p.add_argument("inputs", nargs="+", help="image files, directories of images, or a dataset dir")
    p.add_argument("--out", required=True, help="output .npy path")
    p.add_argument("--batch-size", type=int, default=256, help="speed only")
    add_resize_flag(p)
    add_device_flag(p)
    p.set_defaults(func=guarded(run, "embed"))


def _collect(inputs: list[str]) -> list[Path]:
    files: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES))
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path} does not exist")
    return files


def run(args: argparse.Namespace) -> int:
    import torch

    from dpemb.data.dataset import UserDataset
    from dpemb.data.images import decode_image
    from dpemb.data.tensors import to_float_tensor
    from dpemb.models import embed
    from dpemb.training.artifact import load_artifact
    from dpemb.cli.model_input import check_input, resize_note
    from dpemb.training.evaluate import embed_images
    from dpemb.training.shards import RowShards
    from dpemb.atomic import atomic_write, atomic_write_text

    shards, device = RowShards.join(device_from(args))  # under torchrun: each rank embeds a share
    model, card = load_artifact(args.model, device)
    kw = card["backbone"]["kwargs"]
    if len(args.inputs) == 1 and (Path(args.inputs[0]) / "meta.json").is_file():
        ds = UserDataset.load(args.inputs[0])
        size = check_input(model, card, ds, args.inputs[0], resize=args.resize)
        if size is not None:
            print(resize_note(model, card, ds, args.inputs[0]))
        emb = shards.gather(embed_images(model, shards.share_of(ds.images), batch_size=args.batch_size,
                                         device=device, resize_to=size).numpy())
        names = [f"{ds.user_names[u]}\t{ds.label_names[l]}" for u, l in zip(ds.user_of_example(), ds.labels)]
    else:
        files = _collect(args.inputs)
        if not files:
            raise FileNotFoundError("no image files found in the inputs")
        lo, hi = shards.span(len(files))
        chunks = [np.zeros((0, model.embedding_dim), dtype=np.float32)]
        for i in range(lo, hi, args.batch_size):
            batch = np.stack([decode_image(f, image_size=kw["image_size"], channels=kw["in_channels"])
                              for f in files[i : min(i + args.batch_size, hi)]])
            with torch.no_grad():
                chunks.append(embed(model, to_float_tensor(batch, device)).cpu().numpy())
        emb = shards.gather(np.concatenate(chunks))
        names = [str(f) for f in files]
    shards.finish()  # a worker rank exits here
    out = Path(args.out)
    def write(p: Path) -> None:
        with open(p, "wb") as f:
            np.save(f, emb.astype(np.float32))

    atomic_write(out, write)
    atomic_write_text(out.with_suffix(".txt"), "".join(n + "\n" for n in names))
    print(f"wrote {emb.shape[0]} embeddings of dimension {emb.shape[1]} to {out} "
          f"(rows listed in {out.with_suffix('.txt')})")
    return 0

"""The model's input geometry against a dataset's images, in one place for `dpemb eval`
and `dpemb embed`: a mismatch is one line naming both sizes and the fix, or (with
``--resize``) a bilinear, antialiased resize on the fly that the command announces."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from dpemb.data.dataset import DataError, UserDataset

if TYPE_CHECKING:  # torch is imported where it is used: `dpemb --help` stays fast
    import torch

RESIZE_HELP = ("resize the dataset's images to the model's input size on the fly (bilinear, "
               "antialiased) when they differ; without it a size mismatch is an error")


def add_resize_flag(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument("--resize", action="store_true", help=RESIZE_HELP)


def model_geometry(model: Any, card: dict[str, Any] | None) -> tuple[int, int]:
    """``(image_size, in_channels)`` the model takes: from the card's backbone kwargs,
    else from the model."""
    kw = ((card or {}).get("backbone") or {}).get("kwargs") or {}
    size = kw.get("image_size", getattr(model, "image_size", None))
    channels = kw.get("in_channels", getattr(model, "in_channels", None))
    if size is None or channels is None:
        raise DataError("the model card does not say the model's input size (backbone kwargs "
                        "image_size and in_channels)")
    return int(size), int(channels)


def check_input(
    model: Any, card: dict[str, Any] | None, ds: UserDataset, data_name: str, *, resize: bool
) -> int | None:
    """None when ``ds``'s images fit the model; the side to resize them to when they
    differ in size only and ``resize``; otherwise a one-line DataError naming both
    geometries and the fix."""
    size, channels = model_geometry(model, card)
    h, w, c = ds.image_shape
    want, have = f"{size}x{size}x{channels}", f"{h}x{w}x{c}"
    if c != channels:
        raise DataError(f"the model takes {want} images, {data_name} holds {have}: re-make the data with "
                        f"--channels {channels} (--resize changes the size, not the channels)")
    if (h, w) == (size, size):
        return None
    if not resize:
        raise DataError(f"the model takes {want} images, {data_name} holds {have}: re-make the data with "
                        f"--image-size {size}, or pass --resize to resize on the fly")
    return size


def resize_note(model: Any, card: dict[str, Any] | None, ds: UserDataset, data_name: str) -> str:
    size, channels = model_geometry(model, card)
    h, w, c = ds.image_shape
    return (f"note: resizing {data_name}'s {h}x{w}x{c} images to the model's {size}x{size}x{channels} "
            "(bilinear, antialiased)")


def resize_images(x: torch.Tensor, size: int) -> torch.Tensor:
    """Bilinear, antialiased resize of float ``(N, C, H, W)`` to ``(N, C, size, size)``."""
    import torch

    if tuple(x.shape[-2:]) == (size, size):
        return x
    return torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False,
                                           antialias=True)


def embed_dataset(
    model: Any,
    ds: UserDataset,
    *,
    batch_size: int = 512,
    device: torch.device | str = "cpu",
    resize_to: int | None = None,
) -> torch.Tensor:
    """L2-normalised embeddings (CPU, dataset order) of every example of ``ds``, its
    images resized to ``resize_to`` first when given."""
    import torch

    from dpemb.data.tensors import to_float_tensor
    from dpemb.models import embed

    out = []
    with torch.no_grad():
        for start in range(0, ds.num_examples, batch_size):
            x = to_float_tensor(ds.images[start : start + batch_size], device=device)
            if resize_to is not None:
                x = resize_images(x, resize_to)
            out.append(embed(model, x, batch_size=batch_size).cpu())
    return torch.cat(out) if out else torch.zeros(0, model.embedding_dim)

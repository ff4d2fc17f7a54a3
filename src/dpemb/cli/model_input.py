"""The model's input geometry against a dataset's images, in one place for `dpemb eval`
and `dpemb embed`: a mismatch is one line naming both sizes and the fix, or (with
``--resize``) a bilinear, antialiased resize on the fly that the command announces
(``training.evaluate.embed_images(resize_to=...)`` does it)."""

from __future__ import annotations

import argparse
from typing import Any

from dpemb.data.dataset import DataError, UserDataset


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

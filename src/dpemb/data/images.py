"""Decode one image file into a fixed-size uint8 array.

Every file-based importer goes through :func:`decode_image_geometry`, so all of them
agree on geometry: no padding, no distortion of the aspect ratio. EXIF orientation is
applied. 16-bit (and 32-bit integer) grey images are scaled to 8 bits (value / 257,
rounded), never clipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from dpemb.data.dataset import DataError

#: The image side of a manifest or folder import unless given (the CLI's default too):
#: the glyph benchmark's 28 px
DEFAULT_IMAGE_SIZE = 28

#: File name endings treated as images by the folder importers (case-insensitive).
IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"})

_MODES = {1: "L", 3: "RGB"}


def is_image_file(name: str | os.PathLike) -> bool:
    """True when the name ends in one of :data:`IMAGE_EXTENSIONS` and is not hidden."""
    p = Path(name)
    return not p.name.startswith(".") and p.suffix.lower() in IMAGE_EXTENSIONS


def check_geometry(image_size: int, channels: int) -> None:
    """Raise ``ValueError`` unless ``image_size`` >= 1 and ``channels`` is 1 or 3."""
    if not isinstance(image_size, (int, np.integer)) or image_size < 1:
        raise ValueError(f"image_size must be a positive integer, got {image_size!r}")
    if channels not in _MODES:
        raise ValueError(f"channels must be 1 (grey) or 3 (RGB), got {channels!r}")


def decode_image(path: str | os.PathLike, *, image_size: int, channels: int) -> np.ndarray:
    """Read ``path`` and return uint8 ``(image_size, image_size, channels)``.

    The shorter side is resized to ``image_size`` (antialiased bilinear) and the
    centre square is cropped; colour images become grey with PIL's ITU-R 601-2 luma
    when ``channels == 1``; 16-bit grey is scaled to 8 bits. Raises
    :class:`DataError` naming the file when it is missing, unreadable, truncated,
    not an image, or a floating-point / out-of-range integer image.
    """
    return decode_image_geometry(path, image_size=image_size, channels=channels)[0]


def _to_8_bit(img: Image.Image, path: Path) -> Image.Image:
    """A 16- or 32-bit integer grey image as 8-bit grey: value / 257, rounded."""
    arr = np.asarray(img).astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() > 65535):
        raise DataError(
            f"{path}: {img.mode} image with values {arr.min()}..{arr.max()} outside 0..65535; "
            "save it as an 8- or 16-bit image"
        )
    return Image.fromarray(((arr * 2 + 257) // 514).astype(np.uint8), "L")


def decode_image_geometry(
    path: str | os.PathLike, *, image_size: int, channels: int
) -> tuple[np.ndarray, tuple[int, int]]:
    """:func:`decode_image` and the file's own ``(width, height)``: an image whose
    shorter side is below ``image_size`` was upscaled, a non-square one was
    centre-cropped."""
    check_geometry(image_size, channels)
    mode = _MODES[channels]
    path = Path(path)
    try:
        with Image.open(path) as img:
            own_size = img.size  # before a JPEG draft shrinks it (EXIF rotation keeps min and squareness)
            if img.mode == "F":
                raise DataError(f"{path}: floating-point image; save it as an 8- or 16-bit image")
            if not img.mode.startswith("I"):
                # JPEG: let the decoder shrink by a power of two while staying >= size.
                img.draft(mode, (image_size, image_size))
            img = ImageOps.exif_transpose(img)
            if img.mode.startswith("I"):  # 16-bit grey (I;16*) or 32-bit integer (I)
                img = _to_8_bit(img, path)
            if img.mode != mode:
                img = img.convert(mode)
            w, h = img.size
            if w < 1 or h < 1:
                raise DataError(f"{path}: image has size {w}x{h}; replace or remove the file")
            side = min(w, h)
            left, top = (w - side) / 2.0, (h - side) / 2.0
            img = img.resize(
                (image_size, image_size),
                Image.Resampling.BILINEAR,
                box=(left, top, left + side, top + side),
            )
            arr = np.asarray(img, dtype=np.uint8)
    except FileNotFoundError as e:
        raise DataError(f"{path}: file not found; check the path or remove the row") from e
    except IsADirectoryError as e:
        raise DataError(f"{path}: is a directory, expected an image file") from e
    except UnidentifiedImageError as e:
        raise DataError(
            f"{path}: not a readable image (unknown or corrupt format); replace or remove it"
        ) from e
    except (OSError, SyntaxError, ValueError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"{path}: cannot decode image ({e}); replace or remove it") from e
    except Image.DecompressionBombError as e:
        raise DataError(f"{path}: image is implausibly large ({e})") from e
    if arr.ndim == 2:
        arr = arr[:, :, None]
    return arr, own_size

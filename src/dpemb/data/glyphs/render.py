"""Rasterising glyphs and drawing them in a writer's style, with per-image jitter.

:class:`StrokeCache` rasterises each (font, code point) once per run; :func:`render_images`
draws every example in batches (torch ``grid_sample``) through the writer's style and the
image's jitter, in a window enlarged so that no glyph is ever clipped (the frame, the stages,
the style ranges and the jitter: docs/GLYPHS.md, "Rendering").

Every random number is drawn up front from seeded generators (noise per fixed-size
chunk), so a configuration always gives byte-identical images.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageFont
from tqdm.auto import tqdm

from dpemb.data.glyphs.fonts import FontInfo

SUPERSAMPLE = 2  # sample at twice the output resolution, then average 2x2
FRAME_EM = 1.4  # frame side in em
FRAME_CENTER_EM = 0.3  # frame centre above the baseline, in em
CANVAS_FRAMES = 1.25  # cached canvas side / frame side (room for thickening)
STROKE_EM = (0.06, 0.15)  # writers' target stroke widths, in em
MAX_THICKEN_EM = 0.08  # largest dilation radius, in em
REFERENCE_CHARS = "lIHnox\u4e00\u5341\u53e3\uc774\ud558"  # for a font's stroke width
MARGIN_PX = 1.0  # output pixels kept free of ink at the border
CHUNK = 512  # images per rendering batch (fixed: the noise stream depends on it)
WARP_BANK = 64  # smooth displacement fields shared by all images
RENDER_THREADS = 1  # torch intra-op threads while drawing


@dataclass(frozen=True)
class Geometry:
    """Pixel sizes derived from the output image size."""

    image_size: int

    @property
    def font_px(self) -> int:
        """Font size (pixels per em) such that the frame spans the supersampled output."""
        return max(16, round(self.image_size * SUPERSAMPLE / FRAME_EM))

    @property
    def canvas(self) -> int:
        return int(math.ceil(self.font_px * FRAME_EM * CANVAS_FRAMES))

    @property
    def max_thicken(self) -> int:
        """Largest dilation radius in canvas pixels."""
        return int(round(MAX_THICKEN_EM * self.font_px))

    @property
    def pad(self) -> int:
        return self.max_thicken + 2


# ---------------------------------------------------------------------- strokes
class StrokeCache:
    """Rasterised glyphs, one per (font, code point), rendered at most once per run.

    ``rasters[k]`` is a uint8 ``(C, C)`` canvas; ``meta[k]`` holds, in continuous
    canvas coordinates (pixel i spans [i, i+1]): frame centre x, y, frame half-side,
    and the ink box x0, y0, x1, y1.
    """

    def __init__(self, fonts: Sequence[FontInfo], geometry: Geometry) -> None:
        self.fonts = list(fonts)
        self.geometry = geometry
        self.index: dict[tuple[int, int], int] = {}
        self._rasters: list[np.ndarray] = []
        self._meta: list[tuple[float, ...]] = []
        self._empty: set[tuple[int, int]] = set()
        self._stroke: dict[int, float] = {}
        self._faces: dict[tuple[int, int], ImageFont.FreeTypeFont] = {}
        self._scratch: dict[int, tuple[Image.Image, ImageDraw.ImageDraw]] = {}

    # -- public
    def add(self, pairs: Sequence[tuple[int, int]], *, progress: bool = False) -> list[tuple[int, int]]:
        """Rasterise the (font index, code point) pairs not yet cached; return the
        pairs whose glyph turned out to have no ink (they must not be used)."""
        todo = sorted({p for p in pairs if p not in self.index and p not in self._empty})
        if not todo:
            return []
        empty = []
        for f, cp in tqdm(todo, desc="glyphs: rasterising strokes", unit="glyph", leave=False,
                          disable=not progress):
            res = self._rasterise(f, cp)
            if res is None:
                self._empty.add((f, cp))
                empty.append((f, cp))
                continue
            self.index[(f, cp)] = len(self._rasters)
            self._rasters.append(res[0])
            self._meta.append(res[1])
        return empty

    def stroke_width(self, f: int) -> float:
        """The font's own stroke width in canvas px: median of 2 * area / perimeter
        over reference glyphs it draws (falls back to the glyphs cached so far)."""
        if f in self._stroke:
            return self._stroke[f]
        refs = [ord(ch) for ch in REFERENCE_CHARS if ord(ch) in self.fonts[f].chars]
        self.add([(f, cp) for cp in refs])
        keys = [self.index[(f, cp)] for cp in refs if (f, cp) in self.index]
        if not keys:
            keys = [k for (ff, _), k in self.index.items() if ff == f][:16]
        widths = []
        for k in keys:
            ink = self._rasters[k] >= 128
            edges = np.count_nonzero(ink[1:] != ink[:-1]) + np.count_nonzero(
                ink[:, 1:] != ink[:, :-1]
            )
            if edges:
                widths.append(2.0 * np.count_nonzero(ink) / edges)
        w = float(np.median(widths)) if widths else 0.08 * self.geometry.font_px
        self._stroke[f] = w
        return w

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        c = self.geometry.canvas
        rasters = np.stack(self._rasters) if self._rasters else np.zeros((0, c, c), np.uint8)
        return rasters, np.asarray(self._meta, dtype=np.float64).reshape(-1, 7)

    # -- internals
    def _face(self, f: int, size: int) -> ImageFont.FreeTypeFont:
        if (f, size) not in self._faces:
            info = self.fonts[f]
            self._faces[(f, size)] = ImageFont.truetype(
                info.path, size, index=info.index, layout_engine=ImageFont.Layout.BASIC
            )
        return self._faces[(f, size)]

    def _draw(self, f: int, cp: int, size: int) -> tuple[np.ndarray, float, float]:
        """Draw on a scratch canvas 3 em wide; return it with the anchor (baseline-left)."""
        side = 3 * size
        if side not in self._scratch:
            im = Image.new("L", (side, side))
            self._scratch[side] = (im, ImageDraw.Draw(im))
        im, draw = self._scratch[side]
        im.paste(0, (0, 0, side, side))
        ax, ay = size, 2 * size
        draw.text((ax, ay), chr(cp), font=self._face(f, size), fill=255, anchor="ls")
        return np.array(im), float(ax), float(ay)

    def _rasterise(self, f: int, cp: int) -> tuple[np.ndarray, tuple[float, ...]] | None:
        g = self.geometry
        c, pad = g.canvas, g.pad
        size = g.font_px
        for _ in range(6):
            arr, ax, ay = self._draw(f, cp, size)
            cols = np.flatnonzero(arr.any(axis=0))
            rows = np.flatnonzero(arr.any(axis=1))
            if len(cols) == 0:
                return None
            x0, x1, y0, y1 = cols[0], cols[-1] + 1, rows[0], rows[-1] + 1
            side = arr.shape[0]
            touches = x0 == 0 or y0 == 0 or x1 == side or y1 == side
            cx = 0.5 * (x0 + x1)
            cy = ay - FRAME_CENTER_EM * size
            # half-extent the canvas must hold around the frame centre
            need = max(cx - x0, x1 - cx, cy - y0, y1 - cy)
            room = c / 2 - pad
            if touches or need > room:
                shrink = room / need if not touches else 0.5
                new = int(math.floor(size * min(shrink, 0.97)))
                if new < 6:
                    return None
                size = new
                continue
            ox = int(round(cx - c / 2))
            oy = int(round(cy - c / 2))
            out = _window(arr, ox, oy, c)
            meta = (
                cx - ox,
                cy - oy,
                0.5 * FRAME_EM * size,
                float(x0 - ox),
                float(y0 - oy),
                float(x1 - ox),
                float(y1 - oy),
            )
            return np.ascontiguousarray(out), meta
        return None


def _window(arr: np.ndarray, ox: int, oy: int, c: int) -> np.ndarray:
    """``arr[oy:oy+c, ox:ox+c]`` with zeros where the window leaves ``arr``."""
    out = np.zeros((c, c), dtype=arr.dtype)
    h, w = arr.shape
    ys, xs = max(oy, 0), max(ox, 0)
    ye, xe = min(oy + c, h), min(ox + c, w)
    if ye > ys and xe > xs:
        out[ys - oy : ye - oy, xs - ox : xe - ox] = arr[ys:ye, xs:xe]
    return out


# ---------------------------------------------------------------------- styles
@dataclass(frozen=True)
class WriterStyles:
    """Each writer's fixed personal style (arrays over users)."""

    weight: np.ndarray  # int dilation radius, canvas px
    linear: np.ndarray  # (U, 2, 2) slant/shear, anisotropic scale, rotation
    offset: np.ndarray  # (U, 2) in frame half-sides
    warp_index: np.ndarray  # (U,) field of the bank
    warp_amp: np.ndarray  # (U,) displacement amplitude, output half-widths
    ink: np.ndarray  # (U,) pen intensity


def _affine(rot: np.ndarray, shear: np.ndarray, sx: np.ndarray, sy: np.ndarray) -> np.ndarray:
    """Batched 2x2 matrices R(rot) @ [[1, shear], [0, 1]] @ diag(sx, sy)."""
    c, s = np.cos(rot), np.sin(rot)
    r = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)
    sh = np.zeros_like(r)
    sh[:, 0, 0] = 1.0
    sh[:, 0, 1] = shear
    sh[:, 1, 1] = 1.0
    d = np.zeros_like(r)
    d[:, 0, 0] = sx
    d[:, 1, 1] = sy
    return r @ sh @ d


def draw_writer_styles(
    num_users: int, rng: np.random.Generator, font_stroke: np.ndarray, geometry: Geometry
) -> WriterStyles:
    """A personal style per writer: stroke weight, slant, anisotropic scale, rotation,
    offset, elastic distortion and pen intensity.

    Stroke weight: each writer has a target stroke width (``STROKE_EM``); the font's
    own width (``font_stroke``, canvas px, per user) is thickened towards it, never
    thinned (thinning makes light fonts vanish), so bold fonts stay as they are.
    """
    u = num_users
    target = rng.uniform(*STROKE_EM, u) * geometry.font_px
    weight = np.clip(np.round((target - font_stroke) / 2), 0, geometry.max_thicken)
    shear = rng.uniform(-0.3, 0.3, u)
    size = rng.uniform(-0.12, 0.1, u)
    sx = np.exp(size + rng.uniform(-0.12, 0.12, u))
    sy = np.exp(size + rng.uniform(-0.12, 0.12, u))
    rot = np.deg2rad(rng.uniform(-10.0, 10.0, u))
    offset = rng.uniform(-0.06, 0.06, (u, 2))
    warp_index = rng.integers(0, WARP_BANK, u)
    warp_amp = rng.uniform(0.02, 0.06, u)
    ink = rng.uniform(0.7, 1.0, u)
    return WriterStyles(weight, _affine(rot, shear, sx, sy), offset, warp_index, warp_amp, ink)


@dataclass(frozen=True)
class ImageParams:
    """Everything needed to draw each example (arrays over examples)."""

    source: np.ndarray  # (N,) index into the stroke cache
    weight: np.ndarray  # (N,) dilation radius, canvas px
    linear: np.ndarray  # (N, 2, 2) output -> frame map
    offset: np.ndarray  # (N, 2) frame half-sides
    warp_index: np.ndarray  # (N, 2) writer's and image's field
    warp_amp: np.ndarray  # (N, 2)
    ink: np.ndarray  # (N,)
    noise: np.ndarray  # (N,) noise std in [0, 1] intensity units
    occlude: np.ndarray  # (N, 4) rectangle (x0, y0, x1, y1) in output fractions; x1<=x0: none
    blur: np.ndarray  # (N,) blend weight of a blurred copy (0 = sharp)


def draw_image_params(
    source: np.ndarray,
    example_user: np.ndarray,
    styles: WriterStyles,
    rng: np.random.Generator,
    *,
    jitter: float = 1.0,
    occlusion: float = 0.0,
    max_thicken: int = 3,
) -> ImageParams:
    """Per-image jitter on top of each writer's style."""
    n = len(example_user)
    u = example_user
    rot = np.deg2rad(np.clip(rng.normal(0.0, 3.0, n), -8, 8)) * jitter
    shear = np.clip(rng.normal(0.0, 0.05, n), -0.15, 0.15) * jitter
    sx = np.exp(np.clip(rng.normal(0.0, 0.05, n), -0.15, 0.15) * jitter)
    sy = np.exp(np.clip(rng.normal(0.0, 0.05, n), -0.15, 0.15) * jitter)
    linear = styles.linear[u] @ _affine(rot, shear, sx, sy)
    offset = styles.offset[u] + np.clip(rng.normal(0.0, 0.03, (n, 2)), -0.08, 0.08) * jitter
    change = rng.random(n) < 0.2 * min(jitter, 2.5)
    step = np.where(rng.random(n) < 0.5, -1, 1)
    weight = np.clip(styles.weight[u] + change * step, 0, max_thicken)
    warp_index = np.stack([styles.warp_index[u], rng.integers(0, WARP_BANK, n)], 1)
    warp_amp = np.stack([styles.warp_amp[u], rng.uniform(0.0, 0.04, n) * jitter], 1)
    ink = styles.ink[u] * rng.uniform(0.9, 1.0, n)
    noise = rng.uniform(0.0, 0.04, n) * jitter
    occ = rng.random(n) < occlusion
    w = rng.uniform(0.2, 0.5, (n, 2))
    x0 = rng.uniform(0.0, 1.0, (n, 2)) * (1 - w)
    rect = np.concatenate([x0, x0 + w], 1)
    rect[~occ] = 0.0
    blur = np.where(rng.random(n) < occlusion, rng.uniform(0.5, 1.0, n), 0.0)
    return ImageParams(
        source=np.asarray(source, dtype=np.int64),
        weight=weight.astype(np.int64),
        linear=linear,
        offset=offset,
        warp_index=warp_index,
        warp_amp=warp_amp,
        ink=ink,
        noise=noise,
        occlude=rect,
        blur=blur,
    )


def warp_bank(size: int, rng: np.random.Generator) -> np.ndarray:
    """``WARP_BANK`` smooth displacement fields (K, size, size, 2), max |d| = 1 each."""
    from scipy.ndimage import gaussian_filter

    raw = rng.standard_normal((WARP_BANK, 2, size, size))
    smooth = gaussian_filter(raw, sigma=(0, 0, size / 7.0, size / 7.0), mode="wrap")
    peak = np.abs(smooth).reshape(WARP_BANK, -1).max(axis=1)
    smooth /= peak[:, None, None, None]
    return np.ascontiguousarray(smooth.transpose(0, 2, 3, 1)).astype(np.float32)


# ---------------------------------------------------------------------- drawing
def _dilate(x: torch.Tensor, radius: int) -> torch.Tensor:
    """Grey dilation of (B, H, W) by an octagon of the given radius (alternating
    cross and square steps; each step widens strokes by one pixel on every side)."""
    for i in range(radius):
        h = x.clone()
        h[:, :, 1:] = torch.maximum(h[:, :, 1:], x[:, :, :-1])
        h[:, :, :-1] = torch.maximum(h[:, :, :-1], x[:, :, 1:])
        src = h if i % 2 else x  # square: dilate the row-dilated image; cross: the input
        v = h.clone()
        v[:, 1:, :] = torch.maximum(v[:, 1:, :], src[:, :-1, :])
        v[:, :-1, :] = torch.maximum(v[:, :-1, :], src[:, 1:, :])
        x = v
    return x


def _blur3(x: torch.Tensor) -> torch.Tensor:
    """Separable [1, 2, 1] / 4 blur of (B, 1, H, W), zero padding."""
    p = F.pad(x, (1, 1, 1, 1))
    h = p[..., :, :-2] + 2 * p[..., :, 1:-1] + p[..., :, 2:]
    return (h[..., :-2, :] + 2 * h[..., 1:-1, :] + h[..., 2:, :]) / 16.0


def render_images(
    rasters: np.ndarray,
    meta: np.ndarray,
    params: ImageParams,
    geometry: Geometry,
    *,
    seed: int,
    progress: bool = False,
    workers: int = 1,
) -> np.ndarray:
    """Draw every example; returns uint8 ``(N, S, S, 1)``, ink bright on black.

    ``workers`` > 1 draws the fixed-size chunks in that many forked processes: every chunk
    has its own noise stream, so the images are byte-identical to ``workers=1``'s."""
    s = geometry.image_size
    n_out = s * SUPERSAMPLE
    c = geometry.canvas
    n = len(params.source)
    out = np.empty((n, s, s, 1), dtype=np.uint8)
    bank = torch.from_numpy(warp_bank(n_out, np.random.default_rng([seed, 6])))
    centers = (torch.arange(n_out, dtype=torch.float32) * 2 + 1) / n_out - 1
    gy, gx = torch.meshgrid(centers, centers, indexing="ij")
    base = torch.stack([gx, gy], -1)  # (n_out, n_out, 2): x, y
    margin = 2 * MARGIN_PX / s

    # frame half-side per image, enlarged so the transformed ink box fits (float64)
    m = meta[params.source]
    r = params.weight.astype(np.float64)
    centre = m[:, 0:2] + params.offset * m[:, 2:3]
    lo = m[:, 3:5] - r[:, None]
    hi = m[:, 5:7] + r[:, None]
    corners = np.stack(
        [lo, np.stack([hi[:, 0], lo[:, 1]], 1), np.stack([lo[:, 0], hi[:, 1]], 1), hi], 1
    )  # (N, 4, 2)
    inv = np.linalg.inv(params.linear)
    v = np.einsum("nij,nkj->nki", inv, corners - centre[:, None, :])
    limit = 1.0 - margin - params.warp_amp.sum(1)
    half = np.maximum(m[:, 2], np.abs(v).max(axis=(1, 2)) / limit)
    mat = params.linear * half[:, None, None]  # output-normalised -> canvas px

    # fold the pixel -> grid_sample normalisation into the affine map
    mat_g = (mat * (2.0 / c)).astype(np.float32)
    ctr_g = (centre * (2.0 / c) - 1.0).astype(np.float32)
    bx, by = base[..., 0], base[..., 1]
    bank_x, bank_y = bank[..., 0].contiguous(), bank[..., 1].contiguous()

    def draw(ci: int) -> np.ndarray:
        sl = slice(ci * CHUNK, min((ci + 1) * CHUNK, n))
        return _draw_chunk(rasters, params, sl, geometry, bank_x, bank_y, bx, by, mat_g[sl], ctr_g[sl],
                           np.random.default_rng([seed, 5, ci]))

    bar = tqdm(total=n, desc="glyphs: drawing images", unit="img", leave=False, disable=not progress)
    with _threads(RENDER_THREADS), bar:
        for ci, img in in_order(draw, range(-(-n // CHUNK)), workers):
            out[ci * CHUNK: ci * CHUNK + len(img)] = img
            bar.update(len(img))
    return out


def in_order(fn: Callable[[int], Any], items: range, workers: int) -> Iterator[tuple[int, Any]]:
    """``(i, fn(i))`` for each ``i`` of ``items``, in order; ``workers`` > 1 computes them in
    that many forked processes (``fn`` and what it reads are inherited, not pickled), one
    contiguous block of ``items`` each at a time. Deterministic when ``fn`` is."""
    if workers <= 1 or len(items) < 2:
        yield from ((i, fn(i)) for i in items)
        return
    global _FORKED
    _FORKED = fn
    step = max(1, min(64, -(-len(items) // workers)))
    blocks = [items[k:k + step] for k in range(0, len(items), step)]
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for block, results in zip(blocks, pool.imap(_forked_block, blocks)):
                yield from zip(block, results)
    finally:
        _FORKED = None


_FORKED: Callable[[int], Any] | None = None  # in_order's function, for its forked workers


def _forked_block(block: range) -> list[Any]:
    assert _FORKED is not None
    return [_FORKED(i) for i in block]


@contextlib.contextmanager
def _threads(n: int):
    """Run torch with ``n`` intra-op threads (elementwise kernels on small tensors
    are faster single-threaded, above all on a busy machine)."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _draw_chunk(
    rasters: np.ndarray,
    params: ImageParams,
    sl: slice,
    geometry: Geometry,
    bank_x: torch.Tensor,
    bank_y: torch.Tensor,
    bx: torch.Tensor,
    by: torch.Tensor,
    mat: np.ndarray,
    ctr: np.ndarray,
    noise_rng: np.random.Generator,
) -> np.ndarray:
    s = geometry.image_size
    b = sl.stop - sl.start
    src = torch.from_numpy(rasters[params.source[sl]])
    w = params.weight[sl]
    for level in np.unique(w):
        rad = int(level)
        if rad > 0:
            idx = torch.from_numpy(np.flatnonzero(w == level))
            src[idx] = _dilate(src[idx], rad)
    src = src.unsqueeze(1).float().div_(255.0)

    # v = u + writer's and image's displacement fields; grid = M v + centre
    wi = torch.from_numpy(params.warp_index[sl])
    wa = torch.from_numpy(params.warp_amp[sl].astype(np.float32))[:, :, None, None]
    vx = bank_x[wi[:, 0]].mul_(wa[:, 0]).add_(bank_x[wi[:, 1]].mul_(wa[:, 1])).add_(bx)
    vy = bank_y[wi[:, 0]].mul_(wa[:, 0]).add_(bank_y[wi[:, 1]].mul_(wa[:, 1])).add_(by)
    m = torch.from_numpy(mat)[:, :, :, None, None]
    ct = torch.from_numpy(ctr)[:, :, None, None]
    gx = torch.addcmul(ct[:, 0], m[:, 0, 0], vx).addcmul_(m[:, 0, 1], vy)
    gy = torch.addcmul(ct[:, 1], m[:, 1, 0], vx).addcmul_(m[:, 1, 1], vy)
    grid = torch.stack([gx, gy], dim=-1)
    img = F.grid_sample(src, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    img = F.avg_pool2d(img, SUPERSAMPLE)  # (b, 1, s, s)
    img.mul_(torch.from_numpy(params.ink[sl].astype(np.float32))[:, None, None, None])

    blur = params.blur[sl]
    if (blur > 0).any():
        idx = torch.from_numpy(np.flatnonzero(blur > 0))
        bt = torch.from_numpy(blur[blur > 0].astype(np.float32))[:, None, None, None]
        sub = img[idx]
        img[idx] = sub * (1 - bt) + _blur3(sub) * bt
    rect = params.occlude[sl]
    if (rect[:, 2] > rect[:, 0]).any():
        px = (torch.arange(s, dtype=torch.float32) + 0.5) / s
        rt = torch.from_numpy(rect.astype(np.float32))
        inside_x = (px[None, :] >= rt[:, 0:1]) & (px[None, :] < rt[:, 2:3])
        inside_y = (px[None, :] >= rt[:, 1:2]) & (px[None, :] < rt[:, 3:4])
        hole = (inside_y[:, :, None] & inside_x[:, None, :]).unsqueeze(1)
        covered = img.masked_fill(hole, 0.0)
        keep = covered.sum((1, 2, 3)) >= 0.5 * img.sum((1, 2, 3))
        img = torch.where(keep[:, None, None, None], covered, img)

    noise = noise_rng.standard_normal((b, 1, s, s), dtype=np.float32)
    noise *= params.noise[sl].astype(np.float32)[:, None, None, None]
    img.add_(torch.from_numpy(noise))
    img = img.clamp_(0.0, 1.0).mul_(255.0).round_().to(torch.uint8)
    return img.permute(0, 2, 3, 1).numpy()

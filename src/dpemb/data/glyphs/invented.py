"""The invented script: identities are made-up characters drawn with one pen, no font.

Identity ``j`` is a few strokes (straight lines, curves, corners, dots) between points of a
coarse lattice, like a letter of an unknown alphabet. It is drawn from its own random
stream, ``default_rng([seed, STREAM, j, attempt])``, and redrawn (``attempt`` + 1) while it
looks like an earlier identity: the same ``THUMB`` x ``THUMB`` ink thumbnail (which also
catches identical stroke sets). So the first ``n`` identities are the same
whatever else is built, and a population's identities do not depend on its size.

:func:`invent` rasterises them into :class:`~dpemb.data.glyphs.render.StrokeCache`'s
format (uint8 ``(C, C)`` canvases and the 7-float meta), so writer styles, jitter and
occlusion draw them exactly as they draw font glyphs. docs/GLYPHS.md, "Invented script".
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw
from tqdm.auto import tqdm

from dpemb.data.dataset import DataError
from dpemb.data.glyphs.render import FRAME_EM, Geometry, in_order

INVENTED_VERSION = 1  # bump when the same seed would invent other characters
STREAM = 7  # random stream of the invented characters (make.py uses 1 to 6)
PEN_EM = 0.07  # the pen's stroke width, in em (a regular-weight font's)
SUPER = 4  # rasterise at 4x, then average 4x4 blocks (anti-aliasing)
COLS, ROWS = 4, 5  # the lattice, in a unit square
WIDTH = (0.45, 0.85)  # a character's lattice width, in frame half-sides
Y_SPAN = (-0.62, 0.42)  # the lattice's rows in frame half-sides (y down: cap height, baseline)
REACH = 0.9  # no stroke point beyond this many frame half-sides from the centre (fits the canvas)
STROKES = (3, 5)  # strokes per character, inclusive (a corner is two segments)
KINDS, KIND_CDF = ("line", "curve", "corner"), (0.5, 0.85, 1.0)
STRAIGHT = 0.6  # probability that a stroke joins two points of one row or column
DOT = 0.1  # probability of an extra dot
MIN_SPAN = (0.3, 0.5)  # the character spans this much of the lattice's width and height
THUMB = 10  # side of the thumbnail two identities may not share
THUMB_BOX = (-0.55, -0.75, 0.55, 0.55)  # its region (x0, y0, x1, y1), frame half-sides
MAX_ATTEMPTS = 100


def pen_width(geometry: Geometry) -> float:
    """The pen's stroke width in canvas pixels (every writer's base width)."""
    return PEN_EM * geometry.font_px


def invent_strokes(rng: np.random.Generator) -> list[np.ndarray]:
    """One character: polylines ``(k, 2)`` in frame half-sides (x right, y down), centred
    horizontally. Strokes join lattice points; most start where an earlier one touched
    the lattice (so most characters are connected), and 60% join two points of one row or
    column. A character spans at least ``MIN_SPAN`` of the lattice's width and height
    (drawn again from the same stream until it does)."""
    while True:
        lattice = np.stack(np.meshgrid(np.linspace(0, 1, COLS), np.linspace(0, 1, ROWS)), -1)
        lattice = lattice + rng.normal(0.0, 0.03, lattice.shape)
        touched: list[tuple[int, int]] = []

        def other(a: tuple[int, int]) -> tuple[int, int]:
            straight = rng.random() < STRAIGHT
            cand = [(r, c) for r in range(ROWS) for c in range(COLS)
                    if (r, c) != a and (not straight or r == a[0] or c == a[1])]
            return cand[int(rng.integers(len(cand)))]

        strokes = []
        for _ in range(rng.integers(STROKES[0], STROKES[1] + 1)):
            kind = KINDS[int(np.searchsorted(KIND_CDF, rng.random()))]
            if touched and rng.random() < 0.75:
                a = touched[int(rng.integers(len(touched)))]
            else:
                a = (int(rng.integers(ROWS)), int(rng.integers(COLS)))
            path = [a, other(a)]
            if kind == "corner":
                path.append(other(path[-1]))
            touched += path
            pts = lattice[tuple(np.array(path).T)]
            if kind == "curve":  # a quadratic Bezier bending to one side
                p, q = pts
                bend = rng.uniform(0.25, 0.6) * (1 if rng.random() < 0.5 else -1)
                ctrl = (p + q) / 2 + bend * np.array([p[1] - q[1], q[0] - p[0]])
                t = np.linspace(0.0, 1.0, 9)[:, None]
                pts = (1 - t) ** 2 * p + 2 * t * (1 - t) * ctrl + t**2 * q
            strokes.append(pts)
        if rng.random() < DOT:  # a dot, like i's
            strokes.append(lattice[int(rng.integers(ROWS)), int(rng.integers(COLS))][None])
        lo, hi = np.concatenate(strokes).min(0), np.concatenate(strokes).max(0)
        if np.all(hi - lo >= MIN_SPAN):
            break
    # the lattice's unit square -> frame half-sides: x centred on the ink, y cap height to baseline
    width = rng.uniform(*WIDTH)
    scale = np.array([width, Y_SPAN[1] - Y_SPAN[0]])
    shift = np.array([-width * (lo[0] + hi[0]) / 2, Y_SPAN[0]])
    return [np.clip(s * scale + shift, -REACH, REACH) for s in strokes]


def rasterise(strokes: list[np.ndarray], geometry: Geometry) -> tuple[np.ndarray, tuple[float, ...]]:
    """The character on a StrokeCache canvas: uint8 ``(C, C)`` (ink 255) and its meta
    (frame centre x, y, frame half-side, ink box x0, y0, x1, y1; canvas pixels)."""
    c = geometry.canvas
    half = 0.5 * FRAME_EM * geometry.font_px
    im = Image.new("L", (c * SUPER, c * SUPER))
    draw = ImageDraw.Draw(im)
    w = pen_width(geometry) * SUPER
    for s in strokes:
        pts = ((c / 2 + s * half) * SUPER).tolist()
        if len(pts) > 1:
            draw.line([tuple(p) for p in pts], fill=255, width=int(round(w)))
        for x, y in pts:  # round caps and joints
            draw.ellipse((x - w / 2, y - w / 2, x + w / 2, y + w / 2), fill=255)
    canvas = np.asarray(im.reduce(SUPER))
    cols, rows = np.flatnonzero(canvas.any(0)), np.flatnonzero(canvas.any(1))
    box = (float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1))
    return canvas, (c / 2, c / 2, half, *box)


def thumbnail(canvas: np.ndarray, geometry: Geometry) -> bytes:
    """The ink around the lattice (``THUMB_BOX``) at ``THUMB`` x ``THUMB``, a cell inked
    when a sixth of it is: two identities with the same thumbnail are too alike."""
    c, half = geometry.canvas, 0.5 * FRAME_EM * geometry.font_px
    box = tuple(c / 2 + v * half for v in THUMB_BOX)
    small = Image.fromarray(canvas).resize((THUMB, THUMB), Image.Resampling.BOX, box=box)
    return np.packbits(np.asarray(small) >= 40).tobytes()


def candidate(j: int, attempt: int, seed: int, geometry: Geometry) -> tuple[np.ndarray, tuple[float, ...], bytes]:
    """Identity ``j``'s ``attempt``-th drawing: its canvas, meta and thumbnail."""
    canvas, m = rasterise(invent_strokes(np.random.default_rng([seed, STREAM, j, attempt])), geometry)
    return canvas, m, thumbnail(canvas, geometry)


def invent(
    n: int, seed: int, geometry: Geometry, *, progress: bool = False, workers: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Identities ``0 .. n-1``: rasters uint8 ``(n, C, C)`` and meta float64 ``(n, 7)``.
    Deterministic; ``invent(m, ...)`` is the first ``m`` of ``invent(n, ...)`` for m < n.
    ``workers`` > 1 draws every identity's first attempt in that many forked processes; the
    redraws, in identity order, are this process's: the result is ``workers=1``'s."""
    c = geometry.canvas
    rasters = np.empty((n, c, c), dtype=np.uint8)
    meta = np.empty((n, 7), dtype=np.float64)
    seen: set[bytes] = set()
    firsts = in_order(lambda j: candidate(j, 0, seed, geometry), range(n), workers)
    for j, first in tqdm(firsts, total=n, desc="glyphs: inventing characters", unit="char", leave=False,
                         disable=not progress):
        for attempt in range(MAX_ATTEMPTS):
            canvas, m, key = first if attempt == 0 else candidate(j, attempt, seed, geometry)
            if key not in seen:
                break
        else:
            raise DataError(f"invented script: no new character after {MAX_ATTEMPTS} attempts "
                            f"at identity {j}")
        seen.add(key)
        rasters[j], meta[j] = canvas, m
    return rasters, meta


def label_name(j: int) -> str:
    """The label of invented identity ``j``, e.g. ``inv000123``."""
    return f"inv{j:06d}"

"""Building the glyph benchmark: fonts -> pool -> assignment -> strokes -> images."""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

import numpy as np

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.glyphs.benchmark import Assignment, assign, select_pool, widen_hint
from dpemb.data.glyphs.config import GlyphConfig
from dpemb.data.glyphs.fonts import FontInfo, scan_fonts
from dpemb.data.glyphs.identities import build_pool, candidate_code_points, label_name
from dpemb.data.glyphs.render import (
    Geometry,
    StrokeCache,
    draw_image_params,
    draw_writer_styles,
    render_images,
)

GENERATOR_VERSION = 2  # bump when the same config would produce different data
# 2: test and validation identities come with their own users (dedicated writers in
#    the shared regime)

# named random streams: one generator per purpose, all derived from the seed
_POOL, _ASSIGN, _STYLE, _JITTER = 1, 2, 3, 4


def available_fonts(
    extra_paths: Sequence[str | os.PathLike] = (), *, progress: bool = False
) -> list[FontInfo]:
    """Usable font faces (system, Python packages, ``extra_paths``) after filtering,
    sorted by family and style."""
    return list(scan_fonts(candidate_code_points(), extra_paths, progress=progress).usable)


def _examples(asg: Assignment, cfg: GlyphConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-example (user, pool index), grouped by user; and the per-user counts."""
    k = cfg.images_per_identity
    users = np.concatenate(
        [np.full(len(ids) * k, u, dtype=np.int64) for u, ids in enumerate(asg.user_identities)]
    )
    idents = np.concatenate([np.repeat(ids, k) for ids in asg.user_identities]).astype(np.int64)
    counts = np.array([len(ids) * k for ids in asg.user_identities], dtype=np.int64)
    return users, idents, counts


def make_glyphs(cfg: GlyphConfig, *, progress: bool = True) -> UserDataset:
    """Build the glyph benchmark described by ``cfg`` (deterministic from ``cfg.seed``
    and the installed fonts: the same config on the same machine gives a
    byte-identical dataset).

    Returns a :class:`UserDataset` with uint8 images ``(N, S, S, 1)`` (ink bright on
    black), the roles set (``eval_labels`` / ``eval_users``: test identities and their
    users; ``validation_labels`` / ``validation_users``; ``public_users``), and
    ``source = {"kind": "glyphs", "config", "fonts", "pool_size", ...}``.
    """
    if not isinstance(cfg, GlyphConfig):
        raise TypeError(f"make_glyphs expects a GlyphConfig, got {type(cfg).__name__}")
    fonts = available_fonts(cfg.extra_font_paths, progress=progress)
    if not fonts:
        raise DataError(
            "glyphs: no usable font found (searched fc-list, /usr/share/fonts and "
            "matplotlib's fonts); install fonts-dejavu-core or " + widen_hint()
        )
    geometry = Geometry(cfg.image_size)
    cache = StrokeCache(fonts, geometry)
    for _attempt in range(5):
        full = build_pool(fonts)
        pool = select_pool(full, cfg, np.random.default_rng([cfg.seed, _POOL]))
        asg = assign(pool, fonts, cfg, np.random.default_rng([cfg.seed, _ASSIGN]))
        users, idents, counts = _examples(asg, cfg)
        pool_cp = np.array([i.cp for i in pool], dtype=np.int64)
        pairs = set(zip(asg.user_font[users].tolist(), pool_cp[idents].tolist()))
        empty = cache.add(sorted(pairs), progress=progress)
        if not empty:
            break
        # a glyph without ink (e.g. an empty CFF outline): the font no longer covers it
        drop: dict[int, set[int]] = {}
        for f, cp in empty:
            drop.setdefault(f, set()).add(cp)
        fonts = [
            dataclasses.replace(f, chars=f.chars - drop[i]) if i in drop else f
            for i, f in enumerate(fonts)
        ]
        cache.fonts = fonts
    else:
        raise DataError("glyphs: fonts keep producing empty glyphs; pass other fonts")

    # labels: the identities that occur, numbered in code point order
    used = np.unique(idents)
    label_of = np.full(len(pool), -1, dtype=np.int64)
    label_of[used] = np.arange(len(used))
    labels = label_of[idents]
    label_names = [label_name(pool[j].cp) for j in used]
    eval_labels = label_of[np.intersect1d(asg.eval_identities, used)]
    validation_labels = label_of[np.intersect1d(asg.validation_identities, used)]
    for what, labs, frac in (
        ("test", eval_labels, cfg.eval_identity_fraction),
        ("validation", validation_labels, cfg.validation_identity_fraction),
    ):
        if frac > 0 and len(labs) < 2:
            raise DataError(
                f"glyphs: only {len(labs)} {what} identities were written; raise num_users, "
                f"identities_per_user or the {what} fraction"
            )
    n_train = len(used) - len(eval_labels) - len(validation_labels)
    if n_train < 1:
        raise DataError("glyphs: no training identity was written; lower the held-out fractions")

    font_stroke = np.array([cache.stroke_width(int(f)) for f in asg.user_font])
    rasters, meta = cache.arrays()
    source = np.array(
        [cache.index[(int(f), int(cp))] for f, cp in zip(asg.user_font[users], pool_cp[idents])],
        dtype=np.int64,
    )
    styles = draw_writer_styles(
        cfg.num_users, np.random.default_rng([cfg.seed, _STYLE]), font_stroke, geometry
    )
    params = draw_image_params(
        source,
        users,
        styles,
        np.random.default_rng([cfg.seed, _JITTER]),
        jitter=cfg.jitter,
        occlusion=cfg.occlusion,
        max_thicken=geometry.max_thicken,
    )
    images = render_images(rasters, meta, params, geometry, seed=cfg.seed, progress=progress)

    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    prefix = "w" if cfg.regime == "shared" else "p"
    src = {
        "kind": "glyphs",
        "generator_version": GENERATOR_VERSION,
        "config": cfg.to_dict(),
        "fonts": [f.describe() for f in fonts],
        "pool_size": len(pool),
        "pool_size_all_tiers": len(full),
        "user_fonts": asg.user_font.tolist(),
    }
    return UserDataset(
        images=images,
        labels=labels,
        offsets=offsets,
        user_names=[f"{prefix}{u:05d}" for u in range(cfg.num_users)],
        label_names=label_names,
        eval_labels=[int(x) for x in eval_labels],
        public_users=[int(x) for x in asg.public_users],
        source=src,
        validation_labels=[int(x) for x in validation_labels],
        eval_users=[int(x) for x in asg.test_users],
        validation_users=[int(x) for x in asg.validation_users],
    )

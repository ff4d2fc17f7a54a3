"""Building the glyph benchmark: fonts -> pool -> assignment -> strokes -> images.

Who writes what follows :class:`~dpemb.data.glyphs.config.GlyphConfig`'s regimes. Every
user is one font (a writer); in the owned regime a group's identities are drawn by every
font of the group. With the invented script there is no font: the identities are made-up
characters (:mod:`dpemb.data.glyphs.invented`) and every writer starts from the same pen.
No example is wasted: each is in exactly one split.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

import numpy as np

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.glyphs.config import CJK_FONT_PACKAGES, GlyphConfig
from dpemb.data.glyphs.fonts import FontInfo, scan_fonts
from dpemb.data.glyphs import invented
from dpemb.data.glyphs.identities import Identity, build_pool, candidate_code_points, label_name
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


@dataclasses.dataclass(frozen=True)
class Assignment:
    pool: list[Identity]
    user_font: np.ndarray  # (U,) font index per user
    user_identities: list[np.ndarray]  # per user: sorted pool indices it holds
    eval_identities: np.ndarray  # sorted pool indices held out for test
    public_users: np.ndarray  # sorted user indices
    validation_identities: np.ndarray  # sorted pool indices held out for validation
    test_users: np.ndarray  # sorted user indices: write only test identities
    validation_users: np.ndarray  # sorted user indices: write only validation identities


def widen_hint() -> str:
    return (
        "install CJK fonts to widen the pool (Debian: apt-get install "
        + " ".join(CJK_FONT_PACKAGES)
        + "; `make cjk-fonts` does it) or add font files with --font PATH (Python: extra_font_paths)"
    )


def select_pool(full: Sequence[Identity], cfg: GlyphConfig, rng: np.random.Generator) -> list[Identity]:
    """The identities a build may use.

    shared: the basic tier (Latin, Greek, Cyrillic, digits, symbols) so that every
    identity is written by many users; ``max_identities`` larger than the basic tier
    adds CJK characters. owned: every tier; ``max_identities`` caps it at random.
    """
    full = list(full)
    k = cfg.max_identities
    if cfg.regime == "shared":
        basic = [i for i in full if i.tier == "basic"]
        other = [i for i in full if i.tier != "basic"]
        if not basic:
            basic, other = other, []
        if k is None or k == len(basic):
            pool = basic
        elif k < len(basic):
            keep = rng.choice(len(basic), k, replace=False)
            pool = [basic[j] for j in keep]
        else:
            extra = min(k - len(basic), len(other))
            keep = rng.choice(len(other), extra, replace=False)
            pool = basic + [other[j] for j in keep]
    else:
        pool = full
        if k is not None and k < len(full):
            keep = rng.choice(len(full), k, replace=False)
            pool = [full[j] for j in keep]
    return sorted(pool, key=lambda i: i.cp)


def _coverage(pool: Sequence[Identity], num_fonts: int) -> np.ndarray:
    cover = np.zeros((num_fonts, len(pool)), dtype=bool)
    for j, ident in enumerate(pool):
        cover[list(ident.fonts), j] = True
    return cover


def _public(users: np.ndarray, cfg: GlyphConfig, rng: np.random.Generator) -> np.ndarray:
    k = int(round(cfg.public_user_fraction * len(users)))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    return np.sort(rng.choice(users, k, replace=False)).astype(np.int64)


def _held_count(fraction: float, n: int) -> int:
    k = int(round(fraction * n))
    return max(k, 2) if fraction > 0 else 0


def _sorted_parts(perm: np.ndarray, first: int, second: int) -> list[np.ndarray]:
    """``perm``'s first ``first`` entries, its next ``second`` and the rest, each sorted."""
    return [np.sort(p).astype(np.int64) for p in np.split(perm, [first, first + second])]


def assign_shared(
    pool: list[Identity], fonts: Sequence[object], cfg: GlyphConfig, rng: np.random.Generator
) -> Assignment:
    """Shared regime (``fonts``: only their number is used; the pool's entries name theirs)."""
    n = len(pool)
    n_test = _held_count(cfg.eval_identity_fraction, n)
    n_val = _held_count(cfg.validation_identity_fraction, n)
    if n - n_test - n_val < 2:
        raise DataError(
            f"glyphs (shared regime): the pool has {n} identities; holding out {n_test} for "
            f"test and {n_val} for validation leaves fewer than 2 for training; lower "
            "eval_identity_fraction / validation_identity_fraction or raise max_identities"
        )
    test_ids, val_ids, train_ids = _sorted_parts(rng.permutation(n), n_test, n_val)
    u_test, u_val = cfg.held_out_users()
    uperm = rng.permutation(cfg.num_users)
    test_users, val_users, train_users = _sorted_parts(uperm, u_test, u_val)

    cover = _coverage(pool, len(fonts))
    user_font = np.zeros(cfg.num_users, dtype=np.int64)
    user_ids: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * cfg.num_users
    for what, ids, users in (
        ("training", train_ids, train_users),
        ("test", test_ids, test_users),
        ("validation", val_ids, val_users),
    ):
        if len(users) == 0:
            continue
        sub = cover[:, ids]
        per_font = sub.sum(1)
        k = min(cfg.identities_per_user, int(per_font.max(initial=0)))
        if what == "training" and k < cfg.identities_per_user:
            raise DataError(
                f"glyphs (shared regime): identities_per_user={cfg.identities_per_user} "
                f"exceeds the {k} training characters the best font draws (pool: {n}, "
                f"{len(ids)} training characters); lower identities_per_user or the "
                "held-out fractions, or raise max_identities"
            )
        if k == 0:
            raise DataError(f"glyphs (shared regime): no font draws a {what} character")
        eligible = np.flatnonzero(per_font >= k)
        fonts_of = eligible[rng.integers(0, len(eligible), len(users))]
        for u, f in zip(users, fonts_of):
            user_font[u] = f
            user_ids[u] = np.sort(rng.choice(ids[sub[f]], k, replace=False)).astype(np.int64)
    return Assignment(
        pool, user_font, user_ids, test_ids, _public(train_users, cfg, rng),
        validation_identities=val_ids, test_users=test_users, validation_users=val_users,
    )


def assign_owned(
    pool: list[Identity], fonts: Sequence[FontInfo], cfg: GlyphConfig, rng: np.random.Generator
) -> Assignment:
    upi, ipu = cfg.users_per_identity, cfg.identities_per_user
    groups = cfg.num_users // upi
    need = cfg.identities_needed()
    n = len(pool)
    if need > n:
        capped = " (capped by max_identities)" if cfg.max_identities is not None else ""
        raise DataError(
            f"glyphs (owned regime): this config needs {need} identities (num_users "
            f"{cfg.num_users} x identities_per_user {ipu} / users_per_identity {upi}), "
            f"but only {n} are available{capped}: the installed fonts draw {n} distinct "
            f"characters after filtering and look-alike merging. Lower num_users or "
            f"identities_per_user, raise users_per_identity, or {widen_hint()}."
        )
    cover = _coverage(pool, len(fonts))
    available = np.ones(n, dtype=bool)
    count = cover.sum(1)  # available identities each font draws
    idents_fonts = [np.asarray(i.fonts, dtype=np.int64) for i in pool]
    user_font = np.empty(cfg.num_users, dtype=np.int64)
    user_ids: list[np.ndarray] = []
    nf = len(fonts)
    for g in range(groups):
        chosen: list[int] = []
        joint = None
        for _ in range(upi):
            pick = None
            for repeat_ok in (False, True):
                for f in rng.permutation(nf):
                    if (f in chosen and not repeat_ok) or count[f] < ipu:
                        continue
                    if joint is None:
                        pick, cand = f, np.flatnonzero(available & cover[f])
                    else:
                        cand = joint[cover[f, joint]]
                        if len(cand) < ipu:
                            continue
                        pick = f
                    break
                if pick is not None:
                    break
            if pick is None:
                raise DataError(
                    f"glyphs (owned regime): ran out of identities drawable by one group "
                    f"of fonts after {g} of {groups} owner groups ({need - g * ipu} of "
                    f"{need} identities still to place, pool {n}); lower num_users or "
                    f"identities_per_user, lower users_per_identity, or {widen_hint()}."
                )
            chosen.append(int(pick))
            joint = cand
        ids = np.sort(rng.choice(joint, ipu, replace=False))
        available[ids] = False
        for j in ids:
            count[idents_fonts[j]] -= 1
        for k, f in enumerate(chosen):
            user_font[g * upi + k] = f
            user_ids.append(ids)
    return _owned_roles(pool, user_font, user_ids, cfg, rng)


def assign_invented_owned(cfg: GlyphConfig, rng: np.random.Generator) -> Assignment:
    """Owned regime, invented script: owner group g holds the invented identities
    ``g * K .. (g + 1) * K - 1`` (K = identities_per_user), so a group's identities do not
    depend on the number of groups; held-out groups and public users as in assign_owned."""
    groups, upi = cfg.num_users // cfg.users_per_identity, cfg.users_per_identity
    ids = np.arange(cfg.identities_needed(), dtype=np.int64).reshape(groups, -1)
    pool = [Identity(j, ()) for j in range(ids.size)]
    user_ids = [ids[g] for g in range(groups) for _ in range(upi)]
    return _owned_roles(pool, np.zeros(cfg.num_users, dtype=np.int64), user_ids, cfg, rng)


def _owned_roles(
    pool: list[Identity], user_font: np.ndarray, user_ids: list[np.ndarray], cfg: GlyphConfig,
    rng: np.random.Generator,
) -> Assignment:
    """The owned regime's held-out groups (test, validation) and public users."""
    upi = cfg.users_per_identity
    groups = cfg.num_users // upi
    n_eval, n_val = cfg.eval_groups(groups), cfg.validation_groups(groups)
    eval_groups, val_groups, _ = _sorted_parts(rng.permutation(groups), n_eval, n_val)

    def ids_of(gs: np.ndarray) -> np.ndarray:
        if not len(gs):
            return np.zeros(0, dtype=np.int64)
        return np.sort(np.concatenate([user_ids[g * upi] for g in gs])).astype(np.int64)

    def users_of(gs: np.ndarray) -> np.ndarray:
        return (gs[:, None] * upi + np.arange(upi)[None, :]).ravel().astype(np.int64)

    group_role = np.zeros(groups, dtype=np.int8)
    group_role[eval_groups], group_role[val_groups] = 2, 1
    train_users = np.flatnonzero(np.repeat(group_role, upi) == 0)
    return Assignment(
        pool, user_font, user_ids, ids_of(eval_groups), _public(train_users, cfg, rng),
        validation_identities=ids_of(val_groups), test_users=users_of(eval_groups),
        validation_users=users_of(val_groups),
    )


def assign(
    pool: list[Identity], fonts: Sequence[FontInfo], cfg: GlyphConfig, rng: np.random.Generator
) -> Assignment:
    if cfg.regime == "shared":
        return assign_shared(pool, fonts, cfg, rng)
    return assign_owned(pool, fonts, cfg, rng)


def available_fonts(
    extra_paths: Sequence[str | os.PathLike] = (), *, progress: bool = False
) -> list[FontInfo]:
    """Usable font faces (system, Python packages, ``extra_paths``) after filtering,
    sorted by family and style."""
    return list(scan_fonts(candidate_code_points(), extra_paths, progress=progress).usable)


def _examples(asg: Assignment, cfg: GlyphConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-example (user, pool index), grouped by user; and the per-user counts."""
    k = cfg.images_per_identity
    counts = np.array([len(ids) * k for ids in asg.user_identities], dtype=np.int64)
    idents = np.concatenate([np.repeat(ids, k) for ids in asg.user_identities]).astype(np.int64)
    return np.repeat(np.arange(len(counts), dtype=np.int64), counts), idents, counts


@dataclasses.dataclass(frozen=True)
class _Drawn:
    """What a script hands the renderer."""

    asg: Assignment
    users: np.ndarray  # (N,) user of each example, grouped by user
    idents: np.ndarray  # (N,) pool index of each example
    counts: np.ndarray  # (U,) examples per user
    rasters: np.ndarray  # StrokeCache.arrays()
    meta: np.ndarray
    source: np.ndarray  # (N,) raster of each example
    font_stroke: np.ndarray  # (U,) each user's base stroke width, canvas px
    name: Callable[[int], str]  # label name of a pool index
    info: dict[str, Any]  # the script's entries of UserDataset.source


def make_glyphs(cfg: GlyphConfig, *, progress: bool = True, workers: int = 1) -> UserDataset:
    """Build the glyph benchmark described by ``cfg`` (deterministic from ``cfg.seed``
    and, for the unicode script, the installed fonts: the same config on the same
    machine gives a byte-identical dataset; the invented script needs no font). The
    returned :class:`UserDataset` (uint8 ``(N, S, S, 1)``, ink bright on black, roles and
    ``source`` set): docs/GLYPHS.md, after the example. ``workers``: processes that draw the
    images (and invent the characters); the dataset does not depend on it.
    """
    if not isinstance(cfg, GlyphConfig):
        raise TypeError(f"make_glyphs expects a GlyphConfig, got {type(cfg).__name__}")
    geometry = Geometry(cfg.image_size)
    draw = _draw_invented if cfg.script == "invented" else _draw_unicode
    d = draw(cfg, geometry, progress, workers)
    asg, users, idents, counts = d.asg, d.users, d.idents, d.counts

    # labels: the identities that occur, numbered in pool order (code point order)
    used, labels = np.unique(idents, return_inverse=True)
    label_names = [d.name(int(j)) for j in used]
    eval_labels = np.searchsorted(used, np.intersect1d(asg.eval_identities, used))
    validation_labels = np.searchsorted(used, np.intersect1d(asg.validation_identities, used))
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

    styles = draw_writer_styles(
        cfg.num_users, np.random.default_rng([cfg.seed, _STYLE]), d.font_stroke, geometry
    )
    params = draw_image_params(
        d.source,
        users,
        styles,
        np.random.default_rng([cfg.seed, _JITTER]),
        jitter=cfg.jitter,
        occlusion=cfg.occlusion,
        max_thicken=geometry.max_thicken,
    )
    images = render_images(d.rasters, d.meta, params, geometry, seed=cfg.seed, progress=progress,
                           workers=workers)

    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    prefix = "w" if cfg.regime == "shared" else "p"
    src = {"kind": "glyphs", "generator_version": GENERATOR_VERSION, "config": cfg.to_dict(), **d.info}
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


def _draw_unicode(cfg: GlyphConfig, geometry: Geometry, progress: bool, workers: int = 1) -> _Drawn:
    """Unicode script: the fonts' characters, one font per user (rasterised in this process
    whatever ``workers``)."""
    fonts = available_fonts(cfg.extra_font_paths, progress=progress)
    if not fonts:
        raise DataError(
            "glyphs: no usable font found (searched fc-list, /usr/share/fonts and "
            "matplotlib's fonts); install fonts-dejavu-core or " + widen_hint()
        )
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

    font_stroke = np.array([cache.stroke_width(int(f)) for f in asg.user_font])
    rasters, meta = cache.arrays()
    source = np.array(
        [cache.index[(int(f), int(cp))] for f, cp in zip(asg.user_font[users], pool_cp[idents])],
        dtype=np.int64,
    )
    info = {
        "fonts": [f.describe() for f in fonts],
        "pool_size": len(pool),
        "pool_size_all_tiers": len(full),
        "user_fonts": asg.user_font.tolist(),
    }
    return _Drawn(asg, users, idents, counts, rasters, meta, source, font_stroke,
                  lambda j: label_name(pool[j].cp), info)


def _draw_invented(cfg: GlyphConfig, geometry: Geometry, progress: bool, workers: int = 1) -> _Drawn:
    """Invented script: identity j is invented character j; every user starts from the pen."""
    rng = np.random.default_rng([cfg.seed, _ASSIGN])
    if cfg.regime == "owned":
        asg = assign_invented_owned(cfg, rng)
    else:
        pool = [Identity(j, (0,)) for j in range(cfg.invented_identities())]
        asg = assign_shared(pool, ("pen",), cfg, rng)
    users, idents, counts = _examples(asg, cfg)
    rasters, meta = invented.invent(len(asg.pool), cfg.seed, geometry, progress=progress, workers=workers)
    font_stroke = np.full(cfg.num_users, invented.pen_width(geometry))
    info = {"script": "invented", "invented_version": invented.INVENTED_VERSION, "fonts": [],
            "pool_size": len(asg.pool)}
    return _Drawn(asg, users, idents, counts, rasters, meta, idents, font_stroke,
                  invented.label_name, info)

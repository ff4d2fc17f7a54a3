"""Who writes what: pool selection and the user/identity assignment of both regimes.

* shared: every user is one font (a writer) and writes ``identities_per_user``
  characters drawn uniformly from the pool characters its font covers; a random
  ``eval_identity_fraction`` of the pool is held out (those characters appear only in
  the evaluation split).
* owned: users come in groups of ``users_per_identity``; each group owns
  ``identities_per_user`` identities that no other group holds, all drawn by every
  font of the group. Whole groups (identities together with their owners) are held
  out for evaluation, so evaluation identities belong to new people.

Public users are chosen among the users that hold training identities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dpemb.data.dataset import DataError
from dpemb.data.glyphs.config import CJK_FONT_PACKAGES, GlyphConfig
from dpemb.data.glyphs.fonts import FontInfo
from dpemb.data.glyphs.identities import Identity


@dataclass(frozen=True)
class Assignment:
    pool: list[Identity]
    user_font: np.ndarray  # (U,) font index per user
    user_identities: list[np.ndarray]  # per user: sorted pool indices it holds
    eval_identities: np.ndarray  # sorted pool indices held out for evaluation
    public_users: np.ndarray  # sorted user indices


def widen_hint() -> str:
    return (
        "install CJK fonts to widen the pool (Debian: apt-get install "
        + " ".join(CJK_FONT_PACKAGES)
        + ") or pass extra_font_paths"
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


def assign_shared(
    pool: list[Identity], fonts: Sequence[FontInfo], cfg: GlyphConfig, rng: np.random.Generator
) -> Assignment:
    n = len(pool)
    n_eval = int(round(cfg.eval_identity_fraction * n))
    if cfg.eval_identity_fraction > 0:
        n_eval = max(n_eval, 2)
    if n - n_eval < 2:
        raise DataError(
            f"glyphs (shared regime): the pool has {n} identities; holding out {n_eval} "
            f"for evaluation leaves fewer than 2 for training; lower "
            f"eval_identity_fraction or raise max_identities"
        )
    eval_ids = np.sort(rng.choice(n, n_eval, replace=False)).astype(np.int64)
    cover = _coverage(pool, len(fonts))
    per_font = cover.sum(1)
    eligible = np.flatnonzero(per_font >= cfg.identities_per_user)
    if len(eligible) == 0:
        raise DataError(
            f"glyphs (shared regime): identities_per_user={cfg.identities_per_user} "
            f"exceeds the {int(per_font.max(initial=0))} pool characters the best font "
            f"draws (pool: {n}); lower identities_per_user or raise max_identities"
        )
    user_font = eligible[rng.integers(0, len(eligible), cfg.num_users)]
    covered = [np.flatnonzero(cover[f]) for f in range(len(fonts))]
    user_ids = [
        np.sort(rng.choice(covered[f], cfg.identities_per_user, replace=False))
        for f in user_font
    ]
    is_eval = np.zeros(n, dtype=bool)
    is_eval[eval_ids] = True
    holders = np.array([u for u, ids in enumerate(user_ids) if (~is_eval[ids]).any()])
    return Assignment(pool, user_font.astype(np.int64), user_ids, eval_ids, _public(holders, cfg, rng))


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
    n_eval = cfg.eval_groups(groups)
    eval_groups = np.sort(rng.choice(groups, n_eval, replace=False))
    eval_ids = (
        np.sort(np.concatenate([user_ids[g * upi] for g in eval_groups]))
        if n_eval
        else np.zeros(0, dtype=np.int64)
    )
    is_eval_group = np.zeros(groups, dtype=bool)
    is_eval_group[eval_groups] = True
    train_users = np.flatnonzero(~np.repeat(is_eval_group, upi))
    return Assignment(pool, user_font, user_ids, eval_ids.astype(np.int64), _public(train_users, cfg, rng))


def assign(
    pool: list[Identity], fonts: Sequence[FontInfo], cfg: GlyphConfig, rng: np.random.Generator
) -> Assignment:
    if cfg.regime == "shared":
        return assign_shared(pool, fonts, cfg, rng)
    return assign_owned(pool, fonts, cfg, rng)

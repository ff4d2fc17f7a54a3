"""The identity pool of the glyph benchmark: Unicode code points, look-alikes merged.

Two tiers of candidates, ``basic`` (836 code points) and ``cjk`` (about 32,000, with CJK
fonts installed); each group of ``LOOKALIKE_GROUPS`` (code points that render identically)
becomes ONE identity, represented by the member the most fonts draw (ties: lowest code
point): docs/GLYPHS.md, "Identities", for the tiers and how the groups were measured.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dpemb.data.glyphs.fonts import FontInfo

# (first, last) code point ranges, inclusive
BASIC_BLOCKS: tuple[tuple[int, int], ...] = (
    (0x0021, 0x007E),  # ASCII digits, letters, punctuation, symbols
    (0x00A1, 0x00FF),  # Latin-1 supplement
    (0x0100, 0x017F),  # Latin Extended-A
    (0x0391, 0x03C9),  # Greek letters
    (0x0400, 0x045F),  # Cyrillic
    (0x2190, 0x21FF),  # arrows
    (0x2200, 0x22FF),  # mathematical operators
)
CJK_BLOCKS: tuple[tuple[int, int], ...] = (
    (0xAC00, 0xD7A3),  # Hangul syllables
    (0x4E00, 0x9FFF),  # CJK unified ideographs
)

LOOKALIKE_GROUPS: tuple[str, ...] = (
    "\u002f\u2215",  # / ∕
    "\u0033\u0417",  # 3 З
    "\u0041\u0391\u0410",  # A Α А
    "\u0042\u0392\u0412",  # B Β В
    "\u0043\u0421",  # C С
    "\u0045\u0395\u0415",  # E Ε Е
    "\u0048\u0397\u041d",  # H Η Н
    "\u0049\u006c\u0140\u0399\u0406",  # I l ŀ Ι І
    "\u004a\u0408",  # J Ј
    "\u004b\u039a\u041a",  # K Κ К
    "\u004c\u013f",  # L Ŀ
    "\u004d\u039c\u041c",  # M Μ М
    "\u004e\u039d",  # N Ν
    "\u004f\u039f\u041e",  # O Ο О
    "\u0050\u03a1\u0420",  # P Ρ Р
    "\u0053\u0405",  # S Ѕ
    "\u0054\u03a4\u0422",  # T Τ Т
    "\u0058\u03a7\u0425",  # X Χ Х
    "\u0059\u03a5",  # Y Υ
    "\u005a\u0396",  # Z Ζ
    "\u0061\u0430",  # a а
    "\u0063\u0441",  # c с
    "\u0065\u0435",  # e е
    "\u0069\u0456",  # i і
    "\u006a\u0458",  # j ј
    "\u006b\u0138\u03ba\u043a",  # k ĸ κ к
    "\u006d\u0442",  # m т (italic Cyrillic te)
    "\u006e\u03c0\u043f",  # n π п
    "\u006f\u03bf\u043e",  # o ο о
    "\u0070\u0440",  # p р
    "\u0073\u0455",  # s ѕ
    "\u0075\u0438",  # u и (italic Cyrillic i)
    "\u0078\u0445",  # x х
    "\u0079\u0443",  # y у
    "\u007c\u2223",  # | ∣
    "\u007e\u223c",  # ~ ∼
    "\u00b5\u03bc",  # µ μ
    "\u00b7\u2219\u22c5",  # · ∙ ⋅
    "\u00c8\u0400",  # È Ѐ
    "\u00cb\u0401",  # Ë Ё
    "\u00cf\u03aa\u0407",  # Ï Ϊ Ї
    "\u00d0\u0110",  # Ð Đ
    "\u00e8\u0450",  # è ѐ
    "\u00eb\u0451",  # ë ё
    "\u00ef\u0457",  # ï ї
    "\u0127\u045b",  # ħ ћ
    "\u0131\u03b9",  # ı ι
    "\u0178\u03ab",  # Ÿ Ϋ
    "\u0393\u0413",  # Γ Г
    "\u0394\u2206",  # Δ ∆
    "\u03a0\u041f",  # Π П
    "\u21c4\u21c6",  # ⇄ ⇆
    "\u22a4\u22ba",  # ⊤ ⊺
)


@dataclass(frozen=True)
class Identity:
    """One identity of the pool: a code point and the fonts (indices) that draw it."""

    cp: int
    fonts: tuple[int, ...]
    merged: tuple[int, ...] = ()  # look-alike code points folded into this identity

    @property
    def tier(self) -> str:
        return tier_of(self.cp)

    @property
    def name(self) -> str:
        return label_name(self.cp)


def label_name(cp: int) -> str:
    """The label of a code point identity, e.g. ``U+0041``."""
    return f"U+{cp:04X}"


def tier_of(cp: int) -> str:
    return "cjk" if any(a <= cp <= b for a, b in CJK_BLOCKS) else "basic"


def _block_code_points(blocks: Sequence[tuple[int, int]]) -> frozenset[int]:
    # letters, numbers, punctuation, symbols; no marks, spaces, controls,
    # unassigned code points, or the invisible soft hyphen
    return frozenset(cp for a, b in blocks for cp in range(a, b + 1)
                     if unicodedata.category(chr(cp))[0] in "LNPS" and cp != 0x00AD)


@functools.lru_cache(maxsize=None)
def candidate_code_points() -> frozenset[int]:
    """Every code point the benchmark may use, of both tiers."""
    return _block_code_points(BASIC_BLOCKS + CJK_BLOCKS)


def lookalike_groups(fonts: Sequence[FontInfo] = ()) -> list[tuple[int, ...]]:
    """Groups of code points that must share one identity (static table + code points
    that a font draws with one glyph), overlapping groups merged. Sorted; singletons
    omitted."""
    group_of: dict[int, set[int]] = {}
    table = [tuple(map(ord, g)) for g in LOOKALIKE_GROUPS]
    for group in table + [shared for f in fonts for shared in f.shared_glyphs]:
        merged = set(group).union(*(group_of.get(cp, ()) for cp in group))
        for cp in merged:
            group_of[cp] = merged
    return sorted({tuple(sorted(g)) for g in group_of.values() if len(g) > 1})


def build_pool(fonts: Sequence[FontInfo]) -> list[Identity]:
    """All identities the fonts can draw, look-alikes merged, sorted by code point."""
    cands = candidate_code_points()
    cps_of = [np.fromiter(f.chars & cands, dtype=np.int64) for f in fonts]
    all_cp = np.concatenate(cps_of) if cps_of else np.zeros(0, dtype=np.int64)
    all_font = np.repeat(np.arange(len(fonts)), [len(c) for c in cps_of])
    order = np.lexsort((all_font, all_cp))
    all_cp, all_font = all_cp[order], all_font[order]
    uniq, starts = np.unique(all_cp, return_index=True)
    covering = {int(cp): fs.tolist() for cp, fs in zip(uniq, np.split(all_font, starts[1:]))}
    rep_of: dict[int, tuple[int, tuple[int, ...]]] = {}
    for group in lookalike_groups(fonts):
        present = [cp for cp in group if cp in covering]
        if not present:
            continue
        rep = min(present, key=lambda cp: (-len(covering[cp]), cp))
        for cp in present:
            rep_of[cp] = (rep, tuple(c for c in present if c != rep))
    pool = []
    for cp in sorted(covering):
        rep, merged = rep_of.get(cp, (cp, ()))
        if rep == cp:
            pool.append(Identity(cp, tuple(covering[cp]), merged))
    return pool

"""Font discovery and character-map filtering for the glyph benchmark.

Fonts come from the machine (``fc-list`` and the usual font directories), from installed
Python packages (matplotlib's ``mpl-data/fonts/ttf``) and from paths the caller adds; each
face is checked with fontTools before it is used (placeholders, glyph names that do not
name their character, empty glyphs, fewer than ``MIN_FONT_CHARS`` characters, bitmap-only
faces, duplicate copies): docs/GLYPHS.md, "Fonts", for each check and what it catches.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpemb.atomic import atomic_write_text
from dpemb.data.dataset import DataError

FONT_SUFFIXES = (".ttf", ".otf", ".ttc", ".otc")
SYSTEM_FONT_DIRS = (
    "/usr/share/fonts",
    "/usr/local/share/fonts",
    "~/.local/share/fonts",
    "~/.fonts",
)
MIN_FONT_CHARS = 60  # a face must cover at least this many candidate characters
MAX_NAME_MISMATCHES = 2  # more glyph-name mismatches than this (and > 2%): drop the face

# Glyph names whose Adobe Glyph List code point is a look-alike of the character the
# font legitimately maps them to (AGL maps "Omega" to OHM SIGN, "Delta" to INCREMENT,
# "mu" to MICRO SIGN).
_AGL_ALIASES = {
    ("Omega", 0x03A9),
    ("Delta", 0x0394),
    ("mu", 0x03BC),
    ("Ohm", 0x2126),
    ("increment", 0x2206),
}


@dataclass(frozen=True)
class FontInfo:
    """One usable font face and the candidate characters it draws."""

    path: str
    index: int  # face index inside a .ttc/.otc collection, 0 otherwise
    family: str
    style: str
    chars: frozenset[int]  # candidate code points with a checked, non-empty glyph
    shared_glyphs: tuple[tuple[int, ...], ...] = ()  # candidates drawn by one glyph

    @property
    def name(self) -> str:
        return f"{self.family} {self.style}".strip()

    def describe(self) -> dict:
        return {
            "name": self.name,
            "path": self.path,
            "index": self.index,
            "chars": len(self.chars),
        }


@dataclass(frozen=True)
class Rejected:
    """A face that was not used, and why."""

    path: str
    index: int
    reason: str


@dataclass(frozen=True)
class FontScan:
    usable: tuple[FontInfo, ...]
    rejected: tuple[Rejected, ...]


# ---------------------------------------------------------------------- discovery
def package_font_dirs() -> list[Path]:
    """Font directories shipped inside installed Python packages."""
    dirs = []
    spec = importlib.util.find_spec("matplotlib")
    if spec is not None and spec.origin:
        d = Path(spec.origin).parent / "mpl-data" / "fonts" / "ttf"
        if d.is_dir():
            dirs.append(d)
    return dirs


def _walk_fonts(root: Path) -> list[Path]:
    return sorted(Path(dirpath) / f for dirpath, _dirs, files in os.walk(root, followlinks=True)
                  for f in files if f.lower().endswith(FONT_SUFFIXES))


def _fc_list() -> list[Path]:
    exe = shutil.which("fc-list")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--format", "%{file}\n"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted(
        Path(line) for line in out.splitlines() if line.lower().endswith(FONT_SUFFIXES)
    )


def discover_font_paths(
    extra_paths: Iterable[str | os.PathLike] = (),
    *,
    system: bool = True,
    packages: bool = True,
) -> list[Path]:
    """Font files in discovery order: system fonts, package fonts, then ``extra_paths``.

    ``extra_paths`` may name font files or directories (searched recursively); a
    missing path is a :class:`DataError`.
    """
    groups: list[list[Path]] = []
    if system:  # (os.walk of a missing folder finds nothing)
        dirs = [Path(d).expanduser() for d in SYSTEM_FONT_DIRS]
        found = _fc_list() + [f for d in dirs for f in _walk_fonts(d)]
        groups.append(sorted(found))
    if packages:
        groups.append([f for d in package_font_dirs() for f in _walk_fonts(d)])
    extra: list[Path] = []
    for e in extra_paths:
        p = Path(e).expanduser()
        if p.is_dir():
            extra += _walk_fonts(p)
        elif p.is_file():
            extra.append(p)
        else:
            raise DataError(
                f"extra font path {str(e)!r} does not exist; pass .ttf/.otf/.ttc files "
                "or directories holding them"
            )
    groups.append(extra)
    first: dict[str, Path] = {}  # real path -> the first path naming that file
    for p in itertools.chain(*groups):
        first.setdefault(os.path.realpath(p), p)
    return list(first.values())


# ---------------------------------------------------------------------- analysis
def _face_count(path: Path) -> int:
    if path.suffix.lower() in (".ttc", ".otc"):
        from fontTools.ttLib import TTCollection

        with open(path, "rb") as fh:
            return len(TTCollection(fh, lazy=True).fonts)
    return 1


def _name_matches(glyph_name: str, cp: int) -> bool | None:
    """True/False when the glyph name says which character it draws, None if unknown."""
    from fontTools import agl

    if glyph_name in (f"uni{cp:04X}", f"u{cp:04X}", f"u{cp:05X}"):
        return True
    known = agl.AGL2UV.get(glyph_name)
    decoded = chr(known) if known is not None else agl.toUnicode(glyph_name)
    if not decoded:
        return None
    if (glyph_name.split(".", 1)[0], cp) in _AGL_ALIASES:
        return True
    return unicodedata.normalize("NFKC", decoded) == unicodedata.normalize("NFKC", chr(cp))


ANALYSIS_VERSION = 1  # bump when the checks change: invalidates the disk cache


def font_cache_dir() -> Path:
    """Where face analyses are cached: ``$DPEMB_CACHE_DIR/fonts`` (default
    ``~/.cache/dpemb/fonts``). The cache only saves time; results never depend on it."""
    root = os.environ.get("DPEMB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dpemb"
    )
    return Path(root) / "fonts"


def analyze_face(
    path: str | os.PathLike, index: int, candidates: frozenset[int], *, disk_cache: bool = True
) -> FontInfo | Rejected:
    """Check one face; return what it can draw among ``candidates`` or why it is unusable.

    Results are memoised in the process and (``disk_cache``) on disk, keyed by the
    file's path, size and modification time, the face index, the candidate set and
    ``ANALYSIS_VERSION``.
    """
    path = str(path)
    try:
        st = os.stat(path)
        stat_key = (st.st_size, st.st_mtime_ns)
    except OSError:
        return Rejected(path, int(index), "cannot be read (missing file)")
    return _analyze_memo(path, int(index), candidates, stat_key, disk_cache)


@functools.lru_cache(maxsize=4096)
def _analyze_memo(
    path: str, index: int, candidates: frozenset[int], stat_key: tuple[int, int], disk: bool
) -> FontInfo | Rejected:
    cache_file = None
    if disk:
        h = hashlib.sha1()
        h.update(repr((ANALYSIS_VERSION, path, index, stat_key)).encode())
        h.update(_candidates_digest(candidates).encode())
        cache_file = font_cache_dir() / f"{h.hexdigest()}.json"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            d = json.loads(cache_file.read_text())
            if "reason" in d:
                return Rejected(path, index, d["reason"])
            return FontInfo(
                path,
                index,
                d["family"],
                d["style"],
                frozenset(_undelta(d["chars"])),
                tuple(tuple(g) for g in d["shared"]),
            )
    res = _analyze(path, index, candidates)
    if cache_file is not None:
        if isinstance(res, Rejected):
            d = {"reason": res.reason}
        else:
            d = {
                "family": res.family,
                "style": res.style,
                "chars": _delta(sorted(res.chars)),
                "shared": [list(g) for g in res.shared_glyphs],
            }
        with contextlib.suppress(OSError):  # a read-only home: run without the cache
            atomic_write_text(cache_file, json.dumps(d))
    return res


@functools.lru_cache(maxsize=16)
def _candidates_digest(candidates: frozenset[int]) -> str:
    return hashlib.sha1(np.asarray(sorted(candidates), dtype=np.int64).tobytes()).hexdigest()


def _delta(xs: list[int]) -> list[int]:
    return [xs[0]] + [b - a for a, b in zip(xs, xs[1:])] if xs else []


def _undelta(ds: list[int]) -> list[int]:
    return np.cumsum(np.asarray(ds, dtype=np.int64)).tolist() if ds else []


def _analyze(path: str, index: int, candidates: frozenset[int]) -> FontInfo | Rejected:
    from fontTools.ttLib import TTFont

    def reject(reason: str) -> Rejected:
        return Rejected(path, index, reason)

    try:
        font = TTFont(path, fontNumber=index, lazy=True)
        names = font["name"]
        family = names.getBestFamilyName() or Path(path).stem
        style = names.getBestSubFamilyName() or ""
    except Exception as e:  # fontTools raises many types on corrupt files
        return reject(f"cannot be read by fontTools ({type(e).__name__}: {e})")
    try:
        if not any(t in font for t in ("glyf", "CFF ", "CFF2")):
            return reject("bitmap-only face (no glyf/CFF outlines)")
        if "last resort" in family.lower() or "lastresort" in family.lower():
            return reject("placeholder font (Last Resort draws boxes for every code point)")
        if "cmap" not in font:
            return reject("no character map")
        if any(t.format == 13 for t in font["cmap"].tables):
            return reject("placeholder font (format-13 many-to-one character map)")
        cmap = font.getBestCmap()
        if not cmap:
            return reject("no Unicode character map")
        items = [(cp, cmap[cp]) for cp in sorted(candidates.intersection(cmap))]
        if len(items) < MIN_FONT_CHARS:
            return reject(
                f"covers only {len(items)} candidate characters (need {MIN_FONT_CHARS})"
            )
        distinct = len({g for _, g in items})
        if distinct < 0.5 * len(items):
            return reject(
                f"placeholder font ({len(items)} characters drawn by {distinct} glyphs)"
            )
        verdicts = [(cp, g, _name_matches(g, cp)) for cp, g in items]  # None: name says nothing
        decodable = sum(ok is not None for _, _, ok in verdicts)
        mismatched = [(cp, g) for cp, g, ok in verdicts if ok is False]
        if len(mismatched) > max(MAX_NAME_MISMATCHES, 0.02 * decodable):
            ex = ", ".join(f"U+{cp:04X} -> {g!r}" for cp, g in mismatched[:3])
            return reject(
                f"maps ordinary code points to other glyphs ({len(mismatched)} of "
                f"{decodable} checked, e.g. {ex})"
            )
        bad = {cp for cp, _ in mismatched}
        empty = _empty_glyphs(font, {g for _, g in items})
        chars = []
        by_glyph: dict[str, list[int]] = {}
        for cp, g in items:
            if cp in bad or g in empty:
                continue
            chars.append(cp)
            by_glyph.setdefault(g, []).append(cp)
        if len(chars) < MIN_FONT_CHARS:
            return reject(f"only {len(chars)} candidate characters have outlines")
        shared = tuple(tuple(v) for v in by_glyph.values() if len(v) > 1)
        return FontInfo(path, index, family, style, frozenset(chars), shared)
    except Exception as e:
        return reject(f"cannot be analysed ({type(e).__name__}: {e})")
    finally:
        font.close()


def _empty_glyphs(font, glyph_names: set[str]) -> set[str]:
    """The glyphs among ``glyph_names`` without an outline (TrueType: zero-length
    ``loca`` entry). CFF faces are checked when rendered (an empty render)."""
    if "glyf" not in font or "loca" not in font:
        return set()
    loca = np.asarray(list(font["loca"]), dtype=np.int64)
    rev = font.getReverseGlyphMap()
    return {g for g in glyph_names if loca[rev[g] + 1] <= loca[rev[g]]}


def scan_fonts(
    candidates: frozenset[int],
    extra_paths: Sequence[str | os.PathLike] = (),
    *,
    system: bool = True,
    packages: bool = True,
    progress: bool = False,
) -> FontScan:
    """Discover and check every face; usable faces sorted by (family, style, path)."""
    usable: list[FontInfo] = []
    rejected: list[Rejected] = []
    seen: dict[tuple[str, str], str] = {}
    paths = discover_font_paths(extra_paths, system=system, packages=packages)
    for path in tqdm(paths, desc="glyphs: checking fonts", unit="file", leave=False,
                     disable=not progress):
        try:
            n = _face_count(path)
        except Exception as e:
            rejected.append(Rejected(str(path), 0, f"unreadable font collection ({e})"))
            continue
        for i in range(n):
            res = analyze_face(path, i, candidates)
            if isinstance(res, Rejected):
                rejected.append(res)
                continue
            key = (res.family.lower(), res.style.lower())
            if key in seen:
                rejected.append(Rejected(str(path), i, f"duplicate of {seen[key]}"))
                continue
            seen[key] = f"{path}#{i}" if n > 1 else str(path)
            usable.append(res)
    usable.sort(key=lambda f: (f.family.lower(), f.style.lower(), f.path, f.index))
    return FontScan(tuple(usable), tuple(rejected))

"""The built-in ``glyphs`` benchmark: identities are Unicode characters, users are
writers (one font plus a personal style each). Needs no download: it renders the
fonts installed on the machine and those shipped with Python packages.

See docs/GLYPHS.md. Entry points: :class:`GlyphConfig`, :func:`make_glyphs`,
:func:`available_fonts`.

Imports are lazy (PEP 562): ``dpemb.data.glyphs.config`` (what ``dpemb data`` reads
its defaults from) does not load torch; the renderer loads on first use.
"""

from __future__ import annotations

from dpemb.lazy import lazy_exports

# public name -> submodule that defines it
_WHERE = {
    "GlyphConfig": "config", "GlyphConfigError": "config", "FontInfo": "fonts",
    "available_fonts": "make", "make_glyphs": "make",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _WHERE)

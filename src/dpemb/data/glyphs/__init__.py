"""The built-in ``glyphs`` benchmark: identities are Unicode characters, users are
writers (one font plus a personal style each). Needs no download: it renders the
fonts installed on the machine and those shipped with Python packages.

See docs/GLYPHS.md. Entry points: :class:`GlyphConfig`, :func:`make_glyphs`,
:func:`available_fonts`.
"""

from dpemb.data.glyphs.config import GlyphConfig, GlyphConfigError
from dpemb.data.glyphs.fonts import FontInfo
from dpemb.data.glyphs.make import available_fonts, make_glyphs

__all__ = ["GlyphConfig", "GlyphConfigError", "FontInfo", "available_fonts", "make_glyphs"]

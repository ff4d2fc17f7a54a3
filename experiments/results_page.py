"""Keep ``docs/RESULTS.md`` in step with the experiments that produce it.

Each experiment writes its full report to its own page and its headline (table, plot,
command) into a marked section of ``docs/RESULTS.md``, so the summary page is always
the output of the same commands as the detailed pages:

    <!-- begin: NAME -->  ... generated ...  <!-- end: NAME -->

Text outside the markers is left alone; a missing section is appended. The file is
replaced atomically.
"""

from __future__ import annotations

import re
from pathlib import Path

from dpemb.atomic import atomic_write_text

HEADER = """# Results

Measured results of dpemb, each section written by the experiment command it names
(the detailed pages hold every run, the settings and the discussion). Run times are on
a 2-core machine without GPU: benchmark timing on dpemb's built-in synthetic glyph data
and the public Fashion-MNIST data, published under docs/PRIVACY.md's timing rule (on
private data a run's times are private diagnostics). Beside each headline, what its
epsilon covers: the extrapolation, the trained models' own epsilon, and the
hyper-parameter selection that no epsilon accounts.
"""


def update_section(docs: Path, name: str, markdown: str) -> Path:
    """Replace (or append) section ``name`` of ``docs/RESULTS.md`` with ``markdown``."""
    path = Path(docs) / "RESULTS.md"
    text = path.read_text() if path.exists() else HEADER
    if "<!-- begin:" not in text:  # an old hand-written page: start from the header
        text = HEADER
    block = f"<!-- begin: {name} -->\n{markdown.strip()}\n<!-- end: {name} -->"
    pattern = re.compile(rf"<!-- begin: {re.escape(name)} -->.*?<!-- end: {re.escape(name)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    return atomic_write_text(path, text)

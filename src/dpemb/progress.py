"""Progress bars that suit where the output goes.

On a terminal: an ordinary tqdm bar. Anywhere else (a log file, a pipe, CI): one plain
line every ``interval`` seconds and one at the end, with no carriage returns, so a
log of a long run stays short and readable.
"""

from __future__ import annotations

import sys
from typing import TextIO

LOG_INTERVAL_S = 30.0


class _Lines:
    """A stream for tqdm that turns its carriage-return redraws into whole lines."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, s: str) -> int:
        text = s.replace("\r", "").strip()
        if text:
            self._stream.write(text + "\n")
        return len(s)

    def flush(self) -> None:
        self._stream.flush()


def progress(
    *,
    total: int | None = None,
    desc: str | None = None,
    unit: str = "it",
    initial: int = 0,
    enabled: bool = True,
    interval: float = LOG_INTERVAL_S,
    stream: TextIO | None = None,
):
    """A tqdm bar on a terminal, periodic plain lines elsewhere, nothing when disabled."""
    from tqdm.auto import tqdm

    stream = stream or sys.stderr
    common = dict(total=total, desc=desc, unit=unit, initial=initial)
    if not enabled:
        return tqdm(disable=True, **common)
    if getattr(stream, "isatty", lambda: False)():
        return tqdm(file=stream, **common)

    class PeriodicLines(tqdm):
        def set_postfix(self, ordered_dict=None, refresh=True, **kwargs):  # noqa: ARG002
            super().set_postfix(ordered_dict, refresh=False, **kwargs)  # shown with the next line

    return PeriodicLines(file=_Lines(stream), mininterval=interval, maxinterval=interval * 2,
                         ascii=True, ncols=100, leave=True, **common)

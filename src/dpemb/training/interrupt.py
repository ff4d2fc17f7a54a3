"""Stopping a run cleanly: checkpoints on SIGTERM/SIGINT and on a time interval.

``GracefulStop`` turns the first SIGTERM or SIGINT into a request that the loop sees
at the end of the current round or step: it writes a checkpoint and raises
``TrainingInterrupted`` (the CLI exits 143 or 130 and says how to resume). A second
signal stops at once, as usual. ``CheckpointSchedule`` says when a loop checkpoints:
at evaluations, every N steps, on a time interval and on a requested stop.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from types import FrameType


class TrainingInterrupted(RuntimeError):
    """A signal stopped the run after a checkpoint was written."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class GracefulStop:
    """Context manager: catch SIGTERM/SIGINT in the main thread and remember them."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def _handle(self, signum: int, frame: FrameType | None) -> None:  # noqa: ARG002
        if self.signum is not None:  # a second signal: stop now
            self._restore()
            signal.raise_signal(signum)
            return
        self.signum = signum

    def _restore(self) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()


class CheckpointSchedule:
    """When a training loop checkpoints: at evaluations, every ``every`` steps or rounds
    (0: never), once ``interval_s`` seconds have passed since the last checkpoint (0:
    never), and when a stop was requested. Call ``due`` once per step or round."""

    def __init__(self, every: int, interval_s: float, stop: GracefulStop) -> None:
        self.every = int(every)
        self.interval_s = float(interval_s)
        self.stop = stop
        self._last = time.monotonic()

    def due(self, n: int, *, at_eval: bool) -> bool:
        """Whether to checkpoint after step/round ``n``; True restarts the interval."""
        due = (at_eval or self.stop.requested or (self.every and n % self.every == 0)
               or (self.interval_s > 0 and time.monotonic() - self._last >= self.interval_s))
        if due:
            self._last = time.monotonic()
        return bool(due)

    def raise_if_stopped(self, unit: str, n: int, checkpoint: Path) -> None:
        """After the checkpoint of a requested stop: ``TrainingInterrupted`` saying how
        to resume."""
        if self.stop.requested:
            raise TrainingInterrupted(
                f"stopped by {self.stop.name} after {unit} {n}; a checkpoint was written to {checkpoint}. "
                "Continue with the same command and --resume.",
                self.stop.signum,
            )

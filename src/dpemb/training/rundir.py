"""A run directory: config.json, metrics.jsonl, checkpoint.pt, report.json, plots."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dpemb.training.atomic import atomic_write_json, atomic_write_text, _default


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint.pt"

    @property
    def report(self) -> Path:
        return self.path / "report.json"

    def write_config(self, text: str) -> None:
        atomic_write_text(self.config, text)

    def append_metrics(self, record: dict[str, Any]) -> None:
        """One JSON object per line, flushed and fsynced (a crash loses at most the line)."""
        with open(self.metrics, "a") as f:
            f.write(json.dumps(record, sort_keys=True, default=_default) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def truncate_metrics_after(self, step_key: str, step: int) -> None:
        """On resume: drop records written after the checkpoint's step (they will be
        produced again), so metrics.jsonl stays the same as an uninterrupted run's."""
        if not self.metrics.exists():
            return
        keep = []
        for line in self.metrics.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            if rec.get(step_key, 0) <= step:
                keep.append(line)
        atomic_write_text(self.metrics, "".join(l + "\n" for l in keep))

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics.exists():
            return []
        return [json.loads(l) for l in self.metrics.read_text().splitlines() if l.strip()]

    def write_report(self, report: dict[str, Any]) -> None:
        atomic_write_json(self.report, report)

"""A run directory: what is released at the top, private training state apart.

Each file and what it holds: docs/PRIVACY.md, "What is released, what is private".
Released files follow the user's umask; private ones (``private/``: the checkpoint and
the un-noised diagnostics, never needed downstream) are 0600 in a 0700 directory.
A run directory with ``checkpoint.pt`` at the top was written by a pre-release dpemb:
it is refused (``dpemb.training.errors.pre_release``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from dpemb.atomic import (
    PRIVATE_FILE_MODE,
    _default,
    atomic_write_json,
    atomic_write_text,
    make_private_dir,
)
from dpemb.training.errors import RETRAIN, pre_release

PRIVATE_DIR = "private"
CHECKPOINT = "checkpoint.pt"
DIAGNOSTICS = "diagnostics.jsonl"
ARTIFACT_WEIGHTS = "model.safetensors"
MODEL_CARD = "model_card.json"


def checkpoint_in(run_dir: str | os.PathLike) -> Path | None:
    """The checkpoint of a run directory, ``private/checkpoint.pt``; None when there is
    none. ``PreReleaseError`` for a pre-release run (``checkpoint.pt`` at the top)."""
    run_dir = Path(run_dir)
    refuse_pre_release_layout(run_dir)
    p = run_dir / PRIVATE_DIR / CHECKPOINT
    return p if p.is_file() else None


def refuse_pre_release_layout(run_dir: Path) -> None:
    """``PreReleaseError`` when ``run_dir`` keeps its checkpoint at the top (the layout
    of a pre-release dpemb, before ``private/``)."""
    if (run_dir / CHECKPOINT).is_file():
        raise pre_release(run_dir, RETRAIN)


#: files whose presence makes a directory a dpemb run (``--overwrite`` replaces only such a directory)
RUN_MARKERS = ("config.json", MODEL_CARD, ARTIFACT_WEIGHTS, PRIVATE_DIR)


class OutDirError(ValueError):
    """``--out`` holds something a run must not write into without being asked."""


def check_out_dir(path: str | os.PathLike, *, resume: bool | str, overwrite: bool) -> None:
    """Refuse (``OutDirError``) to train into a non-empty ``path`` unless the run is
    resumed there (``resume`` True or "auto", ``path`` a dpemb run) or ``overwrite``
    (``path`` a dpemb run, replaced whole). A pure check: nothing is written."""
    path = Path(path)
    if overwrite and resume:
        raise OutDirError("--overwrite replaces the run in --out and --resume continues it: give one of them")
    if not nonempty_out(path):
        return
    is_run = any((path / m).exists() for m in RUN_MARKERS)
    if not is_run:
        raise OutDirError(f"--out {path} is not empty and holds no dpemb run; nothing was written. Choose "
                          "another --out (or an empty directory)")
    if resume or overwrite:
        return
    finished = (path / ARTIFACT_WEIGHTS).exists()
    raise OutDirError(
        f"--out {path} already holds a {'trained' if finished else 'started'} run; nothing was written. "
        "Pass --resume to continue it, --overwrite to replace the whole run directory, or choose another --out"
        + (f". To train it further, start a new run from it: --init {path} --out NEW_DIR (its epsilon composes "
           "with this run's; the total is printed)" if finished else "")
    )


def nonempty_out(path: str | os.PathLike) -> bool:
    """Whether ``--out path`` holds anything (False: missing or an empty directory);
    ``OutDirError`` when it is a file. Shared by every command writing an --out directory."""
    path = Path(path)
    if not path.exists():
        return False
    if not path.is_dir():
        raise OutDirError(f"--out {path} is a file, not a directory; choose another --out")
    return any(path.iterdir())


def replace_out_dir(path: str | os.PathLike) -> None:
    """Remove an --out directory being replaced (``--overwrite``): moved aside in one
    rename (``path`` never holds a mix of two outputs), then deleted."""
    path = Path(path)
    old = path.with_name(f".{path.name}.replaced-{os.getpid()}")
    os.replace(path, old)
    shutil.rmtree(old, ignore_errors=True)


def released_config(text: str) -> str:
    """A run's configuration JSON as released: ``data.path`` and ``model.init`` (a run or
    artifact directory) become their directories' own names (``dataset_name``, as the
    model card names them), never a path on the curator's machine; the rest unchanged."""
    from dpemb.training.config import NAMED_INITS
    from dpemb.training.provenance import dataset_name

    config = json.loads(text)
    data, model = config.get("data"), config.get("model")
    if isinstance(data, dict) and isinstance(data.get("path"), str):
        data["path"] = dataset_name(data["path"])
    if isinstance(model, dict) and isinstance(model.get("init"), str) and model["init"] not in NAMED_INITS:
        model["init"] = dataset_name(model["init"])
    return json.dumps(config, indent=2, sort_keys=True)


class RunDir:
    @classmethod
    def open(cls, path: str | os.PathLike, *, resume: bool | str = False, overwrite: bool = False) -> "RunDir":
        """The run directory at ``path`` after ``check_out_dir``; with ``overwrite``, an
        existing run there is first replaced whole (``replace_out_dir``)."""
        check_out_dir(path, resume=resume, overwrite=overwrite)
        path = Path(path)
        if overwrite and nonempty_out(path):
            replace_out_dir(path)
        return cls(path)

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        refuse_pre_release_layout(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.config = self.path / "config.json"  # released: the dataset and init by their names
        self.private_config = self.path / PRIVATE_DIR / "config.json"  # as given: replays the run
        self.metrics = self.path / "metrics.jsonl"
        self.report = self.path / "report.json"
        self.private_dir = self.path / PRIVATE_DIR
        self.checkpoint = self.private_dir / CHECKPOINT  # where this run writes its checkpoint
        self.diagnostics = self.private_dir / DIAGNOSTICS

    def make_private_dir(self) -> Path:
        return make_private_dir(self.private_dir)

    def write_config(self, text: str) -> None:
        """The run's configuration (JSON ``text``): as given in ``private/config.json``
        (0600; it holds the curator's paths, and ``--config RUN/private/config.json``
        replays the run), and released as ``config.json`` with the dataset and the init
        named by their directories' own names (``released_config``)."""
        self.make_private_dir()
        atomic_write_text(self.private_config, text, private=True)
        atomic_write_text(self.config, released_config(text))

    def start_fresh(self, config: str) -> None:
        """A run starting at step 0 here (a new directory, or ``--resume auto`` that found
        no checkpoint: an attempt that stopped before its first one): its config, and
        no metrics, diagnostics or report of an earlier attempt."""
        self.write_config(config)
        for stale in (self.metrics, self.diagnostics, self.report):
            stale.unlink(missing_ok=True)

    def append_metrics(self, record: dict[str, Any]) -> None:
        """One JSON object per line, flushed and fsynced (a crash loses at most the line).
        Released: the file follows the umask."""
        _append_jsonl(self.metrics, record)

    def append_diagnostics(self, record: dict[str, Any]) -> None:
        """Like ``append_metrics`` but to ``private/diagnostics.jsonl`` (mode 0600, in
        the 0700 private directory): statistics of private users that carry no guarantee."""
        self.make_private_dir()
        _append_jsonl(self.diagnostics, record, mode=PRIVATE_FILE_MODE)

    def truncate_metrics_after(self, step_key: str, step: int) -> None:
        """On resume: drop records written after the checkpoint's step (they will be
        produced again), so metrics.jsonl stays the same as an uninterrupted run's.
        The private diagnostics are truncated the same way, and lose their end-of-run
        ``summary`` record, which the resumed run writes again."""
        for path, private in ((self.metrics, False), (self.diagnostics, True)):
            if path.exists():
                keep = [r for r in _read_jsonl(path) if r.get(step_key, 0) <= step and not r.get("summary")]
                atomic_write_text(path, "".join(_jsonl_line(r) for r in keep), private=private)

    def read_metrics(self) -> list[dict[str, Any]]:
        return _read_jsonl(self.metrics)

    def read_diagnostics(self) -> list[dict[str, Any]]:
        """The PRIVATE per-round diagnostics (and the final ``summary`` record)."""
        return _read_jsonl(self.diagnostics)

    def write_report(self, report: dict[str, Any]) -> None:
        atomic_write_json(self.report, report)


def _jsonl_line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, default=_default) + "\n"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def _append_jsonl(path: Path, record: dict[str, Any], *, mode: int | None = None) -> None:
    line = _jsonl_line(record)
    if mode is None:
        f = open(path, "a")  # created 0o666 & ~umask
    else:
        f = os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode), "a")
        os.chmod(path, mode)  # an existing file keeps its mode otherwise
    with f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())

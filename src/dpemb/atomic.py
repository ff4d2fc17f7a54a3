"""Atomic writes: a file is either its old version or its complete new one.

Permissions (docs/PRIVACY.md, "What is released, what is private"): a released output gets
the usual ``0o666 & ~umask``; a ``private=True`` file (training checkpoints: noise
generator, sampler, tree and optimizer state) stays ``0o600``, as ``mkstemp`` creates it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (Linux);
    elsewhere set and restored (setting 0o077 meanwhile errs on the private side)."""
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    old = os.umask(0o077)
    os.umask(old)
    return old


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None], *, private: bool = False) -> Path:
    """Call ``write(tmp_path)`` then rename the temporary file over ``path``.

    The file ends with mode 0600 when ``private``, else ``0o666 & ~umask``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # created 0600
    os.close(fd)
    try:
        write(Path(tmp))
        # a released file gets what open(path, "w") would give
        os.chmod(tmp, PRIVATE_FILE_MODE if private else 0o666 & ~current_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str, *, private: bool = False) -> Path:
    return atomic_write(path, lambda p: p.write_text(text), private=private)


def atomic_write_json(path: str | os.PathLike, obj: Any, *, private: bool = False) -> Path:
    return atomic_write_text(
        path, json.dumps(obj, indent=2, sort_keys=True, default=_default) + "\n", private=private
    )


def make_private_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents) with the directory itself at mode 0700, tightening
    an existing one."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")

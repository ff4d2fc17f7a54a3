"""User-partitioned image datasets: users -> examples (image, identity label).

The unit of privacy in dpemb is the user, so the dataset knows users. Examples are
stored sorted by user, so a user's examples are one contiguous slice:
``offsets[u]:offsets[u + 1]``. Images are packed uint8 arrays of shape
``(N, H, W, C)`` and are memory-mapped when loaded from disk, never decoded from
image files during training.

On-disk layout of a dataset directory::

    images.npy    uint8  (N, H, W, C)
    labels.npy    int64  (N,)      identity index into label_names
    offsets.npy   int64  (U + 1,)  user u owns rows offsets[u]:offsets[u+1]
    meta.json     {"format": 1, "user_names": [...], "label_names": [...],
                   "eval_labels": [...], "public_users": [...], "source": {...}}

``eval_labels`` are identities held out for evaluation (never trained on);
``public_users`` are users whose data may be used for non-private (public)
pretraining and are therefore excluded from private training.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

FORMAT_VERSION = 1


class DataError(ValueError):
    """Bad input data. The message names the file, row or user and what to do."""


@dataclass
class UserDataset:
    """Examples grouped by user. ``images[offsets[u]:offsets[u+1]]`` belong to user u."""

    images: np.ndarray  # uint8 (N, H, W, C), possibly a read-only memmap
    labels: np.ndarray  # int64 (N,)
    offsets: np.ndarray  # int64 (U + 1,)
    user_names: list[str]
    label_names: list[str]
    eval_labels: list[int] = field(default_factory=list)
    public_users: list[int] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.images.dtype != np.uint8 or self.images.ndim != 4:
            raise DataError(
                f"images must be uint8 with shape (N, H, W, C); got {self.images.dtype} "
                f"{self.images.shape}"
            )
        n = len(self.images)
        if self.labels.shape != (n,):
            raise DataError(f"labels has shape {self.labels.shape}, expected ({n},)")
        if len(self.offsets) != len(self.user_names) + 1:
            raise DataError(
                f"offsets has {len(self.offsets)} entries for {len(self.user_names)} users"
            )
        if self.offsets[0] != 0 or self.offsets[-1] != n or np.any(np.diff(self.offsets) < 0):
            raise DataError("offsets must rise from 0 to the number of examples")
        if n and (self.labels.min() < 0 or self.labels.max() >= len(self.label_names)):
            raise DataError("a label index lies outside label_names")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        images: np.ndarray,
        labels: Sequence[Any] | np.ndarray,
        users: Sequence[Any] | np.ndarray,
        *,
        label_names: Sequence[str] | None = None,
        user_names: Sequence[str] | None = None,
        source: dict[str, Any] | None = None,
    ) -> "UserDataset":
        """Build from per-example arrays; sorts examples by user (stable).

        ``labels`` and ``users`` may be integer indices (then ``label_names`` /
        ``user_names`` name them; default: the index as a string) or arbitrary
        hashables (then names are their ``str`` in first-seen order).
        """
        images = np.asarray(images)
        if images.ndim == 3:
            images = images[..., None]
        if images.dtype != np.uint8 and (
            images.dtype.kind not in "iu"
            or (images.size and (images.min() < 0 or images.max() > 255))
        ):
            raise DataError(
                f"images must be uint8 (or integers in 0-255), got {images.dtype}; "
                "scale float images to 0-255 and convert them first"
            )
        labels_idx, label_names = _index(labels, label_names, "label")
        users_idx, user_names = _index(users, user_names, "user")
        if not (len(images) == len(labels_idx) == len(users_idx)):
            raise DataError(
                f"images ({len(images)}), labels ({len(labels_idx)}) and users "
                f"({len(users_idx)}) must have one entry per example"
            )
        counts = np.bincount(users_idx, minlength=len(user_names))
        empty = [user_names[u] for u in np.flatnonzero(counts == 0)]
        if empty:
            raise DataError(
                f"{len(empty)} user(s) have no examples (first: {empty[0]!r}); "
                "remove them from user_names"
            )
        order = np.argsort(users_idx, kind="stable")
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(
            images=np.ascontiguousarray(images[order], dtype=np.uint8),
            labels=labels_idx[order].astype(np.int64),
            offsets=offsets,
            user_names=list(user_names),
            label_names=list(label_names),
            source=dict(source or {}),
        )

    # ------------------------------------------------------------------ accessors
    @property
    def num_users(self) -> int:
        return len(self.user_names)

    @property
    def num_examples(self) -> int:
        return len(self.images)

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    def user_sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def user_slice(self, u: int) -> slice:
        return slice(int(self.offsets[u]), int(self.offsets[u + 1]))

    def user_examples(self, u: int) -> tuple[np.ndarray, np.ndarray]:
        s = self.user_slice(u)
        return self.images[s], self.labels[s]

    def user_of_example(self) -> np.ndarray:
        return np.repeat(np.arange(self.num_users), self.user_sizes())

    # ------------------------------------------------------------------ subsets
    def select(self, example_mask: np.ndarray, *, relabel: bool = False) -> "UserDataset":
        """Keep the examples where ``example_mask`` is true; drop users left empty.

        With ``relabel`` the remaining identities are renumbered 0..k-1 (a model's
        head needs contiguous classes); eval/public annotations are then dropped.
        """
        example_mask = np.asarray(example_mask, dtype=bool)
        idx = np.flatnonzero(example_mask)
        users = self.user_of_example()[idx]
        keep_users, new_users = np.unique(users, return_inverse=True)
        counts = np.bincount(new_users, minlength=len(keep_users))
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        labels = self.labels[idx]
        label_names = self.label_names
        eval_labels, public_users = self.eval_labels, self.public_users
        if relabel:
            kept, labels = np.unique(labels, return_inverse=True)
            label_names = [self.label_names[i] for i in kept]
            eval_labels, public_users = [], []
        else:
            remap = {int(u): i for i, u in enumerate(keep_users)}
            public_users = [remap[u] for u in self.public_users if u in remap]
        return UserDataset(
            images=self.images[idx] if len(idx) != self.num_examples else self.images,
            labels=np.asarray(labels, dtype=np.int64),
            offsets=offsets,
            user_names=[self.user_names[u] for u in keep_users],
            label_names=list(label_names),
            eval_labels=list(eval_labels),
            public_users=list(public_users),
            source=dict(self.source),
        )

    def split(self) -> "Splits":
        """The train (private), public and eval parts; each is built (and relabelled
        0..k-1) on first access."""
        return Splits(self)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically: into a temporary sibling directory, then rename."""
        path = Path(path)
        if path.exists() and not (path / "meta.json").is_file():
            if not path.is_dir() or any(path.iterdir()):
                raise DataError(
                    f"{path} exists and is not a dpemb dataset; refusing to replace it"
                )
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a dataset is an ordinary folder
        try:
            np.save(tmp / "images.npy", np.ascontiguousarray(self.images))
            np.save(tmp / "labels.npy", self.labels.astype(np.int64))
            np.save(tmp / "offsets.npy", self.offsets.astype(np.int64))
            meta = {
                "format": FORMAT_VERSION,
                "user_names": self.user_names,
                "label_names": self.label_names,
                "eval_labels": [int(x) for x in self.eval_labels],
                "public_users": [int(x) for x in self.public_users],
                "source": self.source,
            }
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            if path.exists():
                old = path.with_name(f".{path.name}.old-{os.getpid()}")
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, *, mmap: bool = True) -> "UserDataset":
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.is_file():
            raise DataError(
                f"{path} is not a dpemb dataset (no meta.json); create one with "
                "`dpemb data make`"
            )
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise DataError(f"{meta_path} is unreadable ({e}); re-create the dataset") from e
        if meta.get("format") != FORMAT_VERSION:
            raise DataError(f"{meta_path}: unsupported dataset format {meta.get('format')}")
        mode = "r" if mmap else None
        try:
            images = np.load(path / "images.npy", mmap_mode=mode)
            labels = np.load(path / "labels.npy")
            offsets = np.load(path / "offsets.npy")
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: cannot read dataset arrays ({e}); re-create it") from e
        return cls(
            images=images,
            labels=labels,
            offsets=offsets,
            user_names=list(meta["user_names"]),
            label_names=list(meta["label_names"]),
            eval_labels=list(meta.get("eval_labels", [])),
            public_users=list(meta.get("public_users", [])),
            source=dict(meta.get("source", {})),
        )

    def summary(self) -> dict[str, Any]:
        sizes = self.user_sizes()
        per_label_users = (
            np.bincount(
                np.unique(np.stack([self.labels, self.user_of_example()]), axis=1)[0],
                minlength=self.num_classes,
            )
            if self.num_examples
            else np.zeros(0)
        )
        return {
            "examples": self.num_examples,
            "users": self.num_users,
            "identities": self.num_classes,
            "image_shape": list(self.image_shape),
            "examples_per_user": _stats(sizes),
            "users_per_identity": _stats(per_label_users),
            "eval_identities": len(self.eval_labels),
            "public_users": len(self.public_users),
            "source": self.source,
        }


class Splits:
    """Views of a dataset by role. ``train``: private users' examples of training
    identities; ``public``: public users' examples of training identities;
    ``train_and_public``: both; ``eval``: every example of held-out identities."""

    def __init__(self, ds: UserDataset):
        self.ds = ds
        self.is_eval = np.isin(ds.labels, np.asarray(ds.eval_labels, dtype=np.int64))
        public_user = np.zeros(ds.num_users, dtype=bool)
        public_user[np.asarray(ds.public_users, dtype=np.int64)] = True
        self.is_public = public_user[ds.user_of_example()]
        self._cache: dict[str, UserDataset] = {}

    def _get(self, name: str, mask: np.ndarray) -> UserDataset:
        if name not in self._cache:
            self._cache[name] = self.ds.select(mask, relabel=True)
        return self._cache[name]

    @property
    def train(self) -> UserDataset:
        return self._get("train", ~self.is_eval & ~self.is_public)

    @property
    def public(self) -> UserDataset:
        return self._get("public", ~self.is_eval & self.is_public)

    @property
    def train_and_public(self) -> UserDataset:
        return self._get("train_and_public", ~self.is_eval)

    @property
    def eval(self) -> UserDataset:
        return self._get("eval", self.is_eval)


def _stats(x: np.ndarray) -> dict[str, float]:
    if len(x) == 0:
        return {"min": 0, "median": 0, "mean": 0, "max": 0}
    return {
        "min": int(np.min(x)),
        "median": float(np.median(x)),
        "mean": round(float(np.mean(x)), 3),
        "max": int(np.max(x)),
    }


def _index(
    values: Iterable[Any] | np.ndarray, names: Sequence[str] | None, what: str
) -> tuple[np.ndarray, list[str]]:
    arr = np.asarray(values)
    if names is not None:
        if arr.dtype.kind not in "iu":
            raise DataError(f"{what} indices must be integers when {what}_names is given")
        if len(arr) and (arr.min() < 0 or arr.max() >= len(names)):
            raise DataError(f"a {what} index lies outside {what}_names")
        return arr.astype(np.int64), [str(n) for n in names]
    if arr.dtype.kind in "iu":
        uniq = np.unique(arr) if len(arr) else np.zeros(0, dtype=np.int64)
        lookup = {int(v): i for i, v in enumerate(uniq)}
        return np.array([lookup[int(v)] for v in arr], dtype=np.int64), [str(int(v)) for v in uniq]
    seen: dict[str, int] = {}
    idx = np.empty(len(arr), dtype=np.int64)
    for i, v in enumerate(arr):
        idx[i] = seen.setdefault(str(v), len(seen))
    return idx, list(seen)

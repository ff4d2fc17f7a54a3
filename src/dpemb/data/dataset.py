"""User-partitioned image datasets: users -> examples (image, identity label).

The unit of privacy in dpemb is the user, so the dataset knows users. Examples are
stored sorted by user, so a user's examples are one contiguous slice
``offsets[u]:offsets[u + 1]``; images are packed uint8 ``(N, H, W, C)`` arrays,
memory-mapped when loaded, never decoded from image files during training. The on-disk
layout (``images.npy``, ``labels.npy``, ``offsets.npy``, ``meta.json`` format 2) and the
roles of identities and users: docs/DATA.md, top and "Roles".

``split()`` keeps an example only where its user's and its identity's roles agree, so no
user and no identity is in two of train / validation / test, and every number measured on
validation or test is a statistic of users who are never trained on; other examples are
unused (``summary()`` counts them). Format 1 has no ``eval_users``: ``split()`` derives
them as the users holding no training-identity example and refuses (:class:`DataError`)
when an evaluation example belongs to a training user.
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

from dpemb.data.rows import RowView, is_lazy

FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)

# role codes of Splits.label_role / Splits.user_role
TRAIN, VALIDATION, TEST, PUBLIC = 0, 1, 2, 3

# the role annotations of a UserDataset, in the order meta.json holds them
ROLE_FIELDS = ("eval_labels", "validation_labels", "eval_users", "validation_users", "public_users")


class DataError(ValueError):
    """Bad input data. The message names the file, row or user and what to do."""


@dataclass
class UserDataset:
    """Examples grouped by user. ``images[offsets[u]:offsets[u+1]]`` belong to user u."""

    # uint8 (N, H, W, C): an in-memory array, a read-only memmap (``load(mmap=True)``)
    # or a RowView of one (a split of a memmapped dataset: dpemb.data.rows)
    images: np.ndarray | RowView
    labels: np.ndarray  # int64 (N,)
    offsets: np.ndarray  # int64 (U + 1,)
    user_names: list[str]
    label_names: list[str]
    eval_labels: list[int] = field(default_factory=list)  # test identities
    public_users: list[int] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)
    validation_labels: list[int] = field(default_factory=list)
    # test users; None: not recorded (format 1, or built in memory without roles):
    # split() derives them, see the module docstring
    eval_users: list[int] | None = None
    validation_users: list[int] = field(default_factory=list)
    # where the dataset was loaded from (for error messages); not saved
    origin: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.images, (np.ndarray, RowView)):
            raise DataError(
                f"images must be a numpy array (or a dpemb RowView), got {type(self.images).__name__}"
            )
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

        Images held in memory are copied; memory-mapped ones are not read: the subset's
        images are a lazy :class:`~dpemb.data.rows.RowView` of the same memmap.

        With ``relabel`` the remaining identities are renumbered 0..k-1 (a model's
        head needs contiguous classes); the role annotations (held-out identities and
        users, public users) are then dropped.
        """
        idx = np.flatnonzero(np.asarray(example_mask, dtype=bool))
        keep_users, new_users = np.unique(self.user_of_example()[idx], return_inverse=True)
        counts = np.bincount(new_users, minlength=len(keep_users))
        labels, label_names = self.labels[idx], self.label_names
        roles: dict[str, list[int] | None] = {k: [] for k in ROLE_FIELDS}
        if relabel:
            kept, labels = np.unique(labels, return_inverse=True)
            label_names = [self.label_names[i] for i in kept]
        else:
            remap = {int(u): i for i, u in enumerate(keep_users)}
            for k in ROLE_FIELDS:  # identities keep their indices; users are renumbered
                values = getattr(self, k)
                roles[k] = (list(values) if k.endswith("_labels") else None if values is None
                            else [remap[int(u)] for u in values if int(u) in remap])
        if is_lazy(self.images):  # a view of the memmap's rows, nothing read
            images = RowView(self.images, idx)
        elif len(idx) != self.num_examples:
            images = self.images[idx]
        else:
            images = self.images
        return UserDataset(
            images=images,
            labels=np.asarray(labels, dtype=np.int64),
            offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            user_names=[self.user_names[u] for u in keep_users],
            label_names=list(label_names),
            source=dict(self.source),
            origin=self.origin,
            **roles,  # type: ignore[arg-type]
        )

    def split(self) -> "Splits":
        """The train (private), public, validation and eval (= test) parts; each is
        built (and relabelled 0..k-1) on first access. Raises :class:`DataError` when
        the roles overlap, or for a format-1 dataset whose evaluation examples belong
        to training users (see the module docstring)."""
        return Splits(self)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically: into a temporary sibling directory, then rename."""
        role_arrays(self)  # refuse to write overlapping roles
        path = Path(path)
        check_replaceable(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a dataset is an ordinary folder
        try:
            _save_images(tmp / "images.npy", self.images)
            np.save(tmp / "labels.npy", self.labels.astype(np.int64))
            np.save(tmp / "offsets.npy", self.offsets.astype(np.int64))
            meta = {
                "format": FORMAT_VERSION,
                "user_names": self.user_names,
                "label_names": self.label_names,
                **{k: _ints(getattr(self, k)) for k in ROLE_FIELDS},
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
        if meta.get("format") not in READABLE_FORMATS:
            raise DataError(
                f"{meta_path}: unsupported dataset format {meta.get('format')} (this dpemb "
                f"reads formats {', '.join(map(str, READABLE_FORMATS))}); re-create the dataset "
                "with this version's `dpemb data make`"
            )
        mode = "r" if mmap else None
        try:
            images = np.load(path / "images.npy", mmap_mode=mode)
            labels = np.load(path / "labels.npy")
            offsets = np.load(path / "offsets.npy")
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: cannot read dataset arrays ({e}); re-create it") from e
        fields: dict[str, Any] = {}
        for key in ("user_names", "label_names", *ROLE_FIELDS):
            value = meta.get(key)
            if value is None and key in ROLE_FIELDS and (key == "eval_users" or key not in meta):
                continue  # absent (format 1): the default; eval_users None: not recorded
            try:
                fields[key] = list(value) if key.endswith("_names") else [int(x) for x in value]
            except (TypeError, ValueError) as e:
                raise DataError(f"{meta_path}: entry {key!r} is missing or malformed ({e!r}); "
                                "re-create the dataset") from e
        return cls(images=images, labels=labels, offsets=offsets, source=dict(meta.get("source", {})),
                   origin=str(path), **fields)

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
            "test_identities": len(self.eval_labels),
            "validation_identities": len(self.validation_labels),
            "test_users": (
                len(self.eval_users) if self.eval_users is not None else "not recorded (format 1)"
            ),
            "validation_users": len(self.validation_users),
            "public_users": len(self.public_users),
            "splits": split_counts(self),
            "source": self.source,
        }


class Splits:
    """Views of a dataset by role: the parts of the module docstring, ``eval`` also named
    ``test``, and ``train_and_public`` (both). ``label_role`` / ``user_role`` hold the role
    codes (TRAIN, VALIDATION, TEST; users also PUBLIC); ``unused`` marks the examples no
    part keeps."""

    def __init__(self, ds: UserDataset):
        self.ds = ds
        self.label_role, self.user_role = role_arrays(ds, derive_strict=True)
        ex_label = self.label_role[ds.labels]
        ex_user = self.user_role[ds.user_of_example()]
        self._masks = {
            "train": (ex_label == TRAIN) & (ex_user == TRAIN),
            "public": (ex_label == TRAIN) & (ex_user == PUBLIC),
            "validation": (ex_label == VALIDATION) & (ex_user == VALIDATION),
            "eval": (ex_label == TEST) & (ex_user == TEST),
        }
        self._masks["train_and_public"] = self._masks["train"] | self._masks["public"]
        self.unused = ~(
            self._masks["train_and_public"] | self._masks["validation"] | self._masks["eval"]
        )
        self._cache: dict[str, UserDataset] = {}

    def mask(self, name: str) -> np.ndarray:
        """Boolean mask over the dataset's examples of part ``name`` (``test`` =
        ``eval``)."""
        return self._masks["eval" if name == "test" else name]

    def get(self, name: str) -> UserDataset:
        """A part by name: train, public, train_and_public, validation, eval or test."""
        name = "eval" if name == "test" else name
        if name not in self._masks:
            raise ValueError(
                f"unknown split {name!r}: use train, public, train_and_public, validation, "
                "eval or test"
            )
        if name not in self._cache:
            self._cache[name] = self.ds.select(self._masks[name], relabel=True)
        return self._cache[name]

    train = property(lambda self: self.get("train"))
    public = property(lambda self: self.get("public"))
    validation = property(lambda self: self.get("validation"))
    eval = test = property(lambda self: self.get("eval"),
                           doc="The test split: test users' examples of test identities.")


def _save_images(file: Path, images: np.ndarray | RowView) -> None:
    """``np.save`` of ``images``; a RowView is written chunk by chunk (the same bytes
    as ``np.save`` of the materialised array) so that saving a split of a dataset
    larger than memory does not materialise it."""
    if not isinstance(images, RowView):
        np.save(file, np.ascontiguousarray(images))
        return
    header = {
        "descr": np.lib.format.dtype_to_descr(images.dtype),
        "fortran_order": False,
        "shape": images.shape,
    }
    with open(file, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)  # what np.save writes (version 1.0)
        for batch in images.batches(images.chunk_rows()):
            f.write(np.ascontiguousarray(batch).data)


def check_replaceable(path: Path, advice: str = "") -> None:
    """Refuse (:class:`DataError`) a ``path`` that exists and is neither a dpemb dataset
    nor an empty folder: saving a dataset there would replace it."""
    if path.exists() and not (path / "meta.json").is_file() and (not path.is_dir() or any(path.iterdir())):
        raise DataError(f"{path} exists and is not a dpemb dataset; refusing to replace it{advice}")


def _ints(values: Iterable[Any] | None) -> list[int] | None:
    return None if values is None else [int(x) for x in values]


def _name(ds: UserDataset) -> str:
    return str(ds.origin) if ds.origin else "this dataset"


def _index_list(values: Sequence[int], size: int, what: str, ds: UserDataset) -> np.ndarray:
    arr = np.asarray([int(v) for v in values], dtype=np.int64)
    if len(arr) and (arr.min() < 0 or arr.max() >= size):
        raise DataError(f"{_name(ds)}: a {what} index lies outside 0-{size - 1}")
    return arr


def role_arrays(ds: UserDataset, *, derive_strict: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(label role per identity, user role per user); see the module docstring.

    Overlapping roles raise :class:`DataError`. Without recorded ``eval_users``
    (format 1), held-out users are derived: users holding no training-identity
    example. With ``derive_strict`` a derivation that would evaluate on training
    users' examples, or leave an evaluation split empty, raises :class:`DataError`.
    """
    label_role = np.full(ds.num_classes, TRAIN, dtype=np.int8)
    test_l = _index_list(ds.eval_labels, ds.num_classes, "test (eval) label", ds)
    val_l = _index_list(ds.validation_labels, ds.num_classes, "validation label", ds)
    both = np.intersect1d(test_l, val_l)
    if len(both):
        raise DataError(
            f"{_name(ds)}: identity {ds.label_names[int(both[0])]!r} is both a test and a "
            "validation identity"
        )
    label_role[val_l] = VALIDATION
    label_role[test_l] = TEST

    user_role = np.full(ds.num_users, TRAIN, dtype=np.int8)
    named = {
        "public": _index_list(ds.public_users, ds.num_users, "public user", ds),
        "validation": _index_list(ds.validation_users, ds.num_users, "validation user", ds),
        "test": _index_list(ds.eval_users or [], ds.num_users, "test (eval) user", ds),
    }
    seen: dict[int, str] = {}
    for what, users in named.items():
        for u in users.tolist():
            if seen.setdefault(u, what) != what:
                raise DataError(
                    f"{_name(ds)}: user {ds.user_names[u]!r} is both a {seen[u]} and a {what} "
                    "user; a user has one role"
                )
    for role, users in zip((PUBLIC, VALIDATION, TEST), named.values()):
        user_role[users] = role
    if ds.eval_users is None and (len(test_l) or len(val_l)):
        _derive_users(ds, label_role, user_role, strict=derive_strict)
    return label_role, user_role


def _derive_users(
    ds: UserDataset, label_role: np.ndarray, user_role: np.ndarray, *, strict: bool
) -> None:
    """Format 1: held-out users = users without a training-identity example."""
    ex_label = label_role[ds.labels]
    ex_user = ds.user_of_example()
    has = {
        r: np.bincount(ex_user[ex_label == r], minlength=ds.num_users) > 0
        for r in (TRAIN, VALIDATION, TEST)
    }
    free = (user_role == TRAIN) & ~has[TRAIN]
    user_role[free & has[TEST]] = TEST
    user_role[free & ~has[TEST] & has[VALIDATION]] = VALIDATION
    if not strict:
        return
    for role, what in ((TEST, "evaluation (test)"), (VALIDATION, "validation")):
        held = ex_label == role
        n = int(held.sum())
        if n == 0 and not np.any(label_role == role):
            continue
        leaked = int(np.sum(held & (user_role[ex_user] != role)))
        if leaked or n == 0:
            reason = (
                f"{leaked} of its {n} {what} examples belong to users who also hold "
                "training identities, so every number measured on them would be a "
                "statistic of private training users"
                if leaked
                else f"it has no {what} example"
            )
            fix = (
                f"Re-split it with `dpemb data split {ds.origin}` (held-out identities and "
                "users by default) or re-make it with `dpemb data make`"
                if ds.origin
                else "Set eval_users/validation_users, or re-split it with "
                "dpemb.data.splits.assign_splits"
            )
            why = (
                "dataset format 1, written by an older dpemb" if ds.origin else "eval_users is None"
            )
            raise DataError(
                f"{_name(ds)} has no recorded evaluation users ({why}): {reason}. {fix}"
            )


def split_counts(ds: UserDataset) -> dict[str, Any] | str:
    """Users, identities and examples of each part, and the unused examples; for a
    dataset ``split()`` refuses, the reason as a string."""
    try:
        sp = Splits(ds)
    except DataError as e:
        return f"unusable: {e}"
    users = ds.user_of_example()
    out: dict[str, Any] = {}
    for name in ("train", "public", "validation", "eval"):
        m = sp.mask(name)
        out["test" if name == "eval" else name] = {
            "users": int(len(np.unique(users[m]))),
            "identities": int(len(np.unique(ds.labels[m]))),
            "examples": int(m.sum()),
        }
    out["unused_examples"] = int(sp.unused.sum())
    return out


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
        uniq, idx = np.unique(arr, return_inverse=True)
        return idx.reshape(-1).astype(np.int64), [str(int(v)) for v in uniq]
    seen: dict[str, int] = {}
    idx = np.empty(len(arr), dtype=np.int64)
    for i, v in enumerate(arr):
        idx[i] = seen.setdefault(str(v), len(seen))
    return idx, list(seen)

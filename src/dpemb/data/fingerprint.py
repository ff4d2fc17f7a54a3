"""Content fingerprints of a dataset: which data a run trained on, recognised by content.

``user_fingerprints(ds)``: one 64-bit BLAKE2b digest per user, over the shape and bytes
of that user's images (not their name, labels or position), so the same user is
recognised after a re-import that renames, relabels or reorders users.
``dataset_fingerprint(ds)``: one hex digest over every user's fingerprint in order, the
labels, the per-user example counts and the image shape: equal exactly when the
examples, their users and their labels are the same.

These are deterministic functions of the private data, NOT covered by any privacy
guarantee: a digest lets whoever knows every other user's data test whether one
user's images were in. They are kept with a run's private state (the checkpoint, in
the run's 0700 ``private/`` directory) and in curator-side files (a features file),
never in what is released (model card, report, logs, exports).
"""

from __future__ import annotations

import hashlib

import numpy as np

from dpemb.data.dataset import UserDataset

#: bytes hashed per read: a user's images are read in pieces of at most this size
_CHUNK = 16 << 20


def _user_digest(ds: UserDataset, u: int) -> bytes:
    h = hashlib.blake2b(digest_size=8, person=b"dpemb-user")
    h.update(np.asarray(ds.images.shape[1:], dtype=np.int64).tobytes())
    lo, hi = int(ds.offsets[u]), int(ds.offsets[u + 1])
    row_bytes = max(1, int(np.prod(ds.images.shape[1:])))
    step = max(1, _CHUNK // row_bytes)
    for a in range(lo, hi, step):
        h.update(np.ascontiguousarray(ds.images[a:min(hi, a + step)]).tobytes())
    return h.digest()


def user_fingerprints(ds: UserDataset) -> np.ndarray:
    """uint64 (U,): each user's content digest (private: see the module docstring)."""
    return np.frombuffer(b"".join(_user_digest(ds, u) for u in range(ds.num_users)) or b"",
                         dtype=np.uint64).copy()


def dataset_fingerprint(ds: UserDataset, users: np.ndarray | None = None) -> str:
    """Hex digest of the examples, their users and labels (private: see the module
    docstring). ``users``: ``user_fingerprints(ds)`` when already computed."""
    users = user_fingerprints(ds) if users is None else users
    h = hashlib.blake2b(digest_size=16, person=b"dpemb-data")
    for part in (np.asarray(ds.images.shape[1:], dtype=np.int64), np.asarray(users, dtype=np.uint64),
                 np.asarray(ds.user_sizes(), dtype=np.int64), np.asarray(ds.labels, dtype=np.int64)):
        h.update(part.tobytes())
    return h.hexdigest()


def shared_users(ours: np.ndarray, theirs: np.ndarray) -> int:
    """How many of ``ours`` (user fingerprints) appear in ``theirs``."""
    return int(np.isin(np.asarray(ours, dtype=np.uint64), np.asarray(theirs, dtype=np.uint64)).sum())

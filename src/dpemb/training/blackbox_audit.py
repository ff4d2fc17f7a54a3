"""Black-box user-level audit: canary users with crafted images, scored from the released model.

Unlike the white-box audit (``dpemb.training.audit_run``) it needs only the RELEASED model:
``make_canary_users`` (keyed block-pattern identities, each inserted by a fair coin) ->
``with_canary_users`` -> one normal ``train_federated`` run -> ``score_canaries`` -> the
estimators of ``dpemb.privacy.audit``. The canaries, the score and why its bounds are
weak: docs/AUDIT.md, "Black-box canary users", "What an audit can and cannot show", table 4.

A left-out canary is a user WITHOUT data (exactly "removed"): the population, the sampling
rate q = M K / (N + n) and the default delta are N + n whatever the coins say, and the
accountant counts every canary as a user. The score is a function of the released model
(``model.safetensors``) and the canaries' own images only: no inclusion bit, no sampling
randomness. A bound near 0 for a correct run is expected, not evidence of strong privacy.

The canaries' images, key, inclusion bits and scores are PRIVATE
(``private/audit_canaries.json``); the model of an audit run is marked not for release.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dpemb.atomic import atomic_write_json
from dpemb.data.dataset import UserDataset
from dpemb.data.tensors import to_float_tensor
from dpemb.models import embed
from dpemb.privacy.client_keys import seed_from
from dpemb.privacy.spec import PrivacySpec
from dpemb.training.artifact import load_artifact, read_card
from dpemb.training.audit_run import (PRIVATE_FILE, AuditError, canary_record, check_audit,
                                     check_canary_count)
from dpemb.training.rundir import MODEL_CARD, RunDir

DEFAULT_IMAGES_PER_USER = 4
DEFAULT_CELL = 4
PIXEL_NOISE = 24.0


@dataclass(frozen=True)
class CanaryUsers:
    """n crafted canary users (PRIVATE: images, key and inclusion bits)."""

    images: np.ndarray  # uint8 (n, k, H, W, C)
    included: np.ndarray  # bool (n,)
    key: int
    seeded: bool

    @property
    def n(self) -> int:
        return int(self.images.shape[0])

    @property
    def images_per_user(self) -> int:
        return int(self.images.shape[1])

    def bootstrap_seed(self) -> int:
        return seed_from(np.random.SeedSequence(self.key, spawn_key=(2,)))


def make_canary_users(n: int, image_shape: tuple[int, int, int], *, images_per_user: int = DEFAULT_IMAGES_PER_USER,
                      cell: int = DEFAULT_CELL, seed: int | None = None) -> CanaryUsers:
    """n canary identities with ``images_per_user`` images each (module docstring);
    ``seed`` None keys them from the OS's secure source."""
    check_canary_count(n)
    if images_per_user < 2:
        raise AuditError(f"the score compares a canary's images with each other: need >= 2 per canary, got "
                         f"{images_per_user}")
    h, w, c = (int(x) for x in image_shape)
    key = int(seed) if seed is not None else secrets.randbits(128)
    inc_rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(key, spawn_key=(0,))))
    img_rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(key, spawn_key=(1,))))
    included = inc_rng.random(n) < 0.5
    gh, gw = math.ceil(h / cell), math.ceil(w / cell)
    blocks = img_rng.random((n, gh, gw, c)) < 0.5
    patterns = np.repeat(np.repeat(blocks, cell, axis=1), cell, axis=2)[:, :h, :w, :] * 255.0
    noise = img_rng.normal(0.0, PIXEL_NOISE, size=(n, images_per_user, h, w, c))
    images = np.clip(patterns[:, None] + noise, 0, 255).astype(np.uint8)
    return CanaryUsers(images=images, included=included, key=key, seeded=seed is not None)


def with_canary_users(train: UserDataset, canaries: CanaryUsers) -> UserDataset:
    """``train`` with the canary users appended (users N..N+n-1, one new label each);
    left-out canaries are users without examples (module docstring)."""
    if tuple(train.image_shape) != tuple(canaries.images.shape[2:]):
        raise AuditError(f"canary images {canaries.images.shape[2:]} differ from the data's {train.image_shape}")
    k = canaries.images_per_user
    inc = canaries.included
    base = train.num_classes
    kept = canaries.images[inc].reshape(-1, *canaries.images.shape[2:])
    labels = np.repeat(base + np.flatnonzero(inc), k).astype(np.int64)
    sizes = np.where(inc, k, 0)
    offsets = np.concatenate([np.asarray(train.offsets, dtype=np.int64),
                              train.num_examples + np.cumsum(sizes).astype(np.int64)])
    return UserDataset(
        images=np.concatenate([np.asarray(train.images[np.arange(train.num_examples)]), kept]),
        labels=np.concatenate([np.asarray(train.labels, dtype=np.int64), labels]),
        offsets=offsets,
        user_names=list(train.user_names) + [f"canary-{i}" for i in range(canaries.n)],
        label_names=list(train.label_names) + [f"canary-{i}" for i in range(canaries.n)],
        source={**dict(train.source), "audit_canaries": canaries.n},
    )


@torch.no_grad()
def score_canaries(model: Any, canaries: CanaryUsers, *, device: torch.device | str = "cpu",
                   batch_size: int = 512) -> np.ndarray:
    """Each canary's score from the model alone: its images' mean pairwise cosine minus
    their mean cosine with the other canaries' images (module docstring)."""
    n, k = canaries.n, canaries.images_per_user
    flat = canaries.images.reshape(n * k, *canaries.images.shape[2:])
    model.eval()
    chunks = [embed(model, to_float_tensor(flat[i:i + batch_size], device=device)).double().cpu()
              for i in range(0, len(flat), batch_size)]
    e = torch.nn.functional.normalize(torch.cat(chunks), dim=1).reshape(n, k, -1)
    centroid = e.mean(dim=1)  # (n, D)
    intra = (k * k * (centroid * centroid).sum(1) - k) / (k * (k - 1))  # mean over pairs i != j
    total = centroid.sum(0)
    inter = (centroid * (total - centroid)).sum(1) / (n - 1)
    return (intra - inter).numpy()


def black_box_audit(
    train: UserDataset,
    eval_ds: UserDataset,
    model_cfg: Any,
    fed_cfg: Any,
    spec: PrivacySpec,
    run_cfg: Any,
    *,
    canaries: int,
    images_per_user: int = DEFAULT_IMAGES_PER_USER,
    canary_seed: int | None = None,
    noise_seed: int | None = None,
    provenance: Any = None,
    release: bool = False,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Train once with ``canaries`` crafted canary users and audit the released model.

    ``spec.population`` must be ``train.num_users + canaries`` (the accountant counts
    the canaries as users). Returns the training report with ``privacy.audit`` (also
    in ``<out>/report.json`` and the model card); the canaries go to
    ``<out>/private/audit_canaries.json``.
    """
    from dpemb.training.federated import train_federated

    check_audit(canaries, spec, real_users=train.num_users)
    crafted = make_canary_users(canaries, train.image_shape, images_per_user=images_per_user, seed=canary_seed)
    report = train_federated(with_canary_users(train, crafted), eval_ds, model_cfg, fed_cfg, spec, run_cfg,
                             noise_seed=noise_seed, provenance=provenance)
    model, _ = load_artifact(run_cfg.out, device)  # the RELEASED model, nothing else
    scores = score_canaries(model, crafted, device=device)
    record = canary_record(
        "black-box canary users (user level, released model only)", spec, report["privacy"],
        int(report["rounds"]), train.num_users, scores, crafted.included, crafted.bootstrap_seed(),
        release, "; a left-out canary is a user without data",
        canary_data=(f"a unique identity per canary: {crafted.images_per_user} images of a keyed "
                     f"random {DEFAULT_CELL}x{DEFAULT_CELL}-pixel block pattern with pixel noise"),
        score=("mean cosine between the canary's own images' embeddings minus their mean cosine "
               "with the other canaries' images (released model only)"))
    run = RunDir(run_cfg.out)
    atomic_write_json(run.make_private_dir() / PRIVATE_FILE, {
        "kind": "black-box", "key": str(crafted.key), "seeded": crafted.seeded,
        "included": crafted.included.astype(int).tolist(), "scores": scores.tolist(),
        "images_per_user": crafted.images_per_user,
    }, private=True)
    report["privacy"]["audit"] = record
    run.write_report(report)
    card = read_card(run.path)
    card["privacy"]["audit"] = record  # the artifact says what it is
    atomic_write_json(run.path / MODEL_CARD, card)
    return report

"""Audit runs: canary users inside federated training, and the audit each reports.

White-box ``AuditRun`` (``--audit-canaries N``, ``dpemb audit``) and black-box
``black_box_audit`` (``dpemb audit --black-box``) train once with N canary users and report
the estimate and two lower bounds of ``dpemb.privacy.audit`` beside the accounted epsilon,
at the run's delta (the canaries and scores: docs/AUDIT.md, "How the canaries enter the run").

Every score is a function of the released models and the canaries' own directions or images
only; no participation and no inclusion bit is used. The population is N + n whatever the
coins say, so q = M K / (N + n) and the reported epsilon covers every real user and every
canary. An audit run's model carries the canaries: "not for release" unless ``release=True``.
The canaries and their scores are PRIVATE (``private/audit_canaries.json``).

Supported: Gaussian noise, Poisson sampling, fixed clip (the estimators assume independent
fair-coin inclusion and participation at the accountant's rate); tree aggregation,
fixed/epoch sampling and adaptive clipping are refused. An audit run cannot be resumed (the
canary state is not checkpointed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector

from dpemb.atomic import atomic_write_json
from dpemb.data.dataset import UserDataset
from dpemb.data.tensors import to_float_tensor
from dpemb.models import embed
from dpemb.privacy.audit import (MIN_CANARIES, Reported, accounted_poisson_tradeoff, audit_record,
                                 fdp_k_grid, k_grid)
from dpemb.privacy.canaries import (STREAM_CONTENT, STREAM_INCLUSION, CanaryClients, bootstrap_seed, canary_key,
                                    canary_rng, needs_host)
from dpemb.privacy.clipping import ClipAndSum, ClippedSum
from dpemb.privacy.spec import PrivacySpec
from dpemb.training.artifact import load_artifact, read_card
from dpemb.training.rundir import MODEL_CARD, RunDir

PRIVATE_FILE = "audit_canaries.json"
SCORES = ("final", "rounds")

NOT_FOR_RELEASE = (
    "audit run: not for release. Its model carries the canaries' updates; train the production model "
    "as a separate run with the same settings and no canaries (its epsilon is the reported one)"
)
RELEASED = (
    "audit run released by choice: the reported epsilon covers the real users and the canary users "
    "alike (they are users of the accounted population)"
)


class AuditError(ValueError):
    """An audit the run cannot do (unsupported mechanism, too few canaries, resume)."""


def check_audit(n: int, spec: PrivacySpec, *, resume: Any = False,
                real_users: int | None = None) -> None:
    """Refuse an audit the canaries' assumptions do not hold for (AuditError);
    ``real_users``: the population must be they plus the n canaries."""
    check_canary_count(n)
    if spec.nonprivate:
        raise AuditError("an audit compares with the reported epsilon; a non-private run has none")
    if spec.mechanism != "gaussian" or spec.sampling != "poisson":
        raise AuditError(
            "audit canaries need the Gaussian mechanism with Poisson sampling (the estimators assume canaries "
            f"sampled independently at the accountant's rate); got {spec.mechanism} noise with "
            f"{spec.sampling} sampling")
    if spec.adaptive_clipping is not None:
        raise AuditError("audit canaries with adaptive clipping are not supported (the canaries would move the clip)")
    if resume:
        raise AuditError("an audit run cannot be resumed (the canary state is not checkpointed); run it again")
    if real_users is not None and spec.population != real_users + n:
        raise AuditError(f"the population ({spec.population}) must be the real users "
                         f"({real_users}) plus the canaries ({n})")


def check_canary_count(n: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < MIN_CANARIES:
        raise AuditError(f"an audit needs at least {MIN_CANARIES} canaries (an integer), got {n!r}")


def canary_record(kind: str, spec: PrivacySpec, privacy: dict[str, Any], rounds: int,
                  real_users: int, scores: np.ndarray, included: np.ndarray, seed: int,
                  release: bool, participation: str, **details: str) -> dict[str, Any]:
    """The RELEASED record of a canary-user audit (white- or black-box) at the run's
    delta: the estimators of ``dpemb.privacy.audit`` against the accounted RDP
    epsilon (and PLD's) and the accounted Poisson trade-off curve of ``rounds`` rounds."""
    n = len(scores)
    claim = accounted_poisson_tradeoff(spec.noise_multiplier, spec.sampling_rate, max(rounds, 1),
                                       spec.relation)
    reported = Reported(privacy.get("epsilon_rdp"), "rdp", spec.resolved_delta, spec.unit,
                        spec.relation, {"pld": privacy.get("epsilon_pld")})
    return {
        "kind": kind,
        "canaries": n,
        "population": {"real_users": real_users, "canary_users": n, "accounted": spec.population},
        "participation": f"Poisson at the run's per-user rate q = {spec.sampling_rate:.4g}"
                         + participation,
        **details,
        **audit_record(scores, included, reported, claim=claim, seed=seed),
        "release": RELEASED if release else NOT_FOR_RELEASE,
    }


def round_scores(cosines: np.ndarray, noise_multiplier: float, sampling_rate: float) -> np.ndarray:
    """Per-round cosines (rounds x canaries) -> one score per canary.

    The log-likelihood ratio of "in" against "out" under the accounted per-round signal
    1/z and participation rate q; any score is valid for the bounds (derivation:
    docs/AUDIT.md, "round_scores").
    """
    c = np.asarray(cosines, dtype=float)
    if c.ndim != 2 or c.shape[0] < 1:
        raise ValueError("need a (rounds, canaries) array of cosines")
    std = c.std(axis=1, keepdims=True)
    x = (c - c.mean(axis=1, keepdims=True)) / np.where(std > 0, std, 1.0)
    mu = 1.0 / float(noise_multiplier)
    q = float(sampling_rate)
    a = mu * x - mu * mu / 2
    if q >= 1.0:
        return a.sum(axis=0)
    return np.logaddexp(np.log1p(-q), np.log(q) + a).sum(axis=0)


class AuditRun:
    """The canaries of one federated run, from the first round to the audit record.

    ``num_real_users`` real users are users 0..N-1 of ``spec.population`` = N + n; the
    rest are the canaries. ``server_params`` are the aggregated parameters (their
    values now are the initial model the score is measured from). ``score``: "final"
    (the total move) or "rounds" (needs ``after_round`` after every server step).
    """

    def __init__(
        self,
        n: int,
        spec: PrivacySpec,
        num_real_users: int,
        server_params: Sequence[torch.nn.Parameter],
        *,
        seed: int | None = None,
        resume: Any = False,
        release: bool = False,
        score: str = "final",
    ) -> None:
        check_audit(n, spec, resume=resume, real_users=num_real_users)
        if score not in SCORES:
            raise AuditError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        self.spec = spec
        self.release = bool(release)
        self.score = score
        self.initial = parameters_to_vector(server_params).detach().to("cpu", torch.float64).clone()
        self.canaries = CanaryClients(
            int(n), self.initial.numel(), first_user=num_real_users,
            host=needs_host(spec.users_per_client, spec.relation), seed=seed,
        )
        self._picked = np.zeros(0, dtype=np.int64)
        self._last = self.initial.clone()
        self._cosines: list[np.ndarray] = []  # one row per after_round call

    def real_slots(self, slots: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The round's clients without the canary users (remembered for ``contribute``)."""
        real, self._picked = self.canaries.split_round(slots, self.spec.users_per_client)
        return real

    def contribute(self, accumulator: ClipAndSum) -> ClippedSum:
        """Add the round's canary clients to the run's clip-and-sum; the clipped sum with them."""
        return self.canaries.contribute(accumulator, self._picked)

    def after_round(self, server_params: Sequence[torch.nn.Parameter]) -> None:
        """Record every canary's cosine with this round's released update (call it right
        after each server step with the updated parameters): the previous minus the new
        aggregated parameters, a function of the released models only."""
        if self.score != "rounds":
            return
        current = parameters_to_vector(server_params).detach().to("cpu", torch.float64)
        step = self._last - current
        self._last = current.clone()
        norm = float(torch.linalg.vector_norm(step))
        if norm > 0 and np.isfinite(norm):
            self._cosines.append(self.canaries.scores(step).astype(np.float32))
        else:
            self._cosines.append(np.zeros(self.canaries.n, dtype=np.float32))

    def _scores(self, final: torch.Tensor) -> tuple[np.ndarray, str]:
        if self.score == "rounds":
            if len(self._cosines) != self.canaries.rounds or not self._cosines:
                raise AuditError(
                    f"score='rounds' needs after_round() after every server step: {len(self._cosines)} calls for "
                    f"{self.canaries.rounds} rounds")
            return (round_scores(np.stack(self._cosines), self.spec.noise_multiplier, self.spec.sampling_rate),
                    "log-likelihood ratio of the canary's standardised cosines with every round's released update "
                    "(participation unknown, Poisson at the accounted rate)")
        return (self.canaries.scores(self.initial - final),
                "cosine between the canary's direction and the model's move (initial - final)")

    def finish(self, server_params: Sequence[torch.nn.Parameter], privacy: dict[str, Any],
               private_dir: Any) -> dict[str, Any]:
        """Score the canaries, write them to ``private_dir`` and return the RELEASED record."""
        final = parameters_to_vector(server_params).detach().to("cpu", torch.float64)
        scores, score_desc = self._scores(final)
        c = self.canaries
        kind = "random" if c.kind == "gaussian" else "keyed coordinate (Dirac)"
        record = canary_record(
            "white-box canary users (user level, one run)", self.spec, privacy, c.rounds, c.first_user,
            scores, c.included, c.bootstrap_seed(), self.release,
            " (the canaries are users of the sampled population)", canary_kind=c.kind,
            canary_update=(f"a fixed {kind} direction of norm {c.norm_factor:g} x C, its own client"
                           + ("; a host client sends the opposite direction when the canary is "
                              "absent (sensitivity 2C)" if c.host else "")),
            score=score_desc)
        atomic_write_json(
            private_dir / PRIVATE_FILE,
            {**self.canaries.state(), "scores": scores.tolist(), "k_grid": k_grid(self.canaries.n),
             "fdp_k_grid": fdp_k_grid(self.canaries.n), "score": self.score},
            private=True,
        )
        return record


# ------------------------------------------------------------ black-box canary users

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
        return bootstrap_seed(self.key)


def make_canary_users(n: int, image_shape: tuple[int, int, int], *, images_per_user: int = DEFAULT_IMAGES_PER_USER,
                      cell: int = DEFAULT_CELL, seed: int | None = None) -> CanaryUsers:
    """n canary identities with ``images_per_user`` images each (module docstring);
    ``seed`` None keys them from the OS's secure source."""
    check_canary_count(n)
    if images_per_user < 2:
        raise AuditError(f"the score compares a canary's images with each other: need >= 2 per canary, got "
                         f"{images_per_user}")
    h, w, c = (int(x) for x in image_shape)
    key = canary_key(seed)
    inc_rng, img_rng = canary_rng(key, STREAM_INCLUSION), canary_rng(key, STREAM_CONTENT)
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

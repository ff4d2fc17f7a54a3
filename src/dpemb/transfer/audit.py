"""Example-level audit of DP classifiers on features (``dpemb transfer --audit-canaries N``).

A separate AUDIT run (the released run's method and privacy settings plus n canary
examples), scored from the released classifier alone. Canaries, score and what to expect:
docs/AUDIT.md, "Canary examples for `dpemb transfer`" and its table 3.

Every canary is a unit (N + n: the default delta and DP-SGD's public divisor count them);
a left-out one has weight 0 in every release (``prepare.with_absent_rows``), which is
exactly removing it while N stays public and fixed. A canary's score is a function of the
released weights and its own row only. Tested in tests/privacy/test_audit_transfer.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dpemb.privacy.audit import MIN_CANARIES, Reported, accounted_gaussian_tradeoff, audit_record
from dpemb.privacy.canaries import STREAM_CONTENT, STREAM_INCLUSION, bootstrap_seed, canary_key, canary_rng
from dpemb.transfer.config import TransferConfig
from dpemb.transfer.features import FeatureSet
from dpemb.transfer.prepare import prepare_features, transform_features, with_absent_rows
from dpemb.transfer.runner import TransferRun, train_prepared

NOT_RELEASED = ("audit run: a separate run with the same method and settings plus the canary examples; its "
                "classifier is not the released one (and not for release)")


class TransferAuditError(ValueError):
    """An audit that cannot be done (non-private method, too few canaries)."""


@dataclass(frozen=True)
class CanaryExamples:
    """n canary feature rows with labels (PRIVATE: rows, labels, key, inclusion bits)."""

    features: np.ndarray  # float32 (n, d), norm C each
    labels: np.ndarray  # int64 (n,)
    included: np.ndarray  # bool (n,)
    key: int
    seeded: bool

    @property
    def n(self) -> int:
        return int(self.features.shape[0])

    def bootstrap_seed(self) -> int:
        return bootstrap_seed(self.key)


def make_canary_examples(n: int, dim: int, num_classes: int, clip_norm: float, *,
                         seed: int | None = None) -> CanaryExamples:
    """n keyed canary rows of norm ``clip_norm`` with keyed random labels and fair coins."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < MIN_CANARIES:
        raise TransferAuditError(f"an audit needs at least {MIN_CANARIES} canaries (an integer), got {n!r}")
    key = canary_key(seed)
    rng = [canary_rng(key, s) for s in (STREAM_INCLUSION, STREAM_CONTENT)]
    included = rng[0].random(n) < 0.5
    u = rng[1].standard_normal((n, dim))
    u *= clip_norm / np.linalg.norm(u, axis=1, keepdims=True)
    labels = rng[1].integers(0, num_classes, size=n).astype(np.int64)
    return CanaryExamples(features=u.astype(np.float32), labels=labels, included=included, key=key,
                          seeded=seed is not None)


@dataclass
class TransferAudit:
    """The audit run (its classifier is NOT the released one), the released record, and the
    canaries (PRIVATE)."""

    run: TransferRun
    record: dict[str, Any]
    canaries: CanaryExamples
    scores: np.ndarray


def canary_scores(run: TransferRun, canaries: CanaryExamples) -> np.ndarray:
    """Logit of the canary's label minus the mean logit, from the classifier alone."""
    x, _ = transform_features(canaries.features, run.config.clip_norm, run.config.normalize_features)
    s = run.model.scores(x.to(run.model.weights.device)).double().cpu()
    lab = torch.as_tensor(canaries.labels)
    return (s[torch.arange(len(lab)), lab] - s.mean(dim=1)).numpy()


def transfer_audit(train: FeatureSet, config: TransferConfig, canaries: int, *, canary_seed: int | None = None,
                   progress: bool = False, device: torch.device | str | None = None) -> TransferAudit:
    """Train ``config`` once on ``train`` plus ``canaries`` canary examples and audit the
    classifier (module docstring). ``canary_seed`` None keys the canaries from the OS."""
    if not config.is_private:
        raise TransferAuditError("an audit compares with the reported epsilon; give a DP method with noise "
                                 f"(got {config.method}{' --non-private' if config.nonprivate else ''})")
    crafted = make_canary_examples(canaries, train.dim, train.num_classes, config.clip_norm, seed=canary_seed)
    n_real = train.num_examples
    users = None
    if config.unit == "user":
        if train.users is None:
            raise TransferAuditError("unit 'user' needs user ids in the features")
        users = np.concatenate([train.users.astype(np.int64),
                                int(train.users.max()) + 1 + np.arange(crafted.n, dtype=np.int64)])
    prep = prepare_features(
        np.concatenate([np.asarray(train.features, dtype=np.float32), crafted.features]),
        np.concatenate([np.asarray(train.labels, dtype=np.int64), crafted.labels]),
        num_classes=train.num_classes, clip_norm=config.clip_norm, normalize=config.normalize_features,
        unit=config.unit, users=users, device=device, source=train.source or "training features",
    )
    absent = np.concatenate([np.zeros(n_real, dtype=bool), ~crafted.included])
    run = train_prepared(with_absent_rows(prep, absent), config, progress=progress)
    scores = canary_scores(run, crafted)
    plan = run.plan
    reported = Reported(plan.epsilon, plan.accountant, plan.delta, plan.unit, plan.relation)
    claim = accounted_gaussian_tradeoff(plan.noise_multiplier, plan.num_releases)
    summary = audit_record(scores, crafted.included, reported, claim=claim, seed=crafted.bootstrap_seed())
    record = {
        "kind": f"canary examples ({config.unit} level, one run, released classifier only)",
        "method": config.method,
        "units": {"real": int(prep.num_units - crafted.n), "canary": crafted.n, "accounted": int(prep.num_units)},
        "canary_data": "a keyed random direction of norm C in feature space with a keyed random label",
        "score": "the classifier's logit of the canary's label minus its mean logit, at the canary's features",
        **summary,
        "release": NOT_RELEASED,
    }
    return TransferAudit(run=run, record=record, canaries=crafted, scores=scores)

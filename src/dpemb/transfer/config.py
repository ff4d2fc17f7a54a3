"""TransferConfig: everything that defines a DP transfer run, validated on construction."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from .budget import PrivacyRequest

METHODS: tuple[str, ...] = ("dp-ls", "dp-sgd", "dp-newton", "dp-fc", "non-private")


@dataclass(frozen=True)
class TransferConfig:
    """One transfer run. ``None`` hyperparameters take the method's default
    (``dpemb.transfer.runner.resolve_params`` states which, and the run records them).

    Privacy: exactly one of ``epsilon`` / ``noise_multiplier`` for a DP method, or
    ``nonprivate=True`` explicitly (then no noise and no guarantee). The
    ``non-private`` method (softmax regression baseline) takes none of them.

    ``delta`` None (default) is 1 / (10 N) for the N privacy units of the training set;
    a given delta >= 1/N is refused at training time unless ``allow_large_delta``.
    ``secure_noise`` draws the noise with the floating-point-hardened sampler (not with
    a ``seed``; not for a run without noise). ``allow_nonprivate_init``: accept features
    of a backbone trained without DP on (possibly) the same users; every epsilon then
    says it does not cover the backbone (``dpemb.transfer.backbone``).
    """

    method: str
    epsilon: float | None = None
    delta: float | None = None
    noise_multiplier: float | None = None
    nonprivate: bool = False
    accountant: str = "pld"
    unit: str = "example"
    clip_norm: float = 1.0
    normalize_features: bool = True
    grad_clip_norm: float | None = None
    reg: float | None = None
    alpha: float | None = None
    steps: int | None = None
    lr: float | None = None
    optimizer: str | None = None
    bias: float | None = None
    public_size: float | None = None
    seed: int | None = None
    allow_large_delta: bool = False
    secure_noise: bool = False
    allow_nonprivate_init: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if not (self.clip_norm > 0 and math.isfinite(self.clip_norm)):
            raise ValueError(f"clip_norm must be positive and finite, got {self.clip_norm}")
        if self.grad_clip_norm is not None and not (self.grad_clip_norm > 0 and math.isfinite(self.grad_clip_norm)):
            raise ValueError(f"grad_clip_norm must be positive and finite, got {self.grad_clip_norm}")
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.method == "non-private" and (self.epsilon is not None or self.noise_multiplier is not None):
            raise ValueError("method non-private adds no noise: do not give epsilon or noise_multiplier")
        if self.secure_noise and self.seed is not None:
            raise ValueError("secure_noise cannot be combined with a seed: the secure sampler is keyed afresh from the "
                             "OS on every draw (a seeded run is a reproducible experiment)")
        if self.secure_noise and not self.is_private:
            raise ValueError("secure_noise applies to a run that adds noise, not to a non-private one")
        self.privacy_spec()  # validates the privacy settings (unit, accountant, noise, delta)

    @property
    def is_private(self) -> bool:
        """False for the baseline and for a DP method run with ``nonprivate=True``."""
        return self.method != "non-private" and not self.nonprivate

    def privacy_spec(self) -> PrivacyRequest:
        """The privacy request: explicitly non-private for the baseline method."""
        shared = {f.name: getattr(self, f.name) for f in fields(PrivacyRequest)}
        nonprivate = self.nonprivate or self.method == "non-private"
        return PrivacyRequest(**{**shared, "nonprivate": nonprivate})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)

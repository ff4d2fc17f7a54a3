"""Privacy objects built from one ``PrivacySpec``, so noise, sampling and accounting agree.

``make_noise`` returns the mechanism the spec is accounted for (Gaussian, or tree
aggregation restarted every epoch when ``spec.tree_restarts``; with adaptive clipping
the Gaussian's multiplier is ``spec.value_noise_multiplier``, the value part of the
split); ``make_sampler`` the matching user sampler; ``make_accumulator`` a clip-and-sum
with the spec's clip norm (or the current adaptive one), sensitivity and relation.
"""

from __future__ import annotations

from typing import Sequence

import torch

from dpemb.privacy.clipping import ClipAndSum
from dpemb.privacy.noise import GaussianNoise
from dpemb.privacy.privatizer import GaussianPrivatizer, Privatizer, TreePrivatizer
from dpemb.privacy.sampling import VirtualClientSampler
from dpemb.privacy.spec import PrivacySpec
from dpemb.privacy.tree import TreeAggregationNoise


def make_noise(
    spec: PrivacySpec, *, seed: int | None = None, efficient: bool = True, secure: bool | None = None
) -> GaussianNoise | TreeAggregationNoise:
    """The noise mechanism ``spec`` is accounted for (seeded from the OS unless ``seed``).

    ``secure`` (default: ``spec.secure_noise``) selects the floating-point-hardened
    sampler (``noise.standard_normal``); it cannot be combined with ``seed``.
    """
    secure = spec.secure_noise if secure is None else bool(secure)
    if spec.mechanism == "tree":
        return TreeAggregationNoise(
            spec.noise_multiplier, efficient=efficient, seed=seed, allow_nonprivate=spec.nonprivate,
            restart_every=spec.rounds_per_epoch if spec.tree_restarts else None, secure=secure,
        )
    return GaussianNoise(spec.value_noise_multiplier, seed=seed, allow_nonprivate=spec.nonprivate, secure=secure)


def make_privatizer(spec: PrivacySpec, *, seed: int | None = None, efficient: bool = True) -> Privatizer:
    """``make_noise``'s mechanism behind the one ``Privatizer`` interface (the tree
    variant keeps its previous prefix sum and returns each round's noised sum)."""
    noise = make_noise(spec, seed=seed, efficient=efficient)
    return TreePrivatizer(noise) if isinstance(noise, TreeAggregationNoise) else GaussianPrivatizer(noise)


def make_sampler(spec: PrivacySpec, *, seed: int | None = None) -> VirtualClientSampler:
    """The user sampler ``spec`` is accounted for."""
    return VirtualClientSampler(
        spec.population, clients_per_round=spec.clients_per_round,
        users_per_client=spec.users_per_client, sampling=spec.sampling, seed=seed,
    )


def make_accumulator(
    spec: PrivacySpec, template: Sequence[torch.Tensor], clip_norm: float | None = None
) -> ClipAndSum:
    """A clip-and-sum with the spec's clip norm (or ``clip_norm``, the round's adaptive
    clip), the sensitivity that follows from it, K and the relation."""
    if clip_norm is None:
        return ClipAndSum(template, spec.clip_norm, spec.sensitivity, spec.relation)
    return ClipAndSum.for_users(template, clip_norm, spec.users_per_client, spec.relation)

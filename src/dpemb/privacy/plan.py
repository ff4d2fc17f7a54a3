"""``PrivacyPlan``: every privacy object of one federated run, built from one spec.

One round, call by call: docs/SCALE.md, "dpemb.privacy.plan".

The sampler, client randomness, the ONE noise mechanism, the adaptive clip state and the ledger
are all built here from the same ``PrivacySpec`` (``make_noise``, ``make_sampler``,
``make_accumulator``), so what runs is what is accounted for: the training loop never branches
on the mechanism and never derives a noise scale (docs/SCALE.md, "Where each step lives").

Randomness: unseeded, all three keyed from the OS's secure source; a seed (a reproducible
experiment, reported as such) gives seed+1, seed+2 and seed. ``state_dict`` is PRIVATE (generator
states, the run key, un-noised tree sums and BandMF buffers): private checkpoint only.

Guarantee: releasing ``release``'s output every round, with ``ledger.step()`` after each, is the
mechanism ``ledger`` accounts for ((epsilon, delta)-DP at the unit and relation of ``spec``),
provided every contribution to the accumulator is one virtual client of ``sample_round``'s slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from dpemb.privacy.adaptive_clipping import AdaptiveClipState, release_count
from dpemb.privacy.bandmf import BandMFNoise
from dpemb.privacy.blt import BLTNoise
from dpemb.privacy.client_keys import ClientRandomness, client_keys
from dpemb.privacy.clipping import ClipAndSum, ClippedSum
from dpemb.privacy.cyclic_sampling import CyclicPoissonSampler
from dpemb.privacy.ledger import PrivacyLedger
from dpemb.privacy.noise import GaussianNoise, NoiseMechanism
from dpemb.privacy.sampling import VirtualClientSampler
from dpemb.privacy.spec import PrivacySpec
from dpemb.privacy.strategy import blt_sensitivity, blt_strategy
from dpemb.privacy.tree import TreeAggregationNoise


def make_noise(
    spec: PrivacySpec, *, seed: int | None = None, efficient: bool = True, secure: bool | None = None
) -> NoiseMechanism:
    """The noise mechanism ``spec`` is accounted for, seeded from the OS unless ``seed``: tree
    aggregation (restarted every epoch when ``spec.tree_restarts``), BandMF with ``spec.bands``
    bands, BLT for T rounds with separation ``spec.bands``, or the Gaussian with
    ``spec.value_noise_multiplier`` (z, or the update's part of z with adaptive clipping). The
    one place a mechanism is built from a spec. ``secure`` (default: ``spec.secure_noise``)
    selects the hardened sampler; it cannot be combined with ``seed``.
    """
    secure = spec.secure_noise if secure is None else bool(secure)
    if spec.mechanism == "tree":
        return TreeAggregationNoise(
            spec.noise_multiplier, efficient=efficient, seed=seed, allow_nonprivate=spec.nonprivate,
            restart_every=spec.rounds_per_epoch if spec.tree_restarts else None, secure=secure,
        )
    if spec.mechanism == "bandmf":
        return BandMFNoise(spec.noise_multiplier, bands=spec.bands, seed=seed, allow_nonprivate=spec.nonprivate,
                           secure=secure)
    if spec.mechanism == "blt":
        theta, omega = blt_strategy(spec.rounds, spec.bands)
        return BLTNoise(spec.noise_multiplier, theta=theta, omega=omega, rounds=spec.rounds, seed=seed,
                        scale=blt_sensitivity(spec.rounds, spec.bands), allow_nonprivate=spec.nonprivate,
                        secure=secure)
    return GaussianNoise(spec.value_noise_multiplier, seed=seed, allow_nonprivate=spec.nonprivate, secure=secure)


def make_sampler(spec: PrivacySpec, *, seed: int | None = None) -> VirtualClientSampler:
    """The user sampler ``spec`` is accounted for: for bandmf and blt the cyclic Poisson sampler
    over ``spec.bands`` groups at the rate within a group ``spec.sampling_rate`` = b M K / N, with
    the "independent" group assignment (valid under add/remove and replace-special)."""
    if spec.sampling == "cyclic-poisson":
        return CyclicPoissonSampler(
            spec.population, bands=spec.bands, clients_per_round=spec.clients_per_round,
            users_per_client=spec.users_per_client, seed=seed, assignment="independent",
        )
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


@dataclass(frozen=True)
class PrivacyPlan:
    """The privacy side of a run (see the module docstring). Frozen: the objects are
    fixed for the run; their (private) state advances round by round."""

    spec: PrivacySpec
    sampler: VirtualClientSampler
    randomness: ClientRandomness
    mechanism: NoiseMechanism
    ledger: PrivacyLedger
    clip_state: AdaptiveClipState | None
    seeded: bool

    @classmethod
    def build(cls, spec: PrivacySpec, *, seed: int | None = None, efficient_tree: bool = True) -> "PrivacyPlan":
        """Sampler, client randomness and noise keyed from the OS (or from ``seed``)."""
        seeded = seed is not None
        return cls(
            spec=spec,
            sampler=make_sampler(spec, seed=seed + 1 if seeded else None),
            randomness=ClientRandomness(seed=seed + 2 if seeded else None),
            mechanism=make_noise(spec, seed=seed, efficient=efficient_tree),
            ledger=PrivacyLedger(spec),
            clip_state=AdaptiveClipState(spec.adaptive_clipping, spec.clip_norm) if spec.adaptive_clipping else None,
            seeded=seeded,
        )

    # ------------------------------------------------------------------ one round
    def sample_round(self) -> list[np.ndarray]:
        """The next round's virtual clients (arrays of user indices; some may be empty)."""
        return self.sampler.sample_round()

    def keys(self, slots: Sequence[np.ndarray]) -> list[tuple[int, int]]:
        """Each client's key for its randomness (``dpemb.privacy.client_keys``)."""
        return client_keys(slots, self.spec.users_per_client)

    @property
    def clip_norm(self) -> float:
        """This round's clip norm: the spec's, or adaptive clipping's current one (a
        function of earlier released counts only)."""
        return self.clip_state.clip_norm if self.clip_state is not None else self.spec.clip_norm

    def accumulator(self, template: Sequence[torch.Tensor]) -> ClipAndSum:
        """An empty clip-and-sum for this round, its sensitivity derived from the spec."""
        return make_accumulator(self.spec, template, self.clip_state.clip_norm if self.clip_state else None)

    def release(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """The round's noised SUM (noise drawn once, here); with adaptive clipping also
        the noised count, which moves the clip for the next round."""
        noised = self.mechanism.release(clipped)
        if self.clip_state is not None:
            self.clip_state.update(release_count(clipped, self.mechanism, self.spec.count_stddev),
                                   self.spec.expected_reporting_clients)
        return noised

    @property
    def expected_clients(self) -> int:
        """M: the PUBLIC constant the noised sum is divided by."""
        return self.sampler.expected_clients

    # ------------------------------------------------------------------ state (PRIVATE)
    def state_dict(self) -> dict[str, Any]:
        return {
            "sampler": self.sampler.state_dict(), "mechanism": self.mechanism.state_dict(),
            "ledger": self.ledger.state_dict(), "client_randomness": self.randomness.state_dict(),
            "adaptive_clip": self.clip_state.state_dict() if self.clip_state is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore exactly, from a checkpoint's entries (``state_dict``'s; a pre-release
        checkpoint without ``mechanism`` is refused before it gets here)."""
        self.sampler.load_state_dict(state["sampler"])
        self.mechanism.load_state_dict(state["mechanism"])
        self.ledger.load_state_dict(state["ledger"])
        self.randomness.load_state_dict(state["client_randomness"])
        if self.clip_state is not None:
            self.clip_state.load_state_dict(state["adaptive_clip"])

"""``PrivacyPlan``: every privacy object of one federated run, built from one spec.

    plan = PrivacyPlan.build(spec, seed=None)
    slots, keys = plan.sample_round()          # users -> virtual clients, and their keys
    acc = plan.accumulator(template)           # clip-and-sum, sensitivity derived from the spec
    ... clients add their deltas to acc (in this process or any other: the executor) ...
    noised = plan.release(acc.result())        # noise ONCE on the sum (+ adaptive clip's count)
    plan.ledger.step()                         # account the round

The plan holds the sampler, the clients' keyed randomness, the ONE privatizer
(Gaussian or tree noise behind the same call), the adaptive clip state and the
ledger, all built from the same ``PrivacySpec`` so that what runs is what is
accounted for. In the spirit of jax_privacy's execution plan: the training loop
never branches on the mechanism and never derives a noise scale.

Randomness: without a seed the sampler, the run key of the clients and the noise are
keyed from the OS's secure source; a seed (a reproducible experiment, reported as
such) fixes all three, from seed+1, seed+2 and seed. ``state_dict`` is PRIVATE
training state (generator states, the run key, un-noised tree sums): it goes into the
private checkpoint only.

Guarantee: releasing the output of ``release`` for every round, with ``ledger.step()``
after each, is the mechanism ``ledger`` accounts for ((epsilon, delta)-DP at the unit
and neighbouring relation of ``spec``), provided every contribution to the
accumulator is one virtual client of the slots ``sample_round`` returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from dpemb.privacy.adaptive_clipping import AdaptiveClipState, release_count
from dpemb.privacy.client_keys import ClientRandomness, client_keys
from dpemb.privacy.clipping import ClipAndSum, ClippedSum
from dpemb.privacy.factory import make_accumulator, make_privatizer, make_sampler
from dpemb.privacy.ledger import PrivacyLedger
from dpemb.privacy.privatizer import Privatizer
from dpemb.privacy.sampling import VirtualClientSampler
from dpemb.privacy.spec import PrivacySpec


@dataclass(frozen=True)
class PrivacyPlan:
    """The privacy side of a run (see the module docstring). Frozen: the objects are
    fixed for the run; their (private) state advances round by round."""

    spec: PrivacySpec
    sampler: VirtualClientSampler
    randomness: ClientRandomness
    privatizer: Privatizer
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
            privatizer=make_privatizer(spec, seed=seed, efficient=efficient_tree),
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
        noised = self.privatizer.privatize(clipped)
        if self.clip_state is not None:
            self.clip_state.update(release_count(clipped, self.privatizer, self.spec.count_stddev),
                                   self.spec.expected_reporting_clients)
        return noised

    @property
    def expected_clients(self) -> int:
        """M: the PUBLIC constant the noised sum is divided by."""
        return self.sampler.expected_clients

    # ------------------------------------------------------------------ state (PRIVATE)
    def state_dict(self) -> dict[str, Any]:
        return {
            "sampler": self.sampler.state_dict(), "privatizer": self.privatizer.state_dict(),
            "ledger": self.ledger.state_dict(), "client_randomness": self.randomness.state_dict(),
            "adaptive_clip": self.clip_state.state_dict() if self.clip_state is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore exactly (also a checkpoint written before the privatizer existed,
        which kept the noise and DP-FTRL's previous prefix sum apart)."""
        self.sampler.load_state_dict(state["sampler"])
        priv = state.get("privatizer")
        if priv is None:  # legacy layout: "noise" + a flat "prev_prefix"
            kind = "tree" if self.spec.mechanism == "tree" else "gaussian"
            prev = state.get("prev_prefix")
            priv = {"kind": kind, "noise": state["noise"]}
            if kind == "tree":
                priv["prev_prefix"] = [prev] if prev is not None else None
        self.privatizer.load_state_dict(priv)
        self.ledger.load_state_dict(state["ledger"])
        self.randomness.load_state_dict(state["client_randomness"])
        if self.clip_state is not None:
            self.clip_state.load_state_dict(state["adaptive_clip"])

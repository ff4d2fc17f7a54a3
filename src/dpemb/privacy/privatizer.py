"""ONE interface from a round's clipped sum to the noised sum the server may use.

    privatizer.privatize(clipped)  ->  the round's noised SUM (a list of tensors)

``GaussianPrivatizer``: the clipped sum plus N(0, (z x sensitivity)^2) per entry
(``dpemb.privacy.noise.GaussianNoise``).

``TreePrivatizer`` (DP-FTRL): tree aggregation releases noisy PREFIX sums
(``dpemb.privacy.tree``); the round's noised sum is the difference of the current and
the previous noisy prefix sum, which this object keeps itself. The training loop never
sees the mechanism: it gets a noised sum either way.

Both draw their noise exactly once per call, from the mechanism's own generator, and
both expose ``add_to_count`` for the one other released statistic (adaptive
clipping's noised count, drawn from the same sampler: ``dpemb.privacy.adaptive_clipping``).

Guarantee: the output is a post-processing of the mechanism the ledger accounts for
(``dpemb.privacy.factory.make_noise`` builds it from the same ``PrivacySpec``). State
(``state_dict``) holds generator states and, for the tree, un-noised running sums:
PRIVATE training state, for the private checkpoint only.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.noise import GaussianNoise
from dpemb.privacy.tree import TreeAggregationNoise


class Privatizer(Protocol):
    """What the training loop needs from a noise mechanism."""

    noise_multiplier: float

    def privatize(self, clipped: ClippedSum) -> list[torch.Tensor]: ...

    def add_to_count(self, count: float, std: float) -> float: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class GaussianPrivatizer:
    """The Gaussian mechanism: the round's clipped sum plus fresh noise."""

    def __init__(self, noise: GaussianNoise) -> None:
        if not isinstance(noise, GaussianNoise):
            raise TypeError(f"GaussianPrivatizer needs a GaussianNoise, got {type(noise).__name__}")
        self.noise = noise
        self.noise_multiplier = noise.noise_multiplier

    def privatize(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """``clipped.value`` + N(0, (z x clipped.sensitivity)^2) on every entry."""
        return self.noise.add(clipped)

    def add_to_count(self, count: float, std: float) -> float:
        return self.noise.add_to_count(count, std)

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "gaussian", "noise": self.noise.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_kind(state, "gaussian")
        self.noise.load_state_dict(state["noise"])


class TreePrivatizer:
    """Tree aggregation (DP-FTRL): the round's noised sum is the difference of
    consecutive noisy prefix sums; the previous prefix is kept here."""

    def __init__(self, noise: TreeAggregationNoise) -> None:
        if not isinstance(noise, TreeAggregationNoise):
            raise TypeError(f"TreePrivatizer needs a TreeAggregationNoise, got {type(noise).__name__}")
        self.noise = noise
        self.noise_multiplier = noise.noise_multiplier
        self._prev: list[torch.Tensor] | None = None  # the previous noisy prefix sum (released)

    def privatize(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """The noisy prefix sum of rounds 1..t minus that of rounds 1..t-1."""
        prefix = self.noise.noisy_prefix_sum(clipped)
        prev = self._prev if self._prev is not None else [torch.zeros_like(p) for p in prefix]
        self._prev = [p.clone() for p in prefix]
        return [p - q.to(p.device, p.dtype) for p, q in zip(prefix, prev)]

    def add_to_count(self, count: float, std: float) -> float:
        raise ValueError("adaptive clipping is not supported with tree aggregation noise")

    def state_dict(self) -> dict[str, Any]:
        prev = None if self._prev is None else [p.detach().cpu() for p in self._prev]
        return {"kind": "tree", "noise": self.noise.state_dict(), "prev_prefix": prev}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_kind(state, "tree")
        self.noise.load_state_dict(state["noise"])
        self._prev = None if state["prev_prefix"] is None else [p.clone() for p in state["prev_prefix"]]


def _check_kind(state: dict[str, Any], kind: str) -> None:
    if state.get("kind") != kind:
        raise ValueError(f"privatizer state of kind {state.get('kind')!r} cannot be loaded into a {kind} privatizer")

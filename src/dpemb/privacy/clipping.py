"""Global L2 clipping of model deltas and their clipped sum, which carries its sensitivity.

Guarantee: every contribution added to a ``ClipAndSum`` has global L2 norm (over all
its tensors together) at most ``clip_norm``; a contribution with any non-finite entry
(NaN or inf) is replaced by zeros and counted. Hence, when each user contributes to
at most one virtual client, the returned sum changes by at most the stated
``sensitivity`` (see ``dpemb.privacy.relations``) between neighbouring datasets.

Norms are computed in float64, and a clipped copy is scaled slightly below
``clip_norm`` (by a few units of the tensors' floating-point epsilon) so that rounding
in the tensors' own dtype cannot push it above the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from dpemb.privacy._checks import positive_finite
from dpemb.privacy.relations import Relation, parse_relation, user_sensitivity


@dataclass(frozen=True)
class ClippedSum:
    """A sum of clipped contributions and the L2 sensitivity of that sum.

    The only input the noise mechanisms accept: noise is always added to a sum of
    clipped values, with a scale derived from ``sensitivity`` (never re-derived).
    """

    value: list[torch.Tensor]  # the sum of clipped contributions
    sensitivity: float  # L2 sensitivity of `value` under `relation`
    relation: Relation
    count: int = 0  # contributions summed
    preclip_norms: tuple[float, ...] = ()
    num_clipped: int = 0  # finite pre-clip norm > clip norm
    num_nonfinite: int = 0  # contributions with a non-finite entry, replaced by zeros

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensitivity", positive_finite("sensitivity", self.sensitivity))
        object.__setattr__(self, "relation", parse_relation(self.relation))

    @property
    def num_unclipped(self) -> int:
        """Contributions with a finite pre-clip norm <= the clip norm (the bits of adaptive
        clipping, ``adaptive_clipping``). PRIVATE: un-noised; release only a noised count."""
        return self.count - self.num_clipped - self.num_nonfinite


@dataclass(frozen=True)
class SumCounts:
    """A partial clip-and-sum's settings and counts (no values): what one process of a
    distributed round sends beside its partial sum (``ClipAndSum.counts``/``absorb``)."""

    clip_norm: float
    sensitivity: float
    relation: Relation
    count: int
    preclip_norms: tuple[float, ...]
    num_clipped: int
    num_nonfinite: int


def _global_norm(tensors: Sequence[torch.Tensor]) -> float:
    total = 0.0
    for t in tensors:
        total += float(torch.linalg.vector_norm(t.detach(), dtype=torch.float64)) ** 2
    return math.sqrt(total)


def _margin(tensors: Sequence[torch.Tensor]) -> float:
    """Relative safety margin covering rounding when scaling in the tensors' dtype."""
    eps = max((torch.finfo(t.dtype).eps for t in tensors if t.is_floating_point()), default=2.0**-52)
    return 8.0 * eps


def _clip(tensors: Sequence[torch.Tensor], clip_norm: float) -> tuple[list[torch.Tensor], float, bool]:
    """(clipped copies, pre-clip norm, whether a non-finite entry forced zeros).
    ``clip_norm`` must already be validated (finite, > 0): this runs for every client of
    every round, so the check is the caller's, once (``ClipAndSum``)."""
    tensors = [t.detach() for t in tensors]
    with torch.no_grad():
        norm = _global_norm(tensors)
        preclip = norm
        if not math.isfinite(norm):
            if any(bool(torch.isnan(t).any()) for t in tensors):
                return [torch.zeros_like(t) for t in tensors], math.nan, True
            if any(bool(torch.isinf(t).any()) for t in tensors):
                return [torch.zeros_like(t) for t in tensors], math.inf, True
            # Finite entries whose squares overflow float64: rescale first.
            scale = 1.0 / max(float(t.abs().max()) for t in tensors)
            tensors = [t * scale for t in tensors]
            norm = _global_norm(tensors)
            preclip = norm / scale
        if preclip <= clip_norm:
            return [t.clone() for t in tensors], preclip, False
        factor = clip_norm / norm * (1.0 - _margin(tensors))
        out = [t * factor for t in tensors]
        # Belt and braces: rounding must never leave the result above the bound.
        while _global_norm(out) > clip_norm:
            out = [t * (1.0 - _margin(out)) for t in out]
        return out, preclip, False


class ClipAndSum:
    """Streaming clip-and-sum of per-virtual-client deltas.

    ``add`` clips one contribution and adds it; ``counts`` and ``absorb`` take part in
    a distributed reduce of partial sums; ``result`` returns the ``ClippedSum`` with the
    sensitivity given at construction. The sensitivity must be at least ``clip_norm``
    (the sum of clipped vectors can never have less); use ``for_users`` to derive it
    from K and the relation. The clip norm is validated here, once per accumulator
    (a round); ``add`` clips every client with it and does not check it again.
    """

    def __init__(
        self,
        template: Sequence[torch.Tensor],
        clip_norm: float,
        sensitivity: float,
        relation: Relation,
    ) -> None:
        clip_norm = positive_finite("clip norm", clip_norm)
        sensitivity = positive_finite("sensitivity", sensitivity)
        if sensitivity < clip_norm:
            raise ValueError(
                f"sensitivity {sensitivity} is below the clip norm {clip_norm}: a sum of vectors "
                "clipped to C has sensitivity at least C (C for K = 1 add/remove, else 2C)"
            )
        self.clip_norm = float(clip_norm)
        self.sensitivity = float(sensitivity)
        self.relation = parse_relation(relation)
        self._shapes = [tuple(t.shape) for t in template]
        with torch.no_grad():
            self._sum = [torch.zeros_like(t) for t in template]
        self._count = 0
        self._norms: list[float] = []
        self._num_clipped = 0
        self._num_nonfinite = 0

    @classmethod
    def for_users(
        cls,
        template: Sequence[torch.Tensor],
        clip_norm: float,
        users_per_client: int,
        relation: Relation,
    ) -> "ClipAndSum":
        """An accumulator whose sensitivity follows from K and the relation."""
        return cls(template, clip_norm, user_sensitivity(clip_norm, users_per_client, relation), relation)

    def _check_shapes(self, tensors: Sequence[torch.Tensor]) -> None:
        shapes = [tuple(t.shape) for t in tensors]
        if shapes != self._shapes:
            raise ValueError(f"delta has tensor shapes {shapes}, expected {self._shapes}")

    def add(self, delta: Sequence[torch.Tensor]) -> float:
        """Clip ``delta`` to ``clip_norm``, add it, and return its pre-clip global norm."""
        delta = list(delta)
        self._check_shapes(delta)
        clipped, norm, nonfinite = _clip(delta, self.clip_norm)
        self._count += 1
        self._norms.append(norm)
        if nonfinite:
            self._num_nonfinite += 1
            return norm  # zeros: nothing to add
        if norm > self.clip_norm:
            self._num_clipped += 1
        with torch.no_grad():
            for s, c in zip(self._sum, clipped):
                s.add_(c.to(device=s.device, dtype=s.dtype))
        return norm

    def counts(self) -> "SumCounts":
        """This accumulator's counts and settings, without its sum (for a distributed reduce)."""
        return SumCounts(self.clip_norm, self.sensitivity, self.relation, self._count, tuple(self._norms),
                         self._num_clipped, self._num_nonfinite)

    def absorb(self, total: Sequence[torch.Tensor], others: Sequence["SumCounts"]) -> None:
        """Take the result of a distributed SUM reduce: ``total`` is this accumulator's sum
        plus every other part's sum (each clipped by an accumulator with the same clip
        norm, sensitivity and relation, which ``others`` must show), ``others`` their counts.

        The sensitivity stays this accumulator's: each contribution is still one clipped
        virtual client, whichever process clipped it."""
        total = list(total)
        self._check_shapes(total)
        for o in others:
            if (o.clip_norm, o.sensitivity, o.relation) != (self.clip_norm, self.sensitivity, self.relation):
                raise ValueError(
                    f"a part was clipped with clip norm {o.clip_norm}, sensitivity {o.sensitivity} ({o.relation}); "
                    f"this accumulator has {self.clip_norm}, {self.sensitivity} ({self.relation})")
        with torch.no_grad():
            for s, t in zip(self._sum, total):
                s.copy_(t.to(device=s.device, dtype=s.dtype))
        for o in others:
            self._count += o.count
            self._norms.extend(o.preclip_norms)
            self._num_clipped += o.num_clipped
            self._num_nonfinite += o.num_nonfinite

    @property
    def count(self) -> int:
        return self._count

    def result(self) -> ClippedSum:
        """The clipped sum so far (a copy) with its sensitivity and statistics."""
        return ClippedSum(
            value=[s.clone() for s in self._sum],
            sensitivity=self.sensitivity,
            relation=self.relation,
            count=self._count,
            preclip_norms=tuple(self._norms),
            num_clipped=self._num_clipped,
            num_nonfinite=self._num_nonfinite,
        )

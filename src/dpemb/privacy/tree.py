"""Online binary-tree noise for prefix sums (DP-FTRL; Kairouz et al. 2021).

Every complete node (a dyadic block of rounds) gets independent noise of std z x sensitivity
when its block completes; prefix sums are assembled from complete nodes, plainly or with
Honaker's estimator (post-processing: same privacy; docs/PRIVACY.md, "Tree aggregation").

As a ``NoiseMechanism`` (``dpemb.privacy.noise``), ``release`` returns round t's noised SUM,
the difference of consecutive noisy prefix sums. Privacy: only complete nodes' noisy sums are
released, and a user moves each leaf it takes part in by at most the sensitivity; the worst case
over its participations is ``dpemb.privacy.tree_accounting``'s S. With ``restart_every`` = R the
tree restarts every epoch, carrying the finished tree's noisy total, and each epoch's tree is
accounted separately.

The state holds the un-noised running sum of the current tree: a checkpoint of it is as
sensitive as the raw data and must be protected as such.
"""

from __future__ import annotations

from typing import Any

import torch

from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.noise import CorrelatedNoise, check_kind, standard_normal


def node_variances(levels: int, efficient: bool) -> list[float]:
    """Noise variance (in units of sigma^2) of a complete node's estimate, per level 0..levels-1."""
    v = [1.0]
    for _ in range(1, levels):
        v.append(1.0 / (1.0 + 1.0 / (2.0 * v[-1])) if efficient else 1.0)
    return v


class TreeAggregationNoise(CorrelatedNoise):
    """Noisy prefix sums of clipped per-round sums via online tree aggregation.

    ``noisy_prefix_sum`` takes round t's ``ClippedSum`` and returns the noisy sum of rounds 1..t;
    ``release`` returns their difference (call one or the other for a run, not both). z is relative
    to the clipped sum's sensitivity, which must stay the same every round. Refusals, seeding and
    ``secure`` are those of ``dpemb.privacy.noise`` (non-private: the exact prefix sums).
    """

    NAME = "tree aggregation"

    def __init__(
        self,
        noise_multiplier: float,
        *,
        efficient: bool = True,
        seed: int | None = None,
        allow_nonprivate: bool = False,
        restart_every: int | None = None,
        secure: bool = False,
    ) -> None:
        super().__init__(noise_multiplier, seed=seed, allow_nonprivate=allow_nonprivate, secure=secure)
        self.efficient = bool(efficient)
        if restart_every is not None and (isinstance(restart_every, bool) or int(restart_every) < 1):
            raise ValueError(f"restart_every must be a positive number of rounds, got {restart_every!r}")
        self.restart_every = int(restart_every) if restart_every is not None else None
        self._t = 0  # leaves in the current tree
        self._stack: list[tuple[int, list[torch.Tensor]]] = []  # (level, estimate noise / sigma)
        self._cum: list[torch.Tensor] | None = None  # raw sum of the current tree
        self._done: list[torch.Tensor] | None = None  # noisy totals of finished trees
        self._prev: list[torch.Tensor] | None = None  # the previous noisy prefix sum (released)

    def _draw(self, like: list[torch.Tensor]) -> list[torch.Tensor]:
        return standard_normal(like, self._generator, secure=self.secure)

    def noisy_prefix_sum(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """Add round t's clipped sum; return the noisy sum of rounds 1..t (new tensors)."""
        sensitivity = self.fixed_sensitivity(clipped, "noisy_prefix_sum", "tree noise")
        value = clipped.value
        with torch.no_grad():
            if self._cum is None:
                self._cum = [torch.zeros_like(v) for v in value]
            if len(self._cum) != len(value) or any(c.shape != v.shape for c, v in zip(self._cum, value)):
                raise ValueError("the clipped sum changed shape between rounds")
            self._cum = [c.to(v.device, v.dtype) + v for c, v in zip(self._cum, value)]
            self._t += 1
            self._rounds += 1
            if self.private:
                self._push_leaf(value)
            out = [c.clone() for c in self._cum]
            if self.private:
                sigma = self.std(sensitivity)
                for _, est in self._stack:
                    out = [o + sigma * e.to(o.device, o.dtype) for o, e in zip(out, est)]
            if self._done is not None:
                out = [o + d.to(o.device, o.dtype) for o, d in zip(out, self._done)]
            if self.restart_every is not None and self._t == self.restart_every:
                self._done = [o.clone() for o in out]
                self._t, self._stack, self._cum = 0, [], None
        return out

    def release(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """Round t's noised SUM: the noisy prefix sum of rounds 1..t minus that of rounds 1..t-1."""
        prefix = self.noisy_prefix_sum(clipped)
        prev = self._prev if self._prev is not None else [torch.zeros_like(p) for p in prefix]
        self._prev = [p.clone() for p in prefix]
        return [p - q.to(p.device, p.dtype) for p, q in zip(prefix, prev)]

    def _push_leaf(self, like: list[torch.Tensor]) -> None:
        self._stack.append((0, self._draw(like)))
        while len(self._stack) >= 2 and self._stack[-1][0] == self._stack[-2][0]:
            (h, right), (_, left) = self._stack.pop(), self._stack.pop()
            own = self._draw(like)  # the parent node's own noise, drawn when it completes
            if self.efficient:
                w = node_variances(h + 2, True)[h + 1]  # weight of the node's own value
                est = [w * o + (1.0 - w) * (a.to(o.device, o.dtype) + b.to(o.device, o.dtype))
                       for o, a, b in zip(own, left, right)]
            else:
                est = own
            self._stack.append((h + 1, est))

    def state_dict(self) -> dict[str, Any]:
        """Exact state (generator, tree noise, running sums, the previous released prefix).
        Sensitive: holds un-noised sums."""
        cpu = lambda ts: None if ts is None else [t.detach().cpu().clone() for t in ts]  # noqa: E731
        return {
            "kind": "tree",
            **self._randomness_state(),
            "efficient": self.efficient,
            "restart_every": self.restart_every,
            "t": self._t,
            "stack": [(h, cpu(est)) for h, est in self._stack],
            "cum": cpu(self._cum),
            "done": cpu(self._done),
            "prev_prefix": cpu(self._prev),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore exactly; refuses a state saved with another z, estimator, restart period or sampler."""
        check_kind(state, "tree")
        mine = (self.noise_multiplier, self.efficient, self.restart_every, self.secure)
        theirs = (float(state["noise_multiplier"]), bool(state["efficient"]), state["restart_every"],
                  bool(state.get("secure", False)))
        if mine != theirs:
            raise ValueError(
                f"tree state was saved with (noise multiplier, efficient, restart_every, secure) = {theirs}, "
                f"this mechanism has {mine}"
            )
        self._load_randomness_state(state)
        self._t = int(state["t"])
        self._stack = [(int(h), list(est)) for h, est in state["stack"]]
        self._cum = None if state["cum"] is None else list(state["cum"])
        self._done = None if state["done"] is None else list(state["done"])
        prev = state.get("prev_prefix")  # absent in a state saved before ``release`` kept it
        self._prev = None if prev is None else [p.clone() for p in prev]


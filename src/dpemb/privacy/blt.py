"""BLT noise: correlated Gaussian noise from a buffered linear Toeplitz strategy (DP-FTRL).

C(x) = 1 + sum_i omega_i x / (1 - theta_i x) (``strategy.blt_strategy``, chosen for the run's T
and b), scaled by 1 / its ``minsep_sensitivity`` so that the released C X + Z has sensitivity
Delta (the per-round ``ClippedSum.sensitivity``) whatever rounds the user's ceil(T / b)
participations, b apart, fall in. Round t's noised SUM is x_t plus row t of C^{-1} Z, solved
forward with one buffer per theta_i: memory d x the model, constant in T (McMahan, Xu and Zhang
2024; docs/PRIVACY.md, "BLT"). No amplification is claimed: epsilon is that of one Gaussian
mechanism with noise multiplier z (``events.training_event``). Seeding, ``secure`` and the
refusal of a bad z are those of ``dpemb.privacy.noise``. The buffers are PRIVATE.
"""

from __future__ import annotations

from typing import Any

import torch

from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.noise import CorrelatedNoise, check_kind, standard_normal


class BLTNoise(CorrelatedNoise):
    """Round t's noised SUM: clipped sum + sigma x scale x w_t, w = C^{-1} Z / sigma (a
    ``NoiseMechanism``, see ``dpemb.privacy.noise``); sigma = z x sensitivity.

    ``theta``, ``omega``: the strategy; ``scale``: its ``minsep_sensitivity`` for the run's T and
    b (C / scale has sensitivity 1, and (C / scale)^{-1} = scale x C^{-1}). The guarantee needs
    every user in at most ceil(T / b) rounds, at least b apart (``CyclicPoissonSampler``), the
    same sensitivity every round, and no more than the T rounds ``scale`` was computed for.
    """

    NAME = "BLT"

    def __init__(self, noise_multiplier: float, *, theta: tuple[float, ...], omega: tuple[float, ...],
                 scale: float, rounds: int, **randomness: Any) -> None:
        super().__init__(noise_multiplier, **randomness)
        self.theta, self.omega = tuple(map(float, theta)), tuple(map(float, omega))
        self.scale, self.planned_rounds = float(scale), int(rounds)
        self._buffers: list[list[torch.Tensor]] | None = None  # S_i = sum_{s<t} theta_i^(t-1-s) w_s

    def release(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """``clipped.value`` + sigma x scale x w_t (new tensors): round t's noised SUM."""
        sensitivity = self.fixed_sensitivity(clipped, "BLTNoise.release", "correlated noise")
        value = clipped.value
        if self._buffers and any(b.shape != v.shape for b, v in zip(self._buffers[0], value)):
            raise ValueError("the clipped sum changed shape between rounds")
        if self._rounds >= self.planned_rounds:
            raise ValueError(f"BLT noise was scaled for {self.planned_rounds} rounds (the sensitivity of their "
                             "participations); a longer run needs a new strategy: train a new run with more --rounds")
        self._rounds += 1
        if not self.private:
            return [v.clone() for v in value]
        with torch.no_grad():
            w = standard_normal(value, self._generator, secure=self.secure)
            if self._buffers is None:
                self._buffers = [[torch.zeros_like(v) for v in value] for _ in self.theta]
            for weight, buffer in zip(self.omega, self._buffers):  # w_t = z_t - sum_{s<t} c_{t-s} w_s
                w = [wi - weight * s for wi, s in zip(w, buffer)]
            for decay, buffer in zip(self.theta, self._buffers):
                buffer[:] = [decay * s + wi for s, wi in zip(buffer, w)]
            sigma = self.std(sensitivity) * self.scale
            return [v + sigma * wi for v, wi in zip(value, w)]

    def state_dict(self) -> dict[str, Any]:
        """Exact state: the generator, the d buffers, the rounds. PRIVATE (with the released
        sums it reveals the raw sums)."""
        return {
            "kind": "blt", **self._randomness_state(), "theta": list(self.theta), "omega": list(self.omega),
            "scale": self.scale, "planned_rounds": self.planned_rounds,
            "buffers": None if self._buffers is None else [[t.detach().cpu().clone() for t in b]
                                                          for b in self._buffers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore exactly; refuses a state saved with another z, strategy or plan."""
        check_kind(state, "blt")
        mine = (self.noise_multiplier, self.secure, self.theta, self.omega, self.scale, self.planned_rounds)
        theirs = (float(state["noise_multiplier"]), bool(state["secure"]), tuple(state["theta"]),
                  tuple(state["omega"]), float(state["scale"]), int(state["planned_rounds"]))
        if mine != theirs:
            raise ValueError(f"BLT noise state was saved with (noise multiplier, secure, theta, omega, scale, "
                             f"rounds) = {theirs}, this mechanism has {mine}")
        self._load_randomness_state(state)
        buffers = state["buffers"]
        self._buffers = None if buffers is None else [[t.clone() for t in b] for b in buffers]

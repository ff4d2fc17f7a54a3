"""BandMF noise: correlated Gaussian noise from a banded Toeplitz strategy (DP-FTRL).

Round t's noised SUM is x_t plus row t of C^{-1} Z, C lower-triangular Toeplitz with b bands
(``banded_sqrt_coefficients``, ``normalize``d to max column norm 1), streamed with b - 1 buffered
vectors; b = 1 is bit for bit ``GaussianNoise``. Derivation, coefficients, stability and
covariance: docs/PRIVACY.md, "BandMF" (Choquette-Choo et al. 2023).

Sensitivity holds only if a user takes part at most once in any b consecutive rounds
(b-min-separation, ``dpemb.privacy.cyclic_sampling``): z is relative to Delta (the per-round
``ClippedSum.sensitivity``) x max column norm of C, so Z has std z x Delta for the normalised C.
Seeding, ``secure`` and the refusal of a bad z are those of ``dpemb.privacy.noise``. The state
(the buffer of past w, the generator) is PRIVATE: with the released sums it reveals the raw sums.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from dpemb.privacy._checks import positive_int
from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.noise import CorrelatedNoise, check_kind, standard_normal
from dpemb.privacy.strategy import banded_sqrt_coefficients


class BandMFNoise(CorrelatedNoise):
    """Round t's noised SUM: clipped sum + sigma x w_t, w = C^{-1} Z / sigma streamed (a
    ``NoiseMechanism``, see ``dpemb.privacy.noise``).

    ``bands`` = b; the strategy is the normalised banded inverse square root
    (``banded_sqrt_coefficients``), so sigma = ``noise_multiplier`` x sensitivity and the
    accountant's noise multiplier is exactly ``noise_multiplier`` (module docstring). The
    guarantee needs every user in at most one of any b consecutive rounds
    (``CyclicPoissonSampler``) and the same sensitivity every round (refused otherwise: the
    buffered noise was scaled for the first). Memory: b - 1 noise vectors of the model's size.
    """

    NAME = "BandMF"

    def __init__(
        self,
        noise_multiplier: float,
        *,
        bands: int,
        seed: int | None = None,
        allow_nonprivate: bool = False,
        secure: bool = False,
    ) -> None:
        super().__init__(noise_multiplier, seed=seed, allow_nonprivate=allow_nonprivate, secure=secure)
        self.bands = positive_int("bands (b)", bands)
        self.coefficients = tuple(banded_sqrt_coefficients(self.bands))
        self._past: deque[list[torch.Tensor]] = deque(maxlen=self.bands - 1)  # w_{t-1}, w_{t-2}, ...

    def _next_w(self, like: list[torch.Tensor]) -> list[torch.Tensor]:
        """w_t = (Z_t / sigma - sum_{k>=1} c_k w_{t-k}) / c_0, in units of sigma; kept in the buffer."""
        c = self.coefficients
        w = standard_normal(like, self._generator, secure=self.secure)
        for k, past in enumerate(self._past, start=1):
            w = [wi - c[k] * p.to(wi.device, wi.dtype) for wi, p in zip(w, past)]
        w = [wi / c[0] for wi in w]
        if self.bands > 1:
            self._past.appendleft(w)
        return w

    def release(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """``clipped.value`` + sigma x w_t (new tensors): round t's noised SUM."""
        sensitivity = self.fixed_sensitivity(clipped, "BandMFNoise.release", "correlated noise")
        value = clipped.value
        if self._past and (len(self._past[0]) != len(value)
                           or any(p.shape != v.shape for p, v in zip(self._past[0], value))):
            raise ValueError("the clipped sum changed shape between rounds")
        self._rounds += 1
        if not self.private:
            return [v.clone() for v in value]
        sigma = self.std(sensitivity)  # the std of each entry of Z (normalised strategy)
        with torch.no_grad():
            w = self._next_w(value)
            return [v + sigma * wi for v, wi in zip(value, w)]

    def state_dict(self) -> dict[str, Any]:
        """Exact state: the generator, the last b - 1 noise vectors (units of sigma), the rounds.
        PRIVATE (with the released sums it reveals the raw sums)."""
        return {
            "kind": "bandmf",
            **self._randomness_state(),
            "bands": self.bands,
            "past": [[t.detach().cpu().clone() for t in w] for w in self._past],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore exactly; refuses a state saved with another z, number of bands or sampler."""
        check_kind(state, "bandmf")
        mine = (self.noise_multiplier, self.bands, self.secure)
        theirs = (float(state["noise_multiplier"]), int(state["bands"]), bool(state["secure"]))
        if mine != theirs:
            raise ValueError(
                f"BandMF noise state was saved with (noise multiplier, bands, secure) = {theirs}, this "
                f"mechanism has {mine}"
            )
        past = state["past"]
        if len(past) > self.bands - 1:
            raise ValueError(f"BandMF noise state holds {len(past)} past vectors, more than b - 1 = {self.bands - 1}")
        self._load_randomness_state(state)
        self._past = deque(([t.clone() for t in w] for w in past), maxlen=self.bands - 1)

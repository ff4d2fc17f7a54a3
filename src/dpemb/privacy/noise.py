"""The noise mechanism interface, the Gaussian mechanism on a clipped SUM, and THE sampler.

``NoiseMechanism``: the one interface from a round's clipped sum to the noised sum the server
may use (Gaussian, tree, BandMF); ``dpemb.privacy.plan.make_noise`` builds the accounted one.

Guarantee: ``GaussianNoise(z).add(clipped)`` returns ``clipped.value`` plus fresh independent
N(0, (z * clipped.sensitivity)^2) noise on every entry: the Gaussian mechanism with z relative
to the L2 sensitivity of the SUM (what the accountant is told), before any division by a public
constant in the caller. The scale is read from the ``ClippedSum``, never re-derived here.
A zero, negative, NaN or infinite z is an error unless ``allow_nonprivate=True`` and z = 0
(nothing added; every description says "not private").

Randomness: without a seed, the OS's secure source; with one, ``seeded`` is True (an experiment,
not a release). ``secure=True`` (never seeded): a hardening, not a discrete Gaussian (how and
its cost: docs/PRIVACY.md, "Floating-point attacks and `--secure-noise`"). Every Gaussian draw
of dpemb goes through ``standard_normal``, so ``secure`` means the same everywhere.
"""

from __future__ import annotations

import math
import numbers
import secrets
from typing import Any, Protocol

import torch

from dpemb.privacy._checks import positive_finite  # noqa: F401  (re-exported)
from dpemb.privacy.spec import check_noise_multiplier
from dpemb.privacy.clipping import ClippedSum

SECURE_DRAWS = 2


def secure_seed() -> int:
    """A 63-bit seed from the OS's cryptographically secure source."""
    return secrets.randbits(63)


SECURE_SAMPLER = (
    f"secure (a fresh generator keyed from the OS's secure source for every draw; each entry the normalised sum of "
    f"{SECURE_DRAWS} Gaussian draws against floating-point attacks, Holohan & Braghin 2021; not a "
    "discrete Gaussian)"
)


def describe_sampler(secure: bool, seeded: bool) -> str:
    """The noise-sampler sentence for reports: secure, SEEDED, or plain OS-seeded."""
    if secure:
        return f"noise sampler: {SECURE_SAMPLER}"
    if seeded:
        return "noise sampler: SEEDED (reproducible experiment, not for release; not hardened)"
    return ("noise sampler: plain (one generator keyed once from the OS's secure source; not hardened "
            "against floating-point attacks)")


def standard_normal(
    like: list[torch.Tensor], generator: torch.Generator, *, secure: bool = False
) -> list[torch.Tensor]:
    """Standard normal noise shaped like each tensor of ``like``: THE sampler of dpemb.

    Plain: one draw per entry from ``generator`` (a CPU generator, so its state is
    device-independent and resumable from a checkpoint). ``secure``: ``generator`` is unused; each
    tensor gets a fresh generator on its own device keyed by ``secure_seed``, each entry the
    normalised sum of ``SECURE_DRAWS`` draws, so nothing can be replayed from a saved state.
    """
    if not secure:
        return [gaussian_like(v, generator) for v in like]
    return [
        gaussian_like(v, torch.Generator(device=v.device).manual_seed(secure_seed()), SECURE_DRAWS)
        for v in like
    ]


def gaussian_like(value: torch.Tensor, generator: torch.Generator, draws: int = 1) -> torch.Tensor:
    """Standard normal noise with ``value``'s shape, on ``value``'s device and dtype.

    Drawn on ``generator``'s device (the CPU for the plain sampler) and moved. With
    ``draws`` > 1 the result is the sum of that many draws divided by sqrt(draws).
    """
    dtype = value.dtype if value.dtype in (torch.float32, torch.float64) else torch.float32
    noise = torch.randn(value.shape, generator=generator, dtype=dtype, device=generator.device)
    for _ in range(draws - 1):
        noise += torch.randn(value.shape, generator=generator, dtype=dtype, device=generator.device)
    if draws > 1:
        noise /= math.sqrt(draws)
    return noise.to(device=value.device, dtype=value.dtype)


class NoiseMechanism(Protocol):
    """What the training loop needs from a noise mechanism (Gaussian or tree aggregation).

    ``release(clipped)`` returns the round's noised SUM: a post-processing of the noisy
    values the mechanism draws exactly once per call, from its own generator, with std
    ``noise_multiplier`` x ``clipped.sensitivity`` (never re-derived). That released
    sequence is what the ledger accounts for (``dpemb.privacy.events``), given the spec the
    mechanism was built from (``dpemb.privacy.plan.make_noise``). ``add_to_count`` noises the
    one other released statistic (adaptive clipping's count) from the same sampler.
    ``state_dict`` is PRIVATE training state (generator states; for the tree, un-noised
    running sums): for the private checkpoint only; ``load_state_dict`` restores it exactly,
    so a resumed run draws the same noise as an uninterrupted one.
    """

    noise_multiplier: float
    secure: bool

    @property
    def seeded(self) -> bool: ...

    @property
    def private(self) -> bool: ...

    def release(self, clipped: ClippedSum) -> list[torch.Tensor]: ...

    def add_to_count(self, count: float, std: float) -> float: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class NoiseRandomness:
    """What every noise mechanism (Gaussian, tree, BandMF) shares: its noise multiplier z,
    validated by ``check_noise_multiplier`` (0 only when a non-private run is allowed), and
    its generator, keyed from the OS's secure source unless a seed is given (``seeded``:
    reproducible, never for a release); ``secure`` refuses a seed (``standard_normal``
    then keys every draw afresh)."""

    def __init__(
        self,
        noise_multiplier: float,
        *,
        seed: int | None = None,
        allow_nonprivate: bool = False,
        secure: bool = False,
    ) -> None:
        self.noise_multiplier = check_noise_multiplier(noise_multiplier, allow_nonprivate)
        if secure and seed is not None:
            raise ValueError("a secure noise mechanism cannot be seeded; drop the seed or secure=True")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.secure = bool(secure)
        self._seeded = seed is not None
        self._generator = torch.Generator().manual_seed(int(seed) if seed is not None else secure_seed())

    @property
    def seeded(self) -> bool:
        """True when the noise comes from a user-given seed (reproducible, not for release)."""
        return self._seeded

    @property
    def private(self) -> bool:
        return self.noise_multiplier > 0

    def std(self, sensitivity: float) -> float:
        """Noise standard deviation for a sum of the given L2 sensitivity (z x sensitivity)."""
        return self.noise_multiplier * float(sensitivity)

    def _randomness_state(self) -> dict[str, Any]:
        """The entries every mechanism's ``state_dict`` holds: z, the sampler, the generator
        (PRIVATE: it regenerates the noise)."""
        return {"noise_multiplier": self.noise_multiplier, "secure": self.secure, "seeded": self._seeded,
                "generator": self._generator.get_state()}

    def _load_randomness_state(self, state: dict[str, Any]) -> None:
        """Restore what ``_randomness_state`` saved (the caller has checked z and the sampler)."""
        self._seeded = bool(state["seeded"])
        self._generator.set_state(torch.as_tensor(state["generator"], dtype=torch.uint8).cpu())


class CorrelatedNoise(NoiseRandomness):
    """A mechanism whose noise is correlated across rounds (tree aggregation, BandMF): every
    round's noise is scaled for the FIRST round's sensitivity, so a later round with
    another one is refused (``fixed_sensitivity``), and so is adaptive clipping's count
    (``add_to_count``); ``rounds`` counts the rounds released."""

    NAME = "correlated"  # for messages: "adaptive clipping is not supported with NAME noise"

    def __init__(self, noise_multiplier: float, **randomness: Any) -> None:
        super().__init__(noise_multiplier, **randomness)
        self._sensitivity: float | None = None
        self._rounds = 0  # rounds released in total

    @property
    def rounds(self) -> int:
        """Rounds released so far."""
        return self._rounds

    def add_to_count(self, count: float, std: float) -> float:
        """Refused: adaptive clipping is not combined with correlated noise (``PrivacySpec``
        refuses the combination first)."""
        raise ValueError(f"adaptive clipping is not supported with {self.NAME} noise; use a fixed clip norm")

    def _randomness_state(self) -> dict[str, Any]:
        """``NoiseRandomness``'s entries, the first round's sensitivity and the rounds released."""
        return {**super()._randomness_state(), "sensitivity": self._sensitivity, "rounds": self._rounds}

    def _load_randomness_state(self, state: dict[str, Any]) -> None:
        super()._load_randomness_state(state)
        self._sensitivity = None if state["sensitivity"] is None else float(state["sensitivity"])
        self._rounds = int(state["rounds"])

    def fixed_sensitivity(self, clipped: ClippedSum, caller: str, noise: str) -> float:
        """The sensitivity of every round: ``clipped``'s on the first round, and a
        ValueError on a later round whose clipped sum has another (``noise``: what was
        scaled for the first). TypeError when ``clipped`` is not a ``ClippedSum``."""
        if not isinstance(clipped, ClippedSum):
            raise TypeError(f"{caller} takes a ClippedSum, got {type(clipped).__name__}")
        if self._sensitivity is None:
            self._sensitivity = clipped.sensitivity
        elif clipped.sensitivity != self._sensitivity:
            raise ValueError(
                f"the sensitivity changed from {self._sensitivity} to {clipped.sensitivity}: the {noise} of "
                "earlier rounds was scaled for the first one; keep the clip norm and K fixed"
            )
        return self._sensitivity


class GaussianNoise(NoiseRandomness):
    """Gaussian noise of std ``noise_multiplier * sensitivity`` on a ``ClippedSum``
    (a ``NoiseMechanism``: ``release`` is ``add``)."""

    def add(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """``clipped.value`` + N(0, (z * clipped.sensitivity)^2) on every entry (new tensors)."""
        if not isinstance(clipped, ClippedSum):
            raise TypeError(
                f"GaussianNoise.add takes a ClippedSum (a clipped sum with its sensitivity), "
                f"got {type(clipped).__name__}"
            )
        if not self.private:
            return [v.clone() for v in clipped.value]
        std = self.std(clipped.sensitivity)
        with torch.no_grad():
            noise = standard_normal(clipped.value, self._generator, secure=self.secure)
            return [v + std * n for v, n in zip(clipped.value, noise)]

    def release(self, clipped: ClippedSum) -> list[torch.Tensor]:
        """The round's noised SUM: ``add(clipped)`` (the ``NoiseMechanism`` call)."""
        return self.add(clipped)

    def add_to_count(self, count: float, std: float) -> float:
        """``count`` + N(0, std^2): ONE draw from this mechanism's sampler (secure or seeded
        as for the sum), for a released count, a SUM of per-client values such as the
        centred bits of adaptive clipping (``adaptive_clipping``). ``std`` is absolute (the
        caller derived it from the count's sensitivity). Non-private: ``count`` unchanged."""
        if not self.private:
            return float(count)
        std = positive_finite("count noise std", std)
        with torch.no_grad():
            noise = standard_normal([torch.zeros((), dtype=torch.float64)], self._generator, secure=self.secure)
        return float(count) + std * float(noise[0])

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "gaussian", **self._randomness_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the generator exactly; refuses a state with another noise multiplier (or
        of another mechanism)."""
        check_kind(state, "gaussian")
        if float(state["noise_multiplier"]) != self.noise_multiplier or bool(state["secure"]) != self.secure:
            raise ValueError(
                f"noise state was saved with noise multiplier {state['noise_multiplier']} "
                f"(secure={state['secure']}), this mechanism has {self.noise_multiplier} "
                f"(secure={self.secure})"
            )
        self._load_randomness_state(state)


def check_kind(state: dict[str, Any], kind: str) -> None:
    """Refuse a mechanism state saved by another kind of mechanism (a state without a
    kind predates the field and is checked by its other fields)."""
    if state.get("kind", kind) != kind:
        raise ValueError(f"a {state.get('kind')!r} noise state cannot be loaded into a {kind} mechanism")

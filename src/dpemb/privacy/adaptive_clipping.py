"""Adaptive clipping (Andrew et al. 2021): the clip norm tracks a quantile of the update norms.

Rule, sensitivity of the count and the split of z: docs/PRIVACY.md, "Adaptive clipping". The
noised SUM of the clients' centred bits (``GaussianNoise.add_to_count``) is divided by the
PUBLIC ``expected_reporting_clients``, never the realised count, so C_{t+1} is a function of
released values only.

Guarantee: Delta_b = 1/2 only for K = 1 under add/remove, else 1. The z given is the TOTAL:
1/z^2 = 1/z_value^2 + (Delta_b / sigma_b)^2, so the pair (noised sum, noised count) released on
one sample is ONE Gaussian mechanism with multiplier z and the ledger composes one event a round.
Refused: z >= sigma_b / Delta_b (no budget left for the update), and tree aggregation (the clip
would change under a running tree of prefix sums). Non-private runs use the UN-noised count.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dpemb.privacy._checks import positive_finite, positive_int
from dpemb.privacy.relations import Relation, parse_relation

if TYPE_CHECKING:
    from dpemb.privacy.clipping import ClippedSum

DEFAULT_LEARNING_RATE = 0.2
DEFAULT_COUNT_STDDEV_DIVISOR = 20.0  # sigma_b = expected reporting clients / 20
MIN_CLIP_NORM, MAX_CLIP_NORM = 1e-12, 1e12  # the adapted clip stays within (post-processing)


class AdaptiveClippingError(ValueError):
    """An adaptive-clipping configuration that is invalid or cannot be made private."""


@dataclass(frozen=True)
class AdaptiveClipping:
    """The knobs of adaptive clipping (all privacy knobs: hashed with the spec)."""

    target_quantile: float  # gamma in (0, 1)
    learning_rate: float = DEFAULT_LEARNING_RATE  # eta_C > 0
    count_stddev: float | None = None  # sigma_b > 0; None: expected reporting clients / 20

    def __post_init__(self) -> None:
        g = self.target_quantile
        if isinstance(g, bool) or not isinstance(g, numbers.Real) or not (0.0 < float(g) < 1.0):
            raise AdaptiveClippingError(f"target quantile must lie strictly between 0 and 1, got {g!r}")
        object.__setattr__(self, "target_quantile", float(g))
        try:
            object.__setattr__(self, "learning_rate", positive_finite("clip learning rate", self.learning_rate))
            if self.count_stddev is not None:
                object.__setattr__(self, "count_stddev", positive_finite("count noise std", self.count_stddev))
        except ValueError as e:
            raise AdaptiveClippingError(str(e)) from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def expected_reporting_clients(clients_per_round: int, users_per_client: int, population: int,
                               sampling: str) -> float:
    """The PUBLIC expected number of non-empty virtual clients in a round (the count's normaliser).

    Formulas: docs/PRIVACY.md, "Adaptive clipping" (an epoch's short last block is ignored).
    Dividing by M instead would bias b_hat low, and for a high target quantile the clip would
    grow without bound.
    """
    m = positive_int("clients per round (M)", clients_per_round)
    k = positive_int("users per client (K)", users_per_client)
    n = positive_int("population", population)
    if k == 1:
        return float(m)
    if sampling == "poisson":
        return m * -math.expm1(n * math.log1p(-k / n)) if k < n else float(m)
    return m * -math.expm1(m * k * math.log1p(-1.0 / m)) if m > 1 else 1.0


def count_sensitivity(users_per_client: int, relation: Relation | str) -> float:
    """Delta_b of the centred count: 1/2 for K = 1 under add/remove, else 1 (module docstring)."""
    k = positive_int("users per client (K)", users_per_client)
    return 0.5 if k == 1 and parse_relation(relation) is Relation.ADD_REMOVE else 1.0


def split_noise_multiplier(total: float, count_stddev: float, count_sens: float) -> tuple[float, float]:
    """(z_value, z_count = sigma_b / Delta_b) with 1/total^2 = 1/z_value^2 + 1/z_count^2.

    AdaptiveClippingError when total >= sigma_b / Delta_b (z_value would be infinite).
    """
    z = positive_finite("noise multiplier", total)
    z_count = positive_finite("count noise std", count_stddev) / positive_finite("count sensitivity", count_sens)
    rest = z**-2 - z_count**-2
    if not rest > 0:
        raise AdaptiveClippingError(
            f"adaptive clipping: the noise multiplier z = {z:g} is not below sigma_b / Delta_b = "
            f"{count_stddev:g} / {count_sens:g} = {z_count:g}, so the noised count alone would spend the whole "
            f"privacy budget and the update would need infinite noise. Give the count more noise: "
            f"--clip-count-stddev (count_stddev) above {z * count_sens:g} (a few times more leaves most of "
            "the budget to the update), or use a smaller noise multiplier (a larger --target-epsilon)"
        )
    return rest**-0.5, z_count  # finite and > 0: 0 < rest < 1/z^2, both finite


class _CountNoise(Protocol):
    def add_to_count(self, count: float, std: float) -> float: ...


def release_count(clipped: ClippedSum, noise: _CountNoise, count_stddev: float) -> float:
    """The round's released statistic: sum_i (b_i - 1/2) + N(0, sigma_b^2), drawn once.

    ``clipped`` is the round's ``ClippedSum``; its un-noised count is PRIVATE and only
    this noised value may leave the round. The noise goes on the SUM, before the caller
    divides by the public expected number of clients.
    """
    return noise.add_to_count(clipped.num_unclipped - clipped.count / 2.0, count_stddev)


class AdaptiveClipState:
    """The current clip norm and the rounds adapted so far (private checkpoint state)."""

    def __init__(self, config: AdaptiveClipping, initial_clip_norm: float) -> None:
        if not isinstance(config, AdaptiveClipping):
            raise TypeError(f"AdaptiveClipState needs an AdaptiveClipping, got {type(config).__name__}")
        self.config = config
        self.initial_clip_norm = positive_finite("initial clip norm", initial_clip_norm)
        self.clip_norm = self.initial_clip_norm
        self.round = 0

    def update(self, noised_count: float, expected_clients: float) -> float:
        """Move C from the noised CENTRED count (``release_count``); returns the new C.

        b_hat = noised_count / expected_clients + 1/2 (a public normaliser), then
        C <- C exp(-eta_C (b_hat - gamma)), kept within [MIN_CLIP_NORM, MAX_CLIP_NORM].
        """
        n = positive_finite("expected clients", expected_clients)
        count = float(noised_count)
        if not math.isfinite(count):
            raise ValueError(f"noised count must be finite, got {noised_count!r}")
        b_hat = count / n + 0.5
        step = -self.config.learning_rate * (b_hat - self.config.target_quantile)
        self.clip_norm = min(max(self.clip_norm * math.exp(step), MIN_CLIP_NORM), MAX_CLIP_NORM)
        self.round += 1
        return self.clip_norm

    def state_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "initial_clip_norm": self.initial_clip_norm,
                "clip_norm": self.clip_norm, "round": self.round}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore exactly; refuses a state saved under other knobs or another initial clip."""
        if state.get("config") != self.config.to_dict() or \
                float(state.get("initial_clip_norm", math.nan)) != self.initial_clip_norm:
            raise ValueError(
                f"adaptive clipping state was saved with {state.get('config')} from clip norm "
                f"{state.get('initial_clip_norm')}, this run has {self.config.to_dict()} from {self.initial_clip_norm}"
            )
        self.clip_norm = positive_finite("saved clip norm", state["clip_norm"])
        self.round = int(state["round"])

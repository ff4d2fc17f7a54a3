"""``PrivacySpec``: every number that changes the privacy guarantee, validated, hashable.

A spec describes one training configuration (N, M, K, z relative to the sensitivity, C, T, delta,
sampling, mechanism, relation, bands, secure sampler, adaptive clipping). It is hashed into
checkpoints (``fingerprint``), so a resumed run cannot silently change its guarantee.

The consistent (mechanism, sampling, relation) combinations are those of docs/PRIVACY.md,
"Sampling, grouping and neighbouring relations"; anything else, and ``bands`` != 1 outside
bandmf and blt, is a ValueError. delta follows ``dpemb.privacy.delta`` (default 1 / (10 N)).

Adaptive clipping (docs/PRIVACY.md, "Adaptive clipping"): ``clip_norm`` is the INITIAL clip,
``noise_multiplier`` the TOTAL z every epsilon is computed from, ``value_noise_multiplier`` the
update's share; a z that leaves no budget for the update is refused. Its default count noise
std follows from M, K, N and the sampling, so it is re-derived after ``dataclasses.replace``.

``sampling`` and ``relation`` default to the mechanism's first consistent choice and are stored
resolved; to change the sampling or mechanism with ``dataclasses.replace``, pass
``sampling=None`` and ``relation=None`` too so they are resolved again.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any

from dpemb.privacy._checks import positive_finite, positive_int
from dpemb.privacy.adaptive_clipping import (
    DEFAULT_COUNT_STDDEV_DIVISOR,
    AdaptiveClipping,
    count_sensitivity,
    expected_reporting_clients,
    split_noise_multiplier,
)
from dpemb.privacy.delta import check_delta, default_delta
from dpemb.privacy.relations import Relation, parse_relation, user_sensitivity

MECHANISMS = ("gaussian", "tree", "bandmf", "blt")
SAMPLINGS = ("poisson", "fixed", "epoch", "cyclic-poisson")
UNITS = ("user", "example")
#: the accountants epsilon is computed with (dp_accounting's RDP and PLD), in the order
#: reports list them: the one definition (importing it loads neither torch nor dp_accounting)
ACCOUNTANTS = ("rdp", "pld")

_ALLOWED: dict[tuple[str, str], tuple[Relation, ...]] = {
    ("gaussian", "poisson"): (Relation.ADD_REMOVE, Relation.REPLACE_SPECIAL),
    ("gaussian", "fixed"): (Relation.REPLACE_ONE,),
    ("gaussian", "epoch"): (Relation.REPLACE_SPECIAL,),
    ("tree", "epoch"): (Relation.REPLACE_SPECIAL,),
    # the cyclic groups are drawn per user independently from the run key (cyclic_sampling's
    # "independent" assignment, the one make_sampler builds): valid under both
    ("bandmf", "cyclic-poisson"): (Relation.ADD_REMOVE, Relation.REPLACE_SPECIAL),
    ("blt", "cyclic-poisson"): (Relation.ADD_REMOVE, Relation.REPLACE_SPECIAL),
}
#: the correlated-noise mechanisms whose b sets the cyclic groups (BandMF: also its bands)
CYCLIC = ("bandmf", "blt")
#: the sampling a mechanism gets when none is given (the first one it is accounted with)
DEFAULT_SAMPLING = {"gaussian": "poisson", "tree": "epoch", "bandmf": "cyclic-poisson", "blt": "cyclic-poisson"}
#: what each mechanism's sampling must be, for refusals
_SAMPLING_NEEDED = {
    "gaussian": "poisson, fixed or epoch sampling",
    "tree": "sampling='epoch' (each user at most once per epoch of ceil(N / (M*K)) rounds)",
    "bandmf": ("sampling='cyclic-poisson' (b groups of users, round t samples group t mod b: each user at most "
               "once in any b consecutive rounds)"),
    "blt": "sampling='cyclic-poisson' (b groups of users: each user at most once in any b consecutive rounds)",
}


def check_clip_norm(clip_norm: object) -> float:
    """The clip norm C at the boundary (``PrivacySpec``): a finite number > 0, or a
    ValueError naming the fix. Validated here once; a ``ClipAndSum`` checks the clip
    norm it is built with, and its per-client clipping trusts that."""
    try:
        return positive_finite("clip norm", clip_norm)
    except ValueError as e:
        raise ValueError(
            f"{e}: the clip norm C bounds every virtual client's update (L2 norm) and sets the noise "
            "(z x sensitivity, a multiple of C); give a finite C > 0: --clip-norm C on the command line, "
            "PrivacySpec(clip_norm=C) in the library"
        ) from None


#: The range of a private noise multiplier z (relative to the sensitivity): outside it
#: dp_accounting's arithmetic breaks down (measured; docs/PRIVACY.md, "The guarantee").
MIN_NOISE_MULTIPLIER = 1e-6
MAX_NOISE_MULTIPLIER = 1e8


def check_noise_multiplier(noise_multiplier: float, allow_nonprivate: bool) -> float:
    """Validate z: in [``MIN_NOISE_MULTIPLIER``, ``MAX_NOISE_MULTIPLIER``], or exactly 0 when
    a non-private run is explicitly allowed. The one validator of z: ``PrivacySpec``, the
    transfer budget and every noise mechanism call it."""
    if isinstance(noise_multiplier, bool) or not isinstance(noise_multiplier, numbers.Real):
        raise ValueError(f"noise multiplier must be a number, got {noise_multiplier!r}")
    z = float(noise_multiplier)
    if math.isfinite(z) and z > 0:
        if z < MIN_NOISE_MULTIPLIER:
            raise ValueError(
                f"noise multiplier {noise_multiplier!r} gives no usable epsilon: below "
                f"{MIN_NOISE_MULTIPLIER:g} epsilon exceeds 1e11 even for one release, and near 1e-150 the "
                "accountant's arithmetic gives inf, a division by zero or a false 0. For a run without noise "
                "use --non-private (nonprivate=True in the library); otherwise give a noise multiplier >= "
                f"{MIN_NOISE_MULTIPLIER:g} (or a target epsilon to choose it)"
            )
        if z > MAX_NOISE_MULTIPLIER:
            raise ValueError(
                f"noise multiplier {noise_multiplier!r} exceeds {MAX_NOISE_MULTIPLIER:g}: the accountant's "
                "arithmetic fails beyond it (fixed-size sampling from about 3e8, every accountant near 1e154), and "
                "such noise "
                f"swamps any update; give a noise multiplier <= {MAX_NOISE_MULTIPLIER:g}"
            )
        return z
    if allow_nonprivate and z == 0:
        return 0.0
    if allow_nonprivate:
        raise ValueError(
            f"noise multiplier {noise_multiplier!r} is invalid: a non-private run uses exactly 0"
        )
    raise ValueError(
        f"noise multiplier must be positive and finite, got {noise_multiplier!r}; a run without noise is "
        "not private and must be requested explicitly: `dpemb train --non-private` (and no "
        "--noise-multiplier / --target-epsilon) on the command line, PrivacySpec(nonprivate=True, "
        "noise_multiplier=0) or allow_nonprivate=True in the library"
    )


class PrivacySpecError(ValueError):
    """An invalid or inconsistent privacy configuration."""


@dataclass(frozen=True)
class PrivacySpec:
    """Everything that changes the guarantee of a user-level DP training run."""

    population: int
    clients_per_round: int
    users_per_client: int = 1
    noise_multiplier: float = 1.0
    clip_norm: float = 1.0
    rounds: int = 1
    delta: float | None = None  # None -> 1 / (10 population) (``delta.default_delta``)
    sampling: str | None = None  # None -> "poisson" (gaussian), "epoch" (tree), "cyclic-poisson" (bandmf, blt)
    mechanism: str = "gaussian"  # "gaussian" | "tree" | "bandmf" | "blt"
    relation: Relation | None = None  # None -> the default for (mechanism, sampling)
    unit: str = "user"  # "user" | "example"
    nonprivate: bool = False
    tree_restarts: bool = False  # tree only: restart the tree every epoch
    allow_large_delta: bool = False  # accept a given delta >= 1/population (forced; see delta.py)
    secure_noise: bool = False  # hardened noise sampler (noise.py); changes no epsilon
    adaptive_clipping: AdaptiveClipping | None = None  # None: fixed clip (adaptive_clipping.py)
    bands: int = 1  # bandmf, blt: b, the groups of cyclic Poisson sampling (bandmf: also its bands)

    def __post_init__(self) -> None:
        try:
            self._validate()
        except PrivacySpecError:
            raise
        except ValueError as e:
            raise PrivacySpecError(str(e)) from None

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _validate(self) -> None:
        self._set("population", positive_int("population (number of users)", self.population))
        self._set("clients_per_round", positive_int("clients per round (M)", self.clients_per_round))
        self._set("users_per_client", positive_int("users per client (K)", self.users_per_client))
        self._set("rounds", positive_int("rounds", self.rounds))
        self._set("clip_norm", check_clip_norm(self.clip_norm))  # THE check of C (clipping trusts it)
        self._set("bands", positive_int("bands (b)", self.bands))
        per_round = self.clients_per_round * self.users_per_client
        if per_round > self.population:
            raise PrivacySpecError(
                f"sampling rate M*K/N = {self.clients_per_round} x {self.users_per_client} / "
                f"{self.population} = {per_round / self.population:.4g} exceeds 1: fewer clients "
                "per round or users per client, or a larger population"
            )
        if not isinstance(self.nonprivate, bool):
            raise PrivacySpecError(f"nonprivate must be True or False, got {self.nonprivate!r}")
        try:  # THE validator of z (check_noise_multiplier above), also run by every noise mechanism
            z = check_noise_multiplier(self.noise_multiplier, self.nonprivate)
        except ValueError as e:
            raise PrivacySpecError(str(e)) from None
        if self.nonprivate and z != 0.0:
            raise PrivacySpecError(
                f"a non-private spec has noise multiplier 0, got {self.noise_multiplier!r}; drop nonprivate to add noise"
            )
        self._set("noise_multiplier", z)
        if self.mechanism not in MECHANISMS:
            raise PrivacySpecError(f"mechanism must be one of {', '.join(MECHANISMS)}, got {self.mechanism!r}")
        if self.bands != 1 and self.mechanism not in CYCLIC:
            raise PrivacySpecError(
                f"bands = {self.bands} applies to mechanism='bandmf' or 'blt' only (b, their participation "
                f"separation); use --mechanism bandmf or blt, or drop bands (--bands) for {self.mechanism} noise"
            )
        if self.mechanism in CYCLIC and self.bands * per_round > self.population:
            raise PrivacySpecError(
                f"cyclic Poisson sampling over b = {self.bands} groups needs b*M*K = {self.bands} x {per_round} = "
                f"{self.bands * per_round} <= N = {self.population} users (the rate within a group, b*M*K/N, "
                "would exceed 1); use fewer bands, fewer clients per round or users per client, or a larger "
                "population"
            )
        if self.unit not in UNITS:
            raise PrivacySpecError(f"unit must be one of {', '.join(UNITS)}, got {self.unit!r}")
        for flag in ("allow_large_delta", "secure_noise"):
            if not isinstance(getattr(self, flag), bool):
                raise PrivacySpecError(f"{flag} must be True or False, got {getattr(self, flag)!r}")
        if self.delta is not None:
            self._set("delta", check_delta(self.delta, self.population, force=self.allow_large_delta,
                                           unit=self.unit))
        if self.secure_noise and self.nonprivate:
            raise PrivacySpecError("a non-private spec adds no noise: secure_noise does not apply")
        sampling = self.sampling if self.sampling is not None else DEFAULT_SAMPLING[self.mechanism]
        if sampling not in SAMPLINGS:
            raise PrivacySpecError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
        allowed = _ALLOWED.get((self.mechanism, sampling))
        if allowed is None:
            raise PrivacySpecError(
                f"mechanism {self.mechanism!r} cannot be accounted with {sampling!r} sampling: {self.mechanism} "
                f"noise needs {_SAMPLING_NEEDED[self.mechanism]}"
            )
        self._set("sampling", sampling)
        relation = allowed[0] if self.relation is None else parse_relation(self.relation)
        if relation not in allowed:
            raise PrivacySpecError(
                f"{self.mechanism} noise with {sampling} sampling is accounted under "
                f"{' or '.join(r.value for r in allowed)}, not {relation.value}"
            )
        self._set("relation", relation)
        if not isinstance(self.tree_restarts, bool):
            raise PrivacySpecError(f"tree_restarts must be True or False, got {self.tree_restarts!r}")
        if self.tree_restarts and self.mechanism != "tree":
            raise PrivacySpecError("tree_restarts applies only to mechanism='tree'")
        adaptive = self.adaptive_clipping
        if isinstance(adaptive, dict):  # from to_dict() / a checkpoint
            adaptive = AdaptiveClipping(**adaptive)
            self._set("adaptive_clipping", adaptive)
        if adaptive is not None:
            if not isinstance(adaptive, AdaptiveClipping):
                raise PrivacySpecError(f"adaptive_clipping must be an AdaptiveClipping or None, got {adaptive!r}")
            if self.mechanism == "tree":
                raise PrivacySpecError(
                    "adaptive clipping cannot be combined with tree aggregation (dp-ftrl-fedemb), as in TFF: "
                    "the tree's prefix sums assume one fixed clip norm; use a fixed --clip-norm, or dp-fedemb"
                )
            if self.mechanism in CYCLIC:
                raise PrivacySpecError(
                    f"adaptive clipping is not supported with {self.mechanism} noise: its correlated noise is "
                    "scaled for one fixed sensitivity; use a fixed --clip-norm"
                )
            if not self.nonprivate:
                split_noise_multiplier(self.noise_multiplier, self.count_stddev, self.count_sensitivity)

    # ------------------------------------------------------------------ derived values
    @property
    def sampling_rate(self) -> float:
        """q = M*K/N: the probability that a given user takes part in a round. Cyclic Poisson
        (bandmf, blt): q = b*M*K/N, the probability that a user takes part in a round of its group
        (the rate the accountant uses; BLT claims no amplification from it); a round still samples
        M*K users in expectation."""
        return self.bands * self.clients_per_round * self.users_per_client / self.population

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of the per-round clipped sum (``relations.user_sensitivity``)."""
        return user_sensitivity(self.clip_norm, self.users_per_client, self.relation)

    @property
    def resolved_delta(self) -> float:
        """delta, or ``default_delta(population)`` = 1 / (10 population) when not given."""
        return self.delta if self.delta is not None else default_delta(self.population)

    @property
    def rounds_per_epoch(self) -> int:
        """R = ceil(N / (M*K)): rounds in which every user takes part once (epoch sampling)."""
        return math.ceil(self.population / (self.clients_per_round * self.users_per_client))

    @property
    def expected_reporting_clients(self) -> float:
        """The public expected number of non-empty virtual clients per round."""
        return expected_reporting_clients(self.clients_per_round, self.users_per_client, self.population,
                                          self.sampling)

    @property
    def count_sensitivity(self) -> float:
        """Delta_b of adaptive clipping's centred count (1/2 for K = 1 add/remove, else 1)."""
        return count_sensitivity(self.users_per_client, self.relation)

    @property
    def count_stddev(self) -> float | None:
        """sigma_b, adaptive clipping's count noise (given, or expected clients / 20); None without."""
        if self.adaptive_clipping is None:
            return None
        if self.adaptive_clipping.count_stddev is not None:
            return self.adaptive_clipping.count_stddev
        return self.expected_reporting_clients / DEFAULT_COUNT_STDDEV_DIVISOR

    @property
    def value_noise_multiplier(self) -> float:
        """The update noise's multiplier: z, or z_value of the split with adaptive clipping."""
        if self.adaptive_clipping is None or self.nonprivate:
            return self.noise_multiplier
        return split_noise_multiplier(self.noise_multiplier, self.count_stddev, self.count_sensitivity)[0]

    @property
    def noise_std(self) -> float:
        """Noise standard deviation on the clipped sum: z (z_value if adaptive) x sensitivity (at C0)."""
        return self.value_noise_multiplier * self.sensitivity

    @property
    def noise_on_average(self) -> float:
        """Noise std per coordinate of the averaged update: z x sensitivity / M."""
        return self.noise_std / self.clients_per_round

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["relation"] = self.relation.value if self.relation is not None else None
        if self.adaptive_clipping is None:
            del d["adaptive_clipping"]  # fixed-clip specs hash as before adaptive clipping existed
        if self.mechanism not in CYCLIC:
            del d["bands"]  # always 1 there: other specs hash as before BandMF existed
        return d

    def fingerprint(self) -> str:
        """Stable hash of every field (resolved), for checkpoints."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

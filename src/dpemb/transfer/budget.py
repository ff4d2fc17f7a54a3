"""The privacy budget of a transfer run: noise calibration, the release ledger, epsilon.

A DP method is a fixed, public number R of Gaussian releases, all at one noise multiplier z
(noise std = z x that release's own L2 sensitivity): exactly the R-fold composition of the
Gaussian mechanism (full batch, no sampling), accounted by ``dpemb.privacy``.
Unit: one example or one user (``dpemb.transfer.prepare``), add/remove one unit; delta
defaults to 1 / (10 N) for N units, N is treated as public, and a given delta >= 1/N is
refused unless forced (``dpemb.privacy.delta``). R per method and the budget split:
docs/TRANSFER.md, "What every DP method shares" and the methods table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Sequence

from torch import Tensor

from dpemb.privacy import (
    calibrate_gaussian_releases,
    compute_epsilon,
    describe_epsilon,
    gaussian_releases_event,
)
from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.delta import delta_warning, resolve_delta
from dpemb.privacy.noise import GaussianNoise, describe_sampler
from dpemb.privacy.relations import Relation
from dpemb.privacy.spec import ACCOUNTANTS, check_noise_multiplier
from dpemb.privacy.statements import NONPRIVATE_STATEMENT

RELATION = Relation.ADD_REMOVE
#: below this noise multiplier the PLD accountant is slow (epsilon > 200 anyway); use RDP
PLD_MIN_NOISE = 0.1


class PrivacyConfigError(ValueError):
    """An inconsistent privacy setting (e.g. no noise without the non-private flag)."""


@dataclass(frozen=True)
class PrivacyRequest:
    """What the caller asks for: a target epsilon, a noise multiplier, or explicitly no privacy.

    Exactly one of ``epsilon`` / ``noise_multiplier`` must be given unless
    ``nonprivate`` is set (then neither may be given). A zero, infinite or NaN noise
    multiplier or epsilon is an error: a run without noise must say so with
    ``nonprivate=True``. ``delta`` None means the default 1 / (10 N), resolved by
    ``plan_noise`` once N (the number of units) is known; ``allow_large_delta`` accepts a
    given delta >= 1/N.
    """

    epsilon: float | None = None
    delta: float | None = None
    noise_multiplier: float | None = None
    nonprivate: bool = False
    accountant: str = "pld"
    unit: str = "example"
    allow_large_delta: bool = False

    def __post_init__(self) -> None:
        if self.accountant not in ACCOUNTANTS:
            raise PrivacyConfigError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {self.accountant!r}")
        if self.unit not in ("example", "user"):
            raise PrivacyConfigError(f"unit must be 'example' or 'user', got {self.unit!r}")
        if self.delta is not None and not (0 < self.delta < 1):
            raise PrivacyConfigError(f"delta must lie in (0, 1), got {self.delta}")
        if self.nonprivate:
            if self.epsilon is not None or self.noise_multiplier is not None:
                raise PrivacyConfigError("a non-private run takes neither an epsilon nor a noise multiplier")
            return
        if (self.epsilon is None) == (self.noise_multiplier is None):
            raise PrivacyConfigError(
                "give exactly one of epsilon or noise_multiplier (or ask for a non-private run explicitly)"
            )
        for what, value in (("epsilon", self.epsilon), ("noise multiplier", self.noise_multiplier)):
            if value is not None and not (0 < value < math.inf):
                raise PrivacyConfigError(f"{what} must be positive and finite, got {value}; for a "
                                         "run without noise ask for it explicitly (non-private)")
        if self.noise_multiplier is not None:
            try:  # the range in which the accountant is exact (privacy.spec)
                check_noise_multiplier(self.noise_multiplier, allow_nonprivate=False)
            except ValueError as e:
                raise PrivacyConfigError(str(e)) from None


@dataclass(frozen=True)
class NoisePlan:
    """The resolved budget: R releases, each with noise multiplier z; epsilon of the whole run."""

    num_releases: int
    noise_multiplier: float  # 0.0 for a non-private run
    epsilon: float  # math.inf for a non-private run
    delta: float
    accountant: str
    unit: str
    nonprivate: bool
    relation: str = RELATION.value
    warnings: tuple[str, ...] = ()  # e.g. a delta above the default (``delta.delta_warning``)

    def __post_init__(self) -> None:
        if self.nonprivate:
            if self.noise_multiplier != 0.0 or not math.isinf(self.epsilon):
                raise PrivacyConfigError("a non-private plan has noise multiplier 0 and epsilon inf")
        elif not (0 < self.noise_multiplier < math.inf and 0 < self.epsilon < math.inf):
            raise PrivacyConfigError(
                f"a private plan needs a positive finite noise multiplier and epsilon, got "
                f"{self.noise_multiplier} and {self.epsilon}"
            )

    def sentence(self) -> str:
        """The epsilon statement (accountant, delta, unit, relation), via the privacy layer."""
        if self.nonprivate:
            return f"{NONPRIVATE_STATEMENT}; no privacy guarantee (epsilon = inf)"
        return describe_epsilon(
            self.epsilon, accountant=self.accountant, delta=self.delta, unit=self.unit, relation=RELATION
        )

    def split_sentence(self, releases: Sequence["ReleaseRecord"] = ()) -> str:
        """How the budget is divided between the releases."""
        if self.nonprivate:
            return f"budget split: none (non-private run, {self.num_releases} noiseless releases)"
        groups: dict[str, list[ReleaseRecord]] = {}
        for r in releases:
            groups.setdefault(r.kind, []).append(r)
        parts = [
            f"{kind}{f' x{len(rs)}' if len(rs) > 1 else ''} (sensitivity {rs[0].sensitivity:.4g}, "
            f"noise std {rs[0].noise_std:.4g})"
            for kind, rs in groups.items()
        ]
        return (
            f"budget split: equal over {self.num_releases} Gaussian releases, each with noise "
            f"multiplier {self.noise_multiplier:.4g} (1/{self.num_releases} of the budget each)"
            + (": " + "; ".join(parts) if parts else "")
        )


def plan_noise(spec: PrivacyRequest, num_releases: int, num_units: int | None = None) -> NoisePlan:
    """Calibrate (or take) the noise multiplier for ``num_releases`` equal Gaussian releases.

    ``num_units`` (N, the training set's units, treated as public) resolves a default
    delta to 1 / (10 N) and refuses a given delta >= 1/N unless ``spec.allow_large_delta``.
    """
    if not isinstance(num_releases, int) or num_releases < 1:
        raise PrivacyConfigError(f"the number of releases must be a positive integer, got {num_releases!r}")
    if num_units is not None:
        try:
            delta = resolve_delta(spec.delta, num_units, force=spec.allow_large_delta, unit=spec.unit)
        except ValueError as e:
            raise PrivacyConfigError(str(e)) from None
        spec = replace(spec, delta=delta)
    elif spec.delta is None:
        raise PrivacyConfigError("the default delta 1/(10 N) needs N: pass num_units (the training units)")
    if spec.nonprivate:
        return NoisePlan(num_releases, 0.0, math.inf, spec.delta, spec.accountant, spec.unit, True)
    if spec.noise_multiplier is not None:
        z = float(spec.noise_multiplier)
        if spec.accountant == "pld" and z < PLD_MIN_NOISE:
            raise PrivacyConfigError(
                f"noise multiplier {z:g} is below {PLD_MIN_NOISE}: epsilon is in the hundreds or more and "
                "the PLD accountant's cost grows like 1/z^2; use the RDP accountant for such runs"
            )
    else:
        z = float(calibrate_gaussian_releases(spec.epsilon, spec.delta, num_releases, accountant=spec.accountant))
    eps = float(compute_epsilon(gaussian_releases_event(z, num_releases), spec.delta, accountant=spec.accountant,
                                relation=RELATION))
    about_delta = delta_warning(spec.delta, num_units, spec.unit) if num_units is not None else None
    return NoisePlan(num_releases, z, eps, spec.delta, spec.accountant, spec.unit, False,
                     warnings=(about_delta,) if about_delta else ())


@dataclass(frozen=True)
class ReleaseRecord:
    """One release: what, its L2 sensitivity, the noise std added to every entry."""

    name: str
    kind: str
    sensitivity: float
    noise_multiplier: float
    noise_std: float
    entries: int


@dataclass
class ReleaseMechanism:
    """The only path by which a transfer method sees privatised statistics.

    ``release(name, stat)`` takes a ``ClippedSum`` (``dpemb.transfer.statistics``: the exact
    sum and its L2 sensitivity under add/remove of one unit) and adds independent Gaussian
    noise of std ``z * stat.sensitivity`` to every entry (the privacy layer's
    ``GaussianNoise``, seeded from the OS's secure source unless ``seed``): one Gaussian
    mechanism at multiplier z, as ``plan`` accounted. More releases than planned raise;
    ``check_complete`` refuses fewer. ``keep_raw`` keeps the noisy statistics as released
    (audits, tests; costs memory); ``secure`` draws with the floating-point-hardened sampler
    (``noise.standard_normal``, not seedable).
    """

    plan: NoisePlan
    seed: int | None = None
    keep_raw: bool = False
    secure: bool = False
    records: list[ReleaseRecord] = field(default_factory=list)
    raw: dict[str, list[Tensor]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._noise = GaussianNoise(
            self.plan.noise_multiplier, seed=self.seed, allow_nonprivate=self.plan.nonprivate,
            secure=self.secure,
        )

    @property
    def seeded(self) -> bool:
        return bool(self._noise.seeded)

    @property
    def sampler_sentence(self) -> str:
        """Which noise sampler drew the noise (secure, SEEDED or plain)."""
        return describe_sampler(self._noise.secure, self.seeded)

    @property
    def remaining(self) -> int:
        return self.plan.num_releases - len(self.records)

    def release(self, name: str, stat: ClippedSum, *, kind: str | None = None) -> Tensor:
        """``stat``'s (single) tensor plus N(0, (z * stat.sensitivity)^2) on every entry."""
        if not isinstance(stat, ClippedSum):
            raise TypeError(f"release {name!r}: expected a ClippedSum (value + sensitivity), got {type(stat).__name__}")
        if stat.relation != RELATION:
            raise PrivacyConfigError(
                f"release {name!r}: sensitivity stated under {stat.relation.value}, the budget under {RELATION.value}"
            )
        if len(stat.value) != 1:
            raise ValueError(f"release {name!r}: expected one tensor, got {len(stat.value)}")
        if self.remaining <= 0:
            raise PrivacyConfigError(
                f"release {name!r} exceeds the {self.plan.num_releases} releases the budget was "
                "calibrated for"
            )
        (noisy,) = self._noise.add(stat)
        z = self.plan.noise_multiplier
        self.records.append(ReleaseRecord(
            name=name, kind=kind or name, sensitivity=stat.sensitivity, noise_multiplier=z,
            noise_std=self._noise.std(stat.sensitivity), entries=int(noisy.numel()),
        ))
        if self.keep_raw:
            self.raw[name] = [noisy.clone()]
        return noisy

    def check_complete(self) -> None:
        """The method made exactly the planned releases (fewer would overstate epsilon)."""
        if self.remaining:
            raise PrivacyConfigError(
                f"{len(self.records)} of {self.plan.num_releases} planned releases were made; "
                "the reported epsilon would not match"
            )

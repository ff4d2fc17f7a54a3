"""dp_accounting events for each training configuration, and epsilon from them.

All accounting maths is Google's dp_accounting (RDP and PLD accountants); this
module only says which mechanism a configuration is:

- gaussian + poisson: T x PoissonSampledDpEvent(q, GaussianDpEvent(z)), add/remove
  (or replace-special);
- gaussian + fixed: T x SampledWithoutReplacementDpEvent(N, M*K, Gaussian(z)) under
  replace-one (RDP only: dp_accounting's PLD has no such event);
- gaussian + epoch: GaussianDpEvent(z) once per epoch touched, ceil(T / R) times
  (every user is in exactly one round per epoch; no amplification is claimed);
- tree + epoch (DP-FTRL): rho-zCDP with rho = S / (2 z^2), S from
  ``tree_accounting`` (``ZCDpEvent``), or with restarts one
  ``SingleEpochTreeAggregationDpEvent`` per epoch (RDP, replace-special). For PLD
  the same release is the Gaussian mechanism with noise multiplier z / sqrt(S)
  (``GaussianDpEvent``), whose privacy loss PLD computes tightly.

z is always relative to the sensitivity of the clipped sum (``PrivacySpec.sensitivity``).
``EpsilonCurve`` gives epsilon after t rounds quickly for every t (the ledger calls it
every round): for RDP the curve is (per-unit RDP) x (units after t rounds), where a
unit is one round (poisson, fixed), one epoch's Gaussian (epoch) or one unit of S (tree).
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from dpemb.privacy.dependency import accountant_missing

try:
    import dp_accounting
    from dp_accounting import dp_event as dpe
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.rdp import rdp_privacy_accountant
except ImportError as e:  # one line naming the fix (dependency.py), not a traceback
    raise accountant_missing(e) from None

from dpemb.privacy._checks import check_noise_multiplier, positive_int
from dpemb.privacy.relations import Relation, to_dp_accounting
from dpemb.privacy.spec import PrivacySpec
from dpemb.privacy.tree_accounting import TreeParticipation

# dp_accounting's RDP logs a warning for every fractional order whose series does not
# converge and then EXCLUDES that order (a safe choice: fewer orders can only raise
# epsilon). The warnings flood training logs; keep absl's errors only.
try:
    from absl import logging as _absl_logging

    _absl_logging.set_verbosity(_absl_logging.ERROR)
except ImportError:  # pragma: no cover - absl comes with dp_accounting
    pass

ACCOUNTANTS = ("rdp", "pld")
PLD_DISCRETIZATION = 1e-3  # PLD value discretisation (pessimistic: epsilon stays an upper bound)
RDP_ORDERS = tuple(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


class UnsupportedAccountantError(ValueError):
    """The chosen accountant cannot account for this mechanism."""


def _check_accountant(accountant: str) -> str:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}")
    return accountant


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0 < float(delta) < 1):
        raise ValueError(f"delta must lie strictly between 0 and 1, got {delta!r}")
    return float(delta)


def supported_accountants(spec: PrivacySpec) -> tuple[str, ...]:
    """The accountants that can bound this configuration (fixed-size sampling: RDP only)."""
    if not spec.nonprivate and spec.mechanism == "gaussian" and spec.sampling == "fixed":
        return ("rdp",)
    return ACCOUNTANTS


def _tree(spec: PrivacySpec) -> TreeParticipation:
    return _tree_cached(spec.rounds_per_epoch, spec.tree_restarts)


_TREES: dict[tuple[int, bool], TreeParticipation] = {}


def _tree_cached(rounds_per_epoch: int, restart: bool) -> TreeParticipation:
    key = (rounds_per_epoch, restart)
    if key not in _TREES:
        if len(_TREES) > 64:
            _TREES.clear()
        _TREES[key] = TreeParticipation(rounds_per_epoch, restart=restart)
    return _TREES[key]


def tree_sum_of_squares(spec: PrivacySpec, rounds: int) -> int:
    """S after ``rounds`` rounds for a tree spec (see ``tree_accounting``)."""
    return _tree(spec).sum_of_squares(rounds)


def epochs_touched(spec: PrivacySpec, rounds: int) -> int:
    """Epochs of R rounds that rounds 1..t intersect (max participations of one user)."""
    return math.ceil(rounds / spec.rounds_per_epoch)


# ---------------------------------------------------------------------- events
def round_event(spec: PrivacySpec) -> dp_accounting.DpEvent:
    """One round's mechanism (for epoch sampling and tree: the worst case of round 1)."""
    z = spec.noise_multiplier
    if spec.nonprivate:
        return dpe.NonPrivateDpEvent()
    if spec.mechanism == "tree":
        return training_event(spec, 1)
    if spec.sampling == "poisson":
        return dpe.PoissonSampledDpEvent(spec.sampling_rate, dpe.GaussianDpEvent(z))
    if spec.sampling == "fixed":
        return dpe.SampledWithoutReplacementDpEvent(
            spec.population, spec.clients_per_round * spec.users_per_client, dpe.GaussianDpEvent(z)
        )
    return dpe.GaussianDpEvent(z)


def training_event(
    spec: PrivacySpec, rounds: int | None = None, *, accountant: str = "rdp"
) -> dp_accounting.DpEvent:
    """The whole run of ``rounds`` (default ``spec.rounds``) rounds as one DpEvent.

    For the tree, ``accountant`` picks the form: "rdp" gives the zCDP / single-epoch
    tree events, "pld" the equivalent Gaussian event (same RDP curve).
    """
    _check_accountant(accountant)
    t = spec.rounds if rounds is None else int(rounds)
    if t < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds!r}")
    if spec.nonprivate:
        return dpe.NonPrivateDpEvent()
    if t == 0:
        return dpe.NoOpDpEvent()
    z = spec.noise_multiplier
    if spec.mechanism == "gaussian":
        if spec.sampling == "epoch":
            return dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(z), epochs_touched(spec, t))
        return dpe.SelfComposedDpEvent(round_event(spec), t)
    if accountant == "pld":
        return dpe.GaussianDpEvent(z / math.sqrt(tree_sum_of_squares(spec, t)))
    if spec.tree_restarts:
        r = spec.rounds_per_epoch
        full, rest = divmod(t, r)
        events: list[dp_accounting.DpEvent] = []
        if full:
            events.append(dpe.SelfComposedDpEvent(dpe.SingleEpochTreeAggregationDpEvent(z, r), full))
        if rest:
            events.append(dpe.SingleEpochTreeAggregationDpEvent(z, rest))
        return events[0] if len(events) == 1 else dpe.ComposedDpEvent(events)
    return dpe.ZCDpEvent(rho=tree_sum_of_squares(spec, t) / (2.0 * z * z))


def _contains(event: dp_accounting.DpEvent, kind: type) -> bool:
    if isinstance(event, kind):
        return True
    if isinstance(event, dpe.SelfComposedDpEvent):
        return _contains(event.event, kind)
    if isinstance(event, dpe.ComposedDpEvent):
        return any(_contains(e, kind) for e in event.events)
    if isinstance(event, (dpe.PoissonSampledDpEvent, dpe.SampledWithoutReplacementDpEvent)):
        return _contains(event.event, kind)
    return False


def _infer_relation(event: dp_accounting.DpEvent) -> Relation:
    if _contains(event, dpe.SampledWithoutReplacementDpEvent):
        return Relation.REPLACE_ONE
    if _contains(event, dpe.SingleEpochTreeAggregationDpEvent):
        return Relation.REPLACE_SPECIAL
    return Relation.ADD_REMOVE


def make_accountant(
    accountant: str, relation: Relation, pld_discretization: float = PLD_DISCRETIZATION
) -> dp_accounting.PrivacyAccountant:
    """A fresh dp_accounting accountant ("rdp" or "pld") for the relation."""
    rel = to_dp_accounting(relation)
    if _check_accountant(accountant) == "rdp":
        return rdp_privacy_accountant.RdpAccountant(list(RDP_ORDERS), neighboring_relation=rel)
    return pld_privacy_accountant.PLDAccountant(rel, value_discretization_interval=pld_discretization)


def compute_epsilon(
    event: dp_accounting.DpEvent,
    delta: float,
    accountant: str = "rdp",
    *,
    relation: Relation | None = None,
    pld_discretization: float = PLD_DISCRETIZATION,
) -> float:
    """Epsilon of ``event`` at ``delta`` from dp_accounting's RDP or PLD accountant.

    ``relation`` defaults to the one the event's sampling implies (sampling without
    replacement: replace-one; single-epoch tree: replace-special; else add/remove).
    Raises ``UnsupportedAccountantError`` when the accountant cannot handle the event.
    """
    delta = _check_delta(delta)
    relation = _infer_relation(event) if relation is None else relation
    try:
        hash(event)  # a ComposedDpEvent holds a list: computed every time
    except TypeError:
        return _epsilon_of.__wrapped__(event, delta, accountant, relation, pld_discretization)
    return _epsilon_of(event, delta, accountant, relation, pld_discretization)


@functools.lru_cache(maxsize=4096)
def _epsilon_of(event: dp_accounting.DpEvent, delta: float, accountant: str, relation: Relation,
                pld_discretization: float) -> float:
    """``compute_epsilon``'s computation, memoised on its exact arguments: the same event
    at the same delta is one dp_accounting computation per process (a run's report,
    its resume and a calibration ask for the same ones again)."""
    acc = make_accountant(accountant, relation, pld_discretization)
    if not acc.supports(event):
        raise UnsupportedAccountantError(
            f"the {accountant.upper()} accountant cannot account for {type(event).__name__} under "
            f"{relation.value} (fixed-size sampling is RDP-only); use the RDP accountant"
        )
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def epsilon_for(spec: PrivacySpec, accountant: str = "rdp", rounds: int | None = None) -> float:
    """Epsilon of the run described by ``spec`` (math.inf when non-private)."""
    if spec.nonprivate:
        return math.inf
    if accountant not in supported_accountants(spec):
        raise UnsupportedAccountantError(
            f"the {accountant.upper()} accountant cannot account for {spec.sampling} sampling "
            f"with {spec.mechanism} noise; use {' or '.join(a.upper() for a in supported_accountants(spec))}"
        )
    event = training_event(spec, rounds, accountant=accountant)
    return compute_epsilon(event, spec.resolved_delta, accountant, relation=spec.relation)


# ---------------------------------------------------------------------- fast curves
def _rdp_of(event: dp_accounting.DpEvent, relation: Relation) -> np.ndarray:
    acc = make_accountant("rdp", relation)
    acc.compose(event)
    return acc.rdp


class EpsilonCurve:
    """epsilon(t) for t rounds of ``spec`` under one accountant, memoised per t.

    RDP: the RDP curve is linear in the number of units composed, so epsilon(t) costs
    one RDP-to-(epsilon, delta) conversion. PLD: Poisson sampling keeps the one-round
    privacy loss distribution and self-composes it t times; the other mechanisms are
    a single Gaussian. Values equal ``epsilon_for(replace(spec, rounds=t))``.
    """

    def __init__(
        self, spec: PrivacySpec, accountant: str = "rdp", pld_discretization: float = PLD_DISCRETIZATION
    ) -> None:
        self.spec = spec
        self.accountant = _check_accountant(accountant)
        self.pld_discretization = pld_discretization
        if not spec.nonprivate and accountant not in supported_accountants(spec):
            raise UnsupportedAccountantError(
                f"the {accountant.upper()} accountant cannot account for {spec.sampling} sampling with "
                f"{spec.mechanism} noise; use the RDP accountant"
            )
        self._memo: dict[int, float] = {}
        self._unit_rdp: np.ndarray | None = None
        self._units: Callable[[int], int] | None = None
        self._base_pld: pld_lib.PrivacyLossDistribution | None = None

    def _setup_rdp(self) -> None:
        spec = self.spec
        z = spec.noise_multiplier
        if spec.mechanism == "gaussian" and spec.sampling in ("poisson", "fixed"):
            self._unit_rdp = _rdp_of(round_event(spec), spec.relation)
            self._units = lambda t: t
        else:
            self._unit_rdp = _rdp_of(dpe.GaussianDpEvent(z), Relation.ADD_REMOVE)
            if spec.mechanism == "gaussian":
                self._units = lambda t: epochs_touched(spec, t)
            else:
                self._units = lambda t: tree_sum_of_squares(spec, t)

    def _pld_epsilon(self, t: int) -> float:
        spec = self.spec
        if spec.sampling == "poisson":
            if self._base_pld is None:
                self._base_pld = pld_lib.from_gaussian_mechanism(
                    spec.noise_multiplier,
                    value_discretization_interval=self.pld_discretization,
                    sampling_prob=spec.sampling_rate,
                    neighboring_relation=to_dp_accounting(spec.relation),
                )
            return float(self._base_pld.self_compose(t).get_epsilon_for_delta(spec.resolved_delta))
        event = training_event(spec, t, accountant="pld")
        return compute_epsilon(event, spec.resolved_delta, "pld", relation=spec.relation,
                               pld_discretization=self.pld_discretization)

    def __call__(self, rounds: int) -> float:
        t = int(rounds)
        if t < 0:
            raise ValueError(f"rounds must be >= 0, got {rounds!r}")
        if self.spec.nonprivate:
            return math.inf if t > 0 else 0.0
        if t == 0:
            return 0.0
        if t not in self._memo:
            if self.accountant == "rdp":
                if self._unit_rdp is None:
                    self._setup_rdp()
                assert self._units is not None and self._unit_rdp is not None
                rdp = self._units(t) * self._unit_rdp
                eps, _ = rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, rdp, self.spec.resolved_delta)
                self._memo[t] = float(eps)
            else:
                self._memo[t] = self._pld_epsilon(t)
        return self._memo[t]


@functools.lru_cache(maxsize=64)
def epsilon_curve(spec: PrivacySpec, accountant: str = "rdp",
                  pld_discretization: float = PLD_DISCRETIZATION) -> EpsilonCurve:
    """The process's one ``EpsilonCurve`` for (spec, accountant): every ledger, calibration
    and report of the same spec shares its memo (the spec is frozen, so is the curve)."""
    return EpsilonCurve(spec, accountant, pld_discretization)


# ---------------------------------------------------------------------- full-batch releases
def gaussian_releases_event(noise_multiplier: float, count: int) -> dp_accounting.DpEvent:
    """``count`` non-sampled Gaussian releases, each with std = z x its own L2 sensitivity."""
    z = check_noise_multiplier(noise_multiplier, allow_nonprivate=False)
    n = positive_int("number of releases", count)
    return dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(z), n)

"""dp_accounting events for each training configuration, and epsilon from them.

All accounting maths is Google's dp_accounting (RDP and PLD accountants); this module only says
which mechanism a configuration is (``training_event``, the one definition per mechanism; the
table of events and relations: docs/PRIVACY.md, "Sampling, grouping and neighbouring
relations"; BandMF's: "BandMF", ``amplified_bandmf_event``, whose epsilon after t rounds is that
of ``bandmf_equivalent_spec`` after ceil(t / b); BLT's: one Gaussian, ``blt_sensitivity_ratio``).
z is always relative to the sensitivity of the clipped sum (``PrivacySpec.sensitivity``). Epoch
sampling claims no amplification; the tree's PLD is the Gaussian mechanism with multiplier
z / sqrt(S).

``event_to_dict`` / ``event_from_dict`` write a DpEvent as JSON-ready data and rebuild it, so a
report or model card can record the event its epsilon is of. ``EpsilonCurve`` gives epsilon
after t rounds quickly for every t (the ledger calls it every round); PLD's interval choice:
docs/PRIVACY.md, "Accounting" ("PLD discretisation").
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from dpemb.privacy.dependency import accountant_missing

try:
    import attr  # dp_accounting's events are attrs classes
    import dp_accounting
    from dp_accounting import dp_event as dpe
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    from dp_accounting.rdp import rdp_privacy_accountant
except ImportError as e:  # one line naming the fix (dependency.py), not a traceback
    raise accountant_missing(e) from None

from dpemb.privacy._checks import positive_int
from dpemb.privacy.relations import Relation, to_dp_accounting
from dpemb.privacy.spec import ACCOUNTANTS, PrivacySpec, check_noise_multiplier
from dpemb.privacy.strategy import blt_sensitivity
from dpemb.privacy.tree_accounting import TreeParticipation

# dp_accounting's RDP logs a warning for every fractional order whose series does not
# converge and then EXCLUDES that order (a safe choice: fewer orders can only raise
# epsilon). The warnings flood training logs; keep absl's errors only.
try:
    from absl import logging as _absl_logging

    _absl_logging.set_verbosity(_absl_logging.ERROR)
except ImportError:  # pragma: no cover - absl comes with dp_accounting
    pass

RDP_ORDERS = tuple(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


@functools.lru_cache(maxsize=64)
def rdp_floor_epsilon(delta: float) -> float:
    """The RDP accountant's floor at ``delta``: the epsilon of its conversion when every
    Renyi divergence is 0 (about log(1/(delta a)) / (a - 1) at the largest order a)."""
    return max(0.0, min(math.log1p(-1.0 / a) - (math.log(delta) + math.log(a)) / (a - 1.0)
                        for a in RDP_ORDERS if a > 1))


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


def require_supported(spec: PrivacySpec, accountant: str, use: str | None = None) -> None:
    """UnsupportedAccountantError when ``accountant`` cannot bound ``spec``; the message ends
    "use ``use``" (default: the supported accountants)."""
    if accountant not in supported_accountants(spec):
        use = use or " or ".join(a.upper() for a in supported_accountants(spec))
        raise UnsupportedAccountantError(
            f"the {accountant.upper()} accountant cannot account for {spec.sampling} sampling "
            f"with {spec.mechanism} noise; use {use}")


@functools.lru_cache(maxsize=64)
def _tree(rounds_per_epoch: int, restart: bool) -> TreeParticipation:
    return TreeParticipation(rounds_per_epoch, restart=restart)


def tree_sum_of_squares(spec: PrivacySpec, rounds: int) -> int:
    """S after ``rounds`` rounds for a tree spec (see ``tree_accounting``)."""
    return _tree(spec.rounds_per_epoch, spec.tree_restarts).sum_of_squares(rounds)


def epochs_touched(spec: PrivacySpec, rounds: int) -> int:
    """Epochs of R rounds that rounds 1..t intersect (max participations of one user)."""
    return math.ceil(rounds / spec.rounds_per_epoch)


# ---------------------------------------------------------------------- BandMF
def bandmf_participations(rounds: int, bands: int) -> int:
    """The most rounds one user can take part in among T rounds with b bands (cyclic
    Poisson participation: its group's rounds t = g, g + b, ...): ceil(T / b)."""
    return math.ceil(positive_int("rounds", rounds) / positive_int("bands (b)", bands))


def amplified_bandmf_event(noise_multiplier: float, rounds: int, *, bands: int,
                           sampling_rate: float) -> dp_accounting.DpEvent:
    """THE event of amplified BandMF: ceil(T / b) compositions of a Poisson-sampled (rate q,
    within a group) Gaussian with noise multiplier z, z relative to the per-round sensitivity
    x the strategy's largest column norm (the normalised strategy of ``bandmf``: z itself)."""
    z = check_noise_multiplier(noise_multiplier, allow_nonprivate=False)
    if isinstance(sampling_rate, bool) or not isinstance(sampling_rate, numbers.Real) \
            or not (0 < float(sampling_rate) <= 1):
        raise ValueError(f"sampling rate must lie in (0, 1], got {sampling_rate!r}")
    return dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(float(sampling_rate), dpe.GaussianDpEvent(z)),
                                   bandmf_participations(rounds, bands))


def bandmf_equivalent_spec(spec: PrivacySpec) -> PrivacySpec:
    """The DP-FedEmb spec (gaussian + poisson) with the epsilon of the bandmf ``spec``: the same
    population, K, z, delta, relation and noise sampler, b M clients per round (rate b M K / N,
    the rate within a group) and ceil(T / b) rounds. Its ``training_event`` after ceil(t / b)
    rounds IS ``amplified_bandmf_event`` after t rounds; with b = 1 it is ``spec`` as gaussian
    + poisson (BandMF with one band is DP-FedEmb, epsilon for epsilon)."""
    if not isinstance(spec, PrivacySpec) or spec.mechanism != "bandmf":
        raise ValueError(f"bandmf_equivalent_spec takes a bandmf PrivacySpec, got {spec!r}")
    b = spec.bands
    return replace(spec, mechanism="gaussian", sampling="poisson", bands=1, clients_per_round=b * spec.clients_per_round,
                   rounds=bandmf_participations(spec.rounds, b))


def blt_sensitivity_ratio(spec: PrivacySpec, rounds: int) -> float:
    """The sensitivity of what BLT released in the first t rounds, relative to the whole run's
    (which the noise is scaled to: 1 at t = T): the strategy's ``minsep_sensitivity`` with
    ceil(t / b) participations over the run's T rows (an upper bound for the first t rows: C is
    non-negative) over that with ceil(T / b)."""
    k = bandmf_participations(rounds, spec.bands)
    return blt_sensitivity(spec.rounds, spec.bands, k) / blt_sensitivity(spec.rounds, spec.bands)


# ---------------------------------------------------------------------- events
def round_event(spec: PrivacySpec) -> dp_accounting.DpEvent:
    """One round's mechanism (for epoch sampling and tree: the worst case of round 1; for
    bandmf: a round of the user's group, Poisson-sampled at the rate within a group)."""
    z = spec.noise_multiplier
    if spec.nonprivate:
        return dpe.NonPrivateDpEvent()
    if spec.mechanism in ("tree", "blt"):
        return training_event(spec, 1)
    if spec.mechanism == "bandmf" or spec.sampling == "poisson":
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
    if spec.mechanism == "bandmf":
        return amplified_bandmf_event(z, t, bands=spec.bands, sampling_rate=spec.sampling_rate)
    if spec.mechanism == "blt":  # no amplification: the whole release is one Gaussian mechanism
        return dpe.GaussianDpEvent(z / blt_sensitivity_ratio(spec, t))
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


def event_to_dict(event: dp_accounting.DpEvent) -> dict[str, Any]:
    """``event`` as JSON-ready data: ``{"class_name": <its dp_accounting.dp_event class>,
    <field>: <value>, ...}``, nested events the same way. Lossless: ``event_from_dict``
    rebuilds an equal event (floats survive JSON exactly)."""
    if not isinstance(event, dpe.DpEvent):
        raise TypeError(f"event_to_dict takes a dp_accounting DpEvent, got {type(event).__name__}")
    if getattr(dpe, type(event).__name__, None) is not type(event):
        raise ValueError(f"{type(event).__name__} is not one of dp_accounting.dp_event's events")

    def value(v: Any) -> Any:
        if isinstance(v, dpe.DpEvent):
            return event_to_dict(v)
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, numbers.Integral):
            return int(v)
        if isinstance(v, numbers.Real):
            return float(v)
        raise ValueError(f"cannot record the field value {v!r} of {type(event).__name__}")

    return {"class_name": type(event).__name__,
            **{f.name: value(getattr(event, f.name)) for f in attr.fields(type(event))}}


def event_from_dict(data: dict[str, Any]) -> dp_accounting.DpEvent:
    """The DpEvent ``event_to_dict`` wrote (only classes of ``dp_accounting.dp_event``)."""
    if not isinstance(data, dict) or not isinstance(data.get("class_name"), str):
        raise ValueError(f"a recorded DpEvent is a dict with a class_name, got {data!r}")
    cls = getattr(dpe, data["class_name"], None)
    if not (isinstance(cls, type) and issubclass(cls, dpe.DpEvent)):
        raise ValueError(f"{data['class_name']!r} is not one of dp_accounting.dp_event's events")

    def value(v: Any) -> Any:
        if isinstance(v, dict):
            return event_from_dict(v)
        if isinstance(v, list):
            return [value(x) for x in v]
        return v

    return cls(**{k: value(v) for k, v in data.items() if k != "class_name"})


def _contains(event: dp_accounting.DpEvent, kind: type) -> bool:
    if isinstance(event, kind):
        return True
    if isinstance(event, dpe.ComposedDpEvent):
        return any(_contains(e, kind) for e in event.events)
    if isinstance(event, (dpe.SelfComposedDpEvent, dpe.PoissonSampledDpEvent,
                          dpe.SampledWithoutReplacementDpEvent)):
        return _contains(event.event, kind)
    return False


def _infer_relation(event: dp_accounting.DpEvent) -> Relation:
    if _contains(event, dpe.SampledWithoutReplacementDpEvent):
        return Relation.REPLACE_ONE
    if _contains(event, dpe.SingleEpochTreeAggregationDpEvent):
        return Relation.REPLACE_SPECIAL
    return Relation.ADD_REMOVE


# ---------------------------------------------------------------------- PLD discretisation
# Every interval gives an upper bound, a finer one a tighter bound at more cost; why no
# fixed interval fits: docs/PRIVACY.md, "PLD discretisation". ``refined_pld_epsilon`` picks
# one per question on a fixed ladder PLD_BASE_INTERVAL x 2^j.
PLD_TOLERANCE = 0.008  # accepted: estimated distance to the fine-grid limit <= 0.8% (1% promised)
PLD_BASE_INTERVAL = 1e-4
PLD_LADDER = (-6, 7)  # exponents j: intervals 1.5625e-6 .. 1.28e-2
PLD_START = 0.2  # intervals tried: about PLD_START x epsilon / sqrt(compositions) or finer
PLD_COARSE_RUNG = PLD_LADDER[1]  # the scale of epsilon is first read at the coarsest interval, 1.28e-2
# one fixed interval, for a whole (epsilon, delta) profile rather than one epsilon (the
# audit's trade-off curve) and for an accountant built without a question to refine on
PLD_DISCRETIZATION = 1e-3


def _ladder(rung: int) -> float:
    """The ladder's interval PLD_BASE_INTERVAL x 2^rung."""
    return PLD_BASE_INTERVAL * 2.0**rung


def _rung_for(value: float, compositions: int) -> int:
    wanted = PLD_START * value / math.sqrt(max(1, compositions))
    lo, hi = PLD_LADDER
    return min(hi, max(lo, math.ceil(math.log2(wanted / PLD_BASE_INTERVAL) - 1e-9)))


def pld_start_interval(epsilon: float, compositions: int) -> float:
    """The ladder interval ``refined_pld_epsilon`` would first try for an epsilon of this
    size (a calibration searches near its target with it)."""
    return _ladder(min(PLD_COARSE_RUNG, _rung_for(epsilon, compositions)))


def refined_pld_epsilon(epsilon_at: Callable[[float], float], compositions: int) -> tuple[float, float]:
    """(epsilon, interval): dp_accounting's pessimistic PLD epsilon at the coarsest ladder
    interval whose estimated distance to the fine-grid limit is within PLD_TOLERANCE.

    ``epsilon_at(interval)`` is the PLD epsilon at one interval; each is an upper bound, so the
    returned value is one whatever the interval: the choice only sets how tight. The error
    estimate from e(h), e(2h), e(4h) and the coarse first pass: docs/PRIVACY.md, "PLD
    discretisation". The finest rung is returned as is (still an upper bound) if it is reached.
    """
    lo, hi = PLD_LADDER
    memo: dict[int, float] = {}

    def eps(rung: int) -> float:
        if rung not in memo:
            memo[rung] = float(epsilon_at(_ladder(rung)))
        return memo[rung]

    rung = PLD_COARSE_RUNG
    while True:
        value = eps(rung)
        if not (0.0 < value < math.inf) or rung == lo:
            return value, _ladder(rung)
        start = _rung_for(value, compositions)
        if start < rung:  # the scale of epsilon asks for a finer grid: go straight there
            rung = start
            continue
        d1, d2 = eps(rung + 1) - value, eps(rung + 2) - eps(rung + 1)
        rho = min(4.0, max(2.0, d2 / d1)) if d1 > 0 else 4.0
        if d1 / (rho - 1.0) <= PLD_TOLERANCE * value:
            return value, _ladder(rung)
        rung -= 1


def pld_truncation_bound(delta: float, compositions: int) -> float:
    """dp_accounting's ``log_mass_truncation_bound`` for a PLD composed ``compositions``
    times at ``delta``: the noise mass cut off per composition is at most e^bound, and
    dp_accounting moves it to an infinite privacy loss (pessimistic), so it adds at most
    compositions x e^bound <= 1e-4 x delta to delta. Clamped to [-50, -30] (-50 is
    dp_accounting's default); a smaller support makes every interval cheaper."""
    return min(-30.0, max(-50.0, math.log(1e-4 * delta / max(1, compositions))))


def _compositions(event: dp_accounting.DpEvent) -> int:
    """How many mechanisms ``event`` composes (the PLD discretisation error grows with it)."""
    if isinstance(event, dpe.SelfComposedDpEvent):
        return event.count * _compositions(event.event)
    if isinstance(event, dpe.ComposedDpEvent):
        return sum(_compositions(e) for e in event.events)
    return 1


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
    pld_discretization: float | None = None,
) -> float:
    """Epsilon of ``event`` at ``delta`` from dp_accounting's RDP or PLD accountant.

    ``relation`` defaults to the one the event's sampling implies (sampling without
    replacement: replace-one; single-epoch tree: replace-special; else add/remove).
    PLD: ``pld_discretization`` None picks the interval with ``refined_pld_epsilon``
    (within 1% of a finer grid); a number uses that interval. Either way the result
    is an upper bound. Raises ``UnsupportedAccountantError`` when the accountant cannot
    handle the event.
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
                pld_discretization: float | None) -> float:
    """``compute_epsilon``'s computation, memoised on its exact arguments: the same event
    at the same delta is one dp_accounting computation per process (a run's report,
    its resume and a calibration ask for the same ones again)."""
    if accountant == "pld" and pld_discretization is None:
        return refined_pld_epsilon(
            lambda interval: _epsilon_of.__wrapped__(event, delta, accountant, relation, interval),
            _compositions(event),
        )[0]
    acc = make_accountant(accountant, relation, PLD_DISCRETIZATION if pld_discretization is None
                          else pld_discretization)
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
    require_supported(spec, accountant)
    if accountant == "pld":  # the curve: Poisson PLD with its truncation, the interval refined
        return epsilon_curve(spec, "pld")(spec.rounds if rounds is None else int(rounds))
    event = training_event(spec, rounds, accountant=accountant)
    return compute_epsilon(event, spec.resolved_delta, accountant, relation=spec.relation)


# ---------------------------------------------------------------------- fast curves
class EpsilonCurve:
    """epsilon(t) for t rounds of ``spec`` under one accountant, memoised per t.

    RDP: per-unit curve times units composed (one conversion per t); Poisson PLD self-composes
    a cached one-round distribution (docs/PRIVACY.md, "Accounting"), at the interval
    ``refined_pld_epsilon`` picks per t (``pld_interval(t)`` says which). BandMF: the curve of
    its ``bandmf_equivalent_spec`` at ceil(t / b). BLT: one Gaussian per t (``training_event``).
    ``epsilon_for(spec)`` is the curve at ``spec.rounds``.
    """

    def __init__(self, spec: PrivacySpec, accountant: str = "rdp") -> None:
        self.spec = spec
        self.accountant = _check_accountant(accountant)
        require_supported(spec, accountant, "the RDP accountant")
        # what is computed: for BandMF the equivalent DP-FedEmb spec, at ceil(t / b) rounds
        bandmf = spec.mechanism == "bandmf" and not spec.nonprivate
        self._spec = bandmf_equivalent_spec(spec) if bandmf else spec
        self._memo: dict[int, float] = {}
        self._unit_rdp: np.ndarray | None = None
        self._base_plds: dict[float, pld_lib.PrivacyLossDistribution] = {}
        self._pld_intervals: dict[int, float] = {}

    def _participations(self, rounds: int) -> int:
        """The rounds of ``self._spec`` after ``rounds`` rounds (BandMF: ceil(t / b); BLT: the
        memo's key, the participations ceil(t / b) its epsilon depends on)."""
        return math.ceil(int(rounds) / self.spec.bands)

    def _rdp_epsilon(self, t: int) -> float:
        """(RDP of one unit) x (units in t rounds): a round (poisson, fixed), an epoch's
        Gaussian (epoch) or one unit of S (tree), converted at the spec's delta."""
        spec = self._spec
        per_round = spec.mechanism == "gaussian" and spec.sampling in ("poisson", "fixed")
        if self._unit_rdp is None:
            if per_round:
                acc = make_accountant("rdp", spec.relation)
                acc.compose(round_event(spec))
            else:
                acc = make_accountant("rdp", Relation.ADD_REMOVE)
                acc.compose(dpe.GaussianDpEvent(spec.noise_multiplier))
            self._unit_rdp = acc.rdp
        if per_round:
            units = t
        elif spec.mechanism == "gaussian":
            units = epochs_touched(spec, t)
        else:
            units = tree_sum_of_squares(spec, t)
        eps, _ = rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, units * self._unit_rdp,
                                                        spec.resolved_delta)
        return float(eps)

    def pld_compositions(self, rounds: int) -> int:
        """How many mechanisms the PLD of ``rounds`` rounds composes."""
        t = self._participations(rounds)
        if self._spec.sampling == "poisson":
            return t
        return _compositions(training_event(self._spec, t, accountant="pld"))

    def pld_epsilon_at(self, rounds: int, interval: float) -> float:
        """The PLD epsilon after ``rounds`` rounds at one given interval (an upper bound too).
        Poisson sampling self-composes one round's PLD at ``interval`` (dp_accounting,
        pessimistic, connect-the-dots, truncation ``pld_truncation_bound`` for the spec's
        delta and rounds)."""
        t = self._participations(rounds)
        spec = self._spec
        if spec.sampling != "poisson":
            event = training_event(spec, rounds if spec.mechanism == "blt" else t, accountant="pld")
            return compute_epsilon(event, spec.resolved_delta, "pld", relation=spec.relation,
                                   pld_discretization=interval)
        if interval not in self._base_plds:
            self._base_plds[interval] = pld_lib.from_gaussian_mechanism(
                spec.noise_multiplier,
                value_discretization_interval=interval,
                sampling_prob=spec.sampling_rate,
                log_mass_truncation_bound=pld_truncation_bound(spec.resolved_delta, spec.rounds),
                neighboring_relation=to_dp_accounting(spec.relation),
            )
        composed = self._base_plds[interval].self_compose(t)
        return float(composed.get_epsilon_for_delta(spec.resolved_delta))

    def pld_interval(self, rounds: int) -> float:
        """The PLD discretisation interval behind ``self(rounds)`` (PLD curves only)."""
        if self.accountant != "pld" or self.spec.nonprivate or int(rounds) <= 0:
            raise ValueError("only a private PLD curve at rounds >= 1 has a discretisation interval")
        self(rounds)
        return self._pld_intervals[self._participations(rounds)]

    def __call__(self, rounds: int) -> float:
        t = int(rounds)
        if t < 0:
            raise ValueError(f"rounds must be >= 0, got {rounds!r}")
        if self.spec.nonprivate:
            return math.inf if t > 0 else 0.0
        if t == 0:
            return 0.0
        p = self._participations(t)  # the memo's key: BandMF rounds of one participation share it
        if p not in self._memo:
            if self.spec.mechanism == "blt" and self.accountant == "rdp":
                self._memo[p] = compute_epsilon(training_event(self.spec, t), self.spec.resolved_delta, "rdp",
                                                relation=self.spec.relation)
            elif self.accountant == "rdp":
                self._memo[p] = self._rdp_epsilon(p)
            else:
                self._memo[p], self._pld_intervals[p] = refined_pld_epsilon(
                    lambda h: self.pld_epsilon_at(t, h), self.pld_compositions(t))
        return self._memo[p]


@functools.lru_cache(maxsize=64)
def epsilon_curve(spec: PrivacySpec, accountant: str = "rdp") -> EpsilonCurve:
    """The process's one ``EpsilonCurve`` for (spec, accountant): every ledger, calibration
    and report of the same spec shares its memo (the spec is frozen, so is the curve)."""
    return EpsilonCurve(spec, accountant)


# ---------------------------------------------------------------------- full-batch releases
def gaussian_releases_event(noise_multiplier: float, count: int) -> dp_accounting.DpEvent:
    """``count`` non-sampled Gaussian releases, each with std = z x its own L2 sensitivity."""
    z = check_noise_multiplier(noise_multiplier, allow_nonprivate=False)
    n = positive_int("number of releases", count)
    return dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(z), n)

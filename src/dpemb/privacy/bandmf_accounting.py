"""Accounting for amplified BandMF with cyclic Poisson participation.

The mechanism: ``dpemb.privacy.bandmf.BandMFNoise`` (a b-banded strategy C, noise
multiplier z relative to the per-round sensitivity x the largest column norm of C)
driven by ``dpemb.privacy.cyclic_sampling.CyclicPoissonSampler`` (b groups keyed by the
run key, round t Poisson-samples group t mod b at rate q).

The event (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta, Xu, "(Amplified)
Banded Matrix Factorization: A unified approach to private training", NeurIPS 2023,
arXiv 2306.08153): a user's group takes part in the rounds t = g, g + b, g + 2b, ...
of rounds 0..T-1, at most ceil(T / b) of them; there the user is included independently
with probability q, and its contributions touch disjoint rows of C x (b-min-separation),
each moved by at most Delta x (max column norm). The release is then the composition of
ceil(T / b) Poisson-sampled Gaussian mechanisms with sampling rate q and noise
multiplier z / (max column norm of C) = z for the normalised C:

    SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), ceil(T / b)).

It is the DP-FedEmb event (``dpemb.privacy.events``, gaussian + poisson) of
ceil(T / b) rounds at rate q. Since BandMF is a ``PrivacySpec`` mechanism
(``mechanism="bandmf"``, ``bands`` = b, ``sampling="cyclic-poisson"``), the event and the
epsilon are defined once, in ``dpemb.privacy.events`` (``amplified_bandmf_event``,
``bandmf_equivalent_spec``, ``training_event``, ``epsilon_for``, ``EpsilonCurve``): the
``equivalent_spec`` is a gaussian + poisson ``PrivacySpec`` with the same population, K,
z, delta and relation, b M clients per round (so its rate b M K / N is the rate within a
group) and ceil(T / b) rounds, and epsilon is its RDP or PLD epsilon by the same path as
DP-FedEmb's (the PLD with its truncation and refined interval). With b = 1 the equivalent
spec is the spec itself: BandMF with one band is DP-FedEmb, epsilon for epsilon. The
functions here take a DP-FedEmb spec and a number of bands (``bandmf_spec`` turns them
into the bandmf spec) and go through those definitions.

Compared with jax_privacy's ``accounting.amplified_bandmf_event`` (read, not copied):
the same event, with its ``sampling_prob`` = q (the rate within a group) and its
``noise_multiplier`` = z "assuming the strategy matrix has maximum L2 column norm of
one". Differences are in the participation it is applied to, not the event:
jax_privacy's ``CyclicPoissonSampling`` partitions a (possibly shuffled) index list
and by default drops N mod b examples; dpemb's default assignment draws each user's
group independently from the run key, so adding or removing a user leaves every
other user's group unchanged, which the add/remove relation needs (the balanced,
permutation-based assignment is accounted under replace-special only: see
``cyclic_sampling.check_assignment``). The relation is the spec's (add/remove by
default), given to dp_accounting explicitly.
"""

from __future__ import annotations

from dataclasses import replace

from dpemb.privacy.dependency import accountant_missing

try:
    import dp_accounting
except ImportError as e:  # one line naming the fix (dependency.py), not a traceback
    raise accountant_missing(e) from None

from dpemb.privacy._checks import positive_int
from dpemb.privacy.calibration import calibrate_noise_multiplier
from dpemb.privacy.events import (  # noqa: F401  (re-exported: the one definition lives in events)
    amplified_bandmf_event,
    bandmf_equivalent_spec,
    bandmf_participations,
    epsilon_for,
    training_event,
)
from dpemb.privacy.spec import PrivacySpec


def bandmf_spec(spec: PrivacySpec, bands: int) -> PrivacySpec:
    """The bandmf ``PrivacySpec`` (b = ``bands``, cyclic Poisson sampling) of a gaussian +
    poisson ``spec`` describing N, M clients of K users per round, z, T rounds, delta and the
    relation; a ValueError naming the fix otherwise (another mechanism or sampling, adaptive
    clipping, b M K > N)."""
    if not isinstance(spec, PrivacySpec):
        raise TypeError(f"bandmf_spec takes a PrivacySpec, got {type(spec).__name__}")
    b = positive_int("bands (b)", bands)
    if spec.mechanism != "gaussian" or spec.sampling != "poisson":
        raise ValueError(
            f"BandMF is described by a gaussian + poisson spec (N, M, K, z, T, delta, relation) and a number "
            f"of bands; got mechanism {spec.mechanism!r} with {spec.sampling!r} sampling"
        )
    if spec.adaptive_clipping is not None:
        raise ValueError("adaptive clipping is not supported with BandMF noise; use a fixed clip norm")
    return replace(spec, mechanism="bandmf", sampling="cyclic-poisson", bands=b)


def equivalent_spec(spec: PrivacySpec, bands: int) -> PrivacySpec:
    """The DP-FedEmb spec with BandMF's epsilon (``events.bandmf_equivalent_spec``): ``spec``
    (gaussian + poisson, describing N, M clients of K users per round, z, T rounds, delta,
    relation) with b M clients per round (rate b M K / N, the rate within a group) and
    ceil(T / b) rounds."""
    return bandmf_equivalent_spec(bandmf_spec(spec, bands))


def bandmf_event(spec: PrivacySpec, bands: int, rounds: int | None = None) -> dp_accounting.DpEvent:
    """The whole run's DpEvent (``rounds`` default ``spec.rounds``): ``events.training_event`` of
    the bandmf spec, ``amplified_bandmf_event`` at the rate within a group."""
    t = spec.rounds if rounds is None else positive_int("rounds", rounds)
    return training_event(bandmf_spec(replace(spec, rounds=t), bands))


def bandmf_epsilon(spec: PrivacySpec, bands: int, accountant: str = "rdp", rounds: int | None = None) -> float:
    """Epsilon of BandMF with ``bands`` bands after ``rounds`` (default ``spec.rounds``) rounds
    at the spec's delta, from dp_accounting's RDP or PLD accountant: ``events.epsilon_for`` of
    the bandmf spec (math.inf when non-private)."""
    t = spec.rounds if rounds is None else positive_int("rounds", rounds)
    return epsilon_for(bandmf_spec(replace(spec, rounds=t), bands), accountant)


def calibrate_bandmf_noise_multiplier(target_epsilon: float, spec: PrivacySpec, bands: int,
                                      accountant: str = "rdp") -> float:
    """Smallest z (``calibration.calibrate_noise_multiplier``'s search on the bandmf spec:
    relative 1e-4, rounded up) with ``bandmf_epsilon`` <= ``target_epsilon``;
    ``spec.noise_multiplier`` is ignored. The z is relative to the per-round sensitivity x the
    largest column norm of the strategy (``BandMFNoise(z, bands=b)`` adds exactly that)."""
    return calibrate_noise_multiplier(bandmf_spec(spec, bands), target_epsilon, accountant)

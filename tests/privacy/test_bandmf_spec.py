"""BandMF as a PrivacySpec mechanism: validation, the one event and epsilon (through
events.py), calibration, statements and the plan's factories."""

import math
import subprocess
import sys
from dataclasses import replace

import pytest
from dp_accounting import dp_event as dpe

from dpemb.privacy import (
    AdaptiveClipping,
    PrivacyLedger,
    PrivacySpec,
    PrivacySpecError,
    compute_epsilon,
    describe_epsilon,
    describe_mechanism,
    describe_schedule,
    epsilon_for,
    extrapolate,
    max_rounds,
    round_event,
    training_event,
)
from dpemb.privacy.calibration import calibrate_noise_multiplier, calibrated_spec
from dpemb.privacy.events import (
    amplified_bandmf_event,
    bandmf_equivalent_spec,
    epsilon_curve,
)
from dpemb.privacy.relations import Relation

N, M, T = 10_000, 50, 200


def bandmf(bands, **kw):
    return PrivacySpec(**{**dict(population=N, clients_per_round=M, noise_multiplier=1.0, rounds=T,
                                 mechanism="bandmf", bands=bands), **kw})


def gaussian(**kw):
    return PrivacySpec(**{**dict(population=N, clients_per_round=M, noise_multiplier=1.0, rounds=T), **kw})


# ---------------------------------------------------------------------- the spec
def test_defaults_and_derived_values():
    s = bandmf(4, users_per_client=2)
    assert (s.sampling, s.relation, s.bands) == ("cyclic-poisson", Relation.ADD_REMOVE, 4)
    assert s.sampling_rate == 4 * 50 * 2 / N  # the rate within a group, what the accountant uses
    assert bandmf(4, relation="replace-special").relation is Relation.REPLACE_SPECIAL
    assert gaussian().bands == 1 and bandmf(1).sampling_rate == gaussian().sampling_rate


@pytest.mark.parametrize("fields, message", [
    (dict(bands=2), "mechanism=.bandmf. or .blt."),  # bands with the Gaussian
    (dict(bands=2, mechanism="tree"), "mechanism=.bandmf. or .blt."),
    (dict(mechanism="bandmf", bands=0), "bands"),
    (dict(mechanism="bandmf", bands=True), "bands"),
    (dict(mechanism="bandmf", bands=2.5), "bands"),
    (dict(mechanism="bandmf", bands=201), "fewer bands"),  # b M K = 10,050 > N
    (dict(mechanism="bandmf", sampling="poisson"), "cyclic-poisson"),
    (dict(mechanism="bandmf", sampling="epoch"), "cyclic-poisson"),
    (dict(sampling="cyclic-poisson"), "gaussian noise needs poisson"),
    (dict(mechanism="bandmf", relation="replace-one"), "add-remove or replace-special"),
    (dict(mechanism="bandmf", bands=2, adaptive_clipping=AdaptiveClipping(0.5)), "bandmf noise"),
    (dict(mechanism="bandmf", tree_restarts=True), "tree_restarts"),
])
def test_refusals_name_the_fix(fields, message):
    with pytest.raises(PrivacySpecError, match=message.replace("(", r"\(").replace("*", r"\*")):
        PrivacySpec(population=N, clients_per_round=M, **fields)


def test_fingerprints_of_other_mechanisms_unchanged_and_bandmf_round_trips():
    g = gaussian()
    assert "bands" not in g.to_dict()  # hashes as before BandMF existed (old checkpoints resume)
    for s in (bandmf(1), bandmf(4)):
        assert s.to_dict()["bands"] == s.bands and PrivacySpec(**s.to_dict()) == s
        assert PrivacySpec(**s.to_dict()).fingerprint() == s.fingerprint()
    assert len({g.fingerprint(), bandmf(1).fingerprint(), bandmf(4).fingerprint()}) == 3


# ---------------------------------------------------------------------- the one event
@pytest.mark.parametrize("b", [1, 3, 4, 16])
def test_the_event_is_the_foundations(b):
    s = bandmf(b, users_per_client=2, clients_per_round=20)
    q = b * 20 * 2 / N
    event = dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(1.0)), math.ceil(T / b))
    assert training_event(s) == event == amplified_bandmf_event(1.0, T, bands=b, sampling_rate=q)
    eq = bandmf_equivalent_spec(s)
    assert (eq.mechanism, eq.sampling, eq.rounds, eq.clients_per_round) == ("gaussian", "poisson",
                                                                          math.ceil(T / b), b * 20)
    for t in (1, b, b + 1, 77, T):
        assert training_event(s, t) == training_event(eq, math.ceil(t / b)) == amplified_bandmf_event(
            1.0, t, bands=b, sampling_rate=q)
    assert training_event(s, 0) == dpe.NoOpDpEvent()
    assert round_event(s) == dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(1.0))
    with pytest.raises(ValueError, match="bandmf"):
        bandmf_equivalent_spec(gaussian())


# ---------------------------------------------------------------------- epsilon
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_one_band_is_dp_fedemb_exactly(accountant):
    for kw in (dict(), dict(users_per_client=3, relation="replace-special", delta=1e-6)):
        assert epsilon_for(bandmf(1, **kw), accountant) == epsilon_for(gaussian(**kw), accountant)
        for t in (1, 17, T):
            assert epsilon_curve(bandmf(1, **kw), accountant)(t) == epsilon_curve(gaussian(**kw), accountant)(t)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("b", [4, 16])
def test_epsilon_equals_the_foundations_and_reads_the_equivalent_curve(accountant, b):
    s = bandmf(b)
    eps = epsilon_for(s, accountant)
    assert eps == epsilon_for(gaussian(clients_per_round=b * M, rounds=math.ceil(T / b)), accountant)
    assert eps > epsilon_for(gaussian(), accountant)  # fewer participations at a b times higher rate
    curve, eq = epsilon_curve(s, accountant), epsilon_curve(bandmf_equivalent_spec(s), accountant)
    assert curve(T) == eps and curve(0) == 0.0
    for t in (1, b - 1, b, b + 1, 101, T):
        assert curve(t) == eq(math.ceil(t / b))
    if accountant == "pld":
        assert curve.pld_interval(T) == eq.pld_interval(math.ceil(T / b))
        assert curve.pld_compositions(T) == math.ceil(T / b)


def test_the_ledger_accounts_participations():
    s = bandmf(4)
    ledger = PrivacyLedger(s)
    ledger.step(9)
    assert ledger.dp_event() == training_event(s, 9)  # ceil(9 / 4) = 3 participations
    assert ledger.epsilon() == epsilon_curve(bandmf_equivalent_spec(s), "rdp")(3)
    assert ledger.epsilon() == pytest.approx(compute_epsilon(ledger.dp_event(), s.resolved_delta,
                                                             relation=s.relation), rel=1e-9)
    assert ledger.epsilon_after(12) == ledger.epsilon() < ledger.epsilon_after(13)
    assert "BandMF, 4 bands" in ledger.entries()[0]["mechanism"]


def test_nonprivate_bandmf():
    s = bandmf(4, noise_multiplier=0.0, nonprivate=True)
    assert epsilon_for(s) == math.inf and training_event(s) == dpe.NonPrivateDpEvent()


# ---------------------------------------------------------------------- calibration
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibration_through_the_one_path(accountant):
    target, b = 2.0, 8
    z = calibrate_noise_multiplier(bandmf(b), target, accountant)
    assert epsilon_for(replace(bandmf(b), noise_multiplier=z), accountant) <= target
    assert epsilon_for(replace(bandmf(b), noise_multiplier=z / (1 + 1.5e-4)), accountant) > target
    spec = calibrated_spec(target, accountant, population=N, clients_per_round=M, rounds=T, mechanism="bandmf",
                           bands=b)
    assert (spec.mechanism, spec.bands, spec.noise_multiplier) == ("bandmf", b, z)


def test_budget_and_extrapolation():
    s = bandmf(4)
    budget = epsilon_for(s)
    # the curve is flat over each block of b rounds: the rounds a budget affords end a block
    assert max_rounds(s, budget) == 4 * max_rounds(bandmf_equivalent_spec(s), budget) >= T
    ex = extrapolate(s, 10 * N)
    assert (ex.spec.mechanism, ex.spec.bands, ex.clients_per_round) == ("bandmf", 4, 10 * M)
    assert ex.epsilon == epsilon_for(ex.spec)


# ---------------------------------------------------------------------- statements
def test_statements_name_the_mechanism_and_schedule():
    s = bandmf(4)
    assert describe_schedule(s) == "BandMF, 4 bands, cyclic Poisson participation"
    assert describe_schedule(bandmf(1)) == "BandMF, 1 band, cyclic Poisson participation"
    assert describe_schedule(gaussian()) is None
    line = describe_mechanism(s)
    assert line.startswith("BandMF, 4 bands, cyclic Poisson participation")
    assert "q = b*M*K/N = 0.02" in line and "ceil(T / 4) = 50" in line
    text = describe_epsilon(1.234, accountant="rdp", delta=1e-5, unit="user", relation=s.relation,
                            schedule=describe_schedule(s))
    assert text == ("epsilon = 1.23 (RDP accountant, delta = 1e-05, user-level, add/remove-one-user; "
                    "BandMF, 4 bands, cyclic Poisson participation)")


def test_accounting_does_not_import_torch():
    code = ("import sys, dpemb.privacy as p; "
            "p.epsilon_for(p.PrivacySpec(population=100, clients_per_round=5, mechanism='bandmf', bands=4), 'pld'); "
            "p.epsilon_for(p.PrivacySpec(population=100, clients_per_round=5, mechanism='blt', bands=4, rounds=20)); "
            "p.calibrate_noise_multiplier(p.PrivacySpec(population=100, clients_per_round=5, mechanism='bandmf', "
            "bands=4), 3.0); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    # nor does `dpemb account`'s BandMF sweep, with its model noise and warnings
    code = ("import sys; from dpemb.cli.main import main; main(['account', '--population', '1000', "
            "'--clients-per-round', '5', '--rounds', '20', '--noise-multiplier', '5', '--mechanism', 'bandmf', "
            "'--bands', '1,4'])")
    out = subprocess.run([sys.executable, "-c", code + "\nprint('torch' in sys.modules)"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "model noise" in out.stdout, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


# ---------------------------------------------------------------------- the plan
def test_the_plan_builds_bandmf_noise_and_cyclic_sampling():
    from dpemb.privacy import PrivacyPlan, make_noise, make_sampler
    from dpemb.privacy.bandmf import BandMFNoise
    from dpemb.privacy.cyclic_sampling import CyclicPoissonSampler

    s = bandmf(4, users_per_client=2, clients_per_round=20, noise_multiplier=0.7)
    noise = make_noise(s, seed=1)
    assert isinstance(noise, BandMFNoise) and (noise.bands, noise.noise_multiplier) == (4, 0.7)
    assert make_noise(replace(s, secure_noise=True)).secure
    sampler = make_sampler(s, seed=0)
    assert isinstance(sampler, CyclicPoissonSampler)
    assert (sampler.bands, sampler.assignment, sampler.sampling) == (4, "independent", "cyclic-poisson")
    assert sampler.sampling_rate == s.sampling_rate and sampler.expected_clients == 20
    plan = PrivacyPlan.build(s, seed=3)
    rounds_of: dict[int, set[int]] = {}
    for t in range(8):
        for slot in plan.sample_round():
            for u in slot:
                rounds_of.setdefault(int(u), set()).add(t)
        plan.ledger.step()
    assert rounds_of  # every user's rounds are its group's: at most once in any 4 consecutive rounds
    assert all(len({t % 4 for t in ts}) == 1 for ts in rounds_of.values())
    assert plan.ledger.dp_event() == training_event(s, 8)
    assert not make_noise(bandmf(4, noise_multiplier=0.0, nonprivate=True)).private


def test_the_small_cohort_warning_reads_bandmf_as_its_noise_on_the_model():
    """BandMF's per-round noise is z x sensitivity / M, but the model sees less of it: the
    warning's thresholds (measured with independent noise) are applied to the independent
    noise that adds as much to the model (prefix_noise_rms of b bands over that of one)."""
    from dpemb.privacy.advice import cohort_warnings, relative_noise
    from dpemb.privacy.strategy import banded_sqrt_coefficients, prefix_noise_rms

    s = bandmf(8, noise_multiplier=30.0)
    ratio = prefix_noise_rms(banded_sqrt_coefficients(8), T) / prefix_noise_rms([1.0], T)
    assert 0.3 < ratio < 0.6
    assert relative_noise(s) == pytest.approx(s.noise_on_average / s.clip_norm * ratio, rel=1e-12)
    assert relative_noise(bandmf(1, noise_multiplier=30.0)) == relative_noise(gaussian(noise_multiplier=30.0))
    (warning,) = [w for w in cohort_warnings(s) if w.startswith("small cohort")]
    assert f"is {relative_noise(s):.2g} x the clip norm per coordinate (as independent noise adding" in warning

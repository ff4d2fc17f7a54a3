"""PrivacyLedger: epsilon every round, budget look-ahead, checkpoint state."""

import math
from dataclasses import replace

import pytest

from dpemb.privacy import (
    PrivacyLedger,
    PrivacySpec,
    PrivacyStateError,
    UnsupportedAccountantError,
    epsilon_for,
)
from dpemb.training.round_log import privacy_report


@pytest.fixture
def spec():
    return PrivacySpec(population=20_000, clients_per_round=100, users_per_client=2,
                       noise_multiplier=0.8, clip_norm=0.3, rounds=500)


def test_epsilon_tracks_the_rounds_composed(spec):
    ledger = PrivacyLedger(spec)
    assert ledger.rounds == 0 and ledger.epsilon() == 0.0
    previous = 0.0
    for _ in range(30):
        ledger.step()
        eps = ledger.epsilon("rdp")
        assert eps > previous
        previous = eps
    ledger.step(70)
    assert ledger.rounds == 100
    for acc in ("rdp", "pld"):
        assert ledger.epsilon(acc) == pytest.approx(epsilon_for(replace(spec, rounds=100), acc), rel=1e-9)
    assert ledger.epsilon_after(101) > ledger.epsilon()
    assert ledger.epsilon_after(101) == pytest.approx(epsilon_for(spec, rounds=101), rel=1e-9)


def test_entries_and_description(spec):
    ledger = PrivacyLedger(spec)
    ledger.step()
    ledger.step(4)
    entries = ledger.entries()
    assert len(entries) == 1 and (entries[0]["from_round"], entries[0]["to_round"]) == (1, 5)
    assert "Poisson" in entries[0]["mechanism"] and "2C" in entries[0]["mechanism"]
    text = privacy_report(spec, ledger, seeded=False)["statement_rdp"]  # what a run's report states
    assert "RDP accountant" in text and "delta = 5e-06" in text and "user-level" in text
    assert "add/remove-one-user" in text


def test_state_round_trip_and_refusal(spec):
    ledger = PrivacyLedger(spec)
    ledger.step(42)
    state = ledger.state_dict()
    again = PrivacyLedger(spec)
    again.load_state_dict(state)
    assert again.rounds == 42 and again.epsilon() == ledger.epsilon()
    for change in ({"noise_multiplier": 0.9}, {"clip_norm": 0.5}, {"users_per_client": 1}, {"delta": 1e-6}):
        with pytest.raises(PrivacyStateError, match="different privacy spec"):
            PrivacyLedger(replace(spec, **change)).load_state_dict(state)
    with pytest.raises(ValueError):
        ledger.step(-1)


def test_nonprivate_and_unsupported():
    nonpriv = PrivacyLedger(PrivacySpec(population=100, clients_per_round=5, noise_multiplier=0.0,
                                        nonprivate=True))
    nonpriv.step()
    assert math.isinf(nonpriv.epsilon("rdp"))
    assert privacy_report(nonpriv.spec, nonpriv, seeded=False)["statement"].startswith("not private")
    fixed = PrivacyLedger(PrivacySpec(population=100, clients_per_round=5, sampling="fixed"))
    fixed.step()
    assert fixed.epsilon("rdp") > 0
    with pytest.raises(UnsupportedAccountantError):
        fixed.epsilon("pld")

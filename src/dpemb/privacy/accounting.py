"""Accounting facade: specs, dp_accounting events, epsilon, the ledger and calibration.

Import from here (or from ``dpemb.privacy``). The pieces live in one module each:
``spec`` (PrivacySpec), ``events`` (DpEvents and epsilon), ``tree_accounting`` (S for
DP-FTRL), ``statements`` (sentences naming accountant, delta, unit and relation),
``ledger`` (PrivacyLedger) and ``calibration`` (noise for a target, rounds for a
budget, extrapolation to a larger population).
"""

from __future__ import annotations

from dpemb.privacy.calibration import (
    CalibrationError,
    Extrapolation,
    calibrate_gaussian_releases,
    calibrate_noise_multiplier,
    calibrated_spec,
    check_epsilon_budget,
    extrapolate,
    max_rounds,
)
from dpemb.privacy.events import (
    PLD_DISCRETIZATION,
    EpsilonCurve,
    UnsupportedAccountantError,
    compute_epsilon,
    epsilon_for,
    gaussian_releases_event,
    round_event,
    supported_accountants,
    training_event,
)
from dpemb.privacy.ledger import PrivacyLedger, PrivacyStateError
from dpemb.privacy.relations import Relation
from dpemb.privacy.spec import ACCOUNTANTS, PrivacySpec, PrivacySpecError
from dpemb.privacy.statements import describe_epsilon, describe_mechanism

__all__ = [
    "ACCOUNTANTS", "PLD_DISCRETIZATION", "CalibrationError", "EpsilonCurve", "Extrapolation",
    "PrivacyLedger", "PrivacySpec", "PrivacySpecError", "PrivacyStateError", "Relation",
    "UnsupportedAccountantError", "calibrate_gaussian_releases", "calibrate_noise_multiplier", "calibrated_spec",
    "check_epsilon_budget",
    "compute_epsilon", "describe_epsilon", "describe_mechanism", "epsilon_for", "extrapolate",
    "gaussian_releases_event", "max_rounds", "round_event", "supported_accountants",
    "training_event",
]

"""dpemb.privacy: the privacy-critical path, small enough to audit in one sitting.

Clipping, noise, sampling and accounting on tensors and counts only; imports nothing from
models, algorithms, training or cli. Conventions (z relative to the L2 sensitivity of the
clipped sum, which follows from K and the relation): docs/PRIVACY.md, "Conventions".

Names are loaded on first use, so accounting alone (``dpemb account``) does not import torch.
"""

from __future__ import annotations

from dpemb.lazy import lazy_exports

_WHERE = {
    "relations": ("Relation", "user_sensitivity", "describe_relation"),
    "clipping": ("ClipAndSum", "ClippedSum"),
    "adaptive_clipping": ("AdaptiveClipState", "AdaptiveClipping", "AdaptiveClippingError"),
    "noise": ("GaussianNoise", "NoiseMechanism", "describe_sampler"),
    "delta": ("LargeDeltaError", "check_delta", "default_delta", "delta_warning", "resolve_delta"),
    "tree": ("TreeAggregationNoise",),
    "sampling": ("VirtualClientSampler",),
    "spec": ("ACCOUNTANTS", "PrivacySpec", "PrivacySpecError"),
    "events": (
        "PLD_DISCRETIZATION", "EpsilonCurve", "UnsupportedAccountantError",
        "compute_epsilon", "epsilon_for", "gaussian_releases_event", "round_event",
        "supported_accountants", "training_event",
    ),
    "statements": ("describe_epsilon", "describe_mechanism", "describe_schedule"),
    "ledger": ("PrivacyLedger", "PrivacyStateError"),
    "calibration": (
        "CalibrationError", "Extrapolation", "calibrate_extrapolated", "calibrate_gaussian_releases",
        "calibrate_noise_multiplier", "calibrated_spec", "check_epsilon_budget", "extrapolate", "max_rounds",
    ),
    "advice": ("cohort_warnings",),
    "plan": ("PrivacyPlan", "make_accumulator", "make_noise", "make_sampler"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, {n: module for module, names in _WHERE.items() for n in names})

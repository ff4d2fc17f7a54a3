"""The privacy inputs fail closed in the library: a noise multiplier outside the range where
dp_accounting's arithmetic holds, a NaN epsilon budget, a missing dp_accounting, and the
warning for a delta just below 1/N (issue #33, item 3)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from dpemb.privacy.spec import MAX_NOISE_MULTIPLIER, MIN_NOISE_MULTIPLIER
from dpemb.privacy import (
    CalibrationError,
    PrivacySpec,
    PrivacySpecError,
    calibrate_noise_multiplier,
    check_epsilon_budget,
    epsilon_for,
    extrapolate,
    gaussian_releases_event,
)
from dpemb.privacy.advice import cohort_warnings
from dpemb.privacy.delta import default_delta, delta_warning
from dpemb.transfer.budget import PrivacyConfigError, PrivacyRequest, plan_noise
from tests.conftest import subprocess_env

CONFIGS = [("gaussian", "poisson"), ("gaussian", "fixed"), ("gaussian", "epoch"), ("tree", "epoch")]


def spec(z: float, mechanism: str = "gaussian", sampling: str = "poisson", **kw) -> PrivacySpec:
    return PrivacySpec(population=100, clients_per_round=3, users_per_client=2, noise_multiplier=z, rounds=10,
                       mechanism=mechanism, sampling=sampling, **kw)


@pytest.mark.parametrize("z", [1e-300, 1e-154, 1e-7])
def test_a_vanishing_noise_multiplier_is_refused_and_the_advice_works(z):
    # at 1e-300 dp_accounting divided by zero; at 1e-154 it reported epsilon 0 for Poisson sampling
    with pytest.raises(PrivacySpecError, match="no usable epsilon") as e:
        spec(z)
    msg = str(e.value)
    assert "\n" not in msg and "nonprivate=True" in msg and f">= {MIN_NOISE_MULTIPLIER:g}" in msg
    assert spec(0.0, nonprivate=True).nonprivate  # the advice: a run without noise, explicitly
    for mechanism, sampling in CONFIGS:  # or the floor, whose epsilon is finite (and huge) everywhere
        eps = epsilon_for(spec(MIN_NOISE_MULTIPLIER, mechanism, sampling), "rdp")
        assert math.isfinite(eps) and eps > 1e11, (mechanism, sampling, eps)


@pytest.mark.parametrize("z", [1e300, 1e154, 3e8])
def test_a_huge_noise_multiplier_is_refused_and_the_ceiling_is_accounted(z):
    # 1e300: OverflowError in every accountant; 3e8: "math domain error" with fixed-size sampling
    with pytest.raises(PrivacySpecError, match=re.escape(f"<= {MAX_NOISE_MULTIPLIER:g}")):
        spec(z)
    for mechanism, sampling in CONFIGS:
        assert epsilon_for(spec(MAX_NOISE_MULTIPLIER, mechanism, sampling), "rdp") == pytest.approx(0.0, abs=1e-9)


def test_every_path_to_a_noise_multiplier_uses_the_range():
    with pytest.raises(ValueError, match="no usable epsilon"):
        gaussian_releases_event(1e-300, 3)
    with pytest.raises(PrivacyConfigError, match="no usable epsilon"):
        PrivacyRequest(noise_multiplier=1e-300, accountant="rdp")
    with pytest.raises(PrivacyConfigError, match="exceeds"):
        PrivacyRequest(noise_multiplier=1e300)
    # calibration stays in the range: a target met by any noise says so instead of dividing by zero
    with pytest.raises(CalibrationError, match="1e-06"):
        calibrate_noise_multiplier(spec(1.0), 1e300)
    # an extrapolation whose scaled z leaves the range says which one, instead of a traceback
    with pytest.raises(PrivacySpecError, match="no extrapolation to 10,000,000,000 users"):
        extrapolate(spec(300.0), 10**10)
    assert math.isfinite(extrapolate(spec(300.0), 10**7).epsilon)


def test_epsilon_budget_must_be_positive_and_finite_and_belong_to_a_private_run():
    private = spec(1.0)
    for bad in (math.nan, math.inf, 0.0, -1.0):
        with pytest.raises(ValueError, match="epsilon budget must be positive and finite"):
            check_epsilon_budget(bad, private)
    with pytest.raises(ValueError, match="non-private run has no epsilon"):
        check_epsilon_budget(2.0, spec(0.0, nonprivate=True))
    assert check_epsilon_budget(2.0, private) == 2.0 and check_epsilon_budget(None, private) is None


def test_train_federated_refuses_a_nan_budget_before_any_work(tmp_path):
    from dpemb.training.federated import train_federated

    with pytest.raises(ValueError, match="epsilon budget must be positive and finite, got nan"):
        train_federated(None, None, None, None, spec(1.0), None, epsilon_budget=math.nan)  # type: ignore[arg-type]


def test_delta_just_below_one_over_n_warns_naming_the_default():
    n = 1000
    just_below = 0.99999999 / n
    w = delta_warning(just_below, n)
    assert w is not None and "delta close to 1/N" in w and "1/(10 N)" in w and f"{default_delta(n):.3g}" in w
    assert delta_warning(default_delta(n), n) is None and delta_warning(1e-6, n) is None
    assert "large delta" in delta_warning(1.0 / n, n)  # forced
    s = PrivacySpec(population=n, clients_per_round=10, noise_multiplier=1.0, delta=just_below)
    assert any("delta close to 1/N" in x for x in cohort_warnings(s))
    assert not any("delta" in x for x in cohort_warnings(replace(s, delta=None)))  # the default: no warning
    plan = plan_noise(PrivacyRequest(noise_multiplier=1.0, delta=just_below), 3, num_units=n)
    assert len(plan.warnings) == 1 and "delta close to 1/N" in plan.warnings[0]
    assert plan_noise(PrivacyRequest(noise_multiplier=1.0), 3, num_units=n).warnings == ()


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "dp_accounting" or name.startswith("dp_accounting."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
"""


def test_a_missing_dp_accounting_is_one_error_naming_the_install():
    code = BLOCK + """
from dpemb.privacy import PrivacySpec, describe_epsilon
PrivacySpec(population=100, clients_per_round=5)  # a spec needs no accountant
from dpemb.privacy.dependency import AccountantMissingError
try:
    import dpemb.privacy.events
except AccountantMissingError as e:
    print("ERR", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERR the privacy accountant dp_accounting cannot be imported")
    assert "pip install dp-accounting==0.6.0" in out.stdout and "pip install -e ." in out.stdout


def test_an_rdp_epsilon_at_the_accountants_floor_says_why_it_does_not_fall():
    """At 10M users an extrapolated RDP epsilon read 0.0080 against 0.00575 at 1M: both
    are the RDP conversion's floor at their delta (1e-7, 1e-6), which the statement says."""
    import math

    from dpemb.privacy.events import RDP_ORDERS
    from dpemb.privacy.events import rdp_floor_epsilon as rdp_floor
    from dpemb.privacy.statements import describe_epsilon

    a = max(RDP_ORDERS)
    assert rdp_floor(1e-7) == pytest.approx(math.log1p(-1 / a) - (math.log(1e-7) + math.log(a)) / (a - 1), rel=1e-9)
    assert rdp_floor(1e-6) == pytest.approx(0.00575, abs=5e-5) and rdp_floor(1e-7) == pytest.approx(0.0080, abs=5e-5)
    kw = dict(accountant="rdp", unit="user", relation="add-remove")
    assert "floor" in describe_epsilon(0.00807, delta=1e-7, **kw)
    assert "floor" not in describe_epsilon(0.5, delta=1e-7, **kw)
    assert "floor" not in describe_epsilon(0.00807, delta=1e-7, **{**kw, "accountant": "pld"})


def test_train_help_shows_every_default():
    import subprocess
    import sys

    text = subprocess.run([sys.executable, "-m", "dpemb", "train", "--help"], capture_output=True, text=True,
                          check=True, env={**__import__("os").environ, "COLUMNS": "200"}).stdout
    for flag, default in (("--lr", "0.05"), ("--client-lr", "0.05"), ("--rounds", "200"), ("--embedding-dim", "128")):
        lines = text.splitlines()
        i = next(i for i, l in enumerate(lines) if l.strip().startswith(flag + " "))
        block = " ".join(lines[i:i + 2])  # a long flag's help starts on the next line
        assert f"default: {default}" in block, block

"""The delta rule (default 1/(10 N), a delta >= 1/N refused unless forced) and the secure
noise knob of PrivacySpec reaching the noise objects through the factory."""

from dataclasses import replace

import pytest

from dpemb.privacy.advice import cohort_warnings
from dpemb.privacy.delta import LargeDeltaError, check_delta, default_delta, resolve_delta
from dpemb.privacy.events import epsilon_for
from dpemb.privacy.plan import make_noise
from dpemb.privacy.spec import PrivacySpec, PrivacySpecError


def test_default_delta_is_well_below_one_over_n():
    for n in (27, 1000, 10_000_000):
        assert default_delta(n) == pytest.approx(1 / (10 * n)) and default_delta(n) < 1 / n
        spec = PrivacySpec(population=n, clients_per_round=1)
        assert spec.delta is None and spec.resolved_delta == pytest.approx(1 / (10 * n))
    assert resolve_delta(None, 27) == pytest.approx(1 / 270)
    assert resolve_delta(1e-3, 27) == 1e-3


def test_large_delta_refused_with_the_rule_unless_forced():
    with pytest.raises(LargeDeltaError) as e:
        check_delta(0.04, 27)
    msg = str(e.value)
    assert "delta must be well below 1/N" in msg and "fails for some user" in msg
    assert "got delta=0.04 >= 1/27" in msg and "--allow-large-delta" in msg
    with pytest.raises(LargeDeltaError):
        check_delta(1 / 27, 27)  # exactly 1/N is refused too
    assert check_delta(0.04, 27, force=True) == 0.04
    assert check_delta(0.9 / 27, 27) == pytest.approx(0.9 / 27)  # below 1/N is accepted
    with pytest.raises(LargeDeltaError, match="some example"):
        check_delta(0.5, 10, unit="example")
    for bad in (0.0, 1.0, -1e-3, float("nan"), True):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            check_delta(bad, 1000, force=True)


def test_spec_refuses_large_delta_unless_allowed_and_warns_when_allowed():
    with pytest.raises(PrivacySpecError, match=r"delta must be well below 1/N.*got delta=0.0371 >= 1/27"):
        PrivacySpec(population=27, clients_per_round=3, delta=0.0371)
    forced = PrivacySpec(population=27, clients_per_round=3, delta=0.0371, allow_large_delta=True)
    assert forced.resolved_delta == 0.0371
    assert epsilon_for(forced) > 0  # statements keep working
    assert any("large delta" in w for w in cohort_warnings(forced))
    assert not any("large delta" in w for w in cohort_warnings(replace(forced, delta=None)))
    assert forced.fingerprint() != replace(forced, allow_large_delta=False, delta=1e-3).fingerprint()


def test_secure_noise_in_the_spec_reaches_gaussian_and_tree_noise():
    spec = PrivacySpec(population=1000, clients_per_round=10, noise_multiplier=1.0, secure_noise=True)
    assert make_noise(spec).secure and not make_noise(replace(spec, secure_noise=False)).secure
    tree = replace(spec, mechanism="tree", sampling=None, relation=None)
    assert make_noise(tree).secure
    assert not make_noise(spec, secure=False).secure  # an explicit argument wins
    with pytest.raises(ValueError, match="cannot be seeded"):
        make_noise(spec, seed=3)
    assert spec.to_dict()["secure_noise"] is True  # recorded in config.json / reports
    assert spec.fingerprint() != replace(spec, secure_noise=False).fingerprint()
    with pytest.raises(PrivacySpecError, match="secure_noise"):
        PrivacySpec(population=1000, clients_per_round=10, noise_multiplier=0.0, nonprivate=True, secure_noise=True)

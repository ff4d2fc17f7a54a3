"""Example-level audit of DP classifiers on features (dpemb.transfer.audit): a left-out
canary is exactly a removed row, the correct mechanism passes, noise off is caught.

Features are synthetic (d = 512, five classes; a backbone's pooled features have about
that many dimensions): the canaries are random directions, nearly orthogonal to each
other at that size. The planted bug goes in through a test-only monkeypatch of the
privacy layer's Gaussian noise, never a flag."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.privacy.noise import GaussianNoise
from dpemb.transfer.audit import NOT_RELEASED, TransferAuditError, make_canary_examples, transfer_audit
from dpemb.transfer.config import TransferConfig
from dpemb.transfer.features import FeatureSet
from dpemb.transfer.prepare import prepare_features, with_absent_rows
from dpemb.transfer.statistics import class_gramians, class_sums, clipped_gradient_sum, gramian, newton_statistics

CANARIES = 1000


def features(n: int = 500, d: int = 512, k: int = 5, seed: int = 0) -> FeatureSet:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    x = np.abs(rng.normal(size=(n, d))) + 2.0 * np.eye(k, d)[y]  # non-negative, like pooled features
    return FeatureSet(x.astype(np.float32), y.astype(np.int64), tuple("abcde")[:k], users=np.arange(n) // 2)


@pytest.mark.parametrize("unit", ["example", "user"])
def test_absent_rows_are_removed_rows_with_n_fixed(unit):
    """Every released statistic of the prepared data with some units at weight 0 equals the
    statistic of the data without those units, while N (num_units) stays: the audit's
    "left out" canary. (A canary is a whole unit: one example, or a user of one row.)"""
    fs = features(n=60, d=8, k=3)
    users = np.arange(60) if unit == "example" else np.arange(60) // 2
    absent = np.isin(np.arange(60), [3, 10, 11, 40]) if unit == "example" else np.isin(users, [5, 20])
    kw = dict(num_classes=3, clip_norm=1.0, unit=unit)
    full = prepare_features(fs.features, fs.labels, users=users if unit == "user" else None, **kw)
    full.class_gramians()  # fill the cache: it must not leak into the copy
    zeroed = with_absent_rows(full, absent)
    kept = prepare_features(fs.features[~absent], fs.labels[~absent],
                            users=users[~absent] if unit == "user" else None, **kw)
    assert zeroed.num_units == full.num_units and zeroed.weights[absent].abs().sum() == 0
    w = torch.randn(3, 8, dtype=torch.float64)
    pairs = [
        (gramian(zeroed), gramian(kept)), (class_gramians(zeroed), class_gramians(kept)),
        (class_sums(zeroed), class_sums(kept)),
        (clipped_gradient_sum(zeroed, w, -1.0, 0.5), clipped_gradient_sum(kept, w, -1.0, 0.5)),
        *zip(newton_statistics(zeroed, w, 0.0, 0.5), newton_statistics(kept, w, 0.0, 0.5)),
        *zip(newton_statistics(zeroed, 0 * w, 0.0, 0.5), newton_statistics(kept, 0 * w, 0.0, 0.5)),
    ]
    for a, b in pairs:
        assert torch.allclose(a.value[0], b.value[0], atol=1e-10) and a.sensitivity == b.sensitivity
    assert not torch.allclose(zeroed.class_gramians(), full.class_gramians())  # a fresh cache
    with pytest.raises(ValueError):
        with_absent_rows(full, absent[:10])


def test_canary_examples_are_keyed_rows_of_norm_c():
    a = make_canary_examples(200, 16, 5, 2.0, seed=3)
    b = make_canary_examples(200, 16, 5, 2.0, seed=3)
    assert np.array_equal(a.features, b.features) and np.array_equal(a.included, b.included)
    assert np.allclose(np.linalg.norm(a.features, axis=1), 2.0, rtol=1e-6)
    assert set(a.labels.tolist()) == set(range(5)) and 60 < a.included.sum() < 140
    with pytest.raises(TransferAuditError):
        make_canary_examples(5, 16, 5, 1.0)


@pytest.fixture(scope="module")
def fs() -> FeatureSet:
    return features()


def _audit(fs, method: str, bug: str | None):
    cfg = TransferConfig(method=method, epsilon=1.0, seed=1)
    with pytest.MonkeyPatch.context() as mp:
        if bug == "noise off":  # TEST-ONLY: the noise is never added, the accountant still believes z
            mp.setattr(GaussianNoise, "add", lambda self, clipped: [v.clone() for v in clipped.value])
        return transfer_audit(fs, cfg, CANARIES, canary_seed=2)


def test_correct_dp_ls_stays_below_reported(fs):
    audit = _audit(fs, "dp-ls", None)
    a = audit.record
    assert a["epsilon_reported"] == pytest.approx(1.0, rel=1e-3) and a["epsilon_reported_accountant"] == "pld"
    assert a["unit"] == "example" and a["relation"] == "add-remove" and a["canaries"] == CANARIES
    assert a["units"] == {"real": 500, "canary": CANARIES, "accounted": 500 + CANARIES}
    assert a["delta"] == pytest.approx(1 / (10 * (500 + CANARIES)))  # the canaries are units of N
    assert a["epsilon_lower_bound"] <= a["epsilon_reported"] and not a["accounted_curve_rejected"]
    assert a["mu_accounted"] == pytest.approx(np.sqrt(3) / audit.run.plan.noise_multiplier)
    assert not a["warning"] and a["release"] == NOT_RELEASED
    assert "(PLD, delta = " in a["statement"] and "example-level, add/remove-one-example" in a["statement"]


@pytest.mark.parametrize("method", ["dp-ls", "dp-fc"])
def test_noise_off_is_caught(fs, method):
    a = _audit(fs, method, "noise off").record
    assert a["epsilon_lower_bound"] > a["epsilon_reported"] + 0.5, a["statement"]
    assert a["accounted_curve_rejected"] and a["epsilon_lower_bound_fdp"] > 2 * a["epsilon_reported"]
    assert "WARNING" in a["statement"]


def test_refuses_a_run_without_noise(fs):
    with pytest.raises(TransferAuditError, match="DP method"):
        transfer_audit(fs, TransferConfig(method="dp-ls", nonprivate=True), 100)
    with pytest.raises(TransferAuditError, match="DP method"):
        transfer_audit(fs, TransferConfig(method="non-private"), 100)

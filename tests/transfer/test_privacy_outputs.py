"""What a transfer run releases and under which delta: default delta 1/(10 N), refusal of
delta >= 1/N, the secure noise sampler, and exact counts kept out of the released summary."""

from __future__ import annotations

import numpy as np
import pytest

import dpemb.privacy.noise as noise_mod
from dpemb.transfer.budget import PrivacyConfigError
from dpemb.transfer.config import TransferConfig
from dpemb.transfer.features import FeatureSet
from dpemb.transfer.runner import train_transfer
from tests.conftest import spy_standard_normal

K, D = 3, 8


def _features(n: int = 300, users: int | None = None) -> FeatureSet:
    rng = np.random.default_rng(0)
    y = np.arange(n) % K
    x = rng.normal(size=(n, D)) + 2.0 * np.eye(K, D)[y]
    u = np.arange(n) if users is None else np.arange(n) % users
    return FeatureSet(x.astype(np.float32), y.astype(np.int64), ("a", "b", "c"), users=u)


def test_default_delta_is_one_over_ten_n_privacy_units():
    run = train_transfer(_features(300), TransferConfig(method="dp-ls", epsilon=1.0))
    assert run.plan.delta == pytest.approx(1 / 3000) and run.plan.delta < 1 / 300
    assert "delta = 0.000333" in run.epsilon_sentence
    by_user = train_transfer(_features(300, users=50), TransferConfig(method="dp-ls", epsilon=1.0, unit="user"))
    assert by_user.plan.delta == pytest.approx(1 / 500)  # N = 50 users, not 300 examples


def test_delta_of_one_over_n_or_more_is_refused_unless_forced():
    fs = _features(300)
    with pytest.raises(PrivacyConfigError) as e:
        train_transfer(fs, TransferConfig(method="dp-ls", epsilon=1.0, delta=1 / 300))
    assert "delta must be well below 1/N" in str(e.value) and ">= 1/300" in str(e.value)
    assert "some example" in str(e.value)
    run = train_transfer(fs, TransferConfig(method="dp-ls", epsilon=1.0, delta=1 / 300, allow_large_delta=True))
    assert run.plan.delta == pytest.approx(1 / 300) and "epsilon = " in run.epsilon_sentence
    assert train_transfer(fs, TransferConfig(method="dp-ls", epsilon=1.0, delta=1e-4)).plan.delta == 1e-4


@pytest.mark.parametrize("method", ["dp-ls", "dp-sgd", "dp-newton", "dp-fc"])
def test_secure_noise_reaches_the_hardened_sampler(monkeypatch, method):
    seen = spy_standard_normal(monkeypatch, noise_mod)
    extra = {"steps": 2} if method in ("dp-sgd", "dp-fc") else {}
    run = train_transfer(_features(), TransferConfig(method=method, epsilon=1.0, secure_noise=True, **extra))
    assert seen and all(seen) and len(seen) == run.plan.num_releases
    assert run.sampler.startswith("noise sampler: secure") and run.to_dict()["noise_sampler"] == run.sampler
    assert "noise sampler: secure" in run.report()
    seen.clear()
    seeded = train_transfer(_features(), TransferConfig(method=method, epsilon=1.0, seed=1, **extra))
    assert seen and not any(seen) and "SEEDED" in seeded.sampler


def test_secure_noise_refuses_a_seed_and_a_run_without_noise():
    with pytest.raises(ValueError, match="cannot be combined with a seed"):
        TransferConfig(method="dp-ls", epsilon=1.0, seed=3, secure_noise=True)
    with pytest.raises(ValueError, match="non-private"):
        TransferConfig(method="dp-ls", nonprivate=True, secure_noise=True)
    with pytest.raises(ValueError, match="non-private"):
        TransferConfig(method="non-private", secure_noise=True)


def test_released_summary_holds_no_exact_counts_of_the_training_data():
    fs = _features(300, users=50)
    run = train_transfer(fs, TransferConfig(method="dp-fc", epsilon=1.0, unit="user", steps=2), fs)
    released = run.to_dict()
    flat = repr(released)
    for key in ("num_train_examples", "num_train_units", "num_clipped_features", "train_seconds"):
        assert key not in flat
    assert " s)" not in run.report()  # the training time (timing rule): private, like the counts
    assert released["top1"] is not None and released["epsilon"] > 0 and released["releases"]
    private = run.private_diagnostics()
    assert private["private"].startswith("private: un-noised statistics of the training data")
    assert (private["num_train_examples"], private["num_train_units"]) == (300, 50)
    assert private["num_clipped_features"] == run.num_clipped_features
    assert private["train_seconds"] == round(run.train_seconds, 3) and run.train_seconds > 0  # DP-FC: < 1 ms

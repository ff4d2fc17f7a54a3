"""The noise the methods add: right scale, independent across classes and entries,
fresh across calls and runs, reproducible under a seed."""

from __future__ import annotations

import numpy as np
import torch

from dpemb.transfer.budget import PrivacyRequest, ReleaseMechanism, plan_noise
from dpemb.transfer.config import TransferConfig
from dpemb.transfer.features import FeatureSet
from dpemb.transfer.objectives import weighted_class_sums
from dpemb.transfer.runner import prepare_train, train_prepared, train_transfer

K, D = 5, 40


def _features(n: int = 400, seed: int = 0) -> FeatureSet:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    x = rng.normal(size=(n, D)) + 2.0 * np.eye(K, D)[y]
    return FeatureSet(x.astype(np.float32), y.astype(np.int64), tuple("abcde"), users=np.arange(n))


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
    return float((a @ b) / (a.norm() * b.norm()))


def test_dp_ls_noise_has_the_right_scale_and_is_independent_across_classes():
    fs = _features()
    cfg = TransferConfig(method="dp-ls", noise_multiplier=3.0, clip_norm=0.5, seed=11)
    prep = prepare_train(fs, cfg)
    run = train_prepared(prep, cfg, keep_raw=True)
    a = prep.class_gramians()
    noise = {
        "gramian": run.raw["gramian"][0] - a.sum(0),
        "class_gramians": run.raw["class_gramians"][0] - a,
        "class_sums": run.raw["class_sums"][0] - weighted_class_sums(prep),
    }
    expected = {"gramian": 3.0 * 0.25, "class_gramians": 3.0 * 0.25, "class_sums": 3.0 * 0.5}
    for name, e in noise.items():
        n = e.numel()
        sd = float(e.std())
        # accept the right scale (sampling error ~ 1/sqrt(2n)); reject a sqrt(2) or sqrt(K) error
        assert abs(sd / expected[name] - 1) < 5 / np.sqrt(2 * n), (name, sd, expected[name])
        for wrong in (np.sqrt(2), 1 / np.sqrt(2), np.sqrt(K)):
            assert abs(sd / (expected[name] * wrong) - 1) > 0.2
        assert abs(float(e.mean())) < 5 * expected[name] / np.sqrt(n)
    # independence across classes: the public code reused one key for every class
    for blk in ("class_gramians", "class_sums"):
        e = noise[blk]
        for i in range(K):
            for j in range(i + 1, K):
                assert abs(_corr(e[i], e[j])) < 5 / np.sqrt(e[i].numel()), (blk, i, j)
    # ... and across the three releases
    assert abs(_corr(noise["gramian"], noise["class_gramians"][0])) < 5 / D


def test_newton_noise_scale_matches_its_sensitivities():
    fs = _features()
    cfg = TransferConfig(method="dp-newton", noise_multiplier=2.0, clip_norm=1.0, seed=3, alpha=0.5, bias=0.0)
    run = train_transfer(fs, cfg, keep_raw=True)
    from dpemb.transfer.objectives import newton_sensitivities, newton_statistics

    prep = prepare_train(fs, cfg)
    h, g = newton_statistics(prep, torch.zeros(K, D, dtype=torch.float64), 0.0, 0.5)
    s_h, s_g = newton_sensitivities(1.0, K, 0.5, 0.0, at_zero=True)
    for raw, exact, s in ((run.raw["hessians[0]"][0], h, s_h), (run.raw["gradients[0]"][0], g, s_g)):
        e = raw - exact
        assert abs(float(e.std()) / (2.0 * s) - 1) < 5 / np.sqrt(2 * e.numel())
        for i in range(K):
            for j in range(i + 1, K):
                assert abs(_corr(e[i], e[j])) < 5 / np.sqrt(e[i].numel())


def test_fresh_noise_across_calls_and_steps():
    plan = plan_noise(PrivacyRequest(noise_multiplier=1.0), 2)
    mech = ReleaseMechanism(plan, seed=5)
    z = torch.zeros(2000, dtype=torch.float64)
    a = mech.release("a", z, 1.0)
    b = mech.release("b", z, 1.0)
    assert abs(_corr(a, b)) < 5 / np.sqrt(2000)
    # DP-SGD: the noise of successive gradient releases is fresh
    fs = _features()
    cfg = TransferConfig(method="dp-sgd", noise_multiplier=1.0, steps=3, seed=9)
    run = train_transfer(fs, cfg, keep_raw=True)
    g = [run.raw[f"gradient[{t}]"][0] for t in range(3)]
    assert not torch.equal(g[0], g[1]) and not torch.equal(g[1], g[2])


def test_seed_reproduces_and_unseeded_runs_differ():
    fs = _features()
    for method in ("dp-ls", "dp-sgd", "dp-newton", "dp-fc"):
        extra = {"steps": 2} if method in ("dp-sgd", "dp-fc") else {}
        cfg = TransferConfig(method=method, noise_multiplier=2.0, seed=123, **extra)
        r1, r2 = train_transfer(fs, cfg), train_transfer(fs, cfg)
        assert r1.seeded and r2.seeded
        assert torch.equal(r1.model.weights, r2.model.weights), method
        r3 = train_transfer(fs, TransferConfig(method=method, noise_multiplier=2.0, seed=124, **extra))
        assert not torch.equal(r1.model.weights, r3.model.weights), method
        u1 = train_transfer(fs, TransferConfig(method=method, noise_multiplier=2.0, **extra))
        u2 = train_transfer(fs, TransferConfig(method=method, noise_multiplier=2.0, **extra))
        assert not u1.seeded
        assert not torch.equal(u1.model.weights, u2.model.weights), method
        assert "seeded" in r1.report() and "seeded" not in u1.report()

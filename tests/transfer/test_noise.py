"""The noise the methods add: right scale, independent across classes, entries and
releases, fresh across calls and runs, reproducible under a seed.

With all-zero features every statistic (Gramians, class sums, gradients, Hessians) is
exactly zero, so every released value IS the noise: this isolates it for all four
methods without re-deriving any statistic.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.relations import Relation
from dpemb.transfer.budget import PrivacyRequest, ReleaseMechanism, plan_noise
from dpemb.transfer.config import TransferConfig
from dpemb.transfer.features import FeatureSet
from dpemb.transfer.psd import symmetrize
from dpemb.transfer.runner import train_transfer
from dpemb.transfer.statistics import newton_sensitivities

K, D = 5, 40


def _features(n: int = 400, seed: int = 0, zero: bool = False) -> FeatureSet:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % K
    x = np.zeros((n, D)) if zero else rng.normal(size=(n, D)) + 2.0 * np.eye(K, D)[y]
    return FeatureSet(x.astype(np.float32), y.astype(np.int64), tuple("abcde"), users=np.arange(n))


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.flatten() - a.mean(), b.flatten() - b.mean()
    return float((a @ b) / (a.norm() * b.norm()))


def _is_normal_with_std(e: torch.Tensor, std: float) -> None:
    """Accept N(0, std^2) entries; reject std off by sqrt(2) (or more), a shared draw, a bias."""
    v = e.flatten().numpy() / std
    n = len(v)
    assert abs(v.std() - 1) < 5 / np.sqrt(2 * n), (v.std(), n)
    assert abs(v.mean()) < 5 / np.sqrt(n)
    assert stats.kstest(v, "norm").pvalue > 1e-4
    for wrong in (np.sqrt(2), 1 / np.sqrt(2)):
        assert abs(v.std() / wrong - 1) > 0.2


C, Z, GCLIP = 0.5, 3.0, 0.7
SENS = {  # the sensitivity every release must carry, for z = Z and neg_weight alpha = 0.5
    "gramian": C**2, "class_gramians": C**2, "class_sums": C, "covariance": C**2, "gradient": GCLIP,
    "hessians": newton_sensitivities(C, K, 0.5, 0.0, at_zero=True)[0],
    "gradients": newton_sensitivities(C, K, 0.5, 0.0, at_zero=True)[1],
}
SENS_LATER = dict(zip(("hessians", "gradients"), newton_sensitivities(C, K, 0.5, 0.0, at_zero=False)))


@pytest.mark.parametrize("method", ["dp-ls", "dp-sgd", "dp-newton", "dp-fc"])
def test_every_release_is_fresh_independent_gaussian_noise_of_the_stated_scale(method):
    extra = {"steps": 3, "grad_clip_norm": GCLIP} if method in ("dp-sgd", "dp-fc") else {}
    if method == "dp-newton":
        extra = {"steps": 2, "alpha": 0.5, "bias": 0.0}
    cfg = TransferConfig(method=method, noise_multiplier=Z, clip_norm=C, seed=11, **extra)
    run = train_transfer(_features(zero=True), cfg, keep_raw=True)
    assert len(run.raw) == run.plan.num_releases == len(run.releases)
    for rec in run.releases:
        later = rec.kind in SENS_LATER and not rec.name.endswith("[0]")
        sens = (SENS_LATER if later else SENS)[rec.kind]
        assert rec.sensitivity == pytest.approx(sens) and rec.noise_std == pytest.approx(Z * sens)
        e = run.raw[rec.name][0]  # the statistic is exactly zero: this is the noise
        _is_normal_with_std(e, Z * sens)
        # independent across classes (the public JAX code reused one key per class)
        if e.shape[0] == K:
            for i in range(K):
                for j in range(i + 1, K):
                    assert abs(_corr(e[i], e[j])) < 5 / np.sqrt(e[i].numel()), (rec.name, i, j)
    # fresh across releases (steps) of one run: pairwise uncorrelated
    names = list(run.raw)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            x, y = run.raw[a][0].flatten(), run.raw[b][0].flatten()
            m = min(len(x), len(y))
            assert abs(_corr(x[:m], y[:m])) < 5 / np.sqrt(m), (a, b)


def test_symmetrised_gramian_noise_has_std_z_c2_on_the_diagonal_and_over_sqrt2_off_it():
    """The d x d noise is i.i.d. (a Gaussian mechanism on x x^T, Frobenius sensitivity C^2);
    the symmetrised matrix the solve uses has std z C^2 on the diagonal and z C^2 / sqrt(2)
    off it, with the two triangles equal and distinct entries independent."""
    cfg = TransferConfig(method="dp-ls", noise_multiplier=Z, clip_norm=C, seed=5)
    run = train_transfer(_features(zero=True), cfg, keep_raw=True)
    sym = symmetrize(run.raw["class_gramians"][0])  # (K, D, D)
    iu = torch.triu_indices(D, D, 1)
    diag = torch.diagonal(sym, dim1=-2, dim2=-1)
    off = sym[:, iu[0], iu[1]]
    _is_normal_with_std(diag, Z * C**2)
    _is_normal_with_std(off, Z * C**2 / np.sqrt(2))
    assert torch.equal(sym, sym.transpose(-1, -2))
    # neighbouring off-diagonal entries are uncorrelated
    assert abs(_corr(off[:, :-1], off[:, 1:])) < 5 / np.sqrt(off.numel())


def test_fresh_noise_across_calls_of_one_mechanism():
    plan = plan_noise(PrivacyRequest(noise_multiplier=1.0), 2, num_units=1000)
    mech = ReleaseMechanism(plan, seed=5)
    stat = ClippedSum([torch.zeros(2000, dtype=torch.float64)], 1.0, Relation.ADD_REMOVE)
    a = mech.release("a", stat)
    b = mech.release("b", stat)
    assert abs(_corr(a, b)) < 5 / np.sqrt(2000)
    assert torch.equal(stat.value[0], torch.zeros(2000, dtype=torch.float64))  # the input is not modified


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


def test_unseeded_mechanism_draws_its_seed_from_the_os(monkeypatch):
    import dpemb.privacy.noise as noise_module

    calls = []
    monkeypatch.setattr(noise_module, "secure_seed", lambda: calls.append(1) or 7)
    plan = plan_noise(PrivacyRequest(noise_multiplier=1.0), 1, num_units=1000)
    stat = ClippedSum([torch.zeros(50, dtype=torch.float64)], 1.0, Relation.ADD_REMOVE)
    a = ReleaseMechanism(plan).release("a", stat)
    assert calls == [1]
    b = ReleaseMechanism(plan, seed=7).release("a", stat)
    assert calls == [1] and torch.equal(a, b)  # the OS seed was the only source of the draws

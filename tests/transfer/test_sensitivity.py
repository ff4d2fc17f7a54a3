"""Sensitivity of every released statistic: neighbours (one unit removed) differ by at
most the sensitivity the statistic itself carries (the value the noise is scaled by),
including adversarially large features and large users, and the bound is attained (so
it is not silently loose either)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.transfer.prepare import prepare_features
from dpemb.transfer.statistics import (
    class_gramians,
    class_sums,
    clipped_gradient_sum,
    gramian,
    newton_sensitivities,
    newton_statistics,
)

K, D, C = 4, 6, 1.7


def _data(unit: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = 60
    x = rng.normal(size=(n, D)) * 10.0 ** rng.uniform(-2, 3, size=(n, 1))
    y = rng.integers(0, K, n)
    users = np.arange(n) // (3 if unit == "user" else 1)
    # adversarial unit: huge aligned features, all in one class, many rows for a user
    big = np.tile(np.full(D, 1e6), (12 if unit == "user" else 1, 1))
    x = np.vstack([x, big])
    y = np.concatenate([y, np.full(len(big), 2)])
    users = np.concatenate([users, np.full(len(big), users.max() + 1)])
    return x, y, users


def _pair(unit: str, removed: int, seed: int = 0, normalize: bool = True):
    x, y, users = _data(unit, seed)
    keep = users != removed
    full = prepare_features(x, y, num_classes=K, clip_norm=C, normalize=normalize, unit=unit, users=users)
    less = prepare_features(x[keep], y[keep], num_classes=K, clip_norm=C, normalize=normalize, unit=unit,
                            users=users[keep])
    return full, less, int(users.max())


def _fro(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t))


def _fro(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t))


def _diff(a, b) -> float:
    """Frobenius distance of two released statistics (ClippedSums)."""
    return _fro(a.value[0] - b.value[0])


@pytest.mark.parametrize("unit", ["example", "user"])
@pytest.mark.parametrize("normalize", [True, False])
def test_gramian_class_gramians_and_class_sums(unit, normalize):
    stats = {"G": gramian, "A": class_gramians, "b": class_sums}
    expected = {"G": C**2, "A": C**2, "b": C}
    worst = dict.fromkeys(stats, 0.0)
    _, _, adversary = _pair(unit, -1, normalize=normalize)
    for removed in [0, 5, adversary]:
        full, less, _ = _pair(unit, removed, normalize=normalize)
        for k, f in stats.items():
            s_full, s_less = f(full), f(less)
            assert s_full.sensitivity == pytest.approx(expected[k], rel=1e-15), k
            worst[k] = max(worst[k], _diff(s_full, s_less) / s_full.sensitivity)
    for k in stats:
        assert worst[k] <= 1 + 1e-12, k
        assert worst[k] == pytest.approx(1.0, rel=1e-9), k  # the aligned adversarial unit attains it


@pytest.mark.parametrize("unit", ["example", "user"])
def test_clipped_gradient_sum(unit):
    rng = np.random.default_rng(3)
    gclip = 0.9
    _, _, adversary = _pair(unit, -1)
    worst = 0.0
    for scale in [0.0, 1.0, 50.0]:
        w = torch.from_numpy(rng.normal(size=(K, D)) * scale)
        for removed in [0, 7, adversary]:
            full, less, _ = _pair(unit, removed)
            s_full = clipped_gradient_sum(full, w, -10.0, gclip)
            assert s_full.sensitivity == gclip
            worst = max(worst, _diff(s_full, clipped_gradient_sum(less, w, -10.0, gclip)))
    assert worst <= gclip
    assert worst == pytest.approx(gclip, rel=1e-9)


def test_clipped_gradient_matches_autograd_per_example_gradient():
    """The closed form r x^T is the true per-example gradient of the one-vs-all loss."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, D))
    y = np.arange(5) % K
    prep = prepare_features(x, y, num_classes=K, clip_norm=C, normalize=True)
    w0 = torch.from_numpy(rng.normal(size=(K, D)))
    stat = clipped_gradient_sum(prep, w0, -1.0, 1e9)  # no clipping
    assert stat.num_clipped == 0
    s = stat.value[0]
    w = w0.clone().requires_grad_(True)
    logits = prep.x @ w.T - 1.0
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, prep.onehot(), reduction="sum")
    (g,) = torch.autograd.grad(loss, w)
    torch.testing.assert_close(s, g)


@pytest.mark.parametrize("unit", ["example", "user"])
@pytest.mark.parametrize("bias,alpha", [(0.0, 1.0), (-3.0, 0.5), (2.0, 2.0)])
def test_newton_statistics_at_zero_attain_the_tight_bounds(unit, bias, alpha):
    s_h, s_g = newton_sensitivities(C, K, alpha, bias, at_zero=True)
    _, _, adversary = _pair(unit, -1)
    worst_h = worst_g = 0.0
    zero = torch.zeros(K, D, dtype=torch.float64)
    for removed in [0, 4, adversary]:
        full, less, _ = _pair(unit, removed)
        h1, g1 = newton_statistics(full, zero, bias, alpha)
        h0, g0 = newton_statistics(less, zero, bias, alpha)
        assert (h1.sensitivity, g1.sensitivity) == (s_h, s_g)  # what the noise is scaled by
        worst_h = max(worst_h, _diff(h1, h0))
        worst_g = max(worst_g, _diff(g1, g0))
    assert worst_h <= s_h * (1 + 1e-12) and worst_g <= s_g * (1 + 1e-12)
    assert worst_h == pytest.approx(s_h, rel=1e-9)
    assert worst_g == pytest.approx(s_g, rel=1e-9)


@pytest.mark.parametrize("unit", ["example", "user"])
def test_newton_statistics_away_from_zero_stay_within_general_bounds(unit):
    rng = np.random.default_rng(5)
    alpha, bias = 0.7, 0.0
    s_h, s_g = newton_sensitivities(C, K, alpha, bias, at_zero=False)
    _, _, adversary = _pair(unit, -1)
    for scale in [0.3, 3.0, 100.0]:
        w = torch.from_numpy(rng.normal(size=(K, D)) * scale)
        for removed in [1, adversary]:
            full, less, _ = _pair(unit, removed)
            h1, g1 = newton_statistics(full, w, bias, alpha)
            h0, g0 = newton_statistics(less, w, bias, alpha)
            assert (h1.sensitivity, g1.sensitivity) == (s_h, s_g)
            assert _diff(h1, h0) <= s_h * (1 + 1e-12)
            assert _diff(g1, g0) <= s_g * (1 + 1e-12)


def test_newton_statistics_match_autograd():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(30, D))
    y = rng.integers(0, K, 30)
    prep = prepare_features(x, y, num_classes=K, clip_norm=C, normalize=True)
    alpha, bias = 0.6, -0.5
    for w0 in [torch.zeros(K, D, dtype=torch.float64), torch.from_numpy(rng.normal(size=(K, D)))]:
        h, g = (stat.value[0] for stat in newton_statistics(prep, w0, bias, alpha))
        for l in range(K):
            def loss(v, l=l):
                logits = prep.x @ v + bias
                yl = prep.onehot()[:, l]
                c = yl + alpha * (1 - yl)
                return torch.nn.functional.binary_cross_entropy_with_logits(logits, yl, weight=c, reduction="sum")
            v = w0[l].clone()
            torch.testing.assert_close(h[l], torch.autograd.functional.hessian(loss, v))
            torch.testing.assert_close(g[l], torch.autograd.functional.jacobian(loss, v))

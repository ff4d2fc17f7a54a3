"""Each method computes what it claims: under the explicit non-private flag it equals an
independent (numpy / autograd) computation, and as the noise shrinks it converges there."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.transfer.config import TransferConfig
from dpemb.transfer.features import FeatureSet
from dpemb.transfer.runner import train_transfer

K, D = 4, 12


def _features(n: int = 300, seed: int = 0, sep: float = 2.5) -> FeatureSet:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, n)
    x = rng.normal(size=(n, D)) + sep * np.eye(K, D)[y] + 0.3
    return FeatureSet(x.astype(np.float32), y.astype(np.int64), tuple("abcd"), users=np.arange(n) // 2)


def _clipped(fs: FeatureSet, c: float) -> np.ndarray:
    x = fs.features.astype(np.float64)
    return c * x / np.linalg.norm(x, axis=1, keepdims=True)


def _onehot(y: np.ndarray) -> np.ndarray:
    return np.eye(K)[y]


def _sig(z):
    return 1 / (1 + np.exp(-z))


def test_dp_ls_non_private_is_the_ridge_solution():
    fs = _features()
    c, reg, alpha = 1.3, 0.7, 2.0
    run = train_transfer(fs, TransferConfig(method="dp-ls", nonprivate=True, clip_norm=c, reg=reg, alpha=alpha))
    x, y = _clipped(fs, c), _onehot(fs.labels)
    g = x.T @ x
    for l in range(K):
        xl = x[fs.labels == l]
        theta = np.linalg.solve(xl.T @ xl + alpha * g + reg * np.eye(D), y[:, l] @ x)
        np.testing.assert_allclose(run.model.weights[l].numpy(), theta, rtol=1e-8, atol=1e-10)
    assert run.plan.nonprivate and not run.releases[0].noise_std


def test_dp_ls_user_unit_weights_each_users_rows():
    fs = _features()
    c, reg = 1.0, 0.5
    run = train_transfer(fs, TransferConfig(method="dp-ls", nonprivate=True, clip_norm=c, reg=reg, alpha=1.0,
                                            unit="user"))
    x = _clipped(fs, c)
    w = 1.0 / np.bincount(fs.users)[fs.users]
    g = (x * w[:, None]).T @ x
    for l in range(K):
        m = fs.labels == l
        a = (x[m] * w[m, None]).T @ x[m]
        theta = np.linalg.solve(a + g + reg * np.eye(D), (x[m] * w[m, None]).sum(0))
        np.testing.assert_allclose(run.model.weights[l].numpy(), theta, rtol=1e-8, atol=1e-10)


def _numpy_dp_sgd(fs, c, gclip, bias, lr, steps, optimizer):
    x, y = _clipped(fs, c), _onehot(fs.labels)
    w = np.zeros((K, D))
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t in range(1, steps + 1):
        total = np.zeros_like(w)
        for i in range(len(x)):  # per-example gradient, clipped, one at a time
            gi = np.outer(_sig(x[i] @ w.T + bias) - y[i], x[i])
            total += gi * min(1.0, gclip / np.linalg.norm(gi))
        grad = total / len(x)
        if optimizer == "sgd":
            w = w - lr * grad
        else:
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad**2
            w = w - lr * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    return w


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_dp_sgd_non_private_is_clipped_gradient_descent(optimizer):
    fs = _features(n=80)
    c, gclip, bias, lr, steps = 1.0, 0.4, -2.0, 0.5, 5
    run = train_transfer(fs, TransferConfig(method="dp-sgd", nonprivate=True, clip_norm=c, grad_clip_norm=gclip,
                                            bias=bias, lr=lr, steps=steps, optimizer=optimizer))
    np.testing.assert_allclose(run.model.weights.numpy(), _numpy_dp_sgd(fs, c, gclip, bias, lr, steps, optimizer),
                               rtol=1e-8, atol=1e-10)
    assert torch.all(run.model.bias == bias)


def test_dp_newton_non_private_is_one_newton_step_of_the_regularised_loss():
    fs = _features()
    c, reg, alpha, bias = 1.0, 0.3, 0.5, 0.0
    run = train_transfer(fs, TransferConfig(method="dp-newton", nonprivate=True, clip_norm=c, reg=reg, alpha=alpha,
                                            bias=bias))
    x = torch.from_numpy(_clipped(fs, c))
    y = torch.from_numpy(_onehot(fs.labels))
    for l in range(K):
        def loss(v, l=l):
            cw = y[:, l] + alpha * (1 - y[:, l])
            ce = torch.nn.functional.binary_cross_entropy_with_logits(x @ v + bias, y[:, l], weight=cw, reduction="sum")
            return ce + 0.5 * reg * (v * v).sum()
        v0 = torch.zeros(D, dtype=torch.float64)
        h = torch.autograd.functional.hessian(loss, v0)
        g = torch.autograd.functional.jacobian(loss, v0)
        torch.testing.assert_close(run.model.weights[l], v0 - torch.linalg.solve(h, g))


def test_dp_newton_two_steps_decrease_the_loss():
    fs = _features()
    x, y = torch.from_numpy(_clipped(fs, 1.0)), torch.from_numpy(_onehot(fs.labels))

    def ova_loss(w: torch.Tensor) -> float:  # one-vs-all loss, negatives weighted alpha = 0.3 (the default)
        return float(torch.nn.functional.binary_cross_entropy_with_logits(
            x @ w.T, y, weight=y + 0.3 * (1 - y), reduction="sum"))

    cfg1 = TransferConfig(method="dp-newton", nonprivate=True, reg=0.1, steps=1)
    cfg3 = TransferConfig(method="dp-newton", nonprivate=True, reg=0.1, steps=3)
    l0 = ova_loss(torch.zeros(K, D, dtype=torch.float64))
    l1 = ova_loss(train_transfer(fs, cfg1).model.weights)
    l3 = ova_loss(train_transfer(fs, cfg3).model.weights)
    assert l3 < l1 < l0


def test_dp_fc_non_private_is_preconditioned_clipped_gradient_descent():
    fs = _features(n=80)
    c, gclip, bias, lr, reg, steps = 1.0, 0.5, -3.0, 2.0, 0.4, 3
    run = train_transfer(fs, TransferConfig(method="dp-fc", nonprivate=True, clip_norm=c, grad_clip_norm=gclip,
                                            bias=bias, lr=lr, reg=reg, steps=steps))
    x, y = _clipped(fs, c), _onehot(fs.labels)
    p = np.linalg.inv(x.T @ x + reg * np.eye(D))
    w = np.zeros((K, D))
    for _ in range(steps):
        total = np.zeros_like(w)
        for i in range(len(x)):
            gi = np.outer(_sig(x[i] @ w.T + bias) - y[i], x[i])
            total += gi * min(1.0, gclip / np.linalg.norm(gi))
        w = w - lr * (p @ total.T).T
    np.testing.assert_allclose(run.model.weights.numpy(), w, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("method", ["dp-ls", "dp-sgd", "dp-newton", "dp-fc"])
def test_tiny_noise_converges_to_the_non_private_solution(method):
    fs = _features()
    extra = {"steps": 5} if method in ("dp-sgd", "dp-fc") else {}
    base = dict(method=method, reg=0.5, seed=0, **extra) if method != "dp-sgd" else dict(method=method, seed=0, **extra)
    ref = train_transfer(fs, TransferConfig(nonprivate=True, **base)).model.weights
    errs = []
    for z in (1e-2, 1e-4, 1e-6):
        w = train_transfer(fs, TransferConfig(noise_multiplier=z, accountant="rdp", **base)).model.weights
        errs.append(float((w - ref).norm() / ref.norm()))
    assert errs[0] > errs[1] > errs[2]
    assert errs[2] < 1e-4


@pytest.mark.parametrize("method", ["dp-ls", "dp-sgd", "dp-newton", "dp-fc"])
def test_methods_learn_separable_classes_at_moderate_epsilon(method):
    train, test = _features(n=3000, seed=1, sep=4.0), _features(n=500, seed=2, sep=4.0)
    run = train_transfer(train, TransferConfig(method=method, epsilon=4.0, accountant="rdp", seed=0), test)
    assert run.top1 > 0.9, (method, run.top1)


def test_non_private_baseline_matches_scikit_learn():
    sklearn = pytest.importorskip("sklearn.linear_model")
    fs = _features(n=200)
    reg = 1e-2
    run = train_transfer(fs, TransferConfig(method="non-private", reg=reg, clip_norm=1.0))
    x = _clipped(fs, 1.0)
    clf = sklearn.LogisticRegression(C=1.0 / (len(x) * reg), tol=1e-10, max_iter=5000).fit(x, fs.labels)
    np.testing.assert_allclose(run.model.weights.numpy(), clf.coef_, atol=1e-4)
    np.testing.assert_allclose(run.model.bias.numpy(), clf.intercept_, atol=1e-4)
    assert run.plan.nonprivate and "not private" in run.epsilon_sentence

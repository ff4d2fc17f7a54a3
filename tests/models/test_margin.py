"""The head losses (dpemb.models.margin) against an independent numpy computation:
softmax, CosFace, ArcFace (with its fallback past pi - m), finite gradients at zero,
imprinting, and LossConfig validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpemb.models.margin import LOSSES, LossConfig, head_loss, imprint_, logits, unit_rows


def np_margin_loss(e: np.ndarray, w: np.ndarray, y: np.ndarray, kind: str, s: float, m: float) -> float:
    """Written from the papers' formulas, in float64: cosines of normalised vectors, the
    margin on the target, log-softmax, mean negative log-likelihood."""
    en = e / np.linalg.norm(e, axis=1, keepdims=True)
    wn = w / np.linalg.norm(w, axis=1, keepdims=True)
    cos = en @ wn.T
    z = cos.copy()
    for i, c in enumerate(y):
        if kind == "cosface":
            z[i, c] = cos[i, c] - m
        else:  # arcface: cos(theta + m), or cos(theta) - m sin(m) once theta + m > pi
            theta = math.acos(cos[i, c])
            z[i, c] = math.cos(theta + m) if theta + m <= math.pi else cos[i, c] - m * math.sin(m)
    z = s * z
    logp = z - z.max(axis=1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def data(n=6, c=5, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(c, d)), rng.integers(0, c, size=n)


def t(x):
    return torch.tensor(x)


@pytest.mark.parametrize("kind", ["cosface", "arcface"])
@pytest.mark.parametrize("scale,margin", [(None, None), (16.0, 0.2), (64.0, 0.0)])
def test_margin_losses_match_numpy(kind, scale, margin):
    e, w, y = data()
    cfg = LossConfig(kind, scale, margin)
    got = head_loss(t(e), t(w), t(y), cfg).item()
    assert got == pytest.approx(np_margin_loss(e, w, y, kind, cfg.scale, cfg.margin), rel=1e-9, abs=1e-9)


def test_arcface_past_pi_minus_m_uses_the_fallback_and_stays_monotone():
    m = 0.5
    # the target row nearly opposite the embedding: theta_y = pi - 0.1, so theta_y + m > pi
    e = np.array([[1.0, 0.0]])
    w = np.array([[math.cos(math.pi - 0.1), math.sin(math.pi - 0.1)], [0.0, 1.0]])
    y = np.array([0])
    assert math.acos(e[0] @ w[0] / np.linalg.norm(w[0])) + m > math.pi
    cfg = LossConfig("arcface", 30.0, m)
    got = head_loss(t(e), t(w), t(y), cfg).item()
    assert got == pytest.approx(np_margin_loss(e, w, y, "arcface", 30.0, m), rel=1e-9)
    # the target logit decreases with theta over all of [0, pi], across the threshold
    # (cos(theta + m) alone would rise again past pi - m)
    thetas = np.linspace(0.0, math.pi, 401)
    emb = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    target = [logits(emb, t([[math.cos(th), math.sin(th)]]), t([0]), cfg)[0, 0].item() for th in thetas]
    assert np.all(np.diff(target) < 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_softmax_is_torch_cross_entropy_of_linear_logits(dtype):
    e, w, y = data()
    e_t, w_t = t(e).to(dtype), t(w).to(dtype)
    ref = F.cross_entropy(F.linear(e_t, w_t), t(y))
    assert torch.equal(head_loss(e_t, w_t, t(y), LossConfig()), ref)  # bit for bit


@pytest.mark.parametrize("kind", LOSSES)
@pytest.mark.parametrize("zero", ["head", "embeddings", "both"])
def test_gradients_are_finite_with_a_zero_head_or_zero_embeddings(kind, zero):
    e, w, y = data()
    e_t = torch.zeros(e.shape) if zero in ("embeddings", "both") else t(e).float()
    w_t = torch.zeros(w.shape) if zero in ("head", "both") else t(w).float()
    e_t.requires_grad_(True)
    w_t.requires_grad_(True)
    loss = head_loss(e_t, w_t, t(y), LossConfig(kind))
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(e_t.grad).all() and torch.isfinite(w_t.grad).all()
    if kind != "softmax":  # a direction-less row is inert: cosine 0, zero gradient
        assert not e_t.grad.any() and not w_t.grad.any()


def test_a_zero_row_is_inert_but_the_others_learn():
    e, w, y = data()
    w[0] = 0.0
    w_t = t(w).requires_grad_(True)
    head_loss(t(e), w_t, t(y), LossConfig("arcface")).backward()
    assert not w_t.grad[0].any() and w_t.grad[1:].abs().sum() > 0


@pytest.mark.parametrize("kind", ["cosface", "arcface"])
def test_the_margin_makes_the_loss_larger(kind):
    e, w, y = data(seed=3)
    with_margin = head_loss(t(e), t(w), t(y), LossConfig(kind)).item()
    without = head_loss(t(e), t(w), t(y), LossConfig(kind, margin=0.0)).item()
    assert with_margin > without
    # m = 0: both are the plain normalised-softmax loss
    cos = F.normalize(t(e), dim=1) @ F.normalize(t(w), dim=1).T
    assert without == pytest.approx(F.cross_entropy(30.0 * cos, t(y)).item(), rel=1e-9)


def test_the_cosine_losses_ignore_the_norms():
    e, w, y = data()
    cfg = LossConfig("cosface")
    a = head_loss(t(e), t(w), t(y), cfg).item()
    b = head_loss(t(e) * 7.0, t(w) * t(np.linspace(0.1, 3, len(w))[:, None]), t(y), cfg).item()
    assert a == pytest.approx(b, rel=1e-9)


def test_float32_inputs_give_finite_gradients_at_perfect_alignment():
    w = torch.eye(3, 4)
    e = w.clone().requires_grad_(True)  # cos_y = 1 exactly: acos' is infinite there (clamped)
    head_loss(e, w, torch.arange(3), LossConfig("arcface")).backward()
    assert torch.isfinite(e.grad).all()


def test_unit_rows():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0], [1e-9, 0.0]])
    assert torch.allclose(unit_rows(x), torch.tensor([[0.6, 0.8], [0.0, 0.0], [0.0, 0.0]]))


def test_imprint_sets_class_means_and_leaves_absent_classes_zero():
    e = torch.tensor([[2.0, 0.0], [0.0, 5.0], [3.0, 3.0], [0.0, 1.0]])
    y = torch.tensor([0, 0, 2, 2])
    w = torch.full((4, 2), 9.0)
    imprint_(w, e, y)
    r = 1 / math.sqrt(2)
    assert torch.allclose(w[0], torch.tensor([r, r]))  # mean of (1, 0) and (0, 1), normalised
    u = torch.tensor([r + 0.0, r + 1.0])
    assert torch.allclose(w[2], u / u.norm())
    assert not w[1].any() and not w[3].any()


def test_defaults_are_resolved_and_recorded():
    assert LossConfig() == LossConfig("softmax", None, None)
    assert LossConfig("cosface") == LossConfig("cosface", 30.0, 0.35)
    assert LossConfig("arcface") == LossConfig("arcface", 30.0, 0.5)
    assert LossConfig("arcface", margin=0.3).scale == 30.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="sphereface"), "unknown loss"),
    (dict(kind="cosface", scale=-1.0), "scale must be positive"),
    (dict(kind="arcface", scale=0.0), "scale must be positive"),
    (dict(kind="arcface", scale=float("inf")), "scale must be positive"),
    (dict(kind="cosface", margin=-0.1), r"margin must lie in \[0, 1\]"),
    (dict(kind="cosface", margin=1.5), r"margin must lie in \[0, 1\]"),
    (dict(kind="arcface", margin=2.0), "arcface margin must lie in"),
    (dict(kind="arcface", margin=float("nan")), "arcface margin must lie in"),
    (dict(kind="softmax", scale=30.0), "apply to cosface and arcface only"),
    (dict(kind="softmax", margin=0.5), "apply to cosface and arcface only"),
])
def test_invalid_configs_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LossConfig(**kwargs)

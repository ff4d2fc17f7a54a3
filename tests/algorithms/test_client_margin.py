"""Client updates with a margin loss (CosFace / ArcFace): the zero fresh head is
imprinted, the backbone learns from the first step, DP-FedAvg's global head trains
with the same loss, and the config validates the loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.algorithms.config import FederatedConfig
from dpemb.models.margin import LossConfig, head_loss, unit_rows
from tests.algorithms.test_client import backbone_size, run, setup


@pytest.mark.parametrize("kind", ["cosface", "arcface"])
@pytest.mark.parametrize("local_head", ["global", "local"])
def test_zero_head_with_a_margin_loss_is_imprinted_and_moves_the_backbone_at_once(kind, local_head):
    # ONE local step: with softmax a zero head gives a zero backbone delta
    # (test_zero_head_passes_no_gradient_to_backbone_on_first_step); imprinted, it does not
    cfg = FederatedConfig(algorithm="dp-fedemb", head_init="zeros", local_batch_size=100, loss=kind,
                          local_head=local_head)
    ds, model, trainer, images, labels = setup(cfg)
    idx = np.arange(12)
    res, _ = run(trainer, model, images, labels, idx)
    assert res.steps == 1 and np.isfinite(res.loss)
    assert torch.isfinite(res.delta).all() and res.delta.abs().sum() > 0


def test_the_imprinted_head_holds_the_class_means_and_zero_rows_for_absent_classes():
    # head_first_steps: the one step trains the head only, so replay the imprint and the step
    cfg = FederatedConfig(algorithm="dp-fedemb", head_init="zeros", local_batch_size=100, loss="cosface",
                          client_lr=1e-9, head_first_steps=1)
    ds, model, trainer, images, labels = setup(cfg)
    idx = np.flatnonzero(ds.labels < 3)[:9]
    run(trainer, model, images, labels, idx)
    with torch.no_grad():
        e = unit_rows(model(images[torch.from_numpy(idx)].float() / 255))
    w = trainer.head_weight.detach()
    for c in range(ds.num_classes):
        mine = idx[ds.labels[idx] == c]
        if len(mine) == 0:
            assert not w[c].any()
        else:
            mean = e[torch.from_numpy(np.isin(idx, mine))].sum(0)
            assert torch.allclose(w[c], mean / mean.norm(), atol=1e-5)


def test_softmax_client_is_unchanged_by_the_loss_field():
    a = FederatedConfig(algorithm="dp-fedemb", local_batch_size=4)
    b = FederatedConfig(algorithm="dp-fedemb", local_batch_size=4, loss=LossConfig("softmax"))
    assert a == b
    res = []
    for cfg in (a, b):
        ds, model, trainer, images, labels = setup(cfg)
        res.append(run(trainer, model, images, labels, np.arange(12))[0])
    assert torch.equal(res[0].delta, res[1].delta)


@pytest.mark.parametrize("kind", ["cosface", "arcface"])
def test_fedavg_global_head_trains_with_the_margin_loss(kind):
    cfg = FederatedConfig(algorithm="dp-fedavg", loss=kind, local_batch_size=100, client_lr=0.01)
    ds, model, trainer, images, labels = setup(cfg)
    head = torch.randn(ds.num_classes, 16) * 0.1
    idx = np.arange(12)
    res, _ = run(trainer, model, images, labels, idx, extra=head)
    assert res.delta.numel() == backbone_size(model) + head.numel()
    # one SGD step: the head's change is lr x the gradient of the margin loss
    w0 = head.clone().requires_grad_(True)
    x = images[torch.from_numpy(idx)].float() / 255
    loss = head_loss(model(x), w0, labels[idx], LossConfig(kind))
    (grad,) = torch.autograd.grad(loss, w0)
    assert torch.allclose(res.delta[-head.numel():].view_as(head), 0.01 * grad, atol=1e-6)
    assert res.loss == pytest.approx(loss.item(), rel=1e-5)


def test_glorot_head_with_a_margin_loss_is_not_imprinted():
    cfg = FederatedConfig(algorithm="dp-fedemb", head_init="glorot", local_batch_size=100, loss="arcface",
                          head_first_steps=1, client_lr=1e-9)
    ds, model, trainer, images, labels = setup(cfg)
    run(trainer, model, images, labels, np.arange(12))
    w = trainer.head_weight.detach()
    assert w.all() and not torch.allclose(w.norm(dim=1), torch.ones(len(w)))  # random rows, not unit


def test_federated_config_validates_the_loss():
    assert FederatedConfig(loss="arcface").loss == LossConfig("arcface", 30.0, 0.5)
    assert FederatedConfig().loss == LossConfig("softmax")
    with pytest.raises(ValueError, match="unknown loss"):
        FederatedConfig(loss="sphereface")
    with pytest.raises(ValueError, match="scale must be positive"):
        FederatedConfig(loss=LossConfig("cosface", scale=-2.0))
    with pytest.raises(TypeError):
        FederatedConfig(loss=3)

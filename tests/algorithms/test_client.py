"""Client update: which parameters are sent, head learning rate, head-first steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn.utils import parameters_to_vector

from dpemb.algorithms.client import ClientTrainer, client_batches
from dpemb.algorithms.config import FederatedConfig
from dpemb.models import build_backbone
from tests.conftest import make_tiny_dataset


def setup(cfg: FederatedConfig):
    torch.manual_seed(0)
    ds = make_tiny_dataset().split().train
    model = build_backbone("lenet", in_channels=1, image_size=28, embedding_dim=16)
    trainer = ClientTrainer(model, ds.num_classes, cfg)
    images = torch.from_numpy(np.ascontiguousarray(ds.images)).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(ds.labels)
    return ds, model, trainer, images, labels


def run(trainer, model, images, labels, idx, extra=None, seed=0):
    start = parameters_to_vector([p for p in model.parameters() if p.requires_grad]).detach()
    if extra is not None:
        start = torch.cat([start, extra.flatten()])
    return trainer.update(start, images, labels, idx, np.random.default_rng(seed),
                          torch.Generator().manual_seed(seed)), start


def backbone_size(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_fedemb_delta_covers_backbone_only():
    # 3 local steps: the default zero head passes gradient to the backbone from step 2 on
    cfg = FederatedConfig(algorithm="dp-fedemb", head_lr_scale=10, local_batch_size=4)
    ds, model, trainer, images, labels = setup(cfg)
    res, start = run(trainer, model, images, labels, np.arange(12))
    assert res.delta.numel() == backbone_size(model)
    assert res.delta.abs().sum() > 0
    # the server model is untouched by local training
    assert torch.equal(parameters_to_vector(list(model.parameters())), start)


def test_fedavg_delta_includes_global_head():
    cfg = FederatedConfig(algorithm="dp-fedavg")
    ds, model, trainer, images, labels = setup(cfg)
    head = torch.randn(ds.num_classes, 16) * 0.1
    res, _ = run(trainer, model, images, labels, np.arange(12), extra=head)
    assert res.delta.numel() == backbone_size(model) + head.numel()
    assert res.delta[-head.numel():].abs().sum() > 0  # the head was trained and is sent


def test_head_first_steps_freeze_backbone_then_head():
    # every step is head-only: the backbone delta must be exactly zero
    cfg = FederatedConfig(algorithm="dp-fedemb", head_first_steps=1000, local_batch_size=4)
    ds, model, trainer, images, labels = setup(cfg)
    res, _ = run(trainer, model, images, labels, np.arange(12))
    assert res.steps == 3 and torch.count_nonzero(res.delta) == 0


def test_head_lr_scale_is_applied():
    """One SGD step: the head's change equals -client_lr*scale*grad (no momentum)."""
    from dpemb.algorithms.client import glorot_

    for scale, head_init in ((1.0, "glorot"), (7.0, "glorot"), (7.0, "zeros")):
        cfg = FederatedConfig(algorithm="dp-fedemb", head_lr_scale=scale, local_batch_size=100,
                              client_lr=0.01, head_init=head_init)
        ds, model, trainer, images, labels = setup(cfg)
        idx = np.arange(10)
        g = torch.Generator().manual_seed(0)
        # reproduce the fresh head the trainer will draw, and its gradient
        w0 = torch.zeros_like(trainer.head_weight)
        if head_init == "glorot":
            w0 = glorot_(w0, torch.Generator().manual_seed(0))
        start = parameters_to_vector([p for p in model.parameters() if p.requires_grad]).detach()
        trainer.update(start, images, labels, idx, np.random.default_rng(0), g)
        w0.requires_grad_(True)
        x = images[torch.from_numpy(idx)].float() / 255
        loss = torch.nn.functional.cross_entropy(torch.nn.functional.linear(model(x), w0), labels[idx])
        (grad,) = torch.autograd.grad(loss, w0)
        expected = w0.detach() - 0.01 * scale * grad
        assert torch.allclose(trainer.head_weight.detach(), expected, atol=1e-6)


def test_local_head_only_spans_present_classes():
    cfg = FederatedConfig(algorithm="dp-fedemb", local_head="local")
    ds, model, trainer, images, labels = setup(cfg)
    idx = np.flatnonzero(ds.labels < 2)[:8]
    res, _ = run(trainer, model, images, labels, idx)
    assert res.examples == len(idx) and torch.isfinite(res.delta).all()


def test_client_batches_epochs_and_cap():
    cfg = FederatedConfig(local_epochs=3, local_batch_size=4, max_examples_per_client=10)
    b = client_batches(np.arange(5), cfg, np.random.default_rng(0))
    flat = np.concatenate(b)
    assert [len(x) for x in b] == [4, 4, 2] and len(flat) == 10
    assert sorted(flat[:5]) == list(range(5))  # first epoch is a permutation


def test_fedavg_rejects_fedemb_only_knobs():
    with pytest.raises(ValueError):
        FederatedConfig(algorithm="dp-fedavg", local_head="local")


def test_zero_head_passes_no_gradient_to_backbone_on_first_step():
    # one local step from a zero head: the backbone cannot move, the head does
    cfg = FederatedConfig(algorithm="dp-fedemb", head_init="zeros", local_batch_size=100)
    ds, model, trainer, images, labels = setup(cfg)
    res, _ = run(trainer, model, images, labels, np.arange(12))
    assert res.steps == 1 and torch.count_nonzero(res.delta) == 0
    assert trainer.head_weight.detach().abs().sum() > 0

"""set_trainable and frozen BatchNorm statistics."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from dpemb.models import (
    batchnorm_stats_frozen,
    build_backbone,
    freeze_batchnorm_stats,
    make_head,
    set_trainable,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _train_step(model, params, steps=1):
    head = make_head(model.embedding_dim, 5, generator=torch.Generator().manual_seed(0))
    opt = torch.optim.SGD(list(params) + list(head.parameters()), lr=0.5, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(4, 1, 28, 28, generator=g)
    y = torch.randint(0, 5, (4,), generator=g)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(head(model(x)), y).backward()
        opt.step()


def _calibrate_batchnorm(model):
    """Set BatchNorm running statistics to those of one batch (as pretraining would);
    a randomly initialised MobileNetV2 with frozen unit statistics has vanishing
    activations, which would hide whether its parameters train."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # cumulative average: one batch gives its exact statistics
    model.train()
    with torch.no_grad():
        model(torch.rand(16, 1, 28, 28, generator=torch.Generator().manual_seed(5)))


def _is_norm_or_embedding(model, name):
    module = model.get_submodule(name.rsplit(".", 1)[0])
    return isinstance(module, (nn.GroupNorm, nn.BatchNorm2d)) or name.startswith("embedding.")


@pytest.mark.parametrize("name", ["resnet-gn", "mobilenetv2-gn", "mobilenetv2-bn"])
def test_norm_only_trains_norms_and_embedding_and_leaves_convs_unchanged(name):
    model = build_backbone(name, in_channels=1, image_size=28, embedding_dim=16)
    if name.endswith("bn"):
        _calibrate_batchnorm(model)
        freeze_batchnorm_stats(model)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    params = set_trainable(model, "norm-only")
    names = [k for k, p in model.named_parameters() if p.requires_grad]
    assert [id(p) for p in params] == [id(p) for k, p in model.named_parameters() if p.requires_grad]
    assert names and all(_is_norm_or_embedding(model, k) for k in names)
    convs = [k for k, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    assert convs and all(not model.get_submodule(k).weight.requires_grad for k in convs)
    _train_step(model, params)
    for k, p in model.named_parameters():
        changed = not torch.equal(before[k], p.detach())
        if _is_norm_or_embedding(model, k):
            assert changed, f"{k} did not train"
        else:
            assert not changed, f"frozen parameter {k} changed"
            assert p.grad is None


def test_norm_only_on_lenet_is_the_embedding_layer():
    model = build_backbone("lenet", in_channels=1, image_size=28)
    params = set_trainable(model, "norm-only")
    assert [id(p) for p in params] == [id(model.embedding.weight), id(model.embedding.bias)]


@pytest.mark.parametrize("name", ["lenet", "resnet-gn"])
def test_features_trains_everything_but_the_embedding_layer(name):
    model = build_backbone(name, in_channels=1, image_size=28, embedding_dim=16)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    params = set_trainable(model, "features")
    assert [id(p) for p in params] == [id(p) for k, p in model.named_parameters() if not k.startswith("embedding.")]
    _train_step(model, params, steps=2)
    for k, p in model.named_parameters():
        changed = not torch.equal(before[k], p.detach())
        assert changed != k.startswith("embedding."), f"{k}: changed={changed}"


def test_features_on_lenet_noises_three_percent_of_the_parameters():
    model = build_backbone("lenet", in_channels=1, image_size=28, embedding_dim=128, width=0.25)
    trained = sum(p.numel() for p in set_trainable(model, "features"))
    assert (trained, sum(p.numel() for p in model.parameters())) == (3424, 103904)


def test_set_trainable_all_restores_every_parameter_and_order_is_stable():
    a = build_backbone("resnet-gn", in_channels=1, image_size=28)
    b = build_backbone("resnet-gn", in_channels=1, image_size=28)
    set_trainable(a, "norm-only")
    everything = set_trainable(a, "all")
    assert len(everything) == len(list(a.parameters()))
    assert all(p.requires_grad for p in a.parameters())
    names = lambda m: [k for k, p in m.named_parameters() if p.requires_grad]  # noqa: E731
    set_trainable(a, "norm-only")
    set_trainable(b, "norm-only")
    assert names(a) == names(b)
    with pytest.raises(ValueError, match="norm-only"):
        set_trainable(a, "convs")


def _bn_buffers(model):
    return {k: v.clone() for k, v in model.named_buffers()}


def test_frozen_batchnorm_stats_do_not_change_in_train_mode():
    model = build_backbone("mobilenetv2-bn", in_channels=1, image_size=28, embedding_dim=16)
    _calibrate_batchnorm(model)
    freeze_batchnorm_stats(model)
    assert batchnorm_stats_frozen(model)
    before = _bn_buffers(model)
    model.train()  # must not unfreeze
    _train_step(model, set_trainable(model, "all"), steps=2)
    after = _bn_buffers(model)
    assert before.keys() == after.keys() and len(before) == 3 * 52
    assert all(torch.equal(before[k], after[k]) for k in before)
    # frozen statistics: each example's output is independent of the rest of the batch
    x = torch.rand(4, 1, 28, 28)
    with torch.no_grad():
        assert torch.allclose(model(x)[1], model(x[1:2])[0], atol=1e-5)


def test_unfrozen_batchnorm_stats_do_change():
    """Control for the test above."""
    model = build_backbone("mobilenetv2-bn", in_channels=1, image_size=28, embedding_dim=16)
    assert not batchnorm_stats_frozen(model)
    before = _bn_buffers(model)
    _train_step(model, set_trainable(model, "all"))
    after = _bn_buffers(model)
    assert not torch.equal(before["features.0.1.running_mean"], after["features.0.1.running_mean"])


def test_freeze_survives_deepcopy_and_is_idempotent():
    model = build_backbone("mobilenetv2-bn", in_channels=1, image_size=28)
    freeze_batchnorm_stats(model)
    freeze_batchnorm_stats(model)
    bn = model.features[0][1]
    assert len(bn._forward_pre_hooks) == 1
    clone = copy.deepcopy(model).train()
    before = clone.features[0][1].running_mean.clone()
    clone(torch.rand(4, 1, 28, 28))
    assert batchnorm_stats_frozen(clone)
    assert torch.equal(before, clone.features[0][1].running_mean)

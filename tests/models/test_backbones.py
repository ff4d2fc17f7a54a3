"""Backbone shapes, input validation, per-example independence and embed()."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from dpemb.models import BACKBONES, build_backbone, count_parameters, embed
from dpemb.models.base import make_divisible


def _images(n: int, c: int, size: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, c, size, size, generator=g)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("name", BACKBONES)
@pytest.mark.parametrize("size", [28, 32])
@pytest.mark.parametrize("channels", [1, 3])
def test_output_shapes(name, size, channels):
    model = build_backbone(name, in_channels=channels, image_size=size, embedding_dim=24)
    x = _images(3, channels, size)
    feats = model.forward_features(x)
    emb = model(x)
    assert feats.shape == (3, model.feature_dim) and model.feature_dim > 0
    assert emb.shape == (3, 24) and model.embedding_dim == 24
    assert emb.dtype == torch.float32 and torch.isfinite(emb).all()
    # the embedding layer is a Linear(feature_dim -> embedding_dim) applied to the features
    assert torch.allclose(emb, model.embedding(feats), atol=1e-6)


@pytest.mark.parametrize("name", [b for b in BACKBONES if b.endswith("gn")])
def test_groups_sets_every_group_norm(name):
    model = build_backbone(name, in_channels=3, image_size=32, embedding_dim=20, width=0.5, groups=4)
    assert all(m.num_groups == 4 for m in model.modules() if isinstance(m, torch.nn.GroupNorm))


def test_lenet_feature_dim_is_the_flattened_conv_map():
    assert build_backbone("lenet", in_channels=1, image_size=28).feature_dim == 64 * 7 * 7
    assert build_backbone("lenet", in_channels=1, image_size=32).feature_dim == 64 * 8 * 8
    assert build_backbone("lenet", in_channels=1, image_size=28, width=0.5).feature_dim == 32 * 7 * 7


@pytest.mark.parametrize("name", ["mobilenetv2-gn", "mobilenetv2-bn"])
def test_mobilenet_small_input_does_not_collapse_to_1x1(name):
    small = build_backbone(name, in_channels=1, image_size=28)
    big = build_backbone(name, in_channels=3, image_size=224)
    assert small.features(small.normalize_input(_images(1, 1, 28))).shape[-2:] == (2, 2)
    assert big.features(big.normalize_input(_images(1, 3, 224))).shape[-2:] == (7, 7)


def test_resnet_final_map_is_4x4_at_28_and_64_px():
    for size in (28, 64):
        m = build_backbone("resnet-gn", in_channels=1, image_size=size)
        assert m.stages(m.stem(m.normalize_input(_images(1, 1, size)))).shape[-2:] == (4, 4)


def test_mobilenet_parameter_names_follow_torchvision():
    m = build_backbone("mobilenetv2-bn", in_channels=3, image_size=224)
    keys = [k for k in m.state_dict() if k.startswith("features.")]
    # torchvision mobilenet_v2 has 314 state-dict entries, 2 of which are the classifier
    assert len(keys) == 312
    for k, shape in [("features.0.0.weight", (32, 3, 3, 3)),
                     ("features.1.conv.0.0.weight", (32, 1, 3, 3)),
                     ("features.1.conv.1.weight", (16, 32, 1, 1)),
                     ("features.1.conv.2.running_var", (16,)),
                     ("features.2.conv.0.0.weight", (96, 16, 1, 1)),
                     ("features.17.conv.2.weight", (320, 960, 1, 1)),
                     ("features.17.conv.3.num_batches_tracked", ()),
                     ("features.18.0.weight", (1280, 320, 1, 1)),
                     ("features.18.1.bias", (1280,))]:
        assert tuple(m.state_dict()[k].shape) == shape, k
    # 3,504,872 parameters in torchvision's model minus its 1,281,000-parameter classifier
    assert count_parameters(m.features) == 3_504_872 - 1_281_000


@pytest.mark.parametrize("name", BACKBONES)
def test_width_scales_parameter_count(name):
    full = count_parameters(build_backbone(name, in_channels=1, image_size=28, width=1.0))
    half = count_parameters(build_backbone(name, in_channels=1, image_size=28, width=0.5))
    assert half < 0.75 * full


def test_make_divisible():
    assert [make_divisible(v) for v in (32, 16, 3.2, 12, 36, 1280)] == [32, 16, 8, 16, 40, 1280]
    assert make_divisible(24 * 0.75) == 24  # 18 -> 16 would lose >10%: rounds up


@pytest.mark.parametrize("kwargs, match", [
    (dict(name="vgg"), "unknown backbone"),
    (dict(in_channels=2), "in_channels"),
    (dict(image_size=2), "image_size"),
    (dict(embedding_dim=0), "embedding_dim"),
    (dict(width=0), "width"),
    (dict(name="lenet", groups=2), "no normalisation"),
    (dict(name="mobilenetv2-bn", groups=2), "BatchNorm"),
    (dict(name="resnet-gn", groups=3), "does not divide"),
    (dict(name="mobilenetv2-gn", groups=0), "positive"),
])
def test_bad_arguments_are_value_errors(kwargs, match):
    args = dict(name="resnet-gn", in_channels=1, image_size=28)
    args.update(kwargs)
    name = args.pop("name")
    with pytest.raises(ValueError, match=match):
        build_backbone(name, **args)


@pytest.mark.parametrize("name", BACKBONES)
def test_bad_input_is_a_value_error(name):
    model = build_backbone(name, in_channels=1, image_size=28)
    with pytest.raises(ValueError, match="channels"):
        model(_images(2, 3, 28))
    with pytest.raises(ValueError, match="float"):
        model(torch.zeros(2, 1, 28, 28, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        model(torch.zeros(2, 28, 28))


def test_lenet_rejects_another_image_size():
    with pytest.raises(ValueError, match="28x28"):
        build_backbone("lenet", in_channels=1, image_size=28)(_images(1, 1, 32))


@pytest.mark.parametrize("name", ["lenet", "resnet-gn", "mobilenetv2-gn"])
def test_groupnorm_models_do_not_mix_examples(name):
    """Per-user training needs each example's output to depend on that example only."""
    model = build_backbone(name, in_channels=1, image_size=28).train()
    x = _images(4, 1, 28)
    other = _images(4, 1, 28, seed=1)
    with torch.no_grad():
        batch = model(x)
        for i in (0, 3):
            alone = model(x[i:i + 1])[0]
            assert torch.allclose(batch[i], alone, rtol=1e-4, atol=1e-5)
        # same first example, different rest of the batch
        mixed = model(torch.cat([x[:1], other[1:]]))
    assert torch.allclose(batch[0], mixed[0], rtol=1e-4, atol=1e-5)


def test_batchnorm_in_train_mode_does_mix_examples():
    """Control for the test above: it detects cross-example leakage when there is some."""
    model = build_backbone("mobilenetv2-bn", in_channels=1, image_size=28).train()
    x = _images(4, 1, 28)
    with torch.no_grad():
        a = model(x)[0]
        b = model(torch.cat([x[:1], _images(3, 1, 28, seed=1)]))[0]
    assert not torch.allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", BACKBONES)
def test_embed_is_unit_norm_deterministic_and_matches_eval_forward(name):
    model = build_backbone(name, in_channels=1, image_size=28, embedding_dim=32).train()
    x = _images(10, 1, 28)
    e1 = embed(model, x, batch_size=4)
    e2 = embed(model, x)
    assert e1.shape == (10, 32) and not e1.requires_grad
    assert torch.allclose(e1.norm(dim=1), torch.ones(10), atol=1e-5)
    assert torch.allclose(e1, e2, atol=1e-5)
    assert model.training, "embed() must restore train mode"
    model.eval()
    with torch.no_grad():
        expected = F.normalize(model(x), dim=1)
    assert torch.allclose(e1, expected, atol=1e-5)
    assert not model.training, "embed() must restore eval mode"


def test_embed_restores_per_module_modes_and_handles_empty_input():
    model = build_backbone("resnet-gn", in_channels=1, image_size=28).train()
    model.stem.eval()
    embed(model, _images(2, 1, 28))
    assert model.training and not model.stem.training and model.stages.training
    assert embed(model, torch.zeros(0, 1, 28, 28)).shape == (0, 128)
    with pytest.raises(ValueError, match="batch_size"):
        embed(model, _images(2, 1, 28), batch_size=0)

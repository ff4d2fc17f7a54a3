#!/usr/bin/env python
"""What dpemb's two CPU safeguards cost: the strided 1x1 convolution, and passive OpenMP waits.

1. ``StridedPointwiseConv2d`` (dpemb.models.base) computes ResNet-GN's strided 1x1
   shortcut as the strided pixels then a stride-1 1x1 convolution, because oneDNN's
   strided 1x1 backward_weights corrupts the heap on channels-last input with few
   channels (docs/SCALE.md). Training images/s of LeNet and ResNet-GN with dpemb's
   module, with a plain strided ``nn.Conv2d`` in its place (the unprotected model), and
   with oneDNN off altogether (the broad alternative). Before timing, each variant's
   loss and gradients on the same batch of glyph images are checked: in float64 the
   plain model equals dpemb's to 1e-10 (the same function), and in float32 each
   variant stays within 1e-2 of float64 (the table shows the errors).
   ResNet-GN runs at widths 1 and 0.5, whose shortcuts have 16 or more input channels:
   the plain model is outside the corrupting class there on AVX2 and AVX-512 alike.
2. ``OMP_WAIT_POLICY=PASSIVE`` (dpemb.openmp): each child process trains with the
   policy dpemb sets and with libgomp's default spinning, alone and (``--hog``) beside
   a CPU-bound process with as many threads as cores. The children print their loss
   after the timed steps, and it must be the same under both policies.

Steps are forward + backward + SGD of backbone and a 400-way head, grayscale 28 px.
Variants alternate, the median of --repeats is shown, and ratios are against the
baseline measured in the same run.

    .venv/bin/python bench/bench_cpu_conv.py [--steps 100] [--batch 32] [--repeats 5] [--hog]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from _compare import same_quantity
from dpemb.data.glyphs import GlyphConfig, make_glyphs
from dpemb.data.tensors import to_float_tensor
from dpemb.models import build_backbone, make_head
from dpemb.models.base import StridedPointwiseConv2d

NUM_CLASSES = 400
MODELS = (("lenet", 1.0), ("resnet-gn", 1.0), ("resnet-gn", 0.5))


def glyph_batch(batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of real glyph images (grayscale: channels-last-compatible, as in training)."""
    ds = make_glyphs(GlyphConfig(num_users=8), progress=False)
    idx = np.random.default_rng(seed).choice(ds.num_examples, batch, replace=False)
    return to_float_tensor(ds.images[idx]), torch.from_numpy(ds.labels[idx] % NUM_CLASSES).long()


def model_pair(name: str, width: float) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    return build_backbone(name, in_channels=1, image_size=28, width=width), make_head(128, NUM_CLASSES)


def unprotected(model: nn.Module) -> nn.Module:
    """The same model with every StridedPointwiseConv2d replaced by a plain strided Conv2d."""
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, StridedPointwiseConv2d):
                plain = nn.Conv2d(child.in_channels, child.out_channels, 1, stride=child.stride, bias=False)
                plain.load_state_dict(child.state_dict())
                setattr(parent, child_name, plain)
    return model


def grads(model: nn.Module, head: nn.Module, x, y, onednn: bool = True, dtype=torch.float32) -> torch.Tensor:
    """The loss and every backbone gradient, as one float64 vector."""
    model, head = copy.deepcopy(model).to(dtype), copy.deepcopy(head).to(dtype)
    with torch.backends.mkldnn.flags(enabled=onednn):
        loss = F.cross_entropy(head(model(x.to(dtype))), y)
        loss.backward()
    return torch.cat([loss.detach().reshape(1)] + [p.grad.flatten() for p in model.parameters()]).double()


def error(got: torch.Tensor, reference: torch.Tensor, what: str, tolerance: float = 1e-2) -> float:
    """Relative error of the loss and of the gradient vector against ``reference``.

    Against float64 the float32 paths differ by about 1e-6, or by up to about 2e-3 where
    an activation within rounding of zero falls on the other side of a ReLU (measured
    on ResNet-GN, width 0.5): 1e-2 passes both and still catches the corrupted
    workspace's gradients (hundreds of times off, uxlfoundation/oneDNN#6035)."""
    same_quantity(what, sides=(what, "float64 reference"), rtol=tolerance,
                  values={"loss": (got[0].item(), reference[0].item()), "gradients": (got[1:], reference[1:])})
    return max(float((got[0] - reference[0]).abs() / reference[0].abs()),
               float((got[1:] - reference[1:]).norm() / reference[1:].norm()))


def images_per_second(model, head, x, y, steps: int, onednn: bool = True) -> float:
    model, head = copy.deepcopy(model), copy.deepcopy(head)
    opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(head(model(x)), y).backward()
        opt.step()

    with torch.backends.mkldnn.flags(enabled=onednn):
        step()  # warm-up: primitive creation
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return steps * len(x) / (time.perf_counter() - start)


def conv_section(args) -> None:
    x, y = glyph_batch(args.batch)
    print(f"\n1. the strided 1x1 shortcut: training images/s, batch {args.batch} of glyph images, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    print(f"{'backbone':<12}{'width':>6}{'dpemb':>9}{'plain strided':>15}{'ratio':>7}{'oneDNN off':>12}"
          f"{'ratio':>7}  error vs float64 (dpemb / plain / off)")
    for name, width in MODELS:
        model, head = model_pair(name, width)
        plain = unprotected(model)
        ref = grads(model, head, x, y, onednn=False, dtype=torch.float64)
        error(grads(plain, head, x, y, onednn=False, dtype=torch.float64), ref, "plain, float64", 1e-10)
        errors = [error(grads(model, head, x, y), ref, "dpemb"), error(grads(plain, head, x, y), ref, "plain"),
                  error(grads(model, head, x, y, onednn=False), ref, "oneDNN off")]
        runs: dict[str, list[float]] = {"dpemb": [], "plain": [], "off": []}
        for _ in range(args.repeats):
            runs["dpemb"].append(images_per_second(model, head, x, y, args.steps))
            runs["plain"].append(images_per_second(plain, head, x, y, args.steps))
            runs["off"].append(images_per_second(model, head, x, y, args.steps, onednn=False))
        med = {k: statistics.median(v) for k, v in runs.items()}
        print(f"{name:<12}{width:>6}{med['dpemb']:>9.0f}{med['plain']:>15.0f}{med['dpemb'] / med['plain']:>6.2f}x"
              f"{med['off']:>12.0f}{med['off'] / med['plain']:>6.2f}x  "
              + " / ".join(f"{e:.0e}" for e in errors))
    print("ratio: images/s against the plain strided model measured in the same run")


# --------------------------------------------------------------- OpenMP wait policy
CHILD = """
import sys, time, torch
import dpemb, torch.nn.functional as F
from dpemb.models import build_backbone, make_head
name, width, steps, x, y = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), *torch.load(sys.argv[4])
torch.manual_seed(0)
model = build_backbone(name, in_channels=1, image_size=28, width=width); head = make_head(128, 400)
opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.01)
def step():
    opt.zero_grad(); loss = F.cross_entropy(head(model(x)), y); loss.backward(); opt.step(); return loss
step()
start = time.perf_counter()
for _ in range(steps): loss = step()
print(steps * len(x) / (time.perf_counter() - start), float(loss))
"""

HOG = "import torch\na = torch.randn(1500, 1500)\nwhile True:\n    a = torch.tanh(a @ a * 1e-3)\n"


def child_run(policy: str | None, name: str, width: float, steps: int, batch_file: str) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    else:
        env["GOMP_SPINCOUNT"] = "300000"  # libgomp's own default; set so that dpemb leaves it alone
    out = subprocess.run([sys.executable, "-c", CHILD, name, str(width), str(steps), batch_file],
                         capture_output=True, text=True, env=env, check=True).stdout.split()
    return float(out[0]), float(out[1])


@contextlib.contextmanager
def hog(on: bool):
    if not on:
        yield
        return
    threads = str(os.cpu_count() or 2)
    proc = subprocess.Popen([sys.executable, "-c", HOG], env={**os.environ, "OMP_NUM_THREADS": threads,
                                                             "OMP_WAIT_POLICY": "ACTIVE"})
    time.sleep(2)
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def wait_section(args) -> None:
    print(f"\n2. OpenMP wait policy: training images/s in a fresh process, batch {args.batch}, "
          f"torch's default threads ({os.cpu_count()} cores), median of {args.repeats}")
    batch_file = os.path.join(tempfile.mkdtemp(prefix="bench_cpu_conv_"), "batch.pt")
    torch.save(glyph_batch(args.batch), batch_file)  # the same real images in every child
    print(f"{'beside':<22}{'backbone':<12}{'spinning (libgomp default)':>28}{'passive (dpemb)':>17}{'ratio':>8}")
    for loaded in ([False, True] if args.hog else [False]):
        with hog(loaded):
            for name, width in MODELS[:2]:
                runs: dict[str, list[float]] = {"spin": [], "passive": []}
                losses: dict[str, set[float]] = {"spin": set(), "passive": set()}
                for _ in range(args.repeats):
                    for key, policy in (("spin", None), ("passive", "PASSIVE")):
                        ips, loss = child_run(policy, name, width, args.steps, batch_file)
                        runs[key].append(ips)
                        losses[key].add(round(loss, 5))
                same_quantity(f"{name}: loss after the timed steps", sides=("passive", "spinning"),
                              params={"losses (5 decimals)": (losses["passive"], losses["spin"])})
                spin, passive = statistics.median(runs["spin"]), statistics.median(runs["passive"])
                where = f"a {os.cpu_count()}-thread hog" if loaded else "nothing (idle)"
                print(f"{where:<22}{name:<12}{spin:>28.0f}{passive:>17.0f}{passive / spin:>7.2f}x")
    print("ratio: passive against spinning, measured in the same run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="timed training steps per measurement (default 100)")
    parser.add_argument("--batch", type=int, default=32, help="images per step (default 32)")
    parser.add_argument("--repeats", type=int, default=5, help="measurements per variant (default 5)")
    parser.add_argument("--hog", action="store_true", help="also measure the wait policies beside a CPU-bound process")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {os.cpu_count()} cores")
    conv_section(args)
    wait_section(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

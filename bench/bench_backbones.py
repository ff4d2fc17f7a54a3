#!/usr/bin/env python
"""Training throughput of each backbone (images/s), with the ratio to lenet.

One training step = forward + backward + SGD (momentum 0.9) step of backbone and a
400-way head under softmax cross-entropy, batch 128, 1-channel images at 28x28 and
32x32. Each configuration runs one warm-up step, then steps for --seconds. Ratios are
against lenet measured in the same run, at the same image size. Other processes on the
machine change the absolute numbers; compare ratios.

    .venv/bin/python bench/bench_backbones.py [--seconds 5] [--batch 128] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.nn import functional as F
from tqdm import tqdm

from dpemb.data.tensors import default_device
from dpemb.models import BACKBONES, build_backbone, count_parameters, make_head

NUM_CLASSES = 400


def throughput(name: str, size: int, *, batch: int, seconds: float, device: torch.device) -> tuple[float, int, int]:
    """Images/s of training steps; also the parameter count and the number of timed steps."""
    torch.manual_seed(0)
    model = build_backbone(name, in_channels=1, image_size=size).to(device).train()
    head = make_head(model.embedding_dim, NUM_CLASSES, device=device)
    opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.01, momentum=0.9)
    x = torch.rand(batch, 1, size, size, device=device)
    y = torch.randint(0, NUM_CLASSES, (batch,), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(head(model(x)), y).backward()
        opt.step()

    step()  # warm-up: allocator, oneDNN primitive creation
    if device.type == "cuda":
        torch.cuda.synchronize()
    steps, start = 0, time.perf_counter()
    while steps < 3 or time.perf_counter() - start < seconds:
        step()
        steps += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps * batch / (time.perf_counter() - start), count_parameters(model), steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="timed seconds per configuration (default 5)")
    parser.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[28, 32], help="image sizes (default 28 32)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = default_device()
    configs = [(size, name) for size in args.sizes for name in BACKBONES]
    results = {}
    for size, name in tqdm(configs, desc="backbones", unit="config"):
        results[(size, name)] = throughput(name, size, batch=args.batch, seconds=args.seconds, device=device)

    print(f"\ntraining throughput: batch {args.batch}, 1 channel, {NUM_CLASSES}-way head, "
          f"SGD momentum 0.9, device {device}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"{'backbone':<16}{'size':>6}{'params':>12}{'steps':>7}{'img/s':>10}{'vs lenet':>10}")
    for size, name in configs:
        ips, params, steps = results[(size, name)]
        ratio = ips / results[(size, "lenet")][0]
        print(f"{name:<16}{size:>4}px{params:>12,}{steps:>7}{ips:>10.0f}{ratio:>9.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

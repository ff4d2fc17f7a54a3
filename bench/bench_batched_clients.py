#!/usr/bin/env python
"""Virtual clients per second: BatchedClientTrainer (B clients per vmapped step) vs
ClientTrainer (one client at a time), with the ratio to one-at-a-time.

Every configuration trains the same clients from the same start: DP-FedEmb's default
client (fresh zero head over all training identities, softmax, 1 local epoch, batch
8, SGD with --momentum), synthetic 1-channel images, client sizes drawn uniformly in
[--min-examples, --max-examples]. Each configuration runs one warm-up pass over the
clients; then the configurations take turns, one pass each, until each has run for
about --seconds (interleaved, so a change in the machine's load hits all of them
alike). Ratios are against one-at-a-time measured in the same run on the same device
(CUDA when present, else the CPU); other processes on the machine change the absolute
numbers, compare ratios. The last column is the
difference between the batched and the one-at-a-time deltas of the pass, relative
to the one-at-a-time deltas: |all differences| / |all deltas| (float rounding); the
line under the table gives, for scale, the same measure for one-at-a-time itself when
the start moves by one float32 rounding (start x (1 + 2^-23)). Before the table, each
batched configuration is checked to compute the same client updates as one-at-a-time
(``bench/_compare.py``): the same clients and the same number of deltas, and
|all differences| / |all deltas| <= 1e-2 (float rounding is about 1e-6 on a CPU and up to
5e-3 with TF32 on a GPU; a wrong client, label or step count is of order 1); a mismatch
stops it (exit status 1).

    .venv/bin/python bench/bench_batched_clients.py [--backbone lenet] [--clients 32]
        [--seconds 6] [--batch-clients 1 4 16] [--bf16] [--threads N]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from _compare import same_quantity

from dpemb.algorithms.batched_client import BatchedClientTrainer, ClientInput
from dpemb.algorithms.client import ClientResult, ClientTrainer
from dpemb.algorithms.config import FederatedConfig, LocalPerformance
from dpemb.data.tensors import default_device
from dpemb.models import build_backbone

UPDATE_RTOL = 1e-2  # |batched deltas - one-at-a-time deltas| / |one-at-a-time deltas|


def make_clients(n: int, lo: int, hi: int, size: int, num_classes: int, device: torch.device):
    rs = np.random.default_rng(0)
    sizes = rs.integers(lo, hi + 1, size=n)
    data = []
    for s in sizes:
        images = torch.from_numpy(rs.integers(0, 256, size=(s, 1, size, size), dtype=np.uint8)).to(device)
        labels = torch.from_numpy(rs.integers(0, num_classes, size=s))
        data.append((images, labels, np.arange(s)))
    return data


def inputs(data) -> list[ClientInput]:
    return [ClientInput(im, lab, idx, np.random.default_rng(i), torch.Generator().manual_seed(i))
            for i, (im, lab, idx) in enumerate(data)]


def timed(runs: list, device: torch.device, seconds: float) -> tuple[list[float], list[list[ClientResult]]]:
    """Passes per second of each run (interleaved, after one warm-up pass each; a run
    stops once it has run ``seconds``), and each run's warm-up results."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    results = []
    for i, run in enumerate(runs):  # warm-up: allocator, oneDNN / cuDNN primitives
        t0 = time.perf_counter()
        results.append(run())
        sync()
        print(f"  run {i}: warm-up pass in {time.perf_counter() - t0:.2f} s", file=sys.stderr, flush=True)
    spent = [0.0] * len(runs)
    passes = [0] * len(runs)
    while min(spent) < seconds or min(passes) < 2:
        for i, run in enumerate(runs):
            if spent[i] >= seconds and passes[i] >= 2:  # this one has its share; the slower ones go on
                continue
            t0 = time.perf_counter()
            run()
            sync()
            spent[i] += time.perf_counter() - t0
            passes[i] += 1
            print(f"  run {i}: pass {passes[i]} in {time.perf_counter() - t0:.2f} s", file=sys.stderr, flush=True)
    return [p / s for p, s in zip(passes, spent)], results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="lenet", help="backbone (default lenet)")
    parser.add_argument("--width", type=float, default=1.0, help="backbone width (default 1)")
    parser.add_argument("--image-size", type=int, default=28, help="image side in px (default 28)")
    parser.add_argument("--clients", type=int, default=32, help="clients per pass (default 32)")
    parser.add_argument("--min-examples", type=int, default=8, help="smallest client (default 8)")
    parser.add_argument("--max-examples", type=int, default=32, help="largest client (default 32)")
    parser.add_argument("--num-classes", type=int, default=100, help="training identities (default 100)")
    parser.add_argument("--momentum", type=float, default=0.9, help="client momentum (default 0.9)")
    parser.add_argument("--batch-clients", type=int, nargs="+", default=[1, 4, 16],
                        help="B values for BatchedClientTrainer (default 1 4 16)")
    parser.add_argument("--seconds", type=float, default=6.0, help="timed seconds per configuration (default 6)")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast for local training (all configurations)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = default_device()
    torch.manual_seed(0)
    model = build_backbone(args.backbone, in_channels=1, image_size=args.image_size, width=args.width).to(device)
    cfg = FederatedConfig(client_momentum=args.momentum)
    perf = LocalPerformance(bf16=args.bf16)
    start = torch.cat([p.detach().flatten() for p in model.parameters() if p.requires_grad])
    data = make_clients(args.clients, args.min_examples, args.max_examples, args.image_size, args.num_classes, device)
    n_images = sum(len(idx) for _, _, idx in data) * cfg.local_epochs

    single = ClientTrainer(model, args.num_classes, cfg, perf)

    def one_at_a_time() -> list[ClientResult]:
        return [single.update(start, c.images, c.labels, c.example_idx, c.rng, c.generator) for c in inputs(data)]

    def batched(b: int):
        trainer = BatchedClientTrainer(model, args.num_classes, cfg, b, perf)
        return lambda: trainer.update_many(start, inputs(data))

    names = [("one at a time", "-")] + [("batched", str(b)) for b in args.batch_clients]
    rates, results = timed([one_at_a_time] + [batched(b) for b in args.batch_clients], device, args.seconds)
    rows = [(*name, rate, res) for name, rate, res in zip(names, rates, results)]

    base_rate, base_results = rows[0][2], rows[0][3]
    checks = []
    for name, b, _, results in rows[1:]:  # the same client updates, before any ratio
        checks.append(same_quantity(
            f"{name} B={b} vs one at a time", sides=(f"batched B={b}", "one at a time"), rtol=UPDATE_RTOL,
            params={"clients": (len(results), len(base_results))},
            values={"client deltas": (torch.cat([r.delta.flatten() for r in results]).double().cpu().numpy(),
                                      torch.cat([r.delta.flatten() for r in base_results]).double().cpu().numpy())}))
    print(f"\nclient updates: {args.backbone} (width {args.width:g}, {args.image_size}px), {args.clients} clients of "
          f"{args.min_examples}-{args.max_examples} examples ({n_images} images per pass), batch "
          f"{cfg.local_batch_size}, momentum {args.momentum:g}, {args.num_classes}-way zero head, "
          f"{'bf16 autocast' if args.bf16 else 'float32'}, device {device}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    for line in checks:
        print(line)
    print(f"{'trainer':<16}{'B':>4}{'clients/s':>12}{'images/s':>11}{'vs one':>9}{'|diff|/|delta|':>16}")
    def rel_diff(results: list[ClientResult]) -> float:
        diff = torch.stack([(r.delta - s.delta).norm() for r, s in zip(results, base_results)]).norm()
        norm = torch.stack([s.delta.norm() for s in base_results]).norm()
        return float(diff) / max(float(norm), 1e-30)

    for name, b, rate, results in rows:
        print(f"{name:<16}{b:>4}{rate * args.clients:>12.1f}{rate * n_images:>11.0f}"
              f"{rate / base_rate:>8.2f}x{rel_diff(results):>16.1e}")
    nudged = [single.update(start * (1 + 2.0**-23), c.images, c.labels, c.example_idx, c.rng, c.generator)
              for c in inputs(data)]
    print(f"for scale: one at a time from start x (1 + 2^-23): |diff|/|delta| = {rel_diff(nudged):.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

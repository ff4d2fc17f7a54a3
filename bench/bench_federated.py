#!/usr/bin/env python
"""Local-training throughput of DP-FedEmb (and DP-FedAvg) against centralized training.

Same backbone (lenet), same data (a glyph set: the default handwriting-like benchmark,
no CJK fonts needed), same batch size (32), same thread count. Centralized:
``train_centralized`` (non-private SGD, batch 32). Federated: ``train_federated``
(M = 8 virtual clients of K = 4 users, one local epoch, batch 32, clip + Gaussian
noise + server step). Both through the library API, with a 64-image evaluation set so
that the one final evaluation costs almost nothing. Images/s counts the examples of
local (or centralized) SGD steps per wall second.

The runs are interleaved (centralized, federated, centralized, ...) and the median of
--repeats is reported, because other processes on the machine change absolute speeds;
the load average is printed. Then one DP-FedEmb run is profiled with cProfile and the
time is split into buckets (forward/backward, optimizer, clip+noise, head init, ...).

On a GPU (``--device cuda``) small clients leave the device idle one at a time:
``--client-batch 1 16 64`` adds a DP-FedEmb row per number of virtual clients trained
at once (vmap), ``--central-batch 32 256`` a centralized row per batch size, and
``--backbone resnet-gn --image-size 64`` the larger backbone. Ratios are against
centralized training at the clients' local batch size (the first ``--central-batch``).
``--public-negatives`` adds a DP-FedEmb row whose fresh heads get one row per identity
of the glyph set's public split (the per-round imprinting of those rows is the cost).

    .venv/bin/python bench/bench_federated.py [--repeats 3] [--threads 1] [--no-profile]
    python bench/bench_federated.py --device cuda --clients 64 --client-batch 1 16 64 \
        --central-batch 32 256 [--backbone resnet-gn --image-size 64] [--bf16]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from dpemb.algorithms.config import FederatedConfig
from dpemb.data.glyphs import GlyphConfig, make_glyphs
from dpemb.privacy import PrivacySpec
from dpemb.training.centralized import train_centralized
from dpemb.training.rundir import RunDir
from dpemb.training.config import ModelConfig, OptimConfig, RunConfig
from dpemb.training.federated import train_federated

BATCH = 32


def data(image_size: int = 28, users: int = 300):
    ds = make_glyphs(GlyphConfig(num_users=users, image_size=image_size), progress=False)  # x 40 characters x 2 images
    sp = ds.split()
    ev = sp.eval
    keep = np.zeros(ev.num_examples, dtype=bool)
    keep[np.random.default_rng(0).choice(ev.num_examples, 64, replace=False)] = True
    return sp.train, ev.select(keep, relabel=True), sp.public


@dataclass(frozen=True)
class Setting:
    """What every measurement shares (backbone, device, federated shape)."""

    backbone: str = "lenet"
    device: str = "cpu"
    threads: int = 1
    clients: int = 8  # M
    users_per_client: int = 4  # K
    bf16: bool = False

    def run(self, out: Path, *, client_batch: int = 1) -> RunConfig:
        return RunConfig(out=str(out), eval_every=10**9, progress=False, threads=self.threads, device=self.device,
                         client_batch=client_batch, bf16=self.bf16)


def run_central(train, ev, steps: int, out: Path, s: Setting, batch: int = BATCH) -> float:
    rep = train_centralized(
        train, ev, ModelConfig(s.backbone),
        OptimConfig(lr=0.05, momentum=0.9, batch_size=batch, steps=steps),
        s.run(out),
    )
    return rep["images_per_second"]


def run_fed(train, ev, algorithm: str, rounds: int, out: Path, s: Setting, client_batch: int = 1,
            public=None) -> float:
    spec = PrivacySpec(population=train.num_users, clients_per_round=s.clients, users_per_client=s.users_per_client,
                       noise_multiplier=0.01, clip_norm=0.3, rounds=rounds)
    fed = FederatedConfig(algorithm=algorithm, local_batch_size=BATCH, client_lr=0.05,
                          head_lr_scale=3.0 if algorithm == "dp-fedemb" else 1.0, public_negatives=public is not None)
    rep = train_federated(train, ev, ModelConfig(s.backbone), fed, spec, s.run(out, client_batch=client_batch),
                          noise_seed=0, public=public)
    # the examples a round processed are a private count: the throughput is in the private diagnostics
    return [r for r in RunDir(out).read_diagnostics() if r.get("summary")][-1]["images_per_second"]


BUCKETS = [  # (bucket, substrings of "file:function" in the profile), first match wins
    ("forward (conv/linear/loss)", ("conv2d", "linear", "max_pool", "cross_entropy", "relu", "_conv_forward",
                                    "lenet.py", "base.py", "module.py")),
    ("backward", ("run_backward", "backward")),
    ("optimizer steps", ("sgd.py", "optimizer.py")),
    ("clip + sum + noise", ("clipping.py", "noise.py")),
    ("fresh head init (glorot_)", ("glorot_",)),
    ("load/flatten params", ("load_flat_", "parameters_to_vector", "vector_to_parameters")),
    ("data gather + uint8->float", ("client_batches", "permutation")),
    ("evaluation", ("evaluate", "verification", "retrieval", "in_batch")),
    ("checkpoint / plots / io", ("checkpoint", "save", "plot", "matplotlib", "rundir", "json")),
]


def profile_fed(train, ev, rounds: int, out: Path, s: Setting) -> str:
    prof = cProfile.Profile()
    prof.enable()
    run_fed(train, ev, "dp-fedemb", rounds, out, s)
    prof.disable()
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())  # total tottime
    buckets = {b: 0.0 for b, _ in BUCKETS} | {"other": 0.0}
    others: list[tuple[float, str]] = []
    for (file, _line, fn), (_cc, _nc, tt, _ct, _callers) in st.stats.items():
        name = f"{os.path.basename(file)}:{fn}"
        for b, keys in BUCKETS:
            if any(k in name for k in keys):
                buckets[b] += tt
                break
        else:
            buckets["other"] += tt
            others.append((tt, name))
    lines = [f"\ncProfile of one DP-FedEmb run ({rounds} rounds, M={s.clients}, K={s.users_per_client}, "
             f"batch {BATCH}), "
             f"self time by bucket (total {total:.2f} s):", f"{'bucket':32s} {'s':>7s} {'share':>6s}"]
    for b, t in sorted(buckets.items(), key=lambda kv: -kv[1]):
        lines.append(f"{b:32s} {t:7.2f} {t / total:6.1%}")
    lines.append("largest items of 'other': " + ", ".join(f"{n} {t:.2f}s" for t, n in sorted(others)[::-1][:8]))
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
    lines.append("\ntop functions by self time:")
    lines += [ln for ln in s.getvalue().splitlines() if ln.strip()][-19:]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--rounds", type=int, default=12, help="federated rounds per measurement")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    ap.add_argument("--backbone", default="lenet")
    ap.add_argument("--image-size", type=int, default=28)
    ap.add_argument("--users", type=int, default=300, help="glyph writers (default 300; M x K must stay below)")
    ap.add_argument("--clients", type=int, default=8, help="virtual clients per round, M (default 8)")
    ap.add_argument("--users-per-client", type=int, default=4, help="K (default 4)")
    ap.add_argument("--client-batch", type=int, nargs="+", default=[1],
                    help="DP-FedEmb rows: virtual clients trained at once (default 1)")
    ap.add_argument("--central-batch", type=int, nargs="+", default=[BATCH],
                    help="centralized rows: batch sizes; the first is the ratios' base (default 32)")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (federated local training)")
    ap.add_argument("--public-negatives", action="store_true",
                    help="add a DP-FedEmb row with public negatives (the public split's identities in every head)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    s = Setting(args.backbone, args.device, args.threads, args.clients, args.users_per_client, args.bf16)
    load0 = os.getloadavg()
    train, ev, public = data(args.image_size, args.users)
    # one federated round trains about M * K * (examples per user) examples; give the
    # centralized run the same number of examples
    per_user = train.num_examples / train.num_users
    examples = args.rounds * s.clients * s.users_per_client * per_user
    central = {b: f"centralized, batch {b} (non-private)" for b in args.central_batch}
    batched = {b: "DP-FedEmb" + ("" if args.client_batch == [1] else ", one client at a time" if b == 1
                                 else f", {b} clients at once") for b in args.client_batch}
    negatives = f"DP-FedEmb, public negatives ({len(set(public.labels.tolist()))} identities)"
    rates: dict[str, list[float]] = {name: [] for name in [*central.values(), *batched.values(), "DP-FedAvg",
                                                           *([negatives] if args.public_negatives else [])]}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for b in args.central_batch:  # warm-up (and CUDA kernels' first compilation)
            run_central(train, ev, 20, t / "warm", s, b)
        run_fed(train, ev, "dp-fedemb", 2, t / "warmf", s, max(args.client_batch))
        for r in range(args.repeats):
            for b, name in central.items():
                rates[name].append(run_central(train, ev, max(20, int(examples / b)), t / f"c{b}-{r}", s, b))
            for b, name in batched.items():
                rates[name].append(run_fed(train, ev, "dp-fedemb", args.rounds, t / f"e{b}-{r}", s, b))
            rates["DP-FedAvg"].append(run_fed(train, ev, "dp-fedavg", args.rounds, t / f"a{r}", s))
            if args.public_negatives:
                rates[negatives].append(run_fed(train, ev, "dp-fedemb", args.rounds, t / f"n{r}", s, public=public))
        prof = "" if args.no_profile else profile_fed(train, ev, args.rounds, t / "prof", s)
    load1 = os.getloadavg()
    base = statistics.median(rates[central[args.central_batch[0]]])
    dev = torch.device(args.device)
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{args.threads} CPU thread(s)"
    print(f"{args.backbone} at {args.image_size} px, glyphs (shared regime, {train.num_users} users, "
          f"{train.num_examples} images, {train.num_classes} identities), local batch {BATCH}, {where}"
          f"{', bf16' if args.bf16 else ''}, {args.repeats} interleaved repeats (median); centralized "
          f"{int(examples)} examples per run, federated {args.rounds} rounds of M={s.clients} x "
          f"K={s.users_per_client}")
    print(f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} (cores: {os.cpu_count()})")
    print(f"\n{'training':42s} {'images/s':>9s} {'min':>7s} {'max':>7s} {'ratio':>6s}")
    for name, v in rates.items():
        m = statistics.median(v)
        print(f"{name:42s} {m:9.0f} {min(v):7.0f} {max(v):7.0f} {m / base:6.2f}")
    print(f"\ngoal: DP-FedEmb / centralized (batch {args.central_batch[0]}) >= 0.90")
    if prof:
        print(prof)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

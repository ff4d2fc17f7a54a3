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

    .venv/bin/python bench/bench_federated.py [--repeats 3] [--threads 1] [--no-profile]
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
from pathlib import Path

import numpy as np
import torch

from dpemb.algorithms.config import FederatedConfig
from dpemb.data.glyphs import GlyphConfig, make_glyphs
from dpemb.privacy.accounting import PrivacySpec
from dpemb.training.centralized import train_centralized
from dpemb.training.rundir import RunDir
from dpemb.training.config import ModelConfig, OptimConfig, RunConfig
from dpemb.training.federated import train_federated

BATCH = 32


def data():
    ds = make_glyphs(GlyphConfig(), progress=False)  # 300 writers x 40 characters x 2 images
    sp = ds.split()
    ev = sp.eval
    keep = np.zeros(ev.num_examples, dtype=bool)
    keep[np.random.default_rng(0).choice(ev.num_examples, 64, replace=False)] = True
    return sp.train, ev.select(keep, relabel=True)


def run_central(train, ev, steps: int, out: Path, threads: int) -> float:
    rep = train_centralized(
        train, ev, ModelConfig("lenet"),
        OptimConfig(lr=0.05, momentum=0.9, batch_size=BATCH, steps=steps),
        RunConfig(out=str(out), eval_every=steps, progress=False, threads=threads),
    )
    return rep["images_per_second"]


def run_fed(train, ev, algorithm: str, rounds: int, out: Path, threads: int) -> float:
    spec = PrivacySpec(population=train.num_users, clients_per_round=8, users_per_client=4,
                       noise_multiplier=0.01, clip_norm=0.3, rounds=rounds)
    fed = FederatedConfig(algorithm=algorithm, local_batch_size=BATCH, client_lr=0.05,
                          head_lr_scale=3.0 if algorithm == "dp-fedemb" else 1.0)
    rep = train_federated(train, ev, ModelConfig("lenet"), fed, spec,
                          RunConfig(out=str(out), eval_every=rounds, progress=False, threads=threads),
                          noise_seed=0)
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


def profile_fed(train, ev, rounds: int, out: Path, threads: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    run_fed(train, ev, "dp-fedemb", rounds, out, threads)
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
    lines = [f"\ncProfile of one DP-FedEmb run ({rounds} rounds, M=8, K=4, batch {BATCH}), "
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
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load0 = os.getloadavg()
    train, ev = data()
    # one federated round trains about M * K * (examples per user) examples; give the
    # centralized run the same number of examples
    per_user = train.num_examples / train.num_users
    steps = max(20, int(args.rounds * 8 * 4 * per_user / BATCH))
    rates: dict[str, list[float]] = {"centralized (non-private)": [], "DP-FedEmb": [], "DP-FedAvg": []}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        run_central(train, ev, 20, t / "warm", args.threads)  # warm-up
        for r in range(args.repeats):
            rates["centralized (non-private)"].append(run_central(train, ev, steps, t / f"c{r}", args.threads))
            rates["DP-FedEmb"].append(run_fed(train, ev, "dp-fedemb", args.rounds, t / f"e{r}", args.threads))
            rates["DP-FedAvg"].append(run_fed(train, ev, "dp-fedavg", args.rounds, t / f"a{r}", args.threads))
        prof = "" if args.no_profile else profile_fed(train, ev, args.rounds, t / "prof", args.threads)
    load1 = os.getloadavg()
    base = statistics.median(rates["centralized (non-private)"])
    print(f"lenet, glyphs (shared regime, {train.num_users} users, {train.num_examples} images, "
          f"{train.num_classes} identities), batch {BATCH}, {args.threads} thread(s), "
          f"{args.repeats} interleaved repeats (median); centralized {steps} steps, federated "
          f"{args.rounds} rounds of M=8 x K=4")
    print(f"load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, "
          f"after {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} (cores: {os.cpu_count()})")
    print(f"\n{'training':28s} {'images/s':>9s} {'min':>7s} {'max':>7s} {'ratio':>6s}")
    for name, v in rates.items():
        m = statistics.median(v)
        print(f"{name:28s} {m:9.0f} {min(v):7.0f} {max(v):7.0f} {m / base:6.2f}")
    print("\ngoal: DP-FedEmb / centralized >= 0.90")
    if prof:
        print(prof)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

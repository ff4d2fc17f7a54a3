#!/usr/bin/env python
"""Round time of DP-FedEmb on P torch.distributed processes (torchrun, gloo) against 1 process.

The same run (glyph data, LeNet, M virtual clients of K users, one local epoch,
Gaussian noise, seeded) through the CLI: once as one ordinary process, then under
``torchrun --nproc-per-node P`` for each P. Each process uses one thread (torchrun's
default), so P processes use P cores. The round time is the median of the per-round
wall times the run records in its PRIVATE diagnostics file, without the first round
(warm-up) and the last (it evaluates). The speed-up is measured in the same
invocation, against the one-process run. The models must agree to float tolerance
(the max absolute weight difference is printed: summation order differs, 1e-8 after
one round; it grows with the rounds, fast when a large noise makes training chaotic).
Before the table, every P-process model is checked against the one-process model
(``bench/_compare.py``): the same weight tensors and |w_P - w_1| / |w_1| <= 1e-3 over all
weights (a different computation, e.g. a rank's clients left out, moves whole rounds'
updates); a mismatch stops the benchmark (exit status 1).

    .venv/bin/python bench/bench_distributed.py [--procs 2] [--rounds 12] [--clients 16] [--users-per-client 4]
        [--users 300 | --data DIR] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safetensors.torch import load_file

from _compare import same_quantity

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS_RTOL = 1e-3  # |w_P - w_1| / |w_1|: summation order only


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(data: Path, out: Path, a: argparse.Namespace) -> list[str]:
    return ["train", "--data", str(data), "--algorithm", "dp-fedemb", "--backbone", "lenet",
            "--clients-per-round", str(a.clients), "--users-per-client", str(a.users_per_client),
            "--rounds", str(a.rounds), "--noise-multiplier", str(a.noise_multiplier), "--noise-seed", "1",
            "--local-batch-size", "8", "--eval-every", str(10 * a.rounds), "--eval-max-pairs", "20000",
            "--checkpoint-interval", "0", "--no-progress", "--device", a.device, "--out", str(out)]


def run(procs: int, data: Path, out: Path, a: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if procs == 1:
        cmd = [sys.executable, "-m", "dpemb", *train_args(data, out, a), "--threads", "1"]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(procs),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               "-m", "dpemb", *train_args(data, out, a)]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=a.run_timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        sys.exit(f"{' '.join(cmd)} ran past {a.run_timeout} s:\n{err[-3000:]}")
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    wall = time.perf_counter() - t0
    print(f"{procs} process(es): {wall:.1f} s", file=sys.stderr, flush=True)
    recs = [json.loads(line) for line in (out / "private" / "diagnostics.jsonl").read_text().splitlines()]
    rounds = [r for r in recs if "seconds" in r]
    rounds = rounds[1:-1] or rounds  # without warm-up and the evaluating last round, when there are more
    secs = [r["seconds"] for r in rounds]
    waits = [r.get("collective_seconds", 0.0) for r in rounds]
    ranks = [r["client_seconds"] for r in rounds]
    return {"procs": procs, "round_s": statistics.median(secs), "wait_s": statistics.median(waits), "wall_s": wall,
            "rank0_s": statistics.median(t[0] for t in ranks), "slowest_s": statistics.median(max(t) for t in ranks),
            "fastest_s": statistics.median(min(t) for t in ranks),
            "weights": load_file(str(out / "model.safetensors"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, nargs="+", default=[2])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--clients", type=int, default=16, help="virtual clients per round (M)")
    ap.add_argument("--users-per-client", type=int, default=4)
    ap.add_argument("--users", type=int, default=300, help="glyph writers (default 300)")
    ap.add_argument("--data", type=Path, default=None,
                    help="an existing dataset directory (from `dpemb data make`) instead of glyphs made here with "
                         "--users writers (for a machine without the fonts)")
    ap.add_argument("--run-timeout", type=float, default=None, help="seconds one training run may take")
    ap.add_argument("--device", default="cpu",
                    help="cpu (default: gloo) or cuda (one GPU per rank: NCCL; ranks sharing a GPU: gloo)")
    ap.add_argument("--noise-multiplier", type=float, default=0.05,
                    help="z (default 0.05: training stays smooth; with a large z the rounds are chaotic and the "
                         "1e-8 differences of summation order between 1 and P processes grow ~4x per round)")
    a = ap.parse_args()
    from dpemb.data.glyphs import GlyphConfig, make_glyphs

    load_before = os.getloadavg()[0]  # the machine's own load, before this bench's processes
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = a.data.resolve() if a.data else tmp / "data"
        if not a.data:
            make_glyphs(GlyphConfig(num_users=a.users), progress=False).save(data)
        results = [run(p, data, tmp / f"p{p}", a) for p in [1, *a.procs]]
    base = results[0]
    import torch

    def flat(weights: dict):
        return torch.cat([weights[k].double().flatten() for k in sorted(weights)]).numpy()

    def layout(weights: dict) -> str:
        return (f"{len(weights)} tensors of {sum(v.numel() for v in weights.values()):,} weights, names and shapes "
                + hashlib.sha256(repr(sorted((k, tuple(v.shape)) for k, v in weights.items())).encode()).hexdigest()[:8])

    checks = [same_quantity(f"model after {a.rounds} rounds, {r['procs']} processes vs 1", rtol=WEIGHTS_RTOL,
                            sides=(f"{r['procs']} processes", "1 process"),
                            params={"model": (layout(r["weights"]), layout(base["weights"]))},
                            values={"weights": (flat(r["weights"]), flat(base["weights"]))})
              for r in results[1:]]

    where = f"GPU {torch.cuda.get_device_name()} shared by the ranks" if a.device.startswith("cuda") else "CPU"
    source = f"data {a.data}" if a.data else f"glyphs ({a.users} writers)"
    print(f"DP-FedEmb, LeNet, {source}; M = {a.clients} clients x K = {a.users_per_client} users, "
          f"{a.rounds} rounds, 1 thread per process, {where}; load average {load_before:.2f} before the runs, "
          f"{os.getloadavg()[0]:.2f} after, {os.cpu_count()} cores")
    for line in checks:
        print(line)
    print(f"{'processes':>9} {'round (s)':>10} {'speed-up':>9} {'in collectives (s)':>19} "
          f"{'clients: rank 0 / fastest / slowest (s)':>40} {'wall (s)':>9} {'max |w - w_1proc|':>18}")
    for r in results:
        diff = max(float((r["weights"][k] - base["weights"][k]).abs().max()) for k in base["weights"])
        clients = f"{r['rank0_s']:.3f} / {r['fastest_s']:.3f} / {r['slowest_s']:.3f}"
        print(f"{r['procs']:>9} {r['round_s']:>10.3f} {base['round_s'] / r['round_s']:>8.2f}x "
              f"{r['wait_s']:>19.3f} {clients:>40} {r['wall_s']:>9.1f} {diff:>18.2e}")
    print("in collectives: rank 0's time in broadcast/reduce/gather per round, waiting for the slowest rank "
          "included (communication + load imbalance); clients: each rank's time training its share of the "
          "round's clients (medians over the rounds); the round less the slowest rank's clients is the serial "
          "part (rank 0's sampling, noise, server step and the collectives' own cost)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Cost of the floating-point-hardened noise sampler (``--secure-noise``) against the plain one.

Times one noise draw on a clipped sum (``GaussianNoise.add``, the path every dpemb
release takes) with the plain sampler (one generator keyed once from the OS) and the
secure one (re-keyed from the OS on every draw, each entry the normalised sum of two
Gaussian draws), for the sizes that occur:

- the round's backbone (default LeNet, the demo's; its exact trainable-parameter
  count), 1M and 10M parameters (ResNet-GN-like), float32 as in training;
- a transfer release: the 1280 x 1280 feature Gramian (MobileNetV2 features) and the
  stack of 10 per-class Gramians of DP-LS, float64 as in `dpemb transfer`.

Then the extra cost of the secure sampler is set against one measured DP-FedEmb round
of the demo's configuration (LeNet, 28 px, M = 8 virtual clients of K = 4 users of 80
images, batch 32, one local epoch): the round time is (time of R2 rounds - time of R1
rounds) / (R2 - R1) of ``train_federated`` on synthetic data of the demo's shape, so the
run's fixed costs (evaluation, plots, checkpoint) cancel. Medians of --repeats; other
jobs on the machine change absolute speeds, so compare the columns with each other.

Before the table, the two samplers are checked to draw the same distribution
(``bench/_compare.py``): the same shape, dtype, noise multiplier and sensitivity, and
empirical standard deviations of the noise that agree within 6 / sqrt(entries) (six
standard errors of the difference of two such estimates); the ``--transfer`` runs are
checked to release under the same plan (releases, noise multiplier, epsilon, delta).
A mismatch stops the benchmark (exit status 1).

    .venv/bin/python bench/bench_noise.py [--repeats 5] [--rounds 2,6] [--no-round] [--backbone lenet]
        [--device cuda]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import torch

from _compare import same_quantity
from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.noise import GaussianNoise
from dpemb.privacy.relations import Relation

DEMO = dict(users=270, images_per_user=80, image_size=28, labels=40, M=8, K=4, batch=32)


def backbone_parameters(name: str) -> int:
    from dpemb.models import build_backbone

    model = build_backbone(name, in_channels=1, image_size=DEMO["image_size"])
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_draws(shape: tuple[int, ...], dtype: torch.dtype, repeats: int, device: str = "cpu") -> tuple[float, float]:
    """Median seconds of one ``GaussianNoise.add`` on a clipped sum of ``shape`` on ``device``
    (the noise is drawn on the CPU generator and moved, as in training), plain and secure
    sampler, the two timed alternately so that load changes hit both alike. First checks
    that both draw noise of the same shape, dtype and standard deviation."""
    value = torch.zeros(shape, dtype=dtype, device=device)
    clipped = ClippedSum(value=[value], sensitivity=1.0, relation=Relation.ADD_REMOVE)
    mechanisms = {False: GaussianNoise(1.0), True: GaussianNoise(1.0, secure=True)}
    times: dict[bool, list[float]] = {False: [], True: []}
    draws = {secure: mech.add(clipped)[0] for secure, mech in mechanisms.items()}  # warm-up, and the check
    same_quantity(f"noise draw {tuple(shape)}", sides=("secure", "plain"), atol=6 / value.numel() ** 0.5,
                  params={"shape": (tuple(draws[True].shape), tuple(draws[False].shape)),
                          "dtype": (draws[True].dtype, draws[False].dtype),
                          "noise multiplier": (mechanisms[True].noise_multiplier, mechanisms[False].noise_multiplier),
                          "std": (mechanisms[True].std(1.0), mechanisms[False].std(1.0))},
                  values={"empirical std": (float(draws[True].double().std()), float(draws[False].double().std()))})
    for _ in range(repeats):
        for secure, mech in mechanisms.items():
            _sync(device)
            t0 = time.perf_counter()
            mech.add(clipped)
            _sync(device)
            times[secure].append(time.perf_counter() - t0)
    return statistics.median(times[False]), statistics.median(times[True])


def demo_data():
    from dpemb.data.dataset import UserDataset

    rng = np.random.default_rng(0)
    n, per, size = DEMO["users"], DEMO["images_per_user"], DEMO["image_size"]
    images = rng.integers(0, 256, size=(n * per, size, size, 1), dtype=np.uint8)
    labels = rng.integers(0, DEMO["labels"], size=n * per)
    users = np.repeat(np.arange(n), per)
    train = UserDataset.from_arrays(images, labels, users, label_names=[f"c{i}" for i in range(DEMO["labels"])],
                                    user_names=[f"u{i}" for i in range(n)])
    ev_images = rng.integers(0, 256, size=(64, size, size, 1), dtype=np.uint8)
    ev = UserDataset.from_arrays(ev_images, np.arange(64) % 8, np.arange(64) // 4,
                                 label_names=[f"e{i}" for i in range(8)], user_names=[f"v{i}" for i in range(16)])
    return train, ev


def time_rounds(train, ev, rounds: int, out: str, threads: int, backbone: str = "lenet") -> float:
    from dpemb.algorithms.config import FederatedConfig
    from dpemb.privacy.spec import PrivacySpec
    from dpemb.training.config import ModelConfig, RunConfig
    from dpemb.training.federated import train_federated

    spec = PrivacySpec(population=train.num_users, clients_per_round=DEMO["M"], users_per_client=DEMO["K"],
                       noise_multiplier=0.0133, clip_norm=0.3, rounds=rounds)
    fed = FederatedConfig(algorithm="dp-fedemb", local_batch_size=DEMO["batch"], client_lr=0.05, head_lr_scale=30.0)
    t0 = time.perf_counter()
    train_federated(train, ev, ModelConfig(backbone), fed, spec,
                    RunConfig(out=out, eval_every=10_000, progress=False, threads=threads), noise_seed=0)
    return time.perf_counter() - t0


def round_seconds(r1: int, r2: int, repeats: int, threads: int, backbone: str) -> float:
    train, ev = demo_data()
    per_round = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            a = time_rounds(train, ev, r1, os.path.join(tmp, f"a{i}"), threads, backbone)
            b = time_rounds(train, ev, r2, os.path.join(tmp, f"b{i}"), threads, backbone)
            per_round.append((b - a) / (r2 - r1))
    return statistics.median(per_round)


def transfer_runs(n: int, methods: list[str], repeats: int) -> list[tuple[str, float, float]]:
    """Median wall-clock of a whole ``train_transfer`` (n x 1280 features, 10 classes, epsilon 1),
    plain against secure sampler."""
    from dpemb.transfer.config import TransferConfig
    from dpemb.transfer.features import FeatureSet
    from dpemb.transfer.runner import train_transfer

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, n)
    x = (rng.normal(size=(n, 1280)) + 2.0 * np.eye(10, 1280)[labels]).astype(np.float32)
    fs = FeatureSet(x, labels, tuple(f"c{i}" for i in range(10)))
    out = []
    for method in methods:
        cfgs = {secure: TransferConfig(method=method, epsilon=1.0, delta=1e-6, secure_noise=secure)
                for secure in (False, True)}
        plans = {secure: train_transfer(fs, cfg).plan for secure, cfg in cfgs.items()}  # warm-up, and the check
        same_quantity(f"transfer {method}", sides=("secure", "plain"),
                      params={k: (getattr(plans[True], k), getattr(plans[False], k))
                              for k in ("num_releases", "noise_multiplier", "epsilon", "delta", "accountant")})
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeats):  # alternately, so that load changes hit both alike
            for secure, cfg in cfgs.items():
                t0 = time.perf_counter()
                train_transfer(fs, cfg)
                times[secure].append(time.perf_counter() - t0)
        out.append((method, statistics.median(times[False]), statistics.median(times[True])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="draws (and round measurements: max 3) per cell")
    ap.add_argument("--rounds", default="2,6", help="R1,R2: round counts whose time difference gives one round")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    ap.add_argument("--no-round", action="store_true", help="skip the DP-FedEmb round measurement")
    ap.add_argument("--backbone", default="lenet", help="backbone of the round (default: the demo's lenet)")
    ap.add_argument("--transfer", default=None, metavar="N",
                    help="also time whole dp-ls and dp-fc transfer runs on N x 1280 synthetic features (the noise draw's "
                         "cost does not depend on the features' values; both sides run on the same ones)")
    ap.add_argument("--device", default="cpu",
                    help="where the clipped sums live for the draw timings (cpu, cuda); the round runs on "
                         "training's default device")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs{gpu}, draws on "
          f"{args.device}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    round_s = None
    if not args.no_round:
        r1, r2 = (int(x) for x in args.rounds.split(","))
        round_s = round_seconds(r1, r2, min(args.repeats, 3), args.threads, args.backbone)
        print(f"one DP-FedEmb round, demo configuration ({args.backbone}, M = {DEMO['M']} x K = {DEMO['K']} users of "
              f"{DEMO['images_per_user']} images, batch {DEMO['batch']}): {round_s * 1000:.0f} ms "
              f"(median of (t({r2}) - t({r1})) / {r2 - r1})")

    n_model = backbone_parameters(args.backbone)
    cases = [
        (f"{args.backbone} ({n_model:,} params, float32)", (n_model,), torch.float32),
        ("1M params (float32)", (1_000_000,), torch.float32),
        ("10M params (float32)", (10_000_000,), torch.float32),
        ("transfer Gramian 1280 x 1280 (float64)", (1280, 1280), torch.float64),
        ("transfer DP-LS 10 x 1280 x 1280 (float64)", (10, 1280, 1280), torch.float64),
    ]
    rows = []
    for name, shape, dtype in cases:
        reps = args.repeats if int(np.prod(shape)) < 5_000_000 else max(3, args.repeats // 4)
        plain, secure = time_draws(shape, dtype, reps, args.device)
        rows.append((name, plain, secure))

    print()
    head = "| noise draw | plain (ms) | secure (ms) | secure / plain | extra cost / round |"
    print(head)
    print("|---|---:|---:|---:|---:|")
    for name, plain, secure in rows:
        extra = f"{(secure - plain) / round_s:.2%}" if round_s and name.startswith(args.backbone) else "-"
        print(f"| {name} | {plain * 1000:.2f} | {secure * 1000:.2f} | {secure / plain:.2f}x | {extra} |")
    if round_s:
        name, plain, secure = rows[0]
        print(f"\nsecure sampler on {args.backbone}: +{(secure - plain) * 1000:.2f} ms per round = "
              f"{(secure - plain) / round_s:.2%} of a {round_s * 1000:.0f} ms round "
              f"(the whole secure draw: {secure / round_s:.2%})")
    if args.transfer:
        runs = transfer_runs(int(args.transfer), ["dp-ls", "dp-fc"], max(1, min(args.repeats, 3)))
        print(f"\n| whole transfer run ({int(args.transfer):,} x 1280, 10 classes, eps 1) | plain (s) | secure (s) "
              "| secure / plain |")
        print("|---|---:|---:|---:|")
        for method, plain, secure in runs:
            print(f"| {method} | {plain:.2f} | {secure:.2f} | {secure / plain:.3f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

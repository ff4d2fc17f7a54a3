"""Benchmark: time of each DP transfer method against scikit-learn's non-private
LogisticRegression on the same 60,000 x 1280 features, as ratios, in one run.

Features: the cached ImageNet-MobileNetV2 features of Fashion-MNIST written by
``experiments/transfer_fashion_mnist.py`` when present, otherwise synthetic
non-negative features of the same shape (10 classes). Every DP method runs at
epsilon 1 (delta 1e-5, PLD accountant) with its default hyperparameters; times are
wall-clock for the whole ``train_transfer`` call (clipping, budget calibration,
statistics, noise, solve). Run: ``python bench/bench_transfer.py [--n 60000]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "runs" / "transfer_fashion_mnist" / "features_train_64px.npz"


def load_or_make(n: int, d: int, k: int):
    from dpemb.transfer.features import FeatureSet, load_features

    if CACHE.is_file():
        fs = load_features(CACHE)
        if fs.num_examples >= n and fs.dim == d:
            return fs.subset(np.arange(n)), f"Fashion-MNIST ImageNet-MobileNetV2 features ({CACHE.name})"
    rng = np.random.default_rng(0)
    y = rng.integers(0, k, n)
    centers = rng.gamma(1.0, 1.0, size=(k, d))
    x = np.maximum(centers[y] + rng.normal(scale=1.5, size=(n, d)), 0).astype(np.float32)
    return FeatureSet(x, y.astype(np.int64), tuple(str(i) for i in range(k)), users=np.arange(n)), "synthetic"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=60000)
    ap.add_argument("--dim", type=int, default=1280)
    ap.add_argument("--epsilon", type=float, default=1.0)
    args = ap.parse_args(argv)

    from sklearn.linear_model import LogisticRegression

    from dpemb.transfer.config import TransferConfig
    from dpemb.transfer.prepare import transform_features
    from dpemb.transfer.runner import train_transfer

    fs, source = load_or_make(args.n, args.dim, 10)
    print(f"features: {fs.num_examples} x {fs.dim}, {fs.num_classes} classes ({source}); "
          f"torch threads {torch.get_num_threads()}", flush=True)

    x, _ = transform_features(fs.features, 1.0, True)
    x32 = x.numpy()
    t0 = time.perf_counter()
    clf = LogisticRegression(max_iter=1000).fit(x32, fs.labels)
    base = time.perf_counter() - t0
    base_acc = clf.score(x32, fs.labels)
    rows = [("sklearn LogisticRegression (non-private, lbfgs)", base, f"{int(np.max(clf.n_iter_))} iterations",
             base_acc)]
    print(f"baseline done: {base:.1f} s", flush=True)

    configs = [
        ("dp-ls", TransferConfig(method="dp-ls", epsilon=args.epsilon)),
        ("dp-newton (1 step)", TransferConfig(method="dp-newton", epsilon=args.epsilon)),
        ("dp-fc (default steps)", TransferConfig(method="dp-fc", epsilon=args.epsilon)),
        ("dp-sgd (default steps)", TransferConfig(method="dp-sgd", epsilon=args.epsilon)),
        ("non-private (dpemb, torch L-BFGS)", TransferConfig(method="non-private")),
    ]
    for name, cfg in configs:
        t0 = time.perf_counter()
        run = train_transfer(fs, cfg)
        total = time.perf_counter() - t0
        xt, _ = transform_features(fs.features, cfg.clip_norm, cfg.normalize_features)
        acc = run.model.top1(xt, fs.labels)
        rows.append((name, total, f"{run.plan.num_releases} releases", acc))
        print(f"{name} done: {total:.1f} s", flush=True)

    print()
    print(f"| method | seconds | ratio to sklearn | notes | train top-1 |")
    print("|---|---|---|---|---|")
    for name, sec, note, acc in rows:
        print(f"| {name} | {sec:.1f} | {sec / base:.2f}x | {note} | {acc:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: time of each DP transfer method against scikit-learn's non-private
LogisticRegression on the same real features, as ratios, in one run.

Features: the ImageNet-MobileNetV2 features (64 px) of the first ``--n`` Fashion-MNIST
training images (default 10,000 of 60,000: extracting all 60,000 takes about 20 minutes
on 2 cores) and of the first ``--n-test`` test images (held out, default 2,000), built
once by ``features`` (the retired study experiments/transfer_fashion_mnist.py's, commit
9d06b53, whose cache names it keeps) and cached in ``runs/transfer_fashion_mnist/``
(gitignored). Without the data (``make fashion-mnist``)
or the weights (``make weights``) and without cached features, the benchmark says so and
exits with status 2: it never falls back to other data.

Before any ratio, the baseline is checked to be a like-for-like computation
(``bench/_compare.py``): dpemb's non-private softmax regression is fitted to the same
objective as scikit-learn (mean cross-entropy + reg/2 |W|^2 with reg = 1/(C n)), and
both must reach the same training objective (1e-3 relative) and the same held-out top-1
(within 0.01); a baseline whose training top-1 is 1.0 (separable features: any method
looks perfect) stops the benchmark too. Every DP method runs at epsilon 1 (delta
1/(10 n), PLD accountant, example level) with its default hyperparameters on the same
features; times are wall-clock for the whole ``train_transfer`` call (clipping, budget
calibration, statistics, noise, solve).

Run: ``python bench/bench_transfer.py [--n 10000] [--n-test 2000]`` (``--n 60000`` for
the whole training set).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

from _compare import same_quantity

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "runs" / "transfer_fashion_mnist"
IMAGE_SIZE = 64
FASHION_MNIST_TRAIN = 60_000
FASHION_MNIST_TEST = 10_000
SKLEARN_C = 1.0  # scikit-learn's default
OBJECTIVE_RTOL = 1e-3  # both solvers stop near the same optimum of a strictly convex objective
TOP1_ATOL = 0.01  # held-out top-1 of the two fits of that objective


def feature_path(cache_dir: Path, split: str, size: int, limit: int | None) -> Path:
    """Where ``features`` caches a split's features (the names the retired study gave them)."""
    return cache_dir / f"features_{split}_{size}px{f'_first{limit}' if limit else ''}.npz"


def features(split: str, size: int, cache_dir: Path, limit: int | None = None):
    """The ImageNet-MobileNetV2 features of one Fashion-MNIST split at ``size`` px, cached
    in ``cache_dir`` (extracted on the first call); ``limit``: only the first ``limit`` images."""
    from dpemb.transfer.features import extract_features, load_backbone, load_features, load_image_dataset, save_features

    path = feature_path(cache_dir, split, size, limit)
    if path.is_file():
        return load_features(path)
    ds, spec = load_image_dataset(f"fashion-mnist:{split}")
    if limit is not None and limit < ds.num_examples:
        ds = ds.select(np.arange(ds.num_examples) < limit)
        spec = f"{spec}[:{limit}]"
    model, desc = load_backbone("imagenet-mobilenetv2", in_channels=1, image_size=size)
    fs = extract_features(ds, model, progress=True, meta={"data": spec, **desc})
    save_features(path, fs)
    return fs


def real_features(n: int, n_test: int):
    """(train, test) FeatureSets of Fashion-MNIST, cached; exits 2 naming what is missing."""
    from dpemb.data.dataset import DataError
    from dpemb.data.importers.fashion_mnist import find_fashion_mnist_dir
    from dpemb.models.pretrained import imagenet_weights_available

    want = {"train": None if n >= FASHION_MNIST_TRAIN else n, "test": None if n_test >= FASHION_MNIST_TEST else n_test}
    if not all(feature_path(CACHE, split, IMAGE_SIZE, limit).is_file() for split, limit in want.items()):
        missing = []
        try:
            find_fashion_mnist_dir()
        except DataError as e:
            missing.append(str(e))
        if not imagenet_weights_available():
            missing.append("the ImageNet MobileNetV2 weights are not installed: `make weights`")
        if missing:
            print("bench_transfer cannot run: it needs real features (Fashion-MNIST through the ImageNet "
                  f"MobileNetV2 backbone), cached in {CACHE} or built from the data and weights. " + " ".join(missing),
                  file=sys.stderr)
            raise SystemExit(2)
        print(f"building the features once (cached in {CACHE}); about 20 ms per image on 2 cores", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    return features("train", IMAGE_SIZE, CACHE, want["train"]), features("test", IMAGE_SIZE, CACHE, want["test"])


def objective(w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor, reg: float) -> float:
    """mean cross-entropy + reg/2 |W|^2: the objective both non-private fits minimise."""
    return float(torch.nn.functional.cross_entropy(x @ w.T + b, y) + 0.5 * reg * (w * w).sum())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="first N training images (default 10000; 60000: all)")
    ap.add_argument("--n-test", type=int, default=2_000, help="first N test images, held out (default 2000)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    args = ap.parse_args(argv)

    from sklearn import __version__ as sklearn_version
    from sklearn.linear_model import LogisticRegression

    from dpemb.transfer.config import TransferConfig
    from dpemb.transfer.prepare import transform_features
    from dpemb.transfer.result import LinearModel
    from dpemb.transfer.runner import train_transfer

    train, test = real_features(args.n, args.n_test)
    n = train.num_examples
    print(f"features: Fashion-MNIST, ImageNet-MobileNetV2 at {IMAGE_SIZE} px ({train.meta.get('data', '?')}): "
          f"{n} training x {train.dim}, {test.num_examples} held-out test images, {train.num_classes} classes; "
          f"torch threads {torch.get_num_threads()}, scikit-learn {sklearn_version}", flush=True)
    clip, normalize = 1.0, True  # TransferConfig's defaults, asserted below for every run
    x, _ = transform_features(train.features, clip, normalize)
    xt, _ = transform_features(test.features, clip, normalize)
    y = torch.as_tensor(train.labels, dtype=torch.int64)
    reg = 1.0 / (SKLEARN_C * n)  # scikit-learn's C * sum(loss) + |W|^2 / 2, divided by C n

    t0 = time.perf_counter()
    clf = LogisticRegression(C=SKLEARN_C, max_iter=1000).fit(x.numpy(), train.labels)
    base = time.perf_counter() - t0
    sk_model = LinearModel(weights=torch.as_tensor(clf.coef_), bias=torch.as_tensor(clf.intercept_))
    print(f"baseline done: {base:.1f} s, {int(np.max(clf.n_iter_))} L-BFGS iterations", flush=True)
    t0 = time.perf_counter()
    ours = train_transfer(train, TransferConfig(method="non-private", reg=reg))
    ours_s = time.perf_counter() - t0
    same = {"features": (ours.model.weights.shape[1], clf.n_features_in_),
            "classes": (ours.model.weights.shape[0], len(clf.classes_)), "reg": (ours.params.reg, reg)}
    checks = [same_quantity(
        "non-private softmax regression: dpemb L-BFGS vs scikit-learn", params=same,
        values={"training objective": (objective(ours.model.weights, ours.model.bias, x, y, reg),
                                       objective(sk_model.weights, sk_model.bias, x, y, reg))},
        rtol=OBJECTIVE_RTOL, sides=("dpemb", "scikit-learn"))]
    checks.append(same_quantity(
        "non-private softmax regression: held-out top-1", params={"test examples": (test.num_examples,) * 2},
        values={"top-1": (ours.model.top1(xt, test.labels), sk_model.top1(xt, test.labels))}, atol=TOP1_ATOL,
        sides=("dpemb", "scikit-learn")))
    for line in checks:
        print(line, flush=True)
    base_train = sk_model.top1(x, train.labels)
    if base_train >= 1.0:
        raise SystemExit(f"the baseline fits the training features perfectly (top-1 {base_train:.4f}): separable "
                         "features make every method look alike; no ratio reported")
    rows = [("scikit-learn LogisticRegression (non-private, lbfgs, C = 1)", base, f"{int(np.max(clf.n_iter_))} iterations",
             base_train, sk_model.top1(xt, test.labels)),
            ("dpemb non-private (torch L-BFGS, same objective)", ours_s, "-", ours.model.top1(x, train.labels),
             ours.model.top1(xt, test.labels))]

    configs = [
        ("dp-ls", TransferConfig(method="dp-ls", epsilon=args.epsilon)),
        ("dp-newton (1 step)", TransferConfig(method="dp-newton", epsilon=args.epsilon)),
        ("dp-fc (default steps)", TransferConfig(method="dp-fc", epsilon=args.epsilon)),
        ("dp-sgd (default steps)", TransferConfig(method="dp-sgd", epsilon=args.epsilon)),
    ]
    for name, cfg in configs:
        same_quantity(f"{name} vs the baseline's features",
                      params={"clip_norm": (cfg.clip_norm, clip), "normalize": (cfg.normalize_features, normalize)})
        t0 = time.perf_counter()
        run = train_transfer(train, cfg)
        total = time.perf_counter() - t0
        rows.append((f"{name}, eps {args.epsilon:g}", total, f"{run.plan.num_releases} releases",
                     run.model.top1(x, train.labels), run.model.top1(xt, test.labels)))
        print(f"{name} done: {total:.1f} s", flush=True)

    print()
    print(f"DP runs: delta 1/(10 n) = {1 / (10 * n):.0e}, PLD accountant, example level, default hyperparameters")
    print()
    print("| method | seconds | ratio to scikit-learn | notes | train top-1 | held-out top-1 |")
    print("|---|---|---|---|---|---|")
    for name, sec, note, acc, acc_t in rows:
        print(f"| {name} | {sec:.1f} | {sec / base:.2f}x | {note} | {acc:.4f} | {acc_t:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

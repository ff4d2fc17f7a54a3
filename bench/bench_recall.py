"""Benchmark: exact all-pairs Recall@FAR (dpemb) against scikit-learn's roc_curve.

20,000 embeddings of 128-d over ~2,000 identities (about 2e8 pairs), synthetic:
identity centres plus Gaussian noise. Each measurement runs in its own subprocess so
that peak memory is its own: peak resident memory above the process's resident memory
just before the measured call (sampled every 5 ms from /proc/self/statm), plus the
ru_maxrss increase.

The baseline materialises the pairs' scores as float32 and their labels as bool (the
same quantised scores dpemb uses, so both must give the identical Recall@FAR), then
calls ``roc_curve(..., drop_intermediate=False)`` and takes ``max(tpr[fpr <= far])``.
If scikit-learn on all pairs would need more than ``--sklearn-max-gb`` (estimated from a
calibration run on a subset), it runs on the largest subset that fits, and dpemb runs
on that same subset too, so the ratio compares like with like; both sizes are printed.

Run: ``.venv/bin/python bench/bench_recall.py`` (add ``--n 6000`` for a quick look).

``--devices cuda cpu`` instead compares dpemb with itself across devices on all N
embeddings (no scikit-learn: at N = 100k it would need about 50 GB for the 5e9 pairs):
seconds, peak host memory, peak GPU memory (``torch.cuda.max_memory_allocated``) and
the Recall@FAR, which must be identical on every device; ratios against the last
device named (the baseline, e.g. the CPU):

    python bench/bench_recall.py --n 100000 --identities 10000 --devices cuda cpu
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from _compare import same_quantity

FAR = 1e-3


# ------------------------------------------------------------------- worker side
class _PeakRss:
    """Samples this process's resident memory in a thread; peak above the start."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.start = self._rss()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * self._page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(0.005)

    def __enter__(self) -> "_PeakRss":
        self._maxrss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())
        self.maxrss_delta = (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - self._maxrss0
        ) * 1024

    @property
    def delta(self) -> int:
        return self.peak - self.start


def _load(data_dir: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.load(data_dir / "x.npy")[:n]
    y = np.load(data_dir / "y.npy")[:n]
    return x, y


def _worker_ours(data_dir: Path, n: int, device: str | None = None) -> dict:
    import torch

    from dpemb.metrics import verification_metrics

    x, y = _load(data_dir, n)
    few = np.argsort(y, kind="stable")[:200]  # a few identities, so that there are positive pairs
    verification_metrics(x[few], y[few], fars=(FAR,), device=device)  # warm up kernels
    cuda = device is not None and device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with _PeakRss() as mem:
        t0 = time.perf_counter()
        res = verification_metrics(x, y, fars=(FAR,), progress=True, device=device)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    return {
        "gpu_peak_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
        "seconds": seconds,
        "peak_bytes": mem.delta,
        "maxrss_bytes": mem.maxrss_delta,
        "recall": res.recall_at_far[FAR],
        "auc": res.auc,
        "pairs": res.num_pairs,
        "threads": torch.get_num_threads(),
    }


def _materialise(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All pairs i < j: float32 scores (dpemb's quantised cosine) and bool labels."""
    import torch

    from dpemb.metrics.verification import pair_scores, prepare_inputs

    xt, yt = prepare_inputs(x, y, device="cpu")
    n = len(x)
    total = n * (n - 1) // 2
    scores = np.empty(total, dtype=np.float32)
    same = np.empty(total, dtype=bool)
    pos = 0
    step = 256
    with torch.no_grad():
        for a in range(0, n - 1, step):
            b = min(a + step, n - 1)
            s = pair_scores(xt[a:b], xt[a:]).numpy()
            eq = (yt[a:b, None] == yt[None, a:]).numpy()
            for r in range(b - a):  # row a + r: columns a + r + 1 .. n - 1
                k = n - 1 - (a + r)
                scores[pos : pos + k] = s[r, r + 1 :]
                same[pos : pos + k] = eq[r, r + 1 :]
                pos += k
    assert pos == total
    return scores, same


def _worker_sklearn(data_dir: Path, n: int) -> dict:
    from sklearn.metrics import roc_curve

    import dpemb.metrics.verification  # noqa: F401  (imported before measuring)

    x, y = _load(data_dir, n)
    roc_curve(np.array([0, 1, 0, 1]), np.array([0.1, 0.4, 0.35, 0.8]))  # warm up
    with _PeakRss() as mem:
        t0 = time.perf_counter()
        scores, same = _materialise(x, y)
        t1 = time.perf_counter()
        fpr, tpr, _ = roc_curve(same, scores, drop_intermediate=False)
        recall = float(tpr[fpr <= FAR].max())
        t2 = time.perf_counter()
        pairs = int(scores.size)
        del scores, same, fpr, tpr
    return {
        "seconds": t2 - t1,
        "materialise_seconds": t1 - t0,
        "peak_bytes": mem.delta,
        "maxrss_bytes": mem.maxrss_delta,
        "recall": recall,
        "pairs": pairs,
    }


# ------------------------------------------------------------------- driver side
def _run_worker(kind: str, data_dir: Path, n: int, device: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--data", str(data_dir), "--n", str(n)]
    if device is not None:
        cmd += ["--device", device]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _mem_available() -> int:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


def _n_for_pairs(pairs: float) -> int:
    return int((1 + math.sqrt(1 + 8 * pairs)) // 2)


def _compare_devices(x: np.ndarray, y: np.ndarray, devices: list[str]) -> int:
    """dpemb's exact Recall@FAR on every device, each in its own process; ratios against
    the last device."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        np.save(data_dir / "x.npy", x)
        np.save(data_dir / "y.npy", y)
        rows = [(d, _run_worker("ours", data_dir, len(x), d)) for d in devices]
    base = rows[-1][1]
    for d, r in rows[:-1]:  # the same pairs, the identical Recall@FAR, before any ratio
        print(same_quantity(f"Recall@FAR={FAR:g} on {d} vs {devices[-1]}", params={"pairs": (r["pairs"], base["pairs"])},
                            values={"Recall@FAR": (r["recall"], base["recall"])}, sides=(d, devices[-1])))
    print(f"\n| device | pairs | seconds | speed-up vs {devices[-1]} | peak host RSS above start (MB) "
          f"| peak GPU memory (MB) | Recall@FAR={FAR:g} |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for d, r in rows:
        print(f"| {d} | {r['pairs']:,} | {r['seconds']:.1f} | {base['seconds'] / r['seconds']:.1f}x | "
              f"{r['peak_bytes'] / 2**20:.0f} | {r['gpu_peak_bytes'] / 2**20:.0f} | {r['recall']:.6f} |")
    print(f"\nRecall@FAR={FAR:g} on every device: IDENTICAL")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000, help="embeddings (default 20000)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--identities", type=int, default=2_000)
    ap.add_argument("--noise", type=float, default=1.4, help="noise around identity centres")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sklearn-max-gb", type=float, default=10.0)
    ap.add_argument("--calibration-n", type=int, default=4_000)
    ap.add_argument("--worker", choices=["ours", "sklearn"], help=argparse.SUPPRESS)
    ap.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--device", help=argparse.SUPPRESS)
    ap.add_argument("--devices", nargs="+", help="compare dpemb across these devices (no scikit-learn)")
    args = ap.parse_args()

    if args.worker:
        res = _worker_ours(args.data, args.n, args.device) if args.worker == "ours" else \
            _worker_sklearn(args.data, args.n)
        print(json.dumps(res))
        return 0

    rng = np.random.default_rng(args.seed)
    per = args.n // args.identities
    y = rng.permutation(np.repeat(np.arange(args.identities), per + 1)[: args.n]).astype(np.int64)
    centres = rng.normal(size=(args.identities, args.dim))
    x = (centres[y] + args.noise * rng.normal(size=(args.n, args.dim))).astype(np.float32)
    full_pairs = args.n * (args.n - 1) // 2
    print(
        f"data: {args.n} embeddings x {args.dim}-d, {args.identities} identities, "
        f"{full_pairs:,} pairs; FAR {FAR:g}; {os.cpu_count()} CPU cores"
    )

    if args.devices:
        return _compare_devices(x, y, args.devices)

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        np.save(data_dir / "x.npy", x)
        np.save(data_dir / "y.npy", y)

        cal_n = min(args.calibration_n, args.n)
        cal = _run_worker("sklearn", data_dir, cal_n)
        per_pair = cal["peak_bytes"] / cal["pairs"]
        limit = min(args.sklearn_max_gb * 1e9, 0.7 * _mem_available())
        est_full = per_pair * full_pairs
        print(
            f"scikit-learn calibration on {cal_n} embeddings ({cal['pairs']:,} pairs): "
            f"{per_pair:.1f} bytes/pair -> all {full_pairs:,} pairs would need "
            f"~{est_full / 1e9:.1f} GB (limit {limit / 1e9:.1f} GB)"
        )
        if est_full <= limit:
            sub_n = args.n
        else:
            sub_n = min(args.n, _n_for_pairs(limit / per_pair))
            print(
                f"-> scikit-learn would exceed the limit on all pairs; it runs on the first "
                f"{sub_n} embeddings ({sub_n * (sub_n - 1) // 2:,} pairs) instead"
            )

        rows = []
        ours_full = _run_worker("ours", data_dir, args.n)
        rows.append(("dpemb exact (all pairs)", args.n, ours_full))
        if sub_n != args.n:
            ours_sub = _run_worker("ours", data_dir, sub_n)
            rows.append(("dpemb exact (subset)", sub_n, ours_sub))
        else:
            ours_sub = ours_full
        skl = _run_worker("sklearn", data_dir, sub_n)
        rows.append(("sklearn roc_curve (subset)" if sub_n != args.n else "sklearn roc_curve", sub_n, skl))

    # the same embeddings, the same pairs, the identical Recall@FAR (both use dpemb's
    # quantised scores), before any ratio
    print(same_quantity(f"Recall@FAR={FAR:g} on the same {sub_n} embeddings", sides=("dpemb", "scikit-learn"),
                        params={"pairs": (ours_sub["pairs"], skl["pairs"])},
                        values={"Recall@FAR": (ours_sub["recall"], skl["recall"])}))
    print()
    print(f"| method | N | pairs | seconds | peak RSS above start (MB) | ru_maxrss delta (MB) | Recall@FAR={FAR:g} |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, n, r in rows:
        extra = ""
        if "materialise_seconds" in r:
            extra = f" (+{r['materialise_seconds']:.1f} s to materialise pairs)"
        print(
            f"| {name} | {n} | {r['pairs']:,} | {r['seconds']:.1f}{extra} | "
            f"{r['peak_bytes'] / 2**20:.0f} | {r['maxrss_bytes'] / 2**20:.0f} | {r['recall']:.6f} |"
        )
    t_ratio = skl["seconds"] / ours_sub["seconds"]
    t_ratio_all = (skl["seconds"] + skl["materialise_seconds"]) / ours_sub["seconds"]
    m_ratio = skl["peak_bytes"] / max(ours_sub["peak_bytes"], 1)
    print()
    print(
        f"on the same {sub_n} embeddings: time ratio sklearn/dpemb = {t_ratio:.2f}x "
        f"(roc_curve only), {t_ratio_all:.2f}x (with materialising the pairs); "
        f"peak memory ratio sklearn/dpemb = {m_ratio:.1f}x"
    )
    print(f"Recall@FAR={FAR:g}: dpemb {ours_sub['recall']:.6f}, sklearn {skl['recall']:.6f} -> IDENTICAL")
    if sub_n != args.n:
        print(
            f"(dpemb on all {args.n} embeddings: {ours_full['recall']:.6f} in "
            f"{ours_full['seconds']:.1f} s; scikit-learn was run on {sub_n} only)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

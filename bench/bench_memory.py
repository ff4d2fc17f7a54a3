#!/usr/bin/env python
"""Peak memory of one process (one rank) against dataset size: streamed rows vs a copy.

For each size (default 50, 200 and 800 MB of uint8 images, 32x32x3, 20 images per user)
a random dataset is written with ``UserDataset.from_arrays(...).save(dir)`` (in a child
process), then each measurement runs in a FRESH child process, which reports its own
memory from ``/proc/self/status``:

  imports   import numpy, torch and dpemb only: the floor every rank pays.
  streamed  what the engine does now: ``UserDataset.load(dir)`` (memory-mapped),
            ``split()`` (train and test are RowViews of the memmap: nothing read), then
            one federated pass: every training user in random order, its rows gathered
            by ``dpemb.algorithms.round.ClientData.client`` (what ``train_federated``'s
            clients read through: ``train.images[idx]`` to a uint8 NCHW tensor); then the test split embedded-style, read in
            batches of 512 (``dpemb.data.rows.iter_batches`` + ``to_float_tensor``).
  kept      the same pass with ``release_pages=False``: the memmap pages read stay
            mapped (what plain memmap slicing does).
  copied    the code before this change: ``select`` copied the split out of the
            memmap (``images[idx]``) and ``train_federated`` made it one tensor
            (``numpy_to_tensor(train.images).permute(0, 3, 1, 2).contiguous()``); the
            same pass then indexes that tensor.

What the columns mean:

  VmHWM     the kernel's peak resident set of the process: anonymous memory (numpy and
            torch allocations) PLUS file-backed pages mapped into it (the memmap's pages
            it has touched and not dropped) PLUS the shared libraries.
  peak anon peak RssAnon, SAMPLED (a thread reads /proc/self/status every ~2 ms, and
            after every client): the memory that is really the process's own; it
            cannot be reclaimed without swap. File pages (RssFile) are clean page
            cache: the kernel can drop them under pressure, so a large RssFile is not
            an out-of-memory risk, but it is what ``top`` and many schedulers show.
  ratio     copied / streamed, of VmHWM and of VmHWM above the imports floor.

A RowView drops the pages of every read once its rows are copied out
(``madvise(MADV_DONTNEED)``), so ``streamed`` holds only the current client's rows:
its VmHWM stays at the floor whatever the dataset size, and a dataset larger than RAM
can be trained on. ``kept`` shows the same pass without dropping: its anonymous memory
is as small, but the touched file pages stay mapped, so VmHWM grows with the data read.
``copied`` needs the whole training split in anonymous memory, twice at the moment of
the permute (numpy copy + contiguous torch copy), on top of the mapped file pages.

What does grow with the dataset in ``streamed`` is its index: labels, offsets, split
masks and the views' row indices (int64 per example), plus the transient arrays
``split()`` sorts, part of which the allocator keeps: tens of bytes per example against
3072 bytes of image (printed under the table).

The datasets were just written, so their pages sit in the page cache: this measures
memory, not disk I/O (a dataset larger than RAM would be read from disk in the
streamed pass). The three passes must read the same rows (same checksum of the rows
read, same examples; ``bench/_compare.py``), else the benchmark stops before the
table. One process reads every user here; a rank of a distributed run reads
only its share, so its memory is at most this.

    .venv/bin/python bench/bench_memory.py [--sizes-mb 50 200 800] [--dir TMPDIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _compare import same_quantity

IMAGE = (32, 32, 3)
PER_USER = 20


# ---------------------------------------------------------------------- child side
def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0])  # kB
    return out


class Peaks:
    """Peak RssAnon / RssFile, sampled by a thread and by explicit calls."""

    def __init__(self, every_s: float = 0.002) -> None:
        self.anon = self.file = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)
        self._thread.start()

    def sample(self) -> None:
        s = _status()
        self.anon, self.file = max(self.anon, s["RssAnon"]), max(self.file, s["RssFile"])

    def _run(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            self.sample()

    def finish(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self.sample()
        s = _status()
        return {"vmhwm_mb": s["VmHWM"] / 1024, "peak_anon_mb": self.anon / 1024,
                "peak_file_mb": self.file / 1024}


def child(mode: str, path: str) -> dict[str, float]:
    import numpy as np
    import torch

    from dpemb.algorithms.round import ClientData, client_example_indices
    from dpemb.data.dataset import UserDataset
    from dpemb.data.rows import RowView, iter_batches
    from dpemb.data.tensors import numpy_to_tensor, to_float_tensor

    torch.set_num_threads(1)
    floor_anon = _status()["RssAnon"]
    peaks = Peaks()
    if mode == "imports":
        return peaks.finish()
    t0 = time.perf_counter()
    ds = UserDataset.load(path)
    sp = ds.split()
    train, test = sp.train, sp.test
    split_anon = _status()["RssAnon"] - floor_anon  # index arrays: labels, offsets, masks, rows
    order = np.random.default_rng(0).permutation(train.num_users)
    check = 0
    if mode == "copied":  # the pre-change code path: select copied, then one tensor
        train_images = ds.images[np.flatnonzero(sp.mask("train"))]
        test_images = ds.images[np.flatnonzero(sp.mask("test"))]
        peaks.sample()
        images = numpy_to_tensor(train_images).permute(0, 3, 1, 2).contiguous()
        del train_images
        peaks.sample()
        for u in order:
            idx = client_example_indices(train.offsets, np.array([u]))
            x = images[torch.from_numpy(idx)]
            check += int(x[:, 0, 0, 0].sum())
            peaks.sample()
    else:
        if mode == "kept":
            train.images = RowView(train.images.base, train.images.rows, release_pages=False)
            test.images = RowView(test.images.base, test.images.rows, release_pages=False)
        assert isinstance(train.images, RowView) and train.images.releases_pages == (mode == "streamed")
        data = ClientData.of(train)  # what train_federated's clients read through
        for u in order:  # one federated pass: each client's rows, read on their own
            x, _, _ = data.client(np.array([u]))
            check += int(x[:, 0, 0, 0].sum())
            peaks.sample()
        test_images = test.images
    for _, batch in iter_batches(test_images, 512):  # evaluation: batches of the test split
        check += int(to_float_tensor(batch)[:, 0, 0, 0].sum().item() > -1)
        peaks.sample()
    out = peaks.finish()
    out.update(seconds=time.perf_counter() - t0, check=check, train_mb=train.images.nbytes / 2**20,
               train_users=train.num_users, examples=ds.num_examples, split_anon_mb=split_anon / 1024)
    return out


def make(path: str, mb: float) -> None:
    import numpy as np

    from dpemb.data.dataset import UserDataset

    row = int(np.prod(IMAGE))
    users = max(20, int(mb * 2**20 / row / PER_USER))
    n = users * PER_USER
    rng = np.random.default_rng(0)
    images = np.frombuffer(rng.bytes(n * row), dtype=np.uint8).reshape((n, *IMAGE))
    user = np.repeat(np.arange(users), PER_USER)
    ds = UserDataset.from_arrays(images, user, user)  # identity = user
    del images
    k = max(2, users // 10)
    ds.eval_labels = list(range(users - k, users))  # last 10%: test users and identities
    ds.eval_users = list(range(users - k, users))
    ds.public_users = list(range(k // 2))  # first 5%: public
    ds.save(path)


# ---------------------------------------------------------------------- parent side
def run_child(*args: str) -> dict[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    res = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else {}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[50, 200, 800])
    p.add_argument("--dir", default=None, help="where to write the datasets (default: a temp dir)")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        mode, path = args.child[0], args.child[1]
        if mode == "make":
            make(path, float(args.child[2]))
            return
        print(json.dumps(child(mode, path)))
        return
    if not sys.platform.startswith("linux"):
        sys.exit("bench_memory reads /proc/self/status: Linux only")

    root = Path(tempfile.mkdtemp(prefix="dpemb-bench-memory-", dir=args.dir))
    rows = []
    try:
        floor = run_child("imports", "-")
        print(f"imports only (numpy, torch, dpemb): VmHWM {floor['vmhwm_mb']:.0f} MB, "
              f"RssAnon {floor['peak_anon_mb']:.0f} MB")
        for mb in args.sizes_mb:
            path = root / f"ds{mb:g}"
            run_child("make", str(path), str(mb))
            disk = (path / "images.npy").stat().st_size / 2**20
            r = {"images_mb": disk}
            for mode in ("streamed", "kept", "copied"):
                r[mode] = run_child(mode, str(path))
            for mode in ("kept", "copied"):  # the same rows read, before any ratio
                same_quantity(f"{mb:g} MB: {mode} vs streamed pass", sides=(mode, "streamed"),
                              params={"rows checksum": (r[mode]["check"], r["streamed"]["check"]),
                                      "examples": (r[mode]["examples"], r["streamed"]["examples"])})
            rows.append(r)
            shutil.rmtree(path)
            print(f"  {disk:.0f} MB done", file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    f0 = floor["vmhwm_mb"]
    head = (f"{'images':>8} {'train':>7} | {'streamed':>21} | {'kept pages':>21} | {'copied (before)':>21} "
            f"| {'ratio copied/streamed':>21}")
    sub = (f"{'MB':>8} {'MB':>7} | {'VmHWM':>7} {'anon':>6} {'s':>6} | {'VmHWM':>7} {'anon':>6} {'s':>6} "
           f"| {'VmHWM':>7} {'anon':>6} {'s':>6} | {'VmHWM':>7} {'above floor':>13}")
    print()
    print(head)
    print(sub)
    print("-" * len(sub))
    for r in rows:
        s, k, c = r["streamed"], r["kept"], r["copied"]
        cells = []
        for m in (s, k, c):
            cells.append(f"{m['vmhwm_mb']:7.0f} {m['peak_anon_mb']:6.0f} {m['seconds']:6.1f}")
        above = (c["vmhwm_mb"] - f0) / max(s["vmhwm_mb"] - f0, 1.0)
        print(f"{r['images_mb']:8.0f} {s['train_mb']:7.0f} | " + " | ".join(cells)
              + f" | {c['vmhwm_mb'] / s['vmhwm_mb']:6.2f}x {above:12.1f}x")
    for r in rows:
        s = r["streamed"]
        print(f"streamed, {r['images_mb']:.0f} MB: load + split() raised RssAnon by {s['split_anon_mb']:.1f} MB "
              f"({s['split_anon_mb'] * 2**20 / s['examples']:.0f} bytes per example: labels, offsets, split "
              f"masks, row indices, allocator retention; images are {IMAGE[0] * IMAGE[1] * IMAGE[2]} bytes per example)")
    print(f"\nMB = MiB. floor (imports only): VmHWM {f0:.0f} MB. VmHWM = kernel peak RSS (anon + file pages"
          " + libraries); anon = sampled peak RssAnon; s = seconds for load + split + one pass over every"
          " training user + the test split in batches of 512. 'above floor' = (VmHWM - floor) ratio,"
          " streamed's excess floored at 1 MB.")


if __name__ == "__main__":
    main()

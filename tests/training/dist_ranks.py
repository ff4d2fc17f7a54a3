"""Run ``train_federated`` on several local processes, as torchrun would (gloo on loopback).

``launch(world, tmp_path, name, **kw)`` starts ``world`` processes, forked from a server
that has imported torch and dpemb once, with torchrun's environment variables
(MASTER_ADDR=127.0.0.1, a free port, RANK, WORLD_SIZE, LOCAL_RANK); each builds the same data and configs as ``test_federated.setup`` and
calls ``train_federated``. Rank 0 writes the outcome (the report, or the error) to
``<tmp>/<name>.outcome.json``. ``plant`` injects a bug in every rank, for tests only:

- ``"noise_per_rank"``: every worker rank adds its own Gaussian draw (z x sensitivity)
  to its partial clipped sum before the reduce, as a per-worker-noise bug would;
- ``"kill_rank1_round3"``: rank 1 dies (``os._exit``) when round 3 reaches it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: imported once by the fork server, so that each rank starts in well under a second
#: instead of importing torch and dpemb anew (about 6 s a launch on 2 cores). The server
#: only imports: it runs no torch computation, so no OpenMP or gloo thread is forked.
PRELOAD = ["torch", "torch._dynamo", "dpemb.training.federated", "tests.training.test_federated"]


def launch(world: int, tmp_path: Path, name: str, timeout: float = 240, **kw: Any) -> tuple[list[int], dict]:
    """Run the ranks, forked from a server that has imported ``PRELOAD``; (exit codes,
    rank 0's outcome)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    port = free_port()
    procs = [ctx.Process(target=_rank_main, args=(rank, world, port, str(tmp_path), name, kw))
             for rank in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join()
    outcome = tmp_path / f"{name}.outcome.json"
    return [p.exitcode for p in procs], json.loads(outcome.read_text()) if outcome.exists() else {}


def _rank_main(rank: int, world: int, port: int, tmp: str, name: str, kw: dict[str, Any]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
    import torch

    torch.set_num_threads(1)
    import dpemb.training.federated as fed
    from tests.training.test_federated import MODEL, setup

    plant = kw.pop("plant", None)
    resume = kw.pop("resume", False)
    train, ev, spec, cfg, run = setup(Path(tmp), name, **kw)
    if plant:
        _plant(plant, rank)
    out = Path(tmp) / f"{name}.outcome.json"
    try:
        report = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=7, resume=resume)
        if rank == 0:
            out.write_text(json.dumps({"report": report}))
    except Exception as e:  # noqa: BLE001
        if rank == 0:
            out.write_text(json.dumps({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}))
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(1)
    # as `dpemb train` does for its worker ranks: skip the interpreter's teardown of gloo's
    # threads, which intermittently aborts (exit -6) after a finished run
    sys.stderr.flush()
    os._exit(0)


def _plant(plant: str, rank: int) -> None:
    import torch

    from dpemb.training import executor as ex

    real_run = ex.DistributedExecutor._run
    if plant == "noise_per_rank":
        def noisy_run(self, rnd, start, work, acc):
            tally = real_run(self, rnd, start, work, acc)
            if not self.is_main:  # the bug: a worker noises its own partial sum
                z = 100.0  # the z the test runs with
                noise = torch.randn(acc._sum[0].shape, generator=torch.Generator().manual_seed(99 + rnd))
                acc._sum[0].add_(z * acc.sensitivity * noise.to(acc._sum[0]))
            return tally
        ex.DistributedExecutor._run = noisy_run
    elif plant == "kill_rank1_round3":
        def dying_run(self, rnd, start, work, acc):
            if self.rank == 1 and rnd == 2:
                os._exit(3)
            return real_run(self, rnd, start, work, acc)
        ex.DistributedExecutor._run = dying_run
    else:
        raise ValueError(plant)

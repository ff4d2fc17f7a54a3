"""Who runs a round's virtual clients: this process, or every process of a torch.distributed job.

The training loop is the same either way: after ``tally = executor.run_round(rnd, start,
slots, keys, acc)``, ``acc`` (the round's clip-and-sum) holds the clipped SUM of every
client of the round, whatever ran them. ``DistributedExecutor`` (torchrun; gloo on CPU,
NCCL on GPU), in the style of pfl-research and Opacus: rank 0 runs the loop, every other
rank serves rounds (``serve``); the collectives, faults and restarts: docs/SCALE.md, "What
one round does on P processes".

Invariants: rank 0 holds ALL private training state (sampler, noise, ledger, server
optimizer) and draws the noise ONCE, after the SUM reduce, so its std is z x sensitivity
whatever the world size; a client's update depends on its key
(``dpemb.privacy.client_keys``), never on the rank that runs it; the gathered counts are
private, never released. A checkpoint therefore does not depend on the world size.
A dead rank makes rank 0's next collective fail: ``RankFailure``, and the job stops.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist

from dpemb.algorithms.client import ClientTrainer
from dpemb.algorithms.round import ClientData, ClientTally, accumulate_clients, map_clients
from dpemb.privacy.client_keys import ClientRandomness
from dpemb.data.rows import row_span
from dpemb.privacy.clipping import ClipAndSum
from dpemb.training.evaluate import embed_images
from dpemb.training.job_env import DistributedEnv, contiguous_share

#: how long a rank waits in a collective before giving up (rank 0 evaluates and
#: checkpoints while the others wait)
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=60)


class RankFailure(RuntimeError):
    """A collective of a distributed round failed: a process stopped or lost its connection."""


def rank_device(device: torch.device, env: DistributedEnv | None) -> torch.device:
    """A CUDA device without an index becomes this rank's local GPU (cuda:LOCAL_RANK,
    modulo the GPUs present), or the current GPU outside torchrun."""
    if device.type == "cuda" and device.index is None:
        index = env.local_rank % max(torch.cuda.device_count(), 1) if env is not None else torch.cuda.current_device()
        device = torch.device("cuda", index)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def assign_clients(sizes: Sequence[int], world_size: int) -> list[list[int]]:
    """Client indices per rank, balanced by example count: the largest client first onto
    the least-loaded rank (lowest rank on ties). Deterministic; empty clients skipped."""
    load = [0] * world_size
    parts: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        if sizes[i] == 0:
            continue
        r = min(range(world_size), key=lambda r: (load[r], r))
        parts[r].append(i)
        load[r] += sizes[i]
    return [sorted(p) for p in parts]


class LocalExecutor:
    """The round's clients one after another in this process."""

    rank, world_size, is_main = 0, 1, True
    collective_seconds = 0.0  # time in collectives, waiting for the slowest rank included
    failed = False  # a collective failed (a rank was lost)

    def __init__(self, trainer: ClientTrainer, data: ClientData, randomness: ClientRandomness) -> None:
        self.trainer, self.data, self.randomness = trainer, data, randomness
        self.client_seconds: list[float] = []  # the last round's time training clients, per rank (rank 0's only)

    def run_round(self, rnd: int, start: torch.Tensor, slots: Sequence[np.ndarray],
                  keys: Sequence[tuple[int, int]], acc: ClipAndSum) -> ClientTally:
        """Train every client from ``start`` and clip its delta into ``acc``."""
        t0 = time.perf_counter()
        tally = self._train(rnd, start, slots, keys, acc)
        self.client_seconds = [time.perf_counter() - t0]
        return tally

    def _train(self, rnd: int, start: torch.Tensor, slots: Sequence[np.ndarray],
               keys: Sequence[tuple[int, int]], acc: ClipAndSum) -> ClientTally:
        return accumulate_clients(map_clients(self.trainer, start, slots, keys, self.data, self.randomness, rnd), acc)

    def embed(self, model: torch.nn.Module, images: Any, batch_size: int) -> torch.Tensor:
        """L2-normalised embeddings (CPU) of ``images`` by ``model``, in order."""
        return embed_images(model, images, batch_size=batch_size, device=self.data.device)

    def close(self) -> None:
        pass


class DistributedExecutor(LocalExecutor):
    """A round's clients spread over the ranks of a torch.distributed job (module docstring)."""

    def __init__(self, trainer: ClientTrainer, data: ClientData, randomness: ClientRandomness,
                 env: DistributedEnv, template: Sequence[torch.Tensor], eval_images: Any = None) -> None:
        super().__init__(trainer, data, randomness)
        self.env = env
        self.rank, self.world_size, self.is_main = env.rank, env.world_size, env.rank == 0
        self.template = [torch.zeros_like(t) for t in template]
        self.comm_device = torch.device("cuda", torch.cuda.current_device()) \
            if dist.get_backend() == "nccl" else torch.device("cpu")
        self._closed = False
        self.eval_images = eval_images  # the held-out split's images (workers embed a share)

    # ------------------------------------------------------------------ rank 0
    def run_round(self, rnd: int, start: torch.Tensor, slots: Sequence[np.ndarray],
                  keys: Sequence[tuple[int, int]], acc: ClipAndSum) -> ClientTally:
        parts = assign_clients([self.data.examples(u) for u in slots], self.world_size)
        work = [[(slots[i], keys[i]) for i in part] for part in parts]
        msg = {"op": "round", "round": rnd, "work": work, "randomness": self.randomness.state_dict(),
               "clip": (acc.clip_norm, acc.sensitivity, acc.relation)}
        self._collective(f"round {rnd + 1}", lambda: dist.broadcast_object_list([msg], src=0))
        buf = start.detach().to(self.comm_device).clone()
        self._collective(f"round {rnd + 1}", lambda: dist.broadcast(buf, src=0))
        return self._merge(rnd, acc, *self._run(rnd, start, work[0], acc))

    def _merge(self, rnd: int, acc: ClipAndSum, tally: ClientTally, seconds: float) -> ClientTally:
        """Reduce the clipped sums to rank 0 and gather there the counts and each rank's
        ``seconds`` training its clients (private timing, ``client_seconds``)."""
        total = acc.result().value[0].to(self.comm_device)
        self._collective(f"round {rnd + 1}",
                         lambda: dist.reduce(total, dst=0, op=dist.ReduceOp.SUM))
        gathered: list[Any] = [None] * self.world_size if self.is_main else None  # type: ignore[assignment]
        self._collective(f"round {rnd + 1}",
                         lambda: dist.gather_object((acc.counts(), tally, seconds), gathered, dst=0))
        if self.is_main:
            acc.absorb([total], [c for c, _, _ in gathered[1:]])
            for _, t, _ in gathered[1:]:
                tally.merge(t)
            self.client_seconds = [seconds, *(s for _, _, s in gathered[1:])]
        return tally

    def embed(self, model: torch.nn.Module, images: Any, batch_size: int) -> torch.Tensor:
        """Every rank embeds a contiguous share of ``images`` with rank 0's current
        trainable parameters (the other parameters are frozen, equal on every rank);
        rank 0 gathers the shares in order. Evaluation of held-out users only."""
        from torch.nn.utils import parameters_to_vector

        if self._closed:  # the other ranks have stopped serving: embed everything here
            return super().embed(model, images, batch_size)
        msg = {"op": "embed", "rows": len(images), "batch_size": batch_size}
        self._collective("an evaluation", lambda: dist.broadcast_object_list([msg], src=0))
        params = [p for p in model.parameters() if p.requires_grad]
        buf = parameters_to_vector(params).detach().to(self.comm_device).clone()
        self._collective("an evaluation", lambda: dist.broadcast(buf, src=0))
        return self._embed_share(model, images, len(images), batch_size)

    def _embed_share(self, model: torch.nn.Module, images: Any, rows: int, batch_size: int) -> torch.Tensor:
        lo, hi = contiguous_share(rows, self.rank, self.world_size)
        mine = embed_images(model, row_span(images, lo, hi), batch_size=batch_size, device=self.data.device)
        shares: list[Any] = [None] * self.world_size if self.is_main else None  # type: ignore[assignment]
        self._collective("an evaluation", lambda: dist.gather_object(mine, shares, dst=0))
        return torch.cat(shares) if self.is_main else mine

    def close(self) -> None:
        """Tell the other ranks that training is over (they return from ``serve``)."""
        if self.is_main and not self._closed:
            self._closed = True
            self._collective("the stop at the end of training",
                             lambda: dist.broadcast_object_list([{"op": "stop"}], src=0))

    # ------------------------------------------------------------------ ranks > 0
    def serve(self) -> int:
        """Run this rank's share of every round until rank 0 says stop; the rounds served."""
        served = 0
        while True:
            box: list[Any] = [None]
            self._collective("the wait for rank 0's next message",
                             lambda: dist.broadcast_object_list(box, src=0))
            msg = box[0]
            if msg["op"] == "stop":
                return served
            if msg["op"] == "embed":
                self._serve_embed(msg)
                continue
            rnd = int(msg["round"])
            self.randomness.load_state_dict(msg["randomness"])
            start = torch.empty_like(self.template[0], device=self.comm_device)
            self._collective(f"round {rnd + 1}", lambda: dist.broadcast(start, src=0))
            clip_norm, sensitivity, relation = msg["clip"]
            acc = ClipAndSum(self.template, clip_norm, sensitivity, relation)
            self._merge(rnd, acc, *self._run(rnd, start.to(self.data.device), msg["work"][self.rank], acc))
            served += 1

    def _serve_embed(self, msg: dict[str, Any]) -> None:
        """This rank's share of an evaluation: the working model, loaded with rank 0's
        parameters, embeds its rows of the held-out split (``eval_images``)."""
        from dpemb.algorithms.client import load_flat_

        model = self.trainer.model
        params = [p for p in model.parameters() if p.requires_grad]  # the backbone's (no global head)
        vec = torch.empty(sum(p.numel() for p in params), device=self.comm_device)
        self._collective("an evaluation", lambda: dist.broadcast(vec, src=0))
        load_flat_(params, vec.to(self.data.device))
        if self.eval_images is None or len(self.eval_images) != msg["rows"]:
            raise RankFailure(f"rank {self.rank} has no held-out split of {msg['rows']} rows to embed")
        self._embed_share(model, self.eval_images, msg["rows"], msg["batch_size"])

    # ------------------------------------------------------------------ both
    def _run(self, rnd: int, start: torch.Tensor, work: list[tuple[np.ndarray, tuple[int, int]]],
             acc: ClipAndSum) -> tuple[ClientTally, float]:
        """This rank's share of the round's clients, clipped into ``acc``; and the seconds it took."""
        slots = [np.asarray(u, dtype=np.int64) for u, _ in work]
        keys = [tuple(k) for _, k in work]
        t0 = time.perf_counter()
        tally = self._train(rnd, start, slots, keys, acc)
        return tally, time.perf_counter() - t0

    def _collective(self, where: str, call: Any) -> None:
        """Run one collective; a failure becomes ``RankFailure`` naming ``where`` it happened."""
        t0 = time.perf_counter()
        try:
            call()
            self.collective_seconds += time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001  (gloo/NCCL raise RuntimeError subclasses)
            self._closed = self.failed = True
            raise RankFailure(
                f"rank {self.rank} of {self.world_size}: a collective failed during {where} ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); a process of the job stopped or lost its connection"
            ) from e


def join_job(device: torch.device) -> tuple[DistributedEnv | None, torch.device, bool]:
    """The torchrun job this process runs in (None outside one), the device this rank
    computes on, and whether this process joined the process group (and leaves it)."""
    env = DistributedEnv.from_environ()
    device = rank_device(device, env)
    return env, device, (init_distributed(env, device) if env is not None else False)


def init_distributed(env: DistributedEnv, device: torch.device) -> bool:
    """Join torchrun's process group (NCCL for CUDA devices, gloo otherwise); False when
    the caller had joined one already (then it is theirs to destroy)."""
    if dist.is_initialized():
        return False
    backend = collective_backend(device, env)
    store = attempt_store(env)
    joined = {} if store is None else dict(store=store, rank=env.rank, world_size=env.world_size)
    dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT, **joined)
    return True


def attempt_store(env: DistributedEnv) -> Any:
    """Under torchrun (``TORCHELASTIC_RESTART_COUNT`` set): the job's store with keys
    prefixed by the attempt, so that a restarted job never reads an address that a rank
    of an earlier attempt published (gloo would connect to its dead listener). None
    outside torchrun."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None or "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
        return None
    store, _, _ = next(dist.rendezvous("env://", env.rank, env.world_size, timeout=COLLECTIVE_TIMEOUT))
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    return dist.PrefixStore(f"dpemb/{run_id}/attempt{attempt}/", store)


def collective_backend(device: torch.device, env: DistributedEnv) -> str:
    """NCCL when every rank of this node has a GPU of its own; gloo on CPUs and when
    several ranks share a GPU (``--nproc-per-node`` above the GPU count: NCCL refuses
    two ranks on one device), the clipped sums then travel through host memory."""
    if device.type != "cuda":
        return "gloo"
    return "nccl" if env.local_world_size <= torch.cuda.device_count() else "gloo"


def exit_worker() -> None:
    """A worker rank whose work is done leaves at once: it has nothing to save, and
    letting the interpreter tear down gloo's threads intermittently aborts (exit -6,
    which torchrun reports as a failed job)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def leave_distributed(created: bool) -> None:
    """Destroy the process group ``init_distributed`` created (a local operation: no
    collective, so a rank that already left cannot make it fail)."""
    if created and dist.is_initialized():
        dist.destroy_process_group()

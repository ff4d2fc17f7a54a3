"""One round of federated training as map (client updates) then reduce (private sum).

Client updates -> ``ClipAndSum`` (clipped sum + its sensitivity) -> noise -> divided by the
PUBLIC expected number of clients -> server optimizer (post-processing; diagram:
docs/SCALE.md, "dpemb.algorithms.round"). ``map_clients`` (training, reading each client's
rows through ``ClientData``) and ``accumulate_clients`` (clipping into a ``ClipAndSum``) are
separate from ``round_stats`` so that a distributed executor (``dpemb.training.executor``)
can run them on many processes and merge the partial accumulators and tallies before the
statistics are taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from dpemb.algorithms.batched_client import BatchedClientTrainer, ClientInput
from dpemb.algorithms.client import ClientResult, ClientTrainer, split_flat
from dpemb.algorithms.server import set_server_lr
from dpemb.privacy.client_keys import ClientRandomness
from dpemb.privacy.clipping import ClipAndSum, ClippedSum


@dataclass
class RoundStats:
    clients: int = 0  # non-empty virtual clients this round
    users: int = 0
    examples: int = 0
    loss: float = float("nan")
    preclip_norm_mean: float = float("nan")
    fraction_clipped: float = float("nan")
    nonfinite: int = 0
    unclipped: int = 0  # clients with pre-clip norm <= C (adaptive clipping's un-noised count: PRIVATE)
    losses: list[float] = field(default_factory=list)


def client_example_indices(offsets: np.ndarray, users: np.ndarray) -> np.ndarray:
    """Concatenate the example rows of ``users`` (data sorted by user)."""
    if len(users) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(offsets[u], offsets[u + 1]) for u in users])


class ClientData:
    """A training split as virtual clients read it: each client's rows are gathered
    from the store (a memory-mapped file, or an array) when the client runs, so a
    process holds one client's images at a time, never the whole split.

    ``images``: uint8 (N, H, W, C), anything numpy-indexable by an integer array (an
    ndarray, a read-only memmap, ``dpemb.data.rows.RowView``); ``labels`` (N,);
    ``offsets`` (U + 1,): user u owns rows offsets[u]:offsets[u+1]. A client's images
    go to ``device`` once, as uint8."""

    def __init__(self, images: Any, labels: np.ndarray, offsets: np.ndarray,
                 device: torch.device | str = "cpu") -> None:
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.device = torch.device(device)

    @classmethod
    def of(cls, ds: Any, device: torch.device | str = "cpu") -> "ClientData":
        """From a ``UserDataset``."""
        return cls(ds.images, ds.labels, ds.offsets, device)

    def examples(self, users: np.ndarray) -> int:
        """The number of examples of ``users`` (a client's cost, for balancing work)."""
        users = np.asarray(users, dtype=np.int64)
        return int((self.offsets[users + 1] - self.offsets[users]).sum()) if len(users) else 0

    def client(self, users: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """(images uint8 (n, C, H, W) on the device, labels (n,), row indices 0..n-1)
        of the examples of ``users``, in user order."""
        rows = client_example_indices(self.offsets, users)
        images = torch.from_numpy(np.ascontiguousarray(np.asarray(self.images[rows], dtype=np.uint8)))
        images = images.permute(0, 3, 1, 2).contiguous().to(self.device, non_blocking=True)
        return images, torch.from_numpy(self.labels[rows]), np.arange(len(rows), dtype=np.int64)


def map_clients(
    trainer: ClientTrainer | BatchedClientTrainer,
    start: torch.Tensor,
    slots: Sequence[np.ndarray],
    keys: Sequence[tuple[int, int]],
    data: ClientData,
    randomness: ClientRandomness,
    rnd: int,
) -> Iterable[tuple[ClientResult, int]]:
    """Yield (client result, number of users) for every non-empty virtual client.

    Client ``i`` draws its randomness from ``(run key, rnd, keys[i])`` alone
    (``dpemb.privacy.client_keys``), so its update does not depend on the other
    clients, on their order, or on which process runs it."""
    if len(keys) != len(slots):
        raise ValueError(f"{len(slots)} clients but {len(keys)} keys")
    batch = trainer.max_batch_clients if isinstance(trainer, BatchedClientTrainer) else 1
    pending: list[tuple[ClientInput, int]] = []
    for users, key in zip(slots, keys):
        if len(users) == 0:
            continue
        images, labels, idx = data.client(users)
        if len(idx) == 0:
            continue
        rng, generator = randomness.data_rng(rnd, key), randomness.init_generator(rnd, key)
        if batch == 1:
            yield trainer.update(start, images, labels, idx, rng, generator), len(users)
            continue
        pending.append((ClientInput(images, labels, idx, rng, generator), len(users)))  # B at once
        if len(pending) == batch:
            yield from _train_pending(trainer, start, pending)
    if pending:
        yield from _train_pending(trainer, start, pending)


def _train_pending(trainer: "BatchedClientTrainer", start: torch.Tensor,
                   pending: list[tuple["ClientInput", int]]) -> Iterable[tuple[ClientResult, int]]:
    results = trainer.update_many(start, [c for c, _ in pending])
    out = [(r, n) for r, (_, n) in zip(results, pending)]
    pending.clear()
    return out


@dataclass
class ClientTally:
    """What a process's clients did this round, beside their clipped deltas (PRIVATE:
    un-noised statistics of the sampled users; summed across processes)."""

    clients: int = 0
    users: int = 0
    examples: int = 0
    losses: list[float] = field(default_factory=list)

    def merge(self, other: "ClientTally") -> None:
        self.clients += other.clients
        self.users += other.users
        self.examples += other.examples
        self.losses += other.losses


def accumulate_clients(results: Iterable[tuple[ClientResult, int]], accumulator: ClipAndSum) -> ClientTally:
    """Clip every client's delta into ``accumulator`` (``privacy.clipping``); the tally."""
    tally = ClientTally()
    for res, n_users in results:
        accumulator.add([res.delta])
        tally.clients += 1
        tally.users += n_users
        tally.examples += res.examples
        tally.losses.append(res.loss)
    return tally


def round_stats(clipped: ClippedSum, tally: ClientTally) -> RoundStats:
    """The round's statistics from the merged clipped sum and tally (PRIVATE)."""
    stats = RoundStats(clients=tally.clients, users=tally.users, examples=tally.examples,
                       losses=list(tally.losses))
    if stats.clients:
        stats.loss = float(np.mean(stats.losses))
        norms = np.asarray(clipped.preclip_norms, dtype=float)
        finite = norms[np.isfinite(norms)]
        stats.preclip_norm_mean = float(finite.mean()) if len(finite) else float("nan")
        stats.fraction_clipped = clipped.num_clipped / stats.clients
    stats.nonfinite = clipped.num_nonfinite
    stats.unclipped = clipped.num_unclipped
    return stats


def server_step(
    params: Sequence[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    noised_sum: torch.Tensor,
    normaliser: float,
    lr: float | None = None,
) -> None:
    """Apply ``noised_sum / normaliser`` as the gradient of the server optimizer.

    ``normaliser`` must be a PUBLIC constant (the expected number of virtual clients),
    never the realised count of this round, which would leak participation.
    ``lr``: this round's server learning rate (``dpemb.algorithms.server.server_lr_at``,
    a function of the round number only); None keeps the optimizer's. The optimizer
    (SGD with momentum or FedAdam) and its schedule are post-processing of the noised
    sum: they do not change the privacy guarantee.
    """
    if lr is not None:
        set_server_lr(optimizer, lr)
    for p, g in zip(params, split_flat(noised_sum / float(normaliser), params, "update")):
        p.grad = g.clone()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

"""One round of federated training as map (client updates) then reduce (private sum).

    slots (from privacy.sampling) --map: client_update--> deltas
    deltas --reduce: privacy.clipping.ClipAndSum--> clipped sum + its sensitivity
    clipped sum --privacy.noise (Gaussian or tree)--> noised sum
    noised sum / expected clients (PUBLIC constant) --server optimizer--> new model
      (SGD + momentum or FedAdam, with a round-indexed lr schedule: dpemb.algorithms.server;
      post-processing of the noised sum, so no change to the privacy guarantee)

``map_clients`` and ``reduce_clients`` are separate so that a distributed executor
can run the map on many processes and merge partial ``ClipAndSum`` accumulators.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np
import torch

from dpemb.algorithms.client import ClientResult, ClientTrainer
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


def map_clients(
    trainer: ClientTrainer,
    start: torch.Tensor,
    slots: Sequence[np.ndarray],
    keys: Sequence[tuple[int, int]],
    images: torch.Tensor,
    labels: torch.Tensor,
    offsets: np.ndarray,
    randomness: ClientRandomness,
    rnd: int,
) -> Iterable[tuple[ClientResult, int]]:
    """Yield (client result, number of users) for every non-empty virtual client.

    Client ``i`` draws its randomness from ``(run key, rnd, keys[i])`` alone
    (``dpemb.privacy.client_keys``), so its update does not depend on the other
    clients, on their order, or on which process runs it."""
    if len(keys) != len(slots):
        raise ValueError(f"{len(slots)} clients but {len(keys)} keys")
    for users, key in zip(slots, keys):
        idx = client_example_indices(offsets, users)
        if len(idx) == 0:
            continue
        result = trainer.update(
            start, images, labels, idx, randomness.data_rng(rnd, key), randomness.init_generator(rnd, key)
        )
        yield result, len(users)


def reduce_clients(
    results: Iterable[tuple[ClientResult, int]], accumulator: ClipAndSum
) -> tuple[ClippedSum, RoundStats]:
    """Clip every delta and sum them (privacy.clipping); collect round statistics."""
    stats = RoundStats()
    for res, n_users in results:
        accumulator.add([res.delta])
        stats.clients += 1
        stats.users += n_users
        stats.examples += res.examples
        stats.losses.append(res.loss)
    clipped = accumulator.result()
    if stats.clients:
        stats.loss = float(np.mean(stats.losses))
        norms = np.asarray(clipped.preclip_norms, dtype=float)
        finite = norms[np.isfinite(norms)]
        stats.preclip_norm_mean = float(finite.mean()) if len(finite) else float("nan")
        stats.fraction_clipped = clipped.num_clipped / stats.clients
    stats.nonfinite = clipped.num_nonfinite
    stats.unclipped = clipped.num_unclipped
    return clipped, stats


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
    update = noised_sum / float(normaliser)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = update[offset : offset + n].view_as(p).clone()
        offset += n
    if offset != update.numel():
        raise ValueError(f"update has {update.numel()} entries, parameters {offset}")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

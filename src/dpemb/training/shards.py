"""Rows split across the ranks of a torchrun job: ``dpemb embed``, ``eval`` and ``features``.

Every rank embeds one contiguous share of the rows; rank 0 gathers them in row order and
does the rest as one process would (docs/SCALE.md, "Embedding, evaluation and features
across ranks"). Outside torchrun nothing changes. Privacy: these commands run a released
model over data the user passes in; no private training state takes part, so how the rows
are split changes no guarantee.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from dpemb.data.rows import row_span
from dpemb.training.executor import exit_worker, join_job, leave_distributed
from dpemb.training.job_env import contiguous_share


@dataclass(frozen=True)
class RowShards:
    """This process's share of a job's rows: all of them outside torchrun."""

    rank: int = 0
    world_size: int = 1
    created_group: bool = False  # this process joined the process group (and leaves it)

    @classmethod
    def join(cls, device: torch.device) -> tuple["RowShards", torch.device]:
        """Join the torchrun job this process runs in, if any; return the shards and the
        device this rank computes on."""
        env, device, created = join_job(device)
        return (cls(), device) if env is None else (cls(env.rank, env.world_size, created), device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def span(self, rows: int) -> tuple[int, int]:
        """``[lo, hi)``: this rank's contiguous rows of ``rows``."""
        return contiguous_share(rows, self.rank, self.world_size)

    def share_of(self, images: Any) -> Any:
        """This rank's rows of ``images`` (lazy when ``images`` is: nothing is read)."""
        return images if self.world_size == 1 else row_span(images, *self.span(len(images)))

    def gather(self, part: np.ndarray) -> np.ndarray | None:
        """Every rank's ``part`` (its ``span``'s rows), concatenated in rank order on rank
        0; None on the other ranks."""
        if self.world_size == 1:
            return part
        parts: list[np.ndarray] | None = [None] * self.world_size if self.is_main else None  # type: ignore[list-item]
        dist.gather_object(part, parts, dst=0)
        return np.concatenate(parts) if parts is not None else None

    def finish(self) -> None:
        """End of the job: rank 0 leaves the process group; a worker rank exits at once
        (its share is delivered; see ``exit_worker``)."""
        if self.world_size == 1:
            return
        if not self.is_main:
            exit_worker()
        leave_distributed(self.created_group)


def quiet_worker() -> None:
    """A worker rank of a torchrun job prints nothing (rank 0 speaks for the job);
    errors still reach stderr."""
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (for the life of this worker process)

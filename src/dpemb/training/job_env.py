"""This process's place in a torchrun job, read from the environment (no torch import,
so the CLI can ask before it loads anything heavy)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DistributedEnv:
    """This process's place in a torchrun job (from its environment variables)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int = 1  # ranks on this node

    @classmethod
    def from_environ(cls) -> "DistributedEnv | None":
        """The job torchrun started this process in; None outside torchrun or for one process."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1 or "RANK" not in os.environ:
            return None
        return cls(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")),
                   int(os.environ.get("LOCAL_WORLD_SIZE", world)))


def contiguous_share(rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[lo, hi)``: rank ``rank``'s contiguous share of ``rows`` rows (the shares of all
    ranks cover every row once, in order, and differ in size by at most one)."""
    return rows * rank // world_size, rows * (rank + 1) // world_size

"""Per-client randomness from keys: (secret run key, round, client key).

Every random choice a virtual client makes comes from generators derived from ONE secret per-run
key, the round and the client's key, never from a stream shared across clients (why, and the
tests: docs/PRIVACY.md, "Randomness: keys, not shared streams"). Guarantees: adding or removing
one user changes the computation of exactly one virtual client, as the sensitivity of
``dpemb.privacy.relations`` assumes; a round's clipped sum does not depend on the order, process
or device its clients run on.

The client key: the slot index 0..M-1 for K > 1; the index of the client's only user for K = 1,
so a user added anywhere does not renumber the other clients. The two kinds live in separate key
domains. The run key is PRIVATE training state: from the OS's secure source unless seeded, kept
in the private checkpoint only.
"""

from __future__ import annotations

import numbers
import secrets
from typing import Any, Sequence

import numpy as np
import torch

_DOMAIN_SLOT = 0  # K > 1: key = slot index
_DOMAIN_USER = 1  # K = 1: key = user index
_STREAM_DATA = 0
_STREAM_INIT = 1


def seed_from(sequence: np.random.SeedSequence) -> int:
    """A non-negative 63-bit integer seed (for ``torch.Generator.manual_seed``) drawn from
    ``sequence``: the one way keyed randomness of dpemb turns a key into a seed."""
    return int(sequence.generate_state(1, np.uint64)[0] >> np.uint64(1))


def client_keys(slots: Sequence[np.ndarray], users_per_client: int) -> list[tuple[int, int]]:
    """The key of each virtual client of a round, in the order of ``slots``.

    ``slots`` is what ``VirtualClientSampler.sample_round`` returned: M arrays (some
    possibly empty) for K > 1, one singleton array per sampled user for K = 1."""
    if users_per_client == 1:
        keys = []
        for users in slots:
            if len(users) != 1:
                raise ValueError(f"with K = 1 every client holds one user, got {len(users)}")
            keys.append((_DOMAIN_USER, int(users[0])))
        return keys
    return [(_DOMAIN_SLOT, i) for i in range(len(slots))]


class ClientRandomness:
    """Derives a client's generators from (secret run key, round, client key)."""

    def __init__(self, seed: int | None = None) -> None:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self._seeded = seed is not None
        self._key = int(seed) if seed is not None else secrets.randbits(128)

    @property
    def seeded(self) -> bool:
        return self._seeded

    def _sequence(self, rnd: int, key: tuple[int, int], stream: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self._key, spawn_key=(int(rnd), *map(int, key), stream))

    def data_rng(self, rnd: int, key: tuple[int, int]) -> np.random.Generator:
        """Shuffles of the client's examples."""
        return np.random.Generator(np.random.PCG64(self._sequence(rnd, key, _STREAM_DATA)))

    def init_generator(self, rnd: int, key: tuple[int, int]) -> torch.Generator:
        """A CPU generator for the client's fresh head initialisation (draw on the CPU,
        then copy to the device: the same numbers on every device)."""
        seed = seed_from(self._sequence(rnd, key, _STREAM_INIT))
        return torch.Generator().manual_seed(seed)

    def state_dict(self) -> dict[str, Any]:
        return {"key": str(self._key), "seeded": self._seeded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._key = int(state["key"])
        self._seeded = bool(state["seeded"])

"""Sampling users each round and grouping them into virtual clients.

Schemes ``poisson`` (rate q = M*K/N, N public; ``sampling_rate`` pins q), ``fixed`` and ``epoch``
(R = ceil(N / (M*K)) rounds per epoch, each user exactly once per epoch), with the relation each
is accounted under: docs/PRIVACY.md, "Sampling, grouping and neighbouring relations".

Grouping: K = 1, every sampled user is its own client; K > 1, each sampled user goes to one of M
slots independently and uniformly, every round (``sample_round`` returns M arrays, some possibly
empty). So one user changes the data of at most ONE client, and the sensitivity of
``dpemb.privacy.relations`` holds (chunking a shuffled list would not). The public normaliser of
the sum is ``expected_clients`` = M, never the realised number of clients.

Randomness: round r draws from generators keyed by (seed, r), users in index order, so a
population with one extra user appended gives the same rounds except for that user. Without a
seed the key comes from the OS's secure source.
"""

from __future__ import annotations

import math
import numbers
import secrets
from typing import Any

import numpy as np

from dpemb.privacy._checks import positive_int

SAMPLING_SCHEMES = ("poisson", "fixed", "epoch")


class VirtualClientSampler:
    """Samples the users of each round and groups them into virtual clients."""

    def __init__(
        self,
        num_users: int,
        *,
        clients_per_round: int,
        users_per_client: int = 1,
        sampling: str = "poisson",
        seed: int | None = None,
        sampling_rate: float | None = None,
    ) -> None:
        self.num_users = positive_int("number of users", num_users)
        self.clients_per_round = positive_int("clients per round (M)", clients_per_round)
        self.users_per_client = positive_int("users per client (K)", users_per_client)
        if sampling not in SAMPLING_SCHEMES:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLING_SCHEMES)}, got {sampling!r}")
        self.sampling = sampling
        per_round = self.clients_per_round * self.users_per_client
        if per_round > self.num_users:
            raise ValueError(
                f"a round needs M*K = {self.clients_per_round} x {self.users_per_client} = {per_round} "
                f"users but the population has {self.num_users}: the sampling rate would exceed 1"
            )
        if sampling_rate is None:
            q = per_round / self.num_users
        else:
            if sampling != "poisson":
                raise ValueError("sampling_rate can only be set for Poisson sampling")
            q = float(sampling_rate)
            if not (0 < q <= 1):
                raise ValueError(f"sampling rate must lie in (0, 1], got {sampling_rate!r}")
        self._q = q
        # gaps drawn per chunk: depends on M and K only, so the draw stream does not depend on N
        self._gap_chunk = max(256, 2 * per_round)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self._seeded = seed is not None
        self._entropy = int(seed) if seed is not None else secrets.randbits(128)
        self._round = 0
        self._perm: tuple[int, np.ndarray] | None = None

    # ------------------------------------------------------------------ properties
    @property
    def sampling_rate(self) -> float:
        """Per-round probability that a given user takes part (q = M*K/N by default)."""
        return self._q

    @property
    def expected_clients(self) -> int:
        """M: the PUBLIC normaliser of the noisy sum."""
        return self.clients_per_round

    @property
    def rounds_per_epoch(self) -> int:
        """R = ceil(N / (M*K)) (meaningful for ``epoch`` sampling)."""
        return math.ceil(self.num_users / (self.clients_per_round * self.users_per_client))

    @property
    def seeded(self) -> bool:
        return self._seeded

    @property
    def rounds(self) -> int:
        """Rounds sampled so far."""
        return self._round

    # ------------------------------------------------------------------ sampling
    def _rng(self, *key: int) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(self._entropy, spawn_key=key)))

    def _poisson(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        """Indices of a Bernoulli(q) sample of range(size) (default N), via geometric gaps (exact)."""
        n = self.num_users if size is None else int(size)
        chunks, last = [], -1
        while last < n - 1:
            idx = last + np.cumsum(rng.geometric(self._q, size=self._gap_chunk))
            chunks.append(idx)
            last = int(idx[-1])
        users = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
        return users[users < n].astype(np.int64)

    def _epoch_block(self, rnd: int) -> np.ndarray:
        epoch, i = divmod(rnd, self.rounds_per_epoch)
        if self._perm is None or self._perm[0] != epoch:
            self._perm = (epoch, self._rng(epoch, 2).permutation(self.num_users).astype(np.int64))
        per_round = self.clients_per_round * self.users_per_client
        return self._perm[1][i * per_round:(i + 1) * per_round]

    def users_for_round(self, rnd: int) -> np.ndarray:
        """The users sampled in round ``rnd`` (0-based), before grouping."""
        rng = self._rng(rnd, 0)
        if self.sampling == "poisson":
            return self._poisson(rng)
        if self.sampling == "fixed":
            return np.sort(rng.choice(self.num_users, size=self.clients_per_round * self.users_per_client,
                                      replace=False)).astype(np.int64)
        return self._epoch_block(rnd)

    def group(self, users: np.ndarray, rnd: int) -> list[np.ndarray]:
        """Virtual clients of round ``rnd``: singletons for K = 1, else M uniform slots."""
        if self.users_per_client == 1:
            return [users[i:i + 1] for i in range(len(users))]
        slots = self._rng(rnd, 1).integers(0, self.clients_per_round, size=len(users))
        order = np.argsort(slots, kind="stable")
        counts = np.bincount(slots, minlength=self.clients_per_round)
        return [np.asarray(a, dtype=np.int64) for a in np.split(users[order], np.cumsum(counts)[:-1])]

    def sample_round(self) -> list[np.ndarray]:
        """Sample the next round: a list of user-index arrays, one per virtual client."""
        rnd = self._round
        clients = self.group(self.users_for_round(rnd), rnd)
        self._round += 1
        return clients

    # ------------------------------------------------------------------ state
    def _config(self) -> dict[str, Any]:
        return {
            "num_users": self.num_users, "clients_per_round": self.clients_per_round,
            "users_per_client": self.users_per_client, "sampling": self.sampling,
            "sampling_rate": self._q,
        }

    def state_dict(self) -> dict[str, Any]:
        return {**self._config(), "entropy": str(self._entropy), "round": self._round, "seeded": self._seeded}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume exactly; refuses a state saved for another population or scheme."""
        theirs = {k: state[k] for k in self._config()}
        if theirs != self._config():
            raise ValueError(f"sampler state was saved for {theirs}, this sampler is {self._config()}")
        self._entropy = int(state["entropy"])
        self._round = int(state["round"])
        self._seeded = bool(state["seeded"])
        self._perm = None

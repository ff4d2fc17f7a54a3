"""White-box canary users for a user-level privacy audit of federated training.

The canaries themselves: who they are, when they take part, what update they send and how they
are scored; ``dpemb.privacy.audit`` turns the scores into epsilons. Design and its reasons:
docs/AUDIT.md, "White-box canary users". What the estimators rely on:

- A canary adds no noise and no clip of its own: its update (a keyed unit direction u_i times
  ``norm_factor`` x C) goes through the run's own ``ClipAndSum.add`` and noise.
- Each canary is inserted by an independent fair coin, and an inserted one takes part exactly
  when the run's own sampler picks it (users ``first_user`` .. ``first_user + n - 1``), at the
  per-user rate q the accountant assumes.
- Worst case for the relation: with sensitivity 2C (K > 1) a HOST client per canary sends
  -C u_i every round, +C u_i where the inserted canary is sampled, so removing it moves the sum
  by exactly 2C; the hosts depend on no inclusion bit.
- The score is post-processing of the released models, so its bound holds for them.

The directions, the inclusion bits and the key are PRIVATE (``state`` goes to the run's private
directory); only the audit's summary is released.
"""

from __future__ import annotations

import math
import secrets
from typing import Any, Sequence

import numpy as np
import torch

from dpemb.privacy._checks import positive_finite, positive_int
from dpemb.privacy.client_keys import seed_from
from dpemb.privacy.clipping import ClipAndSum, ClippedSum
from dpemb.privacy.relations import Relation, user_sensitivity

DEFAULT_NORM_FACTOR = 10.0
#: cache the n x d direction matrix (float32) up to this many entries; above it every
#: direction is regenerated from its key when needed (memory O(d))
CACHE_ENTRIES = 1 << 25
#: the streams of a canary key, for every kind of canary (these clients, the black-box audit's
#: users, the transfer audit's feature rows): inclusion coins, the canaries themselves, bootstrap
STREAM_INCLUSION, STREAM_CONTENT, STREAM_BOOTSTRAP = 0, 1, 2


def canary_key(seed: int | None) -> int:
    """The canaries' secret key: ``seed``, or 128 bits from the OS's secure source."""
    return int(seed) if seed is not None else secrets.randbits(128)


def canary_stream(key: int, *stream: int) -> np.random.SeedSequence:
    """The seed sequence of ``stream`` (``STREAM_*``, then any sub-keys) of a canary key."""
    return np.random.SeedSequence(int(key), spawn_key=tuple(int(k) for k in stream))


def canary_rng(key: int, *stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(canary_stream(key, *stream)))


def bootstrap_seed(key: int) -> int:
    """A seed for an audit estimate's bootstrap, from the canary key (reproducible per run)."""
    return seed_from(canary_stream(key, STREAM_BOOTSTRAP))


KINDS = ("auto", "gaussian", "dirac")


def choose_kind(kind: str, n: int, dim: int) -> str:
    """The canary kind ``kind`` resolves to for n canaries in dimension ``dim`` (public
    quantities only): "auto" is "gaussian" while n x dim <= CACHE_ENTRIES, else "dirac"
    when n <= dim, else "gaussian" (regenerated from the key: slow)."""
    if kind not in KINDS:
        raise ValueError(f"canary kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if kind == "dirac" and n > dim:
        raise ValueError(f"{n} Dirac canaries need as many distinct coordinates; the model has {dim}")
    if kind != "auto":
        return kind
    if n * dim <= CACHE_ENTRIES or n > dim:
        return "gaussian"
    return "dirac"


def needs_host(users_per_client: int, relation: Relation | str) -> bool:
    """True when one user can move the clipped sum by 2C (the canary needs a host client)."""
    return user_sensitivity(1.0, users_per_client, relation) > 1.0


class CanaryClients:
    """``n`` canary users: keyed directions, fair-coin inclusion, Poisson participation.

    ``dim`` is the length of the aggregated parameter vector; ``first_user`` the
    population index of canary 0 (the number of real users); ``host`` whether every
    canary has a host client (``needs_host``). ``seed`` None draws the canary key from
    the OS's secure source.
    """

    def __init__(
        self,
        n: int,
        dim: int,
        *,
        first_user: int,
        host: bool,
        seed: int | None = None,
        norm_factor: float = DEFAULT_NORM_FACTOR,
        kind: str = "auto",
    ) -> None:
        self.n = positive_int("number of canaries", n)
        self.dim = positive_int("dimension", dim)
        self.kind = choose_kind(kind, self.n, self.dim)
        if isinstance(first_user, bool) or not isinstance(first_user, (int, np.integer)) or first_user < 0:
            raise ValueError(f"first_user must be an integer >= 0, got {first_user!r}")
        self.first_user = int(first_user)
        self.host = bool(host)
        self.norm_factor = positive_finite("canary norm factor", norm_factor)
        if self.norm_factor < 1:
            raise ValueError(f"canary norm factor must be >= 1 (norm >= C), got {norm_factor!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.seeded = seed is not None
        self._key = canary_key(seed)
        self.included = canary_rng(self._key, STREAM_INCLUSION).random(self.n) < 0.5
        self._cache: torch.Tensor | None = None
        self._coords = self._signs = None
        if self.kind == "dirac":  # distinct keyed coordinates, keyed signs
            rng = canary_rng(self._key, STREAM_CONTENT)
            self._coords = torch.from_numpy(rng.permutation(self.dim)[: self.n].astype(np.int64))
            self._signs = torch.from_numpy(np.where(rng.random(self.n) < 0.5, -1.0, 1.0))
        elif self.n * self.dim <= CACHE_ENTRIES:
            self._cache = torch.stack([self._direction(i) for i in range(self.n)])
        self.rounds = 0
        self.participations = np.zeros(self.n, dtype=np.int64)  # rounds each inserted canary was in

    def _direction(self, i: int) -> torch.Tensor:
        if self.kind == "dirac":
            v = torch.zeros(self.dim, dtype=torch.float32)
            v[int(self._coords[i])] = float(self._signs[i])
            return v
        seed = seed_from(canary_stream(self._key, STREAM_CONTENT, i))
        v = torch.randn(self.dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        return (v / torch.linalg.vector_norm(v)).to(torch.float32)

    def direction(self, i: int) -> torch.Tensor:
        """u_i: a unit vector (float32, CPU), the same every time it is asked for."""
        if not 0 <= i < self.n:
            raise IndexError(f"canary {i} out of range 0..{self.n - 1}")
        return self._cache[i] if self._cache is not None else self._direction(i)

    def bootstrap_seed(self) -> int:
        """A seed for the estimate's bootstrap, from the canary key (reproducible per run)."""
        return bootstrap_seed(self._key)

    # ------------------------------------------------------------------ a round
    def split_round(self, slots: Sequence[np.ndarray], users_per_client: int) -> tuple[list[np.ndarray], np.ndarray]:
        """(the real users' clients, the canaries the sampler picked this round).

        ``slots`` is what the sampler returned for a population that includes the
        canaries. Canary users are taken out of every slot; with K > 1 the slots keep
        their positions (the client keys are slot indices), with K = 1 a canary's
        singleton client is dropped (the keys are user indices)."""
        picked: list[np.ndarray] = []
        real: list[np.ndarray] = []
        for users in slots:
            users = np.asarray(users, dtype=np.int64)
            is_canary = users >= self.first_user
            picked.append(users[is_canary] - self.first_user)
            kept = users[~is_canary]
            if users_per_client > 1 or len(kept):
                real.append(kept)
        ids = np.concatenate(picked) if picked else np.zeros(0, dtype=np.int64)
        if len(ids) and ids.max() >= self.n:
            raise ValueError(f"the sampler picked user {ids.max() + self.first_user}, beyond the last canary")
        return real, np.sort(ids)

    def contribute(self, accumulator: ClipAndSum, picked: np.ndarray) -> ClippedSum:
        """Add this round's canary clients to ``accumulator`` (the run's clip-and-sum, real
        clients already in it) and return the clipped sum with them. Each canary client's
        update has norm ``norm_factor`` x C before clipping. Without hosts: +u_i for every
        inserted canary the sampler picked. With hosts: one client per canary, +u_i if
        inserted and picked, -u_i otherwise."""
        a = self.norm_factor * positive_finite("clip norm", accumulator.clip_norm)
        in_round = np.zeros(self.n, dtype=bool)
        in_round[np.asarray(picked, dtype=np.int64)] = True
        present = in_round & self.included
        self.participations += present
        self.rounds += 1
        for i in range(self.n):
            if present[i] or self.host:
                accumulator.add([(a if present[i] else -a) * self.direction(i)])
        return accumulator.result()

    # ------------------------------------------------------------------ scores
    def scores(self, move: torch.Tensor) -> np.ndarray:
        """cos(u_i, move) for every canary; ``move`` = initial - final aggregated parameters."""
        move = move.detach().reshape(-1).to(device="cpu", dtype=torch.float64)
        if move.numel() != self.dim:
            raise ValueError(f"move has {move.numel()} entries, the canaries {self.dim}")
        norm = float(torch.linalg.vector_norm(move))
        if not (math.isfinite(norm) and norm > 0):
            raise ValueError("the model did not move (or moved to non-finite values): no score")
        if self.kind == "dirac":
            dots = (self._signs * move[self._coords]).numpy()
        elif self._cache is not None:
            dots = (self._cache.to(torch.float64) @ move).numpy()
        else:
            dots = np.array([float(self._direction(i).to(torch.float64) @ move) for i in range(self.n)])
        return dots / norm

    # ------------------------------------------------------------------ private state
    def state(self) -> dict[str, Any]:
        """Everything that identifies the canaries (PRIVATE: key and inclusion bits)."""
        return {
            "n": self.n, "dim": self.dim, "kind": self.kind, "first_user": self.first_user, "host": self.host,
            "norm_factor": self.norm_factor, "key": str(self._key), "seeded": self.seeded,
            "included": self.included.astype(int).tolist(), "rounds": self.rounds,
            "participations": self.participations.tolist(),
        }

"""Cyclic Poisson participation: the schedule amplified BandMF is accounted for.

Users are split into b groups by the secret run key (never by their data); round t Poisson-samples
only group t mod b at rate q (default b M K / N, so b M K <= N; ``sampling_rate`` pins another),
then groups the sampled users into virtual clients as ``VirtualClientSampler`` does, so the
sensitivity of ``dpemb.privacy.relations`` holds per round; the public normaliser stays M.
Assignments and their relations: docs/PRIVACY.md, "BandMF" ("Participation").

Guarantee, by construction whatever the keys or rates: a user takes part AT MOST ONCE in any b
consecutive rounds and at most ceil(T / b) times, the b-min-separation that
``dpemb.privacy.bandmf`` and ``dpemb.privacy.events.amplified_bandmf_event`` assume.
``"balanced"`` depends on N, so ``check_assignment`` refuses it under add/remove.

Draws are keyed by (run key, purpose, round), as in ``sampling``. The key and hence the groups
are PRIVATE (a user's group reveals the rounds it can be in): ``state_dict`` belongs in the
private checkpoint only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpemb.privacy._checks import positive_int
from dpemb.privacy.relations import Relation, parse_relation
from dpemb.privacy.sampling import VirtualClientSampler

ASSIGNMENTS = ("independent", "balanced")
_ASSIGNMENT_KEY = (3,)  # a one-element spawn key: disjoint from the (round, purpose) keys of the rounds


def check_assignment(assignment: str, relation: Relation | str) -> str:
    """``assignment`` if the cyclic groups it makes are accounted for under ``relation``;
    a ValueError naming the fix otherwise (a balanced assignment under add/remove)."""
    if assignment not in ASSIGNMENTS:
        raise ValueError(f"group assignment must be one of {', '.join(ASSIGNMENTS)}, got {assignment!r}")
    if assignment == "balanced" and parse_relation(relation) is Relation.ADD_REMOVE:
        raise ValueError(
            "a balanced group assignment is a permutation of all N users, so adding one user moves the "
            "others between groups: it is not accounted under add/remove; use assignment='independent' "
            "or the replace-special relation (a public, fixed population)"
        )
    return assignment


def group_assignment(num_users: int, bands: int, rng: np.random.Generator, assignment: str) -> np.ndarray:
    """The group (0..bands-1) of every user 0..N-1, drawn from ``rng`` only (no user data).

    ``independent``: ``bands`` uniform choices in user-index order (a prefix of users keeps
    its groups when users are appended). ``balanced``: group[perm[p]] = p mod bands for a
    uniform permutation perm, so every group has floor(N/b) or ceil(N/b) users.
    """
    n = positive_int("number of users", num_users)
    b = positive_int("bands (b)", bands)
    if assignment == "independent":
        return rng.integers(0, b, size=n, dtype=np.int64)
    if assignment == "balanced":
        groups = np.empty(n, dtype=np.int64)
        groups[rng.permutation(n)] = np.arange(n, dtype=np.int64) % b
        return groups
    raise ValueError(f"group assignment must be one of {', '.join(ASSIGNMENTS)}, got {assignment!r}")


class CyclicPoissonSampler(VirtualClientSampler):
    """Round t Poisson-samples users (rate q) from group t mod b only, then groups them into
    virtual clients like ``VirtualClientSampler`` (whose keyed draws and grouping it reuses).

    Every user takes part at most once in any ``bands`` consecutive rounds (see the module
    docstring). ``bands`` = 1 is Poisson sampling of the whole population at rate q.
    """

    def __init__(
        self,
        num_users: int,
        *,
        bands: int,
        clients_per_round: int,
        users_per_client: int = 1,
        seed: int | None = None,
        sampling_rate: float | None = None,
        assignment: str = "independent",
    ) -> None:
        b = positive_int("bands (b)", bands)
        n = positive_int("number of users", num_users)
        per_round = positive_int("clients per round (M)", clients_per_round) * positive_int(
            "users per client (K)", users_per_client)
        if sampling_rate is None:
            if b * per_round > n:
                raise ValueError(
                    f"cyclic Poisson sampling over b = {b} groups needs b*M*K = {b} x {per_round} = "
                    f"{b * per_round} <= N = {n} users (the rate within a group, b*M*K/N, would exceed 1); "
                    "use fewer bands, fewer clients per round or users per client, or a larger population"
                )
            sampling_rate = b * per_round / n
        if assignment not in ASSIGNMENTS:
            raise ValueError(f"group assignment must be one of {', '.join(ASSIGNMENTS)}, got {assignment!r}")
        super().__init__(n, clients_per_round=clients_per_round, users_per_client=users_per_client,
                         sampling="poisson", seed=seed, sampling_rate=sampling_rate)
        self.sampling = "cyclic-poisson"
        self.bands = b
        self.assignment = assignment
        self._groups: np.ndarray | None = None
        self._members: list[np.ndarray] | None = None

    # ------------------------------------------------------------------ groups
    @property
    def groups(self) -> np.ndarray:
        """The group of every user (PRIVATE: derived from the run key)."""
        if self._groups is None:
            self._groups = group_assignment(self.num_users, self.bands, self._rng(*_ASSIGNMENT_KEY),
                                            self.assignment)
            order = np.argsort(self._groups, kind="stable")  # members of each group in index order
            counts = np.bincount(self._groups, minlength=self.bands)
            self._members = np.split(order.astype(np.int64), np.cumsum(counts)[:-1])
        return self._groups

    def members(self, group: int) -> np.ndarray:
        """The users of ``group`` in increasing index order (PRIVATE)."""
        self.groups  # noqa: B018  (builds the assignment on first use)
        assert self._members is not None
        return self._members[int(group)]

    def group_of_round(self, rnd: int) -> int:
        """The only group round ``rnd`` (0-based) samples from: rnd mod b (public)."""
        return int(rnd) % self.bands

    # ------------------------------------------------------------------ sampling
    def users_for_round(self, rnd: int) -> np.ndarray:
        """Round ``rnd``'s users, before grouping: a Bernoulli(q) sample of group rnd mod b,
        in increasing index order."""
        members = self.members(self.group_of_round(rnd))
        return members[self._poisson(self._rng(rnd, 0), len(members))]

    # ------------------------------------------------------------------ state
    def _config(self) -> dict[str, Any]:
        return {**super()._config(), "bands": self.bands, "assignment": self.assignment}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume exactly (the groups follow from the restored key); refuses a state saved for
        another population, rate, number of bands or assignment."""
        super().load_state_dict(state)
        self._groups = None
        self._members = None

"""How much one user can weigh on a tree of noisy node sums (DP-FTRL accounting).

The release of all complete nodes' noisy sums is a Gaussian mechanism with L2 sensitivity
sqrt(S) x sensitivity, S = max over the user's participation patterns of the sum over complete
nodes of (participations under the node)^2: rho-zCDP with rho = S / (2 z^2), or a Gaussian
mechanism with multiplier z / sqrt(S) (Kairouz et al. 2021; Xu et al. 2022). Derivation and the
dynamic programme: docs/PRIVACY.md, "Tree aggregation" ("Accounting").

Assumed participation (``epoch`` sampling): at most one round per epoch of R rounds, anywhere in
it. S bounds a node's count only by the epochs it touches, so it can only overcount: it is an
upper bound (equal to brute force on every small case tested) and the epsilon is valid. With
restarts S = sum over trees of ceil(log2(rounds in tree + 1)), dp_accounting's
``SingleEpochTreeAggregationDpEvent``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

_NEG = -np.inf


def _maxplus(a: np.ndarray, b: np.ndarray, cap: int) -> np.ndarray:
    """c[k] = max_j a[j] + b[k - j] for k = 0..cap (max-plus convolution, truncated)."""
    if len(a) > len(b):
        a, b = b, a
    n = min(len(a) + len(b) - 1, cap + 1)
    out = np.full(n, _NEG)
    for i in range(min(len(a), n)):
        m = min(len(b), n - i)
        np.maximum(out[i:i + m], a[i] + b[:m], out=out[i:i + m])
    return out


def tree_depth(rounds: int) -> int:
    """Complete nodes above one leaf, worst case, in an online tree of ``rounds`` leaves."""
    return math.ceil(math.log2(rounds + 1)) if rounds > 0 else 0


class TreeParticipation:
    """S(t), the worst-case sum of squared participations over complete tree nodes.

    ``rounds_per_epoch`` = R: a user takes part at most once in each block of R
    consecutive rounds. ``restart`` = True: one tree per epoch (restarted).
    """

    def __init__(self, rounds_per_epoch: int, restart: bool = False) -> None:
        if isinstance(rounds_per_epoch, bool) or int(rounds_per_epoch) < 1:
            raise ValueError(f"rounds per epoch must be >= 1, got {rounds_per_epoch!r}")
        self.rounds_per_epoch = int(rounds_per_epoch)
        self.restart = bool(restart)
        self._node = lru_cache(maxsize=None)(self._node_uncached)
        self._single_tree = lru_cache(maxsize=None)(self._single_tree_uncached)

    def _epochs_touched(self, start: int, stop: int) -> int:
        """Epochs intersecting rounds [start, stop) (0-based)."""
        r = self.rounds_per_epoch
        return (stop - 1) // r - start // r + 1

    def _node_uncached(self, offset: int, level: int) -> np.ndarray:
        """best[k] for the node of 2^level rounds starting at a round with ``start % R == offset``."""
        if level == 0:
            return np.array([0.0, 1.0])
        half = 1 << (level - 1)
        left = self._node(offset, level - 1)
        right = self._node((offset + half) % self.rounds_per_epoch, level - 1)
        cap = self._epochs_touched(offset, offset + 2 * half)
        best = _maxplus(left, right, cap)
        return best + np.arange(len(best), dtype=float) ** 2

    def _single_tree_uncached(self, t: int) -> int:
        start, best = 0, np.array([0.0])
        for level in reversed(range(t.bit_length())):
            if (t >> level) & 1:
                node = self._node(start % self.rounds_per_epoch, level)
                best = _maxplus(best, node, self._epochs_touched(0, start + (1 << level)))
                start += 1 << level
        return int(round(best.max()))

    def sum_of_squares(self, t: int) -> int:
        """S(t) for the complete nodes released during rounds 1..t."""
        if isinstance(t, bool) or int(t) < 0:
            raise ValueError(f"rounds must be >= 0, got {t!r}")
        if self.restart:
            full, rest = divmod(int(t), self.rounds_per_epoch)
            return full * tree_depth(self.rounds_per_epoch) + tree_depth(rest)
        return self._single_tree(int(t))

"""OpenMP threads that sleep when idle, so CPU training stays fast on a shared machine.

libgomp reads the policy once, when torch is loaded, so ``import dpemb`` sets
``OMP_WAIT_POLICY=PASSIVE`` if torch is not loaded yet and the user has set neither
``OMP_WAIT_POLICY`` nor ``GOMP_SPINCOUNT`` (theirs always win). Why, and what it costs
and saves: docs/SCALE.md, "OpenMP threads on a shared machine".
"""

from __future__ import annotations

import os
import sys

USER_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def prefer_passive_wait() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` where it can still take effect and the user has
    not chosen; returns whether it was set now."""
    if "torch" in sys.modules or any(name in os.environ for name in USER_SETTINGS):
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True

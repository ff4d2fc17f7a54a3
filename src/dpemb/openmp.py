"""OpenMP threads that sleep when idle, so CPU training stays fast on a shared machine.

PyTorch's CPU kernels run on GNU OpenMP (libgomp). With ``OMP_WAIT_POLICY`` unset, a
thread that finishes its share spins at the barrier before it sleeps. When other
processes compete for the cores, the spinning threads take the time slices the working
thread needs. Measured on a 2-core machine beside a CPU-bound process spinning 2 threads
(``bench/bench_cpu_conv.py --hog``, batch 32 of glyph images; docs/SCALE.md): training ran
at 245 (LeNet) and 44 (ResNet-GN) images/s with libgomp's default spinning and at 460
and 90 with ``OMP_WAIT_POLICY=PASSIVE`` (1.9x, 2.1x). Alone the passive policy cost
4-9% (0.96x, 0.91x). A README tour that took 65 s alone took 465 s beside such a process.

libgomp reads the policy once, when torch is loaded, so ``import dpemb`` sets
``OMP_WAIT_POLICY=PASSIVE`` if torch is not loaded yet and the user has set neither
``OMP_WAIT_POLICY`` nor ``GOMP_SPINCOUNT`` (theirs always win). The ``dpemb`` command
and ``python -m dpemb`` import dpemb before torch; a Python program should import dpemb
first or export the variable itself. Child processes (torchrun ranks, workers) inherit it.
On a machine of its own, ``OMP_WAIT_POLICY=ACTIVE`` wins back the few percent.
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

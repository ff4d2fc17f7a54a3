"""The audit table of docs/AUDIT.md: reported epsilon vs one-shot estimate vs 95% lower bound.

Runs the settings of tests/privacy/test_audit_training.py (a tiny LeNet, 10 real users,
1000 canary users, q = 1, one round, delta = 1e-6; two rows at q = 1/2 over 4 rounds) for the correct mechanism at three
noise multipliers and for the four planted bugs (test-only hooks), and prints one row
each with the ratio lower bound / reported epsilon. About a minute on one CPU core.

    python bench/bench_audit.py [--canaries 1000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' settings and planted bugs

from tests.privacy.test_audit_training import BUG_NAMES, SETTING, audited_run  # noqa: E402

ROWS = [  # (bug, K, z, q, rounds)
    (None, 1, 1.0, 1.0, 1), (None, 1, 2.0, 1.0, 1), (None, 1, 4.0, 1.0, 1), (None, 2, 2.0, 1.0, 1),
    ("a", 1, 2.0, 1.0, 1), ("b", 1, 2.0, 1.0, 1), ("c", 1, 2.0, 1.0, 1), ("d", 2, 2.0, 1.0, 1),
    (None, 1, 2.0, 0.5, 4), ("a", 1, 2.0, 0.5, 4),  # Poisson participation at q = 1/2
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--canaries", type=int, default=SETTING["canaries"])
    args = p.parse_args()
    print(f"{args.canaries} canaries, delta = {SETTING['delta']:g}, "
          "confidence 0.95; epsilon reported by the RDP accountant")
    head = f"| {'mechanism':40s} | K | z   | q   | T | reported eps | estimate [95% bootstrap] | lower bound | LB / reported |"
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (bug, k, z, q, rounds) in enumerate(ROWS):
            t0 = time.perf_counter()
            a = audited_run(Path(tmp) / f"r{i}", bug=bug, users_per_client=k, noise_multiplier=z,
                            sampling_rate=q, rounds=rounds, canaries=args.canaries)
            lo, hi = a["epsilon_estimate_ci"]
            est = f"{a['epsilon_estimate']:.2f} [{lo:.2f}, {hi:.2f}]"
            print(f"| {BUG_NAMES[bug]:40s} | {k} | {z:<3g} | {q:<3g} | {rounds} | {a['epsilon_reported']:12.2f} | {est:24s} | "
                  f"{a['epsilon_lower_bound']:11.2f} | {a['epsilon_lower_bound'] / a['epsilon_reported']:13.2f} |"
                  f"  ({time.perf_counter() - t0:.1f} s)", flush=True)


if __name__ == "__main__":
    main()

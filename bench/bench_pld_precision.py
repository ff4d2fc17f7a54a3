"""PLD precision and speed of dpemb's accounting against finely discretised dp_accounting PLDs.

Grid (issue 33, item 4): Poisson sampling, T x PoissonSampled(q, Gaussian(z)), add/remove,
delta = 1/(10 N), N in {1e4, 1e5, 1e6, 1e7}, M in {100, 1000} (q = M/N, K = 1),
T in {100, 1000, 10000}, and z chosen so that the PLD epsilon is near each target in
{0.05, 0.3, 1, 10} (bisection on z against a 2e-4 PLD, to 2%: the grid point's epsilon is
whatever it is, the comparison below is exact). For every point:

- dpemb: ``epsilon_for(spec, "pld")`` with empty caches (its interval chosen by
  ``refined_pld_epsilon``), and the in-process time;
- ref 1e-4: dp_accounting's ``PLDAccountant(value_discretization_interval=1e-4)``, the
  reference the issue names;
- finer: dp_accounting at a quarter of min(1e-4, dpemb's interval), the closest this
  machine affords to the limit of a finer and finer grid (every PLD here is pessimistic,
  so each is an upper bound and finer is tighter).

Printed: one row per point, then the max and min of dpemb / ref 1e-4 and dpemb / finer,
and the wall time of single ``dpemb account`` calls (subprocess, import included; the
minimum of --repeats, with the import alone measured the same way).

Run: PYTHONPATH=src python bench/bench_pld_precision.py [--sample] [--no-finer] [--repeats 3]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import sys
import time
from typing import Any

import dp_accounting as dpa
from dp_accounting.pld import PLDAccountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpemb.privacy import PrivacySpec, epsilon_for
from dpemb.privacy import events as ev

POPULATIONS = (10_000, 100_000, 1_000_000, 10_000_000)
CLIENTS = (100, 1000)
ROUNDS = (100, 1000, 10_000)
TARGETS = (0.05, 0.3, 1.0, 10.0)
SAMPLE = [  # (N, M, T, target): every target at four (N, M, T) spread over the grid, and the q = 1e-5 corner
    (n, m, t, target) for target in TARGETS
    for n, m, t in ((10_000, 100, 10_000), (10_000_000, 1000, 10_000), (100_000, 1000, 1000), (1_000_000, 100, 100))
] + [(10_000_000, 100, 10_000, 0.05), (10_000_000, 100, 10_000, 0.3)]


def dp_pld(z: float, q: float, t: int, delta: float, interval: float) -> float:
    acc = PLDAccountant(value_discretization_interval=interval)
    acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), t)
    return float(acc.get_epsilon(delta))


def z_for(q: float, t: int, delta: float, target: float) -> float:
    """z whose 2e-4 PLD epsilon is within 2% of ``target`` (geometric bisection)."""
    lo, hi = 0.05, 1000.0
    while hi / lo > 1.02:
        mid = math.sqrt(lo * hi)
        p = pld_lib.from_gaussian_mechanism(mid, value_discretization_interval=2e-4, sampling_prob=q,
                                            log_mass_truncation_bound=-30)
        if p.self_compose(t).get_epsilon_for_delta(delta) > target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def fresh_dpemb(spec: PrivacySpec) -> tuple[float, float, float]:
    ev.epsilon_curve.cache_clear()
    ev._epsilon_of.cache_clear()
    t0 = time.perf_counter()
    eps = epsilon_for(spec, "pld")
    seconds = time.perf_counter() - t0
    return eps, ev.epsilon_curve(spec, "pld").pld_interval(spec.rounds), seconds


def cli_seconds(args: list[str], repeats: int) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, ["src", os.environ.get("PYTHONPATH")]))}
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], check=True, capture_output=True, env=env)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", action="store_true", help="18 points of the grid (the full grid takes about an hour)")
    ap.add_argument("--no-finer", action="store_true", help="skip the finer reference (the slow part)")
    ap.add_argument("--repeats", type=int, default=3, help="dpemb account calls per timing (the minimum is kept)")
    args = ap.parse_args()
    points = SAMPLE if args.sample else list(itertools.product(POPULATIONS, CLIENTS, ROUNDS, TARGETS))
    print(f"{'N':>10} {'M':>5} {'T':>6} {'z':>8} {'eps dpemb':>10} {'interval':>9} {'s':>5} "
          f"{'ref 1e-4':>10} {'/ref':>7} {'finer':>10} {'/finer':>7}", flush=True)
    rows: list[dict[str, Any]] = []
    for n, m, t, target in points:
        q, delta = m / n, 1.0 / (10 * n)
        z = z_for(q, t, delta, target)
        spec = PrivacySpec(population=n, clients_per_round=m, rounds=t, noise_multiplier=z)
        assert spec.resolved_delta == delta and spec.sampling_rate == q  # same question on both sides
        eps, interval, seconds = fresh_dpemb(spec)
        ref = dp_pld(z, q, t, delta, 1e-4)
        finer = math.nan if args.no_finer else dp_pld(z, q, t, delta, min(1e-4, interval) / 4)
        rows.append(dict(eps=eps, ref=ref, finer=finer, seconds=seconds, interval=interval))
        print(f"{n:>10,} {m:>5} {t:>6,} {z:>8.4g} {eps:>10.5g} {interval:>9.3g} {seconds:>5.2f} "
              f"{ref:>10.5g} {eps / ref:>7.4f} {finer:>10.5g} {eps / finer:>7.4f}", flush=True)
    on_ref = [r["eps"] / r["ref"] for r in rows]
    print(f"\ndpemb / ref 1e-4: max {max(on_ref):.4f}, min {min(on_ref):.4f} over {len(rows)} points")
    if not args.no_finer:
        on_finer = [r["eps"] / r["finer"] for r in rows]
        print(f"dpemb / finer:    max {max(on_finer):.4f}, min {min(on_finer):.4f}")
        coarser = [r for r in rows if r["interval"] >= 1e-4]
        if coarser:
            print(f"where dpemb's interval >= 1e-4 ({len(coarser)} points): dpemb / ref 1e-4 "
                  f"max {max(r['eps'] / r['ref'] for r in coarser):.4f}, "
                  f"min {min(r['eps'] / r['ref'] for r in coarser):.4f}")
    print(f"in-process epsilon_for(spec, 'pld'), empty caches: max {max(r['seconds'] for r in rows):.2f} s")

    cli = ["-m", "dpemb", "account", "--population", "10000000", "--clients-per-round", "100", "--rounds",
           "10000"]
    imp = cli_seconds(["-c", "import dpemb.cli.main, dpemb.privacy, dp_accounting"], args.repeats)
    print(f"\nwall time, min of {args.repeats} (import alone: {imp:.2f} s):")
    for extra in (["--noise-multiplier", "0.668"], ["--target-epsilon", "1"],
                  ["--target-epsilon", "0.05", "--accountant", "pld"], ["--target-epsilon", "1", "--accountant", "pld"]):
        s = cli_seconds(cli + extra, args.repeats)
        print(f"  dpemb account N=1e7 M=100 T=10,000 {' '.join(extra)}: {s:.2f} s (accounting {s - imp:.2f} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

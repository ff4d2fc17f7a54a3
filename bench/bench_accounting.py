"""Benchmark the privacy accounting (issue 3 goals: < 5 s per accountant, < 30 s to calibrate).

Setting: N = 10M users, 4,096 users per round (K = 1), 10,000 rounds, noise multiplier 1.0,
delta = dpemb's default 1/(10 N) = 1e-8, given explicitly to dpemb (``PrivacySpec(delta=...)``)
and to every baseline. Every dpemb figure is compared with a baseline measured in the same
run: the same computation done directly with dp_accounting (or Opacus), and for the
per-round ledger, recomputing epsilon from scratch every round.

Before any time ratio is printed, each pair is checked to compute the same quantity
(``bench/_compare.py``): the same delta on both sides, and the same value: RDP epsilon
within 1e-9 (relative; Opacus, with its own RDP series, 1e-6), PLD epsilon within one
value-discretisation interval (the baseline's PLD accountant uses the interval dpemb
chose for that question, ``EpsilonCurve.pld_interval``), calibrated noise
multipliers within twice dpemb's search tolerance. A mismatch stops the benchmark
(exit status 1) naming it.

Run: .venv/bin/python bench/bench_accounting.py [--quick]
(--quick: N = 100,000, 256 users per round, 300 rounds, only the compared epsilons and
ledgers, no Opacus (its fractional orders take a minute): seconds, for the tests.)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import dp_accounting as dpa
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from _compare import same_quantity
from dpemb.privacy import (
    PrivacyLedger,
    PrivacySpec,
    calibrate_noise_multiplier,
    epsilon_for,
)
from dpemb.privacy.calibration import REL_TOL
from dpemb.privacy.delta import DEFAULT_DELTA_RULE, default_delta
from dpemb.privacy.events import RDP_ORDERS, epsilon_curve

RDP_RTOL = 1e-9  # the same dp_accounting computation: equal up to float summation order
OPACUS_RTOL = 1e-6  # Opacus's own sampled-Gaussian RDP series, same orders and conversion
CALIBRATION_RTOL = 2 * REL_TOL  # each search stops within REL_TOL of the smallest z


@dataclass(frozen=True)
class Setting:
    population: int
    users_per_round: int
    rounds: int
    noise_multiplier: float
    target_epsilon: float
    ledger_rounds_pld: int
    naive_rounds_rdp: int
    naive_rounds_pld: int

    @property
    def q(self) -> float:
        return self.users_per_round / self.population

    @property
    def delta(self) -> float:
        return default_delta(self.population)

    def spec(self, **kw: Any) -> PrivacySpec:
        return PrivacySpec(population=self.population, clients_per_round=self.users_per_round,
                           noise_multiplier=self.noise_multiplier, rounds=self.rounds, delta=self.delta, **kw)


FULL = Setting(10_000_000, 4096, 10_000, 1.0, 3.9, 200, 50, 10)
QUICK = Setting(100_000, 256, 300, 1.0, 3.9, 10, 3, 3)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def raw_rdp(s: Setting, delta: float) -> float:
    acc = RdpAccountant(list(RDP_ORDERS))
    acc.compose(dpa.PoissonSampledDpEvent(s.q, dpa.GaussianDpEvent(s.noise_multiplier)), s.rounds)
    return acc.get_epsilon(delta)


def raw_pld(s: Setting, delta: float, discretization: float) -> float:
    acc = PLDAccountant(value_discretization_interval=discretization)
    acc.compose(dpa.PoissonSampledDpEvent(s.q, dpa.GaussianDpEvent(s.noise_multiplier)), s.rounds)
    return acc.get_epsilon(delta)


def opacus_rdp(s: Setting, delta: float) -> float:
    from opacus.accountants.analysis import rdp

    orders = list(RDP_ORDERS)
    curve = rdp.compute_rdp(q=s.q, noise_multiplier=s.noise_multiplier, steps=s.rounds, orders=orders)
    return rdp.get_privacy_spent(orders=orders, rdp=curve, delta=delta)[0]


def raw_calibration(s: Setting, delta: float, tol: float) -> float:
    return dpa.calibrate_dp_mechanism(
        lambda: RdpAccountant(list(RDP_ORDERS)),
        lambda z: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(s.q, dpa.GaussianDpEvent(z)), s.rounds),
        s.target_epsilon, delta, tol=tol,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small setting that runs in seconds")
    ap.add_argument("--no-opacus", action="store_true", help="skip the Opacus baseline")
    args = ap.parse_args(argv)
    s = QUICK if args.quick else FULL
    spec, tree = s.spec(), s.spec(mechanism="tree")
    delta = s.delta  # the baselines' delta; dpemb's is what its spec resolves to
    checks: list[str] = []
    rows: list[tuple[str, float, str, float, str]] = []

    def compared(task: str, t_ours: float, ours: float, baseline: str, t_base: float, base: float,
                 ours_params: dict[str, Any], base_params: dict[str, Any], **tol: float) -> None:
        params = {k: (ours_params[k], base_params[k]) for k in sorted(ours_params.keys() | base_params.keys())
                  if k in ours_params and k in base_params}
        missing = sorted(ours_params.keys() ^ base_params.keys())
        if missing:
            raise SystemExit(f"{task} vs {baseline}: parameters {missing} named by one side only")
        checks.append(same_quantity(f"{task} vs {baseline}", params=params, values={"value": (ours, base)}, **tol))
        rows.append((task, t_ours, baseline, t_base, f"{ours:.5f} / {base:.5f}"))

    t_ours, eps = timed(lambda: epsilon_for(spec, "rdp"))
    t_base, eps_b = timed(lambda: raw_rdp(s, delta))
    compared("epsilon, RDP", t_ours, eps, "dp_accounting RDP", t_base, eps_b,
             {"delta": spec.resolved_delta}, {"delta": delta}, rtol=RDP_RTOL)
    if not (args.no_opacus or args.quick):
        t_op, eps_o = timed(lambda: opacus_rdp(s, delta))
        compared("epsilon, RDP", t_ours, eps, "Opacus RDP", t_op, eps_o,
                 {"delta": spec.resolved_delta}, {"delta": delta}, rtol=OPACUS_RTOL)
    t_ours, eps = timed(lambda: epsilon_for(spec, "pld"))
    interval = epsilon_curve(spec, "pld").pld_interval(s.rounds)  # the interval dpemb chose
    t_base, eps_b = timed(lambda: raw_pld(s, delta, interval))
    compared(f"epsilon, PLD ({interval:g})", t_ours, eps, "dp_accounting PLD", t_base, eps_b,
             {"delta": spec.resolved_delta, "discretization": interval},
             {"delta": delta, "discretization": interval}, atol=interval)
    if not args.quick:
        t_ours, eps = timed(lambda: epsilon_for(tree, "rdp"))
        rows.append(("epsilon, tree zCDP (RDP)", t_ours, "-", float("nan"), f"{eps:.5f}"))
        t_ours, eps = timed(lambda: epsilon_for(tree, "pld"))
        rows.append(("epsilon, tree Gaussian (PLD)", t_ours, "-", float("nan"), f"{eps:.5f}"))

        t_ours, z = timed(lambda: calibrate_noise_multiplier(spec, s.target_epsilon, "rdp"))
        t_base, z_b = timed(lambda: raw_calibration(s, delta, REL_TOL * 0.5))
        compared(f"calibrate z for eps {s.target_epsilon}, RDP", t_ours, z, "calibrate_dp_mechanism RDP", t_base,
                 z_b, {"delta": spec.resolved_delta, "target": s.target_epsilon},
                 {"delta": delta, "target": s.target_epsilon}, rtol=CALIBRATION_RTOL)
        t_ours, z = timed(lambda: calibrate_noise_multiplier(spec, s.target_epsilon, "pld"))
        rows.append((f"calibrate z for eps {s.target_epsilon}, PLD", t_ours, "-", float("nan"), f"z {z:.5f}"))

    # epsilon after every round, as the training loop asks for it, against recomputing
    # from scratch every round (timed on the first rounds, scaled to all of them)
    ledger = PrivacyLedger(spec)

    def every_round(ledger: PrivacyLedger, rounds: int, accountant: str) -> list[float]:
        out = []
        for _ in range(rounds):
            ledger.step()
            out.append(ledger.epsilon(accountant))
        return out

    curve_pld = epsilon_curve(spec, "pld")

    def recompute(rounds: int, accountant: str) -> list[float]:
        """A fresh dp_accounting computation for every round (dpemb's curves are memoised,
        so asking dpemb again would time its cache)."""
        one = Setting(s.population, s.users_per_round, 1, s.noise_multiplier, s.target_epsilon, 0, 0, 0)
        return [raw_rdp(dataclasses.replace(one, rounds=t), delta) if accountant == "rdp"
                else raw_pld(dataclasses.replace(one, rounds=t), delta, curve_pld.pld_interval(t))
                for t in range(1, rounds + 1)]

    t_ours, curve = timed(lambda: every_round(ledger, s.rounds, "rdp"))
    n = s.naive_rounds_rdp
    t_naive, naive = timed(lambda: recompute(n, "rdp"))
    checks.append(same_quantity(f"ledger RDP epsilon, rounds 1-{n}, vs recompute",
                                params={"delta": (ledger.spec.resolved_delta, spec.resolved_delta)},
                                values={"epsilon(t)": (curve[:n], naive)}, rtol=RDP_RTOL))
    rows.append((f"ledger RDP epsilon x {s.rounds} rounds", t_ours, f"recompute x {s.rounds} (from {n})",
                 t_naive / n * s.rounds, f"{curve[-1]:.5f}"))
    ledger_pld = PrivacyLedger(spec)
    t_ours, curve = timed(lambda: every_round(ledger_pld, s.ledger_rounds_pld, "pld"))
    n = s.naive_rounds_pld
    t_naive, naive = timed(lambda: recompute(n, "pld"))
    checks.append(same_quantity(f"ledger PLD epsilon, rounds 1-{n}, vs recompute",
                                params={"delta": (ledger_pld.spec.resolved_delta, spec.resolved_delta)},
                                values={"epsilon(t)": (curve[:n], naive)},
                                atol=max(curve_pld.pld_interval(t) for t in range(1, n + 1))))
    rows.append((f"ledger PLD epsilon x {s.ledger_rounds_pld} rounds", t_ours,
                 f"recompute x {s.ledger_rounds_pld} (from {n})", t_naive / n * s.ledger_rounds_pld,
                 f"{curve[-1]:.5f}"))

    print(f"N = {s.population:,}, {s.users_per_round:,} users per round, {s.rounds:,} rounds, "
          f"z = {s.noise_multiplier}, delta = {DEFAULT_DELTA_RULE} = {delta:.0e}: dpemb's spec delta "
          f"{spec.resolved_delta:.0e}, baselines' delta {delta:.0e}; PLD discretisation: the interval dpemb "
          f"chose for each question, on both sides{' (--quick)' if args.quick else ''}")
    for line in checks:
        print(line)
    head = ("task", "dpemb s", "baseline", "baseline s", "ratio", "value (dpemb / baseline)")
    table = [(a, f"{b:.3f}", c, "-" if d != d else f"{d:.3f}", "-" if d != d else f"{b / d:.2f}x", e)
             for a, b, c, d, e in rows]
    widths = [max(len(str(r[i])) for r in [head, *table]) for i in range(len(head))]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in table:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    print("ratio = dpemb time / baseline time (below 1: dpemb is faster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

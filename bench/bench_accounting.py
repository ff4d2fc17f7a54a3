"""Benchmark the privacy accounting (issue 3 goals: < 5 s per accountant, < 30 s to calibrate).

Setting: N = 10M users, 4,096 users per round (K = 1), 10,000 rounds, noise multiplier 1.0,
delta = 1/N. Every dpemb figure is compared with a baseline measured in the same run:
the same computation done directly with dp_accounting (or Opacus), and for the
per-round ledger, recomputing epsilon from scratch every round.

Run: .venv/bin/python bench/bench_accounting.py
"""

from __future__ import annotations

import time
from typing import Any, Callable

import dp_accounting as dpa
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from dpemb.privacy import (
    PrivacyLedger,
    PrivacySpec,
    calibrate_noise_multiplier,
    epsilon_for,
)
from dpemb.privacy.events import epsilon_curve

N, M, T, Z = 10_000_000, 4096, 10_000, 1.0
TARGET = 3.9
DELTA = 1.0 / N


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def raw_rdp() -> float:
    acc = RdpAccountant()
    acc.compose(dpa.PoissonSampledDpEvent(M / N, dpa.GaussianDpEvent(Z)), T)
    return acc.get_epsilon(DELTA)


def raw_pld(interval: float) -> float:
    acc = PLDAccountant(value_discretization_interval=interval)
    acc.compose(dpa.PoissonSampledDpEvent(M / N, dpa.GaussianDpEvent(Z)), T)
    return acc.get_epsilon(DELTA)


def opacus_rdp() -> float:
    from opacus.accountants.analysis import rdp

    orders = list(dpa.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
    curve = rdp.compute_rdp(q=M / N, noise_multiplier=Z, steps=T, orders=orders)
    return rdp.get_privacy_spent(orders=orders, rdp=curve, delta=DELTA)[0]


def raw_calibration() -> float:
    return dpa.calibrate_dp_mechanism(
        RdpAccountant,
        lambda z: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(M / N, dpa.GaussianDpEvent(z)), T),
        TARGET, DELTA,
    )


def main() -> None:
    spec = PrivacySpec(population=N, clients_per_round=M, noise_multiplier=Z, rounds=T)
    tree = PrivacySpec(population=N, clients_per_round=M, noise_multiplier=Z, rounds=T, mechanism="tree")
    rows: list[tuple[str, float, str, float, str]] = []

    t_ours, eps = timed(lambda: epsilon_for(spec, "rdp"))
    t_base, eps_b = timed(raw_rdp)
    rows.append(("epsilon, RDP", t_ours, "dp_accounting RDP", t_base, f"{eps:.4f} / {eps_b:.4f}"))
    t_op, eps_o = timed(opacus_rdp)
    rows.append(("epsilon, RDP", t_ours, "Opacus RDP", t_op, f"{eps:.4f} / {eps_o:.4f}"))
    t_ours, eps = timed(lambda: epsilon_for(spec, "pld"))
    interval = epsilon_curve(spec, "pld").pld_interval(T)  # the interval dpemb chose (refined_pld_epsilon)
    t_base, eps_b = timed(lambda: raw_pld(interval))
    rows.append((f"epsilon, PLD ({interval:g})", t_ours, "dp_accounting PLD", t_base, f"{eps:.4f} / {eps_b:.4f}"))
    t_ours, eps = timed(lambda: epsilon_for(tree, "rdp"))
    rows.append(("epsilon, tree zCDP (RDP)", t_ours, "-", float("nan"), f"{eps:.4f}"))
    t_ours, eps = timed(lambda: epsilon_for(tree, "pld"))
    rows.append(("epsilon, tree Gaussian (PLD)", t_ours, "-", float("nan"), f"{eps:.4f}"))

    t_ours, z = timed(lambda: calibrate_noise_multiplier(spec, TARGET, "rdp"))
    t_base, z_b = timed(raw_calibration)
    rows.append((f"calibrate z for eps {TARGET}, RDP", t_ours, "calibrate_dp_mechanism RDP", t_base,
                 f"z {z:.5f} / {z_b:.5f}"))
    t_ours, z = timed(lambda: calibrate_noise_multiplier(spec, TARGET, "pld"))
    rows.append((f"calibrate z for eps {TARGET}, PLD", t_ours, "-", float("nan"), f"z {z:.5f}"))

    # epsilon after every round, as the training loop asks for it
    ledger = PrivacyLedger(spec)

    def every_round() -> float:
        for _ in range(T):
            ledger.step()
            ledger.epsilon("rdp")
        return ledger.epsilon("rdp")

    t_ours, eps = timed(every_round)
    naive_rounds = 50
    t_naive, _ = timed(lambda: [epsilon_for(spec, "rdp", rounds=t) for t in range(1, naive_rounds + 1)])
    rows.append((f"ledger RDP epsilon x {T} rounds", t_ours, f"recompute x {T} (from {naive_rounds})",
                 t_naive / naive_rounds * T, f"{eps:.4f}"))
    ledger_pld = PrivacyLedger(spec)
    pld_rounds = 200

    def every_round_pld() -> float:
        for _ in range(pld_rounds):
            ledger_pld.step()
            ledger_pld.epsilon("pld")
        return ledger_pld.epsilon("pld")

    t_ours, eps = timed(every_round_pld)
    t_naive, _ = timed(lambda: [epsilon_for(spec, "pld", rounds=t) for t in range(1, 11)])
    rows.append((f"ledger PLD epsilon x {pld_rounds} rounds", t_ours, f"recompute x {pld_rounds} (from 10)",
                 t_naive / 10 * pld_rounds, f"{eps:.4f}"))

    head = ("task", "dpemb s", "baseline", "baseline s", "ratio", "value (dpemb / baseline)")
    table = [(a, f"{b:.3f}", c, "-" if d != d else f"{d:.3f}", "-" if d != d else f"{b / d:.2f}x", e)
             for a, b, c, d, e in rows]
    widths = [max(len(str(r[i])) for r in [head, *table]) for i in range(len(head))]
    print(f"N = {N:,}, {M:,} users per round, {T:,} rounds, z = {Z}, delta = 1/N = {DELTA:.0e}")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in table:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    print("ratio = dpemb time / baseline time (below 1: dpemb is faster)")


if __name__ == "__main__":
    main()

"""The measured tables of docs/AUDIT.md and its plot (docs/img/audit.png).

1. White-box user-level audits of DP-FedEmb (the settings of
   tests/privacy/test_audit_training.py: a tiny LeNet with about 16k aggregated
   parameters, 10 real users, canary users at q = 1 for one round, delta = 1e-6, seeded):
   the correct mechanism at three noise multipliers and the four planted bugs (test-only
   hooks), plus Poisson participation at q = 1/2 over 4 rounds, with the final-move and
   the per-round score. Reported epsilon vs one-shot estimate vs both lower bounds.
2. How many canaries each lower bound needs to catch bug (d), a factor 2 in the noise:
   simulated canary scores of exactly the mechanism of section 1 (mu = 1 where 0.5 is
   accounted), many repetitions per size.
3. Example-level audits of `dpemb transfer` (synthetic features, d = 512): each DP
   method, correct and with the noise off.
4. Black-box user-level audits (crafted canary users, released model only).

    python bench/bench_audit.py [--skip-sim] [--plot docs/img/audit.png]

About 5 minutes on one CPU core (section 2 is most of it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' settings and planted bugs

from tests.privacy.test_audit_training import BUG_NAMES, SETTING, audited_run, planted  # noqa: E402

ROWS = [  # (bug, K, z, q, rounds, canaries, score)
    (None, 1, 1.0, 1.0, 1, 1000, "final"), (None, 1, 2.0, 1.0, 1, 1000, "final"),
    (None, 1, 4.0, 1.0, 1, 1000, "final"), (None, 2, 2.0, 1.0, 1, 1000, "final"),
    (None, 2, 2.0, 1.0, 1, 10_000, "final"),
    ("a", 1, 2.0, 1.0, 1, 1000, "final"), ("b", 1, 2.0, 1.0, 1, 1000, "final"),
    ("c", 1, 2.0, 1.0, 1, 1000, "final"), ("d", 2, 2.0, 1.0, 1, 1000, "final"),
    ("d", 2, 2.0, 1.0, 1, 10_000, "final"),
    (None, 1, 2.0, 0.5, 4, 1000, "final"), (None, 1, 2.0, 0.5, 4, 1000, "rounds"),
    ("a", 1, 2.0, 0.5, 4, 1000, "final"), ("a", 1, 2.0, 0.5, 4, 1000, "rounds"),
]
PLOTTED = {0, 1, 2, 4, 5, 6, 7, 9}  # the three noise levels and the four bugs (d at 10 000 canaries)


def _f(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def _cells(a: dict, mu: bool = True) -> str:
    """A record's estimate [bootstrap], both lower bounds (f-DP with its mu) and the verdict."""
    lo, hi = a["epsilon_estimate_ci"]
    fdp = _f(a["epsilon_lower_bound_fdp"]) + (f" ({a['mu_lower_bound']:.3f})" if mu else "")
    return (f"{a['epsilon_estimate']:.2f} [{lo:.2f}, {hi:.2f}] | {_f(a['epsilon_lower_bound'])} | "
            f"{fdp} | {'REJECTED' if a['accounted_curve_rejected'] else 'ok'} |")


def section_white_box(plot: str | None) -> None:
    print(f"## 1. White-box audits of DP-FedEmb (delta = {SETTING['delta']:g}, 95% confidence, reported: RDP)\n")
    head = ("| mechanism | K | z | q | T | canaries | score | reported eps | estimate [95% bootstrap] | "
            "LB (eps, delta) | LB f-DP (mu >=) | accounted curve |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    points = []
    from dpemb.training.audit_plot import AuditPoint, plot_audit

    with tempfile.TemporaryDirectory() as tmp:
        for i, (bug, k, z, q, rounds, n, score) in enumerate(ROWS):
            t0 = time.perf_counter()
            a = audited_run(Path(tmp) / f"r{i}", bug=bug, users_per_client=k, noise_multiplier=z,
                            sampling_rate=q, rounds=rounds, canaries=n,
                            audit_options={"score": "rounds"} if score == "rounds" else None)
            print(f"| {BUG_NAMES[bug]} | {k} | {z:g} | {q:g} | {rounds} | {n} | {score} | "
                  f"{a['epsilon_reported']:.2f} | {_cells(a)}"
                  f"  <!-- {time.perf_counter() - t0:.1f} s, {a['canary_kind']} -->", flush=True)
            if i in PLOTTED:
                label = (f"{BUG_NAMES[bug]} (z={z:g})" if bug is None else BUG_NAMES[bug]) + f", {n} canaries"
                points.append(AuditPoint.from_record(a, label))
    if plot:
        plot_audit(points, plot, title="White-box audit of DP-FedEmb (user level, q = 1, one round, delta = 1e-6)")
        print(f"\nwrote {plot}")


def section_canaries_needed(reps: int) -> None:
    """Section 2: simulated scores of the section-1 mechanism with bug (d)."""
    from dpemb.privacy.audit import GaussianTradeOff, fdp_one_run_audit, gaussian_epsilon, one_run_lower_bound_grid
    from dpemb.privacy.audit import fdp_k_grid, k_grid

    delta = SETTING["delta"]
    target = gaussian_epsilon(0.5, delta)
    print(f"\n## 2. Canaries needed to catch bug (d): scores N(mu x inserted, 1), mu = 1 where 0.5 (eps "
          f"{target:.2f} at delta = {delta:g}, PLD) is accounted; {reps} runs per size\n")
    print("| canaries | f-DP: accounted curve rejected | f-DP mu >= (median [5%, 95%]) | f-DP eps (median) | "
          "(eps, delta) LB (median [max]) |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(14)
    for m in (1000, 2000, 3000, 5000, 10_000, 30_000):
        mus, rej, eps_fdp, lbs = [], 0, [], []
        t0 = time.perf_counter()
        for _ in range(reps):
            inc = rng.random(m) < 0.5
            s = 1.0 * inc + rng.standard_normal(m)
            r = fdp_one_run_audit(s, inc, fdp_k_grid(m), delta, claimed=GaussianTradeOff(0.5))
            rej += bool(r.claimed_rejected)
            mus.append(r.mu_lower)
            eps_fdp.append(r.epsilon_lower)
            if len(lbs) < 5:  # the (eps, delta) bound is far off at every size: a few runs show it
                lbs.append(one_run_lower_bound_grid(s, inc, k_grid(m), delta).epsilon_lower)
        p5, p50, p95 = np.percentile(mus, [5, 50, 95])
        print(f"| {m} | {rej}/{reps} | {p50:.3f} [{p5:.3f}, {p95:.3f}] | {np.median(eps_fdp):.2f} | "
              f"{np.median(lbs):.2f} [{max(lbs):.2f}] |  <!-- {time.perf_counter() - t0:.0f} s -->", flush=True)
    for m in (100_000,):
        inc = rng.random(m) < 0.5
        s = 1.0 * inc + rng.standard_normal(m)
        lb = one_run_lower_bound_grid(s, inc, k_grid(m), delta).epsilon_lower
        print(f"| {m} | - | - | - | {lb:.2f} (one run) |")
    m, false_alarms, mus = 10_000, 0, []
    for _ in range(reps):  # the correct mechanism (mu = 0.5): how often is its own curve rejected?
        inc = rng.random(m) < 0.5
        r = fdp_one_run_audit(0.5 * inc + rng.standard_normal(m), inc, fdp_k_grid(m), delta,
                              claimed=GaussianTradeOff(0.5))
        false_alarms += bool(r.claimed_rejected)
        mus.append(r.mu_lower)
    print(f"\ncorrect mechanism (mu = 0.5), {m} canaries: accounted curve rejected in {false_alarms}/{reps} runs "
          f"(at most 5% expected); f-DP mu >= {np.median(mus):.3f} median, {max(mus):.3f} max")


def section_transfer() -> None:
    import pytest

    from dpemb.privacy.noise import GaussianNoise
    from dpemb.transfer.audit import transfer_audit
    from dpemb.transfer.config import TransferConfig
    from tests.privacy.test_audit_transfer import CANARIES, features

    fs = features()
    print(f"\n## 3. Example-level audits of `dpemb transfer` (synthetic features: 500 examples, d = 512, 5 classes; "
          f"{CANARIES} canary examples; epsilon 1, PLD, example level)\n")
    print("| method | mechanism | reported eps | estimate [95% bootstrap] | LB (eps, delta) | LB f-DP (mu >=) | "
          "accounted curve |")
    print("|---|---|---|---|---|---|---|")
    for method in ("dp-ls", "dp-sgd", "dp-newton", "dp-fc"):
        for bug in (None, "noise off"):
            with pytest.MonkeyPatch.context() as mp:
                if bug:
                    mp.setattr(GaussianNoise, "add", lambda self, clipped: [v.clone() for v in clipped.value])
                a = transfer_audit(fs, TransferConfig(method=method, epsilon=1.0, seed=1), CANARIES,
                                   canary_seed=2).record
            print(f"| {method} | {bug or 'correct'} | {a['epsilon_reported']:.2f} | {_cells(a)}",
                  flush=True)


def section_black_box(seeds: int) -> None:
    import torch

    from dpemb.algorithms.config import FederatedConfig
    from dpemb.privacy import PrivacySpec
    from dpemb.training.audit_run import black_box_audit
    from dpemb.training.config import ModelConfig, RunConfig
    from tests.conftest import make_tiny_dataset

    n, rounds = 200, 5
    model = ModelConfig(backbone="lenet", embedding_dim=16, width=1.0)
    print(f"\n## 4. Black-box audits (crafted canary users; LeNet width 1, {n} canaries, q = 1, {rounds} rounds, "
          f"3 local epochs, server lr 20, z = 2, delta = 1e-5; {seeds} canary/noise seeds)\n")
    print("| mechanism | seed | reported eps | signed effect (in - out) / sd | estimate [95% bootstrap] | "
          "LB (eps, delta) | LB f-DP | accounted curve |")
    print("|---|---|---|---|---|---|---|---|")
    splits = make_tiny_dataset(num_users=12).split()
    train, ev = splits.train, splits.eval
    pop = train.num_users + n
    torch.set_num_threads(1)
    for bug in (None, "a"):
        for seed in range(seeds):
            spec = PrivacySpec(population=pop, clients_per_round=pop, users_per_client=1, noise_multiplier=2.0,
                               clip_norm=0.5, rounds=rounds, delta=1e-5)
            cfg = FederatedConfig(algorithm="dp-fedemb", local_batch_size=2, local_epochs=3, server_momentum=0.0,
                                  server_lr=20.0)
            with tempfile.TemporaryDirectory() as tmp:
                run = RunConfig(out=tmp, eval_every=100, progress=False, checkpoint_interval_s=0, eval_max_pairs=200)
                with planted(bug, pop), contextlib.redirect_stderr(io.StringIO()):
                    report = black_box_audit(train, ev, model, cfg, spec, run, canaries=n, canary_seed=100 + seed,
                                             noise_seed=100 + seed)
                secret = json.loads((Path(tmp) / "private" / "audit_canaries.json").read_text())
            a = report["privacy"]["audit"]
            s, inc = np.array(secret["scores"]), np.array(secret["included"], dtype=bool)
            effect = (s[inc].mean() - s[~inc].mean()) / s[~inc].std(ddof=1)
            print(f"| {BUG_NAMES[bug]} | {seed} | {a['epsilon_reported']:.2f} | {effect:+.2f} | "
                  f"{_cells(a, mu=False)}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plot", default=None, help="write the plot of section 1 here (e.g. docs/img/audit.png)")
    p.add_argument("--sim-reps", type=int, default=40, help="section 2: runs per number of canaries")
    p.add_argument("--black-box-seeds", type=int, default=3)
    p.add_argument("--skip-sim", action="store_true")
    p.add_argument("--skip-black-box", action="store_true")
    args = p.parse_args()
    t0 = time.perf_counter()
    section_white_box(args.plot)
    if not args.skip_sim:
        section_canaries_needed(args.sim_reps)
    section_transfer()
    if not args.skip_black_box:
        section_black_box(args.black_box_seeds)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()

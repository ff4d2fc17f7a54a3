"""Issue #36 item 6: a real population, no extrapolation. DP-FedEmb (and DP-FTRL-FedEmb with
BandMF) trained on all 100,000 private users of a face-like glyph population at epsilon 2
computed for those 100,000 users, beside the DP-FedEmb paper's simulation of the same run:
4,590 of the same users, with epsilon 2 stated for 100,000 by extrapolation (the same noise on
the average). Both score the same 300 test people and start from the same public pretraining on
the same 810 public users, so the one difference is the trained population
(docs/RESULTS_CORRELATED.md, "A real population").

- Data: the invented script's face-like glyphs (no font needed), 101,410 users: 300 test and
  300 validation people and 810 public users (the simulation benchmark's numbers) and 100,000
  private training users; the simulation's data: 4,590 of those (`dpemb data subsample`).
- The public start: the recipe face-pretrain on the 810 public users.
- The real runs: the recipe face-100k-eps2 at the correlated study's shared 200 rounds, its
  extrapolation removed (target_population), so epsilon 2 (PLD, delta 1e-6) is calibrated at
  its own 100,000 users with the cohort its extrapolation assumes, M 349 clients of K 8;
  DP-FedEmb, and DP-FTRL-FedEmb with BandMF at b = 1 (the correlated study's choice at 100k
  and epsilon 2); the fresh head over each client's own identities (`local_head = local`: the
  recipe's head over all training identities has 100,000 rows here). Seeds 0 and 1, the test
  split.
- The simulation: the same recipe on the 4,590 users (M 16, extrapolated to 100,000 with
  349 clients: z 0.0567 = the real runs' z 1.237 x 16 / 349), 3 test seeds each: both
  mechanisms with the local head (the real runs' configuration), and DP-FedEmb with the
  recipe's head over all training identities.

    .venv/bin/python experiments/harness.py population --work runs/studies --jobs 2
    # a real run: 200 rounds of 349 clients, about an hour as the one process the harness
    # starts (two processes took 7.8 s a round, 26 minutes, on 2 cores); to use both cores,
    # train it first with `python -m torch.distributed.run --nproc-per-node 2 -m dpemb train
    # ...` (its command: `real_run`'s docstring) into runs/<its key>, and the harness exports
    # it. A simulation: about 4 minutes a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import ROOT, Run, bar_plot, by_seed, mean_std, setting, stats, table

from dpemb.training.recipes import load_recipe
from dpemb.training.run_config import with_settings
from studies import correlated

NAME = "population"
PAGES = (ROOT / "docs" / "RESULTS_CORRELATED.md",)
RECIPE, PRETRAIN = "face-100k-eps2", "face-pretrain"
DATA, SIM_DATA = "data/faces100k", "data/faces100k-sim4590"
INIT = "runs/population-pretrain"  # the public start, trained by prepare()
POPULATION, SIM_USERS, PUBLIC_USERS, HELD_OUT = 100_000, 4_590, 810, 300
#: the population: 300 test + 300 validation people, 810 public users, 100,000 private users
GLYPHS = dict(script="invented", regime="owned", num_users=2 * HELD_OUT + PUBLIC_USERS + POPULATION,
              identities_per_user=1, images_per_identity=8, eval_identity_fraction=0.0029583,
              validation_identity_fraction=0.0029583, public_user_fraction=0.0080349, occlusion=0.3, seed=0)
EPSILON, ROUNDS, REAL_CLIENTS = 2.0, 200, 349  # REAL_CLIENTS: the recipe's extrapolated M' at 100,000
SEEDS = (0, 1, 2)
REAL_SEEDS = (0, 1)  # a real run costs 25 to 50 minutes on 2 cores, a simulation 4 to 8


def prepare(work: Path) -> None:
    """The population (`dpemb data make glyphs --out data/faces100k --script invented --regime
    owned --users 101410 --identities-per-user 1 --images-per-identity 8
    --eval-identity-fraction 0.0029583 --validation-identity-fraction 0.0029583
    --public-user-fraction 0.0080349 --occlusion 0.3 --seed 0`), its subsample (`dpemb data
    subsample data/faces100k --train-users 4590 --out data/faces100k-sim4590`) and the public
    start (`dpemb train --recipe face-pretrain --data data/faces100k --out
    runs/population-pretrain`)."""
    from dpemb.data.dataset import UserDataset
    from dpemb.data.glyphs import GlyphConfig, make_glyphs
    from dpemb.data.splits import subsample_training_users
    from dpemb.training.runner import train

    if not (work / DATA / "meta.json").exists():
        make_glyphs(GlyphConfig(**GLYPHS), progress=False).save(work / DATA)
    if not (work / SIM_DATA / "meta.json").exists():
        subsample_training_users(UserDataset.load(work / DATA), SIM_USERS, seed=0).save(work / SIM_DATA)
    if not (work / INIT / "report.json").exists():
        train(with_settings(load_recipe(PRETRAIN)[0], {"data.path": str(work / DATA)}), str(work / INIT),
              resume="auto")


def _run(name: str, data: str, head: str, seed: int, mechanism: str, **settings: Any) -> Run:
    """The recipe at epsilon 2 and 200 rounds from the public start, on the test split, with
    ``head``, ``mechanism`` (DP-FedEmb's Gaussian noise, or DP-FTRL-FedEmb with BandMF at b = 1,
    the correlated study's choice at 100,000 users and epsilon 2) and ``settings``."""
    base = {"data.path": data, "model.init": INIT, "privacy.target_epsilon": EPSILON, "privacy.rounds": ROUNDS,
            "eval_every": ROUNDS, "federated.local_head": head, "data.eval_split": "test", "seed": seed,
            **correlated.mechanism_settings(mechanism, None if mechanism == "gaussian" else 1)}
    return Run(name, with_settings(load_recipe(RECIPE)[0], base | settings))


def real_run(mechanism: str = "gaussian", seed: int = 0) -> Run:
    """All 100,000 users at epsilon 2 for them: `dpemb train --config real.toml --data
    data/faces100k --init runs/population-pretrain --clients-per-round 349 --rounds 200
    --eval-every 200 --eval-split test --local-head local --seed S [--algorithm dp-ftrl-fedemb
    --mechanism bandmf --bands 1]`, real.toml being `dpemb recipes face-100k-eps2 --toml` less
    its `target_population` line (on 2 cores: `python -m torch.distributed.run
    --nproc-per-node 2 -m dpemb train ... --device cpu --threads 1`)."""
    return _run(f"real/100k/{mechanism}/local/test/s{seed}", DATA, "local", seed, mechanism,
                **{"privacy.target_population": None, "privacy.clients_per_round": REAL_CLIENTS})


def simulation(seed: int, head: str, mechanism: str = "gaussian") -> Run:
    """4,590 of the users, epsilon 2 extrapolated to 100,000 (the recipe's own population):
    `dpemb train --recipe face-100k-eps2 --data data/faces100k-sim4590 --init
    runs/population-pretrain --target-epsilon 2 --rounds 200 --eval-every 200 --eval-split test
    --local-head HEAD --seed S [--algorithm dp-ftrl-fedemb --mechanism bandmf --bands 1]`."""
    return _run(f"simulation/4590/{mechanism}/{head}/test/s{seed}", SIM_DATA, head, seed, mechanism)


def groups() -> list[tuple[str, str, list[Run]]]:
    """The page's rows, in order: (label, the figure's short label, runs)."""
    return [("real: all 100,000 users, DP-FedEmb", "real\nDP-FedEmb", [real_run(seed=s) for s in REAL_SEEDS]),
            ("simulation: 4,590 users, DP-FedEmb", "simulated\nDP-FedEmb", [simulation(s, "local") for s in SEEDS]),
            ("real: all 100,000 users, DP-FTRL-FedEmb BandMF b 1", "real\nBandMF b 1", [real_run("bandmf", s) for s in REAL_SEEDS]),
            ("simulation: 4,590 users, DP-FTRL-FedEmb BandMF b 1", "simulated\nBandMF b 1",
             [simulation(s, "local", "bandmf") for s in SEEDS]),
            ("simulation: 4,590 users, DP-FedEmb, the recipe's head over all identities",
             "simulated\nDP-FedEmb,\nhead over all", [simulation(s, "global") for s in SEEDS])]


def plan(rows: list[dict[str, Any]]) -> list[Run]:
    return [run for _, _, runs in groups() for run in runs]


def _rows(rows: list[dict[str, Any]], runs: list[Run]) -> list[dict[str, Any]]:
    keys = {r.key for r in runs}
    return [r for r in rows if r["key"] in keys]


def _epsilons(row: dict[str, Any]) -> tuple[str, str]:
    """(the run's own epsilon, the extrapolated one or '-'), each with its accountant."""
    p = row["privacy"]
    own = (f"{p['epsilon_pld']:,.2f} (PLD)" if p.get("epsilon_pld") is not None
           else f"{p['epsilon_rdp']:,.0f} (RDP)")
    ext = [e for e in p.get("extrapolated") or [] if e.get("population") == POPULATION]
    return own, (f"{ext[0]['epsilon_' + ext[0]['accountant']]:.2f} ({ext[0]['accountant'].upper()})" if ext else "-")


def sections(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The real run beside the simulations, and the public start they share."""
    lines = []
    for label, _, runs in groups():
        rs = _rows(rows, runs)
        if not rs:
            continue
        own, ext = _epsilons(rs[0])
        start = rs[0]["initial"]["recall_at_far_0.001"]
        lines.append([label, f"{setting(rs[0], 'privacy.clients_per_round')} x {setting(rs[0], 'privacy.users_per_client')}",
                      f"{rs[0]['privacy']['spec']['noise_multiplier']:.4g}", own, ext, f"{start:.3f}",
                      by_seed(rs), mean_std(rs)])
    header = ["run (epsilon 2, delta 1e-6, 200 rounds)", "M x K", "z", "own epsilon", "epsilon at 100,000",
              "public start (test)", "test, by seed", "test R@FAR 1e-3"]
    return {"population-table": table(header, lines)}


def figures(rows: list[dict[str, Any]], img: Path) -> None:
    """docs/img/population.png: the real run beside its simulations and the public start."""
    bars = {}
    for _, short, runs in groups():
        rs = _rows(rows, runs)
        if rs:
            bars[short] = stats(rs)
    if not bars:
        return
    start = _rows(rows, plan(rows))[0]["initial"]["recall_at_far_0.001"]  # every run's start is the same one
    bar_plot(img / "population.png", bars, "100,000 users at epsilon 2: real vs simulated (test)",
             reference=("the public start (810 public users)", (start, 0.0, 1)))

"""Issue #36: DP-FTRL-FedEmb's correlated noise (tree aggregation, BandMF, BLT) beside
DP-FedEmb, on one shared cheaper configuration: the recipe face-100k-eps2 (goal 3's winner)
at 200 rounds, in cells of (population N', epsilon) (PLD; N' the population the run is
extrapolated to, delta 1e-6 at 100,000 users, 1e-7 at 1,000,000, below 1/N'): 100,000 and
1,000,000 users, each at epsilon 1, 0.5 and 2.
In each cell, each mechanism's b is chosen on the validation split (BandMF: 1 or 4 bands;
BLT: min-separation 16 or 35, 35 the largest with b M K <= N), then 3 test seeds. Beside
them, the moonshot "100k users at epsilon 1": the recipe as shipped (1,200 rounds, its knobs
chosen on validation at epsilon 2 by the study moonshot) at epsilon 1, 3 test seeds; and its
rounds chosen at epsilon 1 on validation (400, 600 or 1,200; seed 0), then 3 test seeds of the
chosen; then its server EMA at those rounds (0.99, 0.995 or 0.998), then its users per client
(8, 4 or 2 in 16, 32 or 64 clients a round) and, for smaller clients, its rounds again
(600 or 1,200), then its public start (the recipe's, or the stronger ArcFace start of the
recipe face-pretrain-arcface with a lever or two), then a lever on that start (server lr,
local epochs, rounds, client lr, users per client), the same way, each choice with its 3 test
seeds. And the second moonshot, "10k users at epsilon 2", from the ArcFace start: its lever
chosen on validation, then 3 test seeds (docs/RESULTS_CORRELATED.md).

    .venv/bin/python experiments/harness.py correlated --work runs/studies --jobs 2
    # 16 runs of about 10 minutes (one thread each) per cell: about 80 minutes on 2 cores;
    # the moonshot's 1,200-round runs about 55 minutes each, its 600-round runs about 25,
    # the 10k moonshot's about 11 to 15

The face-like glyph data needs the CJK fonts (``make cjk-fonts``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import (METRIC, ROOT, Run, bar_plot, by_seed, choose, choose_then_test, figure, mean_std, select, setting,
                     stats, table)

from dpemb.training.recipes import load_recipe
from dpemb.training.run_config import TrainConfig, with_settings
from studies import long

NAME = "correlated"
PAGES = (ROOT / "docs" / "RESULTS_CORRELATED.md",)
RECIPE, PRETRAIN, ARCFACE_PRETRAIN = "face-100k-eps2", "face-pretrain", "face-pretrain-arcface"
DATA, INIT = "data/faces", "runs/face-pretrain"  # the recipes' own paths, under the work folder
ARCFACE_INIT = "runs/face-pretrain-arcface"  # the stronger public start: face-pretrain fine-tuned with ArcFace
SEEDS = (0, 1, 2)
#: the cells (N', epsilon), in the order trained; each run trains 4,590 users, 200 rounds
CELLS = ((100_000, 1.0), (100_000, 0.5), (100_000, 2.0), (1_000_000, 1.0), (1_000_000, 0.5), (1_000_000, 2.0))
ROUNDS = 200
DELTA = {100_000: 1e-6, 1_000_000: 1e-7}  # below 1 / N' (the recipe's own delta is 1e-6)
MOONSHOT_EPSILON = 1.0  # the recipe at its own population (100,000), at this epsilon
MOONSHOT_ROUNDS = (400, 600, 1200)  # the moonshot's rounds, scored on validation; 1,200: the recipe's own
MOONSHOT_EMA = (0.99, 0.995, 0.998)  # then its server EMA at the chosen rounds; 0.99: the recipe's own
MOONSHOT_USERS_PER_CLIENT = (8, 4, 2)  # then its users per client K there, M = 128 / K; 8: the recipe's own
MOONSHOT_USERS_A_ROUND = 128  # K x M, the recipe's (8 x 16): the smaller clients keep the users a round
#: then its public start, with a lever or two (moonshot's arguments over the choices so far)
STARTS = {"the recipe's start": {}, "ArcFace start": {"init": ARCFACE_INIT},
          "ArcFace start, server lr 0.1": {"init": ARCFACE_INIT, "server_lr": 0.1},
          "ArcFace start, 200 rounds": {"init": ARCFACE_INIT, "rounds": 200},
          "ArcFace start, convolutions only": {"init": ARCFACE_INIT, "trainable": "features"}}
#: then a lever on the chosen start, each one validation run (moonshot's arguments over the
#: choices so far; "none" is the chosen start's own run)
START_LEVERS = {"none": {}, "server lr 0.25": {"server_lr": 0.25}, "server lr 1": {"server_lr": 1.0},
                "4 local epochs": {"local_epochs": 4}, "1,200 rounds": {"rounds": 1200},
                "client lr 0.03": {"client_lr": 0.03}, "K 16 in 8 clients": {"users_per_client": 16}}
SMALL = (10_000, 2.0)  # the second moonshot (N', epsilon): 10k users at epsilon 2
SMALL_COHORT = {"privacy.clients_per_round": 128, "privacy.users_per_client": 2, "privacy.rounds": 200,
                "eval_every": 200, "federated.server_ema": 0.95}  # its cohort: 0.0145 x C on the average
#: its levers, from the ArcFace start, each one validation run (the recipe's knobs otherwise)
SMALL_LEVERS = {"none": {}, "server lr 0.1": {"federated.server_lr": 0.1},
                "client lr 0.01": {"federated.client_lr": 0.01}, "convolutions only": {"model.trainable": "features"},
                # convolutions only, in 128 clients of 4 users (a client's people to contrast) over 50
                # rounds: 0.0151 x C on the average, as low as the 100k moonshot's 0.0175
                "convolutions only, K 4, 50 rounds": {"model.trainable": "features", "privacy.users_per_client": 4,
                                                      "privacy.rounds": 50, "eval_every": 50,
                                                      "federated.server_ema": 0.9}}
MECHANISMS = ("gaussian", "tree", "bandmf", "blt")  # gaussian: DP-FedEmb; the others DP-FTRL-FedEmb's
BANDS = {"bandmf": (1, 4), "blt": (35, 16)}  # the candidates for b, scored on validation
LABEL = {"gaussian": "DP-FedEmb (Gaussian)", "tree": "DP-FTRL-FedEmb, tree", "bandmf": "DP-FTRL-FedEmb, BandMF",
         "blt": "DP-FTRL-FedEmb, BLT"}


def _people(population: int) -> str:
    return f"{population // 1_000_000}M" if population >= 1_000_000 else f"{population // 1000}k"


def mechanism_settings(mechanism: str, bands: int | None = None) -> dict[str, Any]:
    """The settings of ``mechanism``'s noise (and its b): none for DP-FedEmb's Gaussian noise,
    else DP-FTRL-FedEmb with that mechanism (`--algorithm dp-ftrl-fedemb --mechanism M [--bands B]`)."""
    settings: dict[str, Any] = {}
    if mechanism != "gaussian":
        settings.update({"algorithm": "dp-ftrl-fedemb", "privacy.mechanism": mechanism})
    if bands is not None:
        settings["privacy.bands"] = bands
    return settings


def run(epsilon: float, mechanism: str, seed: int, split: str = "test", bands: int | None = None,
        population: int = 100_000) -> Run:
    """The recipe at ``epsilon`` for ``population`` users, 200 rounds, with ``mechanism``
    noise (and its b), as `dpemb train --recipe face-100k-eps2 --data data/faces --init
    runs/face-pretrain --target-epsilon E [--target-population 1000000 --delta 1e-7] --rounds 200
    --eval-every 200 --eval-split SPLIT --seed S [--algorithm dp-ftrl-fedemb --mechanism M
    [--bands B]]` configures it (the recipe's own population is 100,000)."""
    settings: dict[str, Any] = {"data.path": DATA, "model.init": INIT, "privacy.target_epsilon": epsilon,
                                "privacy.target_population": population, "privacy.delta": DELTA[population],
                                "privacy.rounds": ROUNDS,
                                "eval_every": ROUNDS, "data.eval_split": split, "seed": seed}
    settings.update(mechanism_settings(mechanism, bands))
    b = "" if bands is None else f"/b{bands}"
    at = "" if population == 100_000 else f"{_people(population)}/"
    return Run(f"{at}eps{epsilon:g}/{mechanism}{b}/{split}/s{seed}", with_settings(load_recipe(RECIPE)[0], settings))


def moonshot(seed: int, split: str = "test", rounds: int | None = None, ema: float | None = None,
             users_per_client: int | None = None, init: str = INIT, server_lr: float | None = None,
             trainable: str | None = None, local_epochs: int | None = None, client_lr: float | None = None) -> Run:
    """The recipe at epsilon 1 with ``rounds`` rounds, server EMA ``ema``, ``users_per_client``
    K in 128 / K clients a round, server lr ``server_lr``, ``trainable`` parameters,
    ``local_epochs`` and client lr ``client_lr`` (None: the recipe's 1,200, 0.99, 8 in 16, 0.5,
    all, 2 and 0.1), from the public start ``init``: `dpemb train --recipe face-100k-eps2 --data
    data/faces --init INIT --target-epsilon 1 --rounds R --eval-every R [--server-ema E]
    [--users-per-client K --clients-per-round M] [--server-lr L] [--trainable T] [--local-epochs
    E] [--client-lr L] --eval-split SPLIT --seed S`."""
    recipe = load_recipe(RECIPE)[0]
    rounds, ema = rounds or recipe.privacy.rounds, ema or recipe.federated.server_ema
    k = users_per_client or recipe.privacy.users_per_client
    lr, trainable = server_lr or recipe.federated.server_lr, trainable or recipe.model.trainable
    epochs, clr = local_epochs or recipe.federated.local_epochs, client_lr or recipe.federated.client_lr
    settings = {"data.path": DATA, "model.init": init, "privacy.target_epsilon": MOONSHOT_EPSILON,
                "privacy.rounds": rounds, "eval_every": rounds, "federated.server_ema": ema,
                "privacy.users_per_client": k, "privacy.clients_per_round": MOONSHOT_USERS_A_ROUND // k,
                "federated.server_lr": lr, "model.trainable": trainable, "federated.local_epochs": epochs,
                "federated.client_lr": clr, "data.eval_split": split, "seed": seed}
    # the run's name: a part for each knob that differs from the recipe's (its public start from INIT)
    parts = ((rounds, recipe.privacy.rounds, f"r{rounds}"), (ema, recipe.federated.server_ema, f"ema{ema:g}"),
             (k, recipe.privacy.users_per_client, f"K{k}"), (init, INIT, "arcface-start"),
             (lr, recipe.federated.server_lr, f"slr{lr:g}"), (trainable, recipe.model.trainable, trainable),
             (epochs, recipe.federated.local_epochs, f"le{epochs}"), (clr, recipe.federated.client_lr, f"clr{clr:g}"))
    at = "".join(f"{part}/" for value, default, part in parts if value != default)
    return Run(f"moonshot/eps{MOONSHOT_EPSILON:g}/{at}{split}/s{seed}", with_settings(recipe, settings))


def small_moonshot(seed: int, split: str = "test", lever: str = "none") -> Run:
    """The second moonshot, 10k users at epsilon 2: the recipe extrapolated to 10,000 users
    with 128 clients of 2 users a round, 200 rounds, server EMA 0.95 (the cohort that brings
    the noise on the average down to 0.0145 x C there), from the ArcFace public start, with
    ``lever`` (SMALL_LEVERS): `dpemb train --recipe face-100k-eps2 --data data/faces --init
    runs/face-pretrain-arcface --target-epsilon 2 --target-population 10000 --clients-per-round
    128 --users-per-client 2 --rounds 200 --eval-every 200 --server-ema 0.95 [--server-lr 0.1 |
    --client-lr 0.01 | --trainable features [--users-per-client 4 --rounds 50 --eval-every 50
    --server-ema 0.9]] --eval-split SPLIT --seed S` (a later flag overrides an earlier)."""
    population, epsilon = SMALL
    settings = {"data.path": DATA, "model.init": ARCFACE_INIT, "privacy.target_epsilon": epsilon,
                "privacy.target_population": population, **SMALL_COHORT, **SMALL_LEVERS[lever],
                "data.eval_split": split, "seed": seed}
    at = "" if lever == "none" else lever.replace(",", "").replace(" ", "-") + "/"
    return Run(f"moonshot/{_people(population)}/eps{epsilon:g}/arcface-start/{at}{split}/s{seed}",
               with_settings(load_recipe(RECIPE)[0], settings))


def moonshot_candidates() -> dict[int, Run]:
    """The moonshot's rounds, each one validation run (seed 0)."""
    return {r: moonshot(0, "validation", r) for r in MOONSHOT_ROUNDS}


def ema_candidates(rounds: int) -> dict[float, Run]:
    """The moonshot's server EMA at ``rounds`` rounds, each one validation run (seed 0)."""
    return {e: moonshot(0, "validation", rounds, e) for e in MOONSHOT_EMA}


def users_candidates(rounds: int, ema: float) -> dict[int, Run]:
    """The moonshot's users per client at ``rounds`` rounds and server EMA ``ema``, each one
    validation run (seed 0), every one with 128 users a round."""
    return {k: moonshot(0, "validation", rounds, ema, k) for k in MOONSHOT_USERS_PER_CLIENT}


Stage = tuple[dict[Any, Run], Any, Callable[[Any], list[Run]]]


def moonshot_stages(rows: list[dict[str, Any]]) -> list[Stage]:
    """The moonshots' choices on validation. The first (100k at epsilon 1), in order, each once
    the one before is made: its rounds; its server EMA at those rounds; its users per client
    there; for smaller clients than the recipe's (less noise on the average), its rounds again
    among those not below the first choice; then its public start and server lr (the recipe's
    start, or the ArcFace start with the levers of STARTS); then a lever on that start
    (START_LEVERS: server lr, local epochs, rounds, client lr, users per client). The second
    (10k at epsilon 2), from the ArcFace start: its lever (SMALL_LEVERS). Each stage:
    (candidates, the chosen value or None, the test seeds of a value)."""
    return first_moonshot_stages(rows) + [small_moonshot_stage(rows)]


def small_moonshot_stage(rows: list[dict[str, Any]]) -> Stage:
    """The second moonshot's one choice: its lever (SMALL_LEVERS) on validation."""
    levers = {lever: small_moonshot(0, "validation", lever) for lever in SMALL_LEVERS}
    return levers, choose(rows, levers), lambda lever: [small_moonshot(s, lever=lever) for s in SEEDS]


def first_moonshot_stages(rows: list[dict[str, Any]]) -> list[Stage]:
    """The first moonshot's stages, in order (``moonshot_stages``)."""
    by_rounds = moonshot_candidates()
    rounds = choose(rows, by_rounds)
    stages = [(by_rounds, rounds, lambda r: [moonshot(s, rounds=r) for s in SEEDS])]
    if rounds is None:
        return stages
    by_ema = ema_candidates(rounds)
    ema = choose(rows, by_ema)
    stages.append((by_ema, ema, lambda e: [moonshot(s, rounds=rounds, ema=e) for s in SEEDS]))
    if ema is None:
        return stages
    by_k = users_candidates(rounds, ema)
    k = choose(rows, by_k)
    stages.append((by_k, k, lambda u: [moonshot(s, rounds=rounds, ema=ema, users_per_client=u) for s in SEEDS]))
    if k is None:
        return stages
    if k != MOONSHOT_USERS_PER_CLIENT[0]:
        again = {r: moonshot(0, "validation", r, ema, k) for r in MOONSHOT_ROUNDS if r >= rounds}
        rounds = choose(rows, again)
        stages.append((again, rounds, lambda r: [moonshot(s, rounds=r, ema=ema, users_per_client=k) for s in SEEDS]))
        if rounds is None:
            return stages
    at = {"rounds": rounds, "ema": ema, "users_per_client": k}
    starts = {name: moonshot(0, "validation", **(at | lever)) for name, lever in STARTS.items()}
    start = choose(rows, starts)
    stages.append((starts, start, lambda name: [moonshot(s, **(at | STARTS[name])) for s in SEEDS]))
    if start is None:
        return stages
    base = at | STARTS[start]
    levers = {name: moonshot(0, "validation", **(base | lever)) for name, lever in START_LEVERS.items()}
    stages.append((levers, choose(rows, levers),
                   lambda name: [moonshot(s, **(base | START_LEVERS[name])) for s in SEEDS]))
    return stages


def candidates(cell: tuple[int, float], mechanism: str) -> dict[int, Run]:
    population, epsilon = cell
    return {b: run(epsilon, mechanism, 0, "validation", b, population) for b in BANDS[mechanism]}


def prepare(work: Path) -> None:
    """The face-like data (the study long's, at the recipes' path) and the recipes' public
    starts (the recipe face-pretrain, then face-pretrain-arcface from it, each trained once
    into ``work``/runs/NAME)."""
    from dpemb.data.glyphs import GlyphConfig, make_glyphs
    from dpemb.training.runner import train

    if not (work / DATA / "meta.json").exists():
        make_glyphs(GlyphConfig(**long.GLYPHS), progress=False).save(work / DATA)
    for name, out, init in ((PRETRAIN, INIT, None), (ARCFACE_PRETRAIN, ARCFACE_INIT, INIT)):
        if not (work / out / "report.json").exists():
            pre = with_settings(load_recipe(name)[0], {"data.path": str(work / DATA),
                                                       **({"model.init": str(work / init)} if init else {})})
            train(pre, str(work / out), resume="auto")


def plan(rows: list[dict[str, Any]]) -> list[Run]:
    runs = []
    for pop, eps in CELLS:
        runs += [run(eps, m, s, population=pop) for m in ("gaussian", "tree") for s in SEEDS]
        for m in BANDS:
            runs += choose_then_test(rows, candidates((pop, eps), m),
                                     lambda b, m=m, e=eps, n=pop: [run(e, m, s, bands=b, population=n) for s in SEEDS])
    moon = [moonshot(s) for s in SEEDS]  # the recipe as shipped, whatever validation chooses
    for cands, _, tests in moonshot_stages(rows):  # each choice's test seeds (a later choice of the
        moon += choose_then_test(rows, cands, tests)  # same configuration adds no run)
    return runs + list({r.key: r for r in moon}.values())


def _tests(rows: list[dict[str, Any]], cell: tuple[int, float], mechanism: str) -> list[dict[str, Any]]:
    population, epsilon = cell
    rs = select(rows, data__eval_split="test", privacy__target_epsilon=epsilon,
                privacy__target_population=population, privacy__rounds=ROUNDS, model__init=INIT)
    return [r for r in rs if (setting(r, "privacy.mechanism") or "gaussian") == mechanism]


def _extrapolated(row: dict[str, Any]) -> dict[str, Any]:
    """The row's epsilon statement at its own target population."""
    return next(e for e in row["privacy"]["extrapolated"]
                if e["population"] == setting(row, "privacy.target_population"))


def _model_noise(row: dict[str, Any]) -> str:
    """The noise the run's extrapolated release leaves on the model (``strategy.model_noise``
    at its target population), x C per coordinate; the tree's is not modelled."""
    from dpemb.privacy import PrivacySpec
    from dpemb.privacy.strategy import model_noise

    spec = PrivacySpec(**row["privacy"]["spec"])
    if spec.mechanism == "tree":
        return "n/a"
    ex = _extrapolated(row)
    at = dataclasses.replace(spec, population=ex["population"], noise_multiplier=ex["noise_multiplier"],
                             clients_per_round=ex["clients_per_round"])
    return f"{model_noise(at):.3g}"


def _statement(rs: list[dict[str, Any]]) -> tuple[str, ...]:
    """z at the trained users, z' and epsilon' (PLD) at N', the lowest own epsilon (RDP) of
    the runs, the model noise at N'."""
    ex = _extrapolated(rs[0])
    return (f"{rs[0]['privacy']['spec']['noise_multiplier']:.4f}", f"{ex['noise_multiplier']:.3f}",
            f"{ex['epsilon_pld']:.3f}", f"{min(r['privacy']['epsilon_rdp'] for r in rs):,.0f}", _model_noise(rs[0]))


def sections(rows: list[dict[str, Any]]) -> dict[str, str]:
    by_key = {r["key"]: r for r in rows}
    val, test = [], []
    for cell in CELLS:
        at = (_people(cell[0]), f"{cell[1]:g}")
        for m in BANDS:
            cand = candidates(cell, m)
            chosen = choose(rows, cand)
            val += [(*at, LABEL[m], b, f"{by_key[c.key]['metrics'][METRIC]:.4f}" if c.key in by_key else "-",
                     "chosen" if b == chosen else "") for b, c in cand.items()]
        for m in MECHANISMS:
            rs = _tests(rows, cell, m)
            if rs:
                test.append((*at, f"{setting(rs[0], 'privacy.delta'):g}", LABEL[m],
                             setting(rs[0], "privacy.bands") if m in BANDS else "", *_statement(rs), by_seed(rs),
                             mean_std(rs)))
    moon, small, listed = [], [], set()  # a later stage's candidate may be an earlier one's (the recipe's EMA)
    for out, (cands, chosen, tests) in [*((moon, st) for st in first_moonshot_stages(rows)),
                                        (small, small_moonshot_stage(rows))]:
        for value, cand in cands.items():
            rs = [by_key[x.key] for x in tests(value) if x.key in by_key]
            val_row = by_key.get(cand.key)
            if cand.key in listed or not (rs or val_row):
                continue
            listed.add(cand.key)
            first = (rs or [val_row])[0]
            at = (_people(setting(first, "privacy.target_population")), f"{setting(first, 'privacy.target_epsilon'):g}",
                  f"{setting(first, 'privacy.delta'):g}")
            knobs = (setting(first, "privacy.rounds"), f"{setting(first, 'federated.server_ema'):g}",
                     f"{setting(first, 'privacy.users_per_client')} x {setting(first, 'privacy.clients_per_round')}")
            scores = (f"{val_row['metrics'][METRIC]:.4f}" if val_row else "-", "chosen" if value == chosen else "",
                      *_statement(rs or [val_row]), by_seed(rs) if rs else "-", mean_std(rs) if rs else "-")
            if out is small:  # the lever names what differs
                small.append((*at, value, *knobs, *scores))
            else:
                moon.append((*at, setting(first, "model.init").removeprefix("runs/"),
                             f"{setting(first, 'federated.server_lr'):g}", setting(first, "model.trainable"),
                             setting(first, "federated.local_epochs"), f"{setting(first, 'federated.client_lr'):g}",
                             *knobs, *scores))
    statement = ["z (4,590 users)", "z' (N')", "ε' PLD (N')", "own ε RDP (4,590)", "model noise (x C)"]
    return {
        "correlated-validation": table(["N'", "ε", "mechanism", "b", f"validation {METRIC} (seed 0)", ""], val),
        "correlated-test": table(["N'", "ε", "δ", "mechanism", "b", *statement, f"test {METRIC} by seed",
                                  "mean ± std [n]"], test),
        "correlated-moonshot": table(["N'", "ε", "δ", "public start", "server lr", "trainable", "local epochs",
                                      "client lr", "rounds", "server EMA", "K x M",
                                      f"validation {METRIC} (seed 0)", "", *statement, f"test {METRIC} by seed",
                                      "mean ± std [n]"], moon),
        "correlated-moonshot-10k": table(["N'", "ε", "δ", "lever (ArcFace start)", "rounds", "server EMA", "K x M",
                                          f"validation {METRIC} (seed 0)", "", *statement, f"test {METRIC} by seed",
                                          "mean ± std [n]"], small),
    }


def figures(rows: list[dict[str, Any]], img: Path) -> None:
    """correlated.png: per cell (x), one bar per mechanism, mean ± std over the test seeds;
    moonshots.png: each moonshot choice's test seeds against the ArcFace public start alone."""
    _moonshot_figure(rows, img)
    _cells_figure(rows, img)


def _moonshot_figure(rows: list[dict[str, Any]], img: Path) -> None:
    by_key, bars = {r["key"]: r for r in rows}, {}
    for cands, chosen, tests in moonshot_stages(rows):
        rs = [by_key[x.key] for x in tests(chosen) if x.key in by_key] if chosen is not None else []
        if rs:
            r = rs[0]
            start = "ArcFace start" if setting(r, "model.init") == ARCFACE_INIT else "the recipe's start"
            only = "\nconvolutions only" if setting(r, "model.trainable") == "features" else ""
            # a lever chosen on the start names itself (its "none" is the start stage's bar)
            lever = f"\n+ {chosen}" if list(cands) == list(START_LEVERS) and chosen != "none" else ""
            bars[f"{_people(setting(r, 'privacy.target_population'))}, ε {setting(r, 'privacy.target_epsilon'):g}\n"
                 f"{start}{only}{lever}"] = stats(rs)
    start = next((r["initial"][METRIC] for r in select(rows, data__eval_split="test", model__init=ARCFACE_INIT)
                  if r["initial"]), None)  # every such run scores the same start first
    if bars:
        bar_plot(img / "moonshots.png", bars, "Moonshots, test split, 3 seeds (goals: 100k ε 1 0.904, 10k ε 2 0.857)",
                 None if start is None else ("the ArcFace public start alone (no private data)", (start, math.nan, 1)))


def _cells_figure(rows: list[dict[str, Any]], img: Path) -> None:
    tests = {(c, m): _tests(rows, c, m) for c in sorted(CELLS) for m in MECHANISMS}
    cells = [c for c in sorted(CELLS) if any(tests[c, m] for m in MECHANISMS)]
    if not cells:
        return
    bars = {(c, m): stats(rs) for (c, m), rs in tests.items() if rs and c in cells}
    width = 0.8 / len(MECHANISMS)
    deltas = " and ".join(f"{DELTA[p]:g} ({_people(p)})" for p in sorted({p for p, _ in cells}))
    with figure(img / "correlated.png", f"PLD, δ {deltas}, {ROUNDS} rounds, test split", "Recall@FAR=1e-3") as ax:
        for i, m in enumerate(MECHANISMS):
            got = [(x, bars[c, m]) for x, c in enumerate(cells) if (c, m) in bars]
            ax.bar([x + (i - (len(MECHANISMS) - 1) / 2) * width for x, _ in got], [st[0] for _, st in got], width,
                   yerr=[st[1] if st[2] > 1 else 0 for _, st in got], capsize=3, alpha=0.85,
                   label=LABEL[m].replace("DP-FTRL-FedEmb, ", "FTRL ").replace(" (Gaussian)", ""))
        start = [r["initial"][METRIC] for r in select(rows, data__eval_split="test", model__init=INIT) if r["initial"]]
        if start:  # every run of the cells starts from the same public model (scored on the test split)
            ax.axhline(sum(start) / len(start), color="black", linestyle="--", linewidth=1, label="public start")
        seeds = [max(len(tests[c, m]) for m in MECHANISMS) for c in cells]
        ax.set_xticks(range(len(cells)), [f"{_people(p)}, ε {e:g}\n({n} seed{'s' * (n > 1)})"
                                          for (p, e), n in zip(cells, seeds)])
        ax.set_ylim(max(0.0, min(st[0] for st in bars.values()) - 0.1), 1.0)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, ncol=2, loc="upper left")

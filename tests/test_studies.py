"""experiments/harness.py and its studies: a page's marked tables are the renderer's output
on the committed export, with every absolute number the page had before the port; a
study's plan is the export's runs, chosen on validation only; the runner trains each
configuration once (keyed by its hash) through dpemb's training path and skips finished
ones; an export holds only what a run releases (docs/PRIVACY.md's study row)."""

import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import harness as h  # noqa: E402
from studies import correlated, long, moonshot, population, references  # noqa: E402

from dpemb.algorithms.round import RoundStats  # noqa: E402
from dpemb.training.config import OptimConfig  # noqa: E402
from dpemb.training.recipes import load_recipe  # noqa: E402
from dpemb.training.round_log import diagnostics  # noqa: E402
from dpemb.training.run_config import DataConfig, PrivacyRequest, TrainConfig, changed_settings  # noqa: E402
from tests.conftest import make_tiny_dataset  # noqa: E402

DOCS = ROOT / "docs"
LEAD = "**What this ε covers.**"  # the note beside every results page's headline
#: training's private diagnostics (docs/PRIVACY.md), also under the names old run records gave them
PRIVATE_NAMES = set(diagnostics(RoundStats())) | {"train_examples", "train_identities", "images_per_second",
                                                  "rounds_per_second", "final_loss", "preclip_norm", "seconds"}
# absolute numbers of the pages' tables before the port (experiments/fedemb_long_report.py, fedemb_moonshot.py)
BEFORE = {"long": {
    "long-reference": ["0.648", "0.945, 0.963, 0.948", "0.952 ± 0.010", "| 128000 | 0.949 |"],
    "long-goal": ["0.922 ± 0.005", "0.915 ± 0.002", "0.946 ± 0.005", "0.926 ± 0.004", "none (no noise) | 16 | 0.922"],
    "long-validation": ["0.905", "0.931", "0.904", "0.919"],
    "long-privacy": ["| 10M | 16 | 1200 | 0.5 | 0.00430 | 3.22e-04 | 17,429 | 9.367 | 0.500 | 1e-07 |",
                     "| 1M | 16 | 1200 | 1 | 0.02063 | 1.55e-03 | 1,743 | 4.496 | 1.000 | 1e-06 |",
                     "| 10M | 32 | 1200 | 0.5 | 0.00855 | 6.41e-04 | 17,429 | 18.624 | 0.500 | 1e-07 |",
                     "| 1M | 32 | 1200 | 1 | 0.04059 | 3.04e-03 | 1,743 | 8.843 | 1.000 | 1e-06 |"]}, "moonshot": {
    "moonshot-reference": ["0.945, 0.963, 0.948", "0.952 ± 0.010"],
    "moonshot-levers": ["| 0.858 [1] |  | 0.0779 | 5.84e-03", "0.855 [1] | -0.003 | 0.1419 | 1.06e-02", "0.865 [1] | +0.007",
                        "0.853 [1] | -0.005 | 0.0779 | 1.95e-03", "0.809 [1] | -0.049", "0.872 [1] | +0.014",
                        "0.866 [1] | +0.008", "0.868 [1] | +0.010"],
    "moonshot-stage2": ["0.856 [1] | -0.015", "0.879 [1] | +0.008", "0.870 [1] | -0.001 | 0.0779 | 3.90e-03",
                        "0.875 [1] | +0.003", "0.856 [1] | -0.015 | 0.0779 | 2.92e-03",
                        "0.811 [1] | -0.061 | 0.0779 | 1.46e-03", "0.871 [1] | -0.001 | 0.1030 | 7.72e-03"],
    "moonshot-stage3": ["0.882 [1] | +0.003"],
    "moonshot-ceilings": ["0.906 [1] | 0.858 [1] | +0.047", "0.837 [1] | 0.809 [1] | +0.028",
                          "0.904 [1] | 0.882 [1] | +0.022"],
    "moonshot-test": ["0.869, 0.861, 0.860 | 0.863 ± 0.005", "0.0779 | 5.84e-03 | 174, 1.695 | 2.000",
                      "0.883, 0.875, 0.872 | 0.876 ± 0.006", "0.0802 | 6.02e-03 | 174, 1.745",
                      "0.882, 0.874, 0.868 | 0.875 ± 0.007", "0.0802 | 3.01e-03 | 349, 1.749",
                      "0.895, 0.904, 0.894 | 0.898 ± 0.005", "0.1064 | 3.99e-03 | 349, 2.321",
                      "0.906, 0.910, 0.908 | 0.908 ± 0.002"],
    "moonshot-probes": ["0.866 [1] | 0.872 [1] | -0.005", "0.878 [1] | 0.856 [1] | +0.022", "0.869 [1] | 0.811 [1] | +0.058",
                        "0.881 [1] | 0.882 [1] | -0.001", "0.887 [1] | 0.882 [1] | +0.005"],
    "moonshot-follow-up": ["0.887 [1] |  | 0.0779 | 2.92e-03", "0.899 [1] | +0.012 | 0.1029 | 3.86e-03"]}, "correlated": {
    "correlated-validation": ["| 1 | 0.8265 | chosen", "| 4 | 0.8136 |", "| 35 | 0.8078 | chosen", "| 16 | 0.7775 |"],
    "correlated-test": ["0.824, 0.826, 0.834 | 0.828 ± 0.005 [3]", "0.738, 0.736, 0.737 | 0.737 ± 0.001 [3]",
                        "| 1 | 0.0890 | 1.941 | 1.000 | 6,245 | 0.112 | 0.829, 0.821, 0.829 | 0.826 ± 0.005 [3]",
                        "| 35 | 0.1937 | 4.225 | 1.000 | 39 | 0.177 | 0.805, 0.831, 0.816 | 0.817 ± 0.013 [3]"],
    "correlated-moonshot": [], "correlated-moonshot-10k": []}}


def rows_of(study) -> list[dict]:
    return h.load_rows(DOCS / "data" / f"{study.NAME}.jsonl")


@pytest.mark.parametrize("study", [long, moonshot, correlated], ids=lambda s: s.NAME)
def test_the_pages_marked_tables_are_rendered_from_the_committed_export(study):
    rows, before = rows_of(study), BEFORE[study.NAME]
    sections, seen = study.sections(rows), set()
    for page in study.PAGES:
        for name, text in h.marked_sections(page.read_text()).items():
            if name.startswith(study.NAME + "-"):
                assert text == sections[name], f"{page.name}: {name} is not the export's (harness.py --render-only)"
                seen.add(name)
    assert seen == set(sections) == set(before)
    for name, cells in before.items():  # the port kept every absolute number
        assert all(c in sections[name] for c in cells), name
    # the hand-written note beside the headline quotes the export's own epsilons and selection runs
    runs = [(r["privacy"]["epsilon_rdp"], h.setting(r, "data.eval_split") == "validation") for r in rows
            if isinstance(r["privacy"], dict) and math.isfinite(r["privacy"].get("epsilon_rdp") or math.inf)]
    note = next(ln for ln in study.PAGES[0].read_text().splitlines() if ln.startswith(LEAD))
    m = re.search(r"own ε, at their [\d,]+ users, is ([\d.,]+)(?: to ([\d.,]+))?", note)
    assert (m.group(1), m.group(2) or m.group(1)) == (f"{min(runs)[0]:,.0f}", f"{max(runs)[0]:,.0f}")
    assert f"{sum(v for _, v in runs)} DP runs on the same training users, scored on the validation split" in note
    assert f"({len(runs)} DP runs in all" in note and note in (DOCS / "RESULTS.md").read_text()


def test_long_plans_exactly_the_exported_runs_choosing_k_on_validation():
    rows = rows_of(long)
    planned = long.plan(rows)
    assert {r.key for r in planned} == {r["key"] for r in rows} and len(rows) == 22
    assert all(h.settings_of(r.config) == next(x for x in rows if x["key"] == r.key)["settings"] for r in planned)
    early = {r.key for r in long.plan([])}  # before validation ran: no K = 32 test seed
    assert not any(long.fedemb(s, c, 32).key in early for s in long.SEEDS for c in long.CELLS)
    assert all(r.config.data.eval_split == "validation" for c in long.CELLS for r in long.k_candidates(c).values())
    assert [h.choose(rows, long.k_candidates(c)) for c in long.CELLS] == [32, 32]


def test_correlated_plans_exactly_the_exported_runs_choosing_b_on_validation():
    """Each (population, epsilon) cell's plan holds every exported run of the cell; once its
    validation ran, 16 runs (4 validation, 3 test seeds of 4 mechanisms), before that no
    BandMF or BLT test seed (10 runs); b is chosen on validation only; each run is the
    recipe with the documented flags; the moonshot's 3 test seeds are the recipe as shipped
    at epsilon 1, and its rounds, then its server EMA at those rounds, are chosen on validation
    before their 3 test seeds."""
    rows = rows_of(correlated)
    planned = correlated.plan(rows)
    assert all(h.settings_of(r.config) == next(x for x in rows if x["key"] == r.key)["settings"]
               for r in planned if r.key in {x["key"] for x in rows})
    complete, exported_runs = [], 0
    for pop, eps in correlated.CELLS:
        def at(c) -> bool:
            return (c.privacy.target_epsilon, c.privacy.target_population, c.privacy.rounds) == (eps, pop, 200)
        cell = {r.key for r in planned if at(r.config) and not r.name.startswith("moonshot/")}
        exported = {x["key"] for x in rows if (h.setting(x, "privacy.target_epsilon"), h.setting(
            x, "privacy.target_population"), h.setting(x, "privacy.rounds")) == (eps, pop, 200)
            and not x["name"].startswith("moonshot/")}
        chosen = all(h.choose(rows, correlated.candidates((pop, eps), m)) is not None for m in correlated.BANDS)
        assert exported <= cell and len(cell) == (16 if chosen else 10), (pop, eps)
        if not chosen:
            assert not any(r.config.data.eval_split == "test" and r.config.privacy.mechanism in correlated.BANDS
                           for r in planned if r.key in cell)
        complete += [(pop, eps)] if cell == exported else []
        exported_runs += len(exported)
    moon = {r.key for r in planned if r.name.startswith("moonshot/")}
    shipped = {correlated.moonshot(s).key for s in correlated.SEEDS}
    stages = correlated.moonshot_stages(rows)  # rounds, server EMA, users per client, [rounds again], public start
    first, small = stages[:-1], stages[-1]  # and lever, on validation; then the 10k moonshot's lever
    rounds, ema = stages[0][1], stages[1][1]
    assert (rounds, ema) == (600, 0.99) and len(stages) >= 3
    assert list(stages[1][0]) == list(correlated.MOONSHOT_EMA) and list(stages[2][0]) == list(
        correlated.MOONSHOT_USERS_PER_CLIENT)
    assert moon == shipped | {c.key for cands, _, _ in stages for c in cands.values()} | {
        r.key for _, chosen, tests in stages if chosen is not None for r in tests(chosen)}  # each choice's test seeds
    assert {correlated.moonshot(s, rounds=rounds).key for s in correlated.SEEDS} <= moon
    candidates = [c.config for cands, _, _ in first for c in cands.values()]
    assert all(c.data.eval_split == "validation" and c.seed == 0 and c.privacy.target_epsilon == 1.0
               and c.privacy.users_per_client * c.privacy.clients_per_round == 128 for c in candidates)
    # the public start stage: the recipe's start is the run the stages before chose
    starts, start = next((cands, chosen) for cands, chosen, _ in first if list(cands) == list(correlated.STARTS))
    assert stages[2][1] == 8
    assert starts["the recipe's start"].key == correlated.moonshot(0, "validation", rounds, ema, 8).key
    assert [(c.config.model.init, c.config.federated.server_lr, c.config.privacy.rounds, c.config.model.trainable)
            for c in starts.values()] == [
        ("runs/face-pretrain", 0.5, 600, "all"), ("runs/face-pretrain-arcface", 0.5, 600, "all"),
        ("runs/face-pretrain-arcface", 0.1, 600, "all"), ("runs/face-pretrain-arcface", 0.5, 200, "all"),
        ("runs/face-pretrain-arcface", 0.5, 600, "features")]
    if start is not None:  # then the levers on the chosen start, each differing from it in one setting
        levers = first[-1][0]
        assert list(levers) == list(correlated.START_LEVERS) and levers["none"].key == starts[start].key
        assert [changed_settings(starts[start].config, c.config) for c in levers.values()] == [
            {}, {"federated.server_lr": 0.25}, {"federated.server_lr": 1.0}, {"federated.local_epochs": 4},
            {"privacy.rounds": 1200, "eval_every": 1200}, {"federated.client_lr": 0.03},
            {"privacy.users_per_client": 16, "privacy.clients_per_round": 8}]
    assert list(small[0]) == list(correlated.SMALL_LEVERS) and all(
        (c.config.privacy.target_epsilon, c.config.privacy.target_population, c.config.model.init,
         c.config.data.eval_split, c.config.seed) == (2.0, 10_000, "runs/face-pretrain-arcface", "validation", 0)
        for c in small[0].values())
    assert [h.settings_of(c.config).get(k) for c, k in zip(small[0].values(), (
        "federated.server_lr", "federated.server_lr", "federated.client_lr", "model.trainable"))] == [
        None, 0.1, 0.01, "features"]  # the recipe's server lr (0.5) is the default
    k4 = small[0]["convolutions only, K 4, 50 rounds"].config  # the convolutions-only lever, its cohort changed
    assert changed_settings(small[0]["convolutions only"].config, k4) == {
        "privacy.users_per_client": 4, "privacy.rounds": 50, "eval_every": 50, "federated.server_ema": 0.9}
    tiny = correlated.small_moonshot(1, lever="server lr 0.1").config  # `dpemb train --recipe face-100k-eps2 --data data/faces
    flags = {  # --init runs/face-pretrain-arcface --target-epsilon 2 --target-population 10000
        **h.settings_of(recipe := load_recipe("face-100k-eps2")[0]), "data.path": "data/faces",  # --clients-per-round
        "model.init": "runs/face-pretrain-arcface", "privacy.target_epsilon": 2.0,  # 128 --users-per-client 2
        "privacy.target_population": 10_000, "privacy.clients_per_round": 128,  # --rounds 200 --eval-every 200
        "privacy.users_per_client": 2, "privacy.rounds": 200, "eval_every": 200,  # --server-ema 0.95
        "federated.server_ema": 0.95, "federated.server_lr": 0.1, "seed": 1}  # --server-lr 0.1 --seed 1`
    assert h.settings_of(tiny) == {k: v for k, v in flags.items() if h.DEFAULTS[k] != v}  # 200: the defaults
    assert [c.config.federated.server_ema for c in stages[1][0].values()] == list(correlated.MOONSHOT_EMA)
    assert [(c.config.privacy.rounds, c.config.federated.server_ema, c.config.privacy.users_per_client)
            for c in stages[2][0].values()] == [(600, 0.99, k) for k in correlated.MOONSHOT_USERS_PER_CLIENT]
    if stages[2][1] is None:  # before every K candidate has run: no test seed of a smaller client
        assert not any(r.config.privacy.users_per_client != 8 and r.config.data.eval_split == "test"
                       for r in planned)
    assert complete[:2] == [(100_000, 1.0), (100_000, 0.5)]
    assert len(rows) == exported_runs + len(moon & {x["key"] for x in rows})
    assert len(correlated.plan([])) == 10 * len(correlated.CELLS) + len(correlated.SEEDS) + len(
        correlated.MOONSHOT_ROUNDS) + len(correlated.SMALL_LEVERS)  # before validation: no test seed of a
    # chosen b, of the chosen rounds or of the 10k moonshot's chosen lever
    assert all(r.config.data.eval_split == "validation" for c in correlated.CELLS for m in correlated.BANDS
               for r in correlated.candidates(c, m).values())
    assert [h.choose(rows, correlated.candidates((100_000, e), m)) for e in (1.0, 0.5) for m in correlated.BANDS] == [
        1, 35, 4, 35]
    blt = correlated.run(1.0, "blt", 2, bands=35).config  # `dpemb train --recipe face-100k-eps2 ... --bands 35`
    assert (blt.algorithm, blt.privacy.mechanism, blt.privacy.bands, blt.privacy.rounds, blt.privacy.target_epsilon,
            blt.privacy.target_population, blt.data.path, blt.model.init) == (
        "dp-ftrl-fedemb", "blt", 35, 200, 1.0, 100_000, "data/faces", "runs/face-pretrain")
    big = correlated.run(1.0, "gaussian", 0, population=1_000_000).config  # ... --target-population 1000000 --delta 1e-7
    assert (big.privacy.target_population, big.privacy.delta, big.algorithm) == (1_000_000, 1e-7, "dp-fedemb")
    assert all(correlated.DELTA[n] < 1 / n for n, _ in correlated.CELLS)
    shot = correlated.moonshot(1).config  # `dpemb train --recipe face-100k-eps2 ... --target-epsilon 1 --seed 1`
    assert h.settings_of(shot) == {**h.settings_of(recipe), "data.path": "data/faces", "model.init": "runs/face-pretrain",
                                   "privacy.target_epsilon": 1.0, "seed": 1} and shot.data.eval_split == "test"
    short = correlated.moonshot(2, rounds=600).config  # ... --target-epsilon 1 --rounds 600 --eval-every 600 --seed 2
    assert h.settings_of(short) == {**h.settings_of(recipe), "data.path": "data/faces",
                                    "model.init": "runs/face-pretrain", "privacy.target_epsilon": 1.0,
                                    "privacy.rounds": 600, "eval_every": 600, "seed": 2}
    small = correlated.moonshot(0, "validation", 600, 0.99, 4).config  # ... --users-per-client 4 --clients-per-round 32
    assert h.settings_of(small) == {**h.settings_of(correlated.moonshot(0, "validation", 600).config),
                                    "privacy.users_per_client": 4, "privacy.clients_per_round": 32}


def test_moonshot_plans_exactly_the_exported_runs_and_its_configs_resolve_to_the_recorded_z():
    from dpemb.training.runner import resolve_privacy

    rows = rows_of(moonshot)
    planned = {r.key: r for r in moonshot.plan(rows)}  # the plan chose, on validation, exactly the exported runs
    assert set(planned) == {r["key"] for r in rows} and len(rows) == 44
    assert {r.key for r in moonshot.plan([])} < set(planned)
    specs = {}  # the recorded z of every distinct privacy request (the winner's: 0.10639604165947614)
    for r in rows:
        if isinstance(r["privacy"], dict) and not r["privacy"]["spec"]["nonprivate"]:
            p = planned[r["key"]].config.privacy
            specs[p.users_per_client, p.clients_per_round, p.rounds, p.accountant, p.noise_multiplier] = r
    assert len(specs) == 9
    for r in specs.values():
        z = resolve_privacy(planned[r["key"]].config, r["privacy"]["spec"]["population"]).noise_multiplier
        assert abs(z / r["privacy"]["spec"]["noise_multiplier"] - 1) < 1e-9, r["name"]


def release_table() -> dict[str, str]:
    """docs/PRIVACY.md's table of experiment exports: part -> its fields cell."""
    section = (DOCS / "PRIVACY.md").read_text().split("### Experiment exports", 1)[1].split("\n\n")
    lines = next(b for b in section if b.startswith("| part |")).splitlines()[2:]
    return {c[0]: c[1] for c in ([x.strip() for x in ln.strip("|").split("|")] for ln in lines)}


def keys_in(obj) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in keys_in(v)}
    return {k for v in obj for k in keys_in(v)} if isinstance(obj, list) else set()


def test_every_committed_export_holds_only_what_the_release_table_allows():
    table = release_table()
    assert set(table) == {"study row"} and set(re.findall(r"`([^`]+)`", table["study row"])) == set(h.ROW_FIELDS)
    assert {"train_loss", "preclip_norm_mean", "fraction_clipped"} <= PRIVATE_NAMES
    files = sorted(p for p in DOCS.rglob("*") if p.suffix in (".json", ".jsonl", ".csv"))
    assert [p.name for p in files] == ["correlated.jsonl", "long.jsonl", "moonshot.jsonl", "population.jsonl",
                                    "references.jsonl"]  # the studies' exports
    for path in files:
        for row in map(json.loads, path.read_text().splitlines()):
            assert tuple(sorted(row)) == tuple(sorted(h.ROW_FIELDS)) and not keys_in(row) & PRIVATE_NAMES, row["name"]
            assert set(row["metrics"]) <= set(h.RELEASED_METRICS) and set(row["initial"]) <= set(h.RELEASED_METRICS)
            seeded = isinstance(row["privacy"], dict) and row["privacy"]["noise_seeded"]
            assert seeded or "privacy.noise_seed" not in row["settings"], row["name"]
            if isinstance(row["privacy"], dict):
                assert set(row["privacy"]) <= set(h.RELEASED_PRIVACY), row["name"]


def test_choose_picks_on_validation_only_keeps_the_first_on_a_tie_and_waits_for_every_candidate():
    a, b = (h.Run(n, TrainConfig(seed=s, data=DataConfig(eval_split="validation"))) for n, s in (("a", 0), ("b", 1)))
    test_of = {c: h.Run(f"{c}/test", TrainConfig(seed=s)) for c, s in (("a", 0), ("b", 1))}
    rows = [{"key": a.key, "metrics": {h.METRIC: 0.5}}, {"key": test_of["b"].key, "metrics": {h.METRIC: 0.99}}]
    assert h.choose(rows, {"a": a, "b": b}) is None
    assert h.choose_then_test(rows, {"a": a, "b": b}, lambda c: [test_of[c]]) == [a, b]
    rows.append({"key": b.key, "metrics": {h.METRIC: 0.5}})  # a tie on validation; b's test score does not count
    assert h.choose_then_test(rows, {"a": a, "b": b}, lambda c: [test_of[c]]) == [a, b, test_of["a"]]
    rows.append({"key": test_of["a"].key, "metrics": {h.METRIC: 0.1}})  # nor does a's
    assert h.choose(rows, {"a": a, "b": b}) == "a"


def test_the_renderer_replaces_only_the_marked_text():
    page = "by hand\n<!-- BEGIN t -->\nold\n<!-- END t -->\nkept\n"
    assert h.replace_section(page, "t", "| a |\n") == "by hand\n<!-- BEGIN t -->\n| a |\n<!-- END t -->\nkept\n"
    with pytest.raises(KeyError):
        h.replace_section(page, "missing", "x")
    rows = [{"settings": {"seed": s}, "metrics": {h.METRIC: v}} for s, v in enumerate((0.9, 0.8))]
    assert h.mean_std(rows) == "0.850 ± 0.071 [2]" and h.mean_std(rows[:1]) == "0.900 [1]" and h.mean_std([]) == "-"


def test_the_runner_trains_each_config_once_and_exports_only_the_release(tmp_path, monkeypatch):
    data = "data/tiny"
    start = h.Run("start", TrainConfig(data=DataConfig(data, train_split="public"), optim=OptimConfig(steps=2),
                                       eval_every=2))
    fed = h.Run("fed", TrainConfig(
        data=DataConfig(data), model=TrainConfig().model.__class__(init=h.run_dir(start)), algorithm="dp-fedemb",
        privacy=PrivacyRequest(noise_multiplier=1.0, rounds=2, clients_per_round=2, users_per_client=2,
                               noise_seed=1), eval_every=2))
    study = SimpleNamespace(NAME="toy", plan=lambda rows: [fed, start, start],
                            prepare=lambda work: make_tiny_dataset().save(work / data))
    export = tmp_path / "toy.jsonl"
    rows = h.run_study(study, tmp_path / "work", jobs=0, export=export)  # the init run first, then the one from it
    assert [r["name"] for r in rows] == ["start", "fed"] and all(set(r) == set(h.ROW_FIELDS) for r in rows)
    fed_dir = tmp_path / "work" / "runs" / fed.key
    assert json.loads((fed_dir / "private" / "config.json").read_text())["model"]["init"].endswith(f"runs/{start.key}")
    assert json.loads((fed_dir / "config.json").read_text())["model"]["init"] == start.key  # released: its name
    row = rows[1]
    assert row["settings"]["privacy.noise_seed"] == 1 and row["privacy"]["noise_seeded"] is True
    assert "epsilon_rdp" in row["privacy"] and "dp_event" not in row["privacy"]
    assert h.METRIC in row["metrics"] and not keys_in(rows) & PRIVATE_NAMES and "train_loss" not in json.dumps(rows)
    # finished runs are not trained again; a finished run without its row gets it from report.json
    monkeypatch.setattr(h, "train_one", lambda *a: pytest.fail("trained again"))
    assert h.run_study(study, tmp_path / "work", jobs=0, export=export) == rows
    export.write_text(export.read_text().splitlines()[0] + "\n")
    assert h.run_study(study, tmp_path / "work", jobs=0, export=export) == rows
    # a plan that grows with its rows (a choice, then its test seeds): runs finished on disk but not
    # exported complete the choice, and the runs it adds are found too, without training
    export.write_text("")
    grows = SimpleNamespace(NAME="toy", prepare=study.prepare,
                            plan=lambda rows: [start, *([fed] if any(r["name"] == "start" for r in rows) else [])])
    assert [r["name"] for r in h.run_study(grows, tmp_path / "work", jobs=0, export=export)] == ["start", "fed"]
    # --no-train: what finished is exported (a choice it completes too, while another run is
    # missing), the missing run is named and not trained
    export.write_text("")
    extra = h.Run("extra", replace(fed.config, seed=5))
    more = SimpleNamespace(NAME="toy", prepare=study.prepare,
                           plan=lambda rows: [start, extra, *([fed] if any(r["name"] == "start" for r in rows) else [])])
    assert [r["name"] for r in h.run_study(more, tmp_path / "work", jobs=0, export=export, train=False)] == \
        ["start", "fed"]


def test_the_references_study_chose_on_validation_and_renders_its_export():
    rows = rows_of(references)
    assert {r.key for r in references.plan(rows)} == {r["key"] for r in rows}  # finished: nothing left to run
    chosen = h.choose(rows, references.candidates())
    tests = h.select(rows, data__eval_split="test")
    assert len(tests) == 3 and {h.setting(r, "optim.steps") for r in tests} == {chosen}
    page = h.marked_sections((DOCS / "RESULTS.md").read_text())
    assert all(page[name] == text for name, text in references.sections(rows).items())


def test_the_population_study_trains_its_own_100k_users_without_extrapolation_beside_its_simulation():
    from dpemb.training.runner import resolve_privacy

    rows = rows_of(population)
    planned = {r.key: r for r in population.plan(rows)}
    assert set(planned) == {r["key"] for r in rows} and len(rows) == 13  # finished: nothing left to run
    assert all(planned[r["key"]].config.data.eval_split == "test" for r in rows)  # nothing was chosen
    reals = [r for r in rows if r["key"] in {population.real_run(m, s).key for m in ("gaussian", "bandmf")
                                                  for s in population.REAL_SEEDS}]
    spec = reals[0]["privacy"]["spec"]
    # the real runs: epsilon 2 at their own 100,000 users, the cohort the simulation assumes; BandMF with
    # one band has DP-FedEmb's noise exactly
    for r in reals:
        s = r["privacy"]["spec"]
        assert (s["population"], s["clients_per_round"], s["users_per_client"]) == (100_000, 349, 8)
        assert s["noise_multiplier"] == spec["noise_multiplier"] and abs(r["privacy"]["epsilon_pld"] - 2.0) < 0.01
        assert all(e["population"] > 100_000 for e in r["privacy"]["extrapolated"] or [])  # nothing at or below it
    assert len(reals) == 4 and {r["privacy"]["spec"]["mechanism"] for r in reals} == {"gaussian", "bandmf"}
    # the simulations: 4,590 users, extrapolated to exactly the real runs' z and clients per round
    for r in rows:
        if r not in reals:
            ext = next(e for e in r["privacy"]["extrapolated"] if e["population"] == 100_000)
            assert r["privacy"]["spec"]["population"] == 4_590 and ext["clients_per_round"] == 349
            assert abs(ext["noise_multiplier"] / spec["noise_multiplier"] - 1) < 1e-3
            assert abs(ext["epsilon_pld"] - 2) < 0.01
    # every run resolves again to its recorded z; all start from one public start, scored on the same people
    for r in rows:
        z = resolve_privacy(planned[r["key"]].config, r["privacy"]["spec"]["population"]).noise_multiplier
        assert abs(z / r["privacy"]["spec"]["noise_multiplier"] - 1) < 1e-9, r["name"]
    assert len({r["initial"]["recall_at_far_0.001"] for r in rows}) == 1
    page = h.marked_sections((DOCS / "RESULTS_CORRELATED.md").read_text())
    assert page["population-table"] == population.sections(rows)["population-table"]

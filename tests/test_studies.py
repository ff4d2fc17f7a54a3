"""experiments/harness.py and its studies: a page's marked tables are the renderer's output
on the committed export; a study's configs are the export's keys; the runner trains each
configuration once, through dpemb's training path, and exports only what a run releases."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import harness as h  # noqa: E402
from studies import long, moonshot  # noqa: E402

from dpemb.training.config import OptimConfig  # noqa: E402
from dpemb.training.run_config import DataConfig, PrivacyRequest, TrainConfig  # noqa: E402
from tests.conftest import make_tiny_dataset  # noqa: E402

# absolute metrics of docs/RESULTS_LONG.md's tables before the port (experiments/fedemb_long_report.py)
LONG_BEFORE = {"long-reference": ["0.648", "0.945, 0.963, 0.948", "0.952 ± 0.010", "| 128000 | 0.949 |"],
               "long-goal": ["0.922 ± 0.005", "0.915 ± 0.002", "0.946 ± 0.005", "0.926 ± 0.004",
                             "none (no noise) | 16 | 0.922"],
               "long-validation": ["0.905", "0.931", "0.904", "0.919"],
               "long-privacy": ["| 10M | 16 | 1200 | 0.5 | 0.00430 | 3.22e-04 | 17,429 | 9.367 | 0.500 | 1e-07 |",
                                "| 1M | 16 | 1200 | 1 | 0.02063 | 1.55e-03 | 1,743 | 4.496 | 1.000 | 1e-06 |",
                                "| 10M | 32 | 1200 | 0.5 | 0.00855 | 6.41e-04 | 17,429 | 18.624 | 0.500 | 1e-07 |",
                                "| 1M | 32 | 1200 | 1 | 0.04059 | 3.04e-03 | 1,743 | 8.843 | 1.000 | 1e-06 |"]}


def test_the_pages_marked_tables_are_rendered_from_the_committed_export():
    assert_pages_rendered_from_export(long, h.load_rows(ROOT / "docs" / "data" / "long.jsonl"), "long-", LONG_BEFORE)


def assert_pages_rendered_from_export(study, rows, prefix: str, before: dict) -> None:
    """Every marked section of the study's pages is what the renderer makes of its export,
    and holds every absolute number the page had before the port (``before``)."""
    sections, seen = study.sections(rows), set()
    for page in study.PAGES:
        for name, text in h.marked_sections(page.read_text()).items():
            if name.startswith(prefix):
                assert text == sections[name], f"{page.name}: {name} is not the export's (harness.py --render-only)"
                seen.add(name)
    assert seen == set(sections) == set(before)
    for name, cells in before.items():  # the port kept every absolute number
        assert all(c in sections[name] for c in cells), name


def test_the_study_plans_exactly_the_exported_runs_choosing_on_validation():
    rows = h.load_rows(ROOT / "docs" / "data" / "long.jsonl")
    planned = long.plan(rows)
    assert {r.key for r in planned} == {r["key"] for r in rows} and len(rows) == 22
    assert all(h.settings_of(r.config) == next(x for x in rows if x["key"] == r.key)["settings"] for r in planned)
    # before validation ran: no K = 32 test seed; the validation runs are scored on validation
    early = {r.key for r in long.plan([])}
    assert not any(long.fedemb(s, c, 32).key in early for s in long.SEEDS for c in long.CELLS)
    assert all(r.config.data.eval_split == "validation" for c in long.CELLS for r in long.k_candidates(c).values())
    assert [h.choose(rows, long.k_candidates(c)) for c in long.CELLS] == [32, 32]


# absolute numbers of docs/RESULTS_MOONSHOT.md's tables before the port (experiments/fedemb_moonshot.py)
MOONSHOT_BEFORE = {
    "moonshot-reference": ["0.945, 0.963, 0.948", "0.952 ± 0.010"],
    "moonshot-levers": ["| 0.858 [1] |  | 0.0779 | 5.84e-03", "0.855 [1] | -0.003 | 0.1419 | 1.06e-02",
                        "0.865 [1] | +0.007",
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
    "moonshot-probes": ["0.866 [1] | 0.872 [1] | -0.005", "0.878 [1] | 0.856 [1] | +0.022",
                        "0.869 [1] | 0.811 [1] | +0.058",
                        "0.881 [1] | 0.882 [1] | -0.001", "0.887 [1] | 0.882 [1] | +0.005"],
    "moonshot-follow-up": ["0.887 [1] |  | 0.0779 | 2.92e-03", "0.899 [1] | +0.012 | 0.1029 | 3.86e-03"]}


def test_the_moonshot_pages_are_rendered_from_its_export_and_its_configs_resolve_to_the_recorded_z():
    from dpemb.training.runner import resolve_privacy

    rows = h.load_rows(ROOT / "docs" / "data" / "moonshot.jsonl")
    assert_pages_rendered_from_export(moonshot, rows, "moonshot-", MOONSHOT_BEFORE)
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


def test_choose_keeps_the_first_on_a_tie_and_waits_for_every_candidate():
    a, b = (h.Run(n, TrainConfig(seed=s)) for n, s in (("a", 0), ("b", 1)))
    rows = [{"key": a.key, "metrics": {h.METRIC: 0.5}}]
    assert h.choose(rows, {"a": a, "b": b}) is None
    assert h.choose_then_test(rows, {"a": a, "b": b}, lambda c: [h.Run("t", TrainConfig(seed=9))]) == [a, b]
    rows.append({"key": b.key, "metrics": {h.METRIC: 0.5}})
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
    assert json.loads((tmp_path / "work" / "runs" / fed.key / "config.json").read_text())["model"]["init"].endswith(
        f"runs/{start.key}")
    row = rows[1]
    assert row["settings"]["privacy.noise_seed"] == 1 and row["privacy"]["noise_seeded"] is True
    assert "epsilon_rdp" in row["privacy"] and "dp_event" not in row["privacy"]
    assert h.METRIC in row["metrics"] and "train_loss" not in json.dumps(rows)
    # finished runs are not trained again; a finished run without its row gets it from report.json
    monkeypatch.setattr(h, "train_one", lambda *a: pytest.fail("trained again"))
    assert h.run_study(study, tmp_path / "work", jobs=0, export=export) == rows
    export.write_text(export.read_text().splitlines()[0] + "\n")
    assert h.run_study(study, tmp_path / "work", jobs=0, export=export) == rows

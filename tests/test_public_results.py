"""experiments/public_results.py: the export committed beside a results page holds only
what docs/PRIVACY.md's table of experiment exports allows (no private training
diagnostics; times only for the built-in synthetic benchmark; seeds only with the
not-a-release statement), cleans an export written under older rules, and never loses a
run a later, partial work folder lacks."""

import copy
import fnmatch
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import harness  # noqa: E402
import public_results as pub  # noqa: E402

from dpemb.algorithms.round import RoundStats  # noqa: E402
from dpemb.training.round_log import diagnostics  # noqa: E402

# the names of the private diagnostics (docs/PRIVACY.md, private/diagnostics.jsonl), also under
# the names the experiments' work records give them
PRIVATE_NAMES = {"train_loss", "clients", "users", "examples", "preclip_norm_mean", "fraction_clipped",
                 "nonfinite_deltas", "unclipped_clients", "train_examples", "train_identities",
                 "images_per_second", "rounds_per_second", "final_loss", "preclip_norm", "collective_seconds"}


def export_table() -> dict[str, set[str]]:
    """docs/PRIVACY.md's table of experiment exports: part -> the field names (patterns) it allows."""
    text = (ROOT / "docs" / "PRIVACY.md").read_text()
    section = text.split("### Experiment exports", 1)[1].split("\n\n")
    rows = next(b for b in section if b.startswith("| part |")).splitlines()[2:]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    return {c[0]: set(re.findall(r"`([^`]+)`", c[1])) for c in cells}


def allowed(name: str, patterns: set[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def keys_in(obj: Any) -> set[str]:
    """Every key of every dict in ``obj``, at any depth."""
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in keys_in(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in keys_in(v)}
    return set()


def violations(export: dict[str, Any], table: dict[str, set[str]]) -> list[str]:
    """What in ``export`` the release table does not allow (empty: nothing)."""
    rel = export.get("release") or {}
    synthetic = rel.get("data") == "synthetic"
    labelled = rel.get("seeded") is True and rel.get("release") is False and "Not a release" in rel.get("statement", "")
    out = [f"top-level field {k!r}" for k in export if not allowed(k, table["export"])]
    if "timing" in export and not synthetic:
        out.append("timing of runs not labelled as built-in synthetic data")
    if not labelled:
        out.append("no release statement saying the seeded research runs are not a release")
    record_ok = table["run record"] | (table["run timing"] if synthetic else set())
    for part in ("runs", "base"):
        for key, rec in export.get(part, {}).items():
            out += [f"{part}/{key}: field {k!r}" for k in rec if not allowed(k, record_ok)]
            if rec.get("job", {}).get("noise_seed") is not None and not labelled:
                out.append(f"{part}/{key}: noise_seed in an export not labelled as seeded research")
    out += [f"private diagnostic {k!r}" for k in sorted(keys_in(export) & PRIVATE_NAMES)]
    return out


def committed_exports() -> list[Path]:
    return sorted(p for p in (ROOT / "docs").rglob("*") if p.suffix in (".json", ".jsonl", ".csv"))


def test_every_committed_export_holds_only_what_the_release_table_allows():
    table = export_table()
    assert set(table) == {"export", "run record", "run timing", "job seed", "study row"}
    files = committed_exports()
    assert {p.name for p in files} >= {"long.jsonl", "moonshot.jsonl"}
    for path in files:
        assert path.suffix in (".json", ".jsonl"), f"{path}: no release-table entry for this format"
        if path.suffix == ".jsonl":  # a study's rows (experiments/harness.py)
            for row in map(json.loads, path.read_text().splitlines()):
                assert set(row) <= table["study row"] and not keys_in(row) & PRIVATE_NAMES, (path, row["name"])
                seeded = isinstance(row["privacy"], dict) and row["privacy"].get("noise_seeded")
                assert "privacy.noise_seed" not in row["settings"] or seeded, (path, row["name"])
            continue
        export = json.loads(path.read_text())
        assert violations(export, table) == [], path
        rel = export["release"]
        assert rel["data"] == "synthetic" and "synthetic glyph benchmark" in rel["statement"]


def test_the_check_fails_on_an_export_as_first_committed():
    """The exports as first published (timing and throughput, seeds, no statement) fail the check."""
    table = export_table()
    rec = {"job": {"key": "k", "noise_seed": 1234, "eps": 2.0}, "final": 0.87, "eps_sim": 18028.1, "z": 0.1,
           "seconds": 1017.6, "started_at": 1795504826.7, "finished_at": 1795505844.2, "images_per_second": 1207.4}
    dirty = {"about": "a", "runs": {"k": rec}, "base": {}, "context": {}, "timing": {"invocations": []}}
    found = violations(dirty, table)
    assert "runs/k: field 'images_per_second'" in found and "private diagnostic 'images_per_second'" in found
    assert "timing of runs not labelled as built-in synthetic data" in found
    assert "runs/k: noise_seed in an export not labelled as seeded research" in found
    assert "runs/k: field 'seconds'" in found  # times without the synthetic-data label
    # the export code path cleans it into one the check passes, and a second pass changes nothing
    clean = pub.merge(dirty, {}, {}, {}, "a", synthetic=True)
    assert violations(clean, table) == []
    assert set(clean["runs"]["k"]) == {"job", "final", "eps_sim", "z", "seconds", "started_at", "finished_at"}
    assert pub.merge(clean, {}, {}, {}, "a", synthetic=True) == clean
    # runs on private data: no times at all, and the check agrees
    private = pub.merge(dirty, {}, {}, {}, "a", synthetic=False)
    assert "timing" not in private and "seconds" not in private["runs"]["k"] and violations(private, table) == []
    relabelled = copy.deepcopy(private)
    relabelled["runs"]["k"]["seconds"] = 1.0
    assert violations(relabelled, table) == ["runs/k: field 'seconds'"]


def test_the_code_and_the_release_table_agree():
    table = export_table()
    assert table["export"] == pub.EXPORT_FIELDS
    assert table["run record"] == pub.RECORD_FIELDS | {p + "*" for p in pub.RECORD_PREFIXES}
    assert table["run timing"] == pub.TIMING_FIELDS
    assert table["study row"] == set(harness.ROW_FIELDS)
    # every per-round private diagnostic the trainer writes is named in the check
    assert set(diagnostics(RoundStats())) <= PRIVATE_NAMES


def test_the_public_record_drops_the_private_training_diagnostics():
    rec = {"job": {"key": "k"}, "final": 0.9, "seconds": 3.0, "z": 0.01, "eps_1000000": 1.0, "z_1000000": 1.8,
           "M_1000000": 1743, "final_clip_norm": 0.6, "preclip_norm": 0.74, "final_loss": 0.6, "something_new": 1,
           "images_per_second": 900.0}
    assert set(pub.public_record(rec, timing=True)) == {"job", "final", "seconds", "z", "eps_1000000", "z_1000000",
                                                        "M_1000000", "final_clip_norm"}
    assert "seconds" not in pub.public_record(rec, timing=False)


def test_a_merge_keeps_earlier_runs_and_invocations_and_prefers_the_work_folder():
    earlier = pub.merge({}, {"a": {"final": 0.1, "final_loss": 1.0}, "b": {"final": 0.2}},
                        {"invocations": [{"started": 1.0, "wall_s": 60.0}]}, {"info": {"users": 9}, "x": 1}, "about",
                        base={"p": {"final": 0.5, "preclip_norm": 2.0}}, synthetic=True)
    later = pub.merge(earlier, {"b": {"final": 0.3}, "c": {"final": 0.4}},
                      {"invocations": [{"started": 2.0, "wall_s": 30.0}]}, {"info": None}, "about", synthetic=True)
    assert {k: v["final"] for k, v in later["runs"].items()} == {"a": 0.1, "b": 0.3, "c": 0.4}
    assert later["base"] == {"p": {"final": 0.5}} and "final_loss" not in later["runs"]["a"]
    assert [t["started"] for t in later["timing"]["invocations"]] == [1.0, 2.0]
    assert later["context"] == {"info": {"users": 9}, "x": 1}  # None keeps the earlier value
    # the same invocation merged twice counts once
    again = pub.merge(later, {}, {"invocations": [{"started": 2.0, "wall_s": 30.0}]}, {}, "about", synthetic=True)
    assert [t["started"] for t in again["timing"]["invocations"]] == [1.0, 2.0]


def test_an_export_without_runs_never_replaces_one(tmp_path):
    path = tmp_path / "data" / "x.json"
    pub.write(path, pub.merge({}, {"a": {"final": 0.1}}, {}, {}, "about", synthetic=True))
    before = path.read_text()
    pub.write(path, pub.merge({}, {}, {}, {}, "about", synthetic=True))
    assert path.read_text() == before and pub.load(path)["runs"] == {"a": {"final": 0.1}}
    assert pub.load(tmp_path / "missing.json") == {}


# column names under which a page would print a training run's private diagnostics ("loss" alone
# names the loss function in some tables)
PRIVATE_COLUMNS = {"pre-clip norm", "train loss", "training loss", "final loss", "local loss", "fraction clipped",
                   "clipped", "unclipped clients", "examples per round", "users per round"}


def private_columns(lines: list[str]) -> list[str]:
    """The header rows of the markdown tables in ``lines`` that name a private diagnostic."""
    return [line for line, below in zip(lines, lines[1:])
            if line.startswith("|") and below.startswith("|") and set(below) <= set("|-: ")
            and {c.strip().lower() for c in line.strip("|").split("|")} & PRIVATE_COLUMNS]


def test_no_results_page_prints_a_private_diagnostic_column():
    # the table RESULTS_FEDEMB.md had: found
    assert private_columns(["| run | z (sim) | final | pre-clip norm | loss | s |", "|---|---|---|---|---|---|"])
    for page in sorted((ROOT / "docs").rglob("*.md")):
        assert private_columns(page.read_text().splitlines()) == [], page.name

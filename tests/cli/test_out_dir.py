"""`dpemb train --out` never overwrites or mixes runs without being asked: a non-empty
--out needs --resume or --overwrite, --overwrite replaces the whole run, and a folder
that holds no dpemb run is never written into."""

from __future__ import annotations

import hashlib
import json

import pytest

from dpemb.cli.main import main as dpemb
from dpemb.training.rundir import OutDirError, RunDir, check_out_dir
from tests.conftest import make_tiny_dataset

TINY = ["--embedding-dim", "16", "--no-progress", "--algorithm", "dp-fedemb", "--rounds", "2",
        "--clients-per-round", "3", "--users-per-client", "2", "--local-batch-size", "4",
        "--noise-multiplier", "0.5", "--clip-norm", "0.5", "--eval-every", "2", "--noise-seed", "1"]


def md5(path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    d = tmp_path_factory.mktemp("outdir")
    make_tiny_dataset(num_users=30).save(d / "data")
    assert dpemb(["train", "--data", str(d / "data"), "--out", str(d / "run"), *TINY]) == 0
    return d


def test_a_finished_run_is_not_overwritten_and_the_advice_works(finished, capsys):
    run = finished / "run"
    before = {p.name: md5(p) for p in run.iterdir() if p.is_file()}
    diag = (run / "private" / "diagnostics.jsonl").read_text()
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        dpemb(["train", "--data", str(finished / "data"), "--out", str(run), *TINY, "--rounds", "3"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert "already holds a trained run; nothing was written" in err and "--overwrite" in err and "--resume" in err
    assert {p.name: md5(p) for p in run.iterdir() if p.is_file()} == before
    assert (run / "private" / "diagnostics.jsonl").read_text() == diag  # nothing appended
    # the advice: --overwrite replaces the whole run (no record of the first run is left)
    assert dpemb(["train", "--data", str(finished / "data"), "--out", str(run), *TINY, "--rounds", "3",
                  "--overwrite"]) == 0
    assert json.loads((run / "report.json").read_text())["rounds"] == 3
    records = [json.loads(line) for line in (run / "private" / "diagnostics.jsonl").read_text().splitlines()]
    rounds = [r["round"] for r in records if "round" in r and not r.get("summary")]
    assert sum(1 for r in records if r.get("summary")) == 1
    assert rounds == sorted(set(rounds)) and max(rounds) <= 3  # one run's records, not two
    assert not list(finished.glob(".run.replaced-*"))


def test_a_folder_without_a_run_is_never_written_into(tmp_path, capsys):
    make_tiny_dataset(num_users=30).save(tmp_path / "data")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit):
            dpemb(["train", "--data", str(tmp_path / "data"), "--out", str(mine), *TINY, *extra])
        assert "holds no dpemb run" in capsys.readouterr().err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    # an empty folder is fine
    (tmp_path / "empty").mkdir()
    assert dpemb(["train", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "empty"), *TINY]) == 0


def test_the_library_refuses_too(tmp_path):
    (tmp_path / "run" / "private").mkdir(parents=True)
    (tmp_path / "run" / "config.json").write_text("{}")
    with pytest.raises(OutDirError, match="already holds a started run"):
        RunDir.open(tmp_path / "run")
    with pytest.raises(OutDirError, match="give one of them"):
        check_out_dir(tmp_path / "run", resume=True, overwrite=True)
    check_out_dir(tmp_path / "run", resume="auto", overwrite=False)  # a scheduler's restart
    fresh = RunDir.open(tmp_path / "run", overwrite=True)
    assert list(fresh.path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutDirError, match="is a file"):
        check_out_dir(tmp_path / "file", resume=False, overwrite=False)

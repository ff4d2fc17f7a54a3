"""The README's CLI tour, run at toy size (issue #12.1): every command exits 0, and each
trained model improves on its initialisation.

Two sizes: ``toy`` in ``make test`` (about 40 s on 2 cores: the smallest budgets whose
improvements stood clear of the held-out metric's noise, +0.03 to +0.05 Recall@FAR=1e-3
when chosen), and ``larger`` (the earlier sizes, about 70 s, ``make test-slow``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from dpemb.cli.main import main as dpemb

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> list[str]:
    block = README.read_text().split("## A quick tour of the CLI", 1)[1].split("```", 2)[1]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [ln.split("#", 1)[0].strip() for ln in joined.splitlines() if ln.strip().startswith("dpemb ")]


def args_of(cmd: str, **toy: str) -> list[str]:
    """A README command as argv, with flags replaced by toy-size values."""
    argv = cmd.split()[1:]
    for flag, value in toy.items():
        flag = "--" + flag.replace("_", "-")
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    return argv


def scores(run: Path) -> tuple[float, float]:
    rep = json.loads((run / "report.json").read_text())
    return rep["initial"]["recall_at_far_0.001"], rep["final"]["recall_at_far_0.001"]


def test_readme_shows_the_commands_this_test_runs():
    cmds = readme_commands()
    for needed in ("dpemb data make glyphs --out data/glyphs", "dpemb train --data data/glyphs --out runs/central",
                   "dpemb train --data data/glyphs --out runs/pre", "dpemb train --data data/glyphs --out runs/fedemb",
                   "dpemb eval runs/fedemb",
                   "dpemb embed runs/fedemb", "dpemb export", "dpemb account --population 3000"):
        assert any(c.startswith(needed) for c in cmds), needed


#: flags replaced in (or added to) the README's commands; "central" trains on every
#: training user, "pre" on the public users, "dp" is DP-FedEmb from "pre"
SIZES = {
    "toy": dict(users="60", central=dict(steps="100", batch_size="64", eval_every="100"),
                pre=dict(steps="60", batch_size="64", eval_every="60"),
                dp=dict(rounds="10", eval_every="10", clients_per_round="4", users_per_client="2",
                        local_batch_size="16")),
    "larger": dict(users="60", central=dict(steps="100", eval_every="100"), pre=dict(steps="60", eval_every="60"),
                   dp=dict(rounds="20", eval_every="20", clients_per_round="4", users_per_client="4")),
}


@pytest.mark.parametrize("size", ["toy", pytest.param("larger", marks=pytest.mark.slow)])
def test_readme_tour_at_toy_size(tmp_path, monkeypatch, capsys, size):
    sizes = SIZES[size]
    monkeypatch.chdir(tmp_path)
    cmds = readme_commands()
    get = lambda prefix: next(c for c in cmds if c.startswith(prefix))  # noqa: E731
    assert dpemb(args_of(get("dpemb data make glyphs --out data/glyphs"), users=sizes["users"])) == 0
    assert dpemb(args_of(get("dpemb data inspect"))) == 0
    assert Path("data/glyphs.png").is_file()

    central = args_of(get("dpemb train --data data/glyphs --out runs/central"), **sizes["central"])
    assert dpemb(central + ["--no-progress"]) == 0
    init, final = scores(Path("runs/central"))
    assert final > init, (init, final)

    pre = args_of(get("dpemb train --data data/glyphs --out runs/pre"), **sizes["pre"])
    assert dpemb(pre + ["--no-progress"]) == 0
    init, final = scores(Path("runs/pre"))
    assert final > init, (init, final)
    # toy size: 60 users leave too few for the default 8 clients of 16 users per round
    dp = args_of(get("dpemb train --data data/glyphs --out runs/fedemb"), noise_seed="1",
                 **sizes["dp"]) + ["--no-progress"]
    assert dpemb(dp) == 0
    init, final = scores(Path("runs/fedemb"))
    assert final > init, (init, final)
    assert dpemb(dp + ["--resume"]) == 0  # resuming a finished run re-reports it

    assert dpemb(args_of(get("dpemb eval runs/fedemb"), bootstrap="20")) == 0
    assert Path("roc.png").is_file()
    assert dpemb(args_of(get("dpemb eval runs/central runs/fedemb"), bootstrap="0")) == 0
    assert dpemb(["embed", "runs/fedemb", "data/glyphs", "--out", "embeddings.npy"]) == 0
    assert np.isfinite(np.load("embeddings.npy")).all()
    assert dpemb(["export", "runs/fedemb", "--out", "exported"]) == 0
    assert Path("exported/model.safetensors").is_file()
    for prefix in ("dpemb account --population 10000000", "dpemb account --population 3000"):
        assert dpemb(args_of(get(prefix))) == 0

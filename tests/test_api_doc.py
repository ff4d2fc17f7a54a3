"""docs/API.md is executed as written (#35.4): the Python example trains, evaluates, embeds
and exports; the command line it gives runs the same configuration; the run's
config.json runs again with --config."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

import dpemb
from dpemb.cli.main import build_parser
from dpemb.cli.train import config_from_args
from dpemb.training.run_config import load_config

DOC = Path(__file__).resolve().parents[1] / "docs" / "API.md"


def test_the_api_example_runs_and_matches_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    text = DOC.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(code, str(DOC), "exec"), scope)  # noqa: S102 (the documentation's own example)
    report, vectors = scope["report"], scope["vectors"]
    assert report["privacy"]["epsilon_rdp"] == __import__("pytest").approx(8.0, rel=1e-3)
    assert vectors.shape == (5, 128) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert Path("deploy/model.onnx").is_file()
    # the documented command line builds the same TrainConfig as the Python run (the CLI
    # then takes the same path: tests/training/test_run_config.py trains from both)
    cli = re.search(r"    (dpemb train --data data/api-glyphs .*?)\n\n", text, re.S).group(1)
    args = build_parser().parse_args(re.sub(r"\\\n\s*", " ", cli).split()[1:])
    config, _ = config_from_args(args)
    saved = json.loads(Path("runs/api/private/config.json").read_text())
    assert {k: v for k, v in saved.items() if k != "resolved"} == config.to_dict()
    # the run's private/config.json is a --config of the same run
    assert load_config("runs/api/private/config.json") == config


def test_version_and_the_lazy_api():
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "dpemb.cli.main", "--version"], capture_output=True, text=True)
    assert res.stdout.strip() == f"dpemb {dpemb.__version__}"
    assert dpemb.TrainConfig().privacy.users_per_client == 16  # the CLI's default, one definition

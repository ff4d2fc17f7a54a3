"""Fail-closed privacy inputs on the command line (issue #33, item 3): each refusal is one
line naming the fix, and following the fix works; the delta-close-to-1/N warning reaches
the console (and the JSON outputs that carry warnings)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dpemb.cli.main import main
from tests.cli.test_train_cli_privacy import FED, captured, run_stubbed  # noqa: F401  (fixture)
from tests.cli.test_transfer_cli import _write_features
from tests.conftest import subprocess_env
from tests.privacy.test_fail_closed import BLOCK


def refused(argv, capsys) -> str:
    """Run ``argv``: it must be a usage error (exit 2) of exactly one line, no traceback."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_train_nan_epsilon_budget_is_refused_and_a_finite_one_reaches_training(tiny_data_dir, tmp_path, capsys,
                                                                                 captured):  # noqa: F811
    base = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED]
    for bad in ("nan", "inf", "-1"):
        line = refused([*base, "--noise-multiplier", "1", "--epsilon-budget", bad], capsys)
        assert f"--epsilon-budget {float(bad)}" in line and "positive and finite" in line
    line = refused([*base, "--non-private", "--epsilon-budget", "4"], capsys)
    assert "drop the budget" in line
    assert run_stubbed([*base, "--noise-multiplier", "1", "--epsilon-budget", "4"], captured)["epsilon_budget"] == 4.0
    assert run_stubbed([*base, "--non-private"], captured)["epsilon_budget"] is None


def test_train_vanishing_or_huge_noise_is_refused_and_the_advice_works(tiny_data_dir, tmp_path, capsys,
                                                                      captured):  # noqa: F811
    base = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED]
    line = refused([*base, "--noise-multiplier", "1e-300"], capsys)  # was a ZeroDivisionError traceback
    assert "--non-private" in line and ">= 1e-06" in line
    assert "<= 1e+08" in refused([*base, "--noise-multiplier", "1e300"], capsys)
    assert run_stubbed([*base, "--non-private"], captured)["spec"].nonprivate
    seen = run_stubbed([*base, "--noise-multiplier", "1e-06"], captured)
    assert seen["spec"].noise_multiplier == 1e-06
    assert "weak guarantee: epsilon 5.5e+11" in capsys.readouterr().err  # a finite (vacuous) epsilon, said so


def test_train_delta_just_below_one_over_n_warns(tiny_data_dir, tmp_path, capsys, captured):  # noqa: F811
    base = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED, "--noise-multiplier", "1"]
    n = run_stubbed(base, captured)["spec"].population
    assert "delta close to 1/N" not in capsys.readouterr().err  # the default delta
    run_stubbed([*base, "--delta", repr(0.99999999 / n)], captured)
    err = capsys.readouterr().err
    assert "warning: delta close to 1/N" in err and f"1/(10 N) = {1 / (10 * n):.3g}" in err


def test_account_noise_range_and_delta_warning(capsys):
    base = ["account", "--population", "1000", "--clients-per-round", "10", "--rounds", "10", "--accountant", "rdp"]
    assert "--non-private" in refused([*base, "--noise-multiplier", "1e-300"], capsys)
    assert "<= 1e+08" in refused([*base, "--noise-multiplier", "1e300"], capsys)
    assert main([*base, "--noise-multiplier", "1e-06", "--json"]) == 0  # the floor: a finite epsilon
    assert np.isfinite(json.loads(capsys.readouterr().out)["epsilon_rdp"])
    both = [*base[:-1], "both"]  # PLD at a tiny z ran for minutes (cost ~ 1/z^2): skipped, and said so
    assert main([*both, "--noise-multiplier", "0.01", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert np.isfinite(row["epsilon_rdp"]) and row["epsilon_pld"] is None and "not computed" in row["note_pld"]
    assert main([*base, "--noise-multiplier", "1", "--delta", "0.00099999999", "--json"]) == 0
    out = capsys.readouterr()
    assert "warning: delta close to 1/N" in out.err  # on the console
    assert any("delta close to 1/N" in w for w in json.loads(out.out)["warnings"])  # and in the JSON


def test_transfer_noise_range_and_delta_warning(tmp_path, capsys):
    train = _write_features(tmp_path, 600, 0, "train.npz")
    test = _write_features(tmp_path, 200, 1, "test.npz")
    base = ["transfer", "--train", train, "--test", test, "--method", "dp-ls"]
    line = refused([*base, "--noise-multiplier", "1e-300", "--accountant", "rdp"], capsys)
    assert "--non-private" in line and ">= 1e-06" in line
    assert main([*base, "--non-private"]) == 0  # following the advice
    capsys.readouterr()
    sgd = [*base[:-1], "dp-sgd", "--steps", "2", "--epsilon", "1"]
    assert "public_size must be positive and finite" in refused([*sgd, "--public-size", "inf"], capsys)
    assert main([*sgd, "--public-size", "600"]) == 0  # a finite public constant
    capsys.readouterr()
    out_json = tmp_path / "t.json"
    assert main([*base, "--epsilon", "1", "--delta", repr(0.99999999 / 600), "--json", str(out_json)]) == 0
    assert "warning: delta close to 1/N" in capsys.readouterr().out
    (run,) = json.loads(out_json.read_text())["runs"]
    assert len(run["warnings"]) == 1 and "delta close to 1/N" in run["warnings"][0]
    assert np.isfinite(run["epsilon"])


@pytest.mark.parametrize("command", ["account", "train"])
def test_missing_dp_accounting_is_one_line_naming_the_install(command, tiny_data_dir, tmp_path):
    argv = {"account": ["account", "--population", "1000", "--clients-per-round", "10", "--rounds", "10",
                        "--noise-multiplier", "1", "--accountant", "rdp"],
            "train": ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "m"), *FED,
                      "--noise-multiplier", "1"]}[command]
    code = BLOCK + f"from dpemb.cli.main import main\nsys.exit(main({argv!r}))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(),
                         timeout=300)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, out.stderr
    assert lines[0].startswith(f"dpemb {command}: error: the privacy accountant dp_accounting cannot be imported")
    assert "pip install dp-accounting==0.6.0" in lines[0] and "`make`" in lines[0]
    assert not (tmp_path / "m").exists()  # nothing was written

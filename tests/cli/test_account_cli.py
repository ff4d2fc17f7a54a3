"""`dpemb account`, driven through a parser that holds only this command."""

import argparse
import json
import sys
from dataclasses import replace

import pytest

from dpemb.cli import account
from dpemb.cli.main import UsageError
from dpemb.privacy import PrivacySpec, epsilon_for
from dpemb.privacy.calibration import calibrate_noise_multiplier


def run(argv, capsys):
    """Parse and run like dpemb.cli.main.main; returns (exit status, stdout, stderr)."""
    parser = argparse.ArgumentParser(prog="dpemb")
    account.register(parser.add_subparsers(dest="command"))
    try:
        args = parser.parse_args(["account", *argv])
        status = int(args.func(args) or 0)
    except UsageError as e:
        print(f"dpemb account: error: {e}", file=sys.stderr)
        status = 2
    except SystemExit as e:  # argparse errors
        status = int(e.code)
    out = capsys.readouterr()
    return status, out.out, out.err


BASE = ["--population", "10000000", "--clients-per-round", "4096", "--rounds", "1000", "--users-per-client", "1",
        "--clip-norm", "1.0"]  # K = 1: the paper's setting (the default K is dpemb train's 16)


def test_single_configuration_names_accountant_delta_unit_relation(capsys):
    status, out, err = run([*BASE, "--noise-multiplier", "1.0"], capsys)
    assert status == 0
    spec = PrivacySpec(population=10_000_000, clients_per_round=4096, rounds=1000, noise_multiplier=1.0)
    rdp, pld = epsilon_for(spec, "rdp"), epsilon_for(spec, "pld")
    assert f"epsilon = {rdp:#.3g} (RDP accountant, delta = 1e-08, user-level, add/remove-one-user)" in out
    assert f"epsilon = {pld:#.3g} (PLD accountant, delta = 1e-08, user-level, add/remove-one-user)" in out
    assert "delta = 1e-08 (default: 1/(10 N), N = population)" in out
    assert "warning" not in err


def test_json_output(capsys):
    status, out, _ = run([*BASE, "--noise-multiplier", "1.0", "--users-per-client", "4", "--json"], capsys)
    assert status == 0
    obj = json.loads(out)
    for key in ("epsilon_rdp", "epsilon_pld", "delta", "noise_multiplier", "relation", "unit", "sensitivity"):
        assert key in obj
    spec = PrivacySpec(population=10_000_000, clients_per_round=4096, users_per_client=4, rounds=1000)
    assert obj["epsilon_rdp"] == pytest.approx(epsilon_for(spec, "rdp"))
    assert obj["delta"] == pytest.approx(1e-8) and obj["sensitivity"] == 2.0


def test_target_epsilon_calibrates(capsys):
    status, out, _ = run([*BASE, "--target-epsilon", "3.9", "--accountant", "rdp", "--json"], capsys)
    obj = json.loads(out)
    assert status == 0 and obj["calibrated"] and obj["epsilon_pld"] is None
    assert 3.89 < obj["epsilon_rdp"] <= 3.9
    status, text, _ = run([*BASE, "--target-epsilon", "3.9", "--accountant", "rdp"], capsys)
    assert f"calibrated noise multiplier z = {obj['noise_multiplier']:.4f}" in text


def test_extrapolation_prints_factor_noise_clients_and_epsilon(capsys):
    argv = ["--population", "3000", "--clients-per-round", "32", "--users-per-client", "1", "--rounds", "100",
            "--noise-multiplier", "0.3", "--extrapolate-to", "3000000", "--json"]
    status, out, err = run(argv, capsys)
    ex = json.loads(out)["extrapolation"]
    assert status == 0
    assert (ex["population"], ex["factor"], ex["clients_per_round"]) == (3_000_000, 1000, 32_000)
    assert ex["noise_multiplier"] == pytest.approx(300.0) and ex["delta"] == pytest.approx(1 / 3e6)
    assert ex["epsilon_rdp"] < 0.1
    assert "small cohort" not in err  # 32 clients of 1 user at z = 0.3: 0.0094 x C, below the measured 0.015
    status, text, _ = run(argv[:-1], capsys)
    assert "scale factor k = 1000" in text and "32,000 clients per round" in text


def test_sweep_prints_a_table(capsys):
    argv = ["--population", "10000000", "--clients-per-round", "1024,4096", "--rounds", "1000,2000",
            "--noise-multiplier", "0.8", "--accountant", "rdp"]
    status, out, _ = run(argv, capsys)
    lines = out.strip().splitlines()
    assert status == 0
    assert lines[0].split()[:4] == ["N", "M", "K", "T"] and "eps" in lines[0]
    assert len(lines) == 1 + 4 + 1  # header, 4 rows, the footnote naming unit, relation, delta
    assert "relation add-remove" in lines[-1] and "user-level" in lines[-1]
    status, js, _ = run([*argv, "--json"], capsys)
    rows = json.loads(js)["rows"]
    assert len(rows) == 4 and all(r["epsilon_rdp"] > 0 for r in rows)


def test_budget_and_tree_and_fixed(capsys):
    status, out, _ = run([*BASE, "--noise-multiplier", "1.0", "--epsilon-budget", "1", "--json",
                          "--accountant", "rdp"], capsys)
    obj = json.loads(out)
    spec = PrivacySpec(population=10_000_000, clients_per_round=4096, rounds=1, noise_multiplier=1.0)
    t = obj["max_rounds"]
    assert epsilon_for(spec, rounds=t) <= 1 < epsilon_for(spec, rounds=t + 1)
    status, out, _ = run(["--population", "100000", "--clients-per-round", "100", "--users-per-client", "2",
                          "--rounds", "500", "--noise-multiplier", "2", "--mechanism", "tree", "--json"], capsys)
    obj = json.loads(out)
    assert status == 0 and obj["relation"] == "replace-special" and obj["sampling"] == "epoch"
    assert obj["epsilon_pld"] <= obj["epsilon_rdp"]
    status, out, _ = run([*BASE, "--noise-multiplier", "1", "--sampling", "fixed"], capsys)
    assert status == 0 and "replace-one-user" in out and "PLD: PLD not available" in out


def test_plot(tmp_path, capsys):
    path = tmp_path / "eps.png"
    status, out, _ = run([*BASE, "--noise-multiplier", "1.0,1.5", "--plot", str(path)], capsys)
    assert status == 0 and path.stat().st_size > 1000
    assert path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, message", [
    (["--noise-multiplier", "-1"], "noise multiplier"),
    (["--noise-multiplier", "0"], "noise multiplier"),
    (["--noise-multiplier", "nan"], "noise multiplier"),
    (["--noise-multiplier", "1", "--delta", "1"], "delta"),
    (["--noise-multiplier", "1", "--delta", "1.5"], "delta"),
    (["--noise-multiplier", "1", "--population", "100"], "exceeds 1"),
    (["--noise-multiplier", "1", "--rounds", "0"], "rounds"),
    ([], "exactly one"),
    (["--noise-multiplier", "1", "--target-epsilon", "2"], "exactly one"),
    (["--target-epsilon", "-2"], "target"),
    (["--noise-multiplier", "1", "--mechanism", "tree", "--sampling", "poisson"], "epoch"),
    (["--noise-multiplier", "1", "--sampling", "fixed", "--accountant", "pld"], "PLD"),
    (["--noise-multiplier", "abc"], "not a number"),
    (["--noise-multiplier", "1", "--rounds", "1.5"], "whole number"),
    (["--noise-multiplier", "1", "--sampling", "bogus"], "invalid choice"),
])
def test_bad_flags_exit_2(argv, message, capsys):
    flags = dict(zip(BASE[::2], BASE[1::2]))
    flags.update(zip(argv[::2], argv[1::2]))  # the case's flags override the base configuration
    status, _, err = run([x for pair in flags.items() for x in pair], capsys)
    assert status == 2
    assert message in err


def test_population_too_small_for_the_cohort(capsys):
    status, _, err = run([*BASE, "--noise-multiplier", "1", "--clients-per-round", "20000000"], capsys)
    assert status == 2 and "sampling rate" in err


def test_large_delta_refused_unless_forced_and_extrapolation_labels_the_paper_convention(capsys):
    argv = [*BASE, "--noise-multiplier", "1.0", "--delta", "1e-7"]  # 1e-7 = 1/N: the paper's delta
    status, _, err = run(argv, capsys)
    assert status == 2
    assert "delta must be well below 1/N" in err and "delta=1e-07 >= 1/10000000" in err
    assert "--allow-large-delta" in err
    status, out, err = run([*argv, "--allow-large-delta"], capsys)
    assert status == 0 and "delta = 1e-07, user-level" in out
    assert "large delta" in err  # forced, and said so
    argv = ["--population", "3000", "--clients-per-round", "32", "--rounds", "100", "--noise-multiplier", "0.3",
            "--extrapolate-to", "3000000"]
    status, out, _ = run(argv, capsys)
    assert status == 0 and "delta = 3.33e-07 (paper's convention: delta = 1/N'" in out
    status, out, _ = run([*argv, "--json"], capsys)
    assert json.loads(out)["extrapolation"]["delta_note"].startswith("paper's convention")


# ---------------------------------------------------------------------- BandMF (issue #36)
@pytest.mark.parametrize("bands", [1, 4, 16])
def test_bandmf_prints_the_foundations_epsilon(bands, capsys):
    status, out, _ = run([*BASE, "--noise-multiplier", "1.0", "--mechanism", "bandmf", "--bands", str(bands),
                          "--json"], capsys)
    assert status == 0
    obj = json.loads(out)
    spec = PrivacySpec(population=10_000_000, clients_per_round=4096, rounds=1000, noise_multiplier=1.0)
    for acc in ("rdp", "pld"):
        bandmf = replace(spec, mechanism="bandmf", sampling="cyclic-poisson", bands=bands)
        assert obj[f"epsilon_{acc}"] == epsilon_for(bandmf, acc)
        assert obj[f"statement_{acc}"].endswith(
            f"; BandMF, {bands} band{'s' if bands > 1 else ''}, cyclic Poisson participation)")
        if bands == 1:  # one band is DP-FedEmb, epsilon for epsilon
            assert obj[f"epsilon_{acc}"] == epsilon_for(spec, acc)
    assert (obj["mechanism"], obj["sampling"], obj["bands"], obj["participations"]) == (
        "bandmf", "cyclic-poisson", bands, -(-1000 // bands))
    assert obj["sampling_rate"] == bands * 4096 / 10_000_000


def test_bandmf_text_calibration_and_sweep(capsys):
    status, out, _ = run([*BASE, "--noise-multiplier", "1.0", "--mechanism", "bandmf", "--bands", "4"], capsys)
    assert status == 0
    assert "b = 4 bands, sampling rate within a group q = b*M*K/N = 0.001638" in out
    assert "at most ceil(T/b) = 250 participations per user" in out
    assert "mechanism: BandMF, 4 bands, cyclic Poisson participation" in out
    assert "(RDP accountant, delta = 1e-08, user-level, add/remove-one-user; BandMF, 4 bands" in out
    status, out, _ = run([*BASE, "--target-epsilon", "2", "--accountant", "rdp", "--mechanism", "bandmf",
                          "--bands", "8", "--json"], capsys)
    obj = json.loads(out)
    spec = PrivacySpec(population=10_000_000, clients_per_round=4096, rounds=1000)
    assert status == 0 and obj["calibrated"] and obj["epsilon_rdp"] <= 2
    bandmf = replace(spec, mechanism="bandmf", sampling="cyclic-poisson", bands=8)
    assert obj["noise_multiplier"] == calibrate_noise_multiplier(bandmf, 2.0, "rdp")
    status, out, _ = run([*BASE, "--noise-multiplier", "1.0", "--mechanism", "bandmf", "--bands", "1,4",
                          "--accountant", "rdp"], capsys)
    lines = out.splitlines()
    assert status == 0 and lines[0].split()[:5] == ["N", "M", "K", "T", "b"] and len(lines) == 5
    assert "mechanism bandmf, sampling cyclic-poisson" in lines[-2]
    assert lines[-1].endswith("rows at different epsilons: compare them with one --target-epsilon")


@pytest.mark.parametrize("argv, message", [
    (["--bands", "4"], "--bands applies to --mechanism bandmf or blt"),
    (["--bands", "4", "--mechanism", "tree"], "--bands applies to --mechanism bandmf or blt"),
    (["--bands", "1", "--mechanism", "gaussian"], "--bands applies to --mechanism bandmf or blt"),
    (["--mechanism", "bandmf", "--bands", "0"], "bands"),
    (["--mechanism", "bandmf", "--bands", "5000"], "fewer bands"),
    (["--mechanism", "bandmf", "--sampling", "poisson"], "cyclic-poisson"),
    (["--mechanism", "gaussian", "--sampling", "cyclic-poisson"], "gaussian noise needs poisson"),
    (["--mechanism", "bandmf", "--relation", "replace-one"], "add-remove or replace-special"),
])
def test_bandmf_refusals(argv, message, capsys):
    status, _, err = run([*BASE, "--noise-multiplier", "1", *argv], capsys)
    assert status == 2 and message in err


def test_bandmf_sweep_states_the_noise_on_the_model_and_the_lowest(capsys):
    """At equal epsilon, more bands need a larger z (amplification is spent over fewer,
    denser participations); the sweep states each b's accumulated noise and the lowest. At
    100,000 users, M 349, K 8, 1,200 rounds and epsilon 1 that is b = 1 (DP-FedEmb)."""
    from dpemb.privacy.strategy import banded_sqrt_coefficients, prefix_noise_rms

    argv = ["--population", "100000", "--clients-per-round", "349", "--users-per-client", "8", "--rounds",
            "1200", "--delta", "1e-6", "--target-epsilon", "1", "--accountant", "rdp", "--mechanism", "bandmf",
            "--bands", "1,4,16"]
    status, out, _ = run(argv, capsys)
    assert status == 0 and "model noise" in out and "lowest: b = 1" in out
    status, out, _ = run([*argv, "--json"], capsys)
    rows = json.loads(out)["rows"]
    for row in rows:
        rms = prefix_noise_rms(banded_sqrt_coefficients(row["bands"]), 1200)
        assert row["prefix_noise"] == pytest.approx(row["noise_multiplier"] * 2 / 349 * rms, rel=1e-12)
    assert [r["prefix_noise"] for r in rows] == sorted(r["prefix_noise"] for r in rows)


def test_blt_sweep_names_the_separation_and_beats_tree_but_not_amplified_bandmf(capsys):
    """BLT claims no amplification: its z at a target epsilon is that of one Gaussian, the same at
    every b, and its model noise falls with b (fewer participations) to the largest b with b M K
    <= N. At 100,000 users, M 349, K 8, 300 rounds, epsilon 1 (PLD, delta 1e-6): 0.243 x C at
    b = 35, above amplified BandMF's b = 1 (0.160) and far below the tree's."""
    base = ["--population", "100000", "--clients-per-round", "349", "--users-per-client", "8", "--rounds", "300",
            "--delta", "1e-6", "--target-epsilon", "1", "--accountant", "pld"]
    status, out, _ = run([*base, "--mechanism", "blt", "--bands", "4,35"], capsys)
    assert status == 0 and "lowest: b = 35" in out
    rows = json.loads(run([*base, "--mechanism", "blt", "--bands", "4,35", "--json"], capsys)[1])["rows"]
    assert rows[0]["noise_multiplier"] == pytest.approx(rows[1]["noise_multiplier"], rel=1e-9)
    assert rows[1]["prefix_noise"] == pytest.approx(0.2432, rel=0.01) and rows[0]["prefix_noise"] > 5 * 0.2432
    assert all("BLT, min-separation b = " in r["mechanism_description"] for r in rows)
    bandmf = json.loads(run([*base, "--mechanism", "bandmf", "--bands", "1", "--json"], capsys)[1])
    assert bandmf["prefix_noise"] == pytest.approx(0.1599, rel=0.01)
    status, out, _ = run([*base, "--mechanism", "blt", "--bands", "35"], capsys)
    assert "min-separation b = 35, sampling rate within a group" in out

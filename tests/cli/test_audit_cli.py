"""`dpemb audit` (white-box and --black-box), `dpemb transfer --audit-canaries`, and the
audit plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpemb.cli.main import main

TRAIN = ["--rounds", "1", "--clients-per-round", "20", "--users-per-client", "1", "--embedding-dim", "16",
         "--width", "0.25", "--local-batch-size", "4", "--eval-every", "1", "--no-progress", "--delta", "1e-5",
         "--eval-max-pairs", "200", "--noise-seed", "1", "--noise-multiplier", "2"]


def _png(path) -> bool:
    return path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_audit_white_box_prints_reported_beside_empirical_and_plots(tmp_path, tiny_data_dir, capsys):
    out = tmp_path / "run"
    assert main(["audit", "--data", tiny_data_dir, "--out", str(out), "--canaries", "40", *TRAIN]) == 0
    text = capsys.readouterr().out
    assert "this is an AUDIT run, a separate training run with the same settings" in text
    assert "not the production model and is marked not for release" in text
    assert "the accountant counts 68 users" in text  # 28 real training users + 40 canaries
    lines = text.splitlines()
    block = lines[next(i for i, l in enumerate(lines) if l.startswith("audit (white-box")):]
    joined = "\n".join(block)
    assert "reported epsilon" in joined and "(RDP accountant, delta = 1e-05, user-level, add/remove-one-user" in joined
    assert "empirical estimate" in joined and "an estimate, not a bound" in joined
    assert "lower bound (eps, delta)" in joined and "lower bound f-DP" in joined
    assert "accounted trade-off curve   not rejected" in joined and "verdict: no contradiction found" in joined
    report = json.loads((out / "report.json").read_text())
    a = report["privacy"]["audit"]
    assert a["canaries"] == 40 and report["algorithm"] == "dp-fedemb"  # the audit's default algorithm
    assert _png(out / "audit.png") and f"wrote {out / 'audit.png'}" in text


def test_audit_black_box(tmp_path, tiny_data_dir, capsys):
    out = tmp_path / "bb"
    plot = tmp_path / "plots" / "bb.png"
    assert main(["audit", "--black-box", "--canary-images", "3", "--data", tiny_data_dir, "--out", str(out),
                 "--canaries", "30", "--audit-plot", str(plot), *TRAIN]) == 0
    text = capsys.readouterr().out
    assert "black-box audit run: 30 canary users with crafted images join the 28 real users" in text
    assert "audit (black-box canary users (user level, released model only); 30 canaries" in text
    a = json.loads((out / "report.json").read_text())["privacy"]["audit"]
    assert a["kind"].startswith("black-box") and "3 images" in a["canary_data"] and _png(plot)
    assert json.loads((out / "model_card.json").read_text())["privacy"]["audit"] == a


@pytest.mark.parametrize("extra, match", [
    (["--algorithm", "centralized"], "federated algorithms"),
    (["--algorithm", "dp-ftrl-fedemb"], "federated algorithms"),
    (["--canary-images", "3"], "--canary-images applies to --black-box"),
    (["--canaries", "5"], "at least 20 canaries"),
    (["--sampling", "fixed"], "Poisson sampling"),
])
def test_audit_refuses_what_it_cannot_audit(tmp_path, tiny_data_dir, capsys, extra, match):
    with pytest.raises(SystemExit) as e:
        main(["audit", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *TRAIN, *extra])
    assert e.value.code == 2 and match in capsys.readouterr().err
    assert not (tmp_path / "r" / "report.json").exists()


@pytest.fixture(scope="module")
def feature_file(tmp_path_factory):
    from dpemb.transfer.features import FeatureSet, save_features

    rng = np.random.default_rng(0)
    n, d = 300, 256
    y = rng.integers(0, 4, n)
    x = np.abs(rng.normal(size=(n, d))) + 2.0 * np.eye(4, d)[y]
    path = tmp_path_factory.mktemp("feat") / "train.npz"
    save_features(path, FeatureSet(x.astype(np.float32), y.astype(np.int64), tuple("abcd"), users=np.arange(n)))
    return str(path)


def test_transfer_audit_canaries(tmp_path, feature_file, capsys):
    out = tmp_path / "res.json"
    assert main(["transfer", "--train", feature_file, "--holdout", "0.2", "--method", "dp-ls", "--epsilon", "1",
                 "--seed", "1", "--audit-canaries", "200", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    line = next(l for l in text.splitlines() if l.startswith("audit of dp-ls (200 canary examples): "))
    assert "empirical epsilon (one-shot estimate)" in line and "f-DP lower bound" in line
    assert "(PLD, delta = " in line and "example-level, add/remove-one-example" in line
    assert "its classifier is not the released one" in text
    run = json.loads(out.read_text())["runs"][0]
    assert run["audit"]["canaries"] == 200 and run["audit"]["method"] == "dp-ls"
    assert run["audit"]["epsilon_reported"] == pytest.approx(1.0, rel=1e-3)


@pytest.mark.parametrize("extra", [["--sweep-epsilon", "1,2"], ["--non-private"]])
def test_transfer_audit_refusals(feature_file, capsys, extra):
    with pytest.raises(SystemExit) as e:
        main(["transfer", "--train", feature_file, "--holdout", "0.2", "--method", "dp-ls", *extra,
              "--audit-canaries", "100"])
    assert e.value.code == 2 and "--audit-canaries audits a DP method" in capsys.readouterr().err


def test_plot_of_several_audits(tmp_path):
    from dpemb.training.audit_plot import AuditPoint, plot_audit

    rec = {"epsilon_reported": 2.42, "epsilon_estimate": 2.8, "epsilon_estimate_ci": [2.2, 3.4],
           "epsilon_lower_bound": 0.78, "epsilon_lower_bound_fdp": 1.2}
    points = [AuditPoint.from_record(rec, "correct"),
              AuditPoint("noise off", 2.42, 39.0, (36.0, 43.0), 5.1, 6.0),
              AuditPoint("no estimate", 1.1, None, None, 0.0, None)]
    assert points[0].estimate_ci == (2.2, 3.4) and points[0].lower_bound_fdp == 1.2
    path = plot_audit(points, tmp_path / "a.png", title="t")
    assert _png(path)
    with pytest.raises(ValueError):
        plot_audit([], tmp_path / "b.png")

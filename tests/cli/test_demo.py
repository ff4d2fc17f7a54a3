"""`make demo` end to end at a toy size: data, pretraining, centralized, DP-FedEmb, the report."""

import json

from dpemb.cli.demo import main as demo
from dpemb.training.run_config import PrivacyRequest


def test_demo_prints_recall_and_a_qualified_epsilon(tmp_path, capsys):
    rc = demo(["--out", str(tmp_path / "demo"), "--users", "260", "--pretrain-steps", "3", "--steps", "3",
               "--rounds", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "DP-FedEmb, user-level DP:" in out and "centralized on private users:" in out
    assert "public pretraining only:" in out and "x centralized" in out
    # every epsilon line names accountant, delta, unit and neighbouring relation
    eps_lines = [ln for ln in out.splitlines() if "epsilon = " in ln and "inf" not in ln]
    assert eps_lines
    for ln in eps_lines:
        assert "accountant" in ln and "delta = " in ln and "user-level" in ln and "add/remove" in ln
    # the noise is calibrated so that the run extrapolated to 1M users has epsilon 1
    one_million = [ln for ln in eps_lines if "1,000,000 users" in ln]
    assert one_million and "epsilon = 1.00 " in one_million[0]
    assert "10,000,000 users" in out
    run = tmp_path / "demo" / "dp-fedemb"
    assert (run / "report.json").exists()
    # the DP run is the library's defaults (only rounds and noise are set), from the public pretraining
    fed = json.loads((run / "config.json").read_text())
    assert fed["resolved"]["privacy"]["clients_per_round"] == PrivacyRequest().clients_per_round
    assert fed["resolved"]["privacy"]["users_per_client"] == PrivacyRequest().users_per_client
    assert json.loads((run / "model_card.json").read_text())["provenance"]["init"] is not None

"""`make demo` end to end at a toy size: data, centralized, DP-FedEmb, the printed report."""

from dpemb.cli.demo import main as demo


def test_demo_prints_recall_and_a_qualified_epsilon(tmp_path, capsys):
    rc = demo(["--out", str(tmp_path / "demo"), "--users", "60", "--steps", "5", "--rounds", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "DP-FedEmb, user-level DP:" in out and "centralized, non-private:" in out
    # every epsilon line names accountant, delta, unit and neighbouring relation
    eps_lines = [ln for ln in out.splitlines() if "epsilon = " in ln and "inf" not in ln]
    assert eps_lines
    for ln in eps_lines:
        assert "accountant" in ln and "delta = " in ln and "user-level" in ln and "add/remove" in ln
    assert "10,000,000 users" in out
    assert (tmp_path / "demo" / "dp-fedemb" / "report.json").exists()

"""`dpemb train`'s privacy flags: refused on centralized, the delta rule, the secure noise
sampler (default, refused with a seed), the small-cohort advice before training."""

from __future__ import annotations

import json

import pytest

import dpemb.privacy.noise as noise_mod
from dpemb.cli.main import main
from tests.conftest import spy_standard_normal

FED = ["--algorithm", "dp-fedemb", "--rounds", "1", "--clients-per-round", "3", "--users-per-client", "2",
       "--embedding-dim", "16", "--local-batch-size", "4", "--eval-every", "1", "--no-progress"]


class Stop(Exception):
    """Raised by the stubbed training loop once it has seen its arguments."""


@pytest.fixture()
def captured(monkeypatch):
    """Replace the federated loop: record what it would be given, then stop."""
    import dpemb.training.federated as fed

    seen: dict = {}

    def stub(train, eval_ds, model_cfg, fed_cfg, spec, run_cfg, **kw):
        seen.update(spec=spec, train=train, **kw)
        raise Stop

    monkeypatch.setattr(fed, "train_federated", stub)
    return seen


def run_stubbed(argv, captured):
    with pytest.raises(Stop):
        main(argv)
    return captured


def exit_code(argv) -> int:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return e.value.code


@pytest.mark.parametrize("flags", [
    ["--noise-multiplier", "1"], ["--target-epsilon", "8"], ["--clip-norm", "0.3"], ["--delta", "1e-5"],
    ["--epsilon-budget", "4"], ["--noise-seed", "1"], ["--sampling", "poisson"], ["--secure-noise"],
    ["--no-secure-noise"], ["--non-private"], ["--allow-large-delta"], ["--tree-restarts"],
    ["--adaptive-clip-quantile", "0.5"], ["--clip-lr", "0.1"], ["--clip-count-stddev", "1"],
    ["--mechanism", "bandmf"], ["--bands", "4"],
])
def test_privacy_flags_with_centralized_are_an_error(tiny_data_dir, tmp_path, capsys, flags):
    argv = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "c"), "--algorithm", "centralized", *flags]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert flags[0] in err and "not private" in err and "dp-fedemb" in err
    assert not (tmp_path / "c").exists()  # refused before anything was written


def test_centralized_without_privacy_flags_says_not_private_before_training(tiny_data_dir, tmp_path, monkeypatch,
                                                                             capsys):
    import dpemb.training.centralized as central

    def stub(*a, **k):
        raise Stop

    monkeypatch.setattr(central, "train_centralized", stub)
    with pytest.raises(Stop):
        main(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "c"), "--steps", "1"])
    assert "centralized training is not private" in capsys.readouterr().out


def test_default_delta_is_one_over_ten_n_users(tiny_data_dir, tmp_path, captured):
    seen = run_stubbed(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED, "--noise-multiplier", "1"],
                       captured)
    n = seen["train"].num_users
    assert seen["spec"].delta is None and seen["spec"].resolved_delta == pytest.approx(1 / (10 * n))
    assert seen["spec"].resolved_delta < 1 / n


def test_delta_of_one_over_n_or_more_is_refused_with_the_rule_unless_forced(tiny_data_dir, tmp_path, capsys, captured):
    base = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED, "--noise-multiplier", "1"]
    assert exit_code([*base, "--delta", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "delta must be well below 1/N, the chance that the mechanism fails for some user" in err
    assert "got delta=0.5 >= 1/" in err and "--allow-large-delta" in err
    seen = run_stubbed([*base, "--delta", "0.5", "--allow-large-delta"], captured)
    assert seen["spec"].resolved_delta == 0.5 and seen["spec"].allow_large_delta
    assert "large delta" in capsys.readouterr().err  # and the run is warned about


def test_secure_noise_default_seeded_and_opt_out(tiny_data_dir, tmp_path, capsys, captured):
    base = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED, "--noise-multiplier", "1"]
    assert run_stubbed(base, captured)["spec"].secure_noise  # the default
    assert not run_stubbed([*base, "--noise-seed", "3"], captured)["spec"].secure_noise  # seeded: plain
    assert not run_stubbed([*base, "--no-secure-noise"], captured)["spec"].secure_noise
    assert run_stubbed([*base, "--secure-noise"], captured)["spec"].secure_noise
    assert exit_code([*base, "--secure-noise", "--noise-seed", "3"]) == 2
    assert "--secure-noise cannot be combined with --noise-seed" in capsys.readouterr().err
    nonprivate = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED, "--non-private"]
    assert not run_stubbed(nonprivate, captured)["spec"].secure_noise
    assert exit_code([*nonprivate, "--secure-noise"]) == 2


def test_small_cohort_advice_is_printed_before_training(tiny_data_dir, tmp_path, capsys, captured):
    run_stubbed(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED, "--noise-multiplier", "1"],
                captured)  # the loop never ran: the advice came first
    err = capsys.readouterr().err
    assert "warning: small cohort: with 3 clients per round" in err
    run_stubbed(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED, "--clients-per-round", "3",
                 "--noise-multiplier", "1e-5"], captured)
    assert "small cohort" not in capsys.readouterr().err


def test_secure_noise_reaches_the_hardened_sampler_in_a_real_run(tiny_data_dir, tmp_path, monkeypatch, capsys):
    calls = spy_standard_normal(monkeypatch, noise_mod)
    out = tmp_path / "run"
    assert main(["train", "--data", tiny_data_dir, "--out", str(out), *FED, "--noise-multiplier", "1"]) == 0
    assert calls == [True]  # one round, one draw, through the secure path
    assert json.loads((out / "config.json").read_text())["resolved"]["privacy"]["secure_noise"] is True
    assert "noise sampler: secure" in capsys.readouterr().out


def test_zero_noise_error_names_the_cli_flag_that_works(tiny_data_dir, tmp_path, capsys, captured):
    base = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "z"), *FED]
    with pytest.raises(SystemExit) as e:
        main(base + ["--noise-multiplier", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "`dpemb train --non-private`" in " ".join(err.split())
    with pytest.raises(Stop):  # following the hint reaches training
        main(base + ["--non-private"])
    assert captured["spec"].nonprivate


def test_adaptive_clipping_flags_build_the_spec_and_refuse_what_cannot_be_private(tiny_data_dir, tmp_path, capsys,
                                                                                   captured):
    base = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "a"), *FED]
    seen = run_stubbed([*base, "--noise-multiplier", "1", "--adaptive-clip-quantile", "0.7",
                        "--clip-count-stddev", "5"], captured)
    a = seen["spec"].adaptive_clipping
    assert (a.target_quantile, a.learning_rate, a.count_stddev) == (0.7, 0.2, 5.0)
    assert seen["spec"].noise_multiplier == 1.0 and seen["spec"].value_noise_multiplier > 1.0
    assert "adaptive clipping (target quantile 0.7" in capsys.readouterr().out
    # --target-epsilon: calibrated on the total z, then split
    seen = run_stubbed([*base, "--target-epsilon", "8", "--adaptive-clip-quantile", "0.5", "--clip-lr", "0.1",
                        "--clip-count-stddev", "50"], captured)
    assert seen["spec"].adaptive_clipping.learning_rate == 0.1
    capsys.readouterr()
    # the default count noise (expected clients / 20) is far too small for z = 1 with M = 3
    assert exit_code([*base, "--noise-multiplier", "1", "--adaptive-clip-quantile", "0.5"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "not below sigma_b / Delta_b" in err and "--clip-count-stddev" in err
    assert exit_code([*base, "--noise-multiplier", "1", "--clip-lr", "0.1"]) == 2
    assert "--adaptive-clip-quantile" in capsys.readouterr().err
    ftrl = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "t"), *FED, "--algorithm", "dp-ftrl-fedemb",
            "--noise-multiplier", "1", "--adaptive-clip-quantile", "0.5", "--clip-count-stddev", "5"]
    assert exit_code(ftrl) == 2
    assert "tree aggregation" in capsys.readouterr().err
    assert exit_code([*base, "--noise-multiplier", "1", "--adaptive-clip-quantile", "1.5"]) == 2


def test_adaptive_clipping_run_reports_the_clip_path(tiny_data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--data", tiny_data_dir, "--out", str(out), *FED, "--noise-multiplier", "0.5",
                 "--adaptive-clip-quantile", "0.5", "--clip-count-stddev", "2", "--noise-seed", "1"]) == 0
    report = json.loads((out / "report.json").read_text())["privacy"]["adaptive_clipping"]
    printed = capsys.readouterr().out
    assert f"adaptive clipping: target quantile 0.5, clip norm 0.3 -> {report['final_clip_norm']:.4f}" in printed
    assert report["noise_multiplier_total"] == 0.5 and report["count_stddev"] == 2.0


def test_default_cohort_larger_than_the_population_is_a_usage_error_with_a_fit(tiny_data_dir, tmp_path, capsys):
    """The defaults ask for 8 x 16 = 128 users per round; a smaller training split gets a
    usage error naming the defaults and a --users-per-client that fits, before any work."""
    out = tmp_path / "run"
    assert exit_code(["train", "--data", tiny_data_dir, "--out", str(out), "--algorithm", "dp-fedemb",
                      "--non-private", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "need 128 users" in err and "--users-per-client 16" in err and "try --users-per-client 1" in err
    assert not (out / "private").exists()


# ---------------------------------------------------------------------- BandMF: DP-FTRL-FedEmb's second mechanism
@pytest.mark.parametrize("flags, message", [
    (["--algorithm", "dp-fedemb", "--mechanism", "bandmf", "--bands", "4"],
     "--mechanism bandmf with --algorithm dp-fedemb, whose noise is gaussian: use --algorithm dp-ftrl-fedemb"),
    (["--algorithm", "dp-fedavg", "--mechanism", "bandmf"], "use --algorithm dp-ftrl-fedemb for bandmf noise"),
    (["--algorithm", "dp-fedemb", "--bands", "4"],
     "--bands 4 applies to BandMF and BLT noise only: add --algorithm dp-ftrl-fedemb --mechanism bandmf (or blt), or drop --bands"),
    (["--algorithm", "dp-ftrl-fedemb", "--sampling", "cyclic-poisson"],
     "--sampling cyclic-poisson applies to BandMF and BLT noise only"),
    (["--algorithm", "dp-fedemb", "--mechanism", "tree"], "use --algorithm dp-ftrl-fedemb for tree noise"),
    (["--algorithm", "dp-ftrl-fedemb", "--mechanism", "gaussian"],
     "whose noise is tree, bandmf or blt: use --algorithm dp-fedemb for gaussian noise"),
])
def test_mechanism_flags_that_contradict_the_algorithm_are_refused(tmp_path, capsys, flags, message):
    # no dataset at --data: the refusal comes before the data is read or --out is written
    argv = ["train", "--data", str(tmp_path / "no-such-data"), "--out", str(tmp_path / "r"), "--noise-multiplier",
            "1", *flags]
    assert exit_code(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "r").exists()


def test_bandmf_reaches_the_run_as_one_spec(tiny_data_dir, tmp_path, captured):
    ftrl = [a if a != "dp-fedemb" else "dp-ftrl-fedemb" for a in FED]
    seen = run_stubbed(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *ftrl,
                        "--noise-multiplier", "1", "--mechanism", "bandmf", "--bands", "2"], captured)
    spec = seen["spec"]
    assert (spec.mechanism, spec.bands, spec.sampling) == ("bandmf", 2, "cyclic-poisson")
    assert spec.sampling_rate == 2 * 3 * 2 / spec.population  # b M K / N, the rate within a group


def test_the_algorithms_own_mechanism_may_be_named(tiny_data_dir, tmp_path, captured):
    seen = run_stubbed(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED,
                        "--noise-multiplier", "1", "--mechanism", "gaussian"], captured)
    assert seen["spec"].mechanism == "gaussian" and seen["spec"].bands == 1


def test_bandmf_through_the_python_api_and_a_config_file_is_checked(tmp_path):
    from dpemb import api
    from dpemb.training.run_config import ConfigError, PrivacyRequest, TrainConfig, load_config

    config = TrainConfig(algorithm="dp-fedemb", privacy=PrivacyRequest(noise_multiplier=1.0, mechanism="bandmf",
                                                                       bands=4))
    with pytest.raises(ConfigError, match="use --algorithm dp-ftrl-fedemb for bandmf noise"):
        api.train(config, tmp_path / "r")  # no data given: refused before it is looked for
    assert not (tmp_path / "r").exists()
    (tmp_path / "c.toml").write_text('algorithm = "dp-fedemb"\n[privacy]\nnoise_multiplier = 1.0\n'
                                     'sampling = "cyclic-poisson"\n')
    with pytest.raises(ConfigError, match="applies to BandMF and BLT noise only"):
        api.train(load_config(tmp_path / "c.toml"), tmp_path / "r")
    with pytest.raises(ConfigError, match="--mechanism must be one of gaussian, tree, bandmf, blt"):
        PrivacyRequest(mechanism="bogus")
    with pytest.raises(ConfigError, match="--bands must be a whole number >= 1"):
        PrivacyRequest(bands=0)

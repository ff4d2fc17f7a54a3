"""One run configuration (#35.1): the defaults live in the config types only, a run's
config.json is a valid --config that reproduces the run, flags override a config file,
and a bad file is refused naming the setting."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dpemb.cli.main import build_parser, main
from dpemb.cli.train import PERFORMANCE, SETTINGS
from dpemb.training.run_config import (
    ConfigError,
    PerformanceFlags,
    TrainConfig,
    get_setting,
    load_config,
)

TOY = ["--algorithm", "dp-fedemb", "--rounds", "2", "--clients-per-round", "3", "--users-per-client", "2",
       "--local-batch-size", "4", "--eval-every", "2", "--noise-multiplier", "0.5", "--noise-seed", "1",
       "--no-progress"]


def _train_actions():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices["train"]._actions


def test_every_flag_takes_its_default_from_the_config_types():
    config, perf = TrainConfig(), PerformanceFlags()
    seen = set()
    for action in _train_actions():
        for table, source in ((SETTINGS, config), (PERFORMANCE, perf)):
            if action.dest in table:
                path = table[action.dest]
                value = get_setting(source, path.lstrip("!"))
                assert action.config_default == ((not value) if path.startswith("!") else value), action.dest
                seen.add(path.lstrip("!"))
    # every setting of the config types is a flag, except the two FedAdam betas (set in a --config only)
    leaves = {f"{f.name}.{g.name}" if dataclasses.is_dataclass(getattr(config, f.name)) else f.name
              for f in dataclasses.fields(config)
              for g in (dataclasses.fields(getattr(config, f.name)) if dataclasses.is_dataclass(getattr(config, f.name))
                        else [f])}
    leaves -= {"optim.loss", "federated.loss", "federated.algorithm"}  # the copies of loss and algorithm
    assert leaves - seen == {"federated.server_adam_beta1", "federated.server_adam_beta2"}
    assert {f.name for f in dataclasses.fields(perf)} == {p.lstrip("!") for p in PERFORMANCE.values()}


def test_a_run_config_json_is_a_valid_config_that_reproduces_the_run(tmp_path, tiny_data_dir, capsys):
    """private/config.json (0600) holds the configuration as given and replays the run; the
    released config.json is the same but names the dataset by its directory's name, never
    a path on the curator's machine, and replays the run when --data is given."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert main(["train", "--data", tiny_data_dir, "--out", str(a), *TOY]) == 0
    saved = json.loads((a / "private" / "config.json").read_text())
    assert (a / "private" / "config.json").stat().st_mode & 0o777 == 0o600
    released = json.loads((a / "config.json").read_text())
    assert saved["data"]["path"] == tiny_data_dir and released["data"]["path"] == Path(tiny_data_dir).name
    assert {**released, "data": saved["data"]} == saved  # nothing else differs
    assert str(Path(tiny_data_dir).parent) not in (a / "config.json").read_text()
    assert saved["resolved"]["privacy"]["noise_multiplier"] == 0.5  # what the run derived, beside the request
    config = load_config(a / "private" / "config.json")
    assert config.to_dict() == {k: v for k, v in saved.items() if k != "resolved"}
    assert main(["train", "--config", str(a / "private" / "config.json"), "--out", str(b), "--no-progress"]) == 0
    assert json.loads((b / "private" / "config.json").read_text()) == saved
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit):  # the released one names the dataset only: the error says what to give
        main(["train", "--config", str(a / "config.json"), "--out", str(c), "--no-progress"])
    assert "give --data DIR, or use the run's private/config.json" in capsys.readouterr().err
    assert main(["train", "--config", str(a / "config.json"), "--data", tiny_data_dir, "--out", str(c),
                 "--no-progress"]) == 0
    assert (a / "model.safetensors").read_bytes() == (c / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit):  # dpemb account too: the population it cannot count
        main(["account", "--config", str(a / "config.json")])
    assert "give --population N, or use the run's private/config.json" in capsys.readouterr().err


def test_flags_override_a_config_file_and_toml_is_read(tmp_path, tiny_data_dir):
    toml = tmp_path / "run.toml"
    toml.write_text(f'algorithm = "dp-fedemb"\n[data]\npath = "{tiny_data_dir}"\n[federated]\nclient_lr = 0.2\n'
                    '[privacy]\nnoise_multiplier = 0.5\nclients_per_round = 3\nusers_per_client = 2\nrounds = 2\n'
                    'noise_seed = 1\n[loss]\nkind = "cosface"\n')
    config = load_config(toml)
    assert config.federated.client_lr == 0.2 and config.federated.loss.kind == "cosface"
    assert config.privacy.users_per_client == 2 and config.privacy.clip_norm == TrainConfig().privacy.clip_norm
    out = tmp_path / "r"
    assert main(["train", "--config", str(toml), "--out", str(out), "--client-lr", "0.05", "--loss", "arcface",
                 "--local-batch-size", "4", "--eval-every", "2", "--no-progress"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert saved["federated"]["client_lr"] == 0.05  # the flag, even at the default value, wins
    assert saved["loss"] == {"kind": "arcface", "scale": 30.0, "margin": 0.5}  # arcface's own defaults


def test_a_bad_config_is_refused_naming_the_setting(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"federated": {"client_learning_rate": 0.1}}))
    with pytest.raises(ConfigError, match="unknown setting federated.'client_learning_rate'.*client_lr"):
        load_config(bad)
    with pytest.raises(SystemExit) as e:
        main(["train", "--config", str(bad), "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and "--config" in capsys.readouterr().err and not (tmp_path / "r").exists()
    bad.write_text(json.dumps({"privacy": {"clip_norm": -1.0}, "algorithm": "dp-fedemb"}))
    with pytest.raises(ConfigError, match="clip"):
        from dpemb.training.runner import resolve_privacy

        resolve_privacy(dataclasses.replace(load_config(bad), privacy=dataclasses.replace(
            load_config(bad).privacy, noise_multiplier=1.0)), 1000)
    with pytest.raises(ConfigError, match="not valid TOML"):
        (tmp_path / "x.toml").write_text("algorithm = ")
        load_config(tmp_path / "x.toml")


def test_the_python_api_and_the_cli_share_the_defaults():
    """`dpemb account` and `dpemb train` default to the same cohort (the one PrivacyRequest)."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    account = {a.dest: a.default for a in sub.choices["account"]._actions}
    request = TrainConfig().privacy
    assert account["clients_per_round"] == [request.clients_per_round]
    assert account["users_per_client"] == [request.users_per_client]
    assert account["rounds"] == [request.rounds] and account["clip_norm"] == request.clip_norm


def test_target_epsilon_at_a_stated_population_is_met_by_the_extrapolation(tmp_path, tiny_data_dir, capsys):
    """#35.2: calibrated for the run extrapolated to N' users; the report and card state
    the epsilon at N' (equal to the target) and at the populations named, and the run's own."""
    out = tmp_path / "r"
    argv = ["train", "--data", tiny_data_dir, "--out", str(out), *TOY[:-5], "--target-epsilon", "2",
            "--target-population", "100000", "--report-populations", "50000", "--noise-seed", "1", "--no-progress"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "EXTRAPOLATED to 100,000 users" in text and "This run's own epsilon" in text
    report = json.loads((out / "report.json").read_text())
    card = json.loads((out / "model_card.json").read_text())
    for priv in (report["privacy"], card["privacy"]):
        ex = {e["population"]: e for e in priv["extrapolated"]}
        assert set(ex) == {50_000, 100_000, 1_000_000, 10_000_000}
        assert ex[100_000]["epsilon_rdp"] == pytest.approx(2.0, rel=1e-3)
    assert report["privacy"]["epsilon_rdp"] > 2.0  # the simulated run's own, much larger
    # dpemb account reads the same configuration and states the same numbers
    capsys.readouterr()
    assert main(["account", "--config", str(out / "private" / "config.json"), "--accountant", "rdp", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["epsilon_rdp"] == pytest.approx(report["privacy"]["epsilon_rdp"], rel=1e-6)
    by_n = {r["extrapolation"]["population"]: r["extrapolation"]["epsilon_rdp"] for r in rows}
    assert by_n[100_000] == pytest.approx(2.0, rel=1e-3) and by_n[50_000] == pytest.approx(ex[50_000]["epsilon_rdp"])
    with pytest.raises(SystemExit):
        main(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "s"), *TOY[:-5], "--target-population",
              "100000", "--no-progress"])
    assert "--target-population applies to --target-epsilon" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # below the users trained on: refused, naming the flag
        main(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "s"), *TOY[:-5], "--target-epsilon", "2",
              "--target-population", "10", "--no-progress"])
    assert "--target-population: 10 users is below the" in capsys.readouterr().err


def test_the_evaluation_subset_of_a_run_is_the_one_dpemb_eval_scores(tmp_path, tiny_data_dir, capsys):
    """#35.2: a run evaluated on a capped held-out subset reports what `dpemb eval
    --max-examples N` computes on its released model; the draw is the experiments' (validation first)."""
    import numpy as np

    from dpemb.data.dataset import UserDataset
    from dpemb.data.splits import held_out_subsets

    splits = UserDataset.load(tiny_data_dir).split()
    n = splits.eval.num_examples - 3
    validation, test = held_out_subsets(splits, n)
    rng = np.random.default_rng(0)  # the experiments' cap, written out
    if splits.validation.num_examples > n:
        rng.choice(splits.validation.num_examples, n, replace=False)
    keep = np.sort(rng.choice(splits.eval.num_examples, n, replace=False))
    assert test.num_examples == n and np.array_equal(test.images, np.asarray(splits.eval.images)[keep])
    out = tmp_path / "r"
    assert main(["train", "--data", tiny_data_dir, "--out", str(out), *TOY, "--eval-max-examples", str(n)]) == 0
    final = json.loads((out / "report.json").read_text())["final"]
    capsys.readouterr()
    assert main(["eval", str(out), "--data", tiny_data_dir, "--max-examples", str(n), "--bootstrap", "0",
                 "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    for k in ("recall_at_far_0.01", "roc_auc", "precision_at_1", "map_at_r"):
        assert scored[k] == pytest.approx(final[k], abs=1e-6), k


def test_every_train_split_trains_on_its_users(tiny_data_dir):
    """--train-split private, public and all pick the dataset's parts (all: both)."""
    from dpemb.data.dataset import UserDataset
    from dpemb.training.run_config import DataConfig
    from dpemb.training.runner import training_splits

    ds = UserDataset.load(tiny_data_dir)
    users = {}
    for split in ("private", "public", "all"):
        config = TrainConfig(data=DataConfig(path=tiny_data_dir, train_split=split))
        users[split] = training_splits(ds, config)[0].num_users
    assert users["private"] == ds.split().train.num_users and users["public"] == ds.split().public.num_users
    assert users["all"] == users["private"] + users["public"] > users["private"] > 0


def test_account_calibrates_a_config_as_train_does_with_flags_over_it(tmp_path, capsys):
    """One path: `dpemb account --config C --target-epsilon E` states the z `dpemb train
    --config C --target-epsilon E` trains with (C's accountant, and its target population:
    before, account calibrated at the real population with RDP, a different z); a population
    sweep calibrates each N for the extrapolated run."""
    from dpemb.training.run_config import load_config, with_settings
    from dpemb.training.runner import resolve_privacy

    cfg = tmp_path / "c.toml"
    cfg.write_text('algorithm = "dp-fedemb"\n[privacy]\ntarget_epsilon = 2.0\ntarget_population = 100000\n'
                   'accountant = "pld"\ndelta = 1e-6\nclients_per_round = 16\nusers_per_client = 8\nrounds = 40\n')
    trained = resolve_privacy(with_settings(load_config(cfg), {"privacy.target_epsilon": 1.0}), 4590)
    capsys.readouterr()
    assert main(["account", "--config", str(cfg), "--population", "4590", "--target-epsilon", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["noise_multiplier"] == pytest.approx(trained.noise_multiplier, rel=1e-12)
    assert (row["calibrated_with"], row["target_population"]) == ("pld", 100_000)
    assert 0.99 < row["extrapolation"]["epsilon_pld"] <= 1.0 and row["epsilon_rdp"] > 10
    assert main(["account", "--config", str(cfg), "--population", "3000,6000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0]["noise_multiplier"] != rows[1]["noise_multiplier"]
    for r in rows:
        assert r["extrapolation"]["population"] == 100_000 and 1.98 < r["extrapolation"]["epsilon_pld"] <= 2.0
    with pytest.raises(SystemExit):
        main(["account", "--population", "3000", "--noise-multiplier", "1", "--target-population", "100000"])
    assert "--target-population applies to --target-epsilon" in capsys.readouterr().err

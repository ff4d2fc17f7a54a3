"""`dpemb train --loss {softmax,cosface,arcface} --loss-scale S --loss-margin M`: short
real runs (centralized and dp-fedemb) finish with a finite loss, and the flags reach
config.json, the model card and the report; invalid values are usage errors."""

from __future__ import annotations

import json
import math

import pytest

from dpemb.cli.main import main

FED = ["--algorithm", "dp-fedemb", "--rounds", "2", "--clients-per-round", "3", "--users-per-client", "2",
       "--embedding-dim", "16", "--local-batch-size", "4", "--eval-every", "1", "--no-progress",
       "--non-private"]
CENTRAL = ["--steps", "6", "--batch-size", "16", "--embedding-dim", "16", "--eval-every", "3", "--no-progress"]


def read(out, name):
    return json.loads((out / name).read_text())


@pytest.mark.parametrize("loss,flags,expected", [
    ("arcface", [], {"kind": "arcface", "scale": 30.0, "margin": 0.5}),
    ("cosface", ["--loss-scale", "16", "--loss-margin", "0.2"], {"kind": "cosface", "scale": 16.0, "margin": 0.2}),
])
def test_a_two_round_dp_fedemb_run_with_a_margin_loss(tiny_data_dir, tmp_path, loss, flags, expected):
    out = tmp_path / loss
    assert main(["train", "--data", tiny_data_dir, "--out", str(out), *FED, "--loss", loss, *flags]) == 0
    assert read(out, "config.json")["loss"] == expected
    assert read(out, "model_card.json")["algorithm"] == "dp-fedemb"
    diag = [json.loads(line) for line in (out / "private" / "diagnostics.jsonl").read_text().splitlines()]
    losses = [r["train_loss"] for r in diag if not r.get("summary")]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert [r["round"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())] == [0, 1, 2]


@pytest.mark.parametrize("loss,flags,expected", [
    ("arcface", ["--loss-margin", "0.3"], {"kind": "arcface", "scale": 30.0, "margin": 0.3}),
    ("cosface", [], {"kind": "cosface", "scale": 30.0, "margin": 0.35}),
    ("softmax", [], {"kind": "softmax", "scale": None, "margin": None}),
])
def test_a_short_centralized_run_records_the_loss(tiny_data_dir, tmp_path, loss, flags, expected):
    out = tmp_path / loss
    assert main(["train", "--data", tiny_data_dir, "--out", str(out), *CENTRAL, "--loss", loss, *flags]) == 0
    assert read(out, "config.json")["loss"] == expected
    assert read(out, "model_card.json")["loss"] == expected
    assert read(out, "report.json")["loss"] == expected
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(recs[-1]["train_loss"])


class Stop(Exception):
    """Raised by the stubbed training loop once it has seen its arguments."""


def test_the_default_is_softmax(tiny_data_dir, tmp_path, monkeypatch):
    import dpemb.training.federated as fed

    seen = {}

    def stub(train, eval_ds, model_cfg, fed_cfg, spec, run_cfg, **kw):
        seen["fed"] = fed_cfg
        raise Stop

    monkeypatch.setattr(fed, "train_federated", stub)
    with pytest.raises(Stop):
        main(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "d"), *FED])
    assert seen["fed"].loss.kind == "softmax" and seen["fed"].loss.scale is None


@pytest.mark.parametrize("flags,message", [
    (["--loss-scale", "30"], "--loss-scale and --loss-margin apply to --loss cosface or arcface only"),
    (["--loss", "arcface", "--loss-margin", "2"], "arcface margin must lie in [0, 1.571] radians"),
    (["--loss", "cosface", "--loss-margin", "-0.1"], "cosface margin must lie in [0, 1]"),
    (["--loss", "cosface", "--loss-scale", "-1"], "loss scale must be positive"),
])
@pytest.mark.parametrize("algorithm", [[], FED])
def test_invalid_loss_flags_are_usage_errors(tiny_data_dir, tmp_path, capsys, flags, message, algorithm):
    out = tmp_path / "bad"
    with pytest.raises(SystemExit) as e:
        main(["train", "--data", tiny_data_dir, "--out", str(out), *algorithm, *flags])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not out.exists()


def test_unknown_loss_is_refused_by_the_parser(tiny_data_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--data", tiny_data_dir, "--out", str(tmp_path / "x"), "--loss", "sphereface"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_help_states_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "softmax (default)" in text and "default 30" in text
    assert "default 0.35" in text and "default 0.5" in text


def test_public_negatives_flag_passes_the_datasets_public_split(tiny_data_dir, tmp_path, monkeypatch):
    """--public-negatives: the config asks for the rows and the loop gets the PUBLIC split
    of --data (users 0 and 1 of the tiny dataset), never a private one."""
    import dpemb.training.federated as fed

    seen: dict = {}

    class Stop(Exception):
        pass

    def stub(train, eval_ds, model_cfg, fed_cfg, spec, run_cfg, **kw):
        seen.update(fed_cfg=fed_cfg, train=train, **kw)
        raise Stop

    monkeypatch.setattr(fed, "train_federated", stub)
    argv = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), "--algorithm", "dp-fedemb",
            "--rounds", "1", "--clients-per-round", "3", "--users-per-client", "2", "--embedding-dim", "16",
            "--no-progress", "--noise-multiplier", "1", "--loss", "arcface", "--public-negatives"]
    with pytest.raises(Stop):
        main(argv)
    assert seen["fed_cfg"].public_negatives is True
    public = seen["public"]
    assert public.num_examples > 0 and sorted(set(public.user_names)) == ["u0", "u1"]
    assert not set(public.user_names) & set(seen["train"].user_names)
    seen.clear()
    with pytest.raises(Stop):
        main(argv[:-1])
    assert seen["fed_cfg"].public_negatives is False and seen["public"] is None

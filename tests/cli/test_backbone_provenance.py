"""Issue #33: the epsilon of `dpemb transfer` against the backbone the features came from,
resume on other data, and `--init` with a checkpoint, end to end through the CLI.

A backbone trained without DP on the features' users is refused (the message names the
fix; with the override every epsilon says it does not cover the backbone); a re-import
of the same images is recognised by content; a DP backbone's epsilon composes with the
classifier's (checked against dp_accounting directly); a backbone trained on other users
(public ones, or another dataset) is accepted without caveat."""

from __future__ import annotations

import json
import re

import dp_accounting
import pytest

from dpemb.cli.main import main
from dpemb.data.dataset import UserDataset
from dpemb.training.checkpoint import load_checkpoint
from dpemb.transfer.features import load_features
from tests.conftest import make_tiny_dataset

CENTRAL = ["--algorithm", "centralized", "--steps", "2", "--batch-size", "16", "--embedding-dim", "8", "--width", "0.25",
           "--eval-every", "2", "--no-progress"]
FED = ["--algorithm", "dp-fedemb", "--rounds", "2", "--clients-per-round", "3", "--users-per-client", "2",
       "--embedding-dim", "8", "--width", "0.25", "--local-batch-size", "4", "--eval-every", "2", "--no-progress",
       "--noise-multiplier", "1", "--clip-norm", "0.5", "--noise-seed", "1"]
NOT_COVERED = "does NOT cover the backbone"


def usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny dataset, its re-import (same images, users renamed and reordered, the public
    users moved into the private split), an unrelated dataset, and backbones trained on
    them: centralized on the private split, on the public split, on the other dataset,
    and DP-FedEmb on the private split."""
    root = tmp_path_factory.mktemp("bb")
    ds = make_tiny_dataset(num_users=30)
    ds.save(root / "data")
    re_ds = UserDataset.load(root / "data")
    re_ds.user_names = [f"renamed-{n}" for n in re_ds.user_names]
    re_ds.public_users = []  # a re-import that puts the public users among the private ones
    re_ds.save(root / "reimport")
    make_tiny_dataset(num_users=30, seed=5).save(root / "other")
    for name, data, extra in (("private", "data", []), ("public", "data", ["--train-split", "public"]),
                              ("elsewhere", "other", [])):
        assert main(["train", "--data", str(root / data), "--out", str(root / name), *CENTRAL, *extra]) == 0
    assert main(["train", "--data", str(root / "data"), "--out", str(root / "dp"), *FED]) == 0
    return root


def features(runs, backbone: str, data: str = "data:train", name: str | None = None) -> str:
    out = runs / f"{name or backbone}.npz"
    assert main(["features", "--data", str(runs / data), "--backbone-model", str(runs / backbone),
                 "--out", str(out), "--quiet", "--device", "cpu"]) == 0
    return str(out)


def transfer(train: str, *extra: str) -> list[str]:
    return ["transfer", "--train", train, "--holdout", "0.25", "--method", "dp-sgd", "--steps", "3",
            "--seed", "0", "--device", "cpu", *extra]


def test_nonprivate_backbone_on_the_same_users_is_refused_then_qualified(runs, tmp_path, capsys):
    """The issue's scenario: centralized (no DP) on the private split, features of that
    split, transfer --unit user --epsilon 1."""
    f = features(runs, "private")
    out = capsys.readouterr().out
    assert "[private diagnostic, not for release] the backbone trained on 28 of these 28 users" in out
    meta = load_features(f).meta
    assert meta["backbone_provenance"]["train_split"] == "private"
    assert meta["backbone_provenance"]["private_training"] is False
    assert meta["backbone_shared_users"] == [28]  # the backbone; its random init is no model

    argv = transfer(f, "--unit", "user", "--epsilon", "1")
    err = usage_error(argv, capsys)
    assert "trained without differential privacy" in err and "--allow-nonprivate-init" in err
    assert "--train-split public" in err and "every feature row" in err
    for extra in (["--unit", "example"], ["--sweep-epsilon", "1,2"]):  # every unit, every form
        argv2 = transfer(f, "--unit", "user", *extra) if "--sweep-epsilon" in extra else \
            transfer(f, "--epsilon", "1", *extra)
        assert "--allow-nonprivate-init" in usage_error(argv2, capsys)

    # the message's own fix: the override; then every epsilon printed or written says so
    js = tmp_path / "r.json"
    assert main([*argv, "--allow-nonprivate-init", "--json", str(js), "--audit-canaries", "20"]) == 0
    text = capsys.readouterr().out
    lines = [l for l in text.splitlines() if re.search(r"epsilon (= )?\d", l)]
    assert len(lines) == 2 and all(NOT_COVERED in l for l in lines), lines  # the run's and its audit's
    run = json.loads(js.read_text())["runs"][0]
    assert NOT_COVERED in run["epsilon_sentence"] and NOT_COVERED in run["audit"]["statement"]
    assert run["backbone"]["chain"][0]["trained_on_these_users"] == "yes"
    assert NOT_COVERED in run["backbone"]["caveats"][0]
    assert "shared_users" not in js.read_text()  # the counts are private
    private = json.loads((tmp_path / "r.private.json").read_text())
    assert private["runs"][0]["backbone_shared_users"] == [28]

    # a sweep and several methods: the caption and the total note carry it too
    assert main(transfer(f, "--unit", "user", "--sweep-epsilon", "1,2", "--allow-nonprivate-init")) == 0
    text = capsys.readouterr().out
    caption = [l for l in text.splitlines() if l.startswith("(columns:")]
    note = [l for l in text.splitlines() if l.startswith("note: these")]
    assert caption and NOT_COVERED in caption[0] and note and NOT_COVERED in note[0]


def test_a_bare_artifact_falls_back_to_the_recorded_split(runs, capsys):
    """No readable private checkpoint (an exported artifact): the split decides."""
    assert main(["export", str(runs / "private"), "--out", str(runs / "private_art")]) == 0
    f = features(runs, "private_art")
    assert "private diagnostic" not in capsys.readouterr().out
    assert "backbone_shared_users" not in load_features(f).meta
    assert "--allow-nonprivate-init" in usage_error(transfer(f, "--epsilon", "1"), capsys)


def test_a_reimport_is_recognised_by_content(runs, tmp_path, capsys):
    """A public-split backbone is accepted on the private users of its dataset, but not
    on a re-import that moved its public users into the private split."""
    f = features(runs, "public")
    js = tmp_path / "pub.json"
    assert main(transfer(f, "--unit", "user", "--epsilon", "1", "--json", str(js))) == 0
    text = capsys.readouterr().out
    assert NOT_COVERED not in text and "total with the backbone" not in text
    chain = json.loads(js.read_text())["runs"][0]["backbone"]["chain"]
    assert chain[0]["trained_on_these_users"] == "no" and chain[0]["counted_as_training_on_them"] is False

    f2 = features(runs, "public", data="reimport:train", name="public_reimport")
    assert "the backbone trained on 2 of these 30 users" in capsys.readouterr().out
    err = usage_error(transfer(f2, "--unit", "user", "--epsilon", "1"), capsys)
    assert "recognised by their images" in err and "--allow-nonprivate-init" in err


def test_a_backbone_trained_on_other_users_needs_no_caveat(runs, capsys):
    """Private split of ANOTHER dataset, known by content to share no user: accepted."""
    f = features(runs, "elsewhere")
    assert "trained on 0 of these 28 users" in capsys.readouterr().out
    assert main(transfer(f, "--unit", "user", "--epsilon", "1")) == 0
    assert NOT_COVERED not in capsys.readouterr().out


def _independent_total(card_privacy: dict, run: dict) -> float:
    """dp_accounting directly: the backbone's Poisson-sampled Gaussian rounds and the
    transfer's Gaussian releases, composed under add/remove at the transfer's delta."""
    spec = card_privacy["spec"]
    q = spec["clients_per_round"] * spec["users_per_client"] / spec["population"]
    rounds = card_privacy["rounds_composed"]
    backbone = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(spec["noise_multiplier"])), rounds)
    classifier = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(run["noise_multiplier"]),
                                                   run["num_releases"])
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.ComposedDpEvent([backbone, classifier]))
    return acc.get_epsilon(run["delta"])


def test_a_dp_backbone_composes(runs, tmp_path, capsys):
    f = features(runs, "dp")
    card = json.loads((runs / "dp" / "model_card.json").read_text())
    assert card["privacy"]["spec"]["sampling"] == "poisson"
    js = tmp_path / "dp.json"
    assert main(transfer(f, "--unit", "user", "--epsilon", "1", "--json", str(js))) == 0
    text = capsys.readouterr().out
    run = json.loads(js.read_text())["runs"][0]
    total = run["backbone"]["total"]
    assert total["composition"] == "dp_accounting" and total["delta"] == run["delta"]
    assert total["epsilon"] == pytest.approx(_independent_total(card["privacy"], run), rel=0.02)
    assert total["epsilon"] > run["epsilon"]
    # the backbone's epsilon and the total are stated beside the classifier's
    assert card["privacy"]["statement_rdp"] in text and "total with the backbone: epsilon = " in text
    assert "composes on top" in run["epsilon_sentence"]

    # --unit example: the two epsilons are at different units, no single total
    assert main(transfer(f, "--epsilon", "1", "--json", str(js))) == 0
    text = capsys.readouterr().out
    assert "no total stated" in text and "--unit user" in text
    assert "epsilon" not in json.loads(js.read_text())["runs"][0]["backbone"]["total"]


def test_resume_on_other_data_is_refused(runs, tmp_path, capsys):
    """Same number of users, other images: refused, naming the fix; the original resumes."""
    other = make_tiny_dataset(num_users=30, seed=9)
    other.save(tmp_path / "same_size")
    out = tmp_path / "run"
    base = ["train", "--out", str(out), *CENTRAL]
    assert main([*base, "--data", str(runs / "data")]) == 0
    capsys.readouterr()
    assert main([*base, "--data", str(tmp_path / "same_size"), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "was trained on other data" in err and "original --data" in err and err.count("\n") == 1
    card = json.loads((out / "model_card.json").read_text())
    assert card["provenance"]["dataset"] == "data"
    # the fingerprints stay in the private checkpoint: no released file holds them
    state = load_checkpoint(out)
    digests = [state["data_fingerprint"], *(str(int(x)) for x in state["user_fingerprints"][0][:5]),
               *(format(int(x), "x") for x in state["user_fingerprints"][0][:5])]
    for f in out.iterdir():
        if f.is_file():
            text = f.read_bytes().decode("latin-1")
            assert not any(d in text for d in digests) and "fingerprint" not in text, f
    assert main([*base, "--data", str(runs / "data"), "--resume"]) == 0  # the advice: the original data


def test_init_from_a_checkpoint_is_refused(runs, tmp_path, capsys):
    ckpt = runs / "public" / "private" / "checkpoint.pt"
    base = ["train", "--data", str(runs / "data"), *CENTRAL]
    err = usage_error([*base, "--out", str(tmp_path / "x"), "--init", str(ckpt)], capsys)
    assert "is a training checkpoint" in err and f"give the run directory {runs / 'public'}" in err
    assert "dpemb export" in err
    assert main([*base, "--out", str(tmp_path / "x"), "--init", str(runs / "public")]) == 0  # the advice
    assert main(["export", str(runs / "public"), "--out", str(tmp_path / "art")]) == 0  # the other advice
    assert main([*base, "--out", str(tmp_path / "y"), "--init", str(tmp_path / "art")]) == 0


def test_the_released_classifier_states_its_backbone_and_predict_checks_it(runs, tmp_path, capsys):
    """`dpemb transfer --out`: the card carries the statements as printed (the backbone's
    caveat, the total with a DP backbone) and the backbone, not its private counts;
    `dpemb predict` refuses features of another backbone, naming the command that fits."""
    f = features(runs, "dp")
    capsys.readouterr()
    out = tmp_path / "clf"
    assert main(transfer(f, "--unit", "user", "--epsilon", "1", "--out", str(out))) == 0
    text = capsys.readouterr().out.splitlines()
    card = json.loads((out / "classifier_card.json").read_text())
    assert card["privacy"]["statement"] == next(l for l in text if l.startswith("epsilon = "))
    assert "composes on top" in card["privacy"]["statement"]
    assert card["privacy"]["total_with_backbone"] == next(l for l in text if l.startswith("total with the backbone"))
    bb = card["features"]["backbone"]
    assert bb["backbone"] == "model" and bb["model"] == str(runs / "dp") and len(bb["backbone_weights_sha256"]) == 64
    assert bb["backbone_provenance"]["private_training"] is True
    assert card["features"]["data"] == f"{runs / 'data'}:train"
    assert card["features"]["backbone_account"]["chain"][0]["trained_on_these_users"] == "yes"
    raw = (out / "classifier_card.json").read_text()
    assert "shared_users" not in raw and "num_users" not in raw  # private counts stay in the feature file

    other = features(runs, "elsewhere", name="elsewhere_feats")
    capsys.readouterr()
    assert main(["predict", str(out), other]) == 1
    err = capsys.readouterr().err
    assert "they differ in weights" in err and f"--backbone-model {runs / 'dp'} --out" in err
    assert main(["predict", str(out), f]) == 0  # the features of its own backbone
    assert "top-1" in capsys.readouterr().out

    # a backbone trained without DP on these users, accepted by the override: the card says what it leaves out
    f = features(runs, "private")
    assert main(transfer(f, "--epsilon", "1", "--allow-nonprivate-init", "--out", str(tmp_path / "np"))) == 0
    printed = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("epsilon = "))
    statement = json.loads((tmp_path / "np" / "classifier_card.json").read_text())["privacy"]["statement"]
    assert statement == printed and NOT_COVERED in statement

"""Init provenance: a DP run started from a model that saw private users without DP is
refused (or, when allowed, every epsilon says it does not cover the initialisation);
a DP init's own epsilon is stated as composing on top."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dpemb.training.config import ModelConfig
from dpemb.training.provenance import InitProvenanceError, Provenance
from tests.training.test_artifact import MODEL, central_run, fed_run

NOT_COVERED = "does NOT cover the initialisation"


def statements(privacy):
    out = [v for k, v in privacy.items() if k.startswith("statement_") and v.startswith("epsilon")]
    out += [ex["statement"] for ex in privacy.get("extrapolated", [])]
    assert out
    return out


def from_init(path):
    return replace(MODEL, init=str(path))


def test_checkpoint_and_card_record_the_split_and_privacy(tmp_path):
    d, rep = central_run(tmp_path, provenance=Provenance("data/x", "private"))
    card = json.loads((d / "model_card.json").read_text())
    from dpemb.training.checkpoint import load_checkpoint

    for prov in (card["provenance"], load_checkpoint(d)["provenance"]):
        assert prov["dataset"] == "x" and prov["train_split"] == "private"  # named, never a path
        assert prov["private_training"] is False and prov["privacy"] == "not private"
        assert prov["init"] == "random"
    assert rep["provenance"]["train_split"] == "private"
    d2, _ = fed_run(tmp_path, algorithm="dp-fedemb", provenance=Provenance("data/x", "private"))
    prov = json.loads((d2 / "model_card.json").read_text())["provenance"]
    assert prov["private_training"] is True and prov["privacy"]["statement_rdp"].startswith("epsilon = ")


@pytest.mark.parametrize("split", ["private", "all", "unknown"])
def test_dp_run_from_a_nonprivate_init_on_private_users_is_refused(tmp_path, split):
    init, _ = central_run(tmp_path, provenance=Provenance("data/x", split))
    with pytest.raises(InitProvenanceError) as e:
        fed_run(tmp_path, algorithm="dp-fedemb", model=from_init(init))
    msg = str(e.value)
    assert "without differential privacy" in msg and "--train-split public" in msg
    assert "--allow-nonprivate-init" in msg and "does not cover" in msg


def test_public_pretraining_is_accepted_without_caveat(tmp_path):
    init, _ = central_run(tmp_path, provenance=Provenance("data/x", "public"))
    d, rep = fed_run(tmp_path, algorithm="dp-fedemb", model=from_init(init),
                     provenance=Provenance("data/x", "private"))
    assert "initialisation" not in rep["privacy"]
    assert not any(NOT_COVERED in s for s in statements(rep["privacy"]))
    prov = json.loads((d / "model_card.json").read_text())["provenance"]
    assert prov["init"]["train_split"] == "public" and prov["init"]["private_training"] is False


def test_allowed_nonprivate_init_qualifies_every_statement(tmp_path):
    init, _ = central_run(tmp_path, provenance=Provenance("data/x", "private"))
    d, rep = fed_run(tmp_path, algorithm="dp-fedemb", model=from_init(init),
                     provenance=Provenance("data/x", "private", allow_nonprivate_init=True))
    card = json.loads((d / "model_card.json").read_text())
    for priv in (rep["privacy"], json.loads((d / "report.json").read_text())["privacy"], card["privacy"]):
        assert all(NOT_COVERED in s and "of x" in s for s in statements(priv))
    assert all(NOT_COVERED in s for k, s in card["provenance"]["privacy"].items() if k.startswith("statement_"))


def test_an_ancestor_seen_through_a_public_run_is_still_refused(tmp_path):
    grand, _ = central_run(tmp_path, "grand", provenance=Provenance("data/x", "private"))
    parent, _ = central_run(tmp_path, "parent", model=from_init(grand), provenance=Provenance("data/x", "public"))
    with pytest.raises(InitProvenanceError, match="ancestor"):
        fed_run(tmp_path, algorithm="dp-fedemb", model=from_init(parent))


def test_nonprivate_run_may_start_anywhere(tmp_path):
    from dpemb.algorithms.config import FederatedConfig
    from dpemb.privacy import PrivacySpec
    from dpemb.training.config import RunConfig
    import dpemb.training.federated as fed
    from tests.training.test_artifact import splits

    init, _ = central_run(tmp_path, provenance=Provenance("data/x", "private"))
    train, ev = splits()
    spec = PrivacySpec(population=train.num_users, clients_per_round=3, users_per_client=2,
                       noise_multiplier=0.0, nonprivate=True, clip_norm=0.5, rounds=1)
    rep = fed.train_federated(train, ev, from_init(init), FederatedConfig(local_batch_size=4), spec,
                              RunConfig(out=str(tmp_path / "np"), eval_every=1, progress=False))
    assert "not private" in rep["privacy"]["statement"]


def test_dp_init_epsilon_is_stated_as_composing_on_top(tmp_path):
    init, init_rep = fed_run(tmp_path, "init", algorithm="dp-fedemb", provenance=Provenance("data/x", "private"))
    init_stmt = init_rep["privacy"]["statement_rdp"]
    d, rep = fed_run(tmp_path, "second", algorithm="dp-fedemb", model=from_init(init),
                     provenance=Provenance("data/x", "private"))
    card = json.loads((d / "model_card.json").read_text())
    for priv in (rep["privacy"], card["privacy"]):
        for s in statements(priv):
            assert "composes on top" in s and init_stmt in s
    assert card["provenance"]["init"]["private_training"] is True
    # ... and the total of both trainings is stated (#34.6): one ledger, equal to the two
    # mechanisms composed by dp_accounting's own RDP accountant, tighter than their sum
    import dp_accounting

    from dpemb.privacy import PrivacySpec
    from dpemb.privacy.events import training_event

    first, second = (PrivacySpec(**r["privacy"]["spec"]) for r in (init_rep, rep))
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(training_event(first, init_rep["rounds"])).compose(training_event(second, rep["rounds"]))
    expected = acc.get_epsilon(second.resolved_delta)
    for priv in (rep["privacy"], card["privacy"]):
        total = priv["total_with_init"]
        assert total["composition"] == "dp_accounting" and total["accountant"] == "rdp"
        assert total["epsilon"] == pytest.approx(expected, rel=1e-9)
        assert rep["privacy"]["epsilon_rdp"] < total["epsilon"] < rep["privacy"]["epsilon_rdp"] \
            + init_rep["privacy"]["epsilon_rdp"]
        assert total["statement"].startswith("total with the initialisation: epsilon = ")
        assert "--init init's training and this run together" in total["statement"]


def test_total_with_init_falls_back_to_basic_composition_when_the_mechanism_is_not_recorded():
    from dpemb.training.artifact import init_total

    init = {"model": "pre", "train_split": "private", "private_training": True,
            "privacy": {"epsilon_rdp": 1.5, "delta": 1e-5, "unit": "user", "relation": "add-remove"}}
    from dpemb.privacy import PrivacySpec
    from dpemb.training.config import to_dict

    spec = PrivacySpec(population=100, clients_per_round=5, users_per_client=2, noise_multiplier=1.0, rounds=3,
                       delta=1e-6)
    from dpemb.privacy.events import event_to_dict, training_event

    run = {"spec": to_dict(spec), "rounds_composed": 3, "epsilon_rdp": 0.25,
           "dp_event": event_to_dict(training_event(spec))}  # as a run's privacy section records it
    total = init_total(run, init, None)  # no card privacy: the init's mechanism cannot be rebuilt
    assert total["composition"] == "basic" and total["epsilon"] == pytest.approx(1.75)
    assert total["delta"] == pytest.approx(1e-5 + 1e-6)
    # an init trained on public users only, or without DP: nothing to compose
    assert init_total(run, {**init, "train_split": "public"}, None) is None
    assert init_total(run, {**init, "private_training": False}, None) is None
    assert init_total(run, "random", None) is None


def test_a_pre_release_checkpoint_is_refused_as_an_init_and_by_export(tmp_path):
    """A checkpoint written by a pre-release dpemb (no provenance, no card, no data
    records), in its own layout (checkpoint.pt at the top) or in private/: refused as an
    init and by export, with the one error that says to train again."""
    import os

    import torch

    from dpemb.training.artifact import export_run
    from dpemb.training.errors import PreReleaseError

    init, _ = central_run(tmp_path, provenance=Provenance("data/x", "public"))
    state = torch.load(init / "private" / "checkpoint.pt", weights_only=False)
    for k in ("provenance", "model_card", "init_provenance", "init_caveats", "data_fingerprint",
              "user_fingerprints"):
        state.pop(k, None)
    torch.save(state, init / "private" / "checkpoint.pt")
    with pytest.raises(PreReleaseError, match="written by a pre-release dpemb.*train the model again"):
        export_run(init, tmp_path / "exported")
    os.replace(init / "private" / "checkpoint.pt", init / "checkpoint.pt")  # the pre-release layout
    for f in ("model.safetensors", "model_card.json"):
        os.remove(init / f)
    with pytest.raises(PreReleaseError, match="written by a pre-release dpemb.*train the model again"):
        fed_run(tmp_path, algorithm="dp-fedemb", model=ModelConfig("lenet", 16, init=str(init)))
    with pytest.raises(PreReleaseError, match="written by a pre-release dpemb"):
        export_run(init, tmp_path / "exported")
    assert not (tmp_path / "exported").exists()

"""``dpemb.transfer.backbone`` on recorded metadata: the rule, basic composition where the
backbone's mechanism cannot be rebuilt, and no total across units or relations.
(The CLI end to end, with real runs and the dp_accounting total: tests/cli/test_backbone_provenance.py.)"""

from __future__ import annotations

import pytest

from dpemb.training.provenance import InitProvenanceError
from dpemb.transfer.backbone import backbone_account
from dpemb.transfer.budget import PrivacyRequest, plan_noise


def _dp(model, eps_pld, eps_rdp, delta, init="random", relation="add-remove", split="private"):
    return {"model": model, "train_split": split, "private_training": True, "init": init,
            "privacy": {"epsilon_pld": eps_pld, "epsilon_rdp": eps_rdp, "delta": delta, "unit": "user",
                        "relation": relation, "statement_pld": f"epsilon = {eps_pld} (PLD accountant, ...)"}}


def _meta(prov, **kw):
    return {"backbone": "model", "model": prov.get("model"), "backbone_provenance": prov, **kw}


PLAN = plan_noise(PrivacyRequest(epsilon=1.0, delta=1e-4, unit="user"), 3)


def test_a_dp_chain_without_a_spec_composes_by_basic_composition():
    prov = _dp("ft", 1.5, 2.0, 1e-3, init=_dp("pre", 0.8, 1.0, 2e-3))
    acc = backbone_account(_meta(prov), private_run=True, allow_nonprivate_init=False)
    assert len(acc.caveats) == 2 and all("composes on top" in c for c in acc.caveats)
    t = acc.total(PLAN)
    assert t["composition"] == "basic"
    assert t["epsilon"] == pytest.approx(PLAN.epsilon + 1.5 + 0.8)  # the run's accountant: PLD
    assert t["delta"] == pytest.approx(1e-4 + 1e-3 + 2e-3)
    assert "basic composition" in t["statement"] and "epsilon = " in t["statement"]


def test_no_total_across_relations_or_units_and_none_for_models_on_other_users():
    acc = backbone_account(_meta(_dp("ft", 1.5, 2.0, 1e-3, relation="replace-one")), private_run=True,
                           allow_nonprivate_init=False)
    assert "no total stated" in acc.total(PLAN)["statement"]
    example = plan_noise(PrivacyRequest(epsilon=1.0, delta=1e-4, unit="example"), 3)
    acc = backbone_account(_meta(_dp("ft", 1.5, 2.0, 1e-3)), private_run=True, allow_nonprivate_init=False)
    assert "different units" in acc.total(example)["statement"] and "epsilon" not in acc.total(example)
    # known by content to share no user: neither caveat nor total, whatever the split says
    acc = backbone_account(_meta(_dp("ft", 1.5, 2.0, 1e-3), backbone_shared_users=[0]), private_run=True,
                           allow_nonprivate_init=False)
    assert acc.caveats == () and acc.total(PLAN) is None
    assert acc.to_dict()["chain"][0]["trained_on_these_users"] == "no"


def test_unrecorded_backbone_provenance_is_refused_and_a_nonprivate_run_is_not_checked():
    from dpemb.training.errors import PreReleaseError

    pre_release = {"backbone": "model", "model": "old"}  # a pre-release feature file: no provenance at all
    for private_run in (True, False):
        with pytest.raises(PreReleaseError, match="pre-release dpemb.*extract the features again"):
            backbone_account(pre_release, private_run=private_run, allow_nonprivate_init=True)
    # a backbone whose run recorded no Provenance (a library call): split unknown
    meta = _meta({"model": "old", "train_split": "unknown", "private_training": False})
    with pytest.raises(InitProvenanceError, match="does not record which users.*--allow-nonprivate-init"):
        backbone_account(meta, private_run=True, allow_nonprivate_init=False)
    acc = backbone_account(meta, private_run=True, allow_nonprivate_init=True)
    assert acc.qualify("epsilon = 1").startswith("epsilon = 1 [does NOT cover the backbone")
    assert backbone_account(meta, private_run=False, allow_nonprivate_init=False).caveats == ()
    assert backbone_account({"backbone": "imagenet-mobilenetv2"}, private_run=True,
                            allow_nonprivate_init=False) is None

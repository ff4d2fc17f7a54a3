"""The privacy plan carries its dp_accounting event, and the report and model card record
it (issue #35, item 7): the recorded event, rebuilt, gives the epsilon the card states."""

from __future__ import annotations

import json
import math

import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant

from dpemb.privacy import PrivacyLedger, PrivacySpec, compute_epsilon
from dpemb.privacy.events import event_from_dict, event_to_dict, supported_accountants
from dpemb.privacy.plan import PrivacyPlan
from dpemb.privacy.relations import to_dp_accounting

SPECS = {
    "poisson": {},
    "poisson-K3-replace-special": {"users_per_client": 3, "relation": "replace-special"},
    "fixed": {"sampling": "fixed"},
    "epoch": {"sampling": "epoch"},
    "tree": {"mechanism": "tree"},
    "tree-restarts": {"mechanism": "tree", "tree_restarts": True},
    "bandmf": {"mechanism": "bandmf", "bands": 4},
    "blt": {"mechanism": "blt", "bands": 4},
    "nonprivate": {"nonprivate": True, "noise_multiplier": 0.0},
}


def spec_of(name: str) -> PrivacySpec:
    kw = {"noise_multiplier": 1.1, **SPECS[name]}
    return PrivacySpec(population=1000, clients_per_round=10, rounds=250, **kw)


@pytest.mark.parametrize("name", SPECS)
def test_an_event_survives_json_exactly(name):
    spec = spec_of(name)
    for rounds in (0, 1, 137, 250):
        for accountant in ("rdp", "pld"):
            ledger = PrivacyLedger(spec)
            ledger.step(rounds)
            event = ledger.dp_event(accountant)
            data = json.loads(json.dumps(event_to_dict(event)))
            assert event_from_dict(data) == event
            assert data["class_name"] == type(event).__name__


@pytest.mark.parametrize("name", [n for n in SPECS if n != "nonprivate"])
def test_the_ledgers_epsilon_is_that_of_its_event(name):
    spec = spec_of(name)
    plan = PrivacyPlan.build(spec, seed=0)
    for rounds in (1, 36, 213):
        plan.ledger.step(rounds - plan.ledger.rounds)
        for accountant in supported_accountants(spec):
            fresh = compute_epsilon(plan.ledger.dp_event(accountant), spec.resolved_delta, accountant,
                                    relation=spec.relation)
            assert plan.ledger.epsilon(accountant) == pytest.approx(fresh, rel=1e-9, abs=0)


def test_the_event_names_the_mechanism_that_ran():
    gauss = PrivacyLedger(spec_of("poisson"))
    gauss.step(5)
    assert gauss.dp_event() == dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(0.01, dpe.GaussianDpEvent(1.1)), 5)
    assert PrivacyLedger(spec_of("poisson")).dp_event() == dpe.NoOpDpEvent()
    assert PrivacyLedger(spec_of("nonprivate")).dp_event() == dpe.NonPrivateDpEvent()
    tree = PrivacyLedger(spec_of("tree"))
    tree.step(3)
    assert isinstance(tree.dp_event(), dpe.ZCDpEvent) and isinstance(tree.dp_event("pld"), dpe.GaussianDpEvent)


@pytest.mark.parametrize("bad", [{"class_name": "os"}, {"class_name": "DpEvent.__init__"}, {"rho": 1.0}, []])
def test_a_recorded_event_is_rebuilt_only_from_dp_accounting_events(bad):
    with pytest.raises(ValueError):
        event_from_dict(bad)


# ------------------------------------------------------------------ the model card of a real run
@pytest.mark.parametrize("algorithm", ["dp-fedemb", "dp-ftrl-fedemb"])
def test_the_cards_event_rebuilt_gives_the_cards_epsilon(tmp_path, algorithm):
    import dpemb.training.federated as fed
    from dpemb.algorithms.config import FederatedConfig
    from dpemb.training.config import ModelConfig, RunConfig
    from tests.conftest import make_tiny_dataset

    s = make_tiny_dataset(num_users=30).split()
    spec = PrivacySpec(population=s.train.num_users, clients_per_round=3, users_per_client=2, noise_multiplier=0.5,
                       clip_norm=0.5, rounds=3, mechanism="tree" if algorithm == "dp-ftrl-fedemb" else "gaussian")
    rep = fed.train_federated(s.train, s.eval, ModelConfig(backbone="lenet", embedding_dim=16),
                              FederatedConfig(algorithm=algorithm, local_batch_size=4), spec,
                              RunConfig(out=str(tmp_path / "r"), eval_every=3, progress=False), noise_seed=1)
    card = json.loads((tmp_path / "r" / "model_card.json").read_text())
    priv = card["privacy"]
    assert priv["dp_event"] == rep["privacy"]["dp_event"] and priv["rounds_composed"] == 3
    event = event_from_dict(priv["dp_event"])
    relation = to_dp_accounting(spec.relation)
    # RDP: dp_accounting's own accountant on the rebuilt event, nothing of dpemb's in between
    acc = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    acc.compose(event)
    assert priv["epsilon_rdp"] == pytest.approx(acc.get_epsilon(priv["delta"]), rel=1e-12)
    # PLD (at the interval dpemb refines to; for the tree its equivalent Gaussian form)
    pld_event = event_from_dict(priv.get("dp_event_pld", priv["dp_event"]))
    assert ("dp_event_pld" in priv) == (algorithm == "dp-ftrl-fedemb")
    assert priv["epsilon_pld"] == pytest.approx(compute_epsilon(pld_event, priv["delta"], "pld", relation=spec.relation),
                                                rel=1e-9)
    assert math.isfinite(priv["epsilon_rdp"])

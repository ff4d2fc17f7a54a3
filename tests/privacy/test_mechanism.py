"""The noise mechanism IS the privatizer: Gaussian and tree aggregation behind one
``release``, built from the spec in one place (``plan.make_noise``), resumable exactly,
and checkpoints of the layouts written before still load."""

from __future__ import annotations

import pytest
import torch

from dpemb.privacy import PrivacySpec
from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.noise import GaussianNoise, NoiseMechanism
from dpemb.privacy.plan import PrivacyPlan, make_noise
from dpemb.privacy.relations import Relation
from dpemb.privacy.tree import TreeAggregationNoise

GAUSS = PrivacySpec(population=100, clients_per_round=5, users_per_client=2, noise_multiplier=0.7)
TREE = PrivacySpec(population=40, clients_per_round=5, users_per_client=2, noise_multiplier=0.7, mechanism="tree",
                   tree_restarts=True)  # 4 rounds per epoch: the runs below cross a restart


def sums(n: int, shape=(6,)) -> list[ClippedSum]:
    g = torch.Generator().manual_seed(123)
    return [ClippedSum([torch.randn(shape, generator=g)], 2.0, Relation.REPLACE_SPECIAL) for _ in range(n)]


def test_both_mechanisms_implement_the_one_interface():
    members = [m for m in dir(NoiseMechanism) if not m.startswith("_")] + ["noise_multiplier", "secure"]
    for spec, cls in ((GAUSS, GaussianNoise), (TREE, TreeAggregationNoise)):
        mech = make_noise(spec, seed=1)
        assert type(mech) is cls
        assert all(hasattr(mech, m) for m in members), [m for m in members if not hasattr(mech, m)]
        assert mech.release(sums(1)[0])[0].shape == (6,)


def test_tree_release_is_the_difference_of_consecutive_noisy_prefix_sums():
    a, b = make_noise(TREE, seed=5), make_noise(TREE, seed=5)
    prev = torch.zeros(6)
    for x in sums(9):
        prefix = b.noisy_prefix_sum(x)[0]
        assert torch.equal(a.release(x)[0], prefix - prev)
        prev = prefix
    with pytest.raises(ValueError, match="adaptive clipping"):
        a.add_to_count(1.0, 1.0)


def test_gaussian_release_is_add():
    a, b = make_noise(GAUSS, seed=5), GaussianNoise(GAUSS.noise_multiplier, seed=5)
    for x in sums(3):
        assert torch.equal(a.release(x)[0], b.add(x)[0])


@pytest.mark.parametrize("spec", [GAUSS, TREE], ids=["gaussian", "tree"])
def test_resumed_mechanism_releases_what_an_uninterrupted_one_does(spec):
    xs = sums(10)
    whole = make_noise(spec, seed=9)
    expected = [whole.release(x)[0] for x in xs]
    first = make_noise(spec, seed=9)
    got = [first.release(x)[0] for x in xs[:5]]
    resumed = make_noise(spec)  # OS-seeded: the state must carry everything
    resumed.load_state_dict(first.state_dict())
    got += [resumed.release(x)[0] for x in xs[5:]]
    assert all(torch.equal(e, g) for e, g in zip(expected, got))


def test_a_state_of_the_other_mechanism_is_refused():
    with pytest.raises(ValueError, match="tree"):
        make_noise(GAUSS).load_state_dict({**make_noise(TREE).state_dict(), "noise_multiplier": 0.7})
    with pytest.raises(ValueError, match="gaussian"):
        make_noise(TREE).load_state_dict(make_noise(GAUSS).state_dict())


def old_layouts(mech_state: dict) -> list[dict]:
    """The plan's mechanism state as pre-release checkpoints wrote it: {"privatizer": ...}, and older, flat."""
    noise = {k: v for k, v in mech_state.items() if k not in ("kind", "prev_prefix")}
    prev = mech_state.get("prev_prefix")
    kind = mech_state["kind"]
    privatizer = {"kind": kind, "noise": noise, **({"prev_prefix": prev} if kind == "tree" else {})}
    flat = {"noise": noise, "prev_prefix": prev[0] if prev is not None else None}
    return [{"privatizer": privatizer}, flat]


@pytest.mark.parametrize("spec", [GAUSS, TREE], ids=["gaussian", "tree"])
def test_a_checkpoint_resumes_exactly_and_one_of_an_older_layout_is_refused(spec, tmp_path):
    from dpemb.training.checkpoint import REQUIRED, load_checkpoint, save_checkpoint
    from dpemb.training.errors import PreReleaseError

    xs = sums(7, shape=(2,))  # the plan's template: one flat vector
    whole = PrivacyPlan.build(spec, seed=4)
    expected = [whole.release(x)[0] for x in xs]
    first = PrivacyPlan.build(spec, seed=4)
    head = [first.release(x)[0] for x in xs[:5]]
    state = first.state_dict()
    assert set(state) >= {"mechanism", "sampler", "ledger"} and "privatizer" not in state
    plan = PrivacyPlan.build(spec)
    plan.load_state_dict(state)
    got = head + [plan.release(x)[0] for x in xs[5:]]
    assert all(torch.equal(e, g) for e, g in zip(expected, got))
    rest = {k: None for k in REQUIRED} | {"kind": "dp-fedemb", "privacy_spec": {}}
    save_checkpoint(tmp_path / "now.pt", rest | state)
    assert set(load_checkpoint(tmp_path / "now.pt")["mechanism"]) == set(state["mechanism"])
    for i, old in enumerate(old_layouts(state["mechanism"])):
        legacy = {k: v for k, v in state.items() if k != "mechanism"} | old
        save_checkpoint(tmp_path / f"old{i}.pt", rest | legacy)
        with pytest.raises(PreReleaseError, match="written by a pre-release dpemb.*train the model again"):
            load_checkpoint(tmp_path / f"old{i}.pt")

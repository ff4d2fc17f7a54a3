"""Public negatives: the extra head rows are the public identities' imprinted prototypes
under the start model (checked against an independent computation), computed once per
start; they enter every client's fresh head in both trainers alike, and each client's
update stays a function of the start, the public data, its own data and its own key."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.algorithms.batched_client import BatchedClientTrainer, ClientInput
from dpemb.algorithms.client import ClientTrainer
from dpemb.algorithms.config import FederatedConfig
from dpemb.algorithms.public_negatives import PublicNegatives
from dpemb.models import build_backbone
from tests.conftest import make_tiny_dataset

EMB = 16


@pytest.fixture(scope="module")
def splits():
    return make_tiny_dataset(num_users=32).split()


def model():
    torch.manual_seed(0)
    return build_backbone("lenet", in_channels=1, image_size=28, embedding_dim=EMB, width=0.25)


def flat(m) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in m.parameters() if p.requires_grad])


def nchw(ds) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.from_numpy(np.ascontiguousarray(ds.images)).permute(0, 3, 1, 2).contiguous(), \
        torch.from_numpy(ds.labels)


def test_rows_are_the_public_identities_normalised_mean_unit_embeddings(splits):
    pub = splits.public
    neg = PublicNegatives.of(pub, batch_size=5)  # several batches
    m = model()
    rows = neg.rows(m, flat(m))
    ids = np.unique(pub.labels)
    assert rows.shape == (len(ids), EMB) and neg.num_identities == len(ids) >= 2
    images, _ = nchw(pub)
    with torch.no_grad():
        e = m(images.float() / 255.0).double()
    e = e / e.norm(dim=1, keepdim=True)
    for r, c in zip(rows, ids):  # independently: unit(sum of unit embeddings) per identity, sorted ids
        s = e[torch.from_numpy(pub.labels == c)].sum(0)
        assert torch.allclose(r.double(), s / s.norm(), atol=1e-5)
    assert m.training  # the model's mode is restored


def test_rows_are_cached_per_start_and_follow_a_new_start(splits):
    neg = PublicNegatives.of(splits.public)
    m = model()
    start = flat(m)
    first = neg.rows(m, start)
    assert neg.rows(m, start.clone()) is first  # every client of the round: one computation
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    moved = neg.rows(m, flat(m))  # the next round's start
    assert moved is not first and not torch.allclose(moved, first)


def test_bad_public_data_is_refused():
    with pytest.raises(ValueError, match="non-empty public dataset"):
        PublicNegatives(torch.zeros((0, 1, 28, 28), dtype=torch.uint8), np.zeros(0))
    with pytest.raises(ValueError, match="uint8"):
        PublicNegatives(torch.zeros((2, 1, 28, 28)), np.zeros(2))
    with pytest.raises(ValueError, match="public negatives extend DP-FedEmb"):
        FederatedConfig(algorithm="dp-fedavg", public_negatives=True)
    with pytest.raises(ValueError, match="no public dataset"):
        ClientTrainer(model(), 12, FederatedConfig(public_negatives=True))
    with pytest.raises(ValueError, match="public_negatives=False"):
        ClientTrainer(model(), 12, FederatedConfig(), negatives=PublicNegatives(
            torch.zeros((2, 1, 28, 28), dtype=torch.uint8), np.zeros(2)))


@pytest.mark.parametrize("local_head", ["global", "local"])
@pytest.mark.parametrize("loss", ["arcface", "softmax"])
def test_both_trainers_give_each_client_the_same_update_with_public_negatives(splits, local_head, loss):
    train = splits.train
    images, labels = nchw(train)
    cfg = FederatedConfig(local_epochs=2, local_batch_size=4, client_lr=0.1, local_head=local_head, loss=loss,
                          public_negatives=True)
    m = model()
    start = flat(m)
    rs = np.random.default_rng(3)
    idxs = [rs.choice(len(labels), s, replace=False) for s in (9, 4, 13)]

    def clients(seed: int = 0) -> list[ClientInput]:
        return [ClientInput(images, labels, idx, np.random.default_rng(seed + i), torch.Generator().manual_seed(i))
                for i, idx in enumerate(idxs)]

    single = ClientTrainer(m, train.num_classes, cfg, negatives=PublicNegatives.of(splits.public))
    one = [single.update(start, c.images, c.labels, c.example_idx, c.rng, c.generator) for c in clients()]
    batched = BatchedClientTrainer(m, train.num_classes, cfg, 2, negatives=PublicNegatives.of(splits.public))
    many = batched.update_many(start, clients())
    for a, b in zip(one, many):
        assert torch.allclose(a.delta, b.delta, atol=1e-5), (a.delta - b.delta).abs().max()
        assert a.delta.abs().sum() > 0
    # the rows changed what the clients computed (the same clients without them differ)
    plain = ClientTrainer(m, train.num_classes, FederatedConfig(**{**cfg.__dict__, "public_negatives": False}))
    c0 = clients()[0]
    assert not torch.allclose(plain.update(start, c0.images, c0.labels, c0.example_idx, c0.rng, c0.generator).delta,
                              one[0].delta, atol=1e-6)


def test_a_clients_update_does_not_depend_on_the_other_clients_of_its_round(splits):
    """With several local steps: client A alone, or after other clients trained on the same
    trainer (their heads, the working model, the cached rows), gives the same update."""
    train = splits.train
    images, labels = nchw(train)
    cfg = FederatedConfig(local_epochs=3, local_batch_size=4, client_lr=0.1, loss="arcface", public_negatives=True)
    m = model()
    start = flat(m)
    rs = np.random.default_rng(9)
    a, b, c = (rs.choice(len(labels), s, replace=False) for s in (10, 7, 12))

    def run(order):
        t = ClientTrainer(m, train.num_classes, cfg, negatives=PublicNegatives.of(splits.public))
        out = {}
        for name, idx in order:
            key = {"a": 0, "b": 1, "c": 2}[name]
            out[name] = t.update(start, images, labels, idx, np.random.default_rng(key),
                                 torch.Generator().manual_seed(key)).delta
        return out

    alone = run([("a", a)])["a"]
    after = run([("b", b), ("c", c), ("a", a)])["a"]
    assert torch.equal(alone, after)

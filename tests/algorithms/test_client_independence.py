"""Adding one user changes exactly one virtual client's computation (issue #10.1).

One round on D and on D plus one user, with the same run key: the added user is
sampled, either into the first or into the last client. Several local steps and
several local epochs, so the order of a client's examples and the fresh head's
initialisation matter. Every other client's delta must be bit-identical, and the
clipped sum may move by at most the stated sensitivity. A second test permutes the
order in which clients run.

The same check for ``BatchedClientTrainer`` (``--client-batch``): clients trained
B at a time in one vectorised call, where the added user regroups every later
client (K = 1) or changes its own client's size (K = 3); local batch 2 to 4, global
and local heads, LeNet and ResNet-GN. Every other client's delta must still be
bit-identical (``torch.equal``), not merely close.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch.nn.utils import parameters_to_vector

from dpemb.algorithms.batched_client import BatchedClientTrainer
from dpemb.algorithms.client import ClientTrainer
from dpemb.algorithms.config import FederatedConfig
from dpemb.algorithms.round import ClientData, map_clients
from dpemb.models import build_backbone
from dpemb.privacy.client_keys import ClientRandomness, client_keys
from dpemb.privacy.clipping import ClipAndSum
from dpemb.privacy.relations import Relation, user_sensitivity
from tests.conftest import make_tiny_dataset

C = 0.05
ROUND = 7


def _setup(algorithm: str, head_init: str, batch_clients: int = 0, local_batch_size: int = 2,
           local_head: str = "global", backbone: str = "lenet"):
    """``batch_clients`` 0: ``ClientTrainer``; B >= 1: ``BatchedClientTrainer`` (B at once)."""
    torch.manual_seed(0)
    ds = make_tiny_dataset(num_users=12).split().train
    model = build_backbone(backbone, in_channels=1, image_size=28, embedding_dim=8, width=0.25)
    # small batches and 2 local epochs: several local steps per client, reshuffled each epoch
    cfg = FederatedConfig(algorithm=algorithm, local_batch_size=local_batch_size, local_epochs=2, client_lr=0.2,
                          head_init=head_init, head_lr_scale=3.0, local_head=local_head)
    if batch_clients:
        trainer = BatchedClientTrainer(model, ds.num_classes, cfg, batch_clients)
    else:
        trainer = ClientTrainer(model, ds.num_classes, cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    start = parameters_to_vector(params).detach()
    if cfg.aggregates_head:
        start = torch.cat([start, (torch.randn(ds.num_classes, 8) * 0.1).flatten()])
    images = torch.from_numpy(np.ascontiguousarray(ds.images)).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(ds.labels.astype(np.int64))
    return ds, trainer, start, images, labels


def _deltas(setup, slots, k, randomness):
    ds, trainer, start, images, labels = setup
    keys = client_keys(slots, k)
    out = map_clients(trainer, start, slots, keys, ClientData.of(ds), randomness, ROUND)
    return [res.delta.clone() for res, _ in out]


def _clipped_sum(deltas, sensitivity):
    acc = ClipAndSum([torch.zeros_like(deltas[0])], C, sensitivity, Relation.ADD_REMOVE)
    for d in deltas:
        acc.add([d])
    return acc.result().value[0]


CASES = list(itertools.product(("dp-fedemb", "dp-fedavg"), ("zeros", "glorot"), (1, 3), ("first", "last")))


@pytest.mark.parametrize("algorithm,head_init,k,where", CASES)
def test_adding_one_user_changes_exactly_one_client(algorithm, head_init, k, where):
    _check_adding_one_user(_setup(algorithm, head_init), k, where)


#: (algorithm, local head, local batch, backbone, K, where the user is added, B): every
#: local batch size 2 to 4, both heads, both algorithms, both backbones; the 5 or 6
#: clients run in 3 groups (B = 2) or 2 (B = 4), the added user in the first or last
BATCHED = [("dp-fedemb", "global", 2, "lenet", 1, "first", 2), ("dp-fedemb", "local", 3, "lenet", 1, "last", 4),
           ("dp-fedemb", "local", 4, "lenet", 3, "first", 4), ("dp-fedemb", "global", 3, "lenet", 3, "last", 2),
           ("dp-fedavg", "global", 2, "lenet", 1, "last", 2), ("dp-fedavg", "global", 4, "lenet", 3, "first", 4),
           ("dp-fedavg", "global", 3, "lenet", 1, "first", 4), ("dp-fedavg", "global", 2, "lenet", 3, "last", 2),
           ("dp-fedemb", "local", 2, "resnet-gn", 1, "first", 2), ("dp-fedemb", "global", 3, "resnet-gn", 3, "last", 4)]


@pytest.mark.parametrize("algorithm,local_head,local_batch,backbone,k,where,batch_clients", BATCHED)
def test_batched_clients_adding_one_user_changes_exactly_one_client(algorithm, local_head, local_batch, backbone,
                                                                    k, where, batch_clients):
    setup = _setup(algorithm, "glorot", batch_clients, local_batch, local_head, backbone)
    _check_adding_one_user(setup, k, where)


def _check_adding_one_user(setup, k: int, where: str) -> None:
    ds = setup[0]
    n = ds.num_users
    new_user = 0 if where == "first" else n - 1
    others = [u for u in range(n) if u != new_user]
    if k == 1:
        base = [np.array([u]) for u in others[:5]]
        added = ([np.array([new_user])] + base) if where == "first" else (base + [np.array([new_user])])
        changed = 0 if where == "first" else len(added) - 1
    else:
        base = [np.array(others[0:2]), np.array(others[2:3]), np.array(others[3:6])]
        slot = 0 if where == "first" else len(base) - 1
        added = [np.sort(np.append(s, new_user)) if i == slot else s for i, s in enumerate(base)]
        changed = slot

    d_base = _deltas(setup, base, k, ClientRandomness(seed=99))
    d_added = _deltas(setup, added, k, ClientRandomness(seed=99))
    assert all(d.abs().sum() > 0 for d in d_added), "every client must actually train"

    if k == 1:
        assert len(d_added) == len(d_base) + 1
        rest = d_added[:changed] + d_added[changed + 1:]
        for a, b in zip(rest, d_base):
            assert torch.equal(a, b), "a client without the added user changed"
    else:
        assert len(d_added) == len(d_base)
        differ = [i for i, (a, b) in enumerate(zip(d_added, d_base)) if not torch.equal(a, b)]
        assert differ == [changed]

    sens = user_sensitivity(C, k, Relation.ADD_REMOVE)
    move = float((_clipped_sum(d_added, sens) - _clipped_sum(d_base, sens)).norm())
    assert move <= sens * (1 + 1e-5), f"the clipped sum moved {move / C:.2f} C, sensitivity {sens / C:g} C"


@pytest.mark.parametrize("algorithm,k", [("dp-fedemb", 1), ("dp-fedemb", 3), ("dp-fedavg", 3)])
def test_client_order_does_not_change_the_clipped_sum(algorithm, k):
    setup = _setup(algorithm, "glorot")
    if k == 1:
        slots = [np.array([u]) for u in (1, 3, 4, 6, 8)]
    else:
        slots = [np.array([1, 2]), np.array([], dtype=np.int64), np.array([3, 5, 9]), np.array([6])]
    keys = client_keys(slots, k)
    ds, trainer, start, images, labels = setup

    def clipped(order):
        out = map_clients(trainer, start, [slots[i] for i in order], [keys[i] for i in order],
                          ClientData.of(ds), ClientRandomness(seed=5), ROUND)
        return _clipped_sum([r.delta.clone() for r, _ in out], user_sensitivity(C, k, Relation.ADD_REMOVE))

    forward = clipped(list(range(len(slots))))
    backward = clipped(list(reversed(range(len(slots)))))
    assert torch.allclose(forward, backward, atol=1e-7, rtol=1e-5)


def test_client_randomness_depends_on_key_round_and_run_key():
    r = ClientRandomness(seed=1)
    a = r.data_rng(3, (0, 2)).permutation(50)
    assert np.array_equal(a, ClientRandomness(seed=1).data_rng(3, (0, 2)).permutation(50))
    assert not np.array_equal(a, r.data_rng(4, (0, 2)).permutation(50))
    assert not np.array_equal(a, r.data_rng(3, (0, 3)).permutation(50))
    assert not np.array_equal(a, r.data_rng(3, (1, 2)).permutation(50))  # slot 2 vs user 2
    assert not np.array_equal(a, ClientRandomness(seed=2).data_rng(3, (0, 2)).permutation(50))
    g1, g2 = r.init_generator(3, (0, 2)), r.init_generator(3, (0, 2))
    assert torch.equal(torch.rand(5, generator=g1), torch.rand(5, generator=g2))


def test_unseeded_run_keys_differ_and_state_round_trips():
    a, b = ClientRandomness(), ClientRandomness()
    assert not a.seeded
    assert not np.array_equal(a.data_rng(0, (0, 0)).permutation(1000), b.data_rng(0, (0, 0)).permutation(1000))
    b.load_state_dict(a.state_dict())
    assert np.array_equal(a.data_rng(0, (0, 0)).permutation(1000), b.data_rng(0, (0, 0)).permutation(1000))


def test_k1_keys_follow_users_not_positions():
    assert client_keys([np.array([4]), np.array([9])], 1) == client_keys([np.array([4]), np.array([9])], 1)
    shifted = client_keys([np.array([0]), np.array([4]), np.array([9])], 1)
    assert shifted[1:] == client_keys([np.array([4]), np.array([9])], 1)
    with pytest.raises(ValueError):
        client_keys([np.array([1, 2])], 1)

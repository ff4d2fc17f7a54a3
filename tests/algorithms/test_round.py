"""Server side of a round: clip-sum, noise on the sum, public normaliser, FedAvg equivalence."""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from dpemb.algorithms.client import ClientTrainer
from dpemb.algorithms.config import FederatedConfig
from dpemb.algorithms.round import ClientData, accumulate_clients, map_clients, round_stats, server_step
from dpemb.models import build_backbone
from dpemb.privacy.client_keys import ClientRandomness, client_keys
from dpemb.privacy.clipping import ClipAndSum
from dpemb.privacy.noise import GaussianNoise
from dpemb.privacy.relations import Relation
from tests.conftest import make_tiny_dataset


def test_server_step_divides_by_public_constant():
    p = torch.nn.Parameter(torch.zeros(6))
    opt = torch.optim.SGD([p], lr=1.0, momentum=0.0)
    noised = torch.arange(6.0)
    server_step([p], opt, noised, normaliser=8)
    assert torch.allclose(p.detach(), -noised / 8)


def test_reduce_bounds_each_client_contribution():
    template = [torch.zeros(5)]
    acc = ClipAndSum(template, 1.0, 1.0, Relation.ADD_REMOVE)

    class R:  # minimal ClientResult stand-in
        def __init__(self, d):
            self.delta, self.loss, self.examples = d, 0.0, 1

    huge = [(R(torch.full((5,), 1e6)), 1), (R(torch.full((5,), -3.0)), 1)]
    tally = accumulate_clients(huge, acc)
    clipped = acc.result()
    stats = round_stats(clipped, tally)
    assert stats.clients == 2 and stats.fraction_clipped == 1.0
    assert float(clipped.value[0].norm()) <= 2.0 + 1e-5


def _plain_fedavg_round(model, head, ds, slots, lr, m):
    """An independent FedAvg: each client trains a copy with plain SGD on ONE full batch,
    the server averages the models' changes over the (public) number of slots."""
    images = torch.from_numpy(np.ascontiguousarray(ds.images)).permute(0, 3, 1, 2).float() / 255
    labels = torch.from_numpy(ds.labels)
    start = [p.detach().clone() for p in list(model.parameters()) + [head]]
    total = [torch.zeros_like(s) for s in start]
    for users in slots:
        idx = np.concatenate([np.arange(ds.offsets[u], ds.offsets[u + 1]) for u in users])
        local = copy.deepcopy(model)
        lhead = head.detach().clone().requires_grad_(True)
        params = list(local.parameters()) + [lhead]
        loss = F.cross_entropy(F.linear(local(images[idx]), lhead), labels[idx])
        grads = torch.autograd.grad(loss, params)
        for t, g in zip(total, grads):
            t.add_(lr * g)  # start - end = lr * grad for one SGD step
    return [s - t / m for s, t in zip(start, total)]


def test_zero_noise_nonprivate_round_equals_plain_fedavg():
    torch.manual_seed(0)
    ds = make_tiny_dataset().split().train
    model = build_backbone("lenet", in_channels=1, image_size=28, embedding_dim=16)
    head = torch.nn.Parameter(torch.randn(ds.num_classes, 16) * 0.1)
    cfg = FederatedConfig(algorithm="dp-fedavg", local_batch_size=10_000, client_lr=0.1,
                          server_lr=1.0, server_momentum=0.0)
    slots = [np.array([2, 3]), np.array([4]), np.array([5, 6])]
    m = 4  # public normaliser: one slot of the 4 expected happened to be empty
    expected = _plain_fedavg_round(model, head, ds, slots, 0.1, m)

    trainer = ClientTrainer(model, ds.num_classes, cfg)
    server_params = [p for p in model.parameters() if p.requires_grad] + [head]
    opt = torch.optim.SGD(server_params, lr=1.0, momentum=0.0)
    start = parameters_to_vector(server_params).detach()
    results = map_clients(trainer, start, slots, client_keys(slots, 2), ClientData.of(ds), ClientRandomness(seed=0), 0)
    acc = ClipAndSum([torch.zeros_like(start)], 1e9, 1e9, Relation.ADD_REMOVE)
    accumulate_clients(results, acc)
    clipped = acc.result()
    noised = GaussianNoise(0.0, allow_nonprivate=True).add(clipped)[0]
    server_step(server_params, opt, noised, m)
    for got, want in zip(server_params, expected):
        assert torch.allclose(got.detach(), want, atol=1e-5)

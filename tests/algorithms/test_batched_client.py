"""BatchedClientTrainer: several clients' local training in one vmapped call per step
gives every client what ClientTrainer.update gives it alone (to float rounding), for
every loss, head, step schedule and optimizer setting, and the same bits whichever
other clients share its group and slot; unsupported models are refused;
bf16 autocast is a performance flag that runs and stays close to float32."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dpemb.algorithms.batched_client import BatchedClientTrainer, ClientInput, batched_unsupported_reason
from dpemb.algorithms.client import ClientTrainer
from dpemb.algorithms.config import FederatedConfig, LocalPerformance
from dpemb.models import build_backbone, freeze_batchnorm_stats, set_trainable
from tests.conftest import make_tiny_dataset

EMB = 16
#: clients of different sizes: with batch 4, 1 to 3 steps per epoch and last batches of 1 to 4
SIZES = (3, 7, 12, 5, 1)


@pytest.fixture(scope="module")
def data():
    ds = make_tiny_dataset().split().train
    images = torch.from_numpy(np.ascontiguousarray(ds.images)).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(ds.labels)
    rs = np.random.default_rng(5)
    idxs = [rs.choice(len(labels), s, replace=False) for s in SIZES]
    return ds.num_classes, images, labels, idxs


def backbone(name: str = "lenet", width: float = 0.25):
    torch.manual_seed(0)
    return build_backbone(name, in_channels=1, image_size=28, embedding_dim=EMB, width=width)


def start_of(model, cfg: FederatedConfig, num_classes: int) -> torch.Tensor:
    start = torch.cat([p.detach().flatten() for p in model.parameters() if p.requires_grad])
    if cfg.aggregates_head:  # DP-FedAvg: the global head follows the backbone
        head = torch.randn(num_classes * EMB, generator=torch.Generator().manual_seed(1)) * 0.1
        start = torch.cat([start, head])
    return start


def inputs(images, labels, idxs, seed: int = 0) -> list[ClientInput]:
    # each client's own generators, as dpemb.privacy.client_keys gives them
    return [ClientInput(images, labels, idx, np.random.default_rng(seed + i), torch.Generator().manual_seed(seed + i))
            for i, idx in enumerate(idxs)]


def one_at_a_time(model, cfg, data, start, performance=None):
    num_classes, images, labels, idxs = data
    trainer = ClientTrainer(model, num_classes, cfg, performance)
    return [trainer.update(start, c.images, c.labels, c.example_idx, c.rng, c.generator)
            for c in inputs(images, labels, idxs)]


def batched(model, cfg, data, start, max_batch_clients=3, performance=None, seed=0, idxs=None):
    num_classes, images, labels, all_idxs = data
    trainer = BatchedClientTrainer(model, num_classes, cfg, max_batch_clients, performance)
    return trainer.update_many(start, inputs(images, labels, all_idxs if idxs is None else idxs, seed))


def atol(delta: torch.Tensor, start: torch.Tensor, tol: float = 1e-5) -> float:
    """``tol`` x the delta's norm, plus 2 float32 spacings of the largest parameter: a
    delta is ``start - end`` in float32, so a tiny delta cannot be resolved better."""
    return tol * float(delta.norm()) + 2 * float(np.spacing(np.float32(start.abs().max())))


def assert_same(ref, out, start, tol: float = 1e-5) -> None:
    """Every client: same steps and examples, loss to float rounding, every coordinate
    of the delta within ``atol`` (1e-5 x its norm)."""
    assert len(ref) == len(out)
    for a, b in zip(ref, out):
        assert (a.steps, a.examples) == (b.steps, b.examples)
        assert b.delta.shape == a.delta.shape and torch.isfinite(b.delta).all()
        assert b.loss == pytest.approx(a.loss, rel=1e-5, abs=1e-6)
        torch.testing.assert_close(b.delta, a.delta, rtol=0, atol=atol(a.delta, start, tol))
    assert sum(float(a.delta.norm()) > 0 for a in ref) >= 3  # the comparison is not vacuous


def check(cfg: FederatedConfig, data, name="lenet", max_batch_clients=3, model=None, tol=1e-5):
    model = backbone(name) if model is None else model
    start = start_of(model, cfg, data[0])
    ref = one_at_a_time(model, cfg, data, start)
    out = batched(model, cfg, data, start, max_batch_clients)
    assert_same(ref, out, start, tol)
    return ref, out


@pytest.mark.parametrize("local_head", ["global", "local"])
@pytest.mark.parametrize("head_init", ["zeros", "glorot"])
@pytest.mark.parametrize("loss", ["softmax", "cosface", "arcface"])
def test_each_loss_and_fresh_head_equals_one_at_a_time(data, loss, head_init, local_head):
    # zeros + cosface/arcface: the imprinted head; local: heads padded to the largest
    # number of present classes, the padding masked out
    check(FederatedConfig(local_batch_size=4, client_lr=0.1, loss=loss, head_init=head_init,
                          local_head=local_head), data)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_head_first_steps_momentum_head_lr_and_epochs(data, momentum):
    # head-only steps, then backbone-only; the head's own lr; 2 epochs: 2 to 6 steps per
    # client, so clients finish at different steps and their momentum must freeze
    check(FederatedConfig(local_batch_size=4, client_lr=0.1, client_momentum=momentum, head_first_steps=2,
                          head_lr_scale=3.0, local_epochs=2, head_init="glorot", local_head="local"), data)
    check(FederatedConfig(local_batch_size=4, client_lr=0.1, client_momentum=momentum, local_epochs=3,
                          loss="cosface"), data)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_dp_fedavg_trains_and_sends_the_global_head(data, momentum):
    cfg = FederatedConfig(algorithm="dp-fedavg", local_batch_size=4, client_lr=0.1, client_momentum=momentum,
                          local_epochs=2)
    ref, out = check(cfg, data)
    n_head = data[0] * EMB
    assert all(float(b.delta[-n_head:].norm()) > 0 for b in out)  # the head is in the delta


def test_example_cap_and_a_group_of_one_or_of_all(data):
    cfg = FederatedConfig(local_batch_size=4, client_lr=0.1, local_epochs=3, max_examples_per_client=5,
                          client_momentum=0.9, head_init="glorot")
    for b in (1, len(SIZES)):
        check(cfg, data, max_batch_clients=b)


@pytest.mark.parametrize("loss,local_head", [("softmax", "global"), ("arcface", "local")])
def test_the_result_of_a_client_does_not_depend_on_its_companions(data, loss, local_head):
    # client 2 alone, or in every slot of a group among others of other sizes (so other
    # step counts, last-batch sizes and local heads), in any order: BIT-identical, for
    # one trainer (the shapes are public: module doc); arcface: acos / cos elementwise
    cfg = FederatedConfig(local_batch_size=4, client_lr=0.1, client_momentum=0.9, head_init="glorot",
                          local_epochs=2, loss=loss, local_head=local_head)
    model = backbone()
    start = start_of(model, cfg, data[0])
    num_classes, images, labels, idxs = data
    trainer = BatchedClientTrainer(model, num_classes, cfg, 4)

    def client(i: int) -> ClientInput:
        return ClientInput(images, labels, idxs[i], np.random.default_rng(i), torch.Generator().manual_seed(i))

    alone = trainer.update(start, images, labels, idxs[2], np.random.default_rng(2), torch.Generator().manual_seed(2))
    for others, places in (([1, 4, 3], range(4)), ([3, 0, 1, 4, 1], (0, 5))):  # B = 4: 1 group, 2 groups
        for where in places:
            order = others[:where] + [2] + others[where:]
            out = trainer.update_many(start, [client(i) for i in order])
            assert torch.equal(out[where].delta, alone.delta), (others, where)
            assert out[where].loss == alone.loss
    ref = ClientTrainer(model, num_classes, cfg).update(start, images, labels, idxs[2], np.random.default_rng(2),
                                                        torch.Generator().manual_seed(2))
    torch.testing.assert_close(alone.delta, ref.delta, rtol=0, atol=atol(ref.delta, start))


def test_drop_in_update_and_an_empty_client(data):
    num_classes, images, labels, idxs = data
    cfg = FederatedConfig(local_batch_size=4, client_lr=0.1, local_head="local", head_init="glorot")
    model = backbone()
    start = start_of(model, cfg, num_classes)
    single, multi = ClientTrainer(model, num_classes, cfg), BatchedClientTrainer(model, num_classes, cfg, 2)
    args = (start, images, labels, idxs[2])
    a = single.update(*args, np.random.default_rng(0), torch.Generator().manual_seed(0))
    b = multi.update(*args, np.random.default_rng(0), torch.Generator().manual_seed(0))
    torch.testing.assert_close(b.delta, a.delta, rtol=0, atol=atol(a.delta, start))
    empty = np.zeros(0, dtype=np.int64)
    out = multi.update_many(start, [ClientInput(images, labels, empty, np.random.default_rng(0), torch.Generator()),
                                    ClientInput(images, labels, idxs[1], np.random.default_rng(1),
                                                torch.Generator().manual_seed(1))])
    ref = single.update(start, images, labels, empty, np.random.default_rng(0), torch.Generator())
    assert out[0].steps == ref.steps == 0 and out[0].examples == 0 and not out[0].delta.any()
    assert out[1].steps == 2 and out[1].delta.any()


def test_resnet_gn(data):
    check(FederatedConfig(local_batch_size=4, client_lr=0.1, client_momentum=0.9, local_epochs=2,
                          head_init="glorot"), data, name="resnet-gn")
    # ArcFace's margin on the resnet: on an AMD EPYC with AVX-512 (2026-12-07) the batched and the
    # one-client kernels' rounding, carried through the local steps, reached 2.2e-5 x the delta's
    # norm (13 of 78,248 entries above 1e-5; on the Intel and the earlier AMD machines it passed 1e-5)
    check(FederatedConfig(local_batch_size=4, client_lr=0.1, loss="arcface", local_head="local"), data,
          name="resnet-gn", tol=1e-4)


def test_batchnorm_is_refused_unless_its_statistics_are_frozen(data):
    model = backbone("mobilenetv2-bn")
    cfg = FederatedConfig(local_batch_size=4, head_init="glorot")
    assert "freeze_batchnorm_stats" in batched_unsupported_reason(model)
    with pytest.raises(ValueError, match="BatchNorm statistics are not frozen"):
        BatchedClientTrainer(model, data[0], cfg, 2)
    assert batched_unsupported_reason(backbone("resnet-gn")) is None
    assert batched_unsupported_reason(backbone()) is None


@pytest.mark.slow
def test_frozen_batchnorm_mobilenet_equals_one_at_a_time(data):
    # frozen BatchNorm is a per-channel affine map: batchable; norm-only leaves the
    # frozen convolutions out of the stacked parameters
    model = backbone("mobilenetv2-bn")
    freeze_batchnorm_stats(model)
    for trainable in ("all", "norm-only"):
        set_trainable(model, trainable)
        check(FederatedConfig(local_batch_size=4, client_lr=0.1, client_momentum=0.9, head_init="glorot"), data,
              model=model)


def test_max_batch_clients_is_validated(data):
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="max_batch_clients"):
            BatchedClientTrainer(backbone(), data[0], FederatedConfig(), bad)


def test_local_performance_is_a_validated_frozen_flag():
    assert LocalPerformance().bf16 is False
    with pytest.raises(ValueError, match="bf16"):
        LocalPerformance(bf16="yes")
    with pytest.raises(dataclasses.FrozenInstanceError):
        LocalPerformance().bf16 = True  # type: ignore[misc]


def test_bf16_autocast_runs_and_stays_close_to_float32(data):
    cfg = FederatedConfig(local_batch_size=4, client_lr=0.1, head_init="glorot", client_momentum=0.9)
    model = backbone()
    start = start_of(model, cfg, data[0])
    fp32 = one_at_a_time(model, cfg, data, start)
    bf16 = LocalPerformance(bf16=True)
    for out in (one_at_a_time(model, cfg, data, start, bf16), batched(model, cfg, data, start, performance=bf16)):
        for a, b in zip(fp32, out):
            assert torch.isfinite(b.delta).all() and b.steps == a.steps
            assert float((b.delta - a.delta).norm()) <= 0.2 * float(a.delta.norm()) + 1e-6
            assert b.loss == pytest.approx(a.loss, rel=0.05)
        assert any(not torch.equal(a.delta, b.delta) for a, b in zip(fp32, out))  # bf16 really ran

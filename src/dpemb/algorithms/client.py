"""The client update: what one virtual client computes from the current model.

DP-FedEmb (Xu et al. 2022) trains a FRESH head with the server backbone and returns the
BACKBONE delta only (the head is discarded); DP-FedAvg trains backbone + global head and the
delta covers both. The steps, optimizers and schedules: docs/MODELS.md, "dpemb.algorithms.client".

Nothing here clips or adds noise: the delta goes to ``dpemb.privacy`` unchanged.
Expensive objects (the working copy of the model) are built once and reused for every
client; ``dpemb.algorithms.batched_client`` draws its batches and fresh heads with the
same functions.
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector

from dpemb.algorithms.config import FederatedConfig, LocalPerformance
from dpemb.algorithms.public_negatives import PublicNegatives
from dpemb.models import Backbone
from dpemb.models.margin import head_loss, imprint_


@dataclass
class ClientResult:
    delta: torch.Tensor  # flat: start - end over the aggregated parameters
    loss: float  # mean local training loss
    steps: int
    examples: int


def client_batches(
    example_idx: np.ndarray, cfg: FederatedConfig, rng: np.random.Generator
) -> list[np.ndarray]:
    """The client's examples shuffled, repeated ``local_epochs`` times (each pass
    reshuffled), truncated to ``max_examples_per_client``, cut into batches."""
    stream = np.concatenate([rng.permutation(example_idx) for _ in range(cfg.local_epochs)])
    if cfg.max_examples_per_client is not None:
        stream = stream[: cfg.max_examples_per_client]
    b = cfg.local_batch_size
    return [stream[i : i + b] for i in range(0, len(stream), b)]


def split_flat(vec: torch.Tensor, params: Sequence[torch.Tensor],
               what: str = "vector") -> list[torch.Tensor]:
    """Views of the flat ``vec`` shaped as ``params`` (ValueError unless the sizes agree)."""
    sizes = [p.numel() for p in params]
    if vec.numel() != sum(sizes):
        raise ValueError(f"{what} has {vec.numel()} entries, parameters {sum(sizes)}")
    return [v.view_as(p) for v, p in zip(vec.split(sizes), params)]


@torch.no_grad()
def load_flat_(params: list[torch.nn.Parameter], vec: torch.Tensor) -> None:
    """Copy a flat vector into parameters (``vector_to_parameters`` would alias it)."""
    for p, v in zip(params, split_flat(vec, params)):
        p.copy_(v)


def stepped_at(cfg: FederatedConfig, step: int) -> tuple[bool, bool]:
    """(head steps, backbone steps) at local step ``step`` (0-based): with
    ``head_first_steps`` R > 0 the first R steps train the head only and the later ones
    the backbone only; with R = 0 both train at every step. (DP-FedAvg's global head
    trains with the backbone.)"""
    head_only = step < cfg.head_first_steps
    return cfg.head_first_steps == 0 or head_only, not head_only


def local_autocast(performance: LocalPerformance, device: torch.device) -> contextlib.AbstractContextManager:
    """The context of a local forward pass and loss: bf16 autocast on ``device`` when
    ``performance.bf16``, else nothing (float32 as before)."""
    if performance.bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def glorot_(weight: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Glorot-uniform in place. The numbers are drawn on the CPU from the CPU
    ``generator`` and copied to ``weight``'s device, so a run draws the same head on
    every device (and a CPU generator never meets a GPU tensor)."""
    fan_out, fan_in = weight.shape
    a = math.sqrt(6.0 / (fan_in + fan_out))
    draw = torch.empty(weight.shape, dtype=weight.dtype).uniform_(-a, a, generator=generator)
    with torch.no_grad():
        return weight.copy_(draw)


class ClientTrainer:
    """Runs client updates on a reusable working copy of the model.

    ``performance``: how local training runs (``LocalPerformance``: bf16 autocast);
    it changes the arithmetic, not the algorithm or the privacy guarantee.
    ``negatives``: the public identities' rows appended to every fresh head
    (``dpemb.algorithms.public_negatives``; required exactly when
    ``cfg.public_negatives``). ``head_weight``: DP-FedAvg's global head, or the fresh
    head of the last DP-FedEmb update."""

    def __init__(self, backbone: Backbone, num_classes: int, cfg: FederatedConfig,
                 performance: LocalPerformance | None = None, negatives: PublicNegatives | None = None):
        if cfg.public_negatives != (negatives is not None):
            raise ValueError("public_negatives is set in the config but no public dataset was given"
                             if cfg.public_negatives else
                             "public negatives were given but the config has public_negatives=False")
        self.cfg = cfg
        self.negatives = negatives
        self.performance = LocalPerformance() if performance is None else performance
        self.num_classes = num_classes
        self.model = copy.deepcopy(backbone)
        self.model.train()
        self.backbone_params = [p for p in self.model.parameters() if p.requires_grad]
        device = self.backbone_params[0].device
        self.head_weight = torch.nn.Parameter(
            torch.empty(num_classes, backbone.embedding_dim, device=device)
        )

    @property
    def aggregated_params(self) -> list[torch.nn.Parameter]:
        """The parameters whose delta is sent (and clipped and noised)."""
        if self.cfg.aggregates_head:
            return self.backbone_params + [self.head_weight]
        return self.backbone_params

    def update(
        self,
        start: torch.Tensor,
        images: torch.Tensor,
        labels: torch.Tensor,
        example_idx: np.ndarray,
        rng: np.random.Generator,
        generator: torch.Generator,
    ) -> ClientResult:
        """One virtual client's local training from the flat parameter vector ``start``.

        ``images`` (uint8 N,C,H,W) and ``labels`` hold the whole training split;
        ``example_idx`` selects this client's examples. ``rng`` shuffles data and
        ``generator`` (a CPU generator) initialises the fresh head. Both must belong to
        this client alone (``dpemb.privacy.client_keys``): the update is then a function
        of the start, the client's data and its key, and of nothing another client did.
        """
        cfg = self.cfg
        params = self.aggregated_params
        load_flat_(params, start)  # (for DP-FedAvg this also loads the global head)
        device = start.device
        batches = client_batches(example_idx, cfg, rng)
        lr, momentum = cfg.client_lr, cfg.client_momentum
        opt_backbone = torch.optim.SGD(params, lr=lr, momentum=momentum)
        opt_head, class_map = None, None
        if not cfg.aggregates_head:
            head, class_map = self.fresh_head(start, images, labels, example_idx, batches,
                                              generator)
            self.head_weight = torch.nn.Parameter(head)
            opt_head = torch.optim.SGD([self.head_weight], lr=lr * cfg.head_lr_scale,
                                       momentum=momentum)
        head_w = self.head_weight

        total_loss, n_seen = torch.zeros((), device=device), 0
        for step, b in enumerate(batches):
            bt = torch.from_numpy(b)
            x = images[bt].to(device, non_blocking=True).float().div_(255.0)
            y = labels[bt].to(device)
            if class_map is not None:
                y = class_map[y]
            with local_autocast(self.performance, device):
                loss = head_loss(self.model(x), head_w, y, cfg.loss)
            opt_backbone.zero_grad(set_to_none=True)
            if opt_head is not None:
                opt_head.zero_grad(set_to_none=True)
            loss.backward()
            step_head, step_backbone = stepped_at(cfg, step)
            if opt_head is not None and step_head:
                opt_head.step()
            if step_backbone:
                opt_backbone.step()
            total_loss += loss.detach() * len(b)  # no per-step device sync
            n_seen += len(b)
        with torch.no_grad():
            delta = start - parameters_to_vector(params)
        return ClientResult(delta=delta, loss=total_loss.item() / max(n_seen, 1), steps=len(batches), examples=n_seen)

    @torch.no_grad()
    def fresh_head(self, start: torch.Tensor, images: torch.Tensor, labels: torch.Tensor,
                   example_idx: np.ndarray, batches: list[np.ndarray],
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A client's DP-FedEmb head (the working model holding ``start``) and the map from
        a global label to its row (-1: absent; None: every training identity has its row).
        A "local" head has the rows of the classes present in the client's examples (sorted);
        Glorot rows are drawn from ``generator``; a zero head under a margin loss is imprinted
        from the examples of ``batches``; the public negatives' rows follow the client's own
        (docs/MODELS.md, "Head")."""
        cfg, device = self.cfg, start.device
        n_rows, class_map = self.num_classes, None
        if cfg.local_head == "local":
            present = torch.unique(labels[torch.from_numpy(example_idx)])
            class_map = torch.full((self.num_classes,), -1, dtype=torch.long, device=device)
            class_map[present.to(device)] = torch.arange(len(present), device=device)
            n_rows = len(present)
        head = torch.zeros(n_rows, self.model.embedding_dim, device=device)
        if cfg.head_init == "glorot":
            glorot_(head, generator)
        elif cfg.loss.cosine and batches:  # a zero head has no direction under a cosine loss
            idx = np.unique(np.concatenate(batches))
            embs, ys = [], []
            was_training = self.model.training
            self.model.eval()  # no normalisation statistics move before the first local step
            try:
                for i in range(0, len(idx), cfg.local_batch_size):
                    bt = torch.from_numpy(idx[i : i + cfg.local_batch_size])
                    x = images[bt].to(device, non_blocking=True).float().div_(255.0)
                    y = labels[bt].to(device)
                    embs.append(self.model(x))
                    ys.append(class_map[y] if class_map is not None else y)
            finally:
                self.model.train(was_training)
            imprint_(head, torch.cat(embs), torch.cat(ys))
        if self.negatives is not None:
            head = torch.cat([head, self.negatives.rows(self.model, start)])
        return head, class_map

"""Several virtual clients' local training at once: one vectorised call per local step.

``BatchedClientTrainer`` stacks up to ``max_batch_clients`` clients' trainable parameters
(and fresh heads) along a leading client dimension, computes all their gradients in ONE
``torch.func.vmap`` and applies ``torch.optim.SGD``'s rule by hand (the vmap, the SGD rule,
padding, grouping, supported models and cost: docs/SCALE.md, "Several clients at once on an
accelerator").

Every client's result equals ``ClientTrainer.update`` on its own, to float rounding: the
same batches, fresh head, loss and step schedule (``stepped_at``), drawn with the client's
own ``rng`` and ``generator``.

Independence (the guarantee ``dpemb.privacy`` relies on: adding or removing one user
changes one virtual client's computation only). With one ``max_batch_clients``, a client's
update is BIT-IDENTICAL whichever clients share its group and in whatever order: a function
of the start, its data and its key alone (``dpemb.privacy.client_keys``). Invariants that
keep it so: every tensor a step computes on has a PUBLIC shape (``max_batch_clients`` slots
x ``local_batch_size`` examples x all head rows, never the clients'), a slot holds only its
own client's state and data, no kernel reduces over the client dimension, and a finished
client or an empty slot keeps its parameters, head and momentum bit for bit.

The constructor refuses (``ValueError``, ``batched_unsupported_reason``'s reason) a model
whose examples interact inside a batch or whose forward pass writes buffers: BatchNorm with
live statistics. ``LocalPerformance.bf16`` runs the forward pass and loss under bfloat16
autocast, as in ``ClientTrainer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dpemb.algorithms.client import (
    ClientResult,
    ClientTrainer,
    client_batches,
    load_flat_,
    local_autocast,
    split_flat,
    stepped_at,
)
from dpemb.algorithms.config import FederatedConfig, LocalPerformance
from dpemb.algorithms.public_negatives import PublicNegatives
from dpemb.models import Backbone
from dpemb.models.margin import logits as head_logits
from dpemb.models.trainable import batchnorm_stats_frozen


@dataclass
class ClientInput:
    """What ``ClientTrainer.update`` takes for one client besides the start (the fields'
    meanings: there; ``rng`` and ``generator`` are this client's alone)."""

    images: torch.Tensor
    labels: torch.Tensor
    example_idx: np.ndarray
    rng: np.random.Generator
    generator: torch.Generator


def batched_unsupported_reason(model: nn.Module) -> str | None:
    """Why ``model`` cannot train several clients in one vectorised call (a BatchNorm layer
    with live statistics, an InstanceNorm layer tracking running statistics), or None."""
    if not batchnorm_stats_frozen(model):
        return ("its BatchNorm statistics are not frozen: in train mode BatchNorm mixes the examples of "
                "a batch and updates its running statistics in place, which vmap cannot batch across "
                "clients; freeze them with dpemb.models.freeze_batchnorm_stats (as private training "
                "requires), use a GroupNorm backbone, or train clients one at a time with ClientTrainer")
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.instancenorm._InstanceNorm) and m.track_running_stats:
            return (f"{name or 'the model'} is an InstanceNorm layer that tracks running statistics "
                    "(updated in place, which vmap cannot batch); use ClientTrainer")
    return None


@dataclass
class _Prepared:
    """One client's inputs made ready: its batches, head and data."""

    order: int  # position in the caller's list
    batches: list[np.ndarray]
    head: torch.Tensor | None  # (P, D) fresh head (DP-FedEmb); None for DP-FedAvg
    rows: np.ndarray  # the rows of the client's images its batches use (sorted, unique)
    images: torch.Tensor
    labels: np.ndarray  # training label of each row in ``rows`` (local head: its row in the head)

    @property
    def steps(self) -> int:
        return len(self.batches)

    @property
    def examples(self) -> int:
        return int(sum(len(b) for b in self.batches))


class BatchedClientTrainer:
    """Runs up to ``max_batch_clients`` client updates at once (see the module doc).

    Same arguments as ``ClientTrainer`` plus ``max_batch_clients`` (B >= 1, every step's
    slots); the stacked state takes about B x (parameters + head) x (2 with momentum,
    + gradients) memory, plus the B clients' images (uint8) on the device."""

    def __init__(self, backbone: Backbone, num_classes: int, cfg: FederatedConfig,
                 max_batch_clients: int, performance: LocalPerformance | None = None,
                 negatives: PublicNegatives | None = None):
        if isinstance(max_batch_clients, bool) or not isinstance(max_batch_clients, int) or max_batch_clients < 1:
            raise ValueError(f"max_batch_clients must be a positive integer, got {max_batch_clients!r}")
        reason = batched_unsupported_reason(backbone)
        if reason is not None:
            raise ValueError(f"BatchedClientTrainer cannot batch clients of {type(backbone).__name__}: {reason}")
        self.cfg = cfg
        self.num_classes = num_classes
        self.max_batch_clients = max_batch_clients
        # the working model, its trainable parameters and the imprinting of a fresh head
        # are ClientTrainer's: the batched clients start where a single one would
        self.single = ClientTrainer(backbone, num_classes, cfg, performance, negatives)
        self.performance = self.single.performance
        self.model = self.single.model
        # in the order of ClientTrainer's backbone_params (both follow model.parameters())
        self.param_names = [n for n, p in self.model.named_parameters() if p.requires_grad]
        self._grads: dict[tuple[int, ...], object] = {}

    # ------------------------------------------------------------------ interface
    def update(self, start: torch.Tensor, images: torch.Tensor, labels: torch.Tensor,
               example_idx: np.ndarray, rng: np.random.Generator, generator: torch.Generator) -> ClientResult:
        """``ClientTrainer.update``'s signature, one client (a drop-in replacement)."""
        return self.update_many(start, [ClientInput(images, labels, example_idx, rng, generator)])[0]

    def update_many(self, start: torch.Tensor, clients: Sequence[ClientInput]) -> list[ClientResult]:
        """Every client's ``ClientTrainer.update`` from the flat vector ``start`` (to float
        rounding), in the order of ``clients``, computed ``max_batch_clients`` at a time;
        each one bit-identical whatever the other ``clients`` are (see the module doc)."""
        start = start.detach()
        load_flat_(self.single.aggregated_params, start)  # the model every client starts from
        prepared = [self._prepare(i, c, start) for i, c in enumerate(clients)]
        results: list[ClientResult | None] = [None] * len(clients)
        for p in prepared:
            if p.steps == 0:  # nothing to train on: ClientTrainer returns a zero delta
                results[p.order] = ClientResult(delta=torch.zeros_like(start), loss=0.0, steps=0, examples=0)
        todo = sorted((p for p in prepared if p.steps), key=lambda p: -p.steps)  # stable: ties keep order
        for i in range(0, len(todo), self.max_batch_clients):
            group = todo[i : i + self.max_batch_clients]
            for p, res in zip(group, self._train_group(start, group)):
                results[p.order] = res
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ internals
    def _prepare(self, order: int, c: ClientInput, start: torch.Tensor) -> _Prepared:
        """The client's batches and fresh head (``ClientTrainer.fresh_head``); the working
        model holds ``start``."""
        batches = client_batches(c.example_idx, self.cfg, c.rng)
        head, class_map = (None, None) if self.cfg.aggregates_head else \
            self.single.fresh_head(start, c.images, c.labels, c.example_idx, batches, c.generator)
        rows = np.unique(np.concatenate(batches)) if batches else np.zeros(0, dtype=np.int64)
        y = c.labels.cpu()[torch.from_numpy(rows)]
        if class_map is not None:
            y = class_map.cpu()[y]
        return _Prepared(order, batches, head, rows, c.images, y.numpy())

    def _grad_fn(self, argnums: tuple[int, ...], local_cols: bool):
        """vmap(grad(loss)) over (backbone params, head, x, y, weights, valid columns)."""
        key = (*argnums, int(local_cols))
        if key not in self._grads:
            model, loss_cfg, perf = self.model, self.cfg.loss, self.performance

            def loss_fn(params, head, x, y, w, cols):
                with local_autocast(perf, x.device):
                    emb = torch.func.functional_call(model, params, (x,))
                    z = head_logits(emb, head, y, loss_cfg)
                    if cols is not None:  # padded rows of a local head: no class
                        z = z.masked_fill(~cols, float("-inf"))
                    ce = F.cross_entropy(z, y, reduction="none")
                # the mean over the client's real examples (an empty slot: 0, not 0 / 0)
                loss = (ce.float() * w).sum() / w.sum().clamp(min=1.0)
                return loss, loss.detach()

            grad = torch.func.grad(loss_fn, argnums=argnums, has_aux=True)
            self._grads[key] = torch.func.vmap(grad, in_dims=(0, 0, 0, 0, 0, 0 if local_cols else None))
        return self._grads[key]

    def _train_group(self, start: torch.Tensor, group: list[_Prepared]) -> list[ClientResult]:
        """Train ``group`` (at most ``max_batch_clients`` clients) in one stacked state of
        PUBLIC shape: ``max_batch_clients`` slots x ``local_batch_size`` examples x head
        rows for every training identity (plus the public negatives) at every step, whatever
        the clients (see the module doc); a local head's rows past its own are padding."""
        cfg, device = self.cfg, start.device
        n = self.max_batch_clients  # slots; those past the group are empty
        steps = [p.steps for p in group] + [0] * (n - len(group))
        n_steps = max(steps)
        bs = cfg.local_batch_size

        # data: each client's rows on the device once; per step, positions into them
        n_rows = max(len(p.rows) for p in group)
        shape = group[0].images.shape[1:]
        images = torch.zeros((n, n_rows, *shape), dtype=torch.uint8, device=device)
        pos = np.zeros((n, n_steps, bs), dtype=np.int64)
        ys = np.zeros((n, n_steps, bs), dtype=np.int64)
        real = np.zeros((n, n_steps), dtype=np.int64)
        for i, p in enumerate(group):
            rows = torch.from_numpy(p.rows).to(p.images.device)
            images[i, : len(p.rows)] = p.images[rows].to(device, non_blocking=True)
            for t, b in enumerate(p.batches):
                j = np.searchsorted(p.rows, b)
                pos[i, t, : len(b)] = j
                ys[i, t, : len(b)] = p.labels[j]
                real[i, t] = len(b)
        pos_d = torch.from_numpy(pos).to(device, non_blocking=True)
        ys_d = torch.from_numpy(ys).to(device, non_blocking=True)
        weight = (torch.arange(bs).view(1, 1, bs) < torch.from_numpy(real)[:, :, None]).float().to(device)
        live = torch.from_numpy(np.asarray(steps)[:, None] > np.arange(n_steps)[None, :]).to(device)

        # stacked state: every client starts from ``start`` and its own fresh head
        flat = split_flat(start, self.single.aggregated_params)
        pieces = [v.unsqueeze(0).repeat(n, *([1] * v.dim())) for v in flat]
        params = dict(zip(self.param_names, pieces))
        cols, head_lr = None, cfg.client_lr  # DP-FedAvg: the global head, the client lr
        if cfg.aggregates_head:
            head = pieces[-1]
        else:
            negatives = self.single.negatives
            n_cls = self.num_classes + (0 if negatives is None else negatives.num_identities)
            head = torch.zeros((n, n_cls, self.model.embedding_dim), device=device)
            sizes = torch.full((n,), n_cls, device=device)
            for i, p in enumerate(group):
                head[i, : p.head.shape[0]] = p.head
                sizes[i] = p.head.shape[0]
            if cfg.local_head == "local":
                cols = torch.arange(n_cls, device=device).unsqueeze(0) < sizes.unsqueeze(1)
            head_lr = cfg.client_lr * cfg.head_lr_scale
        m = cfg.client_momentum
        bufs = {k: torch.zeros_like(v) for k, v in params.items()} if m else {}
        head_buf = torch.zeros_like(head) if m else None

        total_loss = torch.zeros(n, device=device)
        arange = torch.arange(n, device=device).unsqueeze(1)
        for t in range(n_steps):
            x = images[arange, pos_d[:, t]].float().div_(255.0)
            y = ys_d[:, t]
            w = weight[:, t]
            step_head, step_backbone = stepped_at(cfg, t)
            step_head = step_head or cfg.aggregates_head  # DP-FedAvg: one optimizer for all
            argnums = tuple(a for a, on in ((0, step_backbone), (1, step_head)) if on)
            grads, loss = self._grad_fn(argnums, cols is not None)(params, head, x, y, w, cols)
            with torch.no_grad():
                g = dict(zip(argnums, grads))
                on = live[:, t]  # a finished client (or an empty slot) keeps its state exactly
                if step_backbone:
                    for name, v in params.items():
                        _sgd_(v, g[0][name], bufs[name] if m else None, cfg.client_lr, m, on)
                if step_head:
                    _sgd_(head, g[1], head_buf if m else None, head_lr, m, on)
                total_loss += torch.where(on, loss * w.sum(1), 0.0)

        losses = total_loss.tolist()  # ``pieces`` (DP-FedAvg: with the head) were trained in place
        return [ClientResult(delta=start - torch.cat([v[i].reshape(-1) for v in pieces]),
                             loss=losses[i] / max(p.examples, 1), steps=p.steps,
                             examples=p.examples) for i, p in enumerate(group)]


def _sgd_(p: torch.Tensor, grad: torch.Tensor, buf: torch.Tensor | None, lr: float, momentum: float,
          on: torch.Tensor) -> None:
    """``torch.optim.SGD``'s step in place (dampening 0, nesterov False, no weight decay)
    on the stacked slots where ``on`` (bool, one per slot); the others keep ``p`` and
    ``buf`` bit for bit. A zero-initialised ``buf`` equals torch's buffer initialised
    with the first gradient (momentum x 0 + g = g exactly)."""
    on = on.view(-1, *([1] * (p.dim() - 1)))
    if buf is not None:
        buf.copy_(torch.where(on, buf.mul(momentum).add(grad), buf))
        grad = buf
    p.copy_(torch.where(on, p.add(grad, alpha=-lr), p))

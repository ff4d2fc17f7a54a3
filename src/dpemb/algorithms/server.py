"""The server optimizer and its learning-rate schedule.

``noised sum / expected clients`` is a pseudo-gradient (a client's delta is ``start - end``)
for ``sgd`` (with momentum, the default) or ``adam`` (FedAdam, bias correction included);
round ``r``'s lr is ``server_lr_at(cfg, r, R)`` for the PLANNED rounds R (public). Formulas
and FedAdam against the paper: docs/DEFAULTS.md, "Server optimizer and schedule".

PRIVACY: all of this is post-processing of the privatised (clipped and noised) sum.
The optimizer state is a function of released quantities only, and the schedule depends
only on the round number and the planned number of rounds; neither changes the
(epsilon, delta) guarantee, which depends only on ``dpemb.privacy.PrivacySpec``.

DP-FTRL-FedEmb supports ``sgd`` only (``FederatedConfig`` refuses ``adam``): Adam would
break its model's linearity in the tree's noisy prefix sums (docs/PRIVACY.md, "Tree
aggregation (DP-FTRL)").
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from dpemb.algorithms.config import SERVER_LR_SCHEDULES, SERVER_OPTIMIZERS, FederatedConfig


def make_server_optimizer(params: Sequence[torch.nn.Parameter], cfg: FederatedConfig) -> torch.optim.Optimizer:
    """The server optimizer of ``cfg`` (post-processing: see the module docstring)."""
    if cfg.server_optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.server_lr, momentum=cfg.server_momentum)
    if cfg.server_optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.server_lr, betas=(cfg.server_adam_beta1, cfg.server_adam_beta2),
                                eps=cfg.server_adam_eps)
    raise ValueError(f"server_optimizer must be one of {SERVER_OPTIMIZERS}, got {cfg.server_optimizer!r}")


def check_server_schedule(cfg: FederatedConfig, rounds: int) -> None:
    """Refuse a warmup that does not end before the planned last round (ValueError)."""
    if cfg.server_lr_warmup and cfg.server_lr_warmup >= rounds:
        raise ValueError(
            f"server_lr_warmup ({cfg.server_lr_warmup}) must be smaller than the number of rounds ({rounds})"
        )


def server_lr_at(cfg: FederatedConfig, rnd: int, rounds: int) -> float:
    """The server learning rate of round ``rnd`` (0-based) of ``rounds`` planned rounds.

    A function of public quantities only (round number, planned rounds, the knobs)."""
    check_server_schedule(cfg, rounds)
    if not 0 <= rnd < rounds:
        raise ValueError(f"round {rnd} outside [0, {rounds})")
    base, warmup = cfg.server_lr, cfg.server_lr_warmup
    if rnd < warmup:
        return base * (rnd + 1) / (warmup + 1)
    if cfg.server_lr_schedule == "constant":
        return base
    if cfg.server_lr_schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * (rnd - warmup) / (rounds - warmup)))
    raise ValueError(f"server_lr_schedule must be one of {SERVER_LR_SCHEDULES}, got {cfg.server_lr_schedule!r}")


def set_server_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group (the schedule's value this round)."""
    for group in optimizer.param_groups:
        group["lr"] = lr

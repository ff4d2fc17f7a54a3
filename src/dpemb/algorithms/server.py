"""The server optimizer and its learning-rate schedule.

The server treats ``noised sum / expected clients`` as a pseudo-gradient (each client's
delta is ``start - end``, so the average delta points downhill like a gradient) and
hands it to one of:

* ``sgd``: SGD with momentum ``server_momentum`` (the default; DP-FedAvg / DP-FedEmb).
* ``adam``: FedAdam (Reddi et al. 2021, "Adaptive Federated Optimization"): Adam on the
  pseudo-gradient with betas ``(server_adam_beta1, server_adam_beta2)`` = (0.9, 0.99) and
  epsilon ``server_adam_eps`` (the paper's tau) = 1e-3 by default. Adam's bias correction
  is applied, as in the TFF and optax implementations of FedAdam (the paper's Algorithm 2
  omits it; it only rescales the first rounds):

      m_t = b1 m_{t-1} + (1 - b1) g_t          v_t = b2 v_{t-1} + (1 - b2) g_t^2
      x_t = x_{t-1} - lr_t (m_t / (1 - b1^t)) / (sqrt(v_t / (1 - b2^t)) + eps)

The learning rate of round ``r`` (0-based: the number of rounds already applied) is
``server_lr_at(cfg, r, R)`` for the PLANNED number of rounds R (a public constant):

* optional linear warmup over the first W = ``server_lr_warmup`` rounds:
  ``lr (r + 1) / (W + 1)`` for ``r < W`` (lr/(W+1), 2 lr/(W+1), ..., never 0, then lr);
* then ``constant``: ``lr``; or ``cosine``: ``lr (1 + cos(pi (r - W) / (R - W))) / 2``,
  which starts at ``lr`` and decays to 0 at the end of training (it would be 0 at
  round R, after the last update, so no round is spent with a zero learning rate).

PRIVACY: all of this is post-processing of the privatised (clipped and noised) sum.
The optimizer state is a function of released quantities only, and the schedule depends
only on the round number and the planned number of rounds; neither changes the
(epsilon, delta) guarantee, which depends only on ``dpemb.privacy.PrivacySpec``.

DP-FTRL-FedEmb supports ``sgd`` only: its model is a linear function of the tree's
noisy PREFIX sums (with constant lr and no momentum, ``x_t = x_0 - lr/M * prefix_t``),
which is what keeps the noise on the model at the tree's O(log T) level. Momentum and a
monotone (or warmup-then-monotone) lr schedule keep it linear with bounded total weight,
but Adam's per-coordinate normalisation of the prefix-sum DIFFERENCES (each noisier
than a Gaussian-mechanism round) breaks that telescoping, so ``FederatedConfig`` refuses it.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from dpemb.algorithms.config import SERVER_LR_SCHEDULES, SERVER_OPTIMIZERS, FederatedConfig


def make_server_optimizer(params: Sequence[torch.nn.Parameter], cfg: "FederatedConfig") -> torch.optim.Optimizer:
    """The server optimizer of ``cfg`` (post-processing: see the module docstring)."""
    if cfg.server_optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.server_lr, momentum=cfg.server_momentum)
    if cfg.server_optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.server_lr, betas=(cfg.server_adam_beta1, cfg.server_adam_beta2),
                                eps=cfg.server_adam_eps)
    raise ValueError(f"server_optimizer must be one of {SERVER_OPTIMIZERS}, got {cfg.server_optimizer!r}")


def check_server_schedule(cfg: "FederatedConfig", rounds: int) -> None:
    """Refuse a warmup that does not end before the planned last round (ValueError)."""
    if cfg.server_lr_warmup and cfg.server_lr_warmup >= rounds:
        raise ValueError(
            f"server_lr_warmup ({cfg.server_lr_warmup}) must be smaller than the number of rounds ({rounds})"
        )


def server_lr_at(cfg: "FederatedConfig", rnd: int, rounds: int) -> float:
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

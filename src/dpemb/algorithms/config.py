"""Knobs of the federated algorithms (DP-FedEmb, DP-FedAvg, DP-FTRL-FedEmb).

These change what each virtual client computes and how the server applies the
aggregate; none of them changes the privacy guarantee, which depends only on the
clipping, noise, sampling and number of rounds held in ``dpemb.privacy.PrivacySpec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpemb.models.margin import LossConfig, as_loss_config

FEDERATED_ALGORITHMS = ("dp-fedavg", "dp-fedemb", "dp-ftrl-fedemb")
#: how the server applies the noised average (dpemb.algorithms.server)
SERVER_OPTIMIZERS = ("sgd", "adam")
SERVER_LR_SCHEDULES = ("constant", "cosine")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True)
class FederatedConfig:
    algorithm: str = "dp-fedemb"
    local_epochs: int = 1
    local_batch_size: int = 8
    max_examples_per_client: int | None = None  # Nmax; None: no cap
    client_lr: float = 0.05
    client_momentum: float = 0.0
    head_lr_scale: float = 1.0  # head lr = client_lr * head_lr_scale (DP-FedEmb)
    head_first_steps: int = 0  # first R local steps update only the head, then only the backbone
    local_head: str = "global"  # DP-FedEmb fresh head over "global" (all training ids) or "local" ids
    head_init: str = "zeros"  # DP-FedEmb fresh head: "zeros" (measured better) or "glorot" (the reference)
    server_lr: float = 0.5
    server_momentum: float = 0.9  # server_optimizer "sgd" only
    # server optimizer and lr schedule (dpemb.algorithms.server): post-processing of the
    # noised aggregate, so they do not change the privacy guarantee
    server_optimizer: str = "sgd"  # "sgd" (momentum server_momentum) or "adam" (FedAdam, Reddi et al. 2021)
    server_adam_beta1: float = 0.9
    server_adam_beta2: float = 0.99
    server_adam_eps: float = 1e-3  # FedAdam's tau
    server_lr_schedule: str = "constant"  # "constant" or "cosine" (to 0 at the end of the planned rounds)
    server_lr_warmup: int = 0  # linear warmup over the first W rounds, lr (r+1)/(W+1) (any schedule)
    # the released model: an exponential moving average of the server models with this
    # decay (0: the last server model); post-processing of the released models as well
    server_ema: float = 0.0
    efficient_tree: bool = True  # DP-FTRL: inverse-variance weighted (Honaker) prefix sums
    # DP-FedEmb: append one row per PUBLIC identity (its imprinted prototype under the
    # round's start model) to every fresh head (dpemb.algorithms.public_negatives)
    public_negatives: bool = False
    # the clients' loss on their head (DP-FedEmb's fresh head, DP-FedAvg's global head):
    # softmax, cosface or arcface (dpemb.models.margin); a kind name is accepted
    loss: LossConfig = field(default_factory=LossConfig)
    # stop the run (checkpoint intact) when the server model's L2 norm exceeds this many
    # times its initial norm: noise swamping the updates (a test on the released model
    # only, so the stop round is covered by the guarantee); 0: never
    divergence_norm_ratio: float = 100.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "loss", as_loss_config(self.loss))
        _check(self.divergence_norm_ratio == 0 or self.divergence_norm_ratio > 1,
               "divergence_norm_ratio must be > 1 (or 0: never stop on the model's norm)")
        _check(self.algorithm in FEDERATED_ALGORITHMS, f"algorithm must be one of {FEDERATED_ALGORITHMS}")
        _check(self.local_epochs >= 1, "local_epochs must be >= 1")
        _check(self.local_batch_size >= 1, "local_batch_size must be >= 1")
        _check(
            self.max_examples_per_client is None or self.max_examples_per_client >= 1,
            "max_examples_per_client must be >= 1",
        )
        _check(self.client_lr > 0, "client_lr must be positive")
        _check(0 <= self.client_momentum < 1, "client_momentum must lie in [0, 1)")
        _check(self.head_lr_scale > 0, "head_lr_scale must be positive")
        _check(self.head_first_steps >= 0, "head_first_steps must be >= 0")
        _check(self.local_head in ("global", "local"), "local_head must be 'global' or 'local'")
        _check(self.head_init in ("glorot", "zeros"), "head_init must be 'glorot' or 'zeros'")
        _check(self.server_lr > 0, "server_lr must be positive")
        _check(0 <= self.server_momentum < 1, "server_momentum must lie in [0, 1)")
        _check(self.server_optimizer in SERVER_OPTIMIZERS, f"server_optimizer must be one of {SERVER_OPTIMIZERS}")
        _check(0 <= self.server_adam_beta1 < 1, "server_adam_beta1 must lie in [0, 1)")
        _check(0 <= self.server_adam_beta2 < 1, "server_adam_beta2 must lie in [0, 1)")
        _check(self.server_adam_eps > 0, "server_adam_eps must be positive")
        _check(self.server_lr_schedule in SERVER_LR_SCHEDULES,
               f"server_lr_schedule must be one of {SERVER_LR_SCHEDULES}")
        _check(self.server_lr_warmup >= 0, "server_lr_warmup must be >= 0")
        _check(0 <= self.server_ema < 1, "server_ema must lie in [0, 1) (0: release the last server model)")
        _check(
            self.algorithm != "dp-ftrl-fedemb" or self.server_optimizer == "sgd",
            "dp-ftrl-fedemb supports server_optimizer 'sgd' only: its model is a linear function of the "
            "tree's noisy prefix sums, which keeps the noise at the tree's level; Adam on the prefix-sum "
            "differences would lose that (use dp-fedemb for a FedAdam server)",
        )
        _check(
            self.algorithm != "dp-fedavg" or (self.local_head == "global" and self.head_first_steps == 0),
            "dp-fedavg trains the global head with the model: --local-head and "
            "--head-first-steps apply to dp-fedemb only",
        )
        _check(not (self.public_negatives and self.aggregates_head),
               "public negatives extend DP-FedEmb's fresh local head; dp-fedavg trains a global head")

    @property
    def aggregates_head(self) -> bool:
        """DP-FedAvg sends (and so clips and noises) the global head; DP-FedEmb does not."""
        return self.algorithm == "dp-fedavg"


@dataclass(frozen=True)
class LocalPerformance:
    """How local training runs, not what it computes: performance flags only.

    Unlike ``FederatedConfig``, nothing here is part of the algorithm's definition or
    of the privacy guarantee (which depends only on the clipping, noise, sampling and
    rounds of ``dpemb.privacy.PrivacySpec``): the clipped delta of every client is
    bounded by the clip norm whatever arithmetic produced it.

    ``bf16``: run the local forward pass and loss under ``torch.autocast`` with
    bfloat16 (on the device of the model: CUDA, or the CPU). Parameters, gradients,
    optimizer state and the delta stay float32; the numbers change by bf16 rounding.
    """

    bf16: bool = False

    def __post_init__(self) -> None:
        _check(isinstance(self.bf16, bool), f"bf16 must be a bool, got {self.bf16!r}")

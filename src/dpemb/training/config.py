"""Frozen configuration dataclasses for a training run, validated on construction.

Knobs that change what is learned live in ``ModelConfig`` / ``OptimConfig``;
performance-only settings (threads, evaluation batch size) live in ``RunConfig``
and never affect the privacy guarantee. The privacy knobs of private runs live in
``dpemb.privacy.PrivacySpec`` and are hashed into checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from dpemb.algorithms.config import _check
from dpemb.models import BACKBONES, TRAINABLE_CHOICES
from dpemb.models.margin import LossConfig, as_loss_config


#: ``ModelConfig.init`` values that name no directory (any other value is a run or artifact)
NAMED_INITS = ("random", "imagenet")


@dataclass(frozen=True)
class ModelConfig:
    backbone: str = "lenet"
    embedding_dim: int = 128
    width: float = 1.0
    init: str = "random"  # "random" | "imagenet" | path to a dpemb checkpoint
    trainable: str = "all"  # "all" | "norm-only" | "features"

    def __post_init__(self) -> None:
        _check(self.backbone in BACKBONES, f"unknown backbone {self.backbone!r}; choose from {BACKBONES}")
        _check(self.embedding_dim > 0, "embedding_dim must be positive")
        _check(self.width > 0, "width must be positive")
        _check(self.trainable in TRAINABLE_CHOICES, f"trainable must be one of {TRAINABLE_CHOICES}")
        _check(
            self.init != "imagenet" or self.backbone == "mobilenetv2-bn",
            "--init imagenet needs --backbone mobilenetv2-bn (the ImageNet weights are BatchNorm)",
        )


@dataclass(frozen=True)
class OptimConfig:
    """Centralized (non-private) SGD with momentum, and the loss on the head (softmax,
    cosface or arcface: ``dpemb.models.margin``; a kind name is accepted)."""

    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch_size: int = 128
    steps: int = 1000
    cosine: bool = False
    loss: LossConfig = field(default_factory=LossConfig)

    def __post_init__(self) -> None:
        object.__setattr__(self, "loss", as_loss_config(self.loss))
        _check(self.lr > 0, "lr must be positive")
        _check(0 <= self.momentum < 1, "momentum must lie in [0, 1)")
        _check(self.weight_decay >= 0, "weight_decay must be >= 0")
        _check(self.batch_size > 0, "batch_size must be positive")
        _check(self.steps > 0, "steps must be positive")


@dataclass(frozen=True)
class RunConfig:
    """Where and how to run. Nothing here changes the privacy guarantee. ``seed`` fixes
    the model's initialisation (and, for centralized training, the data order); the
    federated clients' randomness is keyed from a secret run key instead (see
    ``dpemb.privacy.client_keys``). Fields in ``PERFORMANCE_ONLY`` change neither the
    model nor the metrics and may differ when a run is resumed."""

    out: str = "runs/run"
    seed: int = 0
    eval_every: int = 200
    eval_max_pairs: int | None = None  # None: exact over all pairs
    eval_split: str = "test"  # which held-out users/identities the run evaluates on (recorded)
    # performance-only (PERFORMANCE_ONLY)
    checkpoint_every: int = 0  # rounds/steps; 0: at evaluations and on the time interval only
    checkpoint_interval_s: float = 300.0  # also checkpoint when this much time has passed; 0: never
    threads: int = 0  # 0: torch default
    eval_batch_size: int = 512
    progress: bool = True
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    client_batch: int = 1  # federated: virtual clients trained at once (vmap; algorithms.batched_client)
    bf16: bool = False  # local training under bfloat16 autocast (algorithms.config.LocalPerformance)
    overwrite: bool = False  # replace a run already in ``out`` (training.rundir.check_out_dir)

    def __post_init__(self) -> None:
        _check(self.eval_every > 0, "eval_every must be positive")
        _check(self.eval_split in ("test", "validation"), "eval_split must be test or validation")
        _check(self.checkpoint_every >= 0, "checkpoint_every must be >= 0")
        _check(self.checkpoint_interval_s >= 0, "checkpoint_interval_s must be >= 0")
        _check(self.eval_batch_size > 0, "eval_batch_size must be positive")
        _check(self.threads >= 0, "threads must be >= 0")
        _check(isinstance(self.client_batch, int) and self.client_batch >= 1, "client_batch must be >= 1")
        _check(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
               f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")


PERFORMANCE_ONLY = ("checkpoint_every", "checkpoint_interval_s", "threads", "eval_batch_size", "progress", "device",
                    "client_batch", "bf16", "overwrite")


def flat_settings(obj: Any, prefix: str = "") -> dict[str, Any]:
    """A nested settings dict as ``{dotted.path: value}``."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flat_settings(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def config_differences(saved: str, current: str) -> list[str]:
    """The settings (dotted paths such as ``federated.client_lr``) whose values differ
    between two ``config_json`` texts, ignoring ``run.<PERFORMANCE_ONLY>``."""
    ignore = {f"run.{k}" for k in PERFORMANCE_ONLY}
    a, b = flat_settings(json.loads(saved)), flat_settings(json.loads(current))
    return sorted(k for k in a.keys() | b.keys() if k not in ignore and a.get(k, "<unset>") != b.get(k, "<unset>"))


def unset_settings(saved: str, current: str) -> list[str]:
    """The settings ``current`` holds and the ``saved`` config lacks (it was written by a
    pre-release dpemb, before they existed), ignoring ``run.<PERFORMANCE_ONLY>``."""
    ignore = {f"run.{k}" for k in PERFORMANCE_ONLY}
    a, b = flat_settings(json.loads(saved)), flat_settings(json.loads(current))
    return sorted(k for k in b.keys() - a.keys() if k not in ignore)


def describe_differences(saved: str, current: str) -> str:
    """``key: saved -> now`` for each differing setting, for an error message."""
    a, b = flat_settings(json.loads(saved)), flat_settings(json.loads(current))
    return "; ".join(f"{k}: {a.get(k, '<unset>')!r} -> {b.get(k, '<unset>')!r}"
                     for k in config_differences(saved, current))


def to_dict(obj: Any) -> Any:
    """Dataclasses (nested) -> JSON-ready dicts."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if hasattr(obj, "value") and type(obj).__module__.startswith("dpemb"):  # enums
        return obj.value
    return obj


def config_json(**parts: Any) -> str:
    return json.dumps({k: to_dict(v) for k, v in parts.items()}, indent=2, sort_keys=True)


__all__ = ["ModelConfig", "OptimConfig", "RunConfig", "LossConfig", "PERFORMANCE_ONLY",
           "config_differences", "describe_differences", "flat_settings", "unset_settings", "to_dict", "config_json"]

"""Frozen configuration dataclasses for a training run, validated on construction.

Knobs that change what is learned live in ``ModelConfig`` / ``OptimConfig``;
performance-only settings (threads, evaluation batch size) live in ``RunConfig``
and never affect the privacy guarantee. The privacy knobs of private runs live in
``dpemb.privacy.PrivacySpec`` and are hashed into checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from dpemb.models import BACKBONES

TRAINABLE = ("all", "norm-only")


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclass(frozen=True)
class ModelConfig:
    backbone: str = "lenet"
    embedding_dim: int = 128
    width: float = 1.0
    init: str = "random"  # "random" | "imagenet" | path to a dpemb checkpoint
    trainable: str = "all"  # "all" | "norm-only"

    def __post_init__(self) -> None:
        _check(self.backbone in BACKBONES, f"unknown backbone {self.backbone!r}; choose from {BACKBONES}")
        _check(self.embedding_dim > 0, "embedding_dim must be positive")
        _check(self.width > 0, "width must be positive")
        _check(self.trainable in TRAINABLE, f"trainable must be one of {TRAINABLE}")
        _check(
            self.init != "imagenet" or self.backbone == "mobilenetv2-bn",
            "--init imagenet needs --backbone mobilenetv2-bn (the ImageNet weights are BatchNorm)",
        )


@dataclass(frozen=True)
class OptimConfig:
    """Centralized (non-private) SGD with momentum."""

    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    batch_size: int = 128
    steps: int = 1000
    cosine: bool = False

    def __post_init__(self) -> None:
        _check(self.lr > 0, "lr must be positive")
        _check(0 <= self.momentum < 1, "momentum must lie in [0, 1)")
        _check(self.weight_decay >= 0, "weight_decay must be >= 0")
        _check(self.batch_size > 0, "batch_size must be positive")
        _check(self.steps > 0, "steps must be positive")


@dataclass(frozen=True)
class RunConfig:
    """Where and how to run. Nothing here changes the model or the privacy guarantee
    except ``seed`` (which fixes initialisation and data order; noise is seeded
    separately and only when the user asks for a reproducible experiment)."""

    out: str = "runs/run"
    seed: int = 0
    eval_every: int = 200
    checkpoint_every: int = 0  # 0: at every evaluation
    # performance-only
    threads: int = 0  # 0: torch default
    eval_batch_size: int = 512
    eval_max_pairs: int | None = None  # None: exact over all pairs
    progress: bool = True

    def __post_init__(self) -> None:
        _check(self.eval_every > 0, "eval_every must be positive")
        _check(self.checkpoint_every >= 0, "checkpoint_every must be >= 0")
        _check(self.eval_batch_size > 0, "eval_batch_size must be positive")


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


__all__ = ["ModelConfig", "OptimConfig", "RunConfig", "to_dict", "config_json"]

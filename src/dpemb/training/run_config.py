"""The configuration of a training run: ONE type, ONE set of defaults.

``TrainConfig`` says what a run computes, ``PerformanceFlags`` how it runs (the settings
that may change on resume); the sections and the file format: docs/API.md. Every entry
point (``dpemb train`` flags and ``--config FILE``, ``dpemb audit``, ``dpemb account``,
``dpemb.train``) builds a ``TrainConfig``; their defaults are the field defaults below and
nowhere else. A run's ``<out>/config.json`` (``to_dict``, plus what the run derived under
``resolved``) is a valid ``--config``: ``from_dict`` ignores ``resolved`` (recomputed)
and refuses unknown keys.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
import tomllib
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from dpemb.algorithms.config import FederatedConfig
from dpemb.models.margin import LossConfig
from dpemb.privacy.spec import ACCOUNTANTS, MECHANISMS
from dpemb.training.config import ModelConfig, OptimConfig, flat_settings
from dpemb.training.config import to_dict as json_ready

#: every algorithm ``dpemb train`` runs (centralized: non-private, the baseline)
ALGORITHMS = ("centralized", "dp-fedavg", "dp-fedemb", "dp-ftrl-fedemb")
#: what a config file records about itself
CONFIG_FORMAT = "dpemb-train-config"


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the setting (as its flag) and the fix."""


@dataclass(frozen=True)
class DataConfig:
    """Which data: the dataset directory (``dpemb data make``; None when the Python API
    is given a dataset object), the users trained on and the held-out split evaluated."""

    path: str | None = None
    train_split: str = "private"  # "private" | "public" (public pretraining) | "all"
    eval_split: str = "test"  # "test" (the numbers to report) | "validation" (to choose on)
    # score a fixed random subset of this many held-out examples (dpemb.data.splits.held_out_subsets;
    # `dpemb eval --max-examples N` scores the same); None: all of them
    eval_max_examples: int | None = None

    @property
    def train_part(self) -> str:
        """The part of the dataset's ``split()`` trained on (``Splits.get``)."""
        return {"private": "train", "public": "public", "all": "train_and_public"}[self.train_split]

    def __post_init__(self) -> None:
        if self.train_split not in ("private", "public", "all"):
            raise ConfigError(f"--train-split must be private, public or all, got {self.train_split!r}")
        if self.eval_split not in ("test", "validation"):
            raise ConfigError(f"--eval-split must be test or validation, got {self.eval_split!r}")


@dataclass(frozen=True)
class PrivacyRequest:
    """The privacy of a federated run as the user asks for it;
    ``dpemb.training.runner.resolve_privacy`` turns it into the ``PrivacySpec`` the
    accountant and the noise use. Exactly one of ``noise_multiplier``, ``target_epsilon``
    (calibrated with ``accountant`` at the real population) or ``nonprivate``. The cohort:
    M ``clients_per_round`` virtual clients of K ``users_per_client`` users, for ``rounds``
    rounds (the defaults and why: docs/DEFAULTS.md). ``secure_noise`` None: on unless
    ``noise_seed`` is given or the run is non-private."""

    noise_multiplier: float | None = None
    target_epsilon: float | None = None
    nonprivate: bool = False
    accountant: str = "rdp"  # the accountant ``target_epsilon`` is calibrated with
    # calibrate ``target_epsilon`` for the run EXTRAPOLATED to this many users (the paper's
    # convention: noise multiplier and clients per round scaled by N' / N); None: the real population
    target_population: int | None = None
    # populations (beyond 1M and 10M) whose extrapolated epsilon the report and card state
    report_populations: tuple[int, ...] = ()
    clip_norm: float = 0.3
    clients_per_round: int = 8
    users_per_client: int = 16
    rounds: int = 200
    delta: float | None = None  # None: 1 / (10 N)
    allow_large_delta: bool = False
    sampling: str | None = None  # None: poisson (Gaussian), epoch (tree), cyclic-poisson (bandmf, blt)
    tree_restarts: bool = False
    # the noise mechanism; None: the algorithm's (gaussian; tree for dp-ftrl-fedemb, which also
    # takes "bandmf" and "blt" with ``bands``: ``dpemb.training.runner.check_privacy_request``)
    mechanism: str | None = None
    bands: int = 1  # bandmf, blt: b, the groups of cyclic Poisson sampling (bandmf: its bands too)
    adaptive_clip_quantile: float | None = None
    clip_lr: float | None = None
    clip_count_stddev: float | None = None
    epsilon_budget: float | None = None
    noise_seed: int | None = None
    secure_noise: bool | None = None
    audit_canaries: int | None = None
    release_audit_run: bool = False
    allow_nonprivate_init: bool = False  # a DP run from an init trained without DP on these users

    def __post_init__(self) -> None:
        if self.accountant not in ACCOUNTANTS:
            raise ConfigError(f"--accountant must be rdp or pld, got {self.accountant!r}")
        if self.mechanism is not None and self.mechanism not in MECHANISMS:
            raise ConfigError(f"--mechanism must be one of {', '.join(MECHANISMS)}, got {self.mechanism!r}")
        if isinstance(self.bands, bool) or not isinstance(self.bands, int) or self.bands < 1:
            raise ConfigError(f"--bands must be a whole number >= 1, got {self.bands!r}")
        object.__setattr__(self, "report_populations", tuple(int(n) for n in self.report_populations))
        if self.target_population is not None and self.target_epsilon is None:
            raise ConfigError("--target-population applies to --target-epsilon: give the epsilon to calibrate "
                              "for at that population")

    @property
    def extrapolate_to(self) -> tuple[int, ...]:
        """The populations a run's report states its extrapolated epsilon at."""
        named = (*self.report_populations, *((self.target_population,) if self.target_population else ()))
        return tuple(sorted({1_000_000, 10_000_000, *named}))

    @property
    def resolved_secure_noise(self) -> bool:
        """The hardened noise sampler: on unless turned off, seeded or non-private."""
        if self.secure_noise is not None:
            return bool(self.secure_noise)
        return self.noise_seed is None and not self.nonprivate


#: PrivacyRequest fields that shape the cohort and schedule (used by every federated
#: run, private or not) or concern the init; the others are privacy knobs, refused with
#: centralized training
NOT_PRIVACY_KNOBS = ("clients_per_round", "users_per_client", "rounds", "allow_nonprivate_init")


@dataclass(frozen=True)
class TrainConfig:
    """What a training run computes (see the module docstring). ``loss`` is the head's
    loss for every algorithm (the one copy: ``optim.loss`` and ``federated.loss`` are
    set from it, and ``federated.algorithm`` from ``algorithm``)."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: str = "centralized"
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)  # centralized
    federated: FederatedConfig = field(default_factory=FederatedConfig)  # the federated algorithms
    privacy: PrivacyRequest = field(default_factory=PrivacyRequest)  # the federated algorithms
    seed: int = 0  # the model's initialisation (and centralized training's data order)
    eval_every: int = 200  # rounds or steps
    eval_max_pairs: int | None = None  # None: exact Recall@FAR over all pairs

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"--algorithm must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}")
        if self.eval_every <= 0:
            raise ConfigError(f"--eval-every must be positive, got {self.eval_every}")
        object.__setattr__(self, "optim", replace(self.optim, loss=self.loss))
        fed_algorithm = self.algorithm if self.federated_run else self.federated.algorithm
        object.__setattr__(self, "federated", replace(self.federated, loss=self.loss, algorithm=fed_algorithm))

    @property
    def federated_run(self) -> bool:
        return self.algorithm != "centralized"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, a valid input of ``from_dict`` (the copies of ``loss`` and
        ``algorithm`` inside ``optim`` and ``federated`` are left out)."""
        out = json_ready(self)
        out["optim"].pop("loss")
        out["federated"].pop("loss")
        out["federated"].pop("algorithm")
        return {"format": CONFIG_FORMAT, **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainConfig":
        """The config a ``to_dict`` (or a config file) describes; unknown keys are refused."""
        data = dict(data)
        data.pop("resolved", None)  # what a run derived (its PrivacySpec): recomputed from the request
        data.pop("recipe", None)  # a recipe file's description (dpemb.training.recipes): not a setting
        fmt = data.pop("format", CONFIG_FORMAT)
        if fmt != CONFIG_FORMAT:
            raise ConfigError(f"not a dpemb training configuration (format {fmt!r}, expected {CONFIG_FORMAT!r})")
        return _from_dict(cls, data, "")


@dataclass(frozen=True)
class PerformanceFlags:
    """How a run executes, not what it computes: these may change when a run is resumed,
    and change neither the model (beyond float rounding for ``client_batch`` and
    ``bf16``) nor what it reports, nor the privacy guarantee."""

    threads: int = 0  # torch threads; 0: torch's default
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    eval_batch_size: int = 512
    progress: bool = True
    client_batch: int = 1  # federated: virtual clients trained at once (vmap)
    bf16: bool = False  # federated: local training under bfloat16 autocast
    checkpoint_every: int = 0  # rounds/steps; 0: at evaluations, on the interval and on signals
    checkpoint_interval_s: float = 300.0  # 0: off


def load_config(path: str | Path) -> TrainConfig:
    """A ``TrainConfig`` from a TOML or JSON file (``--config``); ``ConfigError`` naming
    the file for anything unreadable or unknown."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"--config {path}: cannot read it ({e.strerror or e})") from e
    toml = path.suffix.lower() == ".toml"
    try:
        data = tomllib.loads(text) if toml else json.loads(text)
    except ValueError as e:
        raise ConfigError(f"--config {path}: not valid {'TOML' if toml else 'JSON'} ({e})") from e
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path}: expected a table of settings, got {type(data).__name__}")
    try:
        return TrainConfig.from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"--config {path}: {e}") from e


def get_setting(config: Any, path: str) -> Any:
    """The value at a dotted ``path`` ("federated.client_lr") of a config."""
    return functools.reduce(getattr, path.split("."), config)


def changed_settings(base: TrainConfig, config: TrainConfig) -> dict[str, Any]:
    """``{dotted.path: value}`` of the settings where ``config`` differs from ``base``
    (``with_settings(base, changed_settings(base, config)) == config``)."""
    before = flat_settings(base.to_dict())
    return {k: v for k, v in flat_settings(config.to_dict()).items() if before.get(k) != v}


def with_settings(config: TrainConfig, settings: dict[str, Any]) -> TrainConfig:
    """``config`` with the values at dotted paths replaced (flags over a config file)."""
    if not settings:
        return config
    data = config.to_dict()
    for path, value in settings.items():
        *parents, leaf = path.split(".")
        functools.reduce(operator.getitem, parents, data)[leaf] = value
    return TrainConfig.from_dict(data)


# ------------------------------------------------------------------------------ (de)serialising
def _from_dict(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'the configuration'} must be a table of settings, got {data!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown setting {where}{unknown[0]!r}; the settings of {where or 'a run'} are: "
                          f"{', '.join(sorted(known))}")
    kwargs = {}
    for name, value in data.items():
        sub = _dataclass_of(hints[name])
        kwargs[name] = _from_dict(sub, value, f"{where}{name}.") if sub is not None and value is not None else value
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where.rstrip('.') or 'the configuration'}: {e}") from e


def _dataclass_of(hint: Any) -> type | None:
    return next((t for t in (hint, *typing.get_args(hint)) if dataclasses.is_dataclass(t)), None)

"""Run a transfer method on a FeatureSet: prepare, plan the budget, fit, evaluate, report.

``train_transfer`` is the library entry point (the CLI ``dpemb transfer`` calls it);
``sweep_epsilon`` runs one configuration at several target epsilons re-using the
clipped features and their exact statistics (each run draws its own fresh noise and
is accounted on its own: the runs of a sweep are alternatives, and publishing all of
them costs the SUM of their epsilons).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from dpemb.data.dataset import DataError

from .backbone import BackboneAccount, backbone_account
from .budget import NoisePlan, ReleaseMechanism, ReleaseRecord, plan_noise
from .config import TransferConfig
from .features import FeatureSet
from .methods import (
    DP_METHODS, DpFcParams, DpLsParams, DpNewtonParams, DpSgdParams, NonprivateParams,
    fit_nonprivate,
)
from .prepare import PreparedFeatures, prepare_features, transform_features
from .result import LinearModel

# Defaults (hyperparameters chosen on a validation split of the Fashion-MNIST
# training set, never on the test split; see docs/TRANSFER.md).
DEFAULTS: dict[str, dict[str, Any]] = {
    "dp-ls": {"alpha": 1.0, "reg_noise": 0.3, "reg_floor": 1.0},
    "dp-sgd": {"steps": 100, "lr": 0.3, "optimizer": "adam", "bias": -10.0, "reg": 0.0},
    "dp-newton": {"steps": 1, "lr": 1.0, "alpha": 0.3, "bias": 0.0, "reg_noise": 0.03, "reg_floor": 1.0},
    "dp-fc": {"steps": 10, "lr": 8.0, "bias": -10.0, "reg_noise": 0.3, "reg_floor": 1.0},
    "non-private": {"reg": 1e-6},
}


def default_reg(method: str, plan: NoisePlan, clip_norm: float, dim: int) -> float:
    """The default ridge ``lambda`` of the Gramian-based methods, from PUBLIC quantities only.

    ``reg_noise * z * C^2 * sqrt(d) + reg_floor * C^2`` (the method's ``DEFAULTS``; why:
    docs/TRANSFER.md, "Hyperparameters"); the floor keeps a non-private fit well posed.
    """
    d = DEFAULTS[method]
    noise_term = d["reg_noise"] * plan.noise_multiplier * clip_norm**2 * math.sqrt(dim)
    return noise_term + d["reg_floor"] * clip_norm**2


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def num_releases(config: TransferConfig) -> int:
    """The number of Gaussian releases the method will make (public, data-independent);
    0 for the non-private baseline."""
    if config.method not in DP_METHODS:
        return 0
    steps = int(_pick(config.steps, DEFAULTS[config.method].get("steps", 1)))
    return int(DP_METHODS[config.method][0](steps))


def resolve_params(config: TransferConfig, plan: NoisePlan, dim: int) -> Any:
    """The method's parameter dataclass, defaults filled in."""
    m, d, c = config.method, DEFAULTS[config.method], config.clip_norm
    gclip = _pick(config.grad_clip_norm, c)
    if m == "dp-ls":
        return DpLsParams(reg=_pick(config.reg, default_reg(m, plan, c, dim)), alpha=_pick(config.alpha, d["alpha"]))
    if m == "dp-sgd":
        return DpSgdParams(
            steps=int(_pick(config.steps, d["steps"])), lr=_pick(config.lr, d["lr"]), grad_clip=gclip,
            bias=_pick(config.bias, d["bias"]), optimizer=_pick(config.optimizer, d["optimizer"]),
            reg=_pick(config.reg, d["reg"]), public_size=config.public_size,
        )
    if m == "dp-newton":
        return DpNewtonParams(
            reg=_pick(config.reg, default_reg(m, plan, c, dim)), steps=int(_pick(config.steps, d["steps"])),
            lr=_pick(config.lr, d["lr"]), neg_weight=_pick(config.alpha, d["alpha"]), bias=_pick(config.bias, d["bias"]),
        )
    if m == "dp-fc":
        return DpFcParams(
            steps=int(_pick(config.steps, d["steps"])), lr=_pick(config.lr, d["lr"]),
            reg=_pick(config.reg, default_reg(m, plan, c, dim)), grad_clip=gclip, bias=_pick(config.bias, d["bias"]),
        )
    return NonprivateParams(reg=_pick(config.reg, d["reg"]))


#: the label of ``TransferRun.private_diagnostics`` (and of the file the CLI writes it to)
PRIVATE_LABEL = ("private: un-noised statistics of the training data (exact counts); not covered by the "
                 "privacy guarantee, do not release")


@dataclass
class TransferRun:
    """The outcome of one run: model, budget, ledger of releases, accuracy.

    ``to_dict`` is the RELEASED summary: the noised results, the privacy statements,
    public settings and the accuracy on the held-out split (never trained on). Exact
    counts of the training data (examples, units, clipped rows) are un-noised
    statistics of private data: they are only in ``private_diagnostics``.
    """

    config: TransferConfig
    params: Any
    model: LinearModel
    plan: NoisePlan
    releases: list[ReleaseRecord]
    seeded: bool
    train_seconds: float
    num_train: int
    num_units: int
    num_clipped_features: int
    sampler: str = ""  # the noise-sampler sentence (``dpemb.privacy.noise.describe_sampler``)
    top1: float | None = None
    raw: dict[str, list[torch.Tensor]] = field(default_factory=dict, repr=False)
    backbone: BackboneAccount | None = None  # a trained backbone's part in the privacy (transfer.backbone)

    @property
    def epsilon_sentence(self) -> str:
        """The epsilon statement, with what it does not cover (a backbone) appended."""
        s = self.plan.sentence()
        return self.backbone.qualify(s) if self.backbone is not None and not self.plan.nonprivate else s

    @property
    def statement_line(self) -> str:
        """The epsilon statement as ``report`` prints it (a seeded run says so)."""
        return self.epsilon_sentence + (" [noise seeded: reproducible, not for release]" if self.seeded else "")

    @functools.cached_property
    def backbone_total(self) -> dict[str, Any] | None:
        """The total epsilon with a DP backbone trained on these users (``BackboneAccount.total``),
        computed once."""
        return None if self.backbone is None else self.backbone.total(self.plan)

    @property
    def split_sentence(self) -> str:
        return self.plan.split_sentence(self.releases)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready RELEASED summary (no tensors, no exact counts of the training data)."""
        eps = self.plan.epsilon
        return {
            "method": self.config.method,
            "top1": self.top1,
            "target_epsilon": self.config.epsilon,
            "epsilon": eps if math.isfinite(eps) else None,
            **{k: getattr(self.plan, k) for k in ("nonprivate", "delta", "accountant", "unit",
                                                  "relation", "noise_multiplier", "num_releases")},
            "epsilon_sentence": self.epsilon_sentence,
            "warnings": list(self.plan.warnings),
            "budget_split": self.split_sentence,
            "releases": _summarise_releases(self.releases),
            "seeded": self.seeded,
            "seed": self.config.seed,
            "noise_sampler": self.sampler,
            "config": self.config.to_dict(),
            "params": dataclasses.asdict(self.params),
            "backbone": None if self.backbone is None else {**self.backbone.to_dict(),
                                                            **({"total": t} if (t := self.backbone_total) else {})},
        }

    def private_diagnostics(self) -> dict[str, Any]:
        """Exact, UN-NOISED statistics of the training data, and the training time (it depends
        on the training data: docs/PRIVACY.md's timing rule): keep them private."""
        return {
            "private": PRIVATE_LABEL,
            "method": self.config.method,
            "target_epsilon": self.config.epsilon,
            "num_train_examples": self.num_train,
            "num_train_units": self.num_units,
            "num_clipped_features": self.num_clipped_features,
            "train_seconds": round(self.train_seconds, 3),
            **(self.backbone.private() if self.backbone is not None else {}),
        }

    def report(self) -> str:
        """Human-readable lines: accuracy, epsilon sentence, budget split."""
        lines = [f"method {self.config.method}: "
                 + (f"top-1 {self.top1:.4f} on the held-out split" if self.top1 is not None else "trained")]
        lines.append(self.statement_line)
        if self.backbone_total is not None:
            lines.append(self.backbone_total["statement"])
        lines.extend(f"warning: {w}" for w in self.plan.warnings)
        if self.config.method != "non-private":
            lines.append(self.split_sentence)
            if not self.plan.nonprivate:
                lines.append(self.sampler)
        return "\n".join(lines)


def combined_cost(runs: Sequence[TransferRun]) -> str | None:
    """What releasing the models of all ``runs`` (trained on the same data) costs: the sum
    of the epsilons of the private ones (basic composition), with what every epsilon
    leaves out (a backbone) appended; None for fewer than two private runs."""
    private = [r for r in runs if not r.plan.nonprivate]
    if len(private) < 2:
        return None
    total = sum(r.plan.epsilon for r in private)
    delta = private[0].plan.delta
    caveats = "".join(f" [{c}]" for c in (private[0].backbone.caveats if private[0].backbone is not None else ()))
    return (f"note: these {len(private)} DP runs each spend their own epsilon on the same training data; "
            f"releasing all of them costs up to {total:.3g} in total, the sum of their epsilons (basic "
            f"composition, delta {len(private)} x {delta:.3g}). Release one, or split one budget." + caveats)


def _summarise_releases(records: Sequence[ReleaseRecord]) -> list[dict[str, Any]]:
    """Consecutive releases of one kind collapse to one entry with a count."""
    out: list[dict[str, Any]] = []
    for r in records:
        if out and out[-1]["kind"] == r.kind and out[-1]["sensitivity"] == r.sensitivity:
            out[-1]["count"] += 1
            continue
        out.append({"kind": r.kind, "first": r.name, "count": 1, "sensitivity": r.sensitivity,
                    "noise_multiplier": r.noise_multiplier, "noise_std": r.noise_std, "entries": r.entries})
    return out


def prepare_train(train: FeatureSet, config: TransferConfig, device: torch.device | str | None = None) -> PreparedFeatures:
    """Clip the training features and attach unit weights as ``config`` says (errors name
    the feature file)."""
    return prepare_features(
        train.features, train.labels, num_classes=train.num_classes, clip_norm=config.clip_norm,
        normalize=config.normalize_features, unit=config.unit, users=train.users, device=device,
        source=train.source or "training features",
    )


def train_prepared(prep: PreparedFeatures, config: TransferConfig, *, progress: bool = False,
                   keep_raw: bool = False, backbone: BackboneAccount | None = None) -> TransferRun:
    """Fit ``config.method`` on already prepared features (see ``train_transfer``);
    ``backbone``: the features' backbone account (``backbone_account``)."""
    if prep.clip_norm != config.clip_norm or prep.normalize != config.normalize_features or prep.unit != config.unit:
        raise ValueError("the prepared features were clipped with other settings than the config's")
    # N (the training units) is treated as public: it sets the default delta 1/(10 N)
    plan = plan_noise(config.privacy_spec(), max(1, num_releases(config)), num_units=prep.num_units)
    if config.method == "non-private":
        plan = dataclasses.replace(plan, num_releases=0)
    params = resolve_params(config, plan, prep.dim)
    t0 = time.perf_counter()
    if config.method == "non-private":
        model = fit_nonprivate(prep, params, progress=progress)
        records, seeded, raw, sampler = [], False, {}, ""
    else:
        mech = ReleaseMechanism(plan, seed=config.seed, keep_raw=keep_raw, secure=config.secure_noise)
        model = DP_METHODS[config.method][1](prep, params, mech, progress=progress)
        mech.check_complete()
        records, seeded, raw, sampler = list(mech.records), mech.seeded, mech.raw, mech.sampler_sentence
    seconds = time.perf_counter() - t0
    return TransferRun(
        config=config, params=params, model=model, plan=plan, releases=records, seeded=seeded,
        train_seconds=seconds, num_train=prep.num_examples, num_units=prep.num_units,
        num_clipped_features=prep.num_clipped, sampler=sampler, raw=raw, backbone=backbone,
    )


def evaluate(run: TransferRun, test: FeatureSet) -> float:
    """Top-1 of the run's model on ``test`` (features transformed exactly like training)."""
    x, _ = transform_features(test.features, run.config.clip_norm, run.config.normalize_features,
                              source=test.source)
    run.top1 = run.model.top1(x.to(run.model.weights.device), test.labels)
    return run.top1


def train_transfer(train: FeatureSet, config: TransferConfig, test: FeatureSet | None = None, *,
                   progress: bool = False, keep_raw: bool = False,
                   device: torch.device | str | None = None) -> TransferRun:
    """Train ``config.method`` on ``train`` and, if given, measure top-1 on ``test``.

    Privacy: for a DP method the returned model is (epsilon, delta)-DP with respect to
    adding or removing one unit (``config.unit``) of ``train`` (``run.epsilon_sentence``
    names accountant, delta, unit and relation) with the features held fixed; ``test``
    is only evaluated on. Where the backbone trained on these users, the statement says
    what it does not cover, or the total with a DP backbone (``run.backbone_total``), and
    a non-DP backbone is refused unless ``config.allow_nonprivate_init``
    (``InitProvenanceError`` naming the fix, ``dpemb.transfer.backbone``).
    """
    check_compatible(train, test)
    account = backbone_account(train.meta, private_run=config.is_private,
                               allow_nonprivate_init=config.allow_nonprivate_init)
    prep = prepare_train(train, config, device)
    run = train_prepared(prep, config, progress=progress, keep_raw=keep_raw, backbone=account)
    if test is not None:
        evaluate(run, test)
    return run


def sweep_epsilon(train: FeatureSet, test: FeatureSet, config: TransferConfig, epsilons: Sequence[float], *,
                  progress: bool = False, device: torch.device | str | None = None) -> list[TransferRun]:
    """One run per target epsilon (each its own fresh noise and its own accounting)."""
    check_compatible(train, test)
    cfgs = [dataclasses.replace(config, epsilon=float(eps), noise_multiplier=None, nonprivate=False)
            for eps in epsilons]
    account = None if not cfgs else backbone_account(
        train.meta, private_run=cfgs[0].is_private,
        allow_nonprivate_init=cfgs[0].allow_nonprivate_init)
    prep = prepare_train(train, config, device)
    runs = []
    for cfg in cfgs:
        run = train_prepared(prep, cfg, progress=progress, backbone=account)
        evaluate(run, test)
        runs.append(run)
    return runs


def check_compatible(train: FeatureSet, test: FeatureSet | None) -> None:
    """Test features must come from the same backbone and label set as the training ones."""
    if test is None:
        return
    tr, te = train.source or "the training features", test.source or "the test features"
    if test.dim != train.dim:
        raise DataError(f"{tr} has {train.dim}-dimensional features but {te} {test.dim}; extract both "
                        "with the same backbone and image size")
    if tuple(test.label_names) != tuple(train.label_names):
        raise DataError(f"{tr} and {te} have different label names; extract both from one dataset")


def holdout_split(fs: FeatureSet, fraction: float, seed: int = 0) -> tuple[FeatureSet, FeatureSet]:
    """Split by user (or by example when users are unknown) into train / held-out parts.

    The split is a public, seeded permutation of unit ids (no data-dependent choice), so
    no unit has examples on both sides.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"the held-out fraction must lie in (0, 1), got {fraction}")
    units = fs.users if fs.users is not None else np.arange(fs.num_examples)
    ids = np.unique(units)
    rng = np.random.default_rng(seed)
    held = set(rng.permutation(ids)[: max(1, int(round(fraction * len(ids))))].tolist())
    mask = np.isin(units, np.fromiter(held, dtype=units.dtype))
    return fs.subset(~mask), fs.subset(mask)

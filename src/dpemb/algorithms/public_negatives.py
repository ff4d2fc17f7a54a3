"""Public negatives: fixed extra rows of DP-FedEmb's fresh local head, one per identity of
a PUBLIC dataset, imprinted under the round's start model (``margin.imprint_``), trained and
discarded with the rest of the head (why: docs/MODELS.md, "Head").

Privacy: the rows are a function of the start model (the released, noised server model)
and of the public dataset alone. Each client's update stays a function of (start, public
data, its own users' data, its own key), so adding or removing one user still changes
one virtual client's update and the clipped sum's sensitivity is unchanged. The public
dataset itself is NOT protected: it must hold no private user (``dpemb train`` takes the
dataset's public split, and the run's report names its source and size as public input).
"""

from __future__ import annotations

import numpy as np
import torch

from dpemb.models.margin import imprint_


class PublicNegatives:
    """The public identities' rows for the fresh head, computed once per start model.

    ``images``: uint8 (n, C, H, W); ``labels``: identity of each image (any integers;
    each distinct value is one row, in sorted order). ``batch_size``: images per
    forward pass (performance only)."""

    def __init__(self, images: torch.Tensor, labels: np.ndarray | torch.Tensor, batch_size: int = 256):
        labels = torch.as_tensor(np.asarray(labels), dtype=torch.int64)
        if images.ndim != 4 or images.dtype != torch.uint8:
            raise ValueError(f"public negatives: expected uint8 images (n, C, H, W), got {images.dtype} "
                             f"{tuple(images.shape)}")
        if len(images) == 0 or len(images) != len(labels):
            raise ValueError(f"public negatives: {len(images)} images but {len(labels)} labels; give a "
                             "non-empty public dataset with one identity per image")
        if batch_size < 1:
            raise ValueError(f"public negatives: batch_size must be positive, got {batch_size}")
        ids, self.labels = torch.unique(labels, return_inverse=True)
        self.images = images
        self.num_identities = len(ids)
        self.batch_size = int(batch_size)
        self._start: torch.Tensor | None = None
        self._rows: torch.Tensor | None = None

    @classmethod
    def of(cls, dataset: object, device: torch.device | str = "cpu", batch_size: int = 256) -> "PublicNegatives":
        """From a ``UserDataset`` (images uint8 (N, H, W, C) and identity labels), its
        images moved to ``device`` once."""
        hwc = np.ascontiguousarray(np.asarray(dataset.images, dtype=np.uint8))  # type: ignore[attr-defined]
        images = torch.from_numpy(hwc).permute(0, 3, 1, 2).contiguous().to(device)
        return cls(images, np.asarray(dataset.labels), batch_size)  # type: ignore[attr-defined]

    @torch.no_grad()
    def rows(self, model: torch.nn.Module, start: torch.Tensor) -> torch.Tensor:
        """(identities, embedding_dim) unit rows under ``model``, which must hold the
        parameters ``start`` (the flat start vector; it keys the cache, so every client of
        a round reuses one computation and a new round recomputes)."""
        if self._rows is not None and self._start is not None and self._start.shape == start.shape \
                and self._start.device == start.device and torch.equal(self._start, start):
            return self._rows
        device = start.device
        was_training = model.training
        model.eval()
        try:
            embs = [model(self.images[i : i + self.batch_size].to(device, non_blocking=True).float().div_(255.0))
                    for i in range(0, len(self.images), self.batch_size)]
        finally:
            model.train(was_training)
        emb = torch.cat(embs)
        rows = imprint_(torch.zeros(self.num_identities, emb.shape[1], device=device, dtype=torch.float32),
                        emb.float(), self.labels.to(device))
        self._start, self._rows = start.detach().clone(), rows
        return rows

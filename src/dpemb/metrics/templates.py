"""Template features for IJB-style 1:1 verification (templates of several images).

A template's feature is the mean of its images' L2-normalised embeddings (with media ids:
per medium first, then the media with equal weight), L2-normalised again; two templates
are compared by the cosine of their features (docs/EVALUATION.md, "Template feature").
Pure numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpemb.data.dataset import DataError

__all__ = ["pool_templates"]


def _normalised(x: np.ndarray, what: str) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1)
    bad = ~(norms > 0) | ~np.isfinite(norms)
    if bad.any():
        raise DataError(f"{what} {int(np.flatnonzero(bad)[0])} has a zero or non-finite norm")
    return x / norms[:, None]


def pool_templates(embeddings: Any, template: Any, media: Any | None = None) -> np.ndarray:
    """Features ``(T, D)``, row t for template id t, of images ``embeddings (N, D)``
    whose template ids are ``template (N,)`` (integers 0..T-1, every one used) and,
    optionally, media ids ``media (N,)`` (any integers; a medium belongs to one
    template or is pooled within each template separately).
    """
    x = _normalised(np.asarray(embeddings, dtype=np.float64), "embedding row")
    t = np.asarray(template, dtype=np.int64)
    if x.ndim != 2 or t.shape != (x.shape[0],):
        raise DataError(f"template ids must have shape ({x.shape[0]},); got {t.shape}")
    n_t = int(t.max()) + 1 if t.size else 0
    if t.size == 0 or t.min() < 0 or np.unique(t).size != n_t:
        raise DataError("template ids must be 0..T-1, each with at least one image")
    if media is not None:
        md = np.asarray(media, dtype=np.int64)
        if md.shape != t.shape:
            raise DataError(f"media ids must have shape {t.shape}; got {md.shape}")
        groups, group_of = np.unique(np.stack([t, md], axis=1), axis=0, return_inverse=True)
        group_of = group_of.reshape(-1)
        sums = np.zeros((groups.shape[0], x.shape[1]))
        np.add.at(sums, group_of, x)
        x = sums / np.bincount(group_of, minlength=groups.shape[0])[:, None]
        t = groups[:, 0]
    sums = np.zeros((n_t, x.shape[1]))
    np.add.at(sums, t, x)
    return _normalised(sums / np.bincount(t, minlength=n_t)[:, None], "template")

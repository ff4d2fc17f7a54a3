"""Linear algebra on (batches of) symmetric matrices: symmetrise, PSD projection, solves.

These are post-processing steps applied to already-privatised statistics, so they
do not affect the privacy guarantee. All functions accept a single ``(d, d)``
matrix or a batch ``(..., d, d)`` and work in the input's dtype (float64 in dpemb's
transfer code).
"""

from __future__ import annotations

import torch
from torch import Tensor


def symmetrize(a: Tensor) -> Tensor:
    """``(A + A^T) / 2`` over the last two dimensions."""
    _check_square(a)
    return (a + a.transpose(-1, -2)) / 2


def project_psd(a: Tensor) -> Tensor:
    """The nearest (Frobenius) positive semi-definite matrix to ``symmetrize(a)``.

    Computed by an eigendecomposition with negative eigenvalues clipped to zero;
    batched over leading dimensions (one ``eigh`` call for all classes).
    """
    s = symmetrize(a)
    evals, evecs = torch.linalg.eigh(s)
    evals = evals.clamp_min(0)
    out = (evecs * evals.unsqueeze(-2)) @ evecs.transpose(-1, -2)
    return symmetrize(out)


def solve_regularized(a: Tensor, b: Tensor, reg: float) -> Tensor:
    """Solve ``(A + reg I) x = b`` for symmetric PSD ``A``, batched.

    ``a``: ``(..., d, d)``; ``b``: ``(..., d)`` (one right-hand side per matrix; a
    single matrix broadcasts over a batch of right-hand sides). Uses a Cholesky
    factorisation when ``A + reg I`` is positive definite and falls back to a
    least-squares (minimum-norm) solve when it is singular, e.g. ``reg = 0`` with
    fewer examples than features.
    """
    _check_square(a)
    if not reg >= 0:
        raise ValueError(f"regularisation must be >= 0, got {reg}")
    d = a.shape[-1]
    if b.shape[-1] != d:
        raise ValueError(f"right-hand side has {b.shape[-1]} entries for {d}x{d} matrices")
    m = a + reg * torch.eye(d, dtype=a.dtype, device=a.device)
    rhs = b.unsqueeze(-1)
    chol, info = torch.linalg.cholesky_ex(m)
    if bool((info == 0).all()):
        x = torch.cholesky_solve(rhs, chol)
    else:
        m = m.expand(*rhs.shape[:-2], d, d) if m.ndim < rhs.ndim else m
        x = torch.linalg.lstsq(m, rhs, driver="gelsd" if m.device.type == "cpu" else None).solution
    return x.squeeze(-1)


class Preconditioner:
    """``x -> (A + reg I)^{-1} x`` with ``A`` factorised once (DP-FC's shared matrix)."""

    def __init__(self, a: Tensor, reg: float) -> None:
        _check_square(a)
        if a.ndim != 2:
            raise ValueError("Preconditioner takes one (d, d) matrix")
        if not reg > 0:
            raise ValueError(f"the preconditioner needs reg > 0 to be invertible, got {reg}")
        d = a.shape[-1]
        m = a + reg * torch.eye(d, dtype=a.dtype, device=a.device)
        self._chol = torch.linalg.cholesky(m)

    def apply(self, g: Tensor) -> Tensor:
        """``g``: ``(k, d)`` row vectors (e.g. one gradient per class) -> ``(k, d)``."""
        return torch.cholesky_solve(g.T, self._chol).T


def _check_square(a: Tensor) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"expected square matrices (..., d, d), got shape {tuple(a.shape)}")

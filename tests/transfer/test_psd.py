"""PSD projection and regularised solves against independent numpy computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpemb.transfer.psd import Preconditioner, project_psd, solve_regularized, symmetrize


def _nearest_psd_numpy(a: np.ndarray) -> np.ndarray:
    s = (a + a.T) / 2
    vals, vecs = np.linalg.eigh(s)
    return (vecs * np.maximum(vals, 0)) @ vecs.T


def test_project_psd_matches_numpy_and_is_psd_batched():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(3, 12, 12))
    out = project_psd(torch.from_numpy(a)).numpy()
    for i in range(3):
        np.testing.assert_allclose(out[i], _nearest_psd_numpy(a[i]), atol=1e-10)
        assert np.linalg.eigvalsh(out[i]).min() > -1e-10
        np.testing.assert_allclose(out[i], out[i].T)


def test_project_psd_keeps_a_psd_matrix():
    rng = np.random.default_rng(1)
    b = rng.normal(size=(8, 5))
    g = b @ b.T
    np.testing.assert_allclose(project_psd(torch.from_numpy(g)).numpy(), g, atol=1e-10)


def test_symmetrize_rejects_non_square():
    with pytest.raises(ValueError, match="square"):
        symmetrize(torch.zeros(3, 4))


def test_solve_regularized_matches_numpy_and_handles_singular():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 10))  # rank 4 < 10
    a = np.stack([x.T @ x, np.eye(10)])
    b = rng.normal(size=(2, 10))
    got = solve_regularized(torch.from_numpy(a), torch.from_numpy(b), 0.5).numpy()
    for i in range(2):
        np.testing.assert_allclose(got[i], np.linalg.solve(a[i] + 0.5 * np.eye(10), b[i]), rtol=1e-9)
    # reg = 0 on a singular matrix: minimum-norm least squares
    got0 = solve_regularized(torch.from_numpy(a[:1]), torch.from_numpy(b[:1]), 0.0).numpy()[0]
    np.testing.assert_allclose(got0, np.linalg.pinv(a[0]) @ b[0], atol=1e-8)


def test_preconditioner_applies_the_inverse_to_every_row():
    rng = np.random.default_rng(3)
    m = rng.normal(size=(6, 6))
    a = m @ m.T
    g = rng.normal(size=(3, 6))
    got = Preconditioner(torch.from_numpy(a), 0.1).apply(torch.from_numpy(g)).numpy()
    np.testing.assert_allclose(got, np.linalg.solve(a + 0.1 * np.eye(6), g.T).T, rtol=1e-9)
    with pytest.raises(ValueError, match="reg > 0"):
        Preconditioner(torch.from_numpy(a), 0.0)

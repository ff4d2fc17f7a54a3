"""BandMF's strategy C (banded inverse square root) and the noise it leaves on the model, in
NumPy so that accounting stays free of torch (docs/PRIVACY.md, "BandMF", "Which b")."""

from __future__ import annotations

import math

import numpy as np

from dpemb.privacy._checks import positive_int
from dpemb.privacy.spec import PrivacySpec


def banded_sqrt_coefficients(bands: int, rounds: int | None = None, *, normalize: bool = True) -> list[float]:
    """The strategy's coefficients c_0..c_{m-1}, m = min(bands, rounds) (rounds None: bands).

    c_k are the coefficients of (1 - x)^(-1/2): c_0 = 1, c_k = c_{k-1} (2k - 1) / (2k)
    (1, 1/2, 3/8, 5/16, ...). ``normalize``: divided by sqrt(sum c_k^2), the largest column
    norm of the strategy, which is then 1.
    """
    b = positive_int("bands (b)", bands)
    m = b if rounds is None else min(b, positive_int("rounds", rounds))
    coeffs = [1.0]
    for k in range(1, m):
        coeffs.append(coeffs[-1] * (2 * k - 1) / (2 * k))
    if normalize:
        norm = math.sqrt(sum(c * c for c in coeffs))
        coeffs = [c / norm for c in coeffs]
    return coeffs


def prefix_noise_rms(coefficients: list[float], rounds: int) -> float:
    """The noise the released sums accumulate, in units of sigma: the RMS over rounds
    t = 1..T of the std of the sum of rounds 1..t's noise, ||row t of A C^{-1}|| for the
    prefix-sum workload A (what SGD on the noised sums adds to the model, before the
    learning rate). One band: sqrt((T + 1) / 2). Computed in O(T b) from C^{-1}'s
    coefficients (the impulse response of the recurrence ``BandMFNoise`` streams), without
    forming a T x T matrix."""
    from scipy.signal import lfilter

    n = positive_int("rounds", rounds)
    impulse = np.zeros(n)
    impulse[0] = 1.0
    inverse = lfilter([1.0], np.asarray(coefficients[:n], dtype=np.float64), impulse)  # C^{-1}'s column 0
    return float(np.sqrt(np.mean(np.cumsum(np.cumsum(inverse) ** 2))))


def model_noise(spec: PrivacySpec) -> float:
    """The noise the averaged updates accumulate, per coordinate in units of C: z x sensitivity
    / M x ``prefix_noise_rms`` of b bands (1: Gaussian). Lower is better at equal epsilon."""
    rms = prefix_noise_rms(banded_sqrt_coefficients(spec.bands, spec.rounds), spec.rounds)
    return spec.noise_on_average / spec.clip_norm * rms

"""The strategies C of the correlated-noise mechanisms (BandMF's banded inverse square root,
BLT's buffered Toeplitz), their min-separation sensitivity and the noise they leave on the
model, in NumPy so that accounting stays free of torch (docs/PRIVACY.md, "BandMF", "Which b",
"BLT"). A lower-triangular Toeplitz C is given as C(x) = numerator(x) / denominator(x) (BandMF:
its coefficients over 1; BLT: ``blt_polynomials``), and scipy's ``lfilter`` applies C or C^{-1}
in O(T x length) without forming a T x T matrix."""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.signal import lfilter

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


def prefix_noise_rms(coefficients: list[float], rounds: int, denominator: tuple[float, ...] = (1.0,)) -> float:
    """The noise the released sums accumulate, in units of sigma: the RMS over rounds
    t = 1..T of the std of the sum of rounds 1..t's noise, ||row t of A C^{-1}|| for the
    prefix-sum workload A (what SGD on the noised sums adds to the model, before the
    learning rate). One band: sqrt((T + 1) / 2). Computed in O(T b) from C^{-1}'s
    coefficients (the impulse response of the recurrence the noise streams), without forming
    a T x T matrix; C(x) = coefficients(x) / denominator(x)."""
    n = positive_int("rounds", rounds)
    inverse = lfilter(denominator, np.asarray(coefficients[:n], dtype=np.float64), _impulse(n))  # C^{-1} e_0
    return float(np.sqrt(np.mean(np.cumsum(np.cumsum(inverse) ** 2))))


def _impulse(n: int) -> np.ndarray:
    e = np.zeros(n)
    e[0] = 1.0
    return e


def blt_polynomials(theta: tuple[float, ...], omega: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q) with C(x) = P(x) / Q(x) for the BLT with buffer decays theta and output scales
    omega: C(x) = 1 + sum_i omega_i x / (1 - theta_i x), i.e. c_0 = 1, c_k = sum_i omega_i
    theta_i^(k-1). Q = prod_i (1 - theta_i x)."""
    def product(roots: list[float]) -> np.ndarray:
        poly = np.ones(1)
        for r in roots:
            poly = np.convolve(poly, [1.0, -r])
        return poly

    q = product(list(theta))
    p = q.copy()
    for i, w in enumerate(omega):
        p[1:] += w * product([t for j, t in enumerate(theta) if j != i])
    return p, q


def minsep_sensitivity(coefficients: np.ndarray, rounds: int, separation: int, participations: int | None = None,
                       denominator: tuple[float, ...] | np.ndarray = (1.0,)) -> float:
    """max ||C u|| over participation vectors u (0/1, entries at least ``separation`` apart, at
    most ``participations``, default ceil(T / b)) for a lower-triangular Toeplitz C(x) =
    coefficients(x) / denominator(x) of size T: with non-negative, non-increasing c_k the
    maximum is at u = e_0 + e_b + e_2b + ... (arXiv:2405.13763, Theorem 2; the tests check it
    against every pattern of small T). Refused (ValueError) for any other C. One participation
    changing a sum by at most Delta in L2 moves C X by at most Delta x this, whatever the
    directions (C^T C is entrywise non-negative)."""
    n, b = positive_int("rounds", rounds), positive_int("separation (b)", separation)
    k = math.ceil(n / b) if participations is None else min(positive_int("participations", participations),
                                                          math.ceil(n / b))
    num, den = np.asarray(coefficients, dtype=np.float64), np.asarray(denominator, dtype=np.float64)
    c = lfilter(num, den, _impulse(n))
    if np.any(c < 0) or np.any(np.diff(c) > 1e-12 * c[0]):
        raise ValueError("the min-separation sensitivity is computed for non-negative, non-increasing Toeplitz "
                         "coefficients only; this strategy has others")
    u = np.zeros(n)
    u[: k * b : b] = 1.0
    return float(np.linalg.norm(lfilter(num, den, u)))


@functools.lru_cache(maxsize=32)
def blt_strategy(rounds: int, separation: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(theta, omega) of the BLT used for T rounds with b-min-separation: the one of 1 or 2
    buffers minimising ``minsep_sensitivity`` x ``prefix_noise_rms`` (the noise on the model at
    equal epsilon: without amplification z depends on epsilon only), by Nelder-Mead from fixed
    starts (deterministic). Parametrised so that 0 <= theta < 1, omega >= 0, sum omega < 1: the
    coefficients are non-negative and non-increasing, as ``minsep_sensitivity`` needs. Public:
    computed from (T, b) alone, no data."""
    from scipy.optimize import minimize

    n, b = positive_int("rounds", rounds), positive_int("separation (b)", separation)

    def unpack(x: np.ndarray, d: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
        x = np.clip(x, -40.0, 40.0)
        theta = 1.0 / (1.0 + np.exp(-x[:d]))
        weights = np.exp(x[d + 1:] - x[d + 1:].max())
        omega = weights / weights.sum() / (1.0 + np.exp(-x[d]))
        return tuple(float(t) for t in theta), tuple(float(w) for w in omega)

    def loss(x: np.ndarray, d: int) -> float:
        p, q = blt_polynomials(*unpack(x, d))
        return math.log(minsep_sensitivity(p, n, b, denominator=q)) + math.log(prefix_noise_rms(p, n, tuple(q)))

    best: tuple[float, tuple[tuple[float, ...], tuple[float, ...]]] | None = None
    for start in ([4.0, 0.0, 0.0], [1.0, 5.0, 0.0, 0.0, 0.0]):
        d = (len(start) - 1) // 2
        fit = minimize(loss, np.array(start), args=(d,), method="Nelder-Mead",
                       options={"maxiter": 400 * len(start), "xatol": 1e-7, "fatol": 1e-10})
        if best is None or fit.fun < best[0]:
            best = (float(fit.fun), unpack(fit.x, d))
    return best[1]


def blt_sensitivity(rounds: int, separation: int, participations: int | None = None) -> float:
    """``minsep_sensitivity`` of the run's BLT, ``blt_strategy(rounds, separation)``, with at most
    ``participations`` (default ceil(T / b)): the scale its noise divides C by."""
    p, q = blt_polynomials(*blt_strategy(rounds, separation))
    return minsep_sensitivity(p, rounds, separation, participations, denominator=q)


def model_noise(spec: PrivacySpec) -> float:
    """The noise the averaged updates accumulate, per coordinate in units of C: z x sensitivity
    / M x ``prefix_noise_rms`` of the strategy normalised to sensitivity 1 (BandMF's b bands, 1:
    Gaussian; BLT's ``blt_strategy`` x its ``minsep_sensitivity``). Lower is better at equal
    epsilon."""
    if spec.mechanism == "blt":
        p, q = blt_polynomials(*blt_strategy(spec.rounds, spec.bands))
        rms = prefix_noise_rms(p, spec.rounds, tuple(q)) * blt_sensitivity(spec.rounds, spec.bands)
    else:
        rms = prefix_noise_rms(banded_sqrt_coefficients(spec.bands, spec.rounds), spec.rounds)
    return spec.noise_on_average / spec.clip_norm * rms

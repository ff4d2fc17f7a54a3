"""DP-LS: differentially private least squares on clipped features (Mehta et al. 2022).

Three Gaussian releases, equal budget (``dpemb.transfer.budget``), sensitivities from
``dpemb.transfer.statistics``:

1. the Gramian ``G = sum_i w_i x_i x_i^T`` (d, d): sensitivity ``C^2``;
2. the per-class Gramians ``A_l = sum_{y_i = l} w_i x_i x_i^T`` (K, d, d), released
   together: one unit touches at most its own classes' blocks, so the change of the
   whole stack has Frobenius norm <= ``sum w_i ||x_i||^2 <= C^2``;
3. the per-class sums ``b_l = sum_{y_i = l} w_i x_i`` (K, d): sensitivity ``C``.

Noise is independent on every entry of every class, including both triangles of a
Gramian: the full d x d noise matrix is a Gaussian mechanism on ``x x^T`` (Frobenius
norm ``||x||^2``), and symmetrising it afterwards leaves std ``z C^2`` on the diagonal
and ``z C^2 / sqrt(2)`` off it, which is what releasing the upper triangle with the
off-diagonal entries counted twice in the sensitivity would give. Post-processing (no
privacy cost): the noisy Gramians are symmetrised and projected to the PSD cone
(negative eigenvalues clipped to 0), then for every class ``(A_l + alpha G + lambda I)
theta_l = b_l`` is solved (the normal equations of a least-squares fit of target 1 on
class l and target 0 with weight ``alpha`` on every example). Prediction: ``argmax_l
theta_l . x``.

Privacy: (epsilon, delta)-DP for add/remove of one unit (example or user) with
rows clipped to C, from the 3-fold composition of the Gaussian mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

from .budget import ReleaseMechanism
from .prepare import PreparedFeatures
from .psd import project_psd, solve_regularized
from .result import LinearModel
from .statistics import class_gramians, class_sums, gramian

NUM_RELEASES = 3


@dataclass(frozen=True)
class DpLsParams:
    """``reg``: lambda (absolute, in the units of summed squared features);
    ``alpha``: weight of the Gramian (the target-0 term for every example)."""

    reg: float
    alpha: float = 1.0

    def __post_init__(self) -> None:
        if not self.reg >= 0:
            raise ValueError(f"dp-ls: reg must be >= 0, got {self.reg}")
        if not self.alpha >= 0:
            raise ValueError(f"dp-ls: alpha must be >= 0, got {self.alpha}")


def num_releases(steps: int | None = None) -> int:
    """Always 3 (``steps`` is ignored: DP-LS is one closed-form solve)."""
    return NUM_RELEASES


def fit_dp_ls(prep: PreparedFeatures, params: DpLsParams, mech: ReleaseMechanism,
              progress: bool = False) -> LinearModel:
    """Fit DP-LS (module docstring); ``progress`` is accepted for a uniform signature."""
    g_noisy = mech.release("gramian", gramian(prep))
    a_noisy = mech.release("class_gramians", class_gramians(prep))
    b_noisy = mech.release("class_sums", class_sums(prep))
    lhs = project_psd(a_noisy) + params.alpha * project_psd(g_noisy).unsqueeze(0)
    theta = solve_regularized(lhs, b_noisy, params.reg)
    return LinearModel.with_fixed_bias(theta, 0.0)

"""An audit run: canary users inside federated training, and the audit it reports.

``dpemb train ... --audit-canaries N`` trains ONCE with N canary users added
(``dpemb.privacy.canaries``: keyed directions, fair-coin inclusion, sampled by the
run's own Poisson sampler, clipped and noised with the real clients) and reports,
beside the accounted epsilon,

- the one-shot empirical epsilon ESTIMATE (Andrew et al. 2023; not a bound), with a
  bootstrap interval, and
- a LOWER bound at 95% confidence (Steinke, Nasr, Jagielski 2023, best of a fixed grid
  of guess counts, paid for by a union bound),

both at the run's delta (``dpemb.privacy.audit``).

Accounting: the canaries are users. The spec's population is the N real users plus
the canaries, so the sampling rate q = M K / (N + n) and the default delta follow
from it, the sampler draws real users and canaries alike, and the reported epsilon
covers every real user and every canary. The run is an AUDIT run: its model moved
along the canaries' directions and, by default, is marked "not for release"; train
the production model as a separate run with the same settings without canaries (or
release the audit run deliberately, ``release=True``: the epsilon covers it).

Supported: the Gaussian mechanism with Poisson sampling and a fixed clip (the
estimators assume independent fair-coin inclusion and participation at the
accountant's rate); tree aggregation, fixed/epoch sampling and adaptive clipping are
refused. An audit run cannot be resumed (the canary state is not checkpointed).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector

from dpemb.atomic import atomic_write_json
from dpemb.privacy.audit import estimate_epsilon_gaussian, one_run_lower_bound_grid
from dpemb.privacy.canaries import DEFAULT_NORM_FACTOR, CanaryClients, needs_host
from dpemb.privacy.clipping import ClipAndSum, ClippedSum
from dpemb.privacy.relations import describe_relation
from dpemb.privacy.spec import PrivacySpec

CONFIDENCE = 0.95
N_BOOTSTRAP = 1000
MIN_CANARIES = 20
#: guesses of the lower bound, as fractions of the canaries: "in" for the top k only,
#: and "in" for the top k with "out" for the bottom k (all at once, union bound)
TOP_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.45)
BOTH_FRACTIONS = (0.05, 0.1, 0.2, 0.3, 0.45)
PRIVATE_FILE = "audit_canaries.json"

NOT_FOR_RELEASE = (
    "audit run: not for release. Its model carries the canaries' updates; train the production model "
    "as a separate run with the same settings and no canaries (its epsilon is the reported one)"
)
RELEASED = (
    "audit run released by choice: the reported epsilon covers the real users and the canary users "
    "alike (they are users of the accounted population)"
)


class AuditError(ValueError):
    """An audit the run cannot do (unsupported mechanism, too few canaries, resume)."""


def check_audit(n: int, spec: PrivacySpec, *, resume: Any = False) -> None:
    """Refuse an audit the canaries' assumptions do not hold for (AuditError)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < MIN_CANARIES:
        raise AuditError(f"an audit needs at least {MIN_CANARIES} canaries (an integer), got {n!r}")
    if spec.nonprivate:
        raise AuditError("an audit compares with the reported epsilon; a non-private run has none")
    if spec.mechanism != "gaussian" or spec.sampling != "poisson":
        raise AuditError(
            "audit canaries need the Gaussian mechanism with Poisson sampling (the estimators assume canaries "
            f"sampled independently at the accountant's rate); got {spec.mechanism} noise with "
            f"{spec.sampling} sampling")
    if spec.adaptive_clipping is not None:
        raise AuditError("audit canaries with adaptive clipping are not supported (the canaries would move the clip)")
    if resume:
        raise AuditError("an audit run cannot be resumed (the canary state is not checkpointed); run it again")


def k_grid(n: int) -> list[tuple[int, int]]:
    """The (k_pos, k_neg) guess counts tried, fixed before the scores are seen."""
    grid = {(max(1, int(n * f)), 0) for f in TOP_FRACTIONS}
    grid |= {(max(1, int(n * f)), max(1, int(n * f))) for f in BOTH_FRACTIONS if 2 * max(1, int(n * f)) <= n}
    return sorted(grid)


class AuditRun:
    """The canaries of one federated run, from the first round to the audit record.

    ``num_real_users`` real users are users 0..N-1 of ``spec.population`` = N + n; the
    rest are the canaries. ``server_params`` are the aggregated parameters (their
    values now are the initial model the score is measured from).
    """

    def __init__(
        self,
        n: int,
        spec: PrivacySpec,
        num_real_users: int,
        server_params: Sequence[torch.nn.Parameter],
        *,
        seed: int | None = None,
        resume: Any = False,
        release: bool = False,
        norm_factor: float = DEFAULT_NORM_FACTOR,
    ) -> None:
        check_audit(n, spec, resume=resume)
        if spec.population != num_real_users + n:
            raise AuditError(f"the population ({spec.population}) must be the real users ({num_real_users}) "
                             f"plus the canaries ({n})")
        self.spec = spec
        self.release = bool(release)
        self.initial = parameters_to_vector(server_params).detach().to("cpu", torch.float64).clone()
        self.canaries = CanaryClients(
            int(n), self.initial.numel(), first_user=num_real_users,
            host=needs_host(spec.users_per_client, spec.relation), seed=seed, norm_factor=norm_factor,
        )
        self._picked = np.zeros(0, dtype=np.int64)

    def real_slots(self, slots: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The round's clients without the canary users (remembered for ``contribute``)."""
        real, self._picked = self.canaries.split_round(slots, self.spec.users_per_client)
        return real

    def contribute(self, accumulator: ClipAndSum) -> ClippedSum:
        """Add the round's canary clients to the run's clip-and-sum; the clipped sum with them."""
        return self.canaries.contribute(accumulator, self._picked)

    def finish(self, server_params: Sequence[torch.nn.Parameter], privacy: dict[str, Any],
               private_dir: Any) -> dict[str, Any]:
        """Score the canaries, write them to ``private_dir`` and return the RELEASED record."""
        final = parameters_to_vector(server_params).detach().to("cpu", torch.float64)
        scores = self.canaries.scores(self.initial - final)
        inc = self.canaries.included
        delta = self.spec.resolved_delta
        record: dict[str, Any] = {
            "kind": "white-box canary users (user level, one run)",
            "canaries": self.canaries.n,
            "population": {"real_users": self.canaries.first_user, "canary_users": self.canaries.n,
                           "accounted": self.spec.population},
            "participation": (f"Poisson at the run's per-user rate q = {self.spec.sampling_rate:.4g} (the canaries "
                              "are users of the sampled population)"),
            "canary_update": (f"a fixed random direction of norm {self.canaries.norm_factor:g} x C, its own client"
                              + ("; a host client sends the opposite direction when the canary is absent "
                                 "(sensitivity 2C)" if self.canaries.host else "")),
            "score": "cosine between the canary's direction and the model's move (initial - final)",
            "delta": delta, "confidence": CONFIDENCE,
        }
        estimate = lower = None
        if inc.sum() >= 2 and (~inc).sum() >= 2:
            try:
                estimate = estimate_epsilon_gaussian(scores[inc], scores[~inc], delta, n_bootstrap=N_BOOTSTRAP,
                                                     ci_level=CONFIDENCE, seed=self.canaries.bootstrap_seed())
            except ValueError:  # zero spread: no estimate
                estimate = None
            lower = one_run_lower_bound_grid(scores, inc, k_grid(self.canaries.n), delta, CONFIDENCE)
        reported = privacy.get("epsilon_rdp")
        record.update({
            "epsilon_estimate": estimate.epsilon if estimate else None,
            "epsilon_estimate_ci": list(estimate.epsilon_ci) if estimate and estimate.epsilon_ci else None,
            "mu_estimate": estimate.mu if estimate else None,
            "estimate_method": estimate.method if estimate else None,
            "epsilon_lower_bound": lower.epsilon_lower if lower else None,
            "guesses": lower.guesses if lower else None, "correct_guesses": lower.correct if lower else None,
            "lower_bound_method": lower.method if lower else None,
            "epsilon_reported": reported, "epsilon_reported_accountant": "rdp",
            "epsilon_pld": privacy.get("epsilon_pld"),
        })
        record["lower_bound_exceeds_reported"] = bool(
            lower is not None and reported is not None and lower.epsilon_lower > reported)
        record["statement"] = statement(record, self.spec)
        record["release"] = RELEASED if self.release else NOT_FOR_RELEASE
        atomic_write_json(
            private_dir / PRIVATE_FILE,
            {**self.canaries.state(), "scores": scores.tolist(), "k_grid": k_grid(self.canaries.n)},
            private=True,
        )
        return record


def _f(x: float | None) -> str:
    return "n/a" if x is None else ("inf" if math.isinf(x) else f"{x:.2f}")


def statement(record: dict[str, Any], spec: PrivacySpec) -> str:
    """The console and report line: estimate, lower bound and reported epsilon side by side."""
    ci = record.get("epsilon_estimate_ci")
    pct = f"{100 * CONFIDENCE:g}%"
    text = (f"empirical epsilon (one-shot estimate) {_f(record['epsilon_estimate'])}"
            + (f" [{pct} bootstrap {_f(ci[0])}-{_f(ci[1])}]" if ci else "")
            + f"; lower bound {_f(record['epsilon_lower_bound'])} at {pct} confidence"
            + f"; reported epsilon {_f(record['epsilon_reported'])} (RDP, delta = {spec.resolved_delta:.3g}, "
            + f"{spec.unit}-level, {describe_relation(spec.relation, spec.unit)}); {record['canaries']} canaries")
    if record.get("lower_bound_exceeds_reported"):
        text += (". WARNING: the lower bound exceeds the reported epsilon: the mechanism does not deliver its "
                 f"epsilon (or an event of probability <= {1 - CONFIDENCE:.2g} happened)")
    return text

"""The privacy section of a federated run's report and model card: every epsilon with
its accountant, delta, unit of privacy and neighbouring relation, the extrapolations to
larger populations, adaptive clipping's public clip norms, and the dp_accounting event
the epsilons are of (``dp_event``, ``events.event_to_dict``; for tree aggregation the
PLD accountant's equivalent Gaussian form too, ``dp_event_pld``). Only what the guarantee
covers: the spec, the ledger's rounds and public knobs, never a private statistic."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dpemb.privacy.accounting import (
    PrivacyLedger,
    PrivacySpec,
    PrivacySpecError,
    describe_epsilon,
    extrapolate,
    supported_accountants,
)
from dpemb.privacy.adaptive_clipping import AdaptiveClipState
from dpemb.privacy.events import event_to_dict
from dpemb.privacy.noise import describe_sampler
from dpemb.privacy.statements import NONPRIVATE_STATEMENT, describe_adaptive_clipping, describe_schedule
from dpemb.training.config import to_dict
from dpemb.training.round_log import PLD_MAX_RDP_EPSILON, epsilons

#: populations a finished run's epsilon is extrapolated to (the paper's convention)
EXTRAPOLATE_TO = (1_000_000, 10_000_000)


def adaptive_clipping_report(spec: PrivacySpec, clip_state: AdaptiveClipState | None) -> dict[str, Any]:
    """Adaptive clipping's knobs, the split of z and the clip norms (all public)."""
    a = spec.adaptive_clipping
    final = clip_state.clip_norm if clip_state is not None else None
    out: dict[str, Any] = {
        "target_quantile": a.target_quantile, "clip_learning_rate": a.learning_rate,
        "initial_clip_norm": spec.clip_norm, "final_clip_norm": final,
        "count_stddev": spec.count_stddev, "count_sensitivity": spec.count_sensitivity,
        "expected_reporting_clients": spec.expected_reporting_clients,
        "noise_multiplier_total": spec.noise_multiplier, "noise_multiplier_value": spec.value_noise_multiplier,
        "count_noised": not spec.nonprivate,
    }
    out["statement"] = (
        f"adaptive clipping: target quantile {a.target_quantile:g}, clip norm {spec.clip_norm:.4g}"
        + (f" -> {final:.4g}" if final is not None else "") + "; " + describe_adaptive_clipping(spec)
    )
    return out


def privacy_report(spec: PrivacySpec, ledger: PrivacyLedger, seeded: bool,
                   clip_state: AdaptiveClipState | None = None, *,
                   extrapolate_to: tuple[int, ...] = EXTRAPOLATE_TO, accountant: str = "rdp") -> dict[str, Any]:
    """Every epsilon with its accountant, delta, unit and neighbouring relation; and the
    epsilon (``accountant``'s) of the run extrapolated to each population of
    ``extrapolate_to`` larger than its own, labelled as an extrapolation."""
    out: dict[str, Any] = {"spec": to_dict(spec), "noise_seeded": seeded, "rounds_composed": ledger.rounds,
                           "dp_event": event_to_dict(ledger.dp_event())}
    if spec.adaptive_clipping is not None:
        out["adaptive_clipping"] = adaptive_clipping_report(spec, clip_state)
    if spec.nonprivate:
        out["statement"] = NONPRIVATE_STATEMENT
        return out
    out["noise_sampler"] = describe_sampler(spec.secure_noise, seeded)
    if "pld" in supported_accountants(spec) and ledger.dp_event("pld") != ledger.dp_event():
        out["dp_event_pld"] = event_to_dict(ledger.dp_event("pld"))
    kw = dict(delta=spec.resolved_delta, unit=spec.unit, relation=spec.relation, schedule=describe_schedule(spec))
    for a, eps in epsilons(ledger, spec).items():
        a = a.removeprefix("epsilon_")
        out[f"epsilon_{a}"] = eps
        out[f"statement_{a}"] = (
            describe_epsilon(eps, accountant=a, **kw) if eps is not None
            else f"{a.upper()} epsilon not computed ("
            + ("unsupported for this mechanism" if a not in supported_accountants(spec)
               else f"RDP epsilon exceeds {PLD_MAX_RDP_EPSILON:g}; the guarantee is vacuous") + ")"
        )
    spent = replace(spec, rounds=max(ledger.rounds, 1))
    out["extrapolated"] = []
    for n in sorted(set(extrapolate_to)):
        if n <= spec.population:
            continue
        try:
            ex = extrapolate(spent, n, accountant)
        except PrivacySpecError as e:  # the scaled noise multiplier leaves the accountant's range
            out["extrapolated"].append({"population": n, "statement": f"not extrapolated to {n:,} users: {e}"})
            continue
        out["extrapolated"].append({
            "population": n, "factor": ex.factor, "noise_multiplier": ex.noise_multiplier,
            "clients_per_round": ex.clients_per_round, f"epsilon_{accountant}": ex.epsilon, "accountant": accountant,
            "delta": ex.delta, "delta_note": ex.delta_note,
            "statement": describe_epsilon(ex.epsilon, accountant=accountant, **{**kw, "delta": ex.delta})
            + f" if {n:,} users took part with noise {spec.noise_multiplier:g} x {ex.factor:g} and "
              f"{ex.clients_per_round:,} clients per round (same noise on the average; {ex.delta_note})",
        })
    return out

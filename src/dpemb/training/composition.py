"""The total epsilon of a model and the DP models it was built from, on the same users.

When an init (``dpemb train --init RUN``) or a feature backbone (``dpemb transfer``) was
trained with user-level DP on the same users, the guarantee for the pair is their
COMPOSITION (docs/PRIVACY.md, "Initialisation provenance"; which composition
``composed_total`` uses: docs/PRIVACY.md, "composed_total"). Only for user-level
add/remove-one-user statements on both sides; otherwise the total is not stated, and the
statement says why.
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting

from dpemb.privacy import PrivacySpec, compute_epsilon, describe_epsilon
from dpemb.privacy.events import event_from_dict, supported_accountants
from dpemb.privacy.relations import Relation
from dpemb.privacy.statements import format_epsilon

#: a rebuilt mechanism must reproduce the card's epsilon this closely (relative)
REBUILD_TOLERANCE = 1e-2
#: the only unit and relation a total is stated for
UNIT, RELATION = "user", Relation.ADD_REMOVE


def composed_total(
    run_event: dp_accounting.DpEvent,
    *,
    run_epsilon: float,
    delta: float,
    accountant: str,
    unit: str,
    dp_models: tuple[dict[str, Any], ...],
    direct: dict[str, Any] | None,
    direct_privacy: dict[str, Any] | None,
    label: str,
    together: str,
) -> dict[str, Any] | None:
    """The total epsilon of this run (``run_event``, whose own epsilon is ``run_epsilon`` at
    ``delta``) and ``dp_models``: the provenances of the DP models of its chain that may
    have trained on its users (None when empty). ``direct``: the provenance of the direct
    init/backbone, ``direct_privacy`` its card's privacy section, when known; ``label``
    starts the statement and ``together`` names the pair."""
    if not dp_models:
        return None
    chain = [_statement(p) for p in dp_models]
    if unit != UNIT:
        return {"composition": None, "chain": chain, "statement": (
            f"no total stated: the earlier model's epsilon is user-level and this one {unit}-level, at "
            "different units; run with --unit user for one user-level total")}
    bad = [p for p in dp_models if not _user_add_remove(p)]
    if bad:
        return {"composition": None, "chain": chain, "statement": (
            f"no total stated: {_name(bad[0])} was trained under another unit or relation than "
            "user-level add/remove-one-user")}
    what = f"for {together} together"
    event = rebuilt_event(direct_privacy, accountant) if direct is not None and dp_models == (direct,) else None
    if event is not None:
        eps = compute_epsilon(dp_accounting.ComposedDpEvent([event, run_event]), delta, accountant,
                              relation=RELATION)
        return {"composition": "dp_accounting", "epsilon": eps, "delta": delta, "accountant": accountant,
                "chain": chain, "statement": (
                    f"{label}: " + describe_epsilon(eps, accountant=accountant, delta=delta, unit=UNIT,
                                                 relation=RELATION)
                    + f" {what} (one ledger: their mechanisms composed by dp_accounting)")}
    parts = [recorded_epsilon(p, accountant) for p in dp_models]
    missing = [p for p, r in zip(dp_models, parts) if r is None]
    if missing:
        return {"composition": None, "chain": chain,
                "statement": f"no total stated: {_name(missing[0])} records no epsilon"}
    eps = run_epsilon + sum(e for e, _ in parts)
    total_delta = delta + sum(d for _, d in parts)
    return {"composition": "basic", "epsilon": eps, "delta": total_delta, "accountant": accountant,
            "chain": chain, "statement": (
                f"{label}: epsilon = {format_epsilon(eps)} (delta = {total_delta:.3g}, user-level, "
                f"add/remove-one-user) {what} (basic composition: the sum of the epsilons and of the "
                "deltas, as the earlier mechanism could not be rebuilt from its model card)")}


def rebuilt_event(privacy: dict[str, Any] | None, accountant: str) -> dp_accounting.DpEvent | None:
    """A model's training mechanism from its card's privacy section (the ``dp_event`` it
    records, for PLD ``dp_event_pld`` where the tree has one), when that reproduces the
    card's own epsilon; else None."""
    sec = privacy or {}
    try:
        spec = PrivacySpec(**sec["spec"])
        recorded = float(sec[f"epsilon_{accountant}"])
        if spec.nonprivate or accountant not in supported_accountants(spec) or spec.relation != RELATION:
            return None
        event = event_from_dict(sec["dp_event_pld" if accountant == "pld" and "dp_event_pld" in sec else "dp_event"])
    except (KeyError, TypeError, ValueError):
        return None
    again = compute_epsilon(event, spec.resolved_delta, accountant, relation=spec.relation)
    return event if math.isclose(again, recorded, rel_tol=REBUILD_TOLERANCE) else None


def recorded_epsilon(p: dict[str, Any], accountant: str) -> tuple[float, float] | None:
    """(epsilon, delta) a DP model's provenance records (``accountant``'s if it has it, else RDP, else PLD)."""
    priv = p.get("privacy") if isinstance(p.get("privacy"), dict) else {}
    for key in (f"epsilon_{accountant}", "epsilon_rdp", "epsilon_pld"):
        eps = priv.get(key)
        if isinstance(eps, (int, float)) and math.isfinite(eps) and isinstance(priv.get("delta"), (int, float)):
            return float(eps), float(priv["delta"])
    return None


def _name(p: dict[str, Any]) -> str:
    return str(p.get("model") or "a model of the chain")


def _user_add_remove(p: dict[str, Any]) -> bool:
    priv = p.get("privacy")
    return isinstance(priv, dict) and priv.get("unit", UNIT) == UNIT and priv.get("relation") in (
        RELATION.value, None)


def _statement(p: dict[str, Any]) -> str:
    priv = p.get("privacy") if isinstance(p.get("privacy"), dict) else {}
    stmt = priv.get("statement_pld") or priv.get("statement_rdp") or "an epsilon it does not record"
    return f"{_name(p)}: {stmt}"

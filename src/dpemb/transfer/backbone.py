"""What a DP classifier's epsilon covers when the frozen backbone was trained on the same users.

A feature row is a function of its own image AND of the backbone. If the backbone (or
any model it was initialised from) was trained on users of the feature file, removing
one of them changes the backbone, hence every row: the classifier's epsilon, computed
for fixed features, does not cover that user. ``backbone_account`` applies the rule
``dpemb train --init`` applies (``dpemb.training.provenance.check_init``, role
"backbone") to the backbone recorded in a feature file's meta:

* trained WITHOUT DP (or not recorded whether) on users that may include the features'
  users: refused (``InitProvenanceError``) unless ``allow_nonprivate_init``, and then
  every epsilon carries "does NOT cover the backbone ...";
* trained WITH user-level DP on them: the backbone's epsilon composes with the
  classifier's; ``BackboneAccount.total`` states the total for a run, either by
  composing the two mechanisms with dp_accounting at the run's delta (the backbone's
  mechanism rebuilt from its model card's privacy spec, checked to reproduce the card's
  epsilon) or, where that is not possible, by basic composition (epsilons and deltas
  summed); only when both are user-level under add/remove-one-user;
* trained on other users: nothing to add.

"May include the features' users": known by content when ``dpemb features`` could read
the backbone run's private checkpoint (``meta["backbone_shared_users"]``: per model of
the chain, how many of the features' users it trained on; PRIVATE counts), else decided
by the split each model recorded (private, all or unknown: may; public: does not).
A feature file whose meta names no backbone (not written by ``dpemb features``) is
taken as the data itself: nothing to check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import dp_accounting

from dpemb.privacy.accounting import PrivacySpec, compute_epsilon, describe_epsilon, gaussian_releases_event
from dpemb.privacy.events import supported_accountants, training_event
from dpemb.privacy.relations import Relation
from dpemb.privacy.statements import format_epsilon
from dpemb.training.errors import pre_release
from dpemb.training.provenance import ancestors, check_init, included_ancestors

from .budget import NoisePlan

#: a rebuilt mechanism must reproduce the card's epsilon this closely (relative)
REBUILD_TOLERANCE = 1e-2
#: the only unit and relation a total is stated for (the backbone's and the classifier's)
UNIT, RELATION = "user", Relation.ADD_REMOVE


@dataclass(frozen=True)
class BackboneAccount:
    """The backbone's part in a transfer run's privacy (see the module docstring)."""

    name: str  # how the backbone is named in statements (its path)
    provenance: dict[str, Any]  # the backbone's provenance (its card's, with its init chain)
    caveats: tuple[str, ...]  # every epsilon of the run carries them
    chain: tuple[dict[str, Any], ...]  # released: per model, what it records and whether it saw these users
    dp_models: tuple[dict[str, Any], ...]  # DP models of the chain that may have trained on these users
    card_privacy: dict[str, Any] | None  # the backbone's own card privacy section (its spec), when recorded
    shared_users: tuple[int | None, ...] | None  # PRIVATE: per model, how many of the features' users

    def qualify(self, sentence: str) -> str:
        """``sentence`` (an epsilon statement) with every caveat appended."""
        return sentence + "".join(f" [{c}]" for c in self.caveats)

    def total(self, plan: NoisePlan) -> dict[str, Any] | None:
        """The total epsilon of the backbone's DP training and this run together (None when
        no DP model of the chain saw these users, or the run is not private)."""
        if not self.dp_models or plan.nonprivate:
            return None
        backbone = [_statement(p) for p in self.dp_models]
        if plan.unit != UNIT:
            return {"composition": None, "backbone": backbone, "statement": (
                "no total stated: the backbone's epsilon is user-level and this one example-level, at different "
                "units; run with --unit user for one user-level total")}
        bad = [p for p in self.dp_models if not _user_add_remove(p)]
        if bad:
            return {"composition": None, "backbone": backbone, "statement": (
                f"no total stated: {_name(bad[0])} was trained under another unit or relation than "
                "user-level add/remove-one-user")}
        # one ledger when the only DP model is the backbone itself, whose card holds its spec
        event = self._event(plan.accountant) if self.dp_models == (self.provenance,) else None
        if event is not None:
            run = gaussian_releases_event(plan.noise_multiplier, plan.num_releases)
            eps = compute_epsilon(dp_accounting.ComposedDpEvent([event, run]), plan.delta, plan.accountant,
                                  relation=RELATION)
            return {"composition": "dp_accounting", "epsilon": eps, "delta": plan.delta, "accountant": plan.accountant,
                    "backbone": backbone, "statement": (
                        "total with the backbone: " + describe_epsilon(eps, accountant=plan.accountant,
                                                                       delta=plan.delta, unit=UNIT, relation=RELATION)
                        + " for the backbone's training and this classifier together (one ledger: their "
                          "mechanisms composed by dp_accounting)")}
        parts = [_recorded(p, plan.accountant) for p in self.dp_models]
        missing = [p for p, r in zip(self.dp_models, parts) if r is None]
        if missing:
            return {"composition": None, "backbone": backbone,
                    "statement": f"no total stated: {_name(missing[0])} records no epsilon"}
        eps = plan.epsilon + sum(e for e, _ in parts)
        delta = plan.delta + sum(d for _, d in parts)
        return {"composition": "basic", "epsilon": eps, "delta": delta, "accountant": plan.accountant,
                "backbone": backbone, "statement": (
                    f"total with the backbone: epsilon = {format_epsilon(eps)} (delta = {delta:.3g}, user-level, "
                    "add/remove-one-user) for the backbone's training and this classifier together (basic "
                    "composition: the sum of the epsilons and of the deltas, as the backbone's mechanism "
                    "could not be rebuilt from its model card)")}

    def _event(self, accountant: str) -> dp_accounting.DpEvent | None:
        """The backbone's training mechanism rebuilt from its card's privacy spec, when that
        reproduces the card's own epsilon; else None (basic composition)."""
        sec = self.card_privacy or {}
        try:
            spec = PrivacySpec(**sec["spec"])
            rounds = int(sec["rounds_composed"])
            recorded = float(sec[f"epsilon_{accountant}"])
        except (KeyError, TypeError, ValueError):
            return None
        if spec.nonprivate or accountant not in supported_accountants(spec) or spec.relation != RELATION:
            return None
        event = training_event(spec, rounds, accountant=accountant)
        again = compute_epsilon(event, spec.resolved_delta, accountant, relation=spec.relation)
        return event if math.isclose(again, recorded, rel_tol=REBUILD_TOLERANCE) else None

    def to_dict(self, plan: NoisePlan | None = None) -> dict[str, Any]:
        """RELEASED: the chain (no counts), the caveats and, for ``plan``, the total."""
        out: dict[str, Any] = {"model": self.name, "chain": [dict(c) for c in self.chain],
                               "caveats": list(self.caveats)}
        if plan is not None and (t := self.total(plan)) is not None:
            out["total"] = t
        return out

    def private(self) -> dict[str, Any]:
        """PRIVATE: how many of the features' users each model of the chain trained on."""
        return {"backbone_shared_users": None if self.shared_users is None else list(self.shared_users)}


def _name(p: dict[str, Any]) -> str:
    return str(p.get("model") or "a model of the backbone's chain")


def _user_add_remove(p: dict[str, Any]) -> bool:
    priv = p.get("privacy")
    return isinstance(priv, dict) and priv.get("unit", UNIT) == UNIT and priv.get("relation") in (
        RELATION.value, None)


def _statement(p: dict[str, Any]) -> str:
    priv = p.get("privacy") if isinstance(p.get("privacy"), dict) else {}
    stmt = priv.get("statement_pld") or priv.get("statement_rdp") or "an epsilon it does not record"
    return f"{_name(p)}: {stmt}"


def _recorded(p: dict[str, Any], accountant: str) -> tuple[float, float] | None:
    """(epsilon, delta) a DP model records (the run's accountant if it has it, else RDP)."""
    priv = p.get("privacy") if isinstance(p.get("privacy"), dict) else {}
    for key in (f"epsilon_{accountant}", "epsilon_rdp", "epsilon_pld"):
        eps = priv.get(key)
        if isinstance(eps, (int, float)) and math.isfinite(eps) and isinstance(priv.get("delta"), (int, float)):
            return float(eps), float(priv["delta"])
    return None


def backbone_account(meta: dict[str, Any], *, private_run: bool, allow_nonprivate_init: bool) -> BackboneAccount | None:
    """The backbone's part in a run on features with this ``meta`` (None: no trained
    backbone recorded, or an ImageNet one). Raises ``InitProvenanceError`` (a ValueError
    naming the fix) for a non-DP backbone that may have seen these users, unless
    ``allow_nonprivate_init``."""
    if meta.get("backbone") != "model":
        return None
    name = str(meta.get("model") or "of these features")
    prov = meta.get("backbone_provenance")
    if not isinstance(prov, dict):
        raise pre_release(f"this feature file (backbone {name})",
                          "extract the features again with this dpemb (`dpemb features`)")
    counts = meta.get("backbone_shared_users")
    counts = tuple(counts) if isinstance(counts, list) else None
    shared = None if counts is None else [None if c is None else c > 0 for c in counts]
    caveats = check_init(prov, private_run=private_run, allow_nonprivate_init=allow_nonprivate_init,
                         init_name=name, role="backbone", shared=shared)
    included = {depth for depth, _ in included_ancestors(prov, shared)}
    chain = []
    for depth, p in enumerate(ancestors(prov)):
        known = shared[depth] if shared is not None and depth < len(shared) else None
        chain.append({
            "model": p.get("model"), "algorithm": p.get("algorithm"), "train_split": p.get("train_split", "unknown"),
            "private_training": p.get("private_training"),
            "trained_on_these_users": "unknown" if known is None else ("yes" if known else "no"),
            "counted_as_training_on_them": depth in included,
        })
    dp_models = tuple(p for depth, p in enumerate(ancestors(prov)) if depth in included and p.get("private_training"))
    card_privacy = meta.get("backbone_privacy") if isinstance(meta.get("backbone_privacy"), dict) else None
    return BackboneAccount(name=name, provenance=prov, caveats=tuple(caveats), chain=tuple(chain), dp_models=dp_models,
                           card_privacy=card_privacy, shared_users=counts)

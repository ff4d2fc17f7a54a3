"""What a DP classifier's epsilon covers when the frozen backbone was trained on the same users.

Removing a user the backbone (or a model it was initialised from) trained on changes every
feature row, so the classifier's epsilon, computed for fixed features, does not cover that
user. ``backbone_account`` applies ``dpemb.training.provenance.check_init`` (role "backbone")
to the backbone in a feature file's meta: trained WITHOUT DP (or not recorded whether) on
users that may include the features' users, it is refused (``InitProvenanceError``) unless
``allow_nonprivate_init``, and every epsilon then says "does NOT cover the backbone ...";
trained WITH user-level DP on them, ``BackboneAccount.total`` composes the two epsilons (only
when both are user-level, add/remove-one-user). The cases, the two compositions and how the
shared users are known (``meta["backbone_shared_users"]``: PRIVATE counts): docs/TRANSFER.md,
"Backbones trained on the same users".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpemb.privacy import gaussian_releases_event
from dpemb.training.composition import composed_total
from dpemb.training.errors import pre_release
from dpemb.training.provenance import ancestors, check_init, included_ancestors

from .budget import NoisePlan


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
        no DP model of the chain saw these users, or the run is not private); see
        ``dpemb.training.composition``."""
        if plan.nonprivate:
            return None
        return composed_total(
            gaussian_releases_event(plan.noise_multiplier, plan.num_releases), run_epsilon=plan.epsilon,
            delta=plan.delta, accountant=plan.accountant, unit=plan.unit, dp_models=self.dp_models,
            direct=self.provenance, direct_privacy=self.card_privacy, label="total with the backbone",
            together="the backbone's training and this classifier")

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

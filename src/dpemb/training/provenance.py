"""Training provenance: which users a model saw, whether privately, and from what init.

A run records a ``provenance`` dict in its checkpoint and its model card (its fields, and
the rule also for a feature file's frozen backbone: docs/PRIVACY.md, "Initialisation
provenance"). A DP run's epsilon covers ITS training only: ``check_init`` refuses an init
trained without DP on private users unless allowed, and ``qualify_privacy`` puts the caveat
into every privacy statement.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterator

TRAIN_SPLITS = ("private", "public", "all", "unknown")


@dataclass(frozen=True)
class Provenance:
    """What the training loop cannot know by itself: where its data came from.

    ``dataset``: the dataset trained on (the CLI passes ``--data``). ``train_split``:
    which of its users: "private" (the default split of ``dpemb train``), "public",
    "all" (both), or "unknown" (a library caller that did not say; treated like
    private users when this model initialises a DP run). ``allow_nonprivate_init``:
    let a DP run start from a model that saw private users without DP (every privacy
    statement then says that it does not cover the initialisation).
    """

    dataset: str | None = None
    train_split: str = "unknown"
    allow_nonprivate_init: bool = False

    def __post_init__(self) -> None:
        if self.train_split not in TRAIN_SPLITS:
            raise ValueError(f"train_split must be one of {', '.join(TRAIN_SPLITS)}, got {self.train_split!r}")
        if self.dataset is not None:
            object.__setattr__(self, "dataset", str(self.dataset))


class InitProvenanceError(ValueError):
    """A DP run would start from a model that saw private users without DP."""


def _is_local_path(value: str) -> bool:
    return os.path.isabs(value) or os.sep in value or value.startswith("~")


def source_summary(source: dict[str, Any] | None) -> dict[str, Any]:
    """The scalar fields of a dataset's ``source`` (kind, name, regime, counts) for a
    release: no lists, and no path on the curator's machine (an importer records where
    its manifest and images were; a release names the dataset, never where it lives)."""
    return {k: v for k, v in sorted((source or {}).items())
            if isinstance(v, (int, float, bool)) or v is None or (isinstance(v, str) and not _is_local_path(v))}


def dataset_name(dataset: str | os.PathLike | None) -> str | None:
    """How a release names a dataset given by its directory (``--data DIR[:part]``): the
    directory's own name, never the path to it."""
    if dataset is None:
        return None
    text = str(dataset)
    path, _, part = text.rpartition(":") if ":" in text and not os.path.exists(text) else (text, "", "")
    name = os.path.basename(os.path.normpath(path)) or path
    return f"{name}:{part}" if part else name


def compact_privacy(privacy: dict[str, Any]) -> Any:
    """The part of a privacy section an init's provenance keeps: the statements."""
    if not privacy.get("private", False):
        return "not private"
    out = {k: v for k, v in privacy.items() if k.startswith(("epsilon_", "statement_"))}
    out.update({k: privacy[k] for k in ("delta", "unit", "relation", "rounds_composed") if k in privacy})
    return out


def ancestors(init: Any) -> Iterator[dict[str, Any]]:
    """The provenance of the init, of its init, ... (dicts only: random/imagenet end it)."""
    while isinstance(init, dict):
        yield init
        init = init.get("init")


def _saw_private_users(p: dict[str, Any]) -> bool:
    return p.get("train_split", "unknown") in ("private", "all", "unknown")


def _users(p: dict[str, Any]) -> str:
    d = p.get("dataset") or "its (unrecorded) dataset"
    return {
        "private": f"the private users of {d}",
        "all": f"the private and public users of {d}",
    }.get(p.get("train_split", "unknown"), f"users of {d} it does not record (possibly private ones)")


def _who(p: dict[str, Any], depth: int, init_name: str, role: str) -> str:
    name = p.get("model") or "a model"
    if depth == 0:
        return f"--init {init_name}" if role == "initialisation" else f"the backbone {init_name}"
    return f"its ancestor {name} ({depth} init(s) up)"


def _epsilon_text(p: dict[str, Any]) -> str:
    """The init's own epsilon statement (RDP where it has one: defined for every mechanism)."""
    priv = p.get("privacy")
    if isinstance(priv, dict):
        stmts = {k: v for k, v in priv.items()
                 if k.startswith("statement_") and isinstance(v, str) and v.startswith("epsilon")}
        if stmts:
            return stmts.get("statement_rdp") or stmts[sorted(stmts)[0]]
    return "an epsilon it does not record"


#: the fix a refusal names, per role (what was trained without DP on the users)
_FIX = {
    "initialisation": ("a DP run started from it would report an epsilon that does not cover them. Pretrain on "
                       "public users (`dpemb train --algorithm centralized --train-split public ...`), or pass "
                       "--allow-nonprivate-init to proceed; every epsilon will then say it does not cover the "
                       "initialisation."),
    "backbone": ("removing one of them changes the backbone, hence every feature row, so a DP classifier on "
                 "these features would report an epsilon that does not cover them. Extract the features with "
                 "a backbone trained on public users (`dpemb train --algorithm centralized --train-split "
                 "public ...`) or with DP (`--algorithm dp-fedemb`), or pass --allow-nonprivate-init to "
                 "proceed; every epsilon will then say it does not cover the backbone."),
}


def included_ancestors(init: Any, shared: list[bool | None] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(depth, provenance) of the init/backbone and each ancestor that may have trained on
    the users at stake. ``shared[depth]``: whether that model's training users are known,
    by content (``dpemb.data.fingerprint``), to include them (True), to exclude them
    (False), or not known (None, or no list): then the recorded split decides (private,
    all or unknown: may include; public: does not)."""
    for depth, p in enumerate(ancestors(init)):
        known = shared[depth] if shared is not None and depth < len(shared) else None
        if known is True or (known is None and _saw_private_users(p)):
            yield depth, p


def check_init(init: Any, *, private_run: bool, allow_nonprivate_init: bool, init_name: str,
               role: str = "initialisation", shared: list[bool | None] | None = None) -> list[str]:
    """Refuse (``InitProvenanceError``) a DP run whose init, or any ancestor, was trained
    without DP (or not recorded whether) on a split holding private users (or not
    recorded which), unless ``allow_nonprivate_init``. Returns the caveats every privacy
    statement of the run must carry (empty when the run is not private or its init saw
    no private users).

    ``role`` "backbone": the same rule for the frozen backbone of a feature file
    (``dpemb transfer``), whose users are the features' users; ``shared`` says, per
    model of the chain, whether its training users are known to include them
    (``included_ancestors``): a re-import is recognised by content."""
    if role not in _FIX:
        raise ValueError(f"role must be one of {', '.join(_FIX)}, got {role!r}")
    if not private_run:
        return []
    caveats: list[str] = []
    for depth, p in included_ancestors(init, shared):
        who = _who(p, depth, init_name, role)
        users = _users(p)
        if shared is not None and depth < len(shared) and shared[depth]:
            users += ", among them users of these features (recognised by their images)"
        if not p.get("private_training", False):
            if not allow_nonprivate_init:
                if p.get("train_split", "unknown") == "unknown":
                    why = (f"{who} does not record which users it was trained on or whether privately "
                           "(a library call without a Provenance); it "
                           f"was trained without differential privacy on {users}")
                else:
                    why = f"{who} was trained without differential privacy on {users}"
                raise InitProvenanceError(f"{why}; {_FIX[role]}")
            caveats.append(f"does NOT cover the {role}: {who} was trained without differential privacy on {users}")
        else:
            caveats.append(
                f"covers this run's training only: {who} was itself trained with user-level DP on "
                f"{users} ({_epsilon_text(p)}), which composes on top of this epsilon"
            )
    return caveats


def qualify_privacy(privacy: Any, caveats: list[str]) -> Any:
    """``privacy`` (a report's privacy section) with every statement carrying the
    caveats, and the caveats listed under ``"initialisation"``. Idempotent."""
    if not caveats or not isinstance(privacy, dict) or "initialisation" in privacy:
        return privacy
    suffix = "".join(f" [{c}]" for c in caveats)
    out = dict(privacy)
    for k, v in privacy.items():
        if (k == "statement" or k.startswith("statement_")) and isinstance(v, str) and "epsilon" in v:
            out[k] = v + suffix
    if isinstance(privacy.get("extrapolated"), list):
        out["extrapolated"] = [
            {**ex, "statement": ex["statement"] + suffix} if isinstance(ex, dict) and "statement" in ex else ex
            for ex in privacy["extrapolated"]
        ]
    out["initialisation"] = list(caveats)
    return out

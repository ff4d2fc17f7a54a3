"""Which parameters train, and BatchNorm statistics that stay frozen (the trainable sets
and why fewer noised parameters help: docs/MODELS.md, "Which parameters train").
"""

from __future__ import annotations

from torch import nn

from .base import NORM_TYPES, Backbone
from .names import TRAINABLE_CHOICES

_FROZEN_FLAG = "_dpemb_bn_stats_frozen"


def set_trainable(model: Backbone, which: str) -> list[nn.Parameter]:
    """Set ``requires_grad`` on every parameter and return the trainable ones.

    ``which``: "all", "norm-only" (GroupNorm, BatchNorm and LayerNorm affine parameters and
    ``model.embedding``) or "features" (all but ``model.embedding``); docs/MODELS.md, "Which
    parameters train". The returned list follows ``model.parameters()`` order, so it is
    stable across calls and models of the same architecture.
    """
    if which not in TRAINABLE_CHOICES:
        raise ValueError(f"unknown trainable set {which!r}; choose one of {', '.join(TRAINABLE_CHOICES)}")
    everything = {id(p) for p in model.parameters()}
    if which == "all":
        keep = everything
    else:
        embedding = getattr(model, "embedding", None)
        if not isinstance(embedding, nn.Module):
            raise ValueError(f"{which} training needs a backbone with an `embedding` layer")
        head = {id(p) for p in embedding.parameters()}
        if which == "features":
            keep = everything - head
        else:  # norm-only
            norms = (p for m in model.modules() if isinstance(m, NORM_TYPES) for p in m.parameters(recurse=False))
            keep = head | {id(p) for p in norms}
    params = list(model.parameters())
    for p in params:
        p.requires_grad_(id(p) in keep)
    return [p for p in params if p.requires_grad]


def _stay_in_eval(module: nn.Module, args: object) -> None:
    # forward pre-hook: whatever model.train() did, normalise with the running statistics
    # and never update them
    module.training = False


def freeze_batchnorm_stats(model: nn.Module) -> None:
    """Put every BatchNorm layer in eval mode for good: running statistics are used and
    never updated, even after a later ``model.train()``.

    The freeze survives ``train()``, ``copy.deepcopy`` and per-client model copies (a forward
    pre-hook; docs/MODELS.md, "Which parameters train"); the affine parameters can still
    train. Guarantee: each example's output depends on that example alone and no user data
    flows into the buffers. Idempotent.
    """
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()
            if not getattr(m, _FROZEN_FLAG, False):
                m.register_forward_pre_hook(_stay_in_eval)
                setattr(m, _FROZEN_FLAG, True)


def batchnorm_stats_frozen(model: nn.Module) -> bool:
    """True when every BatchNorm layer of ``model`` is frozen (vacuously true without any).

    Private training code can use this to refuse a BatchNorm model whose statistics
    would mix examples and carry user data.
    """
    return all(getattr(m, _FROZEN_FLAG, False) for m in model.modules()
               if isinstance(m, nn.modules.batchnorm._BatchNorm))

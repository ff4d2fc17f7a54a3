"""The clip norm is validated once, at the boundary (issue #35, item 7): ``PrivacySpec``
refuses a NaN, zero, negative, infinite or non-numeric C with an error naming the fix;
a ``ClipAndSum`` checks the C it is built with once, and its per-client clipping (the
hot path) never checks it again."""

from __future__ import annotations

import math

import pytest
import torch

import dpemb.privacy.clipping as clipping
from dpemb.privacy import PrivacySpec, PrivacySpecError
from dpemb.privacy.adaptive_clipping import AdaptiveClipping
from dpemb.privacy.clipping import ClipAndSum
from dpemb.privacy.plan import PrivacyPlan
from dpemb.privacy.relations import Relation

BAD = [math.nan, 0.0, -0.0, -1.0, math.inf, -math.inf, "1", True, None]


@pytest.mark.parametrize("clip", BAD, ids=repr)
@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
def test_spec_refuses_a_bad_clip_norm_naming_the_fix(clip, adaptive):
    kw = {"adaptive_clipping": AdaptiveClipping(0.5)} if adaptive else {}
    with pytest.raises(PrivacySpecError, match="clip norm") as e:
        PrivacySpec(population=100, clients_per_round=5, clip_norm=clip, **kw)
    msg = str(e.value)
    assert "--clip-norm C" in msg and "PrivacySpec(clip_norm=C)" in msg and "finite C > 0" in msg
    assert repr(clip) in msg  # says what it got


@pytest.mark.parametrize("clip", BAD, ids=repr)
def test_clip_and_sum_refuses_a_bad_clip_norm_at_construction(clip):
    with pytest.raises(ValueError, match="clip norm"):
        ClipAndSum([torch.zeros(2)], clip, 1.0, Relation.ADD_REMOVE)
    with pytest.raises(ValueError, match="clip norm"):
        ClipAndSum.for_users([torch.zeros(2)], clip, 1, Relation.ADD_REMOVE)


def test_per_client_clipping_does_not_revalidate(monkeypatch):
    """A round of the plan: C is checked when the accumulator is built, not once per client."""
    plan = PrivacyPlan.build(PrivacySpec(population=100, clients_per_round=5, clip_norm=0.5), seed=0)
    acc = plan.accumulator([torch.zeros(4)])
    calls = []
    real = clipping.positive_finite
    monkeypatch.setattr(clipping, "positive_finite", lambda *a: calls.append(a) or real(*a))
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        acc.add([torch.randn(4, generator=g) * 3])
    assert calls == []
    assert acc.count == 20 and acc.result().num_clipped > 0
    assert all(n > 0 for n in acc.result().preclip_norms)
    total = acc.result().value[0]
    assert float(torch.linalg.vector_norm(total)) <= 20 * 0.5  # every client clipped to C = 0.5

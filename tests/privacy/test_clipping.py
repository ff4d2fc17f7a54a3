"""Global L2 clipping and the streaming clip-and-sum."""

import math

import pytest
import torch

from dpemb.privacy.clipping import ClipAndSum, ClippedSum
from dpemb.privacy.relations import Relation


def global_norm(ts):
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in ts))


def clip_one(ts, clip_norm):
    """One contribution through the real path: a fresh ``ClipAndSum``'s ``add`` (which
    returns the pre-clip norm) and its ``result`` (the clipped copy)."""
    acc = ClipAndSum([torch.zeros_like(t) for t in ts], clip_norm, clip_norm, Relation.ADD_REMOVE)
    norm = acc.add(ts)
    return acc.result().value, norm


def test_clipped_norm_never_exceeds_bound_and_keeps_direction():
    g = torch.Generator().manual_seed(0)
    for scale in [1e-3, 0.5, 1.0, 3.0, 1e6, 1e30]:
        ts = [torch.randn(50, generator=g) * scale, torch.randn(3, 4, generator=g) * scale]
        out, norm = clip_one(ts, 1.0)
        assert norm == pytest.approx(global_norm(ts), rel=1e-6)
        assert global_norm(out) <= 1.0
        if norm <= 1.0:
            assert all(torch.equal(a, b) for a, b in zip(out, ts))
        else:
            assert global_norm(out) == pytest.approx(1.0, rel=1e-5)
            cos = sum(float((a.double() * b.double()).sum()) for a, b in zip(out, ts)) / (
                global_norm(out) * global_norm(ts))
            assert cos == pytest.approx(1.0, abs=1e-6)


def test_float64_overflowing_squares_are_clipped():
    ts = [torch.full((10,), 1e200, dtype=torch.float64)]
    out, norm = clip_one(ts, 2.0)
    assert norm == pytest.approx(1e200 * math.sqrt(10), rel=1e-9)
    assert global_norm(out) <= 2.0 and global_norm(out) == pytest.approx(2.0, rel=1e-9)


@pytest.mark.parametrize("bad, expected", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "inf")])
def test_nonfinite_becomes_zeros(bad, expected):
    t = torch.ones(5)
    t[2] = bad
    out, norm = clip_one([t, torch.ones(2)], 1.0)
    assert all(bool((o == 0).all()) for o in out)
    assert (math.isnan(norm) if expected == "nan" else math.isinf(norm))


def test_inputs_are_not_modified():
    t = torch.full((4,), 10.0)
    clip_one([t], 1.0)
    assert torch.equal(t, torch.full((4,), 10.0))


def test_clip_and_sum_counts_and_bounds():
    template = [torch.zeros(3), torch.zeros(2)]
    acc = ClipAndSum(template, 1.0, 2.0, Relation.ADD_REMOVE)
    assert acc.add([torch.tensor([3.0, 0.0, 0.0]), torch.tensor([0.0, 4.0])]) == pytest.approx(5.0)
    assert acc.add([torch.tensor([0.1, 0.0, 0.0]), torch.zeros(2)]) == pytest.approx(0.1)
    bad = torch.tensor([math.nan, 1.0, 1.0])
    assert math.isnan(acc.add([bad, torch.zeros(2)]))
    res = acc.result()
    assert isinstance(res, ClippedSum)
    assert (res.count, res.num_clipped, res.num_nonfinite) == (3, 1, 1)
    assert res.sensitivity == 2.0 and res.relation is Relation.ADD_REMOVE
    assert torch.allclose(res.value[0], torch.tensor([0.6 + 0.1, 0.0, 0.0]), atol=1e-5)
    assert torch.allclose(res.value[1], torch.tensor([0.0, 0.8]), atol=1e-5)
    assert res.preclip_norms[:2] == pytest.approx((5.0, 0.1))


def test_distributed_reduce_equals_single_accumulator():
    """Partial sums combined as the distributed executor does (a SUM of the parts'
    values, ``counts`` of the others, ``absorb``) equal one accumulator over everything."""
    g = torch.Generator().manual_seed(1)
    deltas = [[torch.randn(7, generator=g) * s] for s in (0.1, 1, 10, 100, 0.5, 3)]
    whole = ClipAndSum.for_users([torch.zeros(7)], 1.0, 4, Relation.ADD_REMOVE)
    a = ClipAndSum.for_users([torch.zeros(7)], 1.0, 4, Relation.ADD_REMOVE)
    b = ClipAndSum.for_users([torch.zeros(7)], 1.0, 4, Relation.ADD_REMOVE)
    for i, d in enumerate(deltas):
        whole.add(d)
        (a if i % 2 else b).add(d)
    total = a.result().value[0] + b.result().value[0]
    a.absorb([total], [b.counts()])
    r1, r2 = whole.result(), a.result()
    assert torch.allclose(r1.value[0], r2.value[0], atol=1e-6)
    expected_clipped = sum(global_norm(d) > 1.0 for d in deltas)
    assert (r1.count, r1.num_clipped, r1.sensitivity) == (r2.count, r2.num_clipped, r2.sensitivity) == (
        6, expected_clipped, 2.0)
    assert sorted(r1.preclip_norms) == sorted(r2.preclip_norms)
    other = ClipAndSum([torch.zeros(7)], 1.0, 1.0, Relation.ADD_REMOVE)
    with pytest.raises(ValueError, match="a part was clipped with"):
        a.absorb([total], [other.counts()])


def test_result_is_a_copy():
    acc = ClipAndSum([torch.zeros(2)], 1.0, 1.0, Relation.ADD_REMOVE)
    acc.add([torch.tensor([0.5, 0.0])])
    r = acc.result()
    acc.add([torch.tensor([0.5, 0.0])])
    assert r.value[0][0] == pytest.approx(0.5)


def test_bad_construction_and_shapes():
    with pytest.raises(ValueError, match="below the clip norm"):
        ClipAndSum([torch.zeros(2)], 1.0, 0.5, Relation.ADD_REMOVE)
    with pytest.raises(ValueError, match="clip norm"):
        ClipAndSum([torch.zeros(2)], 0.0, 1.0, Relation.ADD_REMOVE)
    with pytest.raises(ValueError, match="sensitivity"):
        ClipAndSum([torch.zeros(2)], 1.0, math.inf, Relation.ADD_REMOVE)
    acc = ClipAndSum([torch.zeros(2)], 1.0, 1.0, Relation.ADD_REMOVE)
    with pytest.raises(ValueError, match="shapes"):
        acc.add([torch.zeros(3)])
    with pytest.raises(ValueError, match="sensitivity"):
        ClippedSum(value=[torch.zeros(1)], sensitivity=0.0, relation=Relation.ADD_REMOVE)

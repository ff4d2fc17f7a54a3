"""The Recall@FAR table (FAR 1e-6 ... 1e-1, supported or not) and its bootstrap
intervals over identities, against independent brute-force numpy computations."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from PIL import Image

import dpemb.metrics.bootstrap as B
from dpemb.metrics import TABLE_FARS, far_table, format_far_tables, plot_roc
from dpemb.metrics.verification import _exact, _max_false_accepts, prepare_inputs


# ----------------------------------------------------------------- independent reference
def brute_scores(x, normalize=True):
    """All pair scores (i < j) in numpy: float64 dots rounded to multiples of 2^-24."""
    x = np.asarray(x, dtype=np.float64)
    if normalize:
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    i, j = np.triu_indices(len(x), 1)
    s = np.einsum("ij,ij->i", x[i], x[j])
    return i, j, (np.round(s * 2.0**24) / 2.0**24).astype(np.float32).astype(np.float64)


def _count_ge(scores, weights, ts):
    """sum of weights of scores >= t, for each t (numpy sort + cumulative sums)."""
    order = np.argsort(scores, kind="stable")
    s, w = scores[order], weights[order]
    above = np.concatenate([np.cumsum(w[::-1])[::-1], [0]])  # above[k] = sum w[k:]
    return above[np.searchsorted(s, ts, side="left")]


def brute_recall(pos, neg, far):
    """max TAR(t) over every threshold t (each score and +inf) with FAR(t) <= far;
    ``pos``/``neg`` are scores with integer multiplicities as (scores, weights)."""
    (ps, pw), (ns, nw) = pos, neg
    ts = np.unique(np.concatenate([ps, ns, [np.inf]]))
    feasible = _count_ge(ns, nw, ts) / nw.sum() <= far
    return float((_count_ge(ps, pw, ts)[feasible] / pw.sum()).max())


def brute_table(x, y, fars=TABLE_FARS, normalize=True):
    i, j, s = brute_scores(x, normalize)
    same = y[i] == y[j]
    pos = (s[same], np.ones(same.sum(), np.int64))
    neg = (s[~same], np.ones((~same).sum(), np.int64))
    return {f: brute_recall(pos, neg, f) for f in fars}, int(same.sum()), int((~same).sum())


def brute_replicate(x, y, w, fars, normalize=True):
    """Recall@FAR of the set in which identity a appears w[a] times, each copy a new
    identity; pairs between two copies of one identity are left out. Built
    explicitly: copies of the examples, all pairs, brute force."""
    ids = np.unique(y)
    rows, copy_id, ident = [], [], []
    for a_idx, a in enumerate(ids):
        members = np.flatnonzero(y == a)
        for c in range(int(w[a_idx])):
            rows.extend(members)
            copy_id.extend([(a_idx, c)] * members.size)
            ident.extend([a_idx] * members.size)
    if not rows:
        return None
    rows = np.asarray(rows)
    ident = np.asarray(ident)
    copy = np.asarray([a * 10_000 + c for a, c in copy_id])
    i, j, s = brute_scores(x[rows], normalize)
    positive = copy[i] == copy[j]
    negative = ident[i] != ident[j]
    if not positive.any() or not negative.any():
        return None
    pos = (s[positive], np.ones(positive.sum(), np.int64))
    neg = (s[negative], np.ones(negative.sum(), np.int64))
    return {f: brute_recall(pos, neg, f) for f in fars}


def bootstrap_of(x, y, keep, normalize=True, fars=TABLE_FARS):
    xx, yy = prepare_inputs(x, y, normalize=normalize, device="cpu")
    c = B.TailCollector(keep)
    res = _exact(xx, yy, list(fars), 64, False, warn=False, observer=c)
    return res, c.finish(), c


def tie_data(seed, n=70, classes=9):
    """Small integer embeddings, plain dot products: exact scores with many ties."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.integers(-1, 2, size=(n, 4)).astype(np.float64)
    x[np.all(x == 0, axis=1), 0] = 1
    return x, y


def cluster_data(seed, n=300, classes=40, dim=8, spread=1.2):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.normal(size=(classes, dim))[y] + spread * rng.normal(size=(n, dim))
    return x, y


# ------------------------------------------------------------------------------ table
@pytest.mark.parametrize("case", ["clusters", "ties"])
def test_table_equals_brute_force_and_marks_unsupported_fars(case):
    if case == "ties":
        x, y = tie_data(0)
        normalize = False
    else:
        x, y = cluster_data(1)
        normalize = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning: the rows say it
        t = far_table(x, y, normalize=normalize, bootstrap=0, block_size=37)
    ref, n_pos, n_neg = brute_table(x, y, normalize=normalize)
    assert t.result.num_positive_pairs == n_pos and t.result.num_negative_pairs == n_neg
    assert [r.far for r in t.rows] == list(TABLE_FARS)
    for r in t.rows:
        assert r.recall == ref[r.far], (r.far, r.recall, ref[r.far])
        assert r.supported == (n_neg >= 1 / r.far)
        assert r.ci is None
    assert any(not r.supported for r in t.rows) and any(r.supported for r in t.rows)
    lines = format_far_tables({"m": t})
    assert lines[0].split()[:2] == ["FAR", "TAR"]
    unsupported = [ln for ln in lines[1:7] if "no *" in ln]
    assert len(unsupported) == sum(not r.supported for r in t.rows)
    assert any(ln.startswith("* unsupported") for ln in lines)
    assert any("stricter than insightface" in ln for ln in lines)


def test_table_to_dict_and_plot(tmp_path):
    x, y = cluster_data(2)
    t = far_table(x, y, bootstrap=30)
    d = t.to_dict()
    assert [r["far"] for r in d["rows"]] == list(TABLE_FARS)
    for r, row in zip(d["rows"], t.rows):
        assert r["supported"] == row.supported
        assert (r["ci_low"] is not None) == (row.ci is not None)
    assert d["bootstrap"]["resamples"] == 30 and d["bootstrap"]["num_identities"] == 40
    out = plot_roc({"a": t.result, "b": far_table(x[::-1].copy(), y[::-1].copy(), bootstrap=0).result},
                   tmp_path / "roc.png")
    with Image.open(out) as im:
        assert im.format == "PNG"


def test_sampled_pairs_have_no_bootstrap():
    x, y = cluster_data(3)
    t = far_table(x, y, max_pairs=5000, bootstrap=50)
    assert not t.result.exact and t.bootstrap is None
    assert "sampled" in t.bootstrap_note
    assert all(r.ci is None for r in t.rows)


# -------------------------------------------------------------------------- bootstrap
@pytest.mark.parametrize("keep", [10**9, 150])
@pytest.mark.parametrize("case", ["clusters", "ties"])
def test_weights_one_replicate_is_the_exact_value(case, keep):
    """With every identity drawn once the replicate is the data set itself: it must
    equal the exact Recall@FAR (the threshold is resolved exactly, not on a grid)."""
    x, y = tie_data(1) if case == "ties" else cluster_data(4)
    res, boot, c = bootstrap_of(x, y, keep, normalize=case != "ties")
    assert c.complete == (keep >= res.num_negative_pairs)
    rep = boot.replicate(np.ones(boot.num_identities, np.int64), TABLE_FARS)
    for f in TABLE_FARS:
        if math.isnan(rep[f]):  # a truncated tail may not reach this FAR's threshold
            assert not c.complete and _max_false_accepts(f, res.num_negative_pairs) >= boot.tail_scores.size
            continue
        assert rep[f] == res.recall_at_far[f], (f, rep[f], res.recall_at_far[f])


@pytest.mark.parametrize("keep", [10**9, 120])
@pytest.mark.parametrize("case", ["clusters", "ties"])
def test_replicates_equal_brute_force_on_the_expanded_set(case, keep):
    """A replicate's value equals an explicit recomputation on the set in which each
    drawn copy of an identity is a separate identity (and copies of one identity are
    not paired), brute force over all its pairs."""
    if case == "ties":
        x, y = tie_data(2, n=40, classes=7)
    else:
        x, y = cluster_data(5, n=45, classes=8)
    normalize = case != "ties"
    fars = (1e-3, 1e-2, 0.05, 0.2)
    _, boot, _ = bootstrap_of(x, y, keep, normalize=normalize, fars=fars)
    checked = 0
    for w in boot.draw(12, seed=7):
        got = boot.replicate(w, fars)
        ref = brute_replicate(x, y, w, fars, normalize=normalize)
        assert (got is None) == (ref is None)
        if got is None:
            continue
        for f in fars:
            if math.isnan(got[f]):
                assert keep < 10**9  # only a truncated tail can leave it unresolved
                continue
            assert got[f] == ref[f], (w, f, got[f], ref[f])
            checked += 1
    assert checked >= 20


def test_interval_contains_the_estimate_and_is_seeded():
    x, y = cluster_data(6, n=400, classes=80)
    a = far_table(x, y, bootstrap=100, seed=3)
    b = far_table(x, y, bootstrap=100, seed=3)
    c = far_table(x, y, bootstrap=100, seed=4)
    assert a.bootstrap.resamples == 100 and a.bootstrap.num_identities == len(np.unique(y))
    with_ci = [r for r in a.rows if r.ci is not None]
    assert {r.far for r in with_ci} == {r.far for r in a.rows if r.supported}
    for r in with_ci:
        assert r.ci[0] <= r.recall <= r.ci[1], r
        assert r.ci[0] < r.ci[1]
    assert [r.ci for r in a.rows] == [r.ci for r in b.rows]
    assert [r.ci for r in a.rows] != [r.ci for r in c.rows]
    # the point estimates do not depend on the bootstrap
    assert [r.recall for r in a.rows] == [r.recall for r in c.rows]


def test_a_too_short_tail_repeats_the_pass(monkeypatch):
    """With a tiny tail most replicates cannot resolve their threshold; the pass is
    repeated with a deeper tail and the intervals equal those of a complete tail."""
    x, y = cluster_data(7, n=200, classes=6)
    full = far_table(x, y, bootstrap=60, seed=1)
    monkeypatch.setattr(B, "_MIN_TAIL", 1)
    monkeypatch.setattr(B, "_TAIL_MARGIN", 1)
    calls = []
    real = B.TailCollector.__init__

    def spy(self, keep):
        calls.append(keep)
        real(self, keep)

    monkeypatch.setattr(B.TailCollector, "__init__", spy)
    short = far_table(x, y, bootstrap=60, seed=1)
    assert len(calls) >= 2 and calls == sorted(calls)
    assert [r.ci for r in short.rows] == [r.ci for r in full.rows]


def test_intervals_cover_the_population_value():
    """Coverage, roughly: samples of 60 identities from a population of 1500; the 90%
    identity-bootstrap interval at FAR 1e-2 covers the population's value in most of
    them (17 of 20 with this seed)."""
    rng = np.random.default_rng(11)
    k_pop, per = 1500, 4
    centers = rng.normal(size=(k_pop, 8))
    spread = rng.uniform(0.6, 2.0, size=k_pop)  # identities differ in difficulty
    y_pop = np.repeat(np.arange(k_pop), per)
    x_pop = centers[y_pop] + spread[y_pop, None] * rng.normal(size=(k_pop * per, 8))
    truth = far_table(x_pop, y_pop, fars=(1e-2,), bootstrap=0).rows[0].recall
    covered = 0
    trials = 20
    for _ in range(trials):
        ids = rng.choice(k_pop, 60, replace=False)
        m = np.isin(y_pop, ids)
        r = far_table(x_pop[m], y_pop[m], fars=(1e-2,), bootstrap=100, level=0.9, seed=1).rows[0]
        covered += r.ci[0] <= truth <= r.ci[1]
    assert covered >= 14, covered


def test_bad_arguments():
    x, y = cluster_data(8, n=50, classes=5)
    with pytest.raises(ValueError, match="bootstrap"):
        far_table(x, y, bootstrap=-1)
    with pytest.raises(ValueError, match="level"):
        far_table(x, y, level=1.0)
    with pytest.raises(ValueError, match="FAR"):
        far_table(x, y, fars=(0.0,))

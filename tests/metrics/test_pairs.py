"""The pair-list protocol's metrics against independent computations: k-fold accuracy
(threshold chosen on the other folds) against a brute-force search over
scikit-learn's PredefinedSplit folds, TAR at FAR and AUC of listed pairs against
scikit-learn's roc_curve / roc_auc_score."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve
from sklearn.model_selection import PredefinedSplit

from dpemb.data.dataset import DataError
from dpemb.metrics.pairs import assign_folds, best_threshold, kfold_accuracy
from dpemb.metrics.verification import listed_pair_metrics


def brute_threshold(s, m):
    """Every cut: below all scores, between neighbours, above all; the lowest best."""
    u = np.unique(s)
    cuts = [u[0]] + [(a + b) / 2 for a, b in zip(u[:-1], u[1:])] + [np.inf]
    accs = [np.mean((s >= c) == m) for c in cuts]
    best = max(accs)
    return next(c for c, a in zip(cuts, accs) if a == best)


def brute_kfold(s, m, folds):
    out = []
    for train, test in PredefinedSplit(folds).split():
        t = brute_threshold(s[train], m[train])
        out.append(np.mean((s[test] >= t) == m[test]))
    return np.array(out)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kfold_accuracy_matches_a_brute_force_search(seed):
    rng = np.random.default_rng(seed)
    n = 400
    m = rng.random(n) < 0.5
    s = np.round(rng.normal(m * 1.0, 1.0), 1)  # rounded: many ties
    folds = rng.integers(0, 10, n)
    got = kfold_accuracy(s, m, folds)
    want = brute_kfold(s, m, folds)
    np.testing.assert_array_equal(got.accuracies, want)
    assert got.mean == pytest.approx(want.mean()) and got.std == pytest.approx(want.std())
    assert got.fold_sizes == tuple(np.bincount(folds))
    for fold, t in zip(range(10), got.thresholds):
        train = folds != fold
        assert t == brute_threshold(s[train], m[train])


def test_separable_pairs_score_1_and_random_pairs_about_a_half():
    rng = np.random.default_rng(0)
    m = np.arange(6000) % 2 == 0
    s = np.where(m, rng.uniform(0.5, 1, m.size), rng.uniform(-1, 0.4, m.size))
    acc = kfold_accuracy(s, m, assign_folds(m))
    assert acc.accuracies == (1.0,) * 10 and acc.std == 0.0
    assert all(0.4 <= t <= 0.5 for t in acc.thresholds)  # halfway between the classes
    rand = kfold_accuracy(rng.uniform(-1, 1, m.size), m, assign_folds(m))
    assert abs(rand.mean - 0.5) < 0.04


def test_assign_folds_keeps_the_class_balance_and_is_deterministic():
    m = np.array([True] * 35 + [False] * 25)
    f = assign_folds(m, 10)
    assert np.array_equal(f, assign_folds(m, 10))
    assert [int((f[m] == k).sum()) for k in range(10)] == [4] * 5 + [3] * 5
    assert [int((f[~m] == k).sum()) for k in range(10)] == [3] * 5 + [2] * 5


def test_best_threshold_extremes():
    assert best_threshold(np.array([0.1, 0.2]), np.array([True, True])) == 0.1  # accept all
    assert best_threshold(np.array([0.1, 0.2]), np.array([False, False])) == np.inf  # accept none


def test_kfold_accuracy_refuses_bad_input():
    with pytest.raises(DataError, match="at least 2 folds"):
        kfold_accuracy([0.1, 0.2], [True, False], [0, 0])
    with pytest.raises(DataError, match="non-finite"):
        kfold_accuracy([0.1, np.nan], [True, False], [0, 1])


@pytest.mark.parametrize("seed", [0, 1])
def test_listed_pair_metrics_match_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    m = rng.random(3000) < 0.3
    s = np.clip(np.round(rng.normal(m * 0.8, 0.5), 3), -1, 1)
    fars = (1e-3, 1e-2, 1e-1)
    res = listed_pair_metrics(s, m, fars=fars, warn=False)
    fpr, tpr, _ = roc_curve(m, s, drop_intermediate=False)
    for f in fars:
        assert res.recall_at_far[f] == pytest.approx(tpr[fpr <= f].max(), abs=1e-12)
        t = res.thresholds[f] - 2.0**-24  # thresholds are scores rounded to multiples of 2^-24
        assert (s[m] >= t).mean() == pytest.approx(res.recall_at_far[f])
        assert (s[~m] >= t).mean() <= f
    assert res.auc == pytest.approx(roc_auc_score(m, s), abs=1e-12)
    assert (res.num_positive_pairs, res.num_negative_pairs) == (int(m.sum()), int((~m).sum()))
    assert res.supported(1e-3) == (int((~m).sum()) >= 1000)


def test_listed_pair_metrics_needs_both_kinds():
    with pytest.raises(DataError, match="no negative pairs"):
        listed_pair_metrics([0.1, 0.2], [True, True])

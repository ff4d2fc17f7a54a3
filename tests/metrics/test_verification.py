"""Exact all-pairs Recall@FAR and AUC against scikit-learn on explicit pair lists."""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score, roc_curve

import dpemb.metrics.verification as V
from dpemb.data.dataset import DataError
from dpemb.metrics import verification_metrics

FARS = (1e-3, 1e-2, 0.05, 0.2, 0.5, 1.0)


def _fields(res, roc: bool = True) -> tuple:
    """Every field of a VerificationResult, comparable with ==."""
    plain = (res.recall_at_far, res.thresholds, res.auc, res.num_positive_pairs, res.num_negative_pairs, res.exact)
    return plain + ((res.roc_fpr.tolist(), res.roc_tpr.tolist()) if roc else ())


# ----------------------------------------------------------------- independent reference
def explicit_pairs(x: np.ndarray, y: np.ndarray, normalize: bool = True, pairs=None):
    """All pairs i < j (or the given ones) with scores computed independently in numpy:
    float64 dot products rounded to multiples of 2^-24 (the documented score)."""
    x = np.asarray(x, dtype=np.float64)
    if normalize:
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    i, j = pairs if pairs is not None else np.triu_indices(len(x), 1)
    s = np.einsum("ij,ij->i", x[i], x[j])
    s = (np.round(s * 2.0**24) / 2.0**24).astype(np.float32)
    return s, y[i] == y[j]


def sklearn_reference(s, t, fars):
    fpr, tpr, thr = roc_curve(t, s, drop_intermediate=False)
    recall = {f: float(tpr[fpr <= f].max()) for f in fars}
    return recall, float(roc_auc_score(t, s)), (fpr, tpr)


def check_against_sklearn(x, y, *, fars=FARS, normalize=True, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = verification_metrics(x, y, fars=fars, normalize=normalize, **kw)
    s, t = explicit_pairs(x, y, normalize)
    recall, auc, (fpr, tpr) = sklearn_reference(s, t, fars)
    assert res.exact
    assert res.num_positive_pairs == int(t.sum())
    assert res.num_negative_pairs == int((~t).sum())
    for f in fars:
        assert res.recall_at_far[f] == recall[f], (f, res.recall_at_far[f], recall[f])
        thr = res.thresholds[f]
        # the threshold really achieves the recall within the FAR budget
        accepted = s >= thr
        assert accepted[~t].sum() / (~t).sum() <= f
        assert accepted[t].sum() / t.sum() == res.recall_at_far[f]
    assert abs(res.auc - auc) < 1e-12, (res.auc, auc)
    # every compact ROC point is a point of scikit-learn's exact ROC
    exact_points = set(zip(np.round(fpr, 12), np.round(tpr, 12)))
    ours = set(zip(np.round(res.roc_fpr, 12), np.round(res.roc_tpr, 12)))
    assert ours <= exact_points
    assert res.roc_fpr[0] == 0 and res.roc_tpr[-1] == 1
    assert np.all(np.diff(res.roc_fpr) >= 0) and np.all(np.diff(res.roc_tpr) >= 0)
    return res


# --------------------------------------------------------------------------- agreement
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_embeddings_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(300, 700))
    classes = int(rng.integers(5, 80))
    y = rng.integers(0, classes, n)
    centers = rng.normal(size=(classes, 16))
    x = centers[y] + 1.5 * rng.normal(size=(n, 16))
    check_against_sklearn(x, y, block_size=int(rng.integers(40, 200)))


def test_torch_float32_input_equals_numpy_input():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    y = rng.integers(0, 20, 200)
    a = verification_metrics(x, y, block_size=64)
    b = verification_metrics(torch.from_numpy(x), torch.from_numpy(y), block_size=64)
    assert _fields(a) == _fields(b)


def exact_quarter_vectors(rng, n, dim=16):
    """Unit vectors with four entries +-1/2: every dot product is an exact multiple of
    1/4, so the scores are exact and massively tied (including exact zeros)."""
    x = np.zeros((n, dim))
    for r in range(n):
        cols = rng.choice(dim, size=4, replace=False)
        x[r, cols] = rng.choice([-0.5, 0.5], size=4)
    return x


def test_massively_tied_exact_scores():
    rng = np.random.default_rng(4)
    x = exact_quarter_vectors(rng, 400)
    y = rng.integers(0, 12, 400)
    s, _ = explicit_pairs(x, y)
    assert np.unique(s).size <= 9  # only multiples of 1/4
    check_against_sklearn(x, y, block_size=37)


def test_duplicate_embeddings_tie_across_positive_and_negative_pairs():
    rng = np.random.default_rng(5)
    base = rng.normal(size=(15, 32))
    x = base[rng.integers(0, 15, 500)]  # 15 distinct vectors, many copies each
    y = rng.integers(0, 25, 500)  # copies carry different labels
    res = check_against_sklearn(x, y, block_size=50)
    assert 0 < res.auc < 1


def test_quantised_gaussian_embeddings_with_ties():
    rng = np.random.default_rng(6)
    x = np.round(rng.normal(size=(450, 6)))
    x[np.linalg.norm(x, axis=1) == 0, 0] = 1.0
    y = rng.integers(0, 30, 450)
    check_against_sklearn(x, y, block_size=64)


def test_perfect_separation_and_all_ties():
    # identical embeddings per label, orthogonal across labels: recall 1 at FAR 0
    x = np.repeat(np.eye(5), 6, axis=0)
    y = np.repeat(np.arange(5), 6)
    res = check_against_sklearn(x, y, block_size=7)
    assert res.auc == 1.0 and res.recall_at_far[1e-3] == 1.0
    # all embeddings identical: every pair ties, AUC exactly 1/2
    x = np.ones((40, 3))
    y = np.arange(40) % 4
    res = check_against_sklearn(x, y, block_size=9)
    assert res.auc == 0.5
    assert res.recall_at_far[0.5] == 0.0 and res.recall_at_far[1.0] == 1.0


@pytest.mark.parametrize("block_size", [3, 64, 149, 150, 10_000])
def test_block_size_does_not_change_the_result(block_size):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(150, 12))
    y = rng.integers(0, 15, 150)
    ref = verification_metrics(x, y, block_size=150)
    got = verification_metrics(x, y, block_size=block_size)
    assert _fields(got) == _fields(ref)


def test_positive_values_split_into_ranges(monkeypatch):
    # few identities with many examples: force the multi-range path and compare
    rng = np.random.default_rng(8)
    x = rng.normal(size=(300, 10))
    y = rng.integers(0, 3, 300)
    single = verification_metrics(x, y, fars=FARS, block_size=128)
    monkeypatch.setattr(V, "_MAX_DISTINCT_POSITIVES", 2000)
    calls = []
    original = V._negative_pass
    monkeypatch.setattr(
        V, "_negative_pass", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    split = check_against_sklearn(x, y, block_size=128)
    assert len(calls) >= 5  # one pass over the negatives per range
    assert _fields(split, roc=False) == _fields(single, roc=False)


def test_binary_search_fallback_matches_grid(monkeypatch):
    rng = np.random.default_rng(9)
    # nearly collapsed embeddings: scores crowd just below 1
    x = 1.0 + 1e-3 * rng.normal(size=(300, 16))
    y = rng.integers(0, 20, 300)
    grid = check_against_sklearn(x, y, block_size=100)
    monkeypatch.setattr(V, "_MAX_GRID_STEPS", 0)
    search = check_against_sklearn(x, y, block_size=100)
    assert _fields(search) == _fields(grid)


def test_unnormalised_dot_product_scores():
    rng = np.random.default_rng(10)
    x = rng.normal(size=(250, 8))
    x *= rng.uniform(0.3, 1.0, size=(250, 1)) / np.linalg.norm(x, axis=1, keepdims=True)
    y = rng.integers(0, 20, 250)
    res = check_against_sklearn(x, y, normalize=False, block_size=60)
    cosine = verification_metrics(x, y, block_size=60)
    assert res.auc != cosine.auc  # the norms matter without normalisation


def test_compact_roc_is_small_and_on_the_exact_curve():
    rng = np.random.default_rng(11)
    n = 1000
    y = rng.integers(0, 25, n)
    x = rng.normal(size=(25, 16))[y] + 2.0 * rng.normal(size=(n, 16))
    res = check_against_sklearn(x, y, fars=(1e-3, 1e-2), block_size=512)
    assert res.num_positive_pairs > 10_000  # many more corner points than kept
    assert res.roc_fpr.size <= 4 * V._ROC_GRID + 2


# ------------------------------------------------------------------------- degenerate
def test_far_below_one_over_negatives_warns_and_matches_sklearn():
    rng = np.random.default_rng(12)
    x = rng.normal(size=(60, 4))
    y = rng.integers(0, 6, 60)
    with pytest.warns(RuntimeWarning, match="below 1/#negative pairs"):
        res = verification_metrics(x, y, fars=(1e-6,))
    s, t = explicit_pairs(x, y)
    recall, _, _ = sklearn_reference(s, t, (1e-6,))
    assert res.recall_at_far[1e-6] == recall[1e-6]
    # zero false accepts: threshold strictly above every negative score
    assert res.thresholds[1e-6] > s[~t].max()


def test_no_positive_pairs_is_a_clear_error():
    x = np.random.default_rng(0).normal(size=(10, 4))
    with pytest.raises(DataError, match="no positive pairs"):
        verification_metrics(x, np.arange(10))


def test_single_identity_is_a_clear_error():
    x = np.random.default_rng(0).normal(size=(10, 4))
    with pytest.raises(DataError, match="no negative pairs"):
        verification_metrics(x, np.zeros(10, dtype=int))


@pytest.mark.parametrize(
    "x, y, match",
    [
        (np.ones((5, 3)), np.zeros((4,), dtype=int), r"labels must have shape \(5,\)"),
        (np.ones(5), np.zeros(5, dtype=int), "2-D"),
        (np.ones((5, 3)), np.zeros(5), "labels must be integers"),
        (np.ones((1, 3)), np.zeros(1, dtype=int), "at least 2"),
    ],
)
def test_bad_shapes_and_types(x, y, match):
    with pytest.raises(DataError, match=match):
        verification_metrics(x, y)


def test_bad_rows_are_named():
    x = np.random.default_rng(0).normal(size=(6, 3))
    y = np.array([0, 0, 1, 1, 2, 2])
    x[3, 1] = np.nan
    with pytest.raises(DataError, match="row 3"):
        verification_metrics(x, y)
    x[3, 1] = 0.5
    x[4] = 0.0
    with pytest.raises(DataError, match="row 4 has zero norm"):
        verification_metrics(x, y)


@pytest.mark.parametrize(
    "kw", [{"fars": (0.0,)}, {"fars": (1.5,)}, {"fars": ()}, {"block_size": 0}, {"max_pairs": 0}]
)
def test_bad_parameters(kw):
    x = np.random.default_rng(0).normal(size=(6, 3))
    with pytest.raises(ValueError):
        verification_metrics(x, np.array([0, 0, 1, 1, 2, 2]), **kw)


# ---------------------------------------------------------------------- sampled pairs
def test_sample_pairs_are_distinct_valid_and_seeded():
    i, j = V.sample_pairs(100, 2000, seed=3)
    assert i.size == 2000 and np.all(i < j) and np.all(j < 100) and np.all(i >= 0)
    assert np.unique(i * 100 + j).size == 2000
    i2, j2 = V.sample_pairs(100, 2000, seed=3)
    assert np.array_equal(i, i2) and np.array_equal(j, j2)
    i3, _ = V.sample_pairs(100, 2000, seed=4)
    assert not np.array_equal(i, i3)
    # asking for every pair returns every pair
    i, j = V.sample_pairs(30, 435, seed=0)
    ti, tj = np.triu_indices(30, 1)
    assert np.array_equal(i, ti) and np.array_equal(j, tj)


def test_sample_pairs_is_uniform_over_rows():
    # row i owns n-1-i of the pairs: the sampled row counts must follow that
    n, m = 50, 600
    counts = np.zeros(n)
    for seed in range(20):
        i, _ = V.sample_pairs(n, m, seed)
        counts += np.bincount(i, minlength=n)
    expected = 20 * m * (n - 1 - np.arange(n)) / (n * (n - 1) / 2)
    chi2 = ((counts[:-1] - expected[:-1]) ** 2 / expected[:-1]).sum()
    assert chi2 < 100  # 48 dof: mean 48, sd ~10; a row-uniform sampler gives ~1000


def test_max_pairs_samples_and_reports_it():
    rng = np.random.default_rng(13)
    x = rng.normal(size=(300, 8))
    y = rng.integers(0, 10, 300)
    res = verification_metrics(x, y, fars=(0.01, 0.1), max_pairs=5000, seed=1)
    assert not res.exact
    assert res.num_positive_pairs + res.num_negative_pairs == 5000
    # equals scikit-learn on exactly those sampled pairs
    i, j = V.sample_pairs(300, 5000, seed=1)
    s, t = explicit_pairs(x, y, pairs=(i, j))
    recall, auc, _ = sklearn_reference(s, t, (0.01, 0.1))
    assert res.recall_at_far == recall
    assert abs(res.auc - auc) < 1e-12
    # enough pairs: exact
    full = verification_metrics(x, y, max_pairs=300 * 299 // 2)
    assert full.exact


def test_metrics_package_does_not_import_privacy_or_algorithms():
    pkg = Path(V.__file__).parent
    for path in pkg.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert not name.startswith(("dpemb.privacy", "dpemb.algorithms")), path


def test_sample_pairs_index_mapping_is_exact_for_large_n():
    n = 200_001  # 2e10 pairs: the float inverse of the triangular index must be fixed up
    i, j = V.sample_pairs(n, 20_000, seed=5)
    assert np.all((0 <= i) & (i < j) & (j < n))
    lin = i * (2 * n - i - 1) // 2 + (j - i - 1)  # row-major rank of (i, j) among i < j
    assert np.all(np.diff(lin) > 0)  # sorted and distinct
    assert lin[-1] < n * (n - 1) // 2


def test_working_memory_is_bounded_by_the_block(monkeypatch):
    capacities = []
    original = V._Workspace.__init__

    def spy(self, capacity, device):
        capacities.append(capacity)
        original(self, capacity, device)

    monkeypatch.setattr(V._Workspace, "__init__", spy)
    rng = np.random.default_rng(15)
    x = rng.normal(size=(600, 8))
    y = rng.integers(0, 30, 600)
    check_against_sklearn(x, y, fars=(0.01,), block_size=64)
    assert capacities and max(capacities) == 64 * 64  # vs 179,700 pairs in all


def test_warn_false_is_silent_and_supported_says_which_fars_resolve():
    rng = np.random.default_rng(13)
    x = rng.normal(size=(60, 4))
    y = rng.integers(0, 6, 60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = verification_metrics(x, y, fars=(1e-6, 0.1), warn=False)
    n_neg = res.num_negative_pairs
    assert 1 / 1e-6 > n_neg >= 1 / 0.1
    assert not res.supported(1e-6) and res.supported(0.1)
    assert res.supported(1 / n_neg) and not res.supported(0.999 / n_neg)

"""dpemb.metrics: pure functions of embeddings (or logits) and integer labels.

Modules (each docstring says what it computes; definitions: docs/EVALUATION.md):
verification, far_table, bootstrap, pairs, templates, in_batch, retrieval, plots.

Imports nothing from dpemb.privacy or dpemb.algorithms.
"""

from dpemb.metrics.far_table import TABLE_FARS, FarTable, far_table, format_far_tables
from dpemb.metrics.in_batch import in_batch_recall_at_far
from dpemb.metrics.pairs import FoldAccuracy, assign_folds, kfold_accuracy
from dpemb.metrics.plots import plot_roc
from dpemb.metrics.retrieval import map_at_r, precision_at_1
from dpemb.metrics.templates import pool_templates
from dpemb.metrics.verification import (
    DEFAULT_FARS,
    VerificationResult,
    listed_pair_metrics,
    verification_metrics,
)

__all__ = [
    "DEFAULT_FARS",
    "TABLE_FARS",
    "FarTable",
    "FoldAccuracy",
    "assign_folds",
    "kfold_accuracy",
    "listed_pair_metrics",
    "pool_templates",
    "far_table",
    "format_far_tables",
    "VerificationResult",
    "in_batch_recall_at_far",
    "map_at_r",
    "plot_roc",
    "precision_at_1",
    "verification_metrics",
]

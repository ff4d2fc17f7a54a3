"""dpemb.metrics: pure functions of embeddings (or logits) and integer labels.

* verification: exact all-pairs Recall@FAR (TAR@FAR), ROC AUC, compact ROC curve.
* far_table: the face-verification report: Recall@FAR at FAR 1e-6 ... 1e-1, which
  FARs the pairs support, bootstrap confidence intervals over identities (bootstrap).
* pairs: the LFW-style k-fold accuracy of listed pairs (threshold chosen on the other
  folds); verification.listed_pair_metrics gives their TAR at FAR and AUC.
* templates: IJB-style template features (mean of normalised embeddings, optionally
  per medium first).
* in_batch: the reference code's in-batch Recall@FAR approximation (for comparison).
* retrieval: precision@1 and MAP@R, leave-one-out by cosine similarity.
* plots: ROC curves to PNG.

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

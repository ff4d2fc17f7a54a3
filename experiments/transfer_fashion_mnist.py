"""DP classification from ImageNet-MobileNetV2 features of Fashion-MNIST, one command.

    python experiments/transfer_fashion_mnist.py            # features (cached), runs, docs
    python experiments/transfer_fashion_mnist.py --tune     # also re-select hyperparameters
    python experiments/transfer_fashion_mnist.py --quick    # smoke test (subsets; not docs/)

1. Features: the frozen ImageNet MobileNetV2 (public weights) on Fashion-MNIST
   (60,000 train / 10,000 test, from the Debian package ``dataset-fashion-mnist``),
   images resized to ``--image-size`` px; cached in ``runs/transfer_fashion_mnist/``
   so re-runs skip this step.
2. Optional ``--tune``: a small hyperparameter grid per method and epsilon, scored on
   a VALIDATION split carved from the training set (a seeded 10,000-example hold-out
   that is never trained on in the tuning runs: they train on the other 50,000); the
   test images are disjoint from both and never used for selection. The reported
   numbers are test-split numbers only. (Hyperparameter selection itself is not
   privacy-accounted, as in the papers; the defaults in
   ``dpemb.transfer.runner.DEFAULTS`` came from this grid.) Fashion-MNIST has no
   owners: each example is its own user, so example-level DP.
3. Every DP method at each epsilon (delta 1e-5, PLD accountant, example-level,
   add/remove) for ``--seeds`` noise seeds: train on all 60,000, top-1 on the 10,000
   test images. Baseline: non-private multinomial logistic regression on the same
   (normalised) features, by dpemb's L-BFGS and by scikit-learn.
4. Writes ``docs/RESULTS_TRANSFER.md`` (table, setup, observations),
   ``docs/transfer_fashion_mnist.png`` and the raw runs as JSON in the run folder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("dp-ls", "dp-newton", "dp-fc", "dp-sgd")

# --tune grid: hyperparameters that change the result at a given epsilon
GRID: dict[str, list[dict[str, Any]]] = {
    "dp-ls": [{"reg_noise": r, "alpha": 1.0} for r in (0.1, 0.3, 1.0)]
    + [{"reg_noise": 0.3, "alpha": a} for a in (0.25, 4.0)],
    "dp-newton": [{"reg_noise": 0.03, "alpha": a} for a in (0.1, 0.3, 1.0)]
    + [{"reg_noise": r, "alpha": 0.3} for r in (0.01, 0.1)],
    "dp-fc": [{"steps": s, "lr": lr, "reg_noise": 0.3} for s in (1, 3, 10) for lr in (2.0, 8.0, 32.0) if s > 1 or lr == 8.0]
    + [{"steps": 10, "lr": 8.0, "reg_noise": r} for r in (0.1, 1.0)],
    "dp-sgd": [{"steps": s, "lr": lr, "optimizer": "adam"} for s in (30, 100) for lr in (0.001, 0.003, 0.01, 0.03)]
    + [{"steps": s, "lr": lr, "optimizer": "sgd"} for s in (30, 100) for lr in (3.0, 30.0)],
}


def features(split: str, size: int, cache_dir: Path, limit: int | None = None):
    """Cached features of one split (extracted on the first run); ``limit``: only the
    first ``limit`` images (``--quick``)."""
    from dpemb.transfer.features import extract_features, load_backbone, load_features, load_image_dataset, save_features

    path = cache_dir / f"features_{split}_{size}px{f'_first{limit}' if limit else ''}.npz"
    if path.is_file():
        fs = load_features(path)
        print(f"[features] {split}: cached {path} ({fs.num_examples} x {fs.dim})", flush=True)
        return fs
    ds, spec = load_image_dataset(f"fashion-mnist:{split}")
    if limit is not None and limit < ds.num_examples:
        ds = ds.select(np.arange(ds.num_examples) < limit)
        spec = f"{spec}[:{limit}]"
    model, desc = load_backbone("imagenet-mobilenetv2", in_channels=1, image_size=size)
    t0 = time.perf_counter()
    fs = extract_features(ds, model, progress=True, meta={"data": spec, **desc})
    save_features(path, fs)
    print(f"[features] {split}: extracted {fs.num_examples} in {time.perf_counter() - t0:.0f} s -> {path}", flush=True)
    return fs


def config_for(method: str, eps: float, hp: dict[str, Any], seed: int | None, dim: int):
    """A TransferConfig; ``reg_noise`` becomes an absolute ridge by the default rule's formula."""
    from dpemb.transfer.budget import plan_noise
    from dpemb.transfer.config import TransferConfig
    from dpemb.transfer.runner import DEFAULTS, auto_reg, num_releases

    kw = {k: v for k, v in hp.items() if k != "reg_noise"}
    cfg = TransferConfig(method=method, epsilon=eps, delta=1e-5, seed=seed, **kw)
    if "reg_noise" in hp:
        plan = plan_noise(cfg.privacy_spec(), num_releases(cfg))
        reg = auto_reg(plan, cfg.clip_norm, dim, hp["reg_noise"], DEFAULTS[method]["reg_floor"])
        cfg = dataclasses.replace(cfg, reg=reg)
    return cfg


def run_one(prep, test, method: str, eps: float, hp: dict[str, Any], seed: int | None):
    from dpemb.transfer import runner

    run = runner.train_prepared(prep, config_for(method, eps, hp, seed, prep.dim))
    runner.evaluate(run, test)
    return run


VALIDATION_SIZE = 10000


def tune(train, epsilons: list[float], seed: int) -> dict[str, dict[float, dict[str, Any]]]:
    """Grid search on a validation split of the TRAINING set: the tuning runs train on
    the rest of it (never on the validation examples) and are scored on the validation
    examples; the test split is never used."""
    from dpemb.transfer.config import TransferConfig
    from dpemb.transfer.runner import holdout_split, prepare_train

    n_val = min(VALIDATION_SIZE, train.num_examples // 5)
    fit, val = holdout_split(train, n_val / train.num_examples, seed=seed)
    assert fit.num_examples + val.num_examples == train.num_examples
    print(f"[tune] fit on {fit.num_examples}, select on {val.num_examples} validation examples "
          "(held out of the training images; the test images are not used)", flush=True)
    prep = prepare_train(fit, TransferConfig(method="dp-ls", epsilon=1.0))
    best: dict[str, dict[float, dict[str, Any]]] = {}
    for method in METHODS:
        best[method] = {}
        for eps in epsilons:
            scores = []
            for hp in GRID[method]:
                run = run_one(prep, val, method, eps, hp, seed)
                scores.append((run.top1, hp))
                print(f"[tune] {method} eps {eps:g} {hp}: validation top-1 {run.top1:.4f}", flush=True)
            top, hp = max(scores, key=lambda s: s[0])
            best[method][eps] = {"hp": hp, "val_top1": top, "grid": [(s, h) for s, h in scores],
                                 "fit_examples": fit.num_examples,
                                 "validation_examples": val.num_examples}
            print(f"[tune] {method} eps {eps:g}: best {hp} ({top:.4f})", flush=True)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--epsilons", default="0.1,0.5,1,2,4,8")
    ap.add_argument("--seeds", type=int, default=3, help="noise seeds per (method, epsilon)")
    ap.add_argument("--tune", action="store_true", help="re-select hyperparameters on a validation split")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: the first 3,000 training and 1,000 test images, epsilon 1, one "
                         "seed, --tune (on a 600-image validation split); writes the pages into the "
                         "run folder, not docs/")
    ap.add_argument("--out-dir", default=None, help="run folder (default: runs/transfer_fashion_mnist"
                                                    "[_quick])")
    ap.add_argument("--docs", default=None, help="where the pages go (default: docs/; --quick: the "
                                                 "run folder's docs/)")
    ap.add_argument("--render-only", action="store_true",
                    help="re-write the docs from the run folder's results.json without running anything")
    args = ap.parse_args(argv)
    limits = (None, None)
    if args.quick:
        args.epsilons, args.seeds, args.tune, limits = "1", 1, True, (3000, 1000)
    if args.out_dir is None:
        args.out_dir = str(ROOT / "runs" / ("transfer_fashion_mnist" + ("_quick" if args.quick else "")))
    if args.docs is None:
        args.docs = str(Path(args.out_dir) / "docs" if args.quick else ROOT / "docs")
    epsilons = [float(e) for e in args.epsilons.split(",")]
    out_dir, docs = Path(args.out_dir), Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)

    from dpemb.transfer.config import TransferConfig
    from dpemb.transfer.plot import plot_sweep
    from dpemb.transfer.prepare import transform_features
    from dpemb.transfer.runner import evaluate, prepare_train, train_prepared

    if args.render_only:
        saved = json.loads((out_dir / "results.json").read_text())
        args.seeds, args.image_size = saved["seeds"], saved["image_size"]
        rows = saved["rows"]
        png = plot_sweep(rows, docs / "transfer_fashion_mnist.png", baseline=saved["baseline_dpemb"],
                         title=f"Fashion-MNIST, ImageNet-MobileNetV2 features ({args.image_size} px), delta 1e-5")
        counts = saved.get("counts", {"train": 60000, "test": 10000})
        counts.setdefault("tuned", bool(saved.get("tuned")))
        md = render(rows, epsilons, saved["baseline_dpemb"], saved["baseline_sklearn"], args, counts,
                    saved.get("minutes", 0.0) * 60, png.name)
        publish(md, rows, epsilons, saved["baseline_dpemb"], saved["baseline_sklearn"], args, png,
                saved.get("minutes", 0.0) * 60, counts)
        print(md)
        return 0

    t_start = time.perf_counter()
    train = features("train", args.image_size, out_dir, limits[0])
    test = features("test", args.image_size, out_dir, limits[1])

    tuned = tune(train, epsilons, seed=0) if args.tune else None
    if tuned is not None:
        (out_dir / "tuning.json").write_text(json.dumps(
            {m: {str(e): v for e, v in d.items()} for m, d in tuned.items()}, indent=1, default=str))

    prep = prepare_train(train, TransferConfig(method="dp-ls", epsilon=1.0))
    print("[runs] class Gramians ...", flush=True)
    t0 = time.perf_counter()
    prep.class_gramians()
    print(f"[runs] class Gramians in {time.perf_counter() - t0:.1f} s", flush=True)

    # non-private baselines on the same normalised features
    t0 = time.perf_counter()
    base_run = train_prepared(prep, TransferConfig(method="non-private"))
    base = evaluate(base_run, test)
    base_sec = time.perf_counter() - t0
    print(f"[baseline] dpemb non-private softmax regression: top-1 {base:.4f} ({base_sec:.0f} s)", flush=True)
    sk = None
    try:
        from sklearn.linear_model import LogisticRegression

        xtr, _ = transform_features(train.features, 1.0, True)
        xte, _ = transform_features(test.features, 1.0, True)
        t0 = time.perf_counter()
        clf = LogisticRegression(max_iter=1000).fit(xtr.numpy(), train.labels)
        sk = float(clf.score(xte.numpy(), test.labels))
        print(f"[baseline] scikit-learn LogisticRegression: top-1 {sk:.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
    except ImportError:
        pass

    rows: list[dict[str, Any]] = []
    for method in METHODS:
        for eps in epsilons:
            hp = tuned[method][eps]["hp"] if tuned else {}
            accs, secs, info = [], [], None
            for seed in range(args.seeds):
                run = run_one(prep, test, method, eps, hp, seed)
                accs.append(run.top1)
                secs.append(run.train_seconds)
                info = run.to_dict()
            rows.append({
                "method": method, "target_epsilon": eps, "epsilon": info["epsilon"], "top1": float(np.mean(accs)),
                "top1_std": float(np.std(accs)), "top1_runs": accs, "seconds": float(np.mean(secs)),
                "noise_multiplier": info["noise_multiplier"], "num_releases": info["num_releases"],
                "params": info["params"], "epsilon_sentence": info["epsilon_sentence"],
                "budget_split": info["budget_split"],
            })
            print(f"[runs] {method} eps {eps:g}: top-1 {np.mean(accs):.4f} +- {np.std(accs):.4f} "
                  f"(z {info['noise_multiplier']:.3g}, {np.mean(secs):.1f} s/run)", flush=True)

    total = time.perf_counter() - t_start
    counts: dict[str, Any] = {"train": train.num_examples, "test": test.num_examples, "tuned": bool(tuned)}
    if tuned:
        first = next(iter(next(iter(tuned.values())).values()))
        counts.update(fit=first["fit_examples"], validation=first["validation_examples"])
    (out_dir / "results.json").write_text(json.dumps(
        {"rows": rows, "baseline_dpemb": base, "baseline_sklearn": sk, "image_size": args.image_size,
         "seeds": args.seeds, "tuned": bool(tuned), "minutes": total / 60,
         "counts": counts}, indent=1, default=str))
    png = plot_sweep(rows, docs / "transfer_fashion_mnist.png", baseline=base,
                     title=f"Fashion-MNIST, ImageNet-MobileNetV2 features ({args.image_size} px), delta 1e-5")
    md = render(rows, epsilons, base, sk, args, counts, total, png.name)
    publish(md, rows, epsilons, base, sk, args, png, total, counts)
    print(md)
    print(f"wrote {docs / 'RESULTS_TRANSFER.md'} and {png}")
    return 0


def table_lines(rows, epsilons, base, sk, seeds: int) -> list[str]:
    """The method x epsilon table of top-1 (mean ± std over noise seeds) with the baselines."""

    def cell(m, e):
        r = next(r for r in rows if r["method"] == m and r["target_epsilon"] == e)
        return f"{r['top1']:.4f} ± {r['top1_std']:.4f}" if seeds > 1 else f"{r['top1']:.4f}"

    lines = ["| method | " + " | ".join(f"ε = {e:g}" for e in epsilons) + " |", "|---|" + "---|" * len(epsilons)]
    for m in METHODS:
        lines.append(f"| {m} | " + " | ".join(cell(m, e) for e in epsilons) + " |")
    lines.append(f"| non-private logistic regression (dpemb L-BFGS) | {base:.4f} |" + " |" * (len(epsilons) - 1))
    if sk is not None:
        lines.append(f"| non-private logistic regression (scikit-learn, default C = 1) | {sk:.4f} |"
                     + " |" * (len(epsilons) - 1))
    return lines


def command(args, tuned: bool) -> str:
    """The command line that produced the page."""
    flags = " --quick" if getattr(args, "quick", False) else (" --tune" if tuned else "")
    return f"python experiments/transfer_fashion_mnist.py{flags}"


def protocol(counts: dict[str, Any]) -> str:
    """How the hyperparameters were chosen and what the reported numbers are measured on."""
    n_train, n_test = counts["train"], counts["test"]
    if counts.get("tuned"):
        how = (f"selected in this run (`--tune`) on a validation split of {counts['validation']:,} of "
               f"the {n_train:,} training images; the tuning runs trained on the other "
               f"{counts['fit']:,}, never on the validation images")
    else:
        how = ("the defaults of `dpemb.transfer.runner.DEFAULTS`, selected earlier by the same "
               "`--tune` procedure (a validation split of 10,000 of the 60,000 training images; the "
               "tuning runs trained on the other 50,000)")
    return (f"**Selection and reporting.** Hyperparameters: {how}. Every reported number is top-1 "
            f"on the {n_test:,} TEST images, which are disjoint from the training and validation "
            f"images and were never used for any choice; the reported runs train on all "
            f"{n_train:,} training images.")


def scope(counts: dict[str, Any], epsilons: list[float]) -> str:
    """What the page's ε covers (epsilon_scope): the runs' own, with the ``--tune`` grid's
    DP runs (every method's grid at every ε) unaccounted."""
    from epsilon_scope import own_epsilon_note

    return own_epsilon_note(
        units=f"the {counts['train']:,} training examples (example-level)",
        tuning_runs=sum(len(g) for g in GRID.values()) * len(epsilons),
        tuned_on=(f"the same training examples (the `--tune` grid: {', '.join(f'{m} {len(g)}' for m, g in GRID.items())} "
                  f"at each of the {len(epsilons)} ε, scored on a validation split of "
                  f"{counts.get('validation', 10_000):,} of them)"),
        data="the public Fashion-MNIST data")


def publish(md: str, rows, epsilons, base, sk, args, png, total: float,
            counts: dict[str, Any] | None = None) -> None:
    """Write the detailed page and the headline section of docs/RESULTS.md."""
    counts = counts or {"train": 60000, "test": 10000}
    from results_page import update_section

    docs = Path(args.docs)
    (docs / "RESULTS_TRANSFER.md").write_text(md)
    get = {(r["method"], r["target_epsilon"]): r for r in rows}
    lo = min(epsilons)
    head = [
        "## DP classification from features (Fashion-MNIST)",
        "",
        f"`{command(args, counts.get('tuned'))}` ({total / 60:.0f} min with cached features; "
        "`make fashion-mnist` installs the data). Frozen ImageNet MobileNetV2 features "
        f"({args.image_size} px, 1280-d) of the {counts['train']:,} training images; top-1 on the "
        f"{counts['test']:,} test images, mean ± std over {args.seeds} noise seeds. Example-level "
        "(ε, δ = 1e-5)-DP, PLD accountant, add/remove-one-example relation. Details, settings and "
        "budget splits: [RESULTS_TRANSFER.md](RESULTS_TRANSFER.md).",
        "",
        scope(counts, epsilons),
        "",
        protocol(counts),
        "",
        *table_lines(rows, epsilons, base, sk, args.seeds),
        "",
        f"![top-1 vs epsilon]({png.name})",
        "",
        f"Against the papers: DP-LS is {'ahead of' if get[('dp-ls', lo)]['top1'] > get[('dp-sgd', lo)]['top1'] else 'NOT ahead of'} "
        f"DP-SGD at ε = {lo:g} ({get[('dp-ls', lo)]['top1']:.4f} vs {get[('dp-sgd', lo)]['top1']:.4f}); "
        "best at each ε: " + ", ".join(
            f"{e:g}: {max(METHODS, key=lambda m: get[(m, e)]['top1'])}" for e in epsilons) + ".",
    ]
    update_section(docs, "transfer", "\n".join(head))


def render(rows, epsilons, base, sk, args, counts, total, png_name) -> str:
    from dpemb.transfer.runner import DEFAULTS

    lines = [
        "# Results: DP classification from features (Fashion-MNIST)",
        "",
        f"Generated by `{command(args, counts.get('tuned'))}` "
        f"({time.strftime('%Y-%m-%d')}, {total / 60:.0f} min on {platform.machine()} with "
        f"{torch.get_num_threads()} torch threads).",
        "",
        f"Features: frozen ImageNet MobileNetV2 (torchvision weights, public data), Fashion-MNIST images "
        f"resized to {args.image_size} px, 1280-d pooled features; train {counts['train']}, "
        f"test {counts['test']}. Features normalised to norm C = 1. Every DP run: delta = 1e-5, PLD "
        "accountant, example-level privacy, add/remove-one-example relation, equal budget split over "
        f"the method's releases. Top-1 on the {counts['test']:,} test images, mean ± std over "
        f"{args.seeds} noise seeds (seeded runs: experiments, not releases).",
        "",
        scope(counts, epsilons),
        "",
        protocol(counts),
        "",
    ]
    lines += table_lines(rows, epsilons, base, sk, args.seeds)
    lines += ["", f"![top-1 vs epsilon]({png_name})", "", "## Observations (computed from the table)", ""]
    lo, hi = min(epsilons), max(epsilons)
    get = {(r["method"], r["target_epsilon"]): r for r in rows}
    ls, sgd = get[("dp-ls", lo)]["top1"], get[("dp-sgd", lo)]["top1"]
    lines.append(f"- At ε = {lo:g}: DP-LS {ls:.4f} vs DP-SGD {sgd:.4f} "
                 f"({'DP-LS ahead, as the papers expect' if ls > sgd else 'DP-LS NOT ahead, unlike the papers'}).")
    for e in epsilons:
        best = max(METHODS, key=lambda m: get[(m, e)]["top1"])
        lines.append(f"- ε = {e:g}: best {best} ({get[(best, e)]['top1']:.4f}); DP-FC {get[('dp-fc', e)]['top1']:.4f}; "
                     f"gap to non-private {base - get[(best, e)]['top1']:+.4f}.")
    lines += ["", "## Settings", "", "| method | releases | noise multiplier at ε = 1 | hyperparameters | s / run |",
              "|---|---|---|---|---|"]
    for m in METHODS:
        r = get[(m, 1.0)] if (m, 1.0) in get else get[(m, epsilons[0])]
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["params"].items()
                           if v is not None and k not in ("betas", "adam_eps", "momentum"))
        lines.append(f"| {m} | {r['num_releases']} | {r['noise_multiplier']:.3g} | {params} | {r['seconds']:.1f} |")
    lines += ["", "Budget split, e.g. at ε = 1:", ""]
    for m in METHODS:
        r = get[(m, 1.0)] if (m, 1.0) in get else get[(m, epsilons[0])]
        lines.append(f"- {m}: {r['epsilon_sentence']}; {r['budget_split']}")
    lines += ["", "Defaults (`dpemb.transfer.runner.DEFAULTS`): " + json.dumps(DEFAULTS), ""]
    lines += [
        "## Notes", "",
        "- Hyperparameters (including the baseline's L2 strength) were chosen on a 10,000-example validation "
        "split carved from the TRAINING set (`--tune` re-runs that grid), never on the test split. The "
        "selection itself is not privacy-accounted, as in the papers.",
        "- Each (method, ε) cell is its own run with its own budget; publishing several of them costs the sum "
        "of their ε.",
        "- The scikit-learn row uses its defaults (C = 1, i.e. a stronger L2 penalty than the tuned dpemb "
        "baseline); it is shown as an independent check, not as the reference.",
        "- The papers' expectation (DP-LS ahead of DP-SGD at small ε) was measured on ImageNet-scale data "
        "(1.2M examples). A likely reason it does not show here: the noise on a d x d Gramian does not "
        "depend on N while its signal grows with N, so with 60,000 examples and d = 1280 the Gramian "
        "releases are relatively noisier than the 10 x 1280 gradient releases (not tested here).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

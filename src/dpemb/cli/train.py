"""`dpemb train`: train an embedding backbone on a dpemb dataset directory; `dpemb recipes`:
the measured run configurations shipped with dpemb (``dpemb.training.recipes``) it runs
with --recipe."""

from __future__ import annotations

import argparse
from dataclasses import fields

from dpemb.cli.common import (
    DefaultsHelpFormatter, add_device_flag, add_noise_seed_flags, add_shared, check_config_dataset, device_from, fmt,
    guarded,
)
from dpemb.cli.main import UsageError
from dpemb.models import BACKBONES, TRAINABLE_CHOICES
from dpemb.privacy.spec import ACCOUNTANTS, MECHANISMS, SAMPLINGS
from dpemb.training.run_config import ALGORITHMS, PrivacyRequest

#: --resume value -> the training loops' ``resume`` argument
RESUME = {None: False, "yes": True, "auto": "auto"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", formatter_class=DefaultsHelpFormatter,
        help="train an embedding model",
        description=(
            "Train an embedding backbone on the training identities of a dataset made "
            "with `dpemb data make`, evaluating Recall@FAR on its held-out identities. "
            "Writes the released files config.json, metrics.jsonl, report.json, roc.png, "
            "training.png and the model artifact (model.safetensors + model_card.json) to "
            "--out, and the PRIVATE training state (checkpoint, diagnostics, the configuration as given) to "
            "--out/private/ "
            "(mode 0700; never needed downstream)."
        ),
    )
    add_train_arguments(p)
    p.set_defaults(func=guarded(run, "train"))
    _register_recipes(sub)


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag of `dpemb train` (also the flags of `dpemb audit`, which trains the same way)."""
    p.add_argument("--config", metavar="FILE",
                   help="a run configuration (TOML or JSON; a run's own private/config.json is one; its released "
                        "config.json too, with --data given): every setting not given as a flag comes from it "
                        "(docs/API.md)")
    p.add_argument("--recipe", metavar="NAME",
                   help="a shipped recipe (`dpemb recipes` lists them) as the configuration: every setting not "
                        "given as a flag comes from it; not with --config")
    p.add_argument("--data", help="dataset directory (from `dpemb data make`); required unless --config names it")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--algorithm", choices=ALGORITHMS,
                   help="centralized (non-private SGD, the baseline), dp-fedemb (virtual clients, "
                        "fresh local head, only the backbone is clipped/noised), dp-fedavg (whole "
                        "model incl. global head is aggregated), dp-ftrl-fedemb (DP-FedEmb with "
                        "tree-aggregation noise). Default: %(default)s")
    p.add_argument("--train-split", choices=("private", "public", "all"),
                   help="users to train on: the private users (default), the public users "
                        "(public pretraining), or both")
    m = p.add_argument_group("model")
    m.add_argument("--backbone", choices=BACKBONES)
    m.add_argument("--embedding-dim", type=int)
    m.add_argument("--width", type=float, help="channel width multiplier")
    m.add_argument("--init",
                   help="'random', 'imagenet' (mobilenetv2-bn only) or a trained model to start "
                        "from: a run directory or release artifact (e.g. a public pretraining run, "
                        "--train-split public)")
    add_shared(m, "--allow-nonprivate-init", "a DP run's start (--init) from a model",
               "private users", "the initialisation", action="store_true")
    m.add_argument("--trainable", choices=TRAINABLE_CHOICES,
                   help="norm-only: freeze convolutions; train normalisation layers and the "
                        "embedding layer. features: freeze the embedding layer; train the rest "
                        "(fewer noised parameters where the embedding layer is most of them, as in lenet)")
    o = p.add_argument_group("optimizer (centralized)")
    for flag, kind in (("--lr", float), ("--momentum", float), ("--weight-decay", float),
                       ("--batch-size", int), ("--steps", int)):
        o.add_argument(flag, type=kind)
    o.add_argument("--cosine", action="store_true", help="cosine learning-rate decay to 0")
    f = p.add_argument_group("federated (dp-fedemb, dp-fedavg, dp-ftrl-fedemb)")
    f.add_argument("--rounds", type=int)
    f.add_argument("--clients-per-round", type=int,
                   help="M, virtual clients per round (default %(default)s)")
    f.add_argument("--users-per-client", type=int,
                   help="K, users per virtual client (default %(default)s; K > 1 doubles the add/remove "
                        "sensitivity to 2C)")
    f.add_argument("--local-epochs", type=int)
    f.add_argument("--local-batch-size", type=int)
    f.add_argument("--max-examples-per-client", type=int,
                   help="Nmax: cap on examples a virtual client trains on per round")
    f.add_argument("--client-lr", type=float)
    f.add_argument("--client-momentum", type=float)
    f.add_argument("--head-lr-scale", type=float,
                   help="dp-fedemb: head learning rate = client lr x this")
    f.add_argument("--head-first-steps", type=int,
                   help="dp-fedemb: first R local steps train only the head, later ones only the backbone")
    f.add_argument("--local-head", choices=("global", "local"),
                   help="dp-fedemb: fresh head over all training identities (global) or over the "
                        "identities present in the virtual client (local)")
    f.add_argument("--head-init", choices=("zeros", "glorot"),
                   help="dp-fedemb: initialisation of the fresh head. zeros (default): the first local "
                        "step trains only the head, so clients need >= 2 local steps; it avoided the "
                        "backbone collapse that glorot (the reference's choice) caused in "
                        "docs/RESULTS_FEDEMB.md")
    f.add_argument("--server-lr", type=float)
    f.add_argument("--server-momentum", type=float, help="--server-optimizer sgd: momentum")
    f.add_argument("--server-optimizer", choices=("sgd", "adam"),
                   help="how the server applies the noised average update: sgd (default; with "
                        "--server-momentum) or adam (FedAdam, Reddi et al. 2021: betas 0.9, 0.99; "
                        "dp-fedemb and dp-fedavg only). Post-processing: epsilon is unchanged")
    f.add_argument("--server-adam-eps", type=float, metavar="TAU",
                   help="--server-optimizer adam: epsilon (FedAdam's tau; default 1e-3)")
    f.add_argument("--server-lr-schedule", choices=("constant", "cosine"),
                   help="server lr by round: constant (default) or cosine (decays to 0 at the end of the "
                        "planned --rounds). Post-processing: epsilon is unchanged")
    f.add_argument("--server-lr-warmup", type=int, metavar="R",
                   help="linear server lr warmup over the first R rounds (default 0; R < --rounds)")
    f.add_argument("--divergence-norm-ratio", type=float, metavar="R",
                   help="stop (checkpoint intact) when the server model's norm exceeds R x its initial norm: "
                        "noise swamping the updates. A test on the released model only; 0: never (default: "
                        "%(default)s)")
    f.add_argument("--server-ema", type=float, metavar="DECAY",
                   help="release (and evaluate) an exponential moving average of the server models with "
                        "this decay, e.g. 0.99 (default 0: the last server model). The clients still start "
                        "from the server model. Post-processing: epsilon is unchanged")
    f.add_argument("--public-negatives", action="store_true",
                   help="dp-fedemb: append to every fresh head one row per identity of the dataset's PUBLIC "
                        "split (its imprinted prototype under the round's model), so that small virtual "
                        "clients still contrast their users with many identities. The public split is not "
                        "protected; epsilon is unchanged")
    f.add_argument("--plain-tree", action="store_true",
                   help="dp-ftrl-fedemb: plain tree prefix sums instead of the efficient estimator")
    lo = p.add_argument_group(
        "loss (the head's training loss: centralized head, dp-fedemb's fresh client heads, dp-fedavg's "
        "global head)")
    lo.add_argument("--loss", choices=("softmax", "cosface", "arcface"),
                    help="softmax (default): linear logits + cross-entropy. cosface: s x (cos - m) on the "
                         "target over normalised embedding and class rows. arcface: s x cos(theta + m) on the "
                         "target (threshold fallback past pi - m). With a margin loss, dp-fedemb's "
                         "--head-init zeros imprints each fresh head from the client's class means")
    lo.add_argument("--loss-scale", type=float, metavar="S",
                    help="s, the scale of the cosine logits (cosface/arcface; default 30)")
    lo.add_argument("--loss-margin", type=float, metavar="M",
                    help="m (cosface: on the cosine, default 0.35, in [0, 1]; arcface: radians, default "
                         "0.5, in [0, pi/2])")
    q = p.add_argument_group(
        "privacy (federated algorithms; any of these with --algorithm centralized is an error, as "
        "centralized training is not private)")
    q.add_argument("--clip-norm", type=float,
                   help="C, L2 clip norm of each client delta")
    add_shared(q, "--noise-multiplier", "the clipped sum (user level)", type=float)
    add_shared(q, "--target-epsilon", " (with --accountant) before training", type=float)
    q.add_argument("--accountant", choices=ACCOUNTANTS,
                   help="the accountant --target-epsilon is calibrated with (and the extrapolations are stated in)")
    add_shared(q, "--target-population", "", type=int, metavar="N")
    q.add_argument("--report-populations", type=_populations, metavar="N[,N...]",
                   help="also state the epsilon extrapolated to these populations in the report and model card "
                        "(beside 1,000,000 and 10,000,000)")
    add_shared(q, "--delta", "training users", type=float)
    add_shared(q, "--allow-large-delta", "; the run warns", action="store_true")
    add_shared(q, "--sampling", choices=SAMPLINGS)
    add_shared(q, "--tree-restarts", action="store_true")
    add_shared(q, "--mechanism", ". Default: the algorithm's (gaussian; tree for dp-ftrl-fedemb, "
               "which also takes bandmf and blt)", choices=MECHANISMS)
    add_shared(q, "--bands", type=int, metavar="B")
    q.add_argument("--adaptive-clip-quantile", type=float, metavar="GAMMA",
                   help="adaptive clipping (Andrew et al. 2021; dp-fedemb, dp-fedavg): move the clip norm "
                        "toward this quantile of the client update norms, starting from --clip-norm. The "
                        "noise multiplier stays the TOTAL one (epsilon unchanged): part of it noises the "
                        "count of clients below the clip, the rest the update (docs/PRIVACY.md)")
    q.add_argument("--clip-lr", type=float, metavar="ETA",
                   help="adaptive clipping: geometric learning rate of the clip norm (default 0.2)")
    q.add_argument("--clip-count-stddev", type=float, metavar="SIGMA_B",
                   help="adaptive clipping: noise std on the count of clients below the clip (default: "
                        "expected clients per round / 20); must exceed z x its sensitivity (1/2 for K = 1, else 1)")
    q.add_argument("--epsilon-budget", type=float,
                   help="stop before a round would take RDP epsilon above this")
    add_noise_seed_flags(q, "--noise-seed", " and the sampling")
    add_shared(q, "--audit-canaries", "make the run an AUDIT run: add", "users",
               "a fixed random update direction ", " and sampled like any user",
               "The accountant counts the canaries as users. The model is marked not for release: "
               "train the production model as a separate run. Gaussian noise with Poisson "
               "sampling and a fixed clip only", type=int, metavar="N")
    q.add_argument("--release-audit-run", action="store_true",
                   help="with --audit-canaries: mark the audit run as released instead of not for release "
                        "(its epsilon covers the real and the canary users)")
    q.add_argument("--non-private", action="store_true",
                   help="explicitly run without noise (z = 0); every output says 'not private'")
    r = p.add_argument_group("run")
    r.add_argument("--seed", type=int,
                   help="model initialisation seed (and data order of centralized training); the "
                        "federated clients' randomness comes from the secret run key")
    r.add_argument("--eval-split", choices=("test", "validation"),
                   help="held-out users and identities to evaluate on: test (default; the numbers "
                        "to report) or validation (to choose hyperparameters without touching test)")
    r.add_argument("--eval-max-examples", type=int, metavar="N",
                   help="evaluate on a fixed random subset of N held-out examples (the experiments' subset; "
                        "`dpemb eval --max-examples N` scores the same images); default: all of them")
    r.add_argument("--eval-every", type=int)
    r.add_argument("--eval-max-pairs", type=int,
                   help="sample this many pairs instead of evaluating all pairs exactly")
    r.add_argument("--resume", nargs="?", const="yes", choices=("yes", "auto"),
                   help="continue from the run's private checkpoint; an error when there is none. "
                        "'--resume auto' resumes when a checkpoint exists and starts fresh otherwise "
                        "(for restarts by a scheduler). Same flags required, except the "
                        "performance-only ones (--threads, --no-progress, --device, --eval-batch-size, "
                        "--checkpoint-every, --checkpoint-interval)")
    r.add_argument("--overwrite", action="store_true",
                   help="replace a run already in --out, whole (refused otherwise: a non-empty --out needs "
                        "--resume or --overwrite, and a folder that holds no dpemb run is never written into)")
    r.add_argument("--checkpoint-every", type=int,
                   help="also checkpoint every N rounds (federated) or steps (centralized); 0: only at "
                        "evaluations, on the time interval and on SIGTERM/SIGINT")
    r.add_argument("--checkpoint-interval", type=float, metavar="SECONDS",
                   help="checkpoint when this much time has passed since the last one (default 300; 0: "
                        "off). SIGTERM and SIGINT always checkpoint before the run stops")
    add_device_flag(r)
    r.add_argument("--eval-batch-size", type=int, help="images per evaluation batch")
    r.add_argument("--threads", type=int, help="torch threads (0: default)")
    r.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    r.add_argument("--client-batch", type=int, metavar="B",
                   help="federated: train B virtual clients at once (vmap over stacked copies; for GPUs, where "
                        "small backbones leave the device idle). Same updates to float rounding; performance only")
    r.add_argument("--bf16", action="store_true",
                   help="federated: local training under bfloat16 autocast (performance only; the clipping, "
                        "noise and epsilon are unchanged, the numbers change by bf16 rounding)")
    bind_defaults(p)


#: flag dest -> the TrainConfig setting it sets ("!": a store_true flag that sets it False)
SETTINGS = {
    "data": "data.path", "train_split": "data.train_split", "eval_split": "data.eval_split",
    "eval_max_examples": "data.eval_max_examples",
    "algorithm": "algorithm", "seed": "seed", "eval_every": "eval_every", "eval_max_pairs": "eval_max_pairs",
    **{d: f"model.{d}" for d in ("backbone", "embedding_dim", "width", "init", "trainable")},
    **{d: f"optim.{d}" for d in ("lr", "momentum", "weight_decay", "batch_size", "steps", "cosine")},
    **{d: f"federated.{d}" for d in (
        "local_epochs", "local_batch_size", "max_examples_per_client", "client_lr", "client_momentum",
        "head_lr_scale", "head_first_steps", "local_head", "head_init", "server_lr", "server_momentum",
        "server_optimizer", "server_adam_eps", "server_lr_schedule", "server_lr_warmup", "divergence_norm_ratio",
        "server_ema", "public_negatives")},
    "plain_tree": "!federated.efficient_tree", "non_private": "privacy.nonprivate",
    "loss": "loss.kind", "loss_scale": "loss.scale", "loss_margin": "loss.margin",
    # every field of the privacy request, in its order, but nonprivate (--non-private, above)
    **{f.name: f"privacy.{f.name}" for f in fields(PrivacyRequest) if f.name != "nonprivate"},
}
#: flag dest -> the PerformanceFlags field it sets
PERFORMANCE = {"threads": "threads", "device": "device", "eval_batch_size": "eval_batch_size",
               "no_progress": "!progress", "client_batch": "client_batch", "bf16": "bf16",
               "checkpoint_every": "checkpoint_every", "checkpoint_interval": "checkpoint_interval_s"}


def _populations(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v.replace("_", "")) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated user counts, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive user counts, got {text!r}")
    return values


def bind_defaults(p: argparse.ArgumentParser) -> None:
    """Every settings flag defaults to the ``TrainConfig`` / ``PerformanceFlags`` field it
    sets (shown in --help) and is left out of the parsed namespace unless given, so that
    flags override a --config file and the defaults live in one place."""
    from dpemb.training.run_config import PerformanceFlags, TrainConfig, get_setting

    config, perf = TrainConfig(), PerformanceFlags()
    for action in p._actions:
        for table, source in ((SETTINGS, config), (PERFORMANCE, perf)):
            if action.dest in table:
                path = table[action.dest]
                action.config_default = _through(path, get_setting(source, path.lstrip("!")))
                action.default = argparse.SUPPRESS


def _through(path: str, value):
    """A flag's value as the setting at ``path`` takes it, and back ("!": inverted)."""
    return (not value) if path.startswith("!") else value


def _settings_given(table: dict[str, str], given: dict) -> dict:
    """{setting: value} of the flags of ``table`` given on the command line."""
    return {path.lstrip("!"): _through(path, given[d]) for d, path in table.items() if d in given}


def config_from_args(args: argparse.Namespace):
    """(TrainConfig, PerformanceFlags) of the parsed flags: --config FILE (or the
    defaults), with every flag given on the command line over it."""
    from dpemb.training.run_config import PerformanceFlags, TrainConfig, load_config, with_settings

    given = vars(args)
    settings = _settings_given(SETTINGS, given)
    if "loss.kind" in settings:  # a new kind takes its own scale and margin unless given
        settings.setdefault("loss.scale", None)
        settings.setdefault("loss.margin", None)
    if given.get("loss", "softmax") == "softmax" and ("loss_scale" in given or "loss_margin" in given) and \
            ("loss" in given or not (getattr(args, "config", None) or getattr(args, "recipe", None))):
        raise UsageError("--loss-scale and --loss-margin apply to --loss cosface or arcface only")
    recipe = getattr(args, "recipe", None)
    if recipe and getattr(args, "config", None):
        raise UsageError("--recipe and --config are exclusive: both are the whole configuration (a recipe as a "
                         f"file: `dpemb recipes {recipe} --toml > mine.toml`, then --config mine.toml)")
    if recipe:
        from dpemb.training.recipes import check_recipe_run, load_recipe

        base, info = load_recipe(recipe)
    else:
        base = load_config(args.config) if getattr(args, "config", None) else \
            with_settings(TrainConfig(), getattr(args, "default_settings", {}))  # (dpemb audit: dp-fedemb)
    config = with_settings(base, settings)
    if getattr(args, "config", None) and "data.path" not in settings:
        check_config_dataset(config, args.config, "give --data DIR")
    if recipe:  # its rules: the extrapolation accepted explicitly, the public start given
        config = check_recipe_run(config, info, set(settings))
    if not config.federated_run:  # a privacy flag given explicitly, even at its default value
        from dpemb.training.run_config import NOT_PRIVACY_KNOBS
        from dpemb.training.runner import centralized_refusal

        flags = [_flag(d, given) for d, path in SETTINGS.items() if d in given and path.startswith("privacy.")
                 and path.split(".")[1] not in NOT_PRIVACY_KNOBS]
        if flags:
            raise UsageError(str(centralized_refusal(flags)))
    perf = _settings_given(PERFORMANCE, given)
    try:
        device_from(argparse.Namespace(device=perf.get("device", "auto")))  # an unknown device: before any work
        return config, PerformanceFlags(**perf)
    except ValueError as e:
        raise UsageError(str(e)) from e


def _flag(dest: str, given: dict) -> str:
    if dest == "secure_noise" and given[dest] is False:
        return "--no-secure-noise"
    return "--" + dest.replace("_", "-")


def run(args: argparse.Namespace) -> int:
    from dpemb.training.executor import DistributedEnv, exit_worker
    from dpemb.training.runner import train

    config, perf = config_from_args(args)
    if getattr(args, "recipe", None):
        from dpemb.training.recipes import describe_run

        print(describe_run(args.recipe, config))
    report = train(config, args.out, perf=perf, resume=RESUME[args.resume], overwrite=args.overwrite,
                   audit_score=getattr(args, "audit_score", "final"))
    env = DistributedEnv.from_environ()
    if env is not None and env.rank != 0:  # a worker rank: rank 0 holds the run and prints its summary
        exit_worker()
    print_summary(report, args.out)
    return 0


def print_summary(report: dict, run_dir: str) -> None:
    init, final = report.get("initial") or {}, report["final"]
    print(f"run directory: {run_dir}")
    priv = report["privacy"]
    if isinstance(priv, str):
        print(f"privacy: {priv}")
    elif "statement" in priv:
        print(f"privacy: {priv['statement']}")
    else:
        for a in ACCOUNTANTS:
            print(f"privacy: {priv[f'statement_{a}']}")
        if isinstance(priv.get("total_with_init"), dict):
            print(f"privacy: {priv['total_with_init']['statement']}")
        for ex in priv.get("extrapolated", []):
            print(f"extrapolated: {ex['statement']}")
        if priv.get("noise_seeded"):
            print("note: noise and sampling were SEEDED (reproducible experiment, not for release)")
        print(priv["noise_sampler"])
    if isinstance(priv, dict) and isinstance(priv.get("adaptive_clipping"), dict):
        a = priv["adaptive_clipping"]
        print(f"adaptive clipping: target quantile {a['target_quantile']:g}, clip norm "
              f"{a['initial_clip_norm']:.4g} -> {fmt(a['final_clip_norm'])}"
              + ("" if a["count_noised"] else " (count not noised: non-private run)"))
    audit = priv.get("audit") if isinstance(priv, dict) else None
    if isinstance(audit, dict):
        print(f"audit: {audit['statement']}")
        print(audit["release"])
    if report.get("stopped_by_epsilon_budget"):
        print(f"stopped after {report['rounds']} rounds: the next round would exceed --epsilon-budget")
    keys = ["recall_at_far_0.0001", "recall_at_far_0.001", "recall_at_far_0.01",  # FAR ascending
            "recall_at_far_0.001_in_batch_approx", "roc_auc", "precision_at_1", "map_at_r"]
    print(f"{'metric (held-out identities)':40s} {'initial':>9s} {'final':>9s}")
    for k in keys:
        print(f"{k:40s} {fmt(init.get(k, '-')):>9s} {fmt(final.get(k)):>9s}")


# ------------------------------------------------------------------------------ recipes
def _register_recipes(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recipes", help="list the shipped recipes (measured configurations) or show one",
        description=(
            "Without NAME: a table of the recipes: what each reproduces (Recall@FAR on the test split, mean ± std "
            "over seeds), its measured time on 2 cores and the command that makes its data. With NAME: the whole "
            "recipe (results, their sources, notes, settings) and the command lines that run it. Run one with "
            "`dpemb train --recipe NAME --data DIR --out RUN` (flags given beside it override its settings)."
        ),
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="the recipe to show")
    p.add_argument("--toml", action="store_true",
                   help="with NAME: print the recipe file itself (a valid `dpemb train --config` file)")
    p.set_defaults(func=guarded(run_recipes, "recipes"))


def run_recipes(args: argparse.Namespace) -> int:
    from dpemb.training.recipes import list_recipes, load_recipe, recipe_text

    if args.name is None:
        if args.toml:
            raise UsageError("--toml needs a recipe NAME")
        rows = [("NAME", "REPRODUCES (test split)", "TIME ON 2 CORES", "DATA")]
        for name in list_recipes():
            _, info = load_recipe(name)
            rows.append((name, "; ".join(_short(r) for r in info.reproduces), info.time_2cores, info.data_command))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
        print("\n`dpemb recipes NAME` shows one recipe and the commands that run it.")
        return 0
    if args.toml:
        print(recipe_text(args.name), end="")
        return 0
    config, info = load_recipe(args.name)
    print(describe(args.name, config, info))
    return 0


def _short(result) -> str:
    """'0.908 ± 0.002 [3 seeds]' (the value without its parenthesis)."""
    value = result.value.split(" (")[0]
    if value == "not measured":
        return value
    return f"{value} [{result.seeds} seed{'s' * (result.seeds != 1)}]"


def describe(name: str, config, info) -> str:
    """The whole recipe as ``dpemb recipes NAME`` prints it."""
    from dpemb.training.recipes import load_recipe, recipe_text, run_command

    L = [f"{name}: {info.description}", "", "reproduces:"]
    for r in info.reproduces:
        L += [f"  {r.line()}", f"    data: {r.data}", f"    confidence interval over test identities: {r.ci}",
              f"    source: {r.source}"]
    L += [f"time on 2 cores: {info.time_2cores} ({info.time_basis})"]
    if info.experiment:
        L.append(f"experiment: {info.experiment}")
    p = config.privacy
    if info.extrapolates:
        L.append(f"extrapolates: yes. Epsilon {p.target_epsilon:g} ({p.accountant.upper()}) is stated for the run "
                 f"extrapolated to {p.target_population:,} users from its data's {info.population:,} training users; "
                 "on data with another population it runs only with --target-population given explicitly, and "
                 "prints both epsilons")
    elif config.federated_run and p.target_epsilon is not None:
        L.append(f"extrapolates: no. Epsilon {p.target_epsilon:g} ({p.accountant.upper()}) is calibrated at the "
                 "population the run trains")
    else:
        L.append("extrapolates: no" + ("" if config.federated_run else " (centralized: not private, no epsilon)"))
    if info.init_recipe:
        _, pre = load_recipe(info.init_recipe)
        L.append(f"starts from: the run of recipe {pre.name} ({pre.description}), given as --init")
    if info.notes:
        L += ["notes:", *(f"  - {n}" for n in info.notes)]
    L += ["run it:", *(f"  {c}" for c in run_command(info))]
    settings = recipe_text(name).split("\n[recipe", 1)[0].rstrip()
    L += ["settings (the recipe file without its [recipe] table; flags given to dpemb train override them):",
          *(f"  {ln}" if ln else "" for ln in settings.splitlines())]
    return "\n".join(L)

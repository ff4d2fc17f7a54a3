"""`dpemb train`: train an embedding backbone on a dpemb dataset directory."""

from __future__ import annotations

import argparse
import sys

from dpemb.cli.common import DefaultsHelpFormatter, add_device_flag, add_secure_noise_flag, device_from, fmt, guarded, load_dataset
from dpemb.cli.main import UsageError
from dpemb.models import BACKBONES, TRAINABLE_CHOICES
from dpemb.training.config import ModelConfig, OptimConfig, RunConfig

#: --resume value -> the training loops' ``resume`` argument
RESUME = {None: False, "yes": True, "auto": "auto"}

ALGORITHMS = ("centralized", "dp-fedavg", "dp-fedemb", "dp-ftrl-fedemb")
DEFAULT_CLIP_NORM = 0.3
#: federated defaults, from measurement (docs/RESULTS_FEDEMB.md, "Defaults"): virtual clients
#: of 16 users give the fresh local head enough identities to contrast
DEFAULT_CLIENTS_PER_ROUND = 8
DEFAULT_USERS_PER_CLIENT = 16
#: the privacy flags (argparse dest -> flag); each defaults to None or False, so any given one shows
PRIVACY_FLAGS = {
    "clip_norm": "--clip-norm", "noise_multiplier": "--noise-multiplier", "target_epsilon": "--target-epsilon",
    "delta": "--delta", "allow_large_delta": "--allow-large-delta", "sampling": "--sampling",
    "tree_restarts": "--tree-restarts", "epsilon_budget": "--epsilon-budget", "noise_seed": "--noise-seed",
    "secure_noise": "--secure-noise", "non_private": "--non-private",
    "adaptive_clip_quantile": "--adaptive-clip-quantile", "clip_lr": "--clip-lr",
    "clip_count_stddev": "--clip-count-stddev",
    "audit_canaries": "--audit-canaries", "release_audit_run": "--release-audit-run",
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train", formatter_class=DefaultsHelpFormatter,
        help="train an embedding model",
        description=(
            "Train an embedding backbone on the training identities of a dataset made "
            "with `dpemb data make`, evaluating Recall@FAR on its held-out identities. "
            "Writes the released files config.json, metrics.jsonl, report.json, roc.png, "
            "training.png and the model artifact (model.safetensors + model_card.json) to "
            "--out, and the PRIVATE training state (checkpoint, diagnostics) to --out/private/ "
            "(mode 0700; never needed downstream)."
        ),
    )
    add_train_arguments(p)
    p.set_defaults(func=guarded(run, "train"))


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    """Every flag of `dpemb train` (also the flags of `dpemb audit`, which trains the same way)."""
    p.add_argument("--data", required=True, help="dataset directory (from `dpemb data make`)")
    p.add_argument("--out", required=True, help="run directory to write")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="centralized",
                   help="centralized (non-private SGD, the baseline), dp-fedemb (virtual clients, "
                        "fresh local head, only the backbone is clipped/noised), dp-fedavg (whole "
                        "model incl. global head is aggregated), dp-ftrl-fedemb (DP-FedEmb with "
                        "tree-aggregation noise). Default: %(default)s")
    p.add_argument("--train-split", choices=("private", "public", "all"), default="private",
                   help="users to train on: the private users (default), the public users "
                        "(public pretraining), or both")
    m = p.add_argument_group("model")
    m.add_argument("--backbone", choices=BACKBONES, default="lenet")
    m.add_argument("--embedding-dim", type=int, default=128)
    m.add_argument("--width", type=float, default=1.0, help="channel width multiplier")
    m.add_argument("--init", default="random",
                   help="'random', 'imagenet' (mobilenetv2-bn only) or a trained model to start "
                        "from: a run directory or release artifact (e.g. a public pretraining run, "
                        "--train-split public)")
    m.add_argument("--allow-nonprivate-init", action="store_true",
                   help="let a DP run start from a model trained WITHOUT DP on private users "
                        "(refused otherwise); every epsilon then says it does not cover the "
                        "initialisation")
    m.add_argument("--trainable", choices=TRAINABLE_CHOICES, default="all",
                   help="norm-only: freeze convolutions; train normalisation layers and the "
                        "embedding layer. features: freeze the embedding layer; train the rest "
                        "(fewer noised parameters where the embedding layer is most of them, as in lenet)")
    o = p.add_argument_group("optimizer (centralized)")
    o.add_argument("--lr", type=float, default=0.05)
    o.add_argument("--momentum", type=float, default=0.9)
    o.add_argument("--weight-decay", type=float, default=0.0)
    o.add_argument("--batch-size", type=int, default=128)
    o.add_argument("--steps", type=int, default=1000)
    o.add_argument("--cosine", action="store_true", help="cosine learning-rate decay to 0")
    f = p.add_argument_group("federated (dp-fedemb, dp-fedavg, dp-ftrl-fedemb)")
    f.add_argument("--rounds", type=int, default=200)
    f.add_argument("--clients-per-round", type=int, default=DEFAULT_CLIENTS_PER_ROUND,
                   help="M, virtual clients per round (default %(default)s)")
    f.add_argument("--users-per-client", type=int, default=DEFAULT_USERS_PER_CLIENT,
                   help="K, users per virtual client (default %(default)s; K > 1 doubles the add/remove "
                        "sensitivity to 2C)")
    f.add_argument("--local-epochs", type=int, default=1)
    f.add_argument("--local-batch-size", type=int, default=8)
    f.add_argument("--max-examples-per-client", type=int, default=None,
                   help="Nmax: cap on examples a virtual client trains on per round")
    f.add_argument("--client-lr", type=float, default=0.05)
    f.add_argument("--client-momentum", type=float, default=0.0)
    f.add_argument("--head-lr-scale", type=float, default=1.0,
                   help="dp-fedemb: head learning rate = client lr x this")
    f.add_argument("--head-first-steps", type=int, default=0,
                   help="dp-fedemb: first R local steps train only the head, later ones only the backbone")
    f.add_argument("--local-head", choices=("global", "local"), default="global",
                   help="dp-fedemb: fresh head over all training identities (global) or over the "
                        "identities present in the virtual client (local)")
    f.add_argument("--head-init", choices=("zeros", "glorot"), default="zeros",
                   help="dp-fedemb: initialisation of the fresh head. zeros (default): the first local "
                        "step trains only the head, so clients need >= 2 local steps; it avoided the "
                        "backbone collapse that glorot (the reference's choice) caused in "
                        "docs/RESULTS_FEDEMB.md")
    f.add_argument("--server-lr", type=float, default=0.5)
    f.add_argument("--server-momentum", type=float, default=0.9, help="--server-optimizer sgd: momentum")
    f.add_argument("--server-optimizer", choices=("sgd", "adam"), default="sgd",
                   help="how the server applies the noised average update: sgd (default; with "
                        "--server-momentum) or adam (FedAdam, Reddi et al. 2021: betas 0.9, 0.99; "
                        "dp-fedemb and dp-fedavg only). Post-processing: epsilon is unchanged")
    f.add_argument("--server-adam-eps", type=float, default=1e-3, metavar="TAU",
                   help="--server-optimizer adam: epsilon (FedAdam's tau; default 1e-3)")
    f.add_argument("--server-lr-schedule", choices=("constant", "cosine"), default="constant",
                   help="server lr by round: constant (default) or cosine (decays to 0 at the end of the "
                        "planned --rounds). Post-processing: epsilon is unchanged")
    f.add_argument("--server-lr-warmup", type=int, default=0, metavar="R",
                   help="linear server lr warmup over the first R rounds (default 0; R < --rounds)")
    f.add_argument("--divergence-norm-ratio", type=float, default=100.0, metavar="R",
                   help="stop (checkpoint intact) when the server model's norm exceeds R x its initial norm: "
                        "noise swamping the updates. A test on the released model only; 0: never (default: "
                        "%(default)s)")
    f.add_argument("--server-ema", type=float, default=0.0, metavar="DECAY",
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
    lo.add_argument("--loss", choices=("softmax", "cosface", "arcface"), default="softmax",
                    help="softmax (default): linear logits + cross-entropy. cosface: s x (cos - m) on the "
                         "target over normalised embedding and class rows. arcface: s x cos(theta + m) on the "
                         "target (threshold fallback past pi - m). With a margin loss, dp-fedemb's "
                         "--head-init zeros imprints each fresh head from the client's class means")
    lo.add_argument("--loss-scale", type=float, default=None, metavar="S",
                    help="s, the scale of the cosine logits (cosface/arcface; default 30)")
    lo.add_argument("--loss-margin", type=float, default=None, metavar="M",
                    help="m (cosface: on the cosine, default 0.35, in [0, 1]; arcface: radians, default "
                         "0.5, in [0, pi/2])")
    q = p.add_argument_group(
        "privacy (federated algorithms; any of these with --algorithm centralized is an error, as "
        "centralized training is not private)")
    q.add_argument("--clip-norm", type=float, default=None,
                   help=f"C, L2 clip norm of each client delta (default {DEFAULT_CLIP_NORM})")
    q.add_argument("--noise-multiplier", type=float, default=None,
                   help="z: noise std on the clipped sum = z x user-level sensitivity")
    q.add_argument("--target-epsilon", type=float, default=None,
                   help="calibrate z for this epsilon (RDP accountant) before training; "
                        "alternative to --noise-multiplier")
    q.add_argument("--delta", type=float, default=None,
                   help="default: 1/(10 N) for N training users; a delta >= 1/N is refused unless "
                        "--allow-large-delta")
    q.add_argument("--allow-large-delta", action="store_true",
                   help="accept a --delta >= 1/N (e.g. to compare with the DP-FedEmb paper's delta = 1/N); "
                        "the run warns")
    q.add_argument("--sampling", choices=("poisson", "fixed", "epoch"), default=None,
                   help="user sampling per round. Default: poisson (Gaussian noise; accounting "
                        "is exact) or epoch (tree noise: each user at most once per epoch). "
                        "fixed = M*K users without replacement (replace-one relation, RDP only)")
    q.add_argument("--tree-restarts", action="store_true",
                   help="dp-ftrl-fedemb: restart the tree every epoch")
    q.add_argument("--adaptive-clip-quantile", type=float, default=None, metavar="GAMMA",
                   help="adaptive clipping (Andrew et al. 2021; dp-fedemb, dp-fedavg): move the clip norm "
                        "toward this quantile of the client update norms, starting from --clip-norm. The "
                        "noise multiplier stays the TOTAL one (epsilon unchanged): part of it noises the "
                        "count of clients below the clip, the rest the update (docs/PRIVACY.md)")
    q.add_argument("--clip-lr", type=float, default=None, metavar="ETA",
                   help="adaptive clipping: geometric learning rate of the clip norm (default 0.2)")
    q.add_argument("--clip-count-stddev", type=float, default=None, metavar="SIGMA_B",
                   help="adaptive clipping: noise std on the count of clients below the clip (default: "
                        "expected clients per round / 20); must exceed z x its sensitivity (1/2 for K = 1, else 1)")
    q.add_argument("--epsilon-budget", type=float, default=None,
                   help="stop before a round would take RDP epsilon above this")
    q.add_argument("--noise-seed", type=int, default=None,
                   help="seed noise and sampling for a reproducible experiment (default: the OS's "
                        "secure source); a seeded run uses the plain noise sampler and says SEEDED")
    add_secure_noise_flag(q, "--noise-seed")
    q.add_argument("--audit-canaries", type=int, default=None, metavar="N",
                   help="AUDIT run (docs/AUDIT.md): add N canary users (>= 20; about 1000 for a useful "
                        "bound), each a fixed random update direction inserted with probability 1/2 and "
                        "sampled like any user, and report the empirical epsilon (one-shot estimate) and a "
                        "95%% lower bound beside the reported one. The accountant counts the canaries as "
                        "users. The model is marked not for release: train the production model as a "
                        "separate run. Gaussian noise with Poisson sampling and a fixed clip only")
    q.add_argument("--release-audit-run", action="store_true",
                   help="with --audit-canaries: mark the audit run as released instead of not for release "
                        "(its epsilon covers the real and the canary users)")
    q.add_argument("--non-private", action="store_true",
                   help="explicitly run without noise (z = 0); every output says 'not private'")
    r = p.add_argument_group("run")
    r.add_argument("--seed", type=int, default=0,
                   help="model initialisation seed (and data order of centralized training); the "
                        "federated clients' randomness comes from the secret run key")
    r.add_argument("--eval-split", choices=("test", "validation"), default="test",
                   help="held-out users and identities to evaluate on: test (default; the numbers "
                        "to report) or validation (to choose hyperparameters without touching test)")
    r.add_argument("--eval-every", type=int, default=200)
    r.add_argument("--eval-max-pairs", type=int, default=None,
                   help="sample this many pairs instead of evaluating all pairs exactly")
    r.add_argument("--resume", nargs="?", const="yes", choices=("yes", "auto"), default=None,
                   help="continue from the run's private checkpoint; an error when there is none. "
                        "'--resume auto' resumes when a checkpoint exists and starts fresh otherwise "
                        "(for restarts by a scheduler). Same flags required, except the "
                        "performance-only ones (--threads, --no-progress, --device, --eval-batch-size, "
                        "--checkpoint-every, --checkpoint-interval)")
    r.add_argument("--overwrite", action="store_true",
                   help="replace a run already in --out, whole (refused otherwise: a non-empty --out needs "
                        "--resume or --overwrite, and a folder that holds no dpemb run is never written into)")
    r.add_argument("--checkpoint-every", type=int, default=0,
                   help="also checkpoint every N rounds (federated) or steps (centralized); 0: only at "
                        "evaluations, on the time interval and on SIGTERM/SIGINT")
    r.add_argument("--checkpoint-interval", type=float, default=300.0, metavar="SECONDS",
                   help="checkpoint when this much time has passed since the last one (default 300; 0: "
                        "off). SIGTERM and SIGINT always checkpoint before the run stops")
    add_device_flag(r)
    r.add_argument("--eval-batch-size", type=int, default=512, help="images per evaluation batch")
    r.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    r.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    r.add_argument("--client-batch", type=int, default=1, metavar="B",
                   help="federated: train B virtual clients at once (vmap over stacked copies; for GPUs, where "
                        "small backbones leave the device idle). Same updates to float rounding; performance only")
    r.add_argument("--bf16", action="store_true",
                   help="federated: local training under bfloat16 autocast (performance only; the clipping, "
                        "noise and epsilon are unchanged, the numbers change by bf16 rounding)")


def configs(args: argparse.Namespace) -> tuple[ModelConfig, OptimConfig, RunConfig]:
    try:
        device_from(args)  # an unknown or missing device is a usage error, before any work
        return (
            ModelConfig(args.backbone, args.embedding_dim, args.width, args.init, args.trainable),
            OptimConfig(args.lr, args.momentum, args.weight_decay, args.batch_size, args.steps, args.cosine,
                        loss=loss_config(args)),
            RunConfig(out=args.out, seed=args.seed, eval_every=args.eval_every, threads=args.threads,
                      eval_max_pairs=args.eval_max_pairs, progress=not args.no_progress,
                      checkpoint_every=args.checkpoint_every, checkpoint_interval_s=args.checkpoint_interval,
                      device=args.device, eval_batch_size=args.eval_batch_size, eval_split=args.eval_split,
                      client_batch=args.client_batch, bf16=args.bf16, overwrite=args.overwrite),
        )
    except ValueError as e:
        raise UsageError(str(e)) from e


def check_out(args: argparse.Namespace) -> None:
    """Refuse a non-empty --out before any work (``training.rundir.check_out_dir``)."""
    from dpemb.training.rundir import OutDirError, check_out_dir

    try:
        check_out_dir(args.out, resume=RESUME[args.resume], overwrite=args.overwrite)
    except OutDirError as e:
        raise UsageError(str(e)) from e


def loss_config(args: argparse.Namespace):
    """--loss, --loss-scale, --loss-margin as a LossConfig (ValueError when invalid)."""
    from dpemb.models.margin import LossConfig

    if args.loss == "softmax" and (args.loss_scale is not None or args.loss_margin is not None):
        raise ValueError("--loss-scale and --loss-margin apply to --loss cosface or arcface only")
    return LossConfig(args.loss, args.loss_scale, args.loss_margin)


def check_privacy_flags(args: argparse.Namespace) -> None:
    """Refuse privacy flags that would be silently ignored (UsageError naming them)."""
    given = [flag for dest, flag in PRIVACY_FLAGS.items() if getattr(args, dest, None) not in (None, False)]
    if args.secure_noise is False:
        given.append("--no-secure-noise")
    if args.algorithm == "centralized":
        if given:
            raise UsageError(
                f"{', '.join(given)} given with --algorithm centralized, which is NOT private: it neither "
                "clips nor adds noise and ignores every privacy flag. For user-level DP choose --algorithm "
                "dp-fedemb (or dp-fedavg, dp-ftrl-fedemb); for a non-private baseline drop the privacy flags"
            )
        return
    if args.secure_noise and args.noise_seed is not None:
        raise UsageError(
            "--secure-noise cannot be combined with --noise-seed: the secure sampler is keyed afresh from the OS on "
            "every draw. A seeded run is a reproducible experiment (plain sampler, reported as SEEDED)"
        )
    if args.release_audit_run and args.audit_canaries is None:
        raise UsageError("--release-audit-run applies to an audit run: give --audit-canaries N too")
    if args.audit_canaries is not None and args.non_private:
        raise UsageError("--audit-canaries with --non-private: an audit compares with the reported epsilon, "
                         "and a non-private run has none")
    if args.secure_noise and args.non_private:
        raise UsageError("--secure-noise with --non-private: a non-private run adds no noise to harden")
    if args.adaptive_clip_quantile is None and (args.clip_lr is not None or args.clip_count_stddev is not None):
        raise UsageError("--clip-lr and --clip-count-stddev apply to adaptive clipping: give "
                         "--adaptive-clip-quantile GAMMA too (or drop them for a fixed --clip-norm)")


def secure_noise(args: argparse.Namespace) -> bool:
    """--secure-noise resolved: on unless --no-secure-noise, --noise-seed or --non-private."""
    if args.secure_noise is not None:
        return bool(args.secure_noise)
    return args.noise_seed is None and not args.non_private


def print_privacy_advice(args: argparse.Namespace, spec) -> None:
    """The small-cohort / weak-guarantee / large-delta advice of `dpemb account`, before training."""
    import sys

    from dpemb.privacy.advice import cohort_warnings
    from dpemb.privacy.events import epsilon_for

    eps = args.target_epsilon
    if eps is None and not spec.nonprivate:
        try:
            eps = epsilon_for(spec, "rdp")
        except ValueError:  # accountant limits: the advice is printed without the epsilon rule
            eps = None
    if eps is not None and args.epsilon_budget is not None:
        eps = min(eps, args.epsilon_budget)
    for w in cohort_warnings(spec, eps):
        print(f"warning: {w}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from dpemb.training.executor import DistributedEnv, exit_worker

    env = DistributedEnv.from_environ()  # under torchrun: rank 0 speaks (cli.main quiets the others)
    if env is not None:
        if args.algorithm == "centralized":
            raise UsageError("centralized training runs in one process; start it without torchrun")
        if env.rank != 0:
            args.no_progress = True
    check_privacy_flags(args)
    check_init_model(args)
    model_cfg, optim_cfg, run_cfg = configs(args)
    check_out(args)
    train, held_out = training_splits(args)
    if args.algorithm == "centralized":
        from dpemb.training.centralized import train_centralized

        print("note: centralized training is NOT private (no clipping, no noise, no epsilon); for "
              "user-level DP use --algorithm dp-fedemb")
        report = train_centralized(train, held_out, model_cfg, optim_cfg, run_cfg, resume=RESUME[args.resume],
                                   provenance=provenance(args))
    else:
        from dpemb.training.federated import train_federated

        caveats = init_caveats(args)  # refuse a non-private init before anything else
        canaries = args.audit_canaries or 0  # audit run: the canaries are users of the population
        fed_cfg, spec = federated_configs(args, train.num_users + canaries)
        if canaries:
            print_audit_setup(args, spec, train.num_users)
        if env is None or env.rank == 0:  # (advice goes to stderr, which worker ranks keep for errors)
            print_privacy_advice(args, spec)
        for c in caveats if args.target_epsilon is not None else []:
            print(f"  [the calibrated epsilon {c}]")
        print_planned_total(args, spec)
        report = train_federated(train, held_out, model_cfg, fed_cfg, spec, run_cfg,
                                 noise_seed=args.noise_seed, epsilon_budget=args.epsilon_budget,
                                 resume=RESUME[args.resume], provenance=provenance(args),
                                 audit_canaries=canaries, audit_release=args.release_audit_run,
                                 audit_score=getattr(args, "audit_score", "final"),
                                 public=public_split(args) if args.public_negatives else None)
        if env is not None and env.rank != 0:  # a worker rank: rank 0 holds the run and prints its summary
            exit_worker()
    print_summary(report)
    return 0


def training_splits(args: argparse.Namespace):
    """(the split to train on, the held-out split to evaluate on) as --data, --train-split
    and --eval-split say; a UsageError when either is empty."""
    splits = load_dataset(args.data).split()
    held_out = splits.eval if args.eval_split == "test" else splits.validation
    if held_out.num_examples == 0:
        flag = "--eval-identity-fraction" if args.eval_split == "test" else "--validation-identity-fraction"
        raise UsageError(
            f"{args.data} has no {args.eval_split} split (held-out identities with their own "
            f"users); make it with `dpemb data make ... {flag} F` (F > 0; the default holds out "
            f"0.1) or re-split it with `dpemb data split {args.data}`"
        )
    split_name = {"private": "train", "public": "public", "all": "train_and_public"}[args.train_split]
    train = getattr(splits, split_name)
    if train.num_examples == 0:
        raise UsageError(f"the {args.train_split} split of {args.data} is empty")
    return train, held_out


def public_split(args: argparse.Namespace):
    """The PUBLIC split of --data (--public-negatives); a UsageError when it is empty."""
    public = load_dataset(args.data).split().public
    if public.num_examples == 0:
        raise UsageError(f"--public-negatives needs public identities, and {args.data} has no public split; "
                         "make one with `dpemb data make ... --public-user-fraction F` (or `dpemb data split`) or drop the flag")
    return public


def print_audit_setup(args: argparse.Namespace, spec, real_users: int) -> None:
    """Refuse an audit the canaries do not support (UsageError); say what the run is."""
    from dpemb.training.audit_run import AuditError, check_audit

    try:
        check_audit(args.audit_canaries, spec, resume=RESUME[args.resume])
    except AuditError as e:
        raise UsageError(str(e)) from e
    print(f"audit run: {args.audit_canaries} canary users join the {real_users} real users; the accountant "
          f"counts {spec.population} users (sampling rate q = {spec.sampling_rate:.4g}). "
          + ("Released by choice (--release-audit-run)." if args.release_audit_run else
             "Not for release: train the production model as a separate run without --audit-canaries."))


def provenance(args: argparse.Namespace):
    from dpemb.training.provenance import Provenance

    return Provenance(dataset=args.data, train_split=args.train_split,
                      allow_nonprivate_init=args.allow_nonprivate_init)


def print_planned_total(args: argparse.Namespace, spec) -> None:
    """For a DP run from a DP init that trained on these users: the total epsilon (RDP) of
    both trainings once this run has spent its planned rounds."""
    if spec.nonprivate or args.init in ("random", "imagenet"):
        return
    from dpemb.privacy.accounting import compute_epsilon
    from dpemb.privacy.events import training_event
    from dpemb.training.artifact import init_total
    from dpemb.training.config import to_dict
    from dpemb.training.modelinit import read_init

    _, _, _, init, init_privacy = read_init(args.init)
    eps = compute_epsilon(training_event(spec), spec.resolved_delta, "rdp", relation=spec.relation)
    total = init_total({"spec": to_dict(spec), "rounds_composed": spec.rounds, "epsilon_rdp": float(eps)},
                       init, init_privacy)
    if total is not None:
        print(f"after {spec.rounds} rounds, {total['statement']}")


def check_init_model(args: argparse.Namespace) -> None:
    """--init names a release artifact or a run directory: a checkpoint (private training
    state) or anything else is a UsageError naming the fix."""
    if args.init in ("random", "imagenet"):
        return
    from dpemb.training.artifact import ArtifactError, resolve_model

    try:
        resolve_model(args.init)
    except ArtifactError as e:
        raise UsageError(f"--init: {e}") from e


def init_caveats(args: argparse.Namespace) -> list[str]:
    """A DP run from an init that saw private users without DP: refused (UsageError)
    unless --allow-nonprivate-init; returns what every epsilon must then say."""
    if args.non_private or args.init in ("random", "imagenet"):
        return []
    from dpemb.training.modelinit import read_init
    from dpemb.training.provenance import InitProvenanceError, check_init

    try:
        return check_init(read_init(args.init)[3], private_run=True, init_name=args.init,
                          allow_nonprivate_init=args.allow_nonprivate_init)
    except InitProvenanceError as e:
        raise UsageError(str(e)) from e


def check_cohort(clients_per_round: int, users_per_client: int, num_users: int) -> None:
    """A round must not ask for more users than the population holds (M K <= N): a usage
    error that names the defaults and suggests a K that fits."""
    m, k = clients_per_round, users_per_client
    if m >= 1 and k >= 1 and num_users >= 1 and m * k > num_users:
        fit = max(1, num_users // (2 * m))
        raise UsageError(
            f"{m} virtual clients of {k} users per round need {m * k} users, but the population (the "
            f"training users, plus any audit canaries) has {num_users}. The defaults (--clients-per-round "
            f"{DEFAULT_CLIENTS_PER_ROUND} --users-per-client {DEFAULT_USERS_PER_CLIENT}) suit populations of a "
            f"few hundred users or more; here try --users-per-client {fit} (about half the users per round), or fewer --clients-per-round")


def federated_configs(args: argparse.Namespace, num_users: int):
    from dataclasses import replace

    from dpemb.algorithms.config import FederatedConfig
    from dpemb.privacy.accounting import PrivacySpec, calibrated_spec, check_epsilon_budget, describe_epsilon

    given = [x is not None for x in (args.noise_multiplier, args.target_epsilon)] + [args.non_private]
    if sum(given) != 1:
        raise UsageError(
            "give exactly one of --noise-multiplier, --target-epsilon or --non-private"
        )
    check_cohort(args.clients_per_round, args.users_per_client, num_users)
    try:
        fed_cfg = FederatedConfig(
            algorithm=args.algorithm, local_epochs=args.local_epochs,
            local_batch_size=args.local_batch_size, max_examples_per_client=args.max_examples_per_client,
            client_lr=args.client_lr, client_momentum=args.client_momentum,
            head_lr_scale=args.head_lr_scale, head_first_steps=args.head_first_steps,
            local_head=args.local_head, head_init=args.head_init, server_lr=args.server_lr, server_momentum=args.server_momentum,
            server_optimizer=args.server_optimizer, server_adam_eps=args.server_adam_eps,
            server_lr_schedule=args.server_lr_schedule, server_lr_warmup=args.server_lr_warmup,
            server_ema=args.server_ema, divergence_norm_ratio=args.divergence_norm_ratio, efficient_tree=not args.plain_tree, loss=loss_config(args),
            public_negatives=args.public_negatives,
        )
        fields = dict(
            population=num_users, clients_per_round=args.clients_per_round,
            users_per_client=args.users_per_client,
            clip_norm=DEFAULT_CLIP_NORM if args.clip_norm is None else args.clip_norm,
            rounds=args.rounds, delta=args.delta,
            sampling=args.sampling, mechanism="tree" if args.algorithm == "dp-ftrl-fedemb" else "gaussian",
            nonprivate=args.non_private, tree_restarts=args.tree_restarts,
            allow_large_delta=args.allow_large_delta, secure_noise=secure_noise(args),
        )
        from dpemb.algorithms.server import check_server_schedule

        check_server_schedule(fed_cfg, args.rounds)  # --server-lr-warmup < --rounds
        if args.target_epsilon is None:
            spec = PrivacySpec(noise_multiplier=0.0 if args.non_private else args.noise_multiplier, **fields)
        else:
            spec = calibrated_spec(args.target_epsilon, "rdp", **fields)
            z = spec.noise_multiplier
            print(f"calibrated noise multiplier z = {z:.4f} for "
                  + describe_epsilon(args.target_epsilon, accountant="rdp", delta=spec.resolved_delta,
                                     unit=spec.unit, relation=spec.relation))
        if args.adaptive_clip_quantile is not None:  # after calibration: epsilon depends on the total z only
            from dpemb.privacy.adaptive_clipping import DEFAULT_LEARNING_RATE, AdaptiveClipping
            from dpemb.privacy.statements import describe_adaptive_clipping

            spec = replace(spec, adaptive_clipping=AdaptiveClipping(
                args.adaptive_clip_quantile, DEFAULT_LEARNING_RATE if args.clip_lr is None else args.clip_lr,
                args.clip_count_stddev))
            print(describe_adaptive_clipping(spec))
    except ValueError as e:
        raise UsageError(str(e)) from e
    try:
        check_epsilon_budget(args.epsilon_budget, spec)
    except ValueError as e:
        raise UsageError(f"--epsilon-budget {args.epsilon_budget}: {e}") from e
    return fed_cfg, spec


def print_summary(report: dict) -> None:
    init, final = report.get("initial") or {}, report["final"]
    print(f"run directory: {report['run_dir']}")
    priv = report["privacy"]
    if isinstance(priv, str):
        print(f"privacy: {priv}")
    elif "statement" in priv:
        print(f"privacy: {priv['statement']}")
    else:
        for a in ("rdp", "pld"):
            print(f"privacy: {priv[f'statement_{a}']}")
        if isinstance(priv.get("total_with_init"), dict):
            print(f"privacy: {priv['total_with_init']['statement']}")
        for ex in priv.get("extrapolated", []):
            print(f"extrapolated: {ex['statement']}")
        if priv.get("noise_seeded"):
            print("note: noise and sampling were SEEDED (reproducible experiment, not for release)")
        from dpemb.privacy.noise import describe_sampler

        spec = priv.get("spec") or {}
        print(priv.get("noise_sampler")
              or describe_sampler(bool(spec.get("secure_noise")), bool(priv.get("noise_seeded"))))
    if isinstance(priv, dict) and isinstance(priv.get("adaptive_clipping"), dict):
        a = priv["adaptive_clipping"]
        print(f"adaptive clipping: target quantile {a['target_quantile']:g}, clip norm "
              f"{a['initial_clip_norm']:.4g} -> {fmt(a.get('final_clip_norm'))}"
              + ("" if a.get("count_noised", True) else " (count not noised: non-private run)"))
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

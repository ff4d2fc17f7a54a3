"""`dpemb audit`: an AUDIT run with canary users; the empirical epsilon beside the reported one.

Every flag of `dpemb train` (``dpemb.cli.train.add_train_arguments``). White-box canaries
by default, ``--black-box`` audits the released model only (``dpemb.training.audit_run``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dpemb.cli.common import DefaultsHelpFormatter, UsageError, device_from, guarded, usage_errors

DEFAULT_CANARIES = 1000
AUDITABLE = ("dp-fedemb", "dp-fedavg")

SEPARATE_RUN = (
    "note: this is an AUDIT run, a separate training run with the same settings as the production run plus "
    "{n} canary users; its model is not the production model{release}. The reported epsilon of the audit run "
    "counts the canaries as users."
)


def register(sub: argparse._SubParsersAction) -> None:
    from dpemb.cli.train import add_train_arguments

    p = sub.add_parser(
        "audit", formatter_class=DefaultsHelpFormatter,
        help="audit the epsilon: train once with canary users and compare",
        description=(
            "Train an AUDIT run: the same flags as `dpemb train` (federated algorithms dp-fedemb and dp-fedavg "
            "with Gaussian noise and Poisson sampling), plus N canary users, each inserted with probability 1/2. "
            "Prints the reported epsilon beside the empirical estimate (one-shot, Andrew et al. 2023) and two "
            "95% lower bounds (one run: (eps, delta), Steinke et al. 2023; f-DP, Mahloujifar et al. 2024), "
            "and writes a plot. A lower bound above the reported epsilon is evidence of a bug; one below it "
            "proves nothing. The audit run is a separate run, not the production model (docs/AUDIT.md)."
        ),
    )
    add_train_arguments(p)
    a = p.add_argument_group("audit")
    a.add_argument("--canaries", dest="audit_canaries", type=int, default=argparse.SUPPRESS, metavar="N",
                   help=f"canary users (same as --audit-canaries; default {DEFAULT_CANARIES}; >= 20). The f-DP "
                        "bound catches a factor 2 in the noise from about 10000 white-box canaries")
    a.add_argument("--black-box", action="store_true",
                   help="canary users holding crafted images (a unique identity each) instead of update "
                        "directions; scored from the released model alone. Expect weak bounds")
    a.add_argument("--canary-images", type=int, default=None, metavar="K",
                   help="--black-box: images per canary user (default 4)")
    a.add_argument("--audit-score", choices=("final", "rounds"), default="final",
                   help="white-box score of a canary: cosine with the final model's move (default), or its "
                        "cosines with every round's released update, aggregated (docs/AUDIT.md)")
    a.add_argument("--audit-plot", default=None, metavar="PNG",
                   help="where to write the plot of empirical vs reported epsilon (default: OUT/audit.png)")
    # an audit trains a federated algorithm: dp-fedemb unless --algorithm (or --config) says otherwise
    p.set_defaults(func=guarded(run, "audit"), default_settings={"algorithm": "dp-fedemb"})
    next(a for a in p._actions if a.dest == "algorithm").config_default = "dp-fedemb"


def run(args: argparse.Namespace) -> int:
    from dpemb.cli.train import config_from_args
    from dpemb.cli.train import run as train_run

    def check_algorithm(algorithm: str) -> None:
        if algorithm not in AUDITABLE:
            raise UsageError(f"dpemb audit runs the federated algorithms with Gaussian noise and Poisson sampling "
                             f"({', '.join(AUDITABLE)}); got --algorithm {algorithm}")

    check_algorithm(vars(args).get("algorithm", "dp-fedemb"))  # before the flags are read against it
    config, _ = config_from_args(args)
    check_algorithm(config.algorithm)
    if config.privacy.audit_canaries is None:
        args.audit_canaries = DEFAULT_CANARIES
        config, _ = config_from_args(args)
    if args.canary_images is not None and not args.black_box:
        raise UsageError("--canary-images applies to --black-box")
    request = config.privacy
    print(SEPARATE_RUN.format(n=request.audit_canaries,
                              release=" and is marked not for release" if not request.release_audit_run
                              else ", released by choice (--release-audit-run)"))
    if args.black_box:
        run_black_box(args)
    else:
        status = train_run(args)
        if status:
            return status
    report = json.loads((Path(args.out) / "report.json").read_text())
    audit = report["privacy"]["audit"]
    print_audit(audit)
    from dpemb.training.audit_plot import AuditPoint, plot_audit

    plot = Path(args.audit_plot) if args.audit_plot else Path(args.out) / "audit.png"
    kind = "black-box" if args.black_box else "white-box"
    plot_audit([AuditPoint.from_record(audit, f"{config.algorithm}, {kind}, {audit['canaries']} canaries")], plot,
               title=f"Audit of {config.algorithm}: empirical vs reported epsilon (user level)")
    print(f"wrote {plot}")
    return 0


def run_black_box(args: argparse.Namespace) -> None:
    """Train with crafted canary users and audit the released model (``black_box_audit``)."""
    from dpemb.cli.train import RESUME, config_from_args, print_summary
    from dpemb.training import runner
    from dpemb.training.audit_run import (DEFAULT_IMAGES_PER_USER, AuditError, black_box_audit,
                                          check_audit)
    from dpemb.training.run_config import ConfigError

    config, perf = config_from_args(args)
    request = config.privacy
    with usage_errors(ConfigError):
        run = runner.prepare(config, args.out, data=None, perf=perf, resume=RESUME[args.resume],
                             overwrite=args.overwrite)
        train, held_out, n = run.train, run.held_out, request.audit_canaries
        spec = runner.resolve_privacy(config, train.num_users + n)
    with usage_errors(AuditError):
        check_audit(n, spec, resume=RESUME[args.resume])
    print(f"black-box audit run: {n} canary users with crafted images join the {train.num_users} real users; the "
          f"accountant counts {spec.population} users (sampling rate q = {spec.sampling_rate:.4g})")
    runner.print_privacy_advice(request, spec)
    k = args.canary_images if args.canary_images is not None else DEFAULT_IMAGES_PER_USER
    with usage_errors(AuditError):
        report = black_box_audit(train, held_out, config.model, config.federated, spec, run.run_cfg, canaries=n,
                                 images_per_user=k, noise_seed=request.noise_seed, provenance=run.provenance,
                                 release=request.release_audit_run,
                                 device=device_from(argparse.Namespace(device=perf.device)))
    print_summary(report, args.out)


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def print_audit(a: dict) -> None:
    """The audit, one number per line, each with what it is."""
    pct = f"{100 * a['confidence']:g}%"
    ci = a.get("epsilon_estimate_ci")
    from dpemb.privacy.relations import describe_relation

    rel = describe_relation(a.get("relation", "add-remove"), a.get("unit", "user"))
    lines = [
        f"audit ({a['kind']}; {a['canaries']} canaries, each inserted with probability 1/2):",
        f"  reported epsilon            {_f(a['epsilon_reported'])}  ({a['epsilon_reported_accountant'].upper()} "
        f"accountant, delta = {a['delta']:.3g}, {a.get('unit', 'user')}-level, {rel}"
        + (f"; PLD {_f(a['epsilon_pld'])}" if a.get("epsilon_pld") is not None else "") + ")",
        f"  empirical estimate          {_f(a['epsilon_estimate'])}"
        + (f"  [{pct} bootstrap {_f(ci[0])} - {_f(ci[1])}]" if ci else "")
        + "  (one-shot, Andrew et al. 2023; an estimate, not a bound)",
        f"  lower bound (eps, delta)    {_f(a['epsilon_lower_bound'])}  ({pct} confidence; Steinke, Nasr, "
        f"Jagielski 2023: {a['correct_guesses']} of {a['guesses']} guesses right)"
        if a.get("epsilon_lower_bound") is not None else "  lower bound (eps, delta)    n/a",
    ]
    if a.get("mu_lower_bound") is not None:
        lines.append(f"  lower bound f-DP            {_f(a['epsilon_lower_bound_fdp'])}  (mu >= "
                     f"{a['mu_lower_bound']:.3f} at {pct}; Mahloujifar, Melis, Chaudhuri 2024: "
                     f"{a['fdp_correct_guesses']} of {a['fdp_guesses']} guesses right)")
    if a.get("accounted_curve") is not None:
        lines.append(f"  accounted trade-off curve   {'REJECTED' if a['accounted_curve_rejected'] else 'not rejected'}"
                     f" at {pct}  ({a['accounted_curve']})")
    lines.append("  verdict: " + ("WARNING: the audit contradicts the reported epsilon (docs/AUDIT.md)"
                                  if a.get("warning") else
                                  "no contradiction found (a lower bound below the reported epsilon proves "
                                  "nothing: the audit can show a bug, never correctness)"))
    print("\n".join(lines))

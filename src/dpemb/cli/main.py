"""The `dpemb` command: argparse subcommands, each defined in its own module.

Every command module exposes ``register(subparsers)`` which adds its parser(s) and
sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and returning an
exit status). The CLI turns flags into config dataclasses and calls the library; it
holds no logic a library user would need.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# One module per command group; order is the order shown in --help.
COMMAND_MODULES = [
    "dpemb.cli.data",
    "dpemb.cli.train",  # train and recipes
    "dpemb.cli.evaluate",
    "dpemb.cli.embed",
    "dpemb.cli.export",
    "dpemb.cli.account",
    "dpemb.cli.transfer",  # features, transfer and predict
    "dpemb.cli.audit",
]


from dpemb.cli.common import UsageError  # noqa: E402  (re-exported: callers import it from here)
from dpemb.training.job_env import DistributedEnv  # noqa: E402  (no torch import)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpemb",
        description=(
            "Train image embedding models with user-level differential privacy "
            "(DP-FedEmb and baselines), evaluate them by exact Recall@FAR, account "
            "for privacy, and train DP classifiers on image features."
        ),
    )
    from dpemb import __version__

    parser.add_argument("--version", action="version", version=f"dpemb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


#: the commands that split their work across the processes of a torchrun job
DISTRIBUTED_COMMANDS = ("train", "eval", "embed", "features")


def main(argv: list[str] | None = None) -> int:
    from dpemb.privacy.dependency import AccountantMissingError

    try:
        return _main(argv)
    except AccountantMissingError as e:  # an install problem: one line naming the fix, not a traceback
        command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), "")
        print(f"dpemb {command}: error: {e}".replace("dpemb : ", "dpemb: "), file=sys.stderr)
        return 1


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    job = DistributedEnv.from_environ()  # None outside torchrun
    if job is not None:
        if args.command not in DISTRIBUTED_COMMANDS:
            parser.exit(2, f"dpemb {args.command}: error: runs in one process; start it without torchrun "
                           f"(under torchrun: {', '.join(DISTRIBUTED_COMMANDS)})\n")
        if job.rank != 0:
            from dpemb.training.shards import quiet_worker

            quiet_worker()  # rank 0 speaks for the job
    try:
        return int(args.func(args) or 0)
    except UsageError as e:
        parser.exit(2, f"dpemb {args.command}: error: {e}\n")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`dpemb ... | head`): stop quietly, as Unix tools do
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
